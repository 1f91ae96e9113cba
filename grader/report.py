"""A picture of how a class did: the share of students passing each exercise, per unit."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any


def pass_rates(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{unit: {grade_id: share of graded notebooks that passed it}}."""
    passed: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        for exercise in result["exercises"]:
            passed[result["unit"]][exercise["grade_id"]].append(exercise["passed"])
    return {unit: {gid: sum(v) / len(v) for gid, v in ex.items()} for unit, ex in sorted(passed.items())}


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = pass_rates(results)
    labels = [f"{unit[:2]} {gid.split('_', 1)[1].removesuffix('_check')}" for unit, ex in rates.items() for gid in ex]
    values = [rate for ex in rates.values() for rate in ex.values()]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(values) + 1.2))
    ax.barh(range(len(values)), [100 * v for v in values], color="tab:blue")
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("students passing (%)")
    ax.set_title(f"Class report: {len({r['student'] for r in results})} students")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
