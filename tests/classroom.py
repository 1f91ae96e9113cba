"""A class on this machine for the tests: an exchange, an instructor and learners made by
`python -m grader hub add` (real Unix accounts), and, on request, the hub itself."""
from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import accounts

from grader import hub

UNIT = "01_dot_product"


@dataclass
class Classroom:
    state: Path
    instructor: accounts.Account
    learners: list[accounts.Account]

    @property
    def course(self) -> Path:
        return self.instructor.home / hub.COURSE_FOLDER

    @property
    def exchange(self) -> Path:
        return hub.exchange(self.state)

    def instructor_runs(self, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
        """`python ARGS` as the instructor, in their course folder."""
        return self.instructor.run(sys.executable, *args, cwd=self.course, timeout=timeout)

    def in_terminal(self, learner: accounts.Account, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        """`python ARGS` as a learner, in a terminal of their server on the hub (its environment)."""
        return learner.run(sys.executable, *args, timeout=timeout, env=hub.server_environment(learner.name, self.state))

    def learner_notebook(self, learner: accounts.Account) -> Path:
        return learner.home / UNIT / f"{UNIT}.ipynb"

    def give(self, learner: accounts.Account, path: Path, data: str) -> None:
        """Write `path` in a learner's home as theirs."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data, encoding="utf-8")
        for made in (path.parent, path):
            shutil.chown(made, learner.name, learner.name)


def why_not() -> str | None:
    """Why no class can be made here (None: it can)."""
    reason = accounts.why_not()
    if reason:
        return reason
    prefix, how = accounts.view()
    return how if prefix is None else None


def _add(names: list[str], state: Path, instructor: bool) -> list[accounts.Account]:
    prefix, _ = accounts.view()
    made = subprocess.run([*prefix, sys.executable, "-m", "grader", "hub", "add", *names, "--state", str(state),
                           *(["--instructor"] if instructor else [])], capture_output=True, text=True, check=True)
    passwords = {line.split("\t")[0]: line.split("\t")[2].removeprefix("password ")
                 for line in made.stdout.splitlines() if line.count("\t") == 2}
    return [accounts.Account(name, passwords[name], Path(pwd.getpwnam(name).pw_dir)) for name in names]


@contextmanager
def classroom(learners: int) -> Iterator[Classroom]:
    """An exchange, an instructor with a course folder and `learners` learners; all removed after."""
    groups_before = {g.gr_name for g in grp.getgrall()}
    state = Path(tempfile.mkdtemp(prefix="course-class-", dir="/tmp"))
    state.chmod(0o755)
    tag = secrets.token_hex(2)
    made: list[accounts.Account] = []
    try:
        made += _add([f"teach{tag}"], state, instructor=True)
        made += _add([f"learner{tag}x{k}" for k in range(learners)], state, instructor=False)
        yield Classroom(state, made[0], made[1:])
    finally:
        for account in made:
            accounts.remove(account)
        for group in (hub.LEARNERS, hub.INSTRUCTORS):
            if group not in groups_before:
                subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


def _free_ports(count: int) -> int:
    """A port P such that P ... P+count-1 are free now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            start = probe.getsockname()[1]
        if start + count < 65536 and all(_free(start + k) for k in range(count)):
            return start
    raise RuntimeError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@contextmanager
def running_hub(room: Classroom, timeout: float = 90) -> Iterator[str]:
    """`python -m grader hub` on free ports: its URL while it runs."""
    port = _free_ports(3)   # the hub's public port, its API and the proxy's API
    prefix, _ = accounts.view()
    log = room.state / "hub.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "grader", "hub", "--port", str(port), "--ip",
                                 "127.0.0.1", "--state", str(room.state)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/hub/login", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
