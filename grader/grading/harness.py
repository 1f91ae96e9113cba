"""The learner-side half of a hidden check under `python -m grader grade`.

The grader sends one call per exercise into the notebook's kernel: it runs the spec's `call`
on inputs the grader made and writes back plain data. No oracle and no verdict live here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..checks.spec import attempt, load_call


def run_calls(source: str, name: str, inputs_path: str, outputs_path: str, namespace: dict[str, Any]) -> None:
    """Run `name` (defined by `source`) on every input and save the results after each one,
    so a later hang or crash keeps the earlier results."""
    fn = load_call(source, name, namespace)
    progress = Path(outputs_path).with_suffix(".progress")
    results: list[Any] = []
    for label, args, kwargs in torch.load(inputs_path, weights_only=True):
        progress.write_text(label)
        results.append(attempt(fn, *args, **kwargs))
        torch.save(results, outputs_path)
    progress.write_text("")
