"""Grades into nbgrader's gradebook (SQLite, or any database SQLAlchemy reaches, e.g. PostgreSQL),
one notebook at a time, as soon as it is graded."""
from __future__ import annotations

import tempfile
from pathlib import Path

from . import course
from .results import NotebookResult

course.nbgrader_environment()


def register_units(units: list[str], course_root: Path, db_url: str) -> None:
    """Record each unit's graded cells in the gradebook (nbgrader generate_assignment), once."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course.COURSE_ID) as gb:
        def known(unit: str) -> bool:
            try:
                return bool(gb.find_assignment(unit).notebooks)
            except MissingEntry:
                return False
        missing = [unit for unit in units if not known(unit)]
    if not missing:
        return
    with tempfile.TemporaryDirectory() as release_tmp:
        api = course.nbgrader_api(course_root, release_dir=Path(release_tmp), db_url=db_url)
        for unit in missing:
            outcome = api.generate_assignment(unit, force=True)
            if not outcome["success"]:
                raise RuntimeError(f"could not record {unit} in the gradebook {db_url}: {outcome['log'][-500:]}")


def record(result: NotebookResult, db_url: str) -> None:
    """Write one notebook's automatic scores. Manual scores and comments given in Formgrader
    live in other columns and are kept; grading again overwrites only the automatic scores."""
    from nbgrader.api import Gradebook

    if not (result.unit and result.student):
        return
    with Gradebook(db_url, course.COURSE_ID) as gb:
        gb.update_or_create_student(result.student)
        gb.update_or_create_submission(result.unit, result.student)
        for exercise in result.exercises:
            gb.find_grade(exercise.grade_id, result.unit, result.unit, result.student).auto_score = exercise.points
        gb.db.commit()


def scores(db_url: str, unit: str) -> dict[str, float]:
    """{student: total score} of one unit, as the gradebook has it."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course.COURSE_ID) as gb:
        try:
            return {s.student.id: s.score for s in gb.find_assignment(unit).submissions}
        except MissingEntry:
            return {}


def export_csv(db_url: str, path: Path) -> None:
    """nbgrader's own CSV export of every grade."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with Gradebook(db_url, course.COURSE_ID) as gb:
        CsvExportPlugin(to=str(path)).export(gb)
