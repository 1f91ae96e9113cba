"""A class on one machine: JupyterHub with the course's settings, and the class's accounts.

    sudo ./course hub [zh] [--port 8000] [--ip ADDRESS] [--state /srv/attention-course]
    sudo ./course hub add NAME ... [--instructor]

`hub` prepares nbgrader's exchange (a folder everyone may write, as nbgrader's documentation
sets it up) and starts JupyterHub with hub/jupyterhub_config.py; configurable-http-proxy, from
npm, carries the traffic. `hub add` makes each NAME a Unix account in the class's group, with a
private home and a password printed once: learners log in with it, and each server runs as its
owner. An instructor also gets ~/attention-course, the course folder that nbgrader's commands,
`python -m grader grade` and Formgrader share. Everything runs as root, as JupyterHub must to
start servers as other users; grading does not: the instructor grades as themselves.
"""
from __future__ import annotations

import argparse
import grp
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import course

HUB = course.ROOT / "hub"
STATE = Path("/srv/attention-course")
LEARNERS, INSTRUCTORS = "attention-learners", "attention-instructors"
COURSE_FOLDER = "attention-course"


@dataclass(frozen=True)
class Account:
    name: str
    password: str | None      # None: the account existed and keeps its password
    instructor: bool


def exchange(state: Path) -> Path:
    return state / "exchange"


def prepare(state: Path) -> None:
    """The hub's private folder and the class's exchange. nbgrader wants the exchange's root
    writable by all (mode 777: each learner writes their submission into inbound/, which
    nbgrader makes listable by the instructor only)."""
    (state / "hub").mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o755)
    os.chmod(state / "hub", 0o700)
    exchange(state).mkdir(exist_ok=True)
    os.chmod(exchange(state), 0o777)
    for group in (LEARNERS, INSTRUCTORS):
        _group(group)


def add(name: str, instructor: bool, state: Path) -> Account:
    """Make `name` an account of the class (a new one gets a random password), in its group."""
    group = INSTRUCTORS if instructor else LEARNERS
    _group(group)
    try:
        pwd.getpwnam(name)
        password = None
        subprocess.run(["usermod", "--append", "--groups", group, name], check=True)
    except KeyError:
        password = secrets.token_urlsafe(9)
        # HOME_MODE 0700: a learner cannot read another's home (Debian's default is 0755)
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--key", "HOME_MODE=0700",
                        "--groups", group, name], check=True)
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    if instructor:
        course_folder(name, state)
    return Account(name, password, instructor)


def course_folder(name: str, state: Path) -> Path:
    """~NAME/attention-course: nbgrader's course folder for an instructor, owned by them. Its
    nbgrader_config.py names the course's settings and the exchange, so nbgrader's commands
    work from there in a terminal, inside the hub or not; solutions/ and notebooks/ are the
    course's own, read-only (made by `python -m grader release`)."""
    user = pwd.getpwnam(name)
    folder = Path(user.pw_dir) / COURSE_FOLDER
    folder.mkdir(exist_ok=True)
    for edition in ("solutions", "notebooks", "solutions-zh", "notebooks-zh"):
        link = folder / edition
        if not link.is_symlink():
            link.symlink_to(course.ROOT / edition)
    (folder / "nbgrader_config.py").write_text(
        '"""nbgrader\'s settings for this course folder (written by `./course hub add --instructor`)."""\n'
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(HUB / 'learner' / 'nbgrader_config.py')!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(folder)!r}\n"
        f"c.Exchange.root = {str(exchange(state))!r}\n")
    for path in (folder, *folder.iterdir()):
        os.lchown(path, user.pw_uid, user.pw_gid)
    return folder


def is_instructor(name: str) -> bool:
    try:
        group = grp.getgrnam(INSTRUCTORS)
        return name in group.gr_mem or pwd.getpwnam(name).pw_gid == group.gr_gid
    except KeyError:
        return False


def server_environment(name: str, state: Path) -> dict[str, str]:
    """What the hub gives the server of `name`, and so its terminals: the course's Jupyter
    settings (a learner's as `./course lab` has them; an instructor's with Formgrader), the
    class's exchange, and this environment's commands (nbgrader, python) on PATH."""
    learner = [HUB / "learner", course.ROOT / "lab" / "learner"]
    paths = [HUB / "instructor", HUB / "learner"] if is_instructor(name) else learner
    return {"JUPYTER_CONFIG_PATH": os.pathsep.join(map(str, paths)),
            "COURSE_EXCHANGE": str(exchange(state)),
            "COURSE_LANG": os.environ.get("COURSE_LANG", "en"),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])}


def _group(name: str) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        subprocess.run(["groupadd", name], check=True)


def problems() -> list[str]:
    """What stops a hub from starting here, each with what to do."""
    found = []
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        found.append("the hub runs as root (it starts each user's server as that user): run it with sudo")
    if shutil.which("configurable-http-proxy") is None:
        found.append("configurable-http-proxy is missing: npm install -g configurable-http-proxy")
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        found.append("JupyterHub is missing: pip install -e '.[hub]' (./course hub does it)")
    else:
        everyone = subprocess.run([shutil.which("runuser") or "runuser", "-u", "nobody", "--", sys.executable, "-c",
                                   "import jupyterhub, nbgrader, grader"], capture_output=True, cwd="/")
        if everyone.returncode != 0:
            found.append(f"other accounts cannot run {sys.executable} with the course (a folder on the way, such "
                         f"as {Path.home()}, is private): each server runs as its user, so clone the course into "
                         "a folder everyone can read (e.g. /opt) and make its .venv from the system's python3")
    for tool in ("useradd", "chpasswd", "runuser"):
        if shutil.which(tool) is None:
            found.append(f"{tool} is missing: the class's accounts are Unix accounts")
    return found


def command(state: Path, bind: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start the hub."""
    env = {**os.environ, "COURSE_HUB_STATE": str(state), "COURSE_HUB_BIND": bind}
    return [sys.executable, "-m", "jupyterhub", "-f", str(HUB / "jupyterhub_config.py")], env


def _start(args) -> int:
    if found := problems():
        print("\n".join(f"hub: {p}" for p in found), file=sys.stderr)
        return 2
    state = Path(args.state)
    prepare(state)
    if args.language:
        os.environ["COURSE_LANG"] = args.language
    argv, env = command(state, f"http://{args.ip}:{args.port}")
    members = sorted(grp.getgrnam(LEARNERS).gr_mem), sorted(grp.getgrnam(INSTRUCTORS).gr_mem)
    print(f"hub: the class's hub at http://{args.ip or 'localhost'}:{args.port}/ (Ctrl+C stops it)\n"
          f"hub: learners: {', '.join(members[0]) or 'none yet'}; instructors: {', '.join(members[1]) or 'none yet'}\n"
          "hub: add accounts with: sudo ./course hub add NAME ... [--instructor]\n"
          f"hub: Formgrader, for an instructor NAME: http://{args.ip or 'HOST'}:{args.port}/user/NAME/formgrader "
          "(in a browser tab of its own: JupyterHub forbids it inside JupyterLab's frame)\n"
          f"hub: the exchange is {exchange(state)}; the hub's own files are in {state / 'hub'}", flush=True)
    os.chdir(state / "hub")
    os.execve(argv[0], argv, env)


def _add(args) -> int:
    if os.geteuid() != 0:
        print("hub: making accounts needs root: run it with sudo", file=sys.stderr)
        return 2
    state = Path(args.state)
    prepare(state)
    for name in args.names:
        account = add(name, args.instructor, state)
        role = "instructor" if account.instructor else "learner"
        secret = f"password {account.password}" if account.password else "existing account, password unchanged"
        print(f"{account.name}\t{role}\t{secret}")
    return 0


def main(argv: list[str]) -> int:
    """`hub [zh] [options]` starts the hub; `hub add NAME ...` makes accounts."""
    words = [i for i, a in enumerate(argv) if not a.startswith("-") and (i == 0 or argv[i - 1] != "--state")]
    adding = bool(words) and argv[words[0]] == "add"
    if adding:   # `hub add ...` or `hub --state DIR add ...`
        argv = argv[:words[0]] + argv[words[0] + 1:]
    parser = argparse.ArgumentParser(prog="python -m grader hub" + (" add" if adding else ""), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", default=str(STATE),
                        help="the exchange and the hub's own files (default: %(default)s)")
    if adding:
        parser.add_argument("names", nargs="+", help="account names (new ones get a password, printed once)")
        parser.add_argument("--instructor", action="store_true", help="instructors: Formgrader and a course folder")
        return _add(parser.parse_args(argv))
    parser.add_argument("language", nargs="?", choices=["en", "zh"], help="the edition (zh: menus in Chinese)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ip", default="", help="the address to listen on (default: all)")
    return _start(parser.parse_args(argv))
