"""Grade a class: every submission in parallel workers, each notebook's grades recorded the
moment it is graded, an interrupted batch resumed where it stopped, then CSV and report.

Each graded notebook leaves grader_results/<student>/<unit>.json (written last, after the
gradebook and the feedback): a later run skips every notebook whose stored result matches the
submitted file's checksum, unless asked to grade again. A notebook the machine failed to run
(its result's `regrade`) got no score, no gradebook entry and no feedback: a later run grades
it again.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import gradebook
from .record import store, stored_result
from .results import NotebookResult
from .settings import Settings
from .submissions import Submission, submissions
from .workers import grade_all


def grade_folder(folder: Path, course_root: Path, settings: Settings, shard: tuple[int, int] | None = None,
                 regrade: bool = False, progress: bool = True) -> tuple[list[NotebookResult], int]:
    """Grade every submission under `folder`; returns the results (stored ones included) and
    how many were graded now."""
    from .grade import checksum

    course_root = Path(course_root).resolve()
    db_url = settings.gradebook_url(course_root)
    items = submissions(Path(folder), shard)
    results: dict[Submission, NotebookResult] = {}
    todo = []
    for item in items:
        stored = stored_result(course_root, item)
        if not regrade and stored.exists():
            previous = NotebookResult.from_json(json.loads(stored.read_text(encoding="utf-8")))
            if previous.checksum and previous.checksum == checksum(item.path) and not previous.regrade:
                results[item] = previous
                continue
        todo.append(item)
    gradebook.register_units(sorted({i.unit for i in todo if i.unit}), course_root, db_url)

    def done(item: Submission, result: NotebookResult) -> None:
        store(course_root, item, result)
        results[item] = result

    grade_all(todo, settings.limits, settings.workers, course_root, db_url, done, progress)
    gradebook.export_csv(db_url, course_root / "grades.csv")
    return [results[item] for item in items if item in results], len(todo)


def table(results: list[NotebookResult]) -> str:
    """A plain-text table: one row per student, one column per unit ("regrade" where the machine
    failed to run the notebook), then the problems found, then how many are left to grade again."""
    units = sorted({r.unit or "?" for r in results})
    students = sorted({r.student or "?" for r in results})
    by_cell = {(r.student or "?", r.unit or "?"): r for r in results}
    width = max([7] + [len(s) for s in students])
    lines = ["student".ljust(width) + "".join(f"  {u[:16]:>16}" for u in units)]
    notes = []
    for student in students:
        row = student.ljust(width)
        for unit in units:
            r = by_cell.get((student, unit))
            row += f"  {('-' if not r else 'regrade' if r.regrade else f'{r.score:g}/{r.max_score:g}'):>16}"
            if r and r.problems():
                notes.append(f"{student} / {unit}: " + "; ".join(r.problems()))
        lines.append(row)
    left = sum(1 for r in results if r.regrade)
    if left:
        notes.append(f"{left} notebook(s) not graded because the machine failed (no score, nothing in the "
                     "gradebook): the same command grades them again")
    return "\n".join(lines + ([""] + notes if notes else []))
