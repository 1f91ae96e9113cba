"""Fixtures shared by the tests: a real PostgreSQL server (tests/postgres.py)."""
from postgres import postgres_database, postgres_server, postgres_url  # noqa: F401  (pytest fixtures)
