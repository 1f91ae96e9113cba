"""Shortcuts the tests take through the grader's parts, which the grader itself never needs:
a notebook run in a sandbox of its own, a unit's scores read back from the gradebook."""
from __future__ import annotations

from pathlib import Path

from grader import gradebook, sandbox
from grader.settings import Limits


def execute(notebook, workdir: Path, limits: Limits) -> sandbox.Outcome:
    """Run `notebook` in `workdir` (a fresh folder holding nothing else the learner may see)."""
    with sandbox.Sandbox(workdir, limits) as box:
        return box.run(notebook)


def scores(db_url: str, unit: str) -> dict[str, float]:
    """{student: total score} of one unit, as the gradebook has it."""
    from nbgrader.api import MissingEntry

    with gradebook.opened(db_url) as gb:
        try:
            return {s.student.id: s.score for s in gb.find_assignment(unit).submissions}
        except MissingEntry:
            return {}
