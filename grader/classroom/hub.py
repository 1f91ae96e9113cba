"""A class on one machine: JupyterHub with the course's settings, and the class's accounts.

    ./course hub [zh] [--port 8000] [--ip ADDRESS] [--state /srv/attention-course]   (as root)
                 [--ssl-cert FILE --ssl-key FILE]   (HTTPS, which JupyterHub's WebSocket rule needs)
    ./course hub add NAME ... [--instructor] [--state ...]                            (as root)

What learners can reach holds no answers. The clone of the course (solutions/, the source
notebooks with their hidden tests, the translations, .git) is the instructors': `hub` gives it
to the group attention-instructors, mode 750. Learners' servers run STATE/env instead, a virtual
environment readable by all with a non-editable install of the learner's package (the student
notebooks, the self-checks, the corpus: what a learner installs from the course's wheel) and
JupyterHub; `hub` makes it on its first start and installs the course into it
again, as the clone has it, at every start. Instructors' servers run the clone's own Python.
The servers' Jupyter settings are copied into STATE/settings, readable by all.

nbgrader's exchange, STATE/exchange, belongs to root (mode 755): nobody else can make, move or
delete anything in it. The course's folder in it is made by the hub and given to the first
instructor; below it, nbgrader's own folders and modes, but for feedback/: the hub makes a
folder in it for each learner, which only that learner and the instructors can enter (see
grader/classroom/exchange.py).

`hub add` makes each NAME a Unix account in the class's group, with a private home and a
password printed once: learners log in with it, and each server runs as its owner. The
instructors are a teaching team: one course folder, STATE/course, which nbgrader's commands,
`python -m grader grade` and Formgrader share (~/attention-course links to it), and one course
folder in the exchange, both shared by their group as nbgrader's `groupshared` has it; any of
them releases, collects, grades, returns feedback and exports. The hub runs as root, as
JupyterHub must to start servers as other users; grading does not: each instructor grades as
themselves.
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

from .. import course
from ..checks import i18n
from . import torch_index

HUB = course.ROOT / "hub"
STATE = Path("/srv/attention-course")
LEARNERS, INSTRUCTORS = "attention-learners", "attention-instructors"
COURSE_FOLDER = "attention-course"


class HubProblem(RuntimeError):
    """Something on this machine stops the class's hub, said with what to do."""


@dataclass(frozen=True)
class Account:
    name: str
    password: str | None      # None: the account existed and keeps its password
    instructor: bool


def exchange(state: Path) -> Path:
    return state / "exchange"


def settings(state: Path) -> Path:
    """The servers' Jupyter settings, copied out of the clone (which learners cannot read)."""
    return state / "settings"


def learners_python(state: Path) -> Path:
    """The Python of the learners' environment, STATE/env."""
    return state / "env" / "bin" / "python"


def prepare(state: Path) -> None:
    """The hub's private folder, the class's groups, its exchange and the servers' settings."""
    (state / "hub").mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o755)
    os.chmod(state / "hub", 0o700)
    prepare_exchange(state)
    team_course(state)
    _copy_settings(state)


def prepare_exchange(state: Path) -> Path:
    """STATE/exchange, root's, mode 755, and the course's folder in it, made now so that no
    learner can make it first: it goes to the first instructor (root's until there is one), in
    the instructors' group, which nbgrader's `groupshared` lets every instructor use."""
    for group in (LEARNERS, INSTRUCTORS):
        _group(group)
    root = exchange(state)
    root.mkdir(parents=True, exist_ok=True)
    os.chown(root, 0, 0)
    os.chmod(root, 0o755)
    folder = root / course.COURSE_ID
    if not folder.is_dir() or folder.is_symlink():
        if folder.exists() or folder.is_symlink():
            raise HubProblem(f"{folder} is not a folder: remove it, then start again")
        folder.mkdir()
        os.chown(folder, 0, 0)
        os.chmod(folder, 0o755)
    try:
        owner = pwd.getpwuid(folder.stat().st_uid).pw_name
    except KeyError:   # an account removed since
        owner = f"user id {folder.stat().st_uid}"
    if owner != "root" and not is_instructor(owner):
        raise HubProblem(f"{folder} belongs to {owner}, who is not an instructor of the class: look at what is "
                         f"in it, remove it (rm -r {folder}), then start again")
    teachers, team = members(INSTRUCTORS), grp.getgrnam(INSTRUCTORS).gr_gid
    if owner == "root" and teachers:
        os.chown(folder, pwd.getpwnam(teachers[0]).pw_uid, -1)
    # Shared by the teaching team as nbgrader's `groupshared` has it: in their group, setgid.
    os.chown(folder, -1, team)
    os.chmod(folder, 0o2775)
    # inbound/ as nbgrader makes it for a team (learners write, only instructors list), made here
    # so that no learner can open it in the instant between nbgrader's mkdir and its chmod and list
    # it ever after; sticky, so that no learner can move another's submission.
    _closed_folder(folder / "inbound", 0o3773, folder.stat().st_uid, team)
    feedback_folders(folder / "feedback")
    return folder


def feedback_folders(feedback: Path) -> None:
    """The course's feedback/ in the exchange, root's (mode 711: nobody lists it), and in it each
    learner's own folder: the learner's, in the instructors' group, mode 2770. The learner and the
    instructors enter it, nobody else even knowing a name; the setgid bit gives each page the
    instructors' group (see grader/classroom/exchange.py)."""
    _closed_folder(feedback, 0o711)
    team = grp.getgrnam(INSTRUCTORS).gr_gid
    for name in members(LEARNERS):
        _closed_folder(feedback / name, 0o2770, owner=pwd.getpwnam(name).pw_uid, group=team)


def _closed_folder(path: Path, mode: int, owner: int = 0, group: int = 0) -> None:
    """`path`, a folder of `owner`'s in `group` with `mode`, whatever was there before. A new one
    is made closed (mode 700) and opened up after: nobody can open it, and keep it open to list or
    watch it, before it has its owner and mode."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(mode=0o700, exist_ok=True)
    os.chown(path, owner, group)
    os.chmod(path, mode)


def _copy_settings(state: Path) -> None:
    """hub/, lab/ and nbgrader_config.py into STATE/settings, as they are laid out in the clone
    (their files name each other by relative paths), readable by all."""
    target, fresh = settings(state), state / ".settings.new"
    shutil.rmtree(fresh, ignore_errors=True)
    for folder in ("hub", "lab"):
        shutil.copytree(course.ROOT / folder, fresh / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(course.CONFIG_FILE, fresh / course.CONFIG_FILE.name)
    for path in (fresh, *fresh.rglob("*")):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    shutil.rmtree(target, ignore_errors=True)
    fresh.rename(target)


def close_clone(root: Path = course.ROOT) -> bool:
    """Give the clone to the instructors' group, mode 750, so that learners can open nothing in
    it; True if it was open before."""
    group = grp.getgrnam(INSTRUCTORS).gr_gid
    status = root.stat()
    if status.st_gid == group and not status.st_mode & 0o007:
        return False
    os.chown(root, -1, group)
    os.chmod(root, (status.st_mode & 0o700) | 0o050)
    return True


def learners_environment(state: Path, source: Path = course.ROOT) -> Path:
    """STATE/env: made on the first start (PyTorch's CPU build where there is no NVIDIA GPU),
    then the course installed into it from `source` as it is now, not editable, at every start.
    Its Python."""
    python = learners_python(state)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    if not python.exists():
        print(f"hub: making the learners' environment {python.parent.parent}: PyTorch, JupyterLab, nbgrader, "
              "JupyterHub and the course (minutes the first time)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
        cpu = torch_index.torch_pip_arguments(tell=lambda line: print(f"hub: {line}", flush=True))
        subprocess.run([*pip, "install", *cpu, f"{source}[lab,hub]"], check=True)
    else:
        print("hub: installing the course into the learners' environment, as the clone has it now", flush=True)
        subprocess.run([*pip, "install", "--quiet", "--no-deps", "--force-reinstall", str(source)], check=True)
    return python


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
    else:
        first_screen(name)
    return Account(name, password, instructor)


def first_screen(name: str) -> None:
    """A learner's JupyterLab opens on the Assignment List the first time, not on an empty
    Launcher: JupyterLab's default workspace, written where JupyterLab keeps it, unless the
    learner has one (their own layout is never replaced)."""
    user = pwd.getpwnam(name)
    home = Path(user.pw_dir)
    workspace = home / ".jupyter" / "lab" / "workspaces" / "default-37a8.jupyterlab-workspace"   # the id "default"
    if workspace.exists():
        return
    made = [folder for folder in reversed(workspace.parents) if folder.is_relative_to(home) and not folder.exists()]
    workspace.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(HUB / "learner" / "first-screen.jupyterlab-workspace", workspace)
    for path in (*made, workspace):
        os.chown(path, user.pw_uid, user.pw_gid)


def team_course(state: Path) -> Path:
    """STATE/course: nbgrader's course folder, one for the whole teaching team (its gradebook,
    submissions, grades and feedback): root's, in the instructors' group, mode 2770. Every
    instructor reads and writes it; what anyone makes in it goes to the group (the setgid bit,
    nbgrader's `groupshared` and the instructors' umask 007); learners cannot enter it. Its
    nbgrader_config.py names the course's settings and the exchange, so nbgrader's commands
    work from there in a terminal, inside the hub or not; solutions/ and notebooks/ are the
    course's own, read-only (made by `python -m grader release`)."""
    folder, team = state / "course", grp.getgrnam(INSTRUCTORS).gr_gid
    _closed_folder(folder, 0o2770, group=team)
    for edition in ("solutions", "notebooks", "solutions-zh", "notebooks-zh"):
        link = folder / edition
        if not link.is_symlink():
            link.symlink_to(course.ROOT / edition)
    (folder / "nbgrader_config.py").write_text(
        '"""nbgrader\'s settings for the team\'s course folder (written by `./course hub`)."""\n'
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(HUB / 'learner' / 'nbgrader_config.py')!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(folder)!r}\n"
        "c.CourseDirectory.groupshared = True   # what nbgrader makes here stays the team's\n"
        f"c.Exchange.root = {str(exchange(state))!r}\n")
    # SQLite makes a database file with mode 644 whatever the umask, and its journals with the
    # database's mode: the gradebook is made here, empty (an empty file is a new database to
    # SQLite), writable by the group.
    gradebook = os.open(folder / "gradebook.db", os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o660)
    try:
        os.fchown(gradebook, -1, team)
        os.fchmod(gradebook, 0o660)
    finally:
        os.close(gradebook)
    return folder


def course_folder(name: str, state: Path) -> Path:
    """~NAME/attention-course, where an instructor finds the team's course folder: a link to it.
    A folder of their own there, from a hub that had one instructor, is left as it is and said."""
    user = pwd.getpwnam(name)
    link, shared = Path(user.pw_dir) / COURSE_FOLDER, team_course(state)
    if link.is_dir() and not link.is_symlink():
        print(f"hub: {link} is {name}'s own course folder, from a hub with one instructor: the team's is {shared}. "
              f"To share it, as root: cp -a {link}/. {shared}/ && chgrp -R {INSTRUCTORS} {shared} && "
              f"chmod -R g+rwX {shared} && mv {link} {link}.own, then ./course hub add {name} --instructor",
              flush=True)
        return link
    if link.is_symlink():
        link.unlink()
    link.symlink_to(shared)
    os.lchown(link, user.pw_uid, user.pw_gid)
    return link


def members(group: str) -> list[str]:
    """The accounts in `group`, as members or by their own group, sorted."""
    try:
        found = grp.getgrnam(group)
    except KeyError:
        return []
    return sorted(set(found.gr_mem) | {user.pw_name for user in pwd.getpwall() if user.pw_gid == found.gr_gid})


def is_instructor(name: str) -> bool:
    return name in members(INSTRUCTORS)


def server_environment(name: str, state: Path) -> dict[str, str]:
    """What the hub gives the server of `name`, and so its terminals: its Python (a learner's:
    STATE/env; an instructor's: the clone's), first on PATH with nbgrader and attention-course;
    the course's Jupyter settings (a learner's as `./course lab` has them; an instructor's with
    Formgrader); the class's exchange; no working folder on any of its Pythons' import paths."""
    here = settings(state)
    if is_instructor(name):
        python, paths = Path(sys.executable), [here / "hub" / "instructor", here / "hub" / "learner"]
    else:
        python, paths = learners_python(state), [here / "hub" / "learner", here / "lab" / "learner"]
    return {"JUPYTER_CONFIG_PATH": os.pathsep.join(map(str, paths)),
            # Python's own switch: no working folder on the import path, in the server (started
            # with -m in the home, where a learner's traitlets.py would load first), its kernels
            # (started with -m in the notebook's folder, where a submitted ipykernel_launcher.py
            # would) and every command of its terminals.
            "PYTHONSAFEPATH": "1",
            "COURSE_EXCHANGE": str(exchange(state)),
            "COURSE_LANG": i18n.course_language(),
            "COURSE_PYTHON": str(python),
            "PATH": os.pathsep.join([str(python.parent), "/usr/local/bin", "/usr/bin", "/bin"])}


def _group(name: str) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        subprocess.run(["groupadd", name], check=True)


def _as(user: str, *command: str, group: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("runuser") or "runuser", "-u", user, *(["-g", group] if group else []),
                           "--", *command], capture_output=True, text=True, cwd="/")


def problems() -> list[str]:
    """What stops a hub from starting here, each with what to do; checked before anything is
    made or installed."""
    found = []
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        found.append("the hub runs as root (it starts each user's server as that user): run it as root "
                     "(sudo ./course hub, or in a root shell)")
    if shutil.which("configurable-http-proxy") is None:
        found.append("configurable-http-proxy is missing: npm install -g configurable-http-proxy")
    for tool in ("useradd", "chpasswd", "runuser"):
        if shutil.which(tool) is None:
            found.append(f"{tool} is missing: the class's accounts are Unix accounts")
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        found.append("JupyterHub is missing: pip install -e '.[hub]' (./course hub does it)")
    if not found:
        base = getattr(sys, "_base_executable", sys.executable)
        if _as("nobody", base, "-c", "pass").returncode != 0:
            found.append(f"other accounts cannot run {base} (a folder on the way is private): the learners' "
                         "environment is made from it, so make the clone's .venv from a Python everyone can "
                         "run, such as the system's python3")
    return found


def instructors_can_work(root: Path = course.ROOT) -> str | None:
    """Why a member of the instructors' group cannot run this Python with the course, or None."""
    check = _as("nobody", sys.executable, "-c", f"import grader, nbgrader; open({str(root / 'nbgrader_config.py')!r})",
                group=INSTRUCTORS)
    if check.returncode == 0:
        return None
    return (f"the instructors cannot run {sys.executable} with the course in {root} (a folder on the way, such "
            f"as {Path.home()}, is private): clone the course where root's group can pass, e.g. /opt")


def learners_cannot_read(root: Path, python: Path) -> str | None:
    """Why the class is not safe, or None: a learner can read the answers, or cannot run STATE/env."""
    answers = next((root / "solutions").glob("*/*.py"), root / "nbgrader_config.py")
    if _as("nobody", "cat", str(answers)).returncode == 0:
        return f"every account can read {answers}: the clone must be closed to learners (chmod o-rwx {root})"
    check = _as("nobody", str(python), "-c", "import attention_course, grader.selfcheck, nbgrader, jupyterhub")
    if check.returncode != 0:
        return (f"learners cannot run {python} with the course: "
                f"{(check.stderr.strip().splitlines() or ['?'])[-1][:300]}")
    return None


def command(state: Path, bind: str, ssl: tuple[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start the hub (`ssl`: its certificate and key)."""
    env = {**os.environ, "COURSE_HUB_STATE": str(state), "COURSE_HUB_BIND": bind}
    if ssl:
        env["COURSE_HUB_SSL_CERT"], env["COURSE_HUB_SSL_KEY"] = ssl
    return [sys.executable, "-m", "jupyterhub", "-f", str(HUB / "jupyterhub_config.py")], env


def _start(args) -> int:
    if found := problems():
        print("\n".join(f"hub: {p}" for p in found), file=sys.stderr)
        return 2
    os.umask(0o022)   # what the hub makes for the class (settings, the learners' environment) is readable by all
    state = Path(args.state)
    try:
        prepare(state)
    except HubProblem as problem:
        print(f"hub: {problem}", file=sys.stderr)
        return 2
    if close_clone():
        print(f"hub: the clone {course.ROOT} is now the instructors' (group {INSTRUCTORS}, mode 750): "
              "learners' servers run the learners' environment instead", flush=True)
    if reason := instructors_can_work():
        print(f"hub: {reason}", file=sys.stderr)
        return 2
    python = learners_environment(state)
    if reason := learners_cannot_read(course.ROOT, python):
        print(f"hub: {reason}", file=sys.stderr)
        return 2
    if args.language:
        os.environ["COURSE_LANG"] = args.language
    ssl = (str(Path(args.ssl_cert).resolve()), str(Path(args.ssl_key).resolve())) if args.ssl_cert else None
    scheme = "https" if ssl else "http"
    argv, env = command(state, f"{scheme}://{args.ip}:{args.port}", ssl)
    print(f"hub: the class's hub at {scheme}://{args.ip or 'localhost'}:{args.port}/ (Ctrl+C stops it)\n"
          f"hub: learners: {', '.join(members(LEARNERS)) or 'none yet'}; "
          f"instructors: {', '.join(members(INSTRUCTORS)) or 'none yet'}\n"
          "hub: add accounts with: ./course hub add NAME ... [--instructor] (as root)\n"
          f"hub: Formgrader, for an instructor NAME: {scheme}://{args.ip or 'HOST'}:{args.port}/user/NAME/formgrader "
          "(in a browser tab of its own: JupyterHub forbids it inside JupyterLab's frame)\n"
          f"hub: learners' servers run {python}; instructors' run {sys.executable}\n"
          f"hub: the exchange is {exchange(state)}; the hub's own files are in {state / 'hub'}", flush=True)
    os.chdir(state / "hub")
    os.execve(argv[0], argv, env)


def _add(args) -> int:
    if os.geteuid() != 0:
        print("hub: making accounts needs root: run it as root (sudo, or in a root shell)", file=sys.stderr)
        return 2
    os.umask(0o022)
    state = Path(args.state)
    try:
        state.mkdir(parents=True, exist_ok=True)
        accounts = [add(name, args.instructor, state) for name in args.names]
        # then the class's folders, once: the exchange's course folder goes to the first
        # instructor, and each learner gets their feedback folder (or one line on why not)
        prepare(state)
    except HubProblem as problem:
        print(f"hub: {problem}", file=sys.stderr)
        return 2
    for account in accounts:
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
    parser.add_argument("--port", type=int, default=8000,
                        help="the hub's port (default: %(default)s); it also takes the next two, for its API and proxy")
    parser.add_argument("--ip", default="", help="the address to listen on (default: all)")
    parser.add_argument("--ssl-cert", help="serve HTTPS with this certificate (PEM), e.g. Let's Encrypt's "
                                             "fullchain.pem")
    parser.add_argument("--ssl-key", help="the certificate's private key (PEM)")
    args = parser.parse_args(argv)
    if bool(args.ssl_cert) != bool(args.ssl_key):
        parser.error("--ssl-cert and --ssl-key go together")
    return _start(args)
