"""What grading one notebook found, as typed data that crosses processes and files as JSON."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ExerciseResult:
    """One graded exercise (one nbgrader test cell)."""
    grade_id: str
    names: list[str]               # the contract names its checks test, e.g. ["dot_product"]
    max_points: float
    points: float = 0.0
    passed: bool = False
    feedback: str = "not graded"   # "passed", or the message the learner reads
    mistake: str | None = None     # the catalogued mistake the failure names, if it names one

    def grade(self, messages: list[str], mistake: str | None = None) -> None:
        """Full points when there is no failure message, else none and the first message."""
        self.passed = not messages
        self.points = self.max_points if self.passed else 0.0
        self.feedback = "passed" if self.passed else messages[0]
        self.mistake = None if self.passed else mistake


@dataclass
class NotebookResult:
    """One submitted notebook: its exercises, what pre-flight repaired or rejected, what stopped it."""
    notebook: str
    unit: str | None
    student: str | None = None
    exercises: list[ExerciseResult] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)   # repaired problems and faults, graded anyway
    error: str | None = None                         # why it was rejected or could not be run at all
    regrade: str | None = None                       # why it has no score yet: the machine failed before
    #                                                  its first cell ran (not the learner's doing); the
    #                                                  gradebook and feedback are left alone, and the next
    #                                                  run grades it again
    sandbox: str = ""                                # how learner code was confined
    seconds: float = 0.0
    checksum: str = ""                               # sha256 of the submitted file, for --resume
    language: str = "en"                             # the edition of the course it belongs to

    @property
    def score(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_points for e in self.exercises)

    def exercise(self, grade_id: str) -> ExerciseResult:
        return next(e for e in self.exercises if e.grade_id == grade_id)

    def problems(self) -> list[str]:
        """The reason it was not graded or was rejected, and the flags, for tables and reports."""
        return [reason for reason in (self.regrade, self.error) if reason] + self.flags

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "score": self.score, "max_score": self.max_score}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NotebookResult:
        data = {k: v for k, v in data.items() if k not in ("score", "max_score")}
        data["exercises"] = [ExerciseResult(**e) for e in data.get("exercises", [])]
        return cls(**data)
