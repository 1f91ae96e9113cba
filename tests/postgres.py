"""A real PostgreSQL server for the tests: started once per test session (once per xdist worker)
in a fresh temporary folder, reached through a Unix socket only (no TCP port is opened), stopped
and deleted at the end.

Fixtures (tests/conftest.py exposes them):
  postgres_url          session: the URL of the server's database "course"
  postgres_database     function: a fresh, empty database on that server, for one test

Without the server binaries (initdb, pg_ctl) or SQLAlchemy's PostgreSQL driver, the tests that
use them are skipped, saying what to install."""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

USER = "grader"        # the database superuser initdb creates (no password: trust, socket only)
DATABASE = "course"
_TIMEOUT = 120         # seconds for initdb, for the server to start, and for it to stop
_counter = itertools.count(1)


def binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<v>/bin
    (which Debian does not put on PATH), the newest version first."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        folder = Path(initdb).resolve().parent   # the real folder, not /usr/bin's symlinks
        if (folder / "pg_ctl").exists():
            return folder
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True):
        if Path(folder, "initdb").exists() and Path(folder, "pg_ctl").exists():
            return Path(folder)
    return None


def _version(folder: str) -> tuple:
    name = Path(folder).parent.name
    return tuple(int(p) if p.isdigit() else 0 for p in name.split("."))


def _unprivileged() -> tuple[list[str], int, int]:
    """The command prefix that drops root to 'nobody' (initdb and postgres refuse to run as
    root), with that user's uid and gid; no prefix when not root."""
    if os.geteuid() != 0:
        return [], os.geteuid(), os.getegid()
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root, and there is no user 'nobody' to run PostgreSQL as")
    if shutil.which("setpriv"):
        return (["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"],
                nobody.pw_uid, nobody.pw_gid)
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"], nobody.pw_uid, nobody.pw_gid
    pytest.skip("running as root, and neither setpriv nor runuser is there to run PostgreSQL as 'nobody'")


def _driver_or_skip(url: str) -> None:
    """Skip unless SQLAlchemy's driver for this URL imports."""
    from sqlalchemy.engine import make_url

    dialect = make_url(url).get_dialect()
    try:
        dialect.import_dbapi()
    except ImportError as e:
        pytest.skip(f"SQLAlchemy's PostgreSQL driver ({dialect.driver}) is not installed: "
                    f"pip install -e '.[postgres]' ({e})")


class Server:
    """One running server in `folder`: data/, sockets/ and log."""

    def __init__(self, bin_dir: Path, folder: Path, as_user: list[str]):
        self.bin_dir, self.folder, self.as_user = bin_dir, folder, as_user
        self.data, self.sockets, self.log = folder / "data", folder / "sockets", folder / "log"

    def url(self, database: str = DATABASE, driver: str = "") -> str:
        """SQLAlchemy's URL; driver e.g. "psycopg2" (default: the one SQLAlchemy picks)."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{USER}@/{database}?host={self.sockets}"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """A server binary, run as the server's (unprivileged) user."""
        done = subprocess.run(self.as_user + [str(self.bin_dir / args[0]), *args[1:]], cwd=self.folder,
                              capture_output=True, text=True, timeout=_TIMEOUT)
        if check and done.returncode:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed ({done.returncode}):\n"
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}\n{log}")
        return done

    def start(self) -> None:
        self.run("initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "--encoding=UTF8",
                 "--locale=C", "--no-sync")
        # listen_addresses='' opens no TCP port at all; -k puts the socket (and its lock file)
        # in our folder. fsync off: a test database need not survive a power cut.
        self.run("pg_ctl", "start", "-D", str(self.data), "-w", "-t", str(_TIMEOUT), "-l", str(self.log),
                 "-o", f"-c listen_addresses='' -k {shlex.quote(str(self.sockets))} -c fsync=off "
                       "-c full_page_writes=off")

    def create_database(self, name: str) -> str:
        self.run("createdb", "-h", str(self.sockets), "-U", USER, name)
        return self.url(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", str(_TIMEOUT), check=False)


def server() -> Iterator[Server]:
    """Start a server in a fresh temporary folder; yield it; stop it and delete the folder."""
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql")
    _driver_or_skip("postgresql://")
    as_user, uid, gid = _unprivileged()
    # A Unix socket's path must stay under ~100 bytes: keep the folder short. As root, /tmp:
    # 'nobody' may not reach into $TMPDIR.
    base = tempfile.gettempdir()
    folder = Path(tempfile.mkdtemp(prefix="pg-", dir=base if len(base) <= 40 and not as_user else "/tmp"))
    pg = Server(bin_dir, folder, as_user)
    try:
        pg.sockets.mkdir()
        for path in (folder, pg.sockets):
            os.chown(path, uid, gid)
        pg.start()
        pg.create_database(DATABASE)
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    yield from server()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: Server) -> str:
    """postgresql://grader@/course?host=<socket folder>, on a server this session started."""
    return postgres_server.url()


@pytest.fixture
def postgres_database(postgres_server: Server) -> str:
    """The URL of a fresh database on the session's server, for one test."""
    return postgres_server.create_database(f"test_{os.getpid()}_{next(_counter)}")
