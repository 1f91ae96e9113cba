"""Which share of a class one grading machine grades: `python -m grader grade CLASS --shard K/N`,
or K (and N) from the scheduler that started it, a SLURM job array or a Kubernetes Indexed Job."""
from __future__ import annotations

import argparse
from collections.abc import Mapping


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
