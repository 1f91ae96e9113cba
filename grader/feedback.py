"""Feedback for each student: nbgrader's HTML report made from the autograded copy."""
from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from . import course, i18n
from .i18n import say
from .results import NotebookResult


class Feedback:
    """Writes feedback/<student>/<unit>/<unit>.html with nbgrader's generate_feedback, whose
    shipped configuration strips hidden tests (the grader's copies hold none anyway)."""

    def __init__(self, course_root: Path, db_url: str):
        self.course_root = course_root
        self.api = course.nbgrader_api(course_root, db_url=db_url)

    def write(self, result: NotebookResult, autograded: Path) -> None:
        if not (result.unit and result.student):
            return
        if result.error:  # nothing ran: the released notebook, headed by the reason
            _rejected_copy(result, autograded)
        outcome = self.api.generate_feedback(result.unit, result.student, force=True)
        if not outcome["success"]:
            lines = outcome["log"].strip().splitlines() or ["(no log)"]
            result.flags.append("no feedback report: " + lines[-1][:200])


def _rejected_copy(result: NotebookResult, path: Path) -> None:
    """The released notebook with the reason it could not be graded on top, as the autograded copy."""
    nb = copy.deepcopy(nbformat.read(course.release_notebook(result.unit, result.language), as_version=4))
    with i18n.language(i18n.for_edition(result.language)):
        reason = say("**This notebook could not be graded:** {error}\n\nEvery exercise scores 0.", error=result.error)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(reason))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
