"""A class's submissions, and which share of them one machine grades.

`submissions` lists nbgrader's submitted/<student>/<unit>/<unit>.ipynb; with a shard (K, N), only
the students of share K of N (`in_shard`), so that N machines grade a class without overlap.
`python -m grader grade CLASS --shard K/N` names the shard, or K (and N) come from the scheduler
that started the machine, a SLURM job array or a Kubernetes Indexed Job (`chosen_shard`).
"""
from __future__ import annotations

import argparse
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import course


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
        if shard and not in_shard(student.name, shard):
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
        rejection = f"{str(path.relative_to(top))!r} is a symbolic link or lies in one: links are not graded"
    elif path != named and others:
        rejection = (f"{len(notebooks)} notebooks and none named {unit}.ipynb: cannot tell which one to grade; "
                     f"keep one, named {unit}.ipynb")
    elif path != named:
        # a learner's name, shown as repr() shows it: no terminal escape reaches the instructor's screen
        notes = (f"the notebook is named {path.name!r}, not {unit}.ipynb; it was graded as {unit}",)
    return Submission(student, unit, path, rejection, notes)


def in_shard(student: str, shard: tuple[int, int]) -> bool:
    """Whether `student` is graded by shard (K, N): by a hash of the name, the same on every machine."""
    return zlib.crc32(student.encode()) % shard[1] == shard[0] - 1


def parse_shard(text: str) -> tuple[int | None, int]:
    """--shard K/N, or N alone: K then comes from the scheduler (see `chosen_shard`)."""
    k, _, n = text.rpartition("/")
    try:
        shard = (int(k) if k else None), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes K/N (e.g. 1/4), or N alone inside a SLURM job array or "
                                         f"a Kubernetes Indexed Job, not {text!r}") from None
    if shard[1] < 1 or shard[0] is not None and not 1 <= shard[0] <= shard[1]:
        raise argparse.ArgumentTypeError(f"--shard {text}: N must be at least 1, and K between 1 and N")
    return shard


class ShardError(Exception):
    """The scheduler's index cannot give the shard to grade."""


def chosen_shard(given: tuple[int | None, int] | None, env: Mapping[str, str]) -> tuple[tuple[int, int], str] | None:
    """The shard (K, N) to grade and where it came from, or None for the whole class: --shard K/N
    as given; --shard N with K from a SLURM job array or a Kubernetes Indexed Job (whose pods are
    told their index, JOB_COMPLETION_INDEX, but not the number of completions); no --shard inside
    a SLURM job array, K and N from the array."""
    if given and given[0] is not None:
        return (given[0], given[1]), "--shard"
    slurm = _slurm_task(env)
    if given is None:
        if slurm is None:
            return None
        k, count, source = slurm
        if count is None:
            raise ShardError(f"{source}, but SLURM_ARRAY_TASK_COUNT is not set: give --shard K/N or --shard N")
        return _in_range(k, count, source), source + " (--shard 1/1 grades the whole class)"
    n = given[1]
    if slurm is not None:
        k, count, source = slurm
        if count is not None and count != n:
            raise ShardError(f"--shard {n}, but the SLURM job array has {count} tasks ({source})")
        return _in_range(k, n, source), source
    if "JOB_COMPLETION_INDEX" in env:
        index = _number(env, "JOB_COMPLETION_INDEX")
        source = f"Kubernetes JOB_COMPLETION_INDEX={index}, counted from 0"
        return _in_range(index + 1, n, source), source
    raise ShardError(f"--shard {n} takes K, the shard's number, from the scheduler, but neither "
                     "SLURM_ARRAY_TASK_ID (a SLURM job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) "
                     f"is set: give --shard K/{n}")


def _slurm_task(env: Mapping[str, str]) -> tuple[int, int | None, str] | None:
    """K (from 1) of this SLURM job array task, the array's number of tasks, and the variables they
    came from; None outside a job array. Arrays number their tasks MIN, MIN + STEP, ..."""
    if "SLURM_ARRAY_TASK_ID" not in env:
        return None
    task, first = _number(env, "SLURM_ARRAY_TASK_ID"), _number(env, "SLURM_ARRAY_TASK_MIN", 0)
    step = _number(env, "SLURM_ARRAY_TASK_STEP", 1)
    count = _number(env, "SLURM_ARRAY_TASK_COUNT") if "SLURM_ARRAY_TASK_COUNT" in env else None
    source = ", ".join([f"SLURM_ARRAY_TASK_ID={task}", f"SLURM_ARRAY_TASK_MIN={first}"]
                       + [f"SLURM_ARRAY_TASK_STEP={step}"] * (step != 1)
                       + [f"SLURM_ARRAY_TASK_COUNT={count}"] * (count is not None))
    if step < 1 or (task - first) % step:
        raise ShardError(f"the SLURM job array's tasks are not numbered MIN, MIN + STEP, ... ({source}): "
                         "submit it as --array=0-(N-1), or give --shard K/N")
    return (task - first) // step + 1, count, source


def _number(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None and default is not None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ShardError(f"{name}={value!r} is not a number") from None


def _in_range(k: int, n: int, source: str) -> tuple[int, int]:
    if not 1 <= k <= n:
        raise ShardError(f"shard {k} of {n} does not exist ({source}): K must be between 1 and {n}")
    return k, n
