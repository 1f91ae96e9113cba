"""Run a notebook's cells in a confined process: bubblewrap, plus limits on time and resources.

`Sandbox(workdir, limits).run(notebook)` runs `python -m grader.grading.runner` inside
bubblewrap when it works on this machine:
- a user id of its own: run as root, the grader enters the sandbox as root and drops to an
  unused user id (one per worker) with setpriv, so the kernel's checks of file permissions and
  of the process limit apply for real; run as anyone else, bubblewrap's user namespace maps
  65534 to the instructor, and only the mounts below keep files out of reach;
- no network (an empty network namespace), its own process, IPC and host-name namespaces, a
  new session (no typing into the instructor's terminal), killed when the grader dies;
- a file system holding only read-only copies of the system's /usr, the Python interpreter,
  the virtual environment and the `grader` package, and one writable folder, `workdir`, with
  only this submission's notebook: no solutions/, no other submission, no gradebook, no home.
Limits (RLIMIT_*) on memory, CPU time, processes, file size; a watchdog here on wall time and
on the size of `workdir`; the runner caps each cell's output. Without bubblewrap only the
limits apply, and `confinement()` says so loudly; when the kernel refuses bubblewrap its
namespaces (Ubuntu's AppArmor restriction, Debian's sysctl), it also says how to allow them.

The runner (`grader.grading.runner`) saves the executed notebook after every cell, so whatever happens
(an endless loop, a crash, `os._exit`, running out of memory) the cells that finished keep
their outputs. A sandbox that fails before the notebook's first cell (its kernel could not
start: the machine's fault, no learner code ran) says so in `Outcome.started`.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..checks import i18n
from ..checks.i18n import say
from . import template
from .runner import FIRST_CELL, STARTUP_FAILED, capped_notice
from .settings import Limits, MiB

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096   # bytes, as /proc/PID/statm counts

NOBODY = 65534
PACKAGE = Path(__file__).resolve().parent.parent   # the grader package, all of it


@dataclass
class Outcome:
    executed: object        # the notebook as far as it ran, or None
    problem: str | None     # why it stopped early, if it did
    seconds: float
    timing: Timing | None = None
    started: bool = True    # False: it stopped before the notebook's first cell, so no learner code
    #                         ran and `problem` is the machine's (the kernel could not start)
    kernel: str = ""        # how its kernel started: forked from the worker's template, or cold (and why)


@dataclass(frozen=True)
class Timing:
    """Where a sandbox's time went, as its runner recorded it: moments as time.time() and CPU
    seconds. For the grading benchmark only: learner code could rewrite the file, so no
    verdict ever reads it."""
    started: float       # the grader started bubblewrap
    runner: float        # the runner had imported what it needs
    kernel: float        # the kernel answered
    warm: float          # the kernel had imported the modules the notebook will import
    notebook: float      # the notebook arrived from the grader
    ended: float         # the last cell finished
    runner_cpu: float    # CPU seconds of the runner process, when the last cell finished
    kernel_start_cpu: float   # CPU seconds of the kernel when it answered
    kernel_warm_cpu: float    # and when it had imported the warm modules
    cells: tuple[tuple[str, float, float], ...]   # per code cell: role ("cell", "self-check",
    #                                                "calls"), wall seconds, kernel CPU seconds

    @classmethod
    def read(cls, workdir: Path, started: float) -> Timing | None:
        try:
            data = json.loads(read_scratch(Path(workdir) / "timing.json", 1 * MiB))
            return cls(started=started, **{**data, "cells": tuple(tuple(c) for c in data["cells"])})
        except Exception:  # not written (the runner was killed) or not what the runner writes
            return None


@dataclass(frozen=True)
class Confinement:
    command: tuple[str, ...]   # prefix put before the runner's command
    description: str           # what protects the instructor, for results and warnings
    drops_user: bool           # processes run as a real other user (the process limit is exact)


@functools.cache
def confinement() -> Confinement:
    """bubblewrap when it is installed and works here; else the process limits alone."""
    bwrap = shutil.which("bwrap")
    unconfined = Confinement((), "process limits only: bubblewrap is missing or does not work here, so "
                                 "learner code runs as the grader's user and can read and write whatever that "
                                 "user can (solutions/, other submissions, the gradebook), and reach the network. "
                                 "Install it: apt-get install bubblewrap", False)
    if bwrap is None:
        return unconfined
    as_root = os.geteuid() == 0
    command = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--cap-drop", "ALL"] if not as_root else \
              [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session"]
    if not as_root:
        command += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        path = Path(top)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            command += ["--ro-bind", top, top]
    made: set[Path] = set()
    for path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/fonts"):   # fonts: plots, without complaints
        if Path(path).exists():
            command += _parents(Path(path), made) + ["--ro-bind", path, path]
    # The interpreter, the environment and this package, at the paths they have here.
    for path in sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
                        Path(sys.executable).resolve().parent, PACKAGE}):
        if not str(path).startswith("/usr/"):
            command += _parents(path, made) + ["--ro-bind", str(path), str(path)]
    command += ["--proc", "/proc", "--dev", "/dev"]   # /dev/shm: in the scratch folder, see Sandbox
    command.append("--")
    tail = _drop_to(NOBODY) if as_root else []
    probe = subprocess.run(command + tail + [sys.executable, "-c", "pass"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        reason = (probe.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"])[0][:200]
        if any(sign in reason for sign in NAMESPACE_REFUSED):
            return Confinement((), namespaces_refused(os.path.realpath(bwrap), reason), False)
        return Confinement((), unconfined.description + f" (bwrap failed: {reason})", False)
    who = "a user id of its own" if as_root else "uid 65534 in a user namespace"
    return Confinement(tuple(command), f"bubblewrap: {who}, no network, read-only system and course "
                                       "package, a private scratch folder", as_root)


# What bubblewrap says when the kernel will not let it make its namespaces: AppArmor's restriction
# (Ubuntu 24.04+: the uid map, or the loopback of the new network namespace), Debian's sysctl,
# or no user namespaces at all.
NAMESPACE_REFUSED = ("setting up uid map", "No permissions to creat", "Creating new namespace failed",
                     "RTM_NEWADDR")


def namespaces_refused(bwrap: str, reason: str, sysctls: Path = Path("/proc/sys")) -> str:
    """The warning when the kernel refused bubblewrap its namespaces: what that leaves open, and
    how to allow bubblewrap, on Ubuntu (AppArmor) and, where their sysctls read 0, elsewhere."""
    profile = ("printf 'abi <abi/4.0>,\\ninclude <tunables/global>\\nprofile bwrap "
               f"{bwrap} flags=(unconfined) {{\\n  userns,\\n}}\\n' | sudo tee /etc/apparmor.d/bwrap "
               "&& sudo apparmor_parser -r /etc/apparmor.d/bwrap")
    lines = [f"process limits only: the kernel refused bubblewrap its namespaces ({reason}), so learner code "
             "runs as the grader's user and can read and write whatever that user can (solutions/, other "
             "submissions, the gradebook), and reach the network.",
             "Ubuntu 24.04+ refuses them through AppArmor (kernel.apparmor_restrict_unprivileged_userns=1). "
             "Allow bubblewrap alone with an AppArmor profile, /etc/apparmor.d/bwrap:",
             f"  {profile}",
             "or allow every program: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 "
             "(a file in /etc/sysctl.d/ keeps it after a reboot)."]
    for setting, whose, fix in (("kernel/unprivileged_userns_clone", "Debian's switch", "1"),
                                ("user/max_user_namespaces", "no user namespaces at all", "15000")):
        with contextlib.suppress(OSError):
            if (sysctls / setting).read_text().strip() == "0":
                name = setting.replace("/", ".")
                lines.append(f"Here {name} is 0 ({whose}), which forbids them too: sudo sysctl -w {name}={fix}")
    return "\n".join(lines)


# bubblewrap's options that mount nothing (`confinement`'s, before its first mount).
_OPTIONS = frozenset({"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                      "--die-with-parent", "--new-session", "--cap-drop", "--unshare-user", "--uid", "--gid"})


def _drop_to(uid: int) -> list[str]:
    """Become `uid` inside the sandbox once its mounts are made, with no capabilities left."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs"]


def sandbox_uid() -> int:
    """A user id for this grading process's sandbox, different from every other worker's (their
    process ids differ), so that one notebook's fork bomb uses up its own process limit only.
    Ids above 100000 belong to no account on a normal system."""
    return 100_000 + os.getpid() % 100_000


def _parents(path: Path, made: set[Path]) -> list[str]:
    """bubblewrap arguments making the folders above `path` traversable by the sandbox's user
    (bubblewrap makes them private otherwise)."""
    args = []
    for parent in reversed(path.parents[:-1]):
        if parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


@functools.cache
def _processes_counted_per_namespace() -> bool:
    """Whether this Linux counts RLIMIT_NPROC per user namespace (5.14 and later): then a limit
    set inside bubblewrap's user namespace counts the sandbox's own processes only. Before, it
    counts every process of the user, the instructor's own included."""
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


def _rlimits(limits: Limits, processes: int | None) -> list[tuple[int, int]]:
    """The RLIMIT_* a notebook's processes get, as (resource, value)."""
    wanted = [(resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.file_bytes),
              (resource.RLIMIT_CPU, limits.cpu_seconds), (resource.RLIMIT_CORE, 0)]
    if processes is not None:
        wanted.append((resource.RLIMIT_NPROC, processes))
    return wanted


def _limits(limits: Limits, processes: int | None) -> None:
    """Applied in the child before it starts: bubblewrap, the runner and the kernel inherit them."""
    os.setsid()
    template.apply_rlimits(_rlimits(limits, processes))


def _own_tasks() -> int:
    """Processes and threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid, count = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(entry / "task"))
            except OSError:
                pass
    return count


def read_scratch(path: Path, max_bytes: int = 512 * MiB) -> bytes | None:
    """The bytes of a file learner code could have replaced: None unless it is a regular file
    (not a link to something else, not a device) of sensible size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        return handle.read(max_bytes)


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _over_memory(pid: int, limit: int) -> bool:
    """Whether `pid` and all its descendants together use more than `limit` bytes: their
    proportional share of pages (Pss), so that forked children are not counted twice. RLIMIT_AS
    caps each process; this caps them together. A process's resident size bounds its share from
    above and costs nothing to read (statm), while its share walks every page table it has (about
    5 ms for a process with torch loaded, and the watch asks 4 times a second): so the share is
    counted only when the resident sizes together pass the limit."""
    tree = list(template.descendants(pid))
    return sum(map(_resident, tree)) > limit and sum(map(_proportional, tree)) > limit


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):  # it ended meanwhile
        return 0


def _proportional(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            return next((int(line.split()[1]) * 1024 for line in handle if line.startswith("Pss:")), 0)
    except (OSError, ValueError):  # it ended meanwhile
        return 0


def cap_outputs(nb, output_bytes: int):
    """At most `output_bytes` of output per cell, then a notice; an error output is kept (it is
    how the grader learns that a check stopped), shortened. The runner caps outputs as they
    come; this holds for a notebook file that learner code rewrote too."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept, left, full = [], output_bytes, False
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["evalue"] = str(output.get("evalue", ""))[:2000]
                output["traceback"] = [str(line)[:2000] for line in output.get("traceback", [])[-20:]]
                kept.append(output)
                continue
            if full:
                continue
            stream = output.get("output_type") == "stream"
            if stream and output.get("text") == capped_notice(output_bytes):  # the runner capped it already
                kept.append(output)
                full = True
                continue
            size = len(str(output.get("text", ""))) if stream else len(str(output))
            if size <= left:
                kept.append(output)
                left -= size
                continue
            if stream and left > 0:
                output["text"] = str(output["text"])[:left]
                kept.append(output)
            kept.append(nbformat.v4.new_output("stream", name="stdout", text=capped_notice(output_bytes)))
            full = True
        cell.outputs = kept
    return nb


FORKED = "the kernel forked from the worker's warm template"
_templates: dict[str, template.Template] = {}   # this process's template, once started
_cold_reason = "the kernel started cold: forking kernels is off (COURSE_GRADER_KERNELS=cold)"


def _cold(reason: str) -> str:
    """Why kernels start cold, said once in the log and in every result it concerns."""
    global _cold_reason
    text = f"the kernel started cold: {reason}"
    if text != _cold_reason:
        print(f"grader: notebook kernels start cold: {reason}", file=sys.stderr, flush=True)
    _cold_reason = text
    return text


def _template(limits: Limits) -> template.Template | None:
    """This process's kernels' template, started (again) if it is not running, once it has done
    its imports; None where kernels start cold: forking is off (COURSE_GRADER_KERNELS=cold), there
    is no bubblewrap, or the template will not start (the reason is then in `_cold_reason`)."""
    kernels = warm_up()
    if kernels is None:
        return None
    try:
        kernels.ready(limits.startup_seconds)
    except template.Unavailable as exc:
        _cold(str(exc))
        return None
    return kernels


def warm_up() -> template.Template | None:
    """Start this process's kernels' template if it is not running, without waiting for its
    imports: the caller goes on with its own (torch, nbgrader) on another core, and the first
    notebook finds it ready sooner. None where kernels start cold (see `_template`)."""
    if os.environ.get("COURSE_GRADER_KERNELS", "forked") == "cold":
        _cold("forking kernels is off (COURSE_GRADER_KERNELS=cold)")
        return None
    jail = confinement()
    if not jail.command:
        _cold("there is no bubblewrap sandbox to fork them in")
        return None
    kernels = _templates.get("")
    if kernels is not None and kernels.alive():
        return kernels
    import tempfile
    from multiprocessing import util

    jobs = Path(tempfile.mkdtemp(prefix="grader-jobs-")).resolve()
    jobs.chmod(0o711)   # the sandbox's user goes through it to its job's folder, and lists nothing
    home = jobs / ".template"   # the template's own writable folder, with matplotlib's list of fonts
    (home / ".matplotlib").mkdir(parents=True)
    for fonts in _font_lists():
        shutil.copyfile(fonts, home / ".matplotlib" / fonts.name)
    if jail.drops_user:
        for path in (home, *home.rglob("*")):
            os.chown(path, sandbox_uid(), sandbox_uid())
    command = list(jail.command)
    command[-1:-1] = [*_parents(jobs, set()), "--bind", str(jobs), str(jobs), "--dir", template.HOLD,
                      "--dir", template.HOLD_TMP,
                      "--chdir", str(jobs)]
    if jail.drops_user:
        command += _drop_to(sandbox_uid())
    try:
        kernels = template.Template(command, _environment(home), jobs)
    except OSError as exc:   # e.g. no process could be made
        shutil.rmtree(jobs, ignore_errors=True)
        _cold(f"the kernels' template did not start: {exc}")
        return None
    _templates[""] = kernels

    def close() -> None:
        kernels.close()
        shutil.rmtree(jobs, ignore_errors=True)
    # At exit: of a command, or of a grading worker, which multiprocessing ends without atexit's handlers.
    util.Finalize(None, close, exitpriority=0)
    return kernels


def scratch_parent(limits: Limits) -> Path | None:
    """Where a notebook's scratch folder goes: in the template's folder of jobs when kernels are
    forked (a job sees only its own folder there), else anywhere (None)."""
    kernels = _template(limits)
    return kernels.jobs if kernels is not None else None


class Sandbox:
    """One notebook's sandbox, started before the notebook is ready: its kernel starts, and
    imports the modules the notebook will import, while the grader prepares the notebook to run
    (two cores work at once). No learner code runs before `run` hands the notebook over, and
    each notebook gets a fresh sandbox and kernel: nothing is shared between notebooks.

        with Sandbox(workdir, limits, warm=("torch",)) as box:
            ...                          # write the hidden checks' inputs into workdir
            outcome = box.run(notebook)
    """

    def __init__(self, workdir: Path, limits: Limits, warm: tuple[str, ...] = ()):
        self.workdir, self.limits = Path(workdir).resolve(), limits
        self.src = self.workdir / "to_run.ipynb"
        # /dev/shm and /tmp of the notebook's sandbox are folders of its own scratch folder: what it
        # writes there counts against its limit on files, and goes with it (never to the next notebook)
        shm, tmp, matplotlib = self.workdir / ".shm", self.workdir / ".tmp", self.workdir / ".matplotlib"
        shm.mkdir()
        tmp.mkdir()
        matplotlib.mkdir()
        for fonts in _font_lists():
            shutil.copyfile(fonts, matplotlib / fonts.name)
        jail = confinement()
        prefix, suffix = list(jail.command), []
        self.uid, inside = None, 0
        if jail.drops_user:
            self.uid = sandbox_uid()
            for path in (self.workdir, shm, tmp, matplotlib, *matplotlib.iterdir()):
                os.chown(path, self.uid, self.uid)
            suffix = _drop_to(self.uid)
            processes = limits.processes
        elif jail.command and _processes_counted_per_namespace():
            # The runner sets the limit inside the user namespace: it then counts this sandbox's
            # processes alone. Set here, it would count all the instructor's processes against
            # a number fixed now, and a kernel starting while another notebook or the instructor's
            # own programs take more would die before it answers.
            processes, inside = None, limits.processes
        elif jail.command:
            processes = _own_tasks() + limits.processes   # the count includes the instructor's own
        else:
            processes = None   # the instructor's own processes share the count: leave it alone
        argv = [str(self.src), str(self.workdir / "executed.ipynb"), str(limits.cell_seconds),
                str(limits.startup_seconds), str(limits.output_bytes), ",".join(warm), str(inside)]
        self.started = time.time()
        self.proc: subprocess.Popen | template.Job | None = None
        self.kernel = _cold_reason
        kernels = _template(limits)
        if kernels is not None and self.workdir.parent != kernels.jobs:
            kernels, self.kernel = None, "the kernel started cold: its scratch folder is not in the template's " \
                                         "folder of jobs (sandbox.scratch_parent)"
        if kernels is not None:
            try:
                self.proc = kernels.start(self.workdir, argv, _environment(self.workdir),
                                          _rlimits(limits, processes), limits.startup_seconds)
                self.kernel = FORKED
            except template.Unavailable as exc:
                self.kernel = _cold(str(exc))
        if self.proc is None:
            if prefix:  # the scratch folder, the only writable place, goes before bubblewrap's "--";
                # /dev/shm and /tmp live in it, so that the watchdog's cap on files counts what is written
                # there. /tmp before anything is mounted: what lies in /tmp (the course, the scratch
                # folder itself) is then mounted inside it, at its own path.
                first = next(k for k, arg in enumerate(prefix) if arg.startswith("--") and arg not in _OPTIONS)
                prefix[first:first] = ["--bind", str(tmp), "/tmp"]
                prefix[-1:-1] = [*_parents(self.workdir, set()), "--bind", str(self.workdir), str(self.workdir),
                                 "--bind", str(shm), "/dev/shm", "--chdir", str(self.workdir)]
            command = prefix + suffix + [sys.executable, "-m", "grader.grading.runner", *argv]
            self.proc = subprocess.Popen(command, cwd=self.workdir, env=_environment(self.workdir),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         preexec_fn=lambda: _limits(limits, processes))
        self.log = _Log(self.proc.stdout)

    def run(self, notebook) -> Outcome:
        """Hand `notebook` to the waiting runner and watch it until it ends or breaks a limit.
        Every file the grader wrote into the scratch folder is there before any learner code runs.
        A runner that ended before it got the notebook, or before it said that the notebook's
        first cell starts, gives an outcome that is not `started`: the machine failed, not the notebook."""
        if self.proc.poll() is not None:   # it never saw the notebook
            _stop(self.proc)
            self.log.join(timeout=5)
            return Outcome(None, self._startup_failure(), 0.0, started=False, kernel=self.kernel)
        part = self.src.with_suffix(".part")
        nbformat.write(notebook, part)
        if self.uid is not None:   # the grader's files; the runner's own may come and go meanwhile
            for path in self.workdir.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    os.chown(path, self.uid, self.uid, follow_symlinks=False)
        os.replace(part, self.src)   # the runner waits for this name: the notebook arrives whole
        start = time.monotonic()
        problem = _watch(self.proc, self.log, self.workdir, self.limits, start)
        if self.proc.returncode == STARTUP_FAILED or not self.log.first_cell \
                or getattr(self.proc, "machine_failed", False):   # no learner code ran, or no verdict may come
            return Outcome(None, self._startup_failure(problem), time.monotonic() - start, started=False,
                           kernel=self.kernel)
        out = self.workdir / "executed.ipynb"
        try:  # learner code may have replaced it: read it as the runner would have written it
            text = read_scratch(out, self.limits.executed_bytes).decode("utf-8")
            executed = cap_outputs(nbformat.reads(text, as_version=4), self.limits.output_bytes)
        except Exception:  # missing, replaced or broken by learner code
            executed = None
        marker = self.workdir / "stopped.txt"
        if problem is None and (text := read_scratch(marker, 4096)):
            problem = text.decode(errors="replace")[:300]
        return Outcome(executed, problem, time.monotonic() - start, Timing.read(self.workdir, self.started),
                       kernel=self.kernel)

    def _startup_failure(self, problem: str | None = None) -> str:
        """Why the sandbox failed before the notebook's first cell: the runner's (or bubblewrap's)
        last line, else the limit it broke. For the instructor, in English: the learner never reads it."""
        last = self.log.tail.decode(errors="replace").strip().splitlines()[-1:] or [""]
        if getattr(self.proc, "machine_failed", False):
            return f"the kernels' template died while it ran the notebook: {(last[0] or problem or '')[:300]}"
        return f"the sandbox failed before the notebook's first cell ran (exit code {self.proc.returncode}): " \
               f"{(last[0] or problem or '')[:300]}"

    def close(self) -> None:
        """Stop the sandbox and everything in it (a no-op once `run` has)."""
        _stop(self.proc)
        self.log.join(timeout=5)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@functools.cache
def _font_lists() -> tuple[Path, ...]:
    """matplotlib's list of the system's fonts, as the grader's user has it cached. A copy in
    each sandbox spares each notebook's first plot a scan of every font (a quarter of a second);
    without one, matplotlib makes its own there, as before."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matplotlib"
    return tuple(Path(os.environ.get("MPLCONFIGDIR") or home).glob("fontlist-v*.json"))


def _environment(workdir: Path) -> dict[str, str]:
    """The sandbox's whole environment: nothing of the instructor's is passed on."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "NBGRADER_EXECUTION": "autograde",   # training cells run their short configuration
        "JUPYTER_PLATFORM_DIRS": "1",
        "JUPYTER_RUNTIME_DIR": str(workdir / ".runtime"),
        "JUPYTER_CONFIG_DIR": str(workdir / ".jupyter"),
        "JUPYTER_DATA_DIR": str(workdir / ".jupyter-data"),
        "IPYTHONDIR": str(workdir / ".ipython"),
        "MPLCONFIGDIR": str(workdir / ".matplotlib"),
        "XDG_CACHE_HOME": str(workdir / ".cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONSAFEPATH": "1",               # the scratch folder is never on the import path
        "PYTHONPATH": str(PACKAGE.parent),   # this very grader package, wherever the course is copied
        # One thread per notebook: workers already fill the cores, and torch's threads spin-wait
        # on a busy machine (unit 08 took 321 s beside one busy process with 2 threads, 17 s with 1).
        "OMP_NUM_THREADS": "1",
        "COURSE_LANG": i18n.current(),       # the self-checks answer in the language of the verdicts
    }


def _stop(proc: subprocess.Popen | template.Job) -> None:
    if isinstance(proc, template.Job):
        proc.stop()
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the sandbox and everything in it
    except ProcessLookupError:
        pass
    proc.wait()


class _Log(threading.Thread):
    """Reads the runner's own log as it comes (so the runner never blocks on a full pipe),
    keeping only its last bytes (learner code can flood it), and whether the runner said that
    the notebook's first cell starts (runner.FIRST_CELL)."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.tail, self.first_cell = stream, bytearray(), False
        self.start()

    def run(self) -> None:
        for chunk in iter(lambda: self.stream.read1(65536), b""):
            self.tail.extend(chunk)   # a line split between two reads is whole here
            self.first_cell = self.first_cell or FIRST_CELL in self.tail
            del self.tail[:-4096]


def _watch(proc: subprocess.Popen, log: _Log, workdir: Path, limits: Limits, start: float) -> str | None:
    """Wait for the runner, stopping it when the notebook runs too long or writes too much."""
    problem = None
    try:
        while proc.poll() is None:
            if time.monotonic() - start > limits.notebook_seconds:
                problem = say("the notebook ran longer than {seconds} s and was stopped",
                              seconds=limits.notebook_seconds)
                break
            if _folder_bytes(workdir) > limits.scratch_bytes:
                problem = say("the notebook wrote more than {mib} MiB of files and was stopped",
                              mib=limits.scratch_bytes // MiB)
                break
            if _over_memory(proc.pid, limits.memory_bytes):
                problem = say("the notebook's processes together used more than {mib} MiB of memory and were "
                              "stopped", mib=limits.memory_bytes // MiB)
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.25)   # returns as soon as the runner ends
    finally:
        _stop(proc)
        log.join(timeout=5)
    code = proc.returncode
    if problem is None and (code < 0 or code > 128):  # bubblewrap passes on a signal as 128 + its number
        problem = say("the notebook's process was killed (signal {signal}), by its own code or by running out "
                      "of memory", signal=abs(code) % 128)
    elif problem is None and code != 0:
        last = log.tail.decode(errors="replace").strip().splitlines()[-1:] or [""]
        problem = say("the notebook's process stopped (exit code {code}): {last}", code=code, last=last[0][:200])
    return problem
