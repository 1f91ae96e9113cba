"""Grades land in nbgrader's gradebook one notebook at a time, on SQLite and on a real
PostgreSQL server (tests/postgres.py starts one); grading again keeps what an instructor gave
in Formgrader; several processes at once (as `grade --shard` runs do) lose nothing."""
from __future__ import annotations

import csv
import json
import multiprocessing
import os
import subprocess
import sys

import pytest
from helpers import scores
from reference import unit_exercises

from grader import course
from grader.grading import gradebook
from grader.grading.results import ExerciseResult, NotebookResult

UNIT = "01_dot_product"
DOT, SCORES, COSINE = "u01_dot_product_check", "u01_attention_scores_for_check", "u01_cosine_similarity_matrix_check"
POINTS = {e.grade_id: e.points for e in unit_exercises(UNIT)}   # read from the unit, not copied
TOTAL = sum(POINTS.values())


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.system)])
def db_url(request, tmp_path):
    """A fresh, empty gradebook: a SQLite file, or a new database on the session's server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gradebook.db'}"
    return request.getfixturevalue("postgres_database")


def result(student: str, *, wrong: set[str] = frozenset()) -> NotebookResult:
    """What grading a notebook of UNIT found: full points on every exercise but the `wrong` ones."""
    return NotebookResult(f"submitted/{student}/{UNIT}/{UNIT}.ipynb", UNIT, student,
                          [ExerciseResult(e.grade_id, [], e.points, 0.0 if e.grade_id in wrong else e.points,
                                          e.grade_id not in wrong, "wrong" if e.grade_id in wrong else "passed")
                           for e in unit_exercises(UNIT)])


def earned(wrong: set[str] = frozenset()) -> float:
    return TOTAL - sum(POINTS[w] for w in wrong)


def test_importing_the_gradebook_changes_no_environment_variable():
    script = ("import json, os; before = dict(os.environ); import grader.grading.gradebook; "
              "print(json.dumps(sorted(k for k in {**before, **os.environ} if before.get(k) != os.environ.get(k))))")
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PLATFORM_DIRS",)}
    env["PATH"] = "/usr/bin:/bin"   # this Python's folder not on it: what nbgrader_environment would add
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=course.ROOT,
                         env=env, timeout=120, check=True)
    assert json.loads(out.stdout) == []


def test_a_new_gradebook_carries_the_schema_version_that_alembic_names(tmp_path):
    """The course reads the head of nbgrader's migrations itself (course.nbgrader_environment)
    instead of running `alembic heads`: a new gradebook still carries what that command prints,
    which `nbgrader db upgrade` starts from."""
    import sqlite3

    from nbgrader.dbutil import _temp_alembic_ini

    with gradebook.opened(f"sqlite:///{tmp_path / 'gradebook.db'}"):
        pass
    with _temp_alembic_ini("sqlite:///unused.db") as ini:
        heads = subprocess.run(["alembic", "-c", ini, "heads"], capture_output=True, text=True, check=True).stdout
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        [(stored,)] = db.execute("SELECT version_num FROM alembic_version").fetchall()
    assert heads.split()[0] == stored


def test_the_default_gradebook_is_the_course_folders(tmp_path):
    from grader.grading import settings

    assert course.gradebook_url(tmp_path) == f"sqlite:///{tmp_path / 'gradebook.db'}"
    assert settings.Settings(settings.Limits(), 1).gradebook_url(tmp_path) == course.gradebook_url(tmp_path)
    assert settings.Settings(settings.Limits(), 1, "postgresql://db/class").gradebook_url(tmp_path) == \
        "postgresql://db/class"


def test_the_unit_has_the_exercises_these_tests_name():
    assert {DOT, SCORES, COSINE} <= set(POINTS), POINTS


def test_record_regrade_keeps_manual_grades_and_comments_and_export(db_url, tmp_path):
    from nbgrader.api import Gradebook

    gradebook.register_units([UNIT], tmp_path / "course", db_url)
    gradebook.register_units([UNIT], tmp_path / "course", db_url)  # a second time changes nothing
    only_scores = set(POINTS) - {SCORES}
    gradebook.record(result("ann"), db_url)
    gradebook.record(result("bob", wrong=only_scores), db_url)
    assert scores(db_url, UNIT) == {"ann": TOTAL, "bob": POINTS[SCORES]}

    with Gradebook(db_url, course.COURSE_ID) as gb:  # what an instructor does in Formgrader
        grade = gb.find_grade(DOT, UNIT, UNIT, "bob")
        assert (grade.auto_score, grade.manual_score, grade.needs_manual_grade) == (0.0, None, False)
        grade.manual_score = 0.5
        gb.find_comment("u01_dot_product", UNIT, UNIT, "bob").manual_comment = "Nearly: see the sum."
        gb.db.commit()
    assert scores(db_url, UNIT) == {"ann": TOTAL, "bob": POINTS[SCORES] + 0.5}  # the manual score counts

    gradebook.record(result("bob", wrong={DOT}), db_url)  # grading again, e.g. after a fix
    with Gradebook(db_url, course.COURSE_ID) as gb:
        grade = gb.find_grade(DOT, UNIT, UNIT, "bob")
        assert (grade.auto_score, grade.manual_score, grade.score) == (0.0, 0.5, 0.5)
        assert grade.needs_manual_grade  # as nbgrader's autograde flags it: a manual score to look at again
        assert gb.find_comment("u01_dot_product", UNIT, UNIT, "bob").manual_comment == "Nearly: see the sum."
        cosine = gb.find_grade(COSINE, UNIT, UNIT, "bob")
        assert (cosine.auto_score, cosine.manual_score, cosine.score) == (POINTS[COSINE], None, POINTS[COSINE])
        assert not gb.find_grade(DOT, UNIT, UNIT, "ann").needs_manual_grade
    assert scores(db_url, UNIT) == {"ann": TOTAL, "bob": earned({DOT}) + 0.5}

    gradebook.export_csv(db_url, tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"ann", "bob"}
    assert {s: (row["assignment"], float(row["score"]), float(row["max_score"])) for s, row in rows.items()} == \
        {"ann": (UNIT, TOTAL, TOTAL), "bob": (UNIT, earned({DOT}) + 0.5, TOTAL)}


def _shard(db_url: str, course_root: str, students: list[str]) -> None:
    """One `grade --shard` process: register the unit, then record each of its students."""
    from pathlib import Path

    gradebook.register_units([UNIT], Path(course_root), db_url)
    for n, student in enumerate(students):
        gradebook.record(result(student, wrong=_wrong(n)), db_url)


def _wrong(n: int) -> set[str]:
    """The n-th student of a shard gets every other exercise right or wrong: SCORES."""
    return set() if n % 2 else {SCORES}


def test_a_new_student_gets_a_name_formgrader_can_show_and_a_roster_name_is_kept(tmp_path):
    """Formgrader lists students as "last, first": "None, None" for one nobody named. A student
    the grader adds gets their account's full name where the machine has the account (the hub's
    case: tests/test_hub.py), else their id as the last name; names an instructor gave are kept."""
    from nbgrader.api import Gradebook

    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    gradebook.register_units([UNIT], tmp_path / "course", db_url)
    with Gradebook(db_url, course.COURSE_ID) as gb:   # as nbgrader db student import adds a roster
        gb.update_or_create_student("ann", first_name="Ann", last_name="Lee")
    for student in ("ann", "no-such-account-x9"):
        gradebook.record(result(student), db_url)
    with Gradebook(db_url, course.COURSE_ID) as gb:
        names = {s.id: (s.first_name, s.last_name) for s in gb.students}
    assert names == {"ann": ("Ann", "Lee"), "no-such-account-x9": ("", "no-such-account-x9")}


def test_several_processes_at_once_lose_nothing(db_url, tmp_path):
    """Four processes start on an empty gradebook at once, each registers the unit (only one
    may create the tables and cells) and records five students; every grade lands, intact."""
    shards = [[f"s{w}_{i}" for i in range(5)] for w in range(4)]
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_shard, args=(db_url, str(tmp_path / f"course{w}"), students))
               for w, students in enumerate(shards)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    assert [w.exitcode for w in workers] == [0] * len(workers)

    expected = {s: earned(_wrong(n)) for students in shards for n, s in enumerate(students)}
    assert scores(db_url, UNIT) == expected

    from nbgrader.api import Gradebook

    with Gradebook(db_url, course.COURSE_ID) as gb:
        assert len(gb.assignments) == 1 and len(gb.find_assignment(UNIT).notebooks) == 1
        assert sorted(c.name for c in gb.find_notebook(UNIT, UNIT).grade_cells) == sorted(POINTS)
        assert sorted(s.id for s in gb.students) == sorted(expected)
        for students in shards:
            for n, student in enumerate(students):
                submission = gb.find_submission_notebook(UNIT, UNIT, student)
                assert sorted((g.name, g.auto_score) for g in submission.grades) == \
                    sorted((g, 0.0 if g in _wrong(n) else p) for g, p in POINTS.items()), student


@pytest.mark.system
@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_either_postgres_driver_reaches_the_gradebook(driver, postgres_database, tmp_path):
    """pyproject's postgres extra installs both drivers SQLAlchemy may pick for postgresql://
    (psycopg 3 from SQLAlchemy 2.1, psycopg2 before); either one keeps the gradebook."""
    pytest.importorskip(driver, reason=f"{driver} is not installed: pip install -e '.[postgres]'")
    db_url = postgres_database.replace("postgresql://", f"postgresql+{driver}://", 1)
    gradebook.register_units([UNIT], tmp_path / "course", db_url)
    gradebook.record(result("ann", wrong={SCORES}), db_url)
    assert scores(db_url, UNIT) == {"ann": earned({SCORES})}
