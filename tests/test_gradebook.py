"""Grades land in nbgrader's gradebook one notebook at a time, on SQLite and on a real
PostgreSQL server; grading again keeps manual grades; parallel writers lose nothing."""
from __future__ import annotations

import multiprocessing

import pytest

import postgres
from grader import course, gradebook, notebook
from grader.results import ExerciseResult, NotebookResult

UNIT = "01_dot_product"


@pytest.fixture(scope="module")
def postgres_url():
    yield from postgres.server()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gradebook.db'}"
    return request.getfixturevalue("postgres_url")


def result(student: str, points: list[float]) -> NotebookResult:
    exercises = notebook.exercises(notebook.read(course.source_notebook(UNIT)))
    return NotebookResult(f"{UNIT}.ipynb", UNIT, student,
                          [ExerciseResult(e.grade_id, [], e.points, p, p == e.points)
                           for e, p in zip(exercises, points)])


def _record_many(db_url: str, students: list[str]) -> None:
    for student in students:
        gradebook.record(result(student, [1, 1, 0, 2]), db_url)


def test_record_regrade_keeps_manual_grades_and_export(db_url, tmp_path):
    from nbgrader.api import Gradebook

    gradebook.register_units([UNIT], tmp_path / "course", db_url)
    gradebook.register_units([UNIT], tmp_path / "course", db_url)  # a second time changes nothing
    gradebook.record(result("ann", [1, 1, 1, 2]), db_url)
    gradebook.record(result("bob", [0, 1, 0, 0]), db_url)
    assert gradebook.scores(db_url, UNIT) == {"ann": 5.0, "bob": 1.0}

    with Gradebook(db_url, course.COURSE_ID) as gb:  # what an instructor does in Formgrader
        grade = gb.find_grade("u01_dot_product_check", UNIT, UNIT, "bob")
        grade.manual_score = 1.0
        gb.db.commit()
    gradebook.record(result("bob", [0, 1, 1, 0]), db_url)
    with Gradebook(db_url, course.COURSE_ID) as gb:
        grade = gb.find_grade("u01_dot_product_check", UNIT, UNIT, "bob")
        assert (grade.auto_score, grade.manual_score) == (0.0, 1.0)
    assert gradebook.scores(db_url, UNIT) == {"ann": 5.0, "bob": 3.0}

    gradebook.export_csv(db_url, tmp_path / "grades.csv")
    text = (tmp_path / "grades.csv").read_text()
    assert "ann" in text and "bob" in text


def test_parallel_writers_lose_nothing(db_url, tmp_path):
    gradebook.register_units([UNIT], tmp_path / "course", db_url)
    batches = [[f"s{w}_{i}" for i in range(5)] for w in range(4)]
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_record_many, args=(db_url, batch)) for batch in batches]
    for w in workers:
        w.start()
    for w in workers:
        w.join(180)
    assert all(w.exitcode == 0 for w in workers)
    scores = gradebook.scores(db_url, UNIT)
    assert all(scores.get(s) == 4.0 for batch in batches for s in batch), scores
