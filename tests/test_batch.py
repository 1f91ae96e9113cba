"""Nothing lost: a batch killed half-way resumes without grading again what was done, gives the
same grades with one worker or two, and grading again keeps Formgrader's manual grades."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from reference import answers, full_marks, points_of, student_notebook

from grader import course, notebook

pytestmark = pytest.mark.system


UNIT = "01_dot_product"


def _class(root: Path) -> dict[str, float]:
    """Four students and the total each must get."""
    wrong = answers(UNIT)
    wrong["u01_dot_product"] = "def dot_product(a, b):\n    return (a * b).sum() + 1"
    full, dot = full_marks(UNIT), points_of(UNIT, "u01_dot_product_check")
    notebooks = {"ann": (student_notebook(UNIT), full), "bob": (student_notebook(UNIT, wrong), full - dot),
                 "cy": (notebook.read(course.release_notebook(UNIT)), 0.0), "dee": (student_notebook(UNIT), full)}
    for student, (nb, _) in notebooks.items():
        path = root / "submitted" / student / UNIT / f"{UNIT}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    return {student: score for student, (_, score) in notebooks.items()}


def _command(root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "grader", "grade", str(root / "submitted"), "--course-dir", str(root),
            "--cell-timeout", "60", *extra]


def _grade(root: Path, *extra: str) -> tuple[dict[str, float], str]:
    out = subprocess.run(_command(root, "--json", *extra), capture_output=True, text=True, timeout=900,
                         cwd=course.ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return {r["student"]: r["score"] for r in json.loads(out.stdout)}, out.stderr


def _stored(root: Path) -> dict[str, float]:
    """When each notebook's stored result was written: a notebook graded again gets a new time."""
    return {p.parent.name: p.stat().st_mtime for p in (root / "grader_results").glob(f"*/{UNIT}.json")}


def test_killed_batch_resumes_and_workers_agree(tmp_path):
    from nbgrader.api import Gradebook

    expected = _class(tmp_path)
    # One worker, killed as soon as its first notebook is recorded.
    proc = subprocess.Popen(_command(tmp_path, "--workers", "1"), cwd=course.ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not _stored(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _stored(tmp_path)
    assert 1 <= len(before) < len(expected), "the kill should land half-way"

    # Restarted with two workers: finishes, and what was done is not graded again.
    scores, _ = _grade(tmp_path, "--workers", "2")
    assert scores == expected
    after = _stored(tmp_path)
    assert {s: after[s] for s in before} == before

    # Grading again from scratch with one worker gives the same grades, and keeps a manual grade.
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db, course.COURSE_ID) as gb:
        grade = gb.find_grade("u01_dot_product_check", UNIT, UNIT, "bob")
        grade.manual_score = 1.0
        gb.db.commit()
    scores, _ = _grade(tmp_path, "--workers", "1", "--regrade")
    assert scores == expected
    with Gradebook(db, course.COURSE_ID) as gb:
        grade = gb.find_grade("u01_dot_product_check", UNIT, UNIT, "bob")
        assert (grade.auto_score, grade.manual_score, grade.score) == (0.0, 1.0, 1.0)
        assert gb.find_submission(UNIT, "ann").score == full_marks(UNIT)


def test_shards_split_the_class_without_overlap(tmp_path):
    from grader.grading.submissions import submissions

    _class(tmp_path)
    everyone = {s.student for s in submissions(tmp_path / "submitted")}
    shares = [{s.student for s in submissions(tmp_path / "submitted", (k, 3))} for k in (1, 2, 3)]
    assert set().union(*shares) == everyone and sum(map(len, shares)) == len(everyone)


def test_missing_solutions_is_a_clear_error(tmp_path, monkeypatch, capsys):
    from grader import cli

    path = tmp_path / "x.ipynb"
    nbformat.write(student_notebook(UNIT), path)
    monkeypatch.setattr(course, "SOLUTIONS", tmp_path / "nowhere")
    assert cli.main(["grade", str(path)]) == 2
    message = capsys.readouterr().err
    assert "solutions" in message and "git clone" in message


def test_workers_arrive_with_their_imports_done():
    """Workers fork from a server that has imported what grading needs (grader/grading/workers.py),
    rather than each importing PyTorch and nbgrader afresh; and that server never ran torch."""
    from concurrent.futures import ProcessPoolExecutor

    from grader.grading import workers

    with ProcessPoolExecutor(max_workers=1, mp_context=workers._context()) as pool:
        loaded = pool.submit(eval, "sorted(set(__import__('sys').modules) & {'torch', 'nbgrader.apps', "
                                   "'grader.grading.grade'})").result(timeout=120)
        threads = pool.submit(eval, "__import__('threading').active_count()").result(timeout=120)
    assert loaded == ["grader.grading.grade", "nbgrader.apps", "torch"]
    assert threads <= 2, threads   # the worker's own, and the pool's queue feeder


def test_each_batch_takes_the_environment_it_was_started_in(tmp_path, monkeypatch):
    """The forkserver keeps the environment it started with; a batch's workers take their
    batch's own: COURSE_GRADER_KERNELS=cold, set after a first batch, is followed by the second."""
    from grader.grading import sandbox, settings
    from grader.grading.batch import grade_folder

    if not sandbox.confinement().command:
        pytest.skip("bubblewrap does not work here: kernels start cold anyway")
    path = tmp_path / "submitted" / "ann" / UNIT / f"{UNIT}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(student_notebook(UNIT), path)
    config = settings.load(workers=1)
    [first], _ = grade_folder(tmp_path / "submitted", tmp_path, config, progress=False)
    monkeypatch.setenv("COURSE_GRADER_KERNELS", "cold")
    [second], _ = grade_folder(tmp_path / "submitted", tmp_path, config, regrade=True, progress=False)
    assert first.sandbox.endswith(sandbox.FORKED), first.sandbox
    assert "cold" in second.sandbox.splitlines()[-1] and second.score == first.score == full_marks(UNIT), second.sandbox
