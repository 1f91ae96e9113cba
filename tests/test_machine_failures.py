"""A failure of the machine never becomes a learner's score.

A sandbox whose kernel cannot start (the machine is short of processes, memory, time) fails
before the notebook's first cell: no learner code ran. The grader starts it again; if it never
gets that far, the notebook is left to grade again: no score, nothing in the gradebook, no
feedback, said in the summary, and graded by the next run. A kernel that the learner's own code
kills stays graded, as before. The failure here is a real one: a process limit too small for a
kernel's threads (zmq aborts, "Kernel died before replying to kernel_info").
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import accounts
import nbformat
import pytest
from helpers import scores
from reference import answers, full_marks, student_notebook

from grader import course
from grader.grading import grade, sandbox
from grader.grading.batch import grade_folder, table
from grader.grading.report import write_report
from grader.grading.settings import Limits, Settings

UNIT = "01_dot_product"
FULL = full_marks(UNIT)
TOO_FEW = 8   # processes and threads: the runner starts, the kernel cannot start its threads
FAR_TOO_FEW = 4   # the runner's own threads cannot start (zmq aborts it: SIGABRT)
# What the grader says of a sandbox that failed before the notebook's first cell. Which thread
# fails first under TOO_FEW (the kernel's, or now and then the runner's) depends on timing, so the
# tests read this, and the cause that follows it only where one cause is certain.
BEFORE_FIRST_CELL = "the sandbox failed before the notebook's first cell ran"
LIMITS = Limits(cell_seconds=60, notebook_seconds=300)

pytestmark = pytest.mark.skipif(not sandbox.confinement().command,
                                reason="the process limit applies under bubblewrap only (apt-get install bubblewrap)")


class Starts:
    """The limits of every sandbox started in this process; the first `failing` get a process
    limit their kernel cannot start under."""

    def __init__(self):
        self.limits: list[Limits] = []
        self.failing = 0


@pytest.fixture
def starts(monkeypatch) -> Starts:
    seen, real = Starts(), sandbox.Sandbox

    def counted(workdir, limits, warm=()):
        seen.limits.append(limits)
        return real(workdir, replace(limits, processes=TOO_FEW) if len(seen.limits) <= seen.failing else limits, warm)

    monkeypatch.setattr(sandbox, "Sandbox", counted)
    monkeypatch.setattr(grade, "RETRY_PAUSE_SECONDS", 0.1)
    return seen


def _submit(tmp_path, name: str = "ann", nb=None):
    path = tmp_path / "submitted" / name / UNIT / f"{UNIT}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb or student_notebook(UNIT), path)
    return path


def test_a_kernel_that_could_not_start_is_started_again_and_the_notebook_graded(tmp_path, starts):
    starts.failing = 1
    result = grade.grade_notebook(_submit(tmp_path), UNIT, LIMITS, student="ann")
    assert len(starts.limits) == 2
    assert result.score == FULL and result.regrade is None and result.error is None
    assert any("graded at try 2" in flag and BEFORE_FIRST_CELL in flag for flag in result.flags), result.flags


def test_a_kernel_the_learners_code_kills_is_graded_and_not_started_again(tmp_path, starts):
    chosen = answers(UNIT)
    chosen["u01_dot_product"] = "import os\nos._exit(1)"   # the first answer cell
    result = grade.grade_notebook(_submit(tmp_path, nb=student_notebook(UNIT, chosen)), UNIT, LIMITS)
    assert len(starts.limits) == 1 and result.regrade is None
    assert result.score == 0.0 and any("kernel died" in flag for flag in result.flags), result.flags


def test_a_notebook_the_machine_never_runs_is_left_to_grade_again_and_the_next_run_grades_it(tmp_path):
    _submit(tmp_path)
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    broken = Settings(replace(LIMITS, processes=TOO_FEW, startup_tries=2), workers=1)
    results, graded_now = grade_folder(tmp_path / "submitted", tmp_path, broken, progress=False)
    (result,) = results
    assert graded_now == 1 and result.regrade and result.error is None
    assert "2 time(s)" in result.regrade and BEFORE_FIRST_CELL in result.regrade
    assert all(e.feedback == "not graded" for e in result.exercises)
    assert scores(db_url, UNIT) == {}                      # no 0 recorded as a grade
    assert not list((tmp_path / "feedback").rglob("*.html"))         # no feedback saying 0
    stored = json.loads((tmp_path / "grader_results" / "ann" / f"{UNIT}.json").read_text())
    assert stored["regrade"] == result.regrade
    summary = table(results)
    assert "regrade" in summary.splitlines()[1] and "0/5" not in summary
    assert "1 notebook(s) not graded because the machine failed" in summary
    write_report(results, tmp_path / "report.html")
    report = (tmp_path / "report.html").read_text()
    assert "to grade again" in report and "1 of them not graded yet" in report

    results, graded_now = grade_folder(tmp_path / "submitted", tmp_path, Settings(LIMITS, workers=1),
                                       progress=False)   # the same command, on a machine that works again
    (result,) = results
    assert graded_now == 1 and result.regrade is None and result.score == FULL
    assert scores(db_url, UNIT) == {"ann": FULL}
    assert list((tmp_path / "feedback").rglob("*.html"))
    _, graded_now = grade_folder(tmp_path / "submitted", tmp_path, Settings(LIMITS, workers=1), progress=False)
    assert graded_now == 0                                          # graded now: kept


def test_a_runner_killed_before_the_first_cell_is_the_machines_failure_not_the_learners(tmp_path):
    """With so few processes that the runner itself aborts, no learner code ever ran: the
    notebook is left to grade again, as when the kernel cannot start, never given a 0."""
    limits = replace(LIMITS, processes=FAR_TOO_FEW, startup_tries=1)
    result = grade.grade_notebook(_submit(tmp_path), UNIT, limits, student="ann")
    assert result.error is None and result.score == 0 and result.regrade, result.problems()
    assert BEFORE_FIRST_CELL in result.regrade, result.regrade   # here: "(exit code 134): Resource temporarily …"


def test_a_correct_notebook_on_a_machine_under_heavy_load_gets_full_marks(tmp_path, starts):
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin) for _ in range(3 * (os.cpu_count() or 1))]
    try:
        time.sleep(0.5)
        result = grade.grade_notebook(_submit(tmp_path), UNIT, LIMITS, student="ann")
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert result.regrade is None and result.error is None and result.score == FULL, result.problems()


THIEF = """
import sys, tempfile, threading, time
from pathlib import Path
import nbformat
from grader.grading import sandbox
from grader.grading.settings import Limits

limits = Limits(cell_seconds=60, notebook_seconds=120)
BOMB = ("import threading, time\\nn = 0\\ntry:\\n    while True:\\n"
        "        threading.Thread(target=time.sleep, args=(10,)).start()\\n        n += 1\\n"
        "except RuntimeError:\\n    print(n)")
with tempfile.TemporaryDirectory(dir=sandbox.scratch_parent(limits)) as tmp:
    box = sandbox.Sandbox(Path(tmp), limits)
    held = [threading.Thread(target=time.sleep, args=(10,)) for _ in range(limits.processes + 100)]
    for thread in held:   # the account's other programs grow while the kernel starts
        thread.start()
    with box:
        outcome = box.run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")]))
    print("STARTED", outcome.started, outcome.problem)
with tempfile.TemporaryDirectory(dir=sandbox.scratch_parent(limits)) as tmp, \\
        sandbox.Sandbox(Path(tmp), limits) as box:
    outcome = box.run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(BOMB)]))
    print("BOMB", "".join(o.get("text", "") for o in outcome.executed.cells[0].outputs).strip())
"""


@pytest.mark.system   # makes a Unix account
@pytest.mark.skipif(not sandbox._processes_counted_per_namespace(),
                    reason="before Linux 5.14 the process limit counts every process of the user")
def test_as_an_ordinary_account_a_kernel_starts_whatever_else_the_account_runs(tmp_path):
    """Graded as an ordinary account, every sandbox's processes are the account's: the process
    limit counts this sandbox's alone, so a kernel still starts while the instructor's other
    programs (or another notebook) take more than the limit, and a thread bomb still stops."""
    reason = accounts.why_not() or (accounts.view()[1] if accounts.view()[0] is None else None)
    if reason:
        pytest.skip(reason)
    account = accounts.make("grader-test-")
    try:
        out = account.run(sys.executable, "-c", THIEF, env={"PYTHONPATH": str(course.ROOT)}, timeout=300).stdout
    finally:
        accounts.remove(account)
    assert "STARTED True None" in out, out
    threads = int(out.split("BOMB", 1)[1].split()[0])
    assert 400 < threads < Limits().processes, out


def test_a_template_that_dies_under_a_notebook_is_a_machine_failure_and_is_started_again(tmp_path):
    """Kernels forked from a warm template (grader.grading.template): the template killed while a
    notebook runs from it (the machine's out-of-memory killer, an operator) leaves that notebook
    unscored, a machine failure; the next notebook gets a new template and is graded."""
    import signal
    import tempfile
    from pathlib import Path

    if sandbox.scratch_parent(LIMITS) is None:
        pytest.skip(f"kernels are not forked here: {sandbox._cold_reason}")
    first = sandbox._templates[""]
    with tempfile.TemporaryDirectory(dir=sandbox.scratch_parent(LIMITS)) as job, \
            sandbox.Sandbox(Path(job), LIMITS) as box:
        os.killpg(first.proc.pid, signal.SIGKILL)
        outcome = box.run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")]))
    assert not outcome.started and "template died" in outcome.problem, outcome.problem
    assert not first.alive()
    path = tmp_path / f"{UNIT}.ipynb"
    nbformat.write(student_notebook(UNIT), path)
    result = grade.grade_notebook(path, UNIT, LIMITS)
    assert result.score == FULL and result.regrade is None
    assert sandbox._templates[""] is not first and result.sandbox.endswith(sandbox.FORKED)


@pytest.mark.system   # makes a Unix account
def test_where_the_sandbox_refuses_nested_user_namespaces_kernels_start_cold_and_say_why(tmp_path):
    """A machine whose sandbox may not make user namespaces inside it (bubblewrap's
    --disable-userns, here added to the template's sandbox alone by a bwrap first on PATH): the
    template says so, the notebook is graded with its kernel started cold, in full, and its result
    and the run's log name the reason once."""
    import shutil
    import tempfile
    from pathlib import Path

    reason = accounts.why_not() or (accounts.view()[1] if accounts.view()[0] is None else None)
    if reason or not shutil.which("bwrap"):
        pytest.skip(reason or "bubblewrap is not installed")
    shared = Path(tempfile.mkdtemp(prefix="nested-userns-", dir="/tmp"))
    shared.chmod(0o755)
    account = accounts.make("grader-test-")
    try:
        wrapper = shared / "bwrap"
        wrapper.write_text(f"#!/bin/sh\ncase \"$*\" in *grader.grading.template*) "
                           f"exec {shutil.which('bwrap')} --disable-userns \"$@\";; esac\n"
                           f"exec {shutil.which('bwrap')} \"$@\"\n")
        wrapper.chmod(0o755)
        path = account.home / f"{UNIT}.ipynb"
        nbformat.write(student_notebook(UNIT), path)
        shutil.chown(path, account.name, account.name)
        done = account.run(sys.executable, "-m", "grader", "grade", str(path), "--json", cwd=course.ROOT,
                           env={"PYTHONPATH": str(course.ROOT),
                                "PATH": f"{shared}:{Path(sys.executable).parent}:/usr/bin:/bin"})
    finally:
        accounts.remove(account)
        shutil.rmtree(shared, ignore_errors=True)
    result = json.loads(done.stdout)
    assert result["score"] == result["max_score"] == FULL and result["error"] is None, result
    said = "the kernels' template did not start: this machine refuses nested user or PID namespaces"
    assert result["sandbox"].splitlines()[-1] == f"the kernel started cold: {said}", result["sandbox"]
    assert result["sandbox"].startswith("bubblewrap"), result["sandbox"]   # the notebook's own sandbox still
    assert done.stderr.count(f"grader: notebook kernels start cold: {said}") == 1, done.stderr
