"""A real PostgreSQL server for the tests, started in a temporary folder and reached through a
Unix socket only (no TCP port is opened)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest


def _binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<v>/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent  # beside the real initdb: createdb too
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "initdb").exists() and Path(folder, "pg_ctl").exists():
            return Path(folder)
    return None


def server() -> Iterator[str]:
    """Start a server; yield its SQLAlchemy URL; stop it and delete its files."""
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql")
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is missing: pip install -e '.[postgres]'")
    folder = Path(tempfile.mkdtemp(prefix="pg-"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        for path in (folder, sockets):
            os.chown(path, 65534, 65534)
    user = "grader"

    def run(*args: str) -> None:
        subprocess.run(as_user + list(args), check=True, capture_output=True, timeout=120)

    run(str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--auth=trust", "--no-sync")
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(folder / "log"),
        "-o", f"-c listen_addresses='' -k {sockets} -c fsync=off", "start")
    try:
        run(str(bin_dir / "createdb"), "-h", str(sockets), "-U", user, "course")
        yield f"postgresql://{user}@/course?host={sockets}"
    finally:
        subprocess.run(as_user + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)
