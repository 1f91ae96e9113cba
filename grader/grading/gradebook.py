"""Grades into nbgrader's gradebook (SQLite, or any database SQLAlchemy reaches, e.g. PostgreSQL),
one notebook at a time, as soon as it is graded."""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from .. import course
from .results import NotebookResult

# The key of the PostgreSQL advisory lock that register_units holds (any fixed 64-bit number).
_SETUP_LOCK = int.from_bytes(hashlib.sha256(b"grader.gradebook.register_units").digest()[:8], "big", signed=True)


def opened(db_url: str):
    """nbgrader's Gradebook of the course at `db_url`, to use in a `with` block. nbgrader runs the
    `alembic` command on a new database: it is found beside this Python (set up here, not on import)."""
    course.nbgrader_environment()
    from nbgrader.api import Gradebook

    return Gradebook(db_url, course.COURSE_ID)


def register_units(units: list[str], course_root: Path, db_url: str) -> None:
    """Record each unit's graded cells in the gradebook (nbgrader generate_assignment), once.
    Safe to call from several processes at once (e.g. `grade --shard` runs sharing a gradebook):
    one at a time creates the tables and records the units, the others then find them there."""
    from nbgrader.api import MissingEntry

    with _one_process_at_a_time(db_url):
        with opened(db_url) as gb:
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


@contextlib.contextmanager
def _one_process_at_a_time(db_url: str) -> Iterator[None]:
    """Hold an exclusive lock on the gradebook's setup. nbgrader creates tables and records
    cells with check-then-insert steps, which fail (duplicate table, UNIQUE constraint) when
    two processes do them at once. PostgreSQL: a session advisory lock in that database;
    SQLite: an flock on the folder that holds the database file (no lock file to leave behind)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    url = make_url(db_url)
    backend = url.get_backend_name()
    if backend == "postgresql":
        engine = create_engine(url, poolclass=NullPool)
        try:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _SETUP_LOCK})
                try:
                    yield
                finally:
                    with contextlib.suppress(Exception):  # closing the connection releases it too
                        conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _SETUP_LOCK})
        finally:
            engine.dispose()
    elif backend == "sqlite" and url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        try:
            import fcntl
            folder = os.open(Path(url.database).resolve().parent, os.O_RDONLY)
        except (ImportError, OSError):  # Windows, or no folder yet (then nbgrader fails anyway)
            folder = None
        try:
            if folder is not None:
                fcntl.flock(folder, fcntl.LOCK_EX)  # released when closed, or when the process ends
            yield
        finally:
            if folder is not None:
                os.close(folder)
    else:  # another database: no lock (run one register_units before starting parallel graders)
        yield


def record(result: NotebookResult, db_url: str, timestamp=None) -> None:
    """Write one notebook's automatic scores (grading workers call it at once), and when it was
    submitted (a datetime from nbgrader's timestamp.txt; Formgrader shows lateness from it). Manual
    scores and comments given in Formgrader live in other columns and are kept; grading again
    overwrites only the automatic scores."""
    if not (result.unit and result.student):
        return
    # one process at a time: nbgrader creates a new student or submission by check-then-insert
    with _one_process_at_a_time(db_url), opened(db_url) as gb, warnings.catch_warnings():
        # nbgrader's update_or_create_submission adds a submission the way SQLAlchemy 2 warns
        # about (three SAWarnings per notebook, in every instructor's terminal); it is stored all the same
        warnings.filterwarnings("ignore", message="Object of type <Submitted", module="nbgrader")
        student = gb.update_or_create_student(result.student)
        if student.first_name is None and student.last_name is None:   # Formgrader would show "None, None"
            for key, value in account_names(result.student).items():
                setattr(student, key, value)
        gb.update_or_create_submission(result.unit, result.student,
                                       **({"timestamp": timestamp} if timestamp else {}))
        for exercise in result.exercises:
            grade = gb.find_grade(exercise.grade_id, result.unit, result.unit, result.student)
            grade.auto_score = exercise.points
            # as nbgrader's autograde does: a manual score given before asks for a look again
            grade.needs_manual_grade = grade.manual_score is not None
        gb.db.commit()


def account_names(student: str) -> dict[str, str]:
    """A student's first and last name for the gradebook (Formgrader shows "last, first"): from
    the full name of the Unix account of that name where it has one (`chfn -f "Ann Lee" ann`), as
    on the class hub; otherwise the student's id as the last name."""
    try:
        import pwd

        full = pwd.getpwnam(student).pw_gecos.split(",")[0].strip()
    except (ImportError, KeyError):
        full = ""
    first, _, last = full.rpartition(" ")
    return {"first_name": first, "last_name": last or student}


def export_csv(db_url: str, path: Path) -> None:
    """nbgrader's own CSV export of every grade, written whole or not at all: the shards of a
    class each write it when they finish, into the same folder."""
    from nbgrader.plugins import CsvExportPlugin

    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with opened(db_url) as gb:
            CsvExportPlugin(to=str(partial)).export(gb)
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
