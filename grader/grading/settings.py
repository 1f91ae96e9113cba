"""The grader's settings, read in one place: limits on learner code, workers, the gradebook.

Where nbgrader has the same setting, the default comes from the shipped nbgrader_config.py
(`Execute.timeout` for a cell, `Execute.startup_timeout` for a kernel, `CourseDirectory.db_url`
for the gradebook), so `nbgrader autograde` and `python -m grader grade` agree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from .. import course

MiB = 2**20


@dataclass(frozen=True)
class Limits:
    """What one notebook's learner code may use, and how much of what it leaves the grader
    reads back. Each limit that is hit costs the exercise it was hit in (or the cells after
    it), never the exercises already reached; a submission too large is rejected unread."""
    cell_seconds: int = 120              # wall time of one cell
    notebook_seconds: int = 900          # wall time of the whole notebook
    startup_seconds: int = 120           # to start the kernel on a busy machine
    startup_tries: int = 3               # sandboxes started for a notebook whose kernel fails before its first cell
    memory_bytes: int = 6 * 2**30        # address space of each process (torch needs about 1.5 GiB)
    processes: int = 512                 # processes and threads of the sandbox's user
    file_bytes: int = 256 * MiB          # size of any one file written
    scratch_bytes: int = 1024 * MiB      # all files written together
    output_bytes: int = 1 * MiB          # text and images a cell may print or show
    notebook_bytes: int = 64 * MiB       # a submission: far above any notebook of the course with its outputs
    executed_bytes: int = 64 * MiB       # the executed notebook read back: its outputs are capped per cell
    result_values: int = 1_000_000       # values in one check's results: far more than any check returns

    @property
    def cpu_seconds(self) -> int:
        """CPU time of one process: a backstop behind the wall-clock caps (two threads busy)."""
        return 2 * self.notebook_seconds


@dataclass(frozen=True)
class Settings:
    limits: Limits
    workers: int                          # notebooks graded at once, each in its own process
    db_url: str | None = None             # None: gradebook.db in the course folder

    def gradebook_url(self, course_root: Path) -> str:
        """The gradebook grades go to: `db_url`, else the course folder's (course.gradebook_url)."""
        return self.db_url or course.gradebook_url(course_root)


def load(cell_seconds: int | None = None, notebook_seconds: int | None = None,
         workers: int | None = None, db_url: str | None = None) -> Settings:
    """The settings: the arguments given, else nbgrader_config.py, else the defaults above."""
    config = course.config()
    execute, coursedir = config.get("Execute", {}), config.get("CourseDirectory", {})
    limits = Limits()
    limits = replace(limits,
                     cell_seconds=int(cell_seconds or execute.get("timeout", limits.cell_seconds)),
                     startup_seconds=int(execute.get("startup_timeout", limits.startup_seconds)))
    if notebook_seconds:
        limits = replace(limits, notebook_seconds=int(notebook_seconds))
    return Settings(limits=limits, workers=max(1, workers or os.cpu_count() or 1),
                    db_url=db_url or coursedir.get("db_url") or None)
