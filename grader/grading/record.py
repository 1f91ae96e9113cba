"""What a graded notebook leaves behind, the moment it is graded: its scores in the gradebook,
the exchange's files beside its autograded copy, its feedback report, and its result as JSON in
grader_results/<student>/<unit>.json (written last: `python -m grader grade` run again skips a
notebook whose stored result matches the submitted file)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from . import gradebook
from .feedback import Feedback
from .results import NotebookResult
from .submissions import Submission


def record(submission: Submission, result: NotebookResult, course_root: Path, db_url: str) -> None:
    """The scores into the gradebook, then the feedback report made from them; the exchange's
    files go along into autograded/, from where nbgrader's generate_feedback copies them.
    A result to grade again (`regrade`: the machine failed) has no scores: nothing is written."""
    if result.regrade:
        return
    gradebook.record(result, db_url, submission.timestamp())
    autograded = submission.autograded(course_root)
    for name, data in submission.exchange_files().items():
        autograded.parent.mkdir(parents=True, exist_ok=True)
        (autograded.parent / name).write_bytes(data)
    _feedback(course_root, db_url).write(result, autograded)


@functools.cache
def _feedback(course_root: Path, db_url: str) -> Feedback:
    return Feedback(course_root, db_url)


def stored_result(course_root: Path, item: Submission) -> Path:
    """Where the result of a submission is kept between runs."""
    return course_root / "grader_results" / item.student / f"{item.unit or item.path.stem}.json"


def store(course_root: Path, item: Submission, result: NotebookResult) -> None:
    """The result as JSON, written whole or not at all."""
    stored = stored_result(course_root, item)
    stored.parent.mkdir(parents=True, exist_ok=True)
    tmp = stored.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1), encoding="utf-8")
    tmp.replace(stored)
