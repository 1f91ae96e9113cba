"""The learner's progress: what each self-check found, kept in a small file in the working folder.

Every `check(...)` records its outcome (passed, or the mistake it named) in
attention-course-progress.json, in the learner's working folder: the folder that holds the unit
folders, else the current one. The record keeps the language the self-checks spoke, so that
`attention-course progress` answers in it too. `progress()` shows it for the whole course. Nothing
is sent anywhere, and nothing is recorded while nbgrader runs a notebook (Validate, autograding).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..fixtures import exercises
from ..units import is_unit
from . import i18n
from .i18n import say

FILE = "attention-course-progress.json"
PASS, FAIL = "pass", "fail"


@dataclass(frozen=True)
class Outcome:
    """The last self-check of one exercise."""
    unit: str
    status: str            # PASS or FAIL (an exercise never tried, or not written yet, has none)
    message: str = ""      # the mistake named, for FAIL
    when: str = ""         # UTC, ISO 8601


def progress_file(folder: Path | None = None) -> Path:
    """The progress file of a working folder; from inside a unit's folder, its parent's."""
    folder = Path.cwd() if folder is None else Path(folder)
    return (folder.parent if is_unit(folder.name) else folder) / FILE


def _stored(folder: Path | None) -> dict:
    try:
        stored = json.loads(progress_file(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def load(folder: Path | None = None) -> dict[str, Outcome]:
    """Each exercise's last outcome, by name; empty when nothing was recorded or the file is unreadable."""
    try:
        return {name: Outcome(**fields) for name, fields in _stored(folder)["exercises"].items()}
    except (KeyError, TypeError, AttributeError):
        return {}


def recorded_language(folder: Path | None = None) -> str | None:
    """The language the self-checks spoke when they last kept the record; None without one."""
    language = _stored(folder).get("language")
    return language if isinstance(language, str) else None


def under_grader() -> bool:
    """Whether the notebook runs under a grader (nbgrader's, or the course's, which sets the same
    NBGRADER_EXECUTION): no progress is recorded, and nothing scrolls."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def record(name: str, unit: str, status: str, message: str = "") -> None:
    """Keep `name`'s outcome. Never fails: a folder the learner cannot write to (a read-only hosted
    copy) just keeps no record."""
    if under_grader():
        return
    path = progress_file()
    outcomes = load()
    outcomes[name] = Outcome(unit, status, message, datetime.now(UTC).isoformat(timespec="seconds"))
    try:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"language": i18n.current(),
                                   "exercises": {k: asdict(v) for k, v in sorted(outcomes.items())}},
                                  indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def summary(unit: str, folder: Path | None = None) -> str:
    """One line: how many exercises of `unit` and of the course pass."""
    course, outcomes = exercises(), load(folder)
    passed = [name for name, o in outcomes.items() if o.status == PASS]
    here = sum(name in passed for name in course.get(unit, []))
    total = sum(name in passed for names in course.values() for name in names)
    return say("Progress: unit {unit} {here} of {count} exercises pass, the course {total} of {all}; "
               "progress() lists them.", unit=unit[:2], here=here, count=len(course.get(unit, [])),
               total=total, all=sum(map(len, course.values())))


def show(unit: str) -> None:
    """The line under a self-check (none while nbgrader runs the notebook)."""
    if not under_grader():
        print(summary(unit))


def report(folder: Path | None = None) -> str:
    """Every unit's exercises: ✓ passes, ✗ tried and not right yet (with the mistake last named),
    · not tried yet."""
    course, outcomes = exercises(), load(folder)
    lines = []
    for unit, names in course.items():
        passed = sum(outcomes[n].status == PASS for n in names if n in outcomes)
        lines.append(say("{unit}: {passed} of {count} pass", unit=unit, passed=passed, count=len(names)))
        for name in names:
            outcome = outcomes.get(name)
            if outcome is None:
                lines.append(f"  · {name}")
            elif outcome.status == PASS:
                lines.append(f"  \u2713 {name}")
            elif outcome.message.startswith(name):   # named already, as the self-check said it
                lines.append(f"  \u2717 {outcome.message}")
            else:
                lines.append(f"  \u2717 {name}: {outcome.message}")
    total = sum(o.status == PASS for o in outcomes.values())
    lines.append(say("The course: {total} of {all} exercises pass. \u2713 passes, \u2717 tried (the mistake last "
                     "named), \u00b7 not tried yet.", total=total, all=sum(map(len, course.values()))))
    return "\n".join(lines)


def progress(folder: Path | None = None) -> None:
    """Print which exercises of the whole course pass, which were tried, and the last mistake named.
    Nothing while nbgrader runs the notebook: its folder holds no record (none is kept there),
    and "0 of 44 pass" in a graded copy or a feedback report would contradict its score."""
    if not under_grader():
        print(report(folder))
