"""A class graded on a real scheduler: a single-node SLURM cluster (munged, slurmctld, slurmd)
started here, the instructors' job array (cluster/grade-class.sbatch, shown word for word in
docs/instructors.md) grading 40 notebooks of units 01 and 05 into one PostgreSQL gradebook, one
task cancelled half-way, and the array submitted again as the docs say. Every notebook ends up
graded once, with the score one machine gives it, and nothing half-written is left."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import graded
import nbformat
import pytest

from grader import course
from grader.grading import gradebook, sandbox
from grader.grading.results import NotebookResult
from grader.grading.submissions import in_shard

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("slurm")]

SCRIPT = course.ROOT / "cluster" / "grade-class.sbatch"
UNITS = list(graded.WITH_MISTAKES)   # 01_dot_product and 05_causal_masking
STUDENTS = [f"learner{n:02d}" for n in range(20)]
TASKS = 4                      # the script's --array=0-3
MEMORY_PER_TASK_MB = 3 * 1024  # the script's --mem-per-cpu=3G, one CPU per task
NODE = "course-node"


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]

    def run(self, *command: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(command, env=self.env, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert not check or done.returncode == 0, f"{' '.join(command)}: {done.stdout}{done.stderr}"
        return done

    def jobs(self) -> list[str]:
        """The array tasks still queued or running, as SLURM names them (e.g. 3_2)."""
        return self.run("squeue", "--noheader", "--array", "--format=%i").stdout.split()

    def wait_until_done(self, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while self.jobs():
            assert time.monotonic() < deadline, self.run("squeue", "--array").stdout
            time.sleep(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    with open("/proc/meminfo") as info:
        return int(info.readline().split()[1]) // 1024


def _slurm_conf(folder: Path, memory_mb: int) -> str:
    """One node with 2 CPUs, no cgroups (processes tracked by their parents), state in `folder`."""
    return "\n".join([
        "ClusterName=course", "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={folder / 'munge.socket'}",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none", "ReturnToService=2",
        f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs=2 RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=grading Nodes={NODE} Default=YES MaxTime=INFINITE State=UP", ""])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    missing = [tool for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
               if not shutil.which(tool)]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("a SLURM cluster of one node is started as root here")
    memory_mb = _memory_mb() * 8 // 10
    if memory_mb < 2 * MEMORY_PER_TASK_MB:
        pytest.skip(f"the script asks 3 GiB per task; this machine has {memory_mb} MiB to give two at once")
    folder = tmp_path_factory.mktemp("slurm")
    for name in ("state", "spool"):
        (folder / name).mkdir()
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = folder / "slurm.conf"
    conf.write_text(_slurm_conf(folder, memory_mb), encoding="utf-8")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen] = []

    def start(*command: str) -> None:
        log = open(folder / f"{Path(command[0]).name}.out", "wb")
        daemons.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True))

    try:
        start("munged", "--foreground", "--force", f"--key-file={key}", f"--socket={folder / 'munge.socket'}",
              f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
              f"--seed-file={folder / 'munged.seed'}")
        start("slurmctld", "-D", "-i")
        start("slurmd", "-D", "-N", NODE)
        cluster = Cluster(folder, env)
        deadline = time.monotonic() + 60
        while "idle" not in cluster.run("sinfo", "--noheader", "--format=%T", check=False).stdout:
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                logs = "".join(p.read_text(errors="replace")[-1500:] for p in sorted(folder.glob("*.out")))
                pytest.skip(f"the SLURM cluster did not start here: {logs}")
            time.sleep(0.5)
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["scancel", "--full", "--user=root"], env=env, timeout=30)
        for daemon in reversed(daemons):   # stopped by PID, each with its own process group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()


def _write_class(root: Path) -> dict[tuple[str, str], str]:
    """20 learners, each handing in units 01 and 05; which kind of notebook each one is."""
    handed_in = {}
    for unit in UNITS:
        kinds = graded.kinds(unit)
        names = sorted(kinds)
        for n, student in enumerate(STUDENTS):
            kind = names[(n + len(handed_in)) % len(names)]
            path = root / "submitted" / student / unit / f"{unit}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(kinds[kind], path)
            handed_in[(student, unit)] = kind
    return handed_in


def _stored(root: Path) -> dict[tuple[str, str], float]:
    """When each notebook's result was stored: a notebook graded again gets a new time."""
    return {(p.parent.name, p.stem): p.stat().st_mtime for p in (root / "grader_results").glob("*/*.json")}


def _submit(cluster: Cluster, root: Path, course_dir: Path, gradebook: str) -> str:
    """The docs' command: sbatch --export=ALL,COURSE=…,CLASS=…,GRADEBOOK=… grade-class.sbatch."""
    out = cluster.run("sbatch", f"--export=ALL,COURSE={course_dir},CLASS={root},GRADEBOOK={gradebook}",
                      str(SCRIPT), cwd=root)
    return re.search(r"Submitted batch job (\d+)", out.stdout).group(1)


def _course_dir(tmp: Path) -> Path:
    """COURSE for the script: this clone when the suite runs on its .venv (./course test), else a
    folder whose .venv is the Python running the suite, which imports this clone's grader."""
    if (course.ROOT / ".venv" / "bin" / "python").resolve() == Path(sys.executable).resolve():
        return course.ROOT
    (tmp / "course").mkdir()
    (tmp / "course" / ".venv").symlink_to(Path(sys.prefix))
    return tmp / "course"


def test_the_docs_show_the_script_the_cluster_runs():
    docs = (course.ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    assert SCRIPT.read_text(encoding="utf-8").strip() in docs


def test_a_job_array_grades_the_class_once_into_one_gradebook_and_survives_a_cancelled_task(
        cluster, postgres_database, tmp_path, course_graded):
    from nbgrader.api import Gradebook

    root = tmp_path / "class"
    handed_in = _write_class(root)
    assert len(handed_in) == 40
    # What one machine gives each kind of notebook: `python -m grader grade` with its own SQLite
    # gradebook, on one learner per kind (tests/graded.py).
    expected = {(kind, unit): course_graded.score(kind, unit) for unit in UNITS for kind in graded.kinds(unit)}
    assert len(set(expected.values())) >= 3, expected   # full, zero and partial marks are all in the class
    course_dir = _course_dir(tmp_path)

    # The array, with one task cancelled half-way through its shard.
    started = time.monotonic()
    job = _submit(cluster, root, course_dir, postgres_database)
    victim = 2
    share = {(s, u) for (s, u) in handed_in if in_shard(s, (victim + 1, TASKS))}
    assert 2 <= len(share) < len(handed_in)
    deadline = time.monotonic() + 600
    while not (share & set(_stored(root))):
        if time.monotonic() > deadline or not cluster.jobs():
            pytest.fail("the cancelled task never stored a result: "
                        + "".join(p.read_text(errors="replace")[-1500:] for p in root.glob("grade-class-*.log")))
        time.sleep(0.2)
    cluster.run("scancel", f"{job}_{victim}")
    cluster.wait_until_done()
    first_run = time.monotonic() - started
    before = _stored(root)
    left = share - set(before)
    assert left, "the cancel should land before the task finished its shard"
    assert set(before) == set(handed_in) - left, "the other tasks finished their shards"

    # Submitted again, as the docs say: what was left is graded, nothing graded twice.
    started = time.monotonic()
    _submit(cluster, root, course_dir, postgres_database)
    cluster.wait_until_done()
    second_run = time.monotonic() - started
    after = _stored(root)
    assert set(after) == set(handed_in)
    assert {key: after[key] for key in before} == before, "a notebook stored before was graded again"

    logs = {p.name: p.read_text(errors="replace") for p in root.glob("grade-class-*.log")}
    assert len(logs) == 2 * TASKS
    for k in range(1, TASKS + 1):
        assert sum(f"grading shard {k}/{TASKS} of the students, from SLURM_ARRAY_TASK_ID={k - 1}" in log
                   for log in logs.values()) == 2, logs

    # One gradebook, every notebook in it once, with the score one machine gives it, nothing half-written.
    with Gradebook(postgres_database, course.COURSE_ID) as gb:
        for (student, unit), kind in handed_in.items():
            submission = gb.find_submission(unit, student)
            grades = [g for nb in submission.notebooks for g in nb.grades]
            assert grades and all(g.auto_score is not None for g in grades), (student, unit)
            assert submission.score == expected[(kind, unit)], (student, unit, kind)
        assert sum(len(a.submissions) for a in gb.assignments) == len(handed_in)
    with open(root / "grades.csv", encoding="utf-8") as grades:
        assert sum(1 for _ in grades) == len(handed_in) + 1

    # The gradebook's pace: every task writes each notebook's grades in turn (an advisory lock).
    results = [NotebookResult.from_json(json.loads(p.read_text(encoding="utf-8")))
               for p in sorted((root / "grader_results").glob("*/*.json"))]
    # Every notebook's kernel forked from its task's warm template, inside the sandbox, as on a workstation.
    assert all(result.sandbox.endswith(sandbox.FORKED) for result in results), {r.sandbox for r in results}
    started = time.monotonic()
    for result in results:
        gradebook.record(result, postgres_database)
    writes = len(results) / (time.monotonic() - started)
    print(f"\nSLURM: 40 notebooks in 4 array tasks on 2 CPUs: {first_run:.0f} s with one task cancelled, "
          f"{second_run:.0f} s for the resubmission ({len(left)} left); "
          f"the PostgreSQL gradebook records {writes:.0f} notebooks/s, one writer at a time")
