"""Grades out to an LMS: nbgrader's own `nbgrader export` command, run from the repository root
with grader.lms's exporters, writes the CSV files that Canvas and Moodle import, from a real
gradebook: every student and unit, a manual score replacing an automatic one, an unsubmitted unit
left empty, a Chinese name intact."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import scores

from grader import course, notebook
from grader.classroom.lms import number
from grader.grading import gradebook
from grader.grading.results import ExerciseResult, NotebookResult

# One worker runs the whole module, so its fixture (a graded gradebook) is built once.
pytestmark = pytest.mark.xdist_group("test_lms")

UNITS = ["01_dot_product", "02_softmax"]
# Each unit's grade ids and points, read from its source notebook: an exercise added to a unit
# changes what these tests expect, not the tests.
EXERCISES = {unit: [(e.grade_id, e.points) for e in notebook.exercises(notebook.read(course.source_notebook(unit)))]
             for unit in UNITS}
# Who earned what, exercise by exercise (by place): full marks where listed, 0 elsewhere.
EARNED = {("ann", "01_dot_product"): "all", ("ann", "02_softmax"): "all but the last",
          ("wang", "01_dot_product"): {0, 1}, ("cho", "02_softmax"): {1, 2}}
MANUAL = {("wang", "01_dot_product"): 0.5, ("cho", "02_softmax"): 2 / 3}   # given by hand for the first exercise


def earned(student: str, unit: str) -> list[float]:
    """The points the grader gave the student, exercise by exercise (before any manual grade)."""
    points = [p for _, p in EXERCISES[unit]]
    which = EARNED[student, unit]
    full = (set(range(len(points))) if which == "all" else set(range(len(points) - 1)) if which == "all but the last"
            else which)
    return [p if i in full else 0.0 for i, p in enumerate(points)]


def graded(student: str, unit: str) -> list[float]:
    """The points in the gradebook, a manual grade in place of the grader's for the first exercise."""
    points = earned(student, unit)
    if (student, unit) in MANUAL:
        points[0] = MANUAL[student, unit]
    return points


def _record(db_url: str, student: str, unit: str, points: list[float]) -> None:
    """What grading the student's notebook of the unit found: these points, exercise by exercise."""
    exercises = [ExerciseResult(grade_id, [], max_points, p, p == max_points)
                 for (grade_id, max_points), p in zip(EXERCISES[unit], points, strict=True)]
    gradebook.record(NotebookResult(f"submitted/{student}/{unit}/{unit}.ipynb", unit, student, exercises), db_url)


@pytest.fixture(scope="module")
def db_url(tmp_path_factory) -> str:
    """A class of three: ann did both units; 王小明 (wang) only unit 01, where an instructor gave
    0.5 by hand for an exercise the grader had given 1; cho, with no name on record (the grader
    gives the id as the last name), only unit 02, with a manual 2/3."""
    from nbgrader.api import Gradebook

    root = tmp_path_factory.mktemp("lms")
    url = f"sqlite:///{root / 'gradebook.db'}"
    gradebook.register_units(UNITS, root / "course", url)
    with Gradebook(url, course.COURSE_ID) as gb:
        gb.update_or_create_student("ann", first_name="Ann", last_name="Lee", email="ann@example.org",
                                    lms_user_id="101")
        gb.update_or_create_student("wang", first_name="小明", last_name="王", email="wang@example.cn",
                                    lms_user_id="102")
    for student, unit in EARNED:
        _record(url, student, unit, earned(student, unit))
    with Gradebook(url, course.COURSE_ID) as gb:  # what an instructor does in Formgrader
        for (student, unit), score in MANUAL.items():
            gb.find_grade(EXERCISES[unit][0][0], unit, unit, student).manual_score = score
        gb.db.commit()
    return url


def _export(db_url: str, tmp_path: Path, exporter: str, *options: str) -> list[list[str]]:
    """The rows of the CSV that `nbgrader export --exporter=grader.lms.<exporter>` writes, run as
    instructors run it: nbgrader's command, from the repository root (its nbgrader_config.py)."""
    dest = tmp_path / f"{exporter}.csv"
    nbgrader = Path(sys.executable).parent / "nbgrader"
    out = subprocess.run([str(nbgrader), "export", f"--exporter=grader.lms.{exporter}", "--to", str(dest),
                          f"--db={db_url}", *options], capture_output=True, text=True, timeout=120, cwd=course.ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    raw = dest.read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf")  # UTF-8 without a byte-order mark
    with open(dest, encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def total(student: str, unit: str) -> str:
    return number(sum(graded(student, unit))) if (student, unit) in EARNED else ""


def full(unit: str) -> str:
    return number(sum(p for _, p in EXERCISES[unit]))


def test_canvas_one_column_per_unit(db_url, tmp_path):
    rows = _export(db_url, tmp_path, "CanvasExport")
    assert rows == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_dot_product", "02_softmax"],
        ["Points Possible", "", "", "", "", full("01_dot_product"), full("02_softmax")],
        ["Lee, Ann", "101", "", "ann", "", total("ann", "01_dot_product"), total("ann", "02_softmax")],
        ["cho", "", "", "cho", "", "", total("cho", "02_softmax")],   # no name on record: the login; no unit 01
        ["王, 小明", "102", "", "wang", "", total("wang", "01_dot_product"), ""],   # the manual 0.5 replaced a 1
    ]
    assert total("wang", "01_dot_product") != number(sum(earned("wang", "01_dot_product")))
    # the same totals as the grader's own reading of the gradebook
    for unit, column in zip(UNITS, (5, 6)):
        assert {r[3]: float(r[column]) for r in rows[2:] if r[column]} == \
            pytest.approx(scores(db_url, unit), abs=0.005)


def test_canvas_one_column_per_exercise(db_url, tmp_path):
    rows = _export(db_url, tmp_path, "CanvasExport", "--CanvasExport.per_exercise=True")
    names = [f"{unit}/{grade_id}" for unit in UNITS for grade_id, _ in EXERCISES[unit]]
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *names]
    assert rows[1] == ["Points Possible", "", "", "", "", *(number(p) for u in UNITS for _, p in EXERCISES[u])]
    def cells(student: str) -> list[str]:
        return [number(p) if (student, unit) in EARNED else "" for unit in UNITS
                for p in (graded(student, unit) if (student, unit) in EARNED else [0] * len(EXERCISES[unit]))]

    assert {row[3]: row[5:] for row in rows[2:]} == {student: cells(student) for student in ("ann", "cho", "wang")}
    assert [row[0] for row in rows[2:]] == ["Lee, Ann", "cho", "王, 小明"]


def test_moodle(db_url, tmp_path):
    assert _export(db_url, tmp_path, "MoodleExport") == [
        ["First name", "Last name", "Username", "Email address", "ID number", "01_dot_product", "02_softmax"],
        ["Ann", "Lee", "ann", "ann@example.org", "101", total("ann", "01_dot_product"), total("ann", "02_softmax")],
        ["", "cho", "cho", "", "", "-", total("cho", "02_softmax")],   # no name on record: the id; "-": no grade
        ["小明", "王", "wang", "wang@example.cn", "102", total("wang", "01_dot_product"), "-"],
    ]
    # --LmsExport sets both exporters; nbgrader's --assignment and --student limit the export
    rows = _export(db_url, tmp_path, "MoodleExport", "--LmsExport.per_exercise=True",
                   "--assignment=01_dot_product", "--student=wang")
    assert rows == [["First name", "Last name", "Username", "Email address", "ID number",
                     *(f"01_dot_product/{grade_id}" for grade_id, _ in EXERCISES["01_dot_product"])],
                    ["小明", "王", "wang", "wang@example.cn", "102", *map(number, graded("wang", "01_dot_product"))]]


@pytest.mark.parametrize(("value", "written"), [(4.0, "4"), (3.5, "3.5"), (4.0000001, "4"), (2 / 3, "0.67"),
                                                (10.0, "10"), (0.0, "0"), (-1e-9, "0")])
def test_numbers_are_written_plainly(value, written):
    assert number(value) == written
