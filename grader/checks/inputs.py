"""Inputs the hidden checks share (instructor side): the course's fixed example tensors and
seeded builders of inputs and parameters, so each hidden region says only what it checks.

No reference answer lives here: nothing in this module computes what an exercise asks for
(tests/test_release.py keeps it so).
"""
from __future__ import annotations

import math

import torch

# "Your journey starts with one step": six tokens, each a made-up 3-d embedding (units 01-06).
JOURNEY_WORDS = ("Your", "journey", "starts", "with", "one", "step")
JOURNEY = torch.tensor([[0.43, 0.15, 0.89],   # Your
                        [0.55, 0.87, 0.66],   # journey
                        [0.57, 0.85, 0.64],   # starts
                        [0.22, 0.58, 0.33],   # with
                        [0.77, 0.25, 0.10],   # one
                        [0.05, 0.80, 0.55]])  # step

QKV = ("W_query", "W_key", "W_value")


def journey() -> torch.Tensor:
    """A fresh copy of JOURNEY (6, 3), which a check may hand to learner code."""
    return JOURNEY.clone()


def linear_state(g: torch.Generator, names: tuple[str, ...], d_in: int, d_out: int, bias: bool,
                 bias_size: float = 0.3) -> dict[str, torch.Tensor]:
    """Seeded parameters for the nn.Linear(d_in, d_out) layers `names`, in order: each weight
    (d_out, d_in) of size about 1/sqrt(d_in), then its bias (d_out,) of size about `bias_size`."""
    state = {}
    for name in names:
        state[f"{name}.weight"] = torch.randn(d_out, d_in, generator=g) / math.sqrt(d_in)
        if bias:
            state[f"{name}.bias"] = torch.randn(d_out, generator=g) * bias_size
    return state
