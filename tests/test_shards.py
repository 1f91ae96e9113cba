"""--shard from the scheduler: a SLURM job array's task or a Kubernetes Indexed Job's index picks
the share of the class a machine grades, through the real command line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader import cli
from grader.grading.submissions import submissions

pytestmark = pytest.mark.system


SCHEDULER = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_COUNT",
             "JOB_COMPLETION_INDEX")


@pytest.fixture
def grade(tmp_path, monkeypatch, capsys):
    """`python -m grader grade` on an empty class, in the given scheduler environment: its exit
    status, and the shard it chose (K, N) or its error message."""
    (tmp_path / "submitted").mkdir()

    def run(*extra: str, **env: int) -> tuple[int, tuple[int, int] | str | None]:
        for name in SCHEDULER:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, str(value))
        code = cli.main(["grade", str(tmp_path / "submitted"), "--json", "--course-dir", str(tmp_path), *extra])
        err = capsys.readouterr().err
        if code:
            return code, err.removeprefix("error: ").strip()
        chosen = re.search(r"^grading shard (\d+)/(\d+) of the students, from .+$", err, re.M)
        return code, (int(chosen[1]), int(chosen[2])) if chosen else None

    return run


def test_shard_k_of_n_as_given_wins_over_the_scheduler(grade):
    assert grade("--shard", "2/5", SLURM_ARRAY_TASK_ID=0, SLURM_ARRAY_TASK_COUNT=3) == (0, (2, 5))
    assert grade() == (0, None)   # no scheduler, no --shard: the whole class


def test_a_slurm_job_array_task_picks_its_shard_without_being_told(grade):
    assert grade(SLURM_ARRAY_TASK_ID=0, SLURM_ARRAY_TASK_COUNT=4) == (0, (1, 4))   # TASK_MIN missing: 0
    assert grade(SLURM_ARRAY_TASK_ID=7, SLURM_ARRAY_TASK_MIN=5, SLURM_ARRAY_TASK_COUNT=3) == (0, (3, 3))
    assert grade(SLURM_ARRAY_TASK_ID=5, SLURM_ARRAY_TASK_MIN=1, SLURM_ARRAY_TASK_STEP=2,
                 SLURM_ARRAY_TASK_COUNT=4) == (0, (3, 4))                            # --array=1-7:2
    assert grade("--shard", "3", SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_MIN=1, SLURM_ARRAY_TASK_COUNT=3) \
        == (0, (2, 3))
    assert grade("--shard", "1/1", SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_COUNT=3) == (0, (1, 1))


def test_a_kubernetes_indexed_job_gives_k_and_shard_gives_n(grade):
    assert grade("--shard", "4", JOB_COMPLETION_INDEX=0) == (0, (1, 4))
    assert grade("--shard", "4", JOB_COMPLETION_INDEX=3) == (0, (4, 4))
    assert grade(JOB_COMPLETION_INDEX=3) == (0, None)   # no N: Kubernetes does not tell the completions


@pytest.mark.parametrize(("extra", "env", "message"), [
    (("--shard", "4"), {}, "neither SLURM_ARRAY_TASK_ID (a SLURM job array) nor JOB_COMPLETION_INDEX (a Kubernetes "
                           "Indexed Job) is set: give --shard K/4"),
    (("--shard", "4"), {"JOB_COMPLETION_INDEX": 4},
     "shard 5 of 4 does not exist (Kubernetes JOB_COMPLETION_INDEX=4, counted from 0): K must be between 1 and 4"),
    (("--shard", "4"), {"JOB_COMPLETION_INDEX": "two"}, "JOB_COMPLETION_INDEX='two' is not a number"),
    (("--shard", "4"), {"SLURM_ARRAY_TASK_ID": 1, "SLURM_ARRAY_TASK_COUNT": 3},
     "--shard 4, but the SLURM job array has 3 tasks (SLURM_ARRAY_TASK_ID=1, SLURM_ARRAY_TASK_MIN=0, "
     "SLURM_ARRAY_TASK_COUNT=3)"),
    ((), {"SLURM_ARRAY_TASK_ID": 9, "SLURM_ARRAY_TASK_COUNT": 3},
     "shard 10 of 3 does not exist (SLURM_ARRAY_TASK_ID=9, SLURM_ARRAY_TASK_MIN=0, SLURM_ARRAY_TASK_COUNT=3): "
     "K must be between 1 and 3"),
    ((), {"SLURM_ARRAY_TASK_ID": 4, "SLURM_ARRAY_TASK_MIN": 1, "SLURM_ARRAY_TASK_STEP": 2,
          "SLURM_ARRAY_TASK_COUNT": 4}, "the SLURM job array's tasks are not numbered MIN, MIN + STEP, ..."),
    ((), {"SLURM_ARRAY_TASK_ID": 2}, "SLURM_ARRAY_TASK_COUNT is not set: give --shard K/N or --shard N"),
])
def test_a_missing_or_impossible_index_is_a_clear_error(grade, extra, env, message):
    code, said = grade(*extra, **env)
    assert code == 2 and message in said, said


def test_a_malformed_shard_is_refused_by_the_command_line(grade, capsys):
    for text in ("0/4", "5/4", "0", "a/4", "1/2/3"):
        with pytest.raises(SystemExit) as stop:
            grade("--shard", text)
        assert stop.value.code == 2
        assert "--shard" in capsys.readouterr().err


def test_slurm_array_shards_cover_a_class_without_overlap(tmp_path, grade):
    """Each task of `sbatch --array=10-12` grades the share the command line picks for it: together
    every student once."""
    folder = tmp_path / "class"
    for student in [f"student{i:02d}" for i in range(20)]:
        path = folder / student / "01_dot_product" / "01_dot_product.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text("{}")
    everyone = {s.student for s in submissions(folder)}
    shares = []
    for task in (10, 11, 12):
        code, shard = grade(SLURM_ARRAY_TASK_ID=task, SLURM_ARRAY_TASK_MIN=10, SLURM_ARRAY_TASK_COUNT=3)
        assert code == 0 and shard == (task - 9, 3)
        shares.append({s.student for s in submissions(Path(folder), shard)})
    assert set().union(*shares) == everyone and sum(map(len, shares)) == len(everyone)
    assert all(shares)
