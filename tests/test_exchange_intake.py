"""nbgrader's collect through the class's exchange (grader/classroom/exchange.py) takes only what
the learner named by an inbound entry made: `nbgrader collect`, the real command, over an inbound/
where learners have left what a hostile learner can leave there (an entry in another's name, a
name that is no time, a link to the instructor's answers or to /dev/urandom, a FIFO, another's
file, a file over the limit, a timestamp.txt that is no time). Everyone else is collected.

The entries belong to the machine's own system accounts (daemon, lp, games, nobody), so the test
needs root, to give them away (CI runs as root), but makes no account."""
from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from grader import course
from grader.classroom import hub

UNIT = "01_dot_product"
EARLY, LATE = "2026-11-01 10:00:00.000000 UTC", "2026-11-02 10:00:00.000000 UTC"

pytestmark = [pytest.mark.system,
              pytest.mark.skipif(os.geteuid() != 0, reason="gives files to other accounts: needs root")]


def _account(name: str) -> int:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        pytest.skip(f"this machine has no account {name}")


def _entry(inbound: Path, owner: str, student: str, stamp: str, files: dict[str, str | None] | None = None) -> Path:
    """An inbound entry as `owner` would leave it, claiming to be `student`'s; a file whose text is
    None is left for the caller to make."""
    entry = inbound / f"{student}+{UNIT}+{stamp}+{os.urandom(4).hex()}"
    entry.mkdir()
    files = {f"{UNIT}.ipynb": _notebook(f"by {owner}"), "timestamp.txt": stamp, **(files or {})}
    for name, text in files.items():
        if text is not None:
            (entry / name).write_text(text)
    for path in (entry, *entry.iterdir()):
        os.lchown(path, _account(owner), -1)
    return entry


def _notebook(text: str) -> str:
    return nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)]))


def _course_folder(tmp_path: Path, exchange: Path, more: str = "") -> Path:
    """An instructor's course folder whose nbgrader settings are the class hub's, on `exchange`."""
    folder = tmp_path / "course"
    folder.mkdir()
    (folder / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(hub.HUB / 'learner' / 'nbgrader_config.py')!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(folder)!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n" + more)
    return folder


def _made(entry: Path) -> str:
    """When the system saw `entry` made, as collect writes it into timestamp.txt."""
    return datetime.fromtimestamp(entry.stat().st_ctime, UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _collected(course_folder: Path, student: str) -> Path:
    return course_folder / "submitted" / student / UNIT


def test_collect_takes_only_what_each_learner_made_and_goes_on_for_everyone_else(tmp_path):
    exchange = tmp_path / "exchange"
    inbound = exchange / course.COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    answers = tmp_path / "solutions.ipynb"   # stands for the instructor's answers, readable by the collector
    answers.write_text(_notebook("THE ANSWERS"))
    folder = _course_folder(tmp_path, exchange, "c.CourseDirectory.max_file_size = 100   # kB\n")

    _entry(inbound, "daemon", "daemon", EARLY)                        # an honest learner
    theirs = _entry(inbound, "nobody", "nobody", EARLY)               # another, whom daemon impersonates later
    _entry(inbound, "daemon", "nobody", LATE)
    (inbound / f"zz+{UNIT}+not-a-date+x").mkdir()                     # stopped nbgrader's collect for everyone
    (inbound / f"ghost+{UNIT}+{EARLY}+x").mkdir()                     # no such account
    links = _entry(inbound, "lp", "lp", EARLY, {f"{UNIT}.ipynb": None, "random.bin": None, "fifo": None,
                                                 "big.txt": "x" * 200_000, "theirs.txt": "planted",
                                                 "timestamp.txt": "not a time"})
    (links / f"{UNIT}.ipynb").symlink_to(answers)
    (links / "random.bin").symlink_to("/dev/urandom")
    os.mkfifo(links / "fifo")
    (links / "sub").symlink_to(tmp_path)
    for path in links.iterdir():
        os.lchown(path, _account("lp"), -1)
    os.chown(links / "theirs.txt", _account("games"), -1)

    # Entries that stopped collect for everyone after them, or slowed it down: folders nested 600
    # deep, names past the system's path limit, sparse files far over the limit; and a name of
    # terminal escapes. Each is one line, and collect goes on.
    deep = _entry(inbound, "games", "games", EARLY)
    nested = deep
    for _ in range(600):
        nested = nested / "d"
        nested.mkdir()
    long = _entry(inbound, "man", "man", EARLY)
    opened = os.open(long, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(20):   # each name relative to its open folder, as a learner's shell makes them
        os.mkdir("n" * 250, dir_fd=opened)
        opened, above = os.open("n" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=opened), opened
        os.close(above)
    os.close(opened)
    sparse = _entry(inbound, "mail", "mail", EARLY)
    for k in range(40):
        with open(sparse / f"data{k}.bin", "wb") as grown:
            grown.truncate(150 * 1024 * 1024)
    for entry in (deep, long, sparse):
        subprocess.run(["chown", "-R", str(os.stat(entry).st_uid), str(entry)], check=True)
    escaped = inbound / f"\r\x1b[2K\x1b[1A+{UNIT}+x+y"
    escaped.mkdir()

    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])   # nbgrader runs alembic
    done = subprocess.run([sys.executable, "-m", "nbgrader", "collect", UNIT, "--update"], cwd=folder,
                          env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]

    assert "by daemon" in (_collected(folder, "daemon") / f"{UNIT}.ipynb").read_text()
    nobody = _collected(folder, "nobody")   # their own earlier submission, not daemon's later one in their name
    assert "by nobody" in (nobody / f"{UNIT}.ipynb").read_text()
    assert (nobody / "timestamp.txt").read_text() == _made(theirs)
    assert "it claims to be nobody's but belongs to daemon" in log
    assert "not-a-date' is not a time" in log and "there is no account 'ghost'" in log

    taken = _collected(folder, "lp")
    assert sorted(p.name for p in taken.iterdir()) == ["timestamp.txt"], log[-3000:]
    # The time the system saw the entry made, never the one its name gives (a learner's to choose).
    assert (taken / "timestamp.txt").read_text() == _made(links) and EARLY[:10] not in _made(links)
    for name, why in ((f"{UNIT}.ipynb", "a symbolic link"), ("random.bin", "a symbolic link"),
                      ("sub", "a symbolic link"), ("fifo", "not a regular file"),
                      ("big.txt", "larger than the limit"), ("theirs.txt", "belongs to games")):
        assert any(name in line and why in line for line in log.splitlines()), (name, why, log[-3000:])
    assert "THE ANSWERS" not in json.dumps([p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()])
    assert not (folder / "submitted" / "ghost").exists() and not (folder / "submitted" / "zz").exists()

    assert "\x1b" not in log and "\\x1b[2K" in log   # the escapes shown, not sent to the terminal
    assert any("folders nested deeper than 16" in line for line in log.splitlines()), log[-3000:]
    assert any("longer than 1024 characters" in line for line in log.splitlines()), log[-3000:]
    assert "by games" in (_collected(folder, "games") / f"{UNIT}.ipynb").read_text()
    assert "by man" in (_collected(folder, "man") / f"{UNIT}.ipynb").read_text()
    assert "by mail" in (_collected(folder, "mail") / f"{UNIT}.ipynb").read_text()
    assert sum("larger than the limit" in line for line in log.splitlines()) >= 40
    assert not list((_collected(folder, "mail")).glob("data*.bin"))


def test_release_gives_each_learner_their_page_whatever_one_submission_holds(tmp_path):
    """`nbgrader release_feedback` over a class where one graded submission's secret is not text
    (a learner's hand-made entry) and one has none: each is one line, and every other learner
    gets their page, in their own folder, which nobody else can enter."""
    exchange = tmp_path / "exchange"
    course_folder = exchange / course.COURSE_ID
    (course_folder / "feedback").mkdir(parents=True)
    folder = _course_folder(tmp_path, exchange)
    secrets = {"daemon": b"ab" * 64, "games": b"\xff\xfe not text", "lp": None, "nobody": b"cd" * 64}
    for student, secret in secrets.items():
        graded = folder / "feedback" / student / UNIT
        graded.mkdir(parents=True)
        (graded / f"{UNIT}.html").write_text(f"<p>feedback of {student}</p>")
        if secret is not None:
            (graded / "submission_secret.txt").write_bytes(secret)
        own = course_folder / "feedback" / student
        own.mkdir()
        os.chown(own, _account(student), course_folder.stat().st_gid)
        own.chmod(0o2770)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run([sys.executable, "-m", "nbgrader", "release_feedback", UNIT], cwd=folder,
                          env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    for student in ("daemon", "nobody"):   # after the broken ones in the alphabet too
        [page] = (course_folder / "feedback" / student).glob("*.html")
        assert page.read_text() == f"<p>feedback of {student}</p>"
    assert "Feedback not released for games: its submission_secret.txt is not" in log, log[-3000:]
    assert "Feedback not released for lp: the submission has no submission_secret.txt" in log, log[-3000:]
