"""The class hub's checks, before anything is installed or started: `./course hub` as an ordinary
account, or with a Python other accounts cannot run, stops at once with what to do (it would
otherwise install for minutes first), as does a .venv made from such a Python, named for
deletion; the exchange's course folder made by anyone but root or an
instructor (as a learner could under an exchange writable by all) stops the hub with its owner named.

Needs root (to act as another account); skipped otherwise."""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import accounts
import pytest

from grader import course
from grader.classroom import hub

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("runuser"),
                                reason="needs root, to act as another account")


@pytest.fixture
def open_folder():
    """A folder every account can enter (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="course-hub-checks-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _course_script(folder: Path) -> Path:
    """The course's launcher alone in a folder every account can enter."""
    shutil.copy(ROOT / "course", folder / "course")
    return folder / "course"


def _private_python(tmp_path: Path) -> Path:
    """A folder only root can enter, holding python3 (as pyenv's under /root is)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python3").symlink_to(os.path.realpath(sys.executable))
    return private


def test_an_ordinary_account_is_told_to_run_the_hub_as_root_before_anything_is_installed(open_folder):
    script = _course_script(open_folder)
    done = subprocess.run(["runuser", "-u", "nobody", "--", str(script), "hub"], capture_output=True, text=True,
                          timeout=60, cwd="/")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "run ./course hub as root" in done.stderr
    assert not (script.parent / ".venv").exists()


def test_a_python_other_accounts_cannot_run_is_named_before_anything_is_installed(open_folder, tmp_path):
    script = _course_script(open_folder)
    private = _private_python(tmp_path)
    done = subprocess.run([str(script), "hub"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": str(private / "python3")})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"other accounts cannot run {private / 'python3'}" in done.stderr
    assert not (script.parent / ".venv").exists()


def test_python3_is_resolved_on_roots_path_before_hub_add_installs_anything(open_folder, tmp_path):
    """`./course hub add` without PYTHON: python3 as root's PATH finds it (pyenv's, under a private
    /root, say), not as another account's PATH would."""
    script = _course_script(open_folder)
    private = _private_python(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    done = subprocess.run([str(script), "hub", "add", "someone"], capture_output=True, text=True, timeout=60,
                          env={**env, "PATH": f"{private}:{env.get('PATH', '/usr/bin:/bin')}"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"other accounts cannot run {private / 'python3'}" in done.stderr
    assert "PYTHON=/usr/bin/python3" in done.stderr
    assert not (script.parent / ".venv").exists()


def test_a_venv_made_from_a_python_other_accounts_cannot_run_is_named_for_deletion(open_folder, tmp_path):
    script = _course_script(open_folder)
    private = _private_python(tmp_path)
    venv = script.parent / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(private / "python3")
    (venv / "pyvenv.cfg").write_text(f"home = {private}\nexecutable = {private / 'python3'}\n")
    done = subprocess.run([str(script), "hub"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": "/usr/bin/python3"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{venv} was made from {private / 'python3'}" in done.stderr and f"rm -rf {venv}" in done.stderr
    assert sorted(path.name for path in venv.iterdir()) == ["bin", "pyvenv.cfg"]   # nothing installed


@pytest.mark.xdist_group("end-to-end")   # makes the class's groups, as the class tests do
def test_a_course_folder_in_the_exchange_made_by_another_account_stops_the_hub(tmp_path):
    state = tmp_path / "state"
    folder = hub.exchange(state) / course.COURSE_ID
    folder.mkdir(parents=True)
    nobody = subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True, check=True).stdout.strip()
    os.chown(folder, int(nobody), -1)
    with pytest.raises(hub.HubProblem, match="belongs to nobody, who is not an instructor"):
        hub.prepare_exchange(state)
    assert folder.is_dir()   # left for the instructor to look at


@pytest.mark.xdist_group("end-to-end")   # makes the class's groups, as the class tests do
def test_the_exchange_root_is_roots_and_the_course_folder_goes_to_the_first_instructor(tmp_path):
    """...shared by the teaching team: their group, setgid, as nbgrader's `groupshared` has it."""
    state = tmp_path / "state"
    folder = hub.prepare_exchange(state)
    teachers = hub.members(hub.INSTRUCTORS)   # another test's class may have one now
    owner = pwd.getpwnam(teachers[0]).pw_uid if teachers else 0
    assert _owner_mode(hub.exchange(state)) == (0, 0, 0o755)
    assert _owner_mode(folder) == (owner, grp.getgrnam(hub.INSTRUCTORS).gr_gid, 0o2775)


@pytest.mark.system
@pytest.mark.xdist_group("end-to-end")   # it makes accounts in the class's group, as the class tests do
def test_each_learner_gets_a_feedback_folder_of_their_own_and_inbound_is_made_closed(tmp_path):
    """feedback/ unlistable; each learner's folder theirs, in the instructors' group, setgid, closed
    to everyone else (a learner who shares their own group with others too); inbound/ is the
    instructor's, sticky, made before nbgrader would make it (see hub.prepare_exchange)."""
    groups_before = {g.gr_name for g in grp.getgrall()}
    own = accounts.make("fbown", groups=(hub.LEARNERS,))
    sharing = accounts.make("fbshare", groups=(hub.LEARNERS,))
    try:
        subprocess.run(["usermod", "-g", hub.LEARNERS, sharing.name], check=True)   # one group for all
        folder = hub.prepare_exchange(tmp_path / "state")
        feedback, inbound = folder / "feedback", folder / "inbound"
        team = grp.getgrnam(hub.INSTRUCTORS).gr_gid
        assert _owner_mode(feedback) == (0, 0, 0o711)
        assert _owner_mode(inbound) == (folder.stat().st_uid, team, 0o3773)
        for learner in (own, sharing):
            assert _owner_mode(feedback / learner.name) == (pwd.getpwnam(learner.name).pw_uid, team, 0o2770)
        (feedback / own.name).chmod(0o777)   # changed by hand: put back at the next start
        hub.prepare_exchange(tmp_path / "state")
        assert _owner_mode(feedback / own.name)[2] == 0o2770
    finally:
        for account in (own, sharing):
            accounts.remove(account)
        for group in {own.name, sharing.name, hub.LEARNERS, hub.INSTRUCTORS} - groups_before:
            subprocess.run(["groupdel", group], capture_output=True)


def _owner_mode(path: Path) -> tuple[int, int, int]:
    status = path.stat()
    return status.st_uid, status.st_gid, status.st_mode & 0o7777
