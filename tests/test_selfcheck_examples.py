"""The self-checks' stored examples separate what learners confuse: taken together, the examples
of each exercise give every pair of sizes the contract names different values (a slip that
swaps two equal sizes would otherwise pass), and a batch of more than one where batches occur."""
from __future__ import annotations

import collections
import itertools

import pytest
import torch

from grader.checks.wire import from_json
from grader.fixtures import entries

# The sizes an exercise's arguments name, as keywords or as fields of a model's config.
SIZE_NAMES = {"d", "d_in", "d_out", "d_k", "d_q", "d_kv", "d_v", "num_heads", "num_kv_heads", "context_length",
              "emb_dim", "num_layers", "vocab_size", "block_size", "num_tokens"}
INPUTS = ("x", "inputs", "x_q", "q", "scores")   # (..., T, d): the tokens, and their width where it is the input


def sizes(case: dict) -> dict[str, int]:
    """The named sizes of one stored example, head_dim derived, T and B read off its input."""
    kwargs = from_json(case["kwargs"])
    found: dict[str, int] = {}
    for value in [kwargs, *(v for v in kwargs.values() if isinstance(v, dict))]:
        found |= {k: v for k, v in value.items() if k in SIZE_NAMES and type(v) is int}
    width = found.get("d_out", found.get("emb_dim"))
    if width and found.get("num_heads"):
        found["head_dim"] = width // found["num_heads"]
    tokens = next((kwargs[k] for k in INPUTS if isinstance(kwargs.get(k), torch.Tensor) and kwargs[k].dim() >= 2), None)
    if tokens is not None:
        found["T"] = tokens.shape[-2]
        if tokens.dim() >= 3:
            found["B"] = tokens.shape[0]
    return found


def by_exercise() -> dict[str, list[dict[str, int]]]:
    found: dict[str, list[dict[str, int]]] = collections.defaultdict(list)
    for name, entry in entries("en").items():
        found[name.split(" #")[0]] += [sizes(case) for case in entry["cases"]]
    return found


def alike(examples: list[dict[str, int]]) -> list[str]:
    """The pairs of named sizes equal in every example that has both (the batch aside)."""
    found = []
    for a, b in itertools.combinations(sorted(set().union(*examples) - {"B"}), 2):
        both = [e for e in examples if a in e and b in e]
        if both and all(e[a] == e[b] for e in both):
            found.append(f"{a} = {b} = {both[0][a]}")
    return found


@pytest.mark.parametrize("exercise", sorted(by_exercise()))
def test_the_examples_give_each_pair_of_sizes_different_values(exercise):
    examples = by_exercise()[exercise]
    assert alike(examples) == [], f"{exercise}: in every example {', '.join(alike(examples))}"
    batches = [e["B"] for e in examples if "B" in e]
    assert not batches or max(batches) > 1, f"{exercise}: every batched example has a batch of 1"


def test_equal_sizes_are_found():
    """What the learner's trial met: MultiHeadAttention's examples all had head_dim = num_heads."""
    case = {"kwargs": {"d_in": 3, "d_out": 4, "num_heads": 2, "x": torch.zeros(2, 6, 3)}, "args": {"__tuple__": []}}
    assert sizes(case) == {"d_in": 3, "d_out": 4, "num_heads": 2, "head_dim": 2, "T": 6, "B": 2}
    assert alike([sizes(case)]) == ["head_dim = num_heads = 2"]
    assert alike([sizes(case), {"d_in": 3, "d_out": 6, "num_heads": 2, "head_dim": 3, "T": 6}]) == []
