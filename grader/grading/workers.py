"""Grade many notebooks at once, each in a worker process of its own, with a progress bar.

A worker grades a notebook (its learner code runs in a sandbox of its own below the worker),
records the scores in the gradebook, one worker at a time, and writes the feedback report;
then the result comes back to the parent. Everything a notebook costs is thus spread over the
workers: none of it waits in line in the parent. Workers keep their imports from one notebook
to the next; each notebook still gets a fresh sandbox and kernel.
"""
from __future__ import annotations

import functools
import multiprocessing
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from .. import course
from . import gradebook
from .feedback import Feedback
from .results import NotebookResult
from .settings import Limits


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one unit, laid out as nbgrader's submitted/<student>/<unit>/<unit>.ipynb."""
    student: str
    unit: str | None                  # the folder's unit; None when the folder is not a unit of the course
    path: Path
    rejection: str | None = None      # why it is not graded at all (found while listing the class)
    notes: tuple[str, ...] = ()       # what the listing noticed, for the result's flags

    def autograded(self, course_root: Path) -> Path:
        return (course_root / "autograded" / self.student / (self.unit or "unknown")
                / f"{self.unit or self.path.stem}.ipynb")

    def exchange_files(self) -> dict[str, bytes]:
        """What `nbgrader collect` put beside the notebook: the submission's time (the gradebook
        keeps it, for lateness) and its secret (release_feedback names the learner's feedback
        with it). Read as files learner code never touched should be: small regular files only."""
        from .sandbox import read_scratch

        found = {name: read_scratch(self.path.parent / name, 4096) for name in EXCHANGE_FILES}
        return {name: data for name, data in found.items() if data is not None}

    def timestamp(self):
        """When the learner submitted, as nbgrader's exchange recorded it; None without one."""
        from nbgrader.utils import parse_utc

        text = self.exchange_files().get("timestamp.txt")
        try:
            return parse_utc(text.decode().strip()) if text else None
        except (ValueError, OverflowError, UnicodeDecodeError):
            return None


EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


def submissions(folder: Path, shard: tuple[int, int] | None = None) -> list[Submission]:
    """One submission per student and unit folder under folder/<student>/<unit>/; with shard
    (k, n), only the students whose name hashes to k of n, so n machines can share a class
    without overlap."""
    folder = Path(folder)
    units = set(course.units())
    found = []
    for student in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if shard and zlib.crc32(student.name.encode()) % shard[1] != shard[0] - 1:
            continue
        for unit_dir in sorted(p for p in student.iterdir() if p.is_dir() and not p.name.startswith(".")):
            unit = unit_dir.name if unit_dir.name in units else None
            notebooks = sorted(unit_dir.glob("*.ipynb"))
            if notebooks:
                found.append(_one_per_unit(student.name, unit, unit_dir, notebooks, folder))
    return found


def _one_per_unit(student: str, unit: str | None, unit_dir: Path, notebooks: list[Path], top: Path) -> Submission:
    """The notebook that stands for a student's unit: <unit>.ipynb, or the only notebook there.
    The gradebook holds one grade per student and unit, so extra notebooks are named, not graded."""
    named = unit_dir / f"{unit}.ipynb"
    path = named if named in notebooks else notebooks[0]
    others = [p.name for p in notebooks if p != path]
    notes = (f"also in the folder, not graded: {', '.join(others)}",) if others else ()
    rejection = None
    if unit is None:
        rejection = (f"the folder {unit_dir.name!r} is not a unit of this course "
                     f"({', '.join(course.units())}): nbgrader's layout is submitted/<student>/<unit>/")
    elif any(p.is_symlink() for p in (unit_dir.parent, unit_dir, path)) or \
            not path.resolve().is_relative_to(top.resolve()):
        rejection = f"{path.relative_to(top)} is a symbolic link or lies in one: links are not graded"
    elif path != named and others:
        rejection = (f"{len(notebooks)} notebooks and none named {unit}.ipynb: cannot tell which one to grade; "
                     f"keep one, named {unit}.ipynb")
    elif path != named:
        notes = (f"the notebook is named {path.name}, not {unit}.ipynb; it was graded as {unit}",)
    return Submission(student, unit, path, rejection, notes)


def _grade_one(submission: Submission, limits: Limits, course_root: Path, db_url: str) -> tuple[NotebookResult, bool]:
    """Grade one submission, then record it and write its feedback; the result, and whether
    it was recorded (if not, the parent records it)."""
    from .grade import blank_result, grade_notebook

    if submission.rejection:
        result = blank_result(submission.path, submission.unit, submission.student)
        result.error = submission.rejection
    else:
        try:
            result = grade_notebook(submission.path, submission.unit, limits, student=submission.student,
                                    autograded=submission.autograded(course_root))
        except Exception as exc:  # a grader fault must not cost the other students their grades
            result = blank_result(submission.path, submission.unit, submission.student)
            result.error = f"the grader failed on this notebook: {type(exc).__name__}: {exc}"
    result.flags += submission.notes
    try:
        record(submission, result, course_root, db_url)
    except Exception:   # e.g. the database out of reach for a moment: the parent tries again
        return result, False
    return result, True


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


def grade_all(items: list[Submission], limits: Limits, workers: int, course_root: Path, db_url: str,
              done: Callable[[Submission, NotebookResult], None], progress: bool = True) -> None:
    """Grade and record every item in `workers` processes; `done` is called here, in this
    process, as soon as each result arrives. A worker that dies takes only its own notebook's
    grade with it (after one retry): that notebook is left unscored, to grade again. Later units
    go first: they run longest (unit 08 trains), and a long notebook left for the end would be
    graded while the other workers sit idle."""
    order = {unit: k for k, unit in enumerate(course.units())}
    pending = sorted(items, key=lambda item: -order.get(item.unit, -1))
    tries = {item: 0 for item in items}
    bar = tqdm(total=len(items), unit="notebook", desc="grading", disable=not progress)
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch's threads
    while pending:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(pending))), mp_context=context) as pool:
            futures = {pool.submit(_grade_one, item, limits, course_root, db_url): item for item in pending}
            pending = []
            while futures:
                finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in finished:
                    item = futures.pop(future)
                    try:
                        result, recorded = future.result()
                    except BrokenProcessPool:
                        tries[item] += 1
                        if tries[item] < 2:
                            pending.append(item)
                            continue
                        from .grade import blank_result

                        result, recorded = blank_result(item.path, item.unit, item.student), False
                        result.regrade = "not graded: the grader's worker process died on this notebook twice; " \
                                         "grade it again"
                    if not recorded:
                        record(item, result, course_root, db_url)
                    done(item, result)
                    bar.update(1)
    bar.close()
