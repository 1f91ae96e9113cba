"""The course's own notebooks graded once per test session by `python -m grader grade`, for the
tests that compare with that grading: every unit's reference solution and blank notebook, and for
units 01 and 05 the reference with each of the first two catalogued mistakes (the kinds of
notebook the SLURM test's class hands in). pytest-xdist runs the suite in several processes: the
first to ask grades the class while the others wait on a lock, then all read the same results."""
from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import catalogue
import nbformat
from catalogue import u01, u05
from reference import answers, student_notebook

from grader import course, notebook

WITH_MISTAKES = {"01_dot_product": u01, "05_causal_masking": u05}


def kinds(unit: str) -> dict[str, nbformat.NotebookNode]:
    """The notebooks graded for `unit`: "reference", "blank", and for the units of WITH_MISTAKES
    "mistake 1" and "mistake 2", the reference with one catalogued mistake each."""
    found = {"reference": student_notebook(unit), "blank": notebook.read(course.release_notebook(unit))}
    if unit in WITH_MISTAKES:
        mistakes = [m for m in WITH_MISTAKES[unit].MISTAKES if isinstance(m, catalogue.Mistake) and not m.graded_at]
        for k, mistake in enumerate(mistakes[:2]):
            found[f"mistake {k + 1}"] = student_notebook(unit, {**answers(unit), mistake.answer: mistake.code})
    return found


@dataclass(frozen=True)
class GradedCourse:
    results: dict[tuple[str, str], dict]   # (kind, unit) -> its result, as `grade --json` prints it
    root: Path                             # the course folder it was graded in

    def feedback(self, kind: str, unit: str) -> Path:
        """The feedback page grading wrote for one notebook."""
        return self.root / "feedback" / kind.replace(" ", "-") / unit / f"{unit}.html"

    def result(self, kind: str, unit: str) -> dict:
        return self.results[(kind, unit)]

    def score(self, kind: str, unit: str) -> float:
        return self.result(kind, unit)["score"]


def graded_course(shared: Path) -> GradedCourse:
    """The grading, made in `shared` (a folder every process of the session sees) by the first
    process that asks; the others wait for it and read what it stored."""
    stored = shared / "graded-course.json"
    with open(shared / "graded-course.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stored.exists():
            stored.write_text(_grade(shared / "graded-course"), encoding="utf-8")
    return GradedCourse({(r["student"].replace("-", " "), r["unit"]): r
                         for r in json.loads(stored.read_text(encoding="utf-8"))}, shared / "graded-course")


def _grade(root: Path) -> str:
    for unit in course.units():
        for kind, nb in kinds(unit).items():
            path = root / "submitted" / kind.replace(" ", "-") / unit / f"{unit}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)
    out = subprocess.run([sys.executable, "-m", "grader", "grade", str(root / "submitted"), "--json",
                          "--course-dir", str(root), "--workers", "2"],
                         capture_output=True, text=True, timeout=1800, cwd=course.ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
