"""Fixtures shared by the tests: a real PostgreSQL server (tests/postgres.py), and the learner's
progress file kept out of the repository."""
from pathlib import Path

import pytest
from postgres import postgres_database, postgres_server, postgres_url  # noqa: F401  (pytest fixtures)


@pytest.fixture(autouse=True)
def _no_progress_file_in_the_repository(monkeypatch, tmp_path_factory):
    """Tests that run self-checks from the repository's root keep the learner's progress file
    (grader.checks.progress) in a temporary folder instead; tests that choose a folder keep it there."""
    from grader.checks import progress

    real = progress.progress_file
    root = Path(__file__).resolve().parent.parent

    def progress_file(folder=None):
        path = real(folder)
        return tmp_path_factory.getbasetemp() / progress.FILE if path.parent == root else path

    monkeypatch.setattr(progress, "progress_file", progress_file)


@pytest.fixture(scope="session")
def course_graded(tmp_path_factory, worker_id):
    """Every unit's reference and blank notebook (and a few catalogued mistakes) graded once for
    the whole session, by whichever pytest-xdist worker asks first (tests/graded.py)."""
    from graded import graded_course

    base = tmp_path_factory.getbasetemp()
    return graded_course(base if worker_id == "master" else base.parent)
