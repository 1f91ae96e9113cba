"""Wall and CPU seconds of the named steps of a piece of work, for the grading benchmark."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Step:
    name: str
    wall: float   # seconds
    cpu: float    # CPU seconds of this process (not of its children)


@dataclass
class Stopwatch:
    steps: list[Step] = field(default_factory=list)
    sandbox: Any = None   # a sandbox's own record of its time (grader.grading.sandbox.Timing), when one ran

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.steps.append(Step(name, time.perf_counter() - wall, time.process_time() - cpu))
