"""Grade many notebooks at once, each in a worker process of its own, with a progress bar.

A worker grades a notebook (its learner code runs in a sandbox of its own below the worker) and
records it (`record`: the gradebook, one worker at a time, and the feedback report); then the
result comes back to the parent. Everything a notebook costs is thus spread over the
workers: none of it waits in line in the parent. Workers keep their imports from one notebook
to the next; each notebook still gets a fresh sandbox and kernel.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from tqdm import tqdm

from .. import course
from .record import record
from .results import NotebookResult
from .settings import Limits
from .submissions import Submission


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


def _warm_up(environ: dict[str, str], umask: int) -> None:
    """A worker's first step: the environment and umask of the process that made the pool, as
    they are now (a worker forks from the forkserver, which keeps those it started with); then
    its kernels' template. Never raises: a pool whose initializer fails loses every notebook,
    and the template is started again, with its errors handled, when the first notebook needs it."""
    from .sandbox import warm_up

    os.environ.clear()
    os.environ.update(environ)
    os.umask(umask)
    try:
        warm_up()
    except Exception:
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# What every worker imports to grade and record a notebook: PyTorch (the grader judges values),
# nbgrader and nbconvert (the gradebook and the feedback report). About 3.5 s of CPU.
WORKER_IMPORTS = ["grader.grading.grade", "grader.checks.spec", "grader.grading.record", "nbgrader.apps"]


def _context():
    """Workers forked from a server process that has done their imports once (multiprocessing's
    forkserver), so a second worker costs no imports of its own; it holds no thread to fork, as a
    process that has run torch would. Where there is no forkserver (Windows), each worker starts afresh."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(WORKER_IMPORTS)
    return context


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
    context = _context()
    while pending:
        # Each worker arrives with its imports done (the forkserver's) and starts its kernels' template first.
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(pending))), mp_context=context,
                                 initializer=_warm_up, initargs=(dict(os.environ), _umask())) as pool:
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
