"""A warm template per grading worker: every notebook's kernel forked from a process that has
already imported what kernels import.

A kernel started cold pays about 1.5 s of CPU before the notebook's first line (the interpreter,
torch, matplotlib, the course's checks, ipykernel), and every notebook pays it again. Here each
grading worker starts one bubblewrap sandbox, made as a cold notebook's sandbox is
(`sandbox.confinement()`, the same limits), whose process, the template, does those imports
once and then only forks:

- the template imports the modules and nothing more: no thread, no ZMQ context, no kernel, no
  learner code, ever; it is not dumpable, so nothing can read its memory or its descriptors;
- per notebook it forks a child (C) that enters new user, mount, PID and IPC namespaces (the
  kernel's own `unshare`, for what only can happen after the fork), hides every job folder
  behind an empty tmpfs but its own, fresh one (cwd, HOME, TMPDIR, IPython's and matplotlib's
  folders, /dev/shm), keeps only its log pipe and /dev/null as descriptors, takes the job's
  environment and forks G, PID 1 of the new namespace;
- G drops every capability and forks the runner (R, `grader.grading.runner`), which forks the
  kernel (K) from itself; G reaps what is left to it and ends with R, and everything in the
  namespace ends with G: nothing a notebook starts outlives it;
- the only thing that goes back to the template is C's exit status.

    grading worker (host)             bubblewrap sandbox: the worker's user, no network, read-only system
    ─────────────────────             ───────────────────────────────────────────────────────────────────
    Template ─ control socket ─▶ template: imports done; sees every job folder; not dumpable
       │      (job, log pipe)        │ fork
       │                             ▼
       │◀── log pipe ──────────── C: new user/mount/PID/IPC namespaces; sees its own folder only
       │                             │ fork
       │                             ▼
       │                          G (PID 1): no capabilities; init ─ fork ─▶ R: runner ─ fork ─▶ K: kernel
       │◀── C's exit status, from the template ── (G ends with R; K and all K started end with G)
       └── watchdog (sandbox._watch): wall time, files, memory of C's tree; `Job.stop` kills C,
           and G with it (its parent-death signal), and so the whole namespace

Where forking cannot be used (no bubblewrap, no nested user namespaces, a template that will not
start), `Template.start` raises `Unavailable` with the reason and the sandbox starts the kernel
cold. A template that dies is started again for the next notebook; a notebook whose template died
under it is a machine failure, tried again, never scored (`Job.machine_failed`).
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STARTUP_FAILED = 75   # as the runner's: nothing of the learner's ran
HOLD = "/job"         # a mount point the sandbox has, where a job's folder waits while the others are hidden
HOLD_TMP = "/job-tmp"   # another, where the sandbox's /tmp waits while the job's own takes its place
# What the template imports: every unit's kernel needs these, and the runner's own; the kernel
# imports its debugger (debugpy, 0.1-0.3 s of CPU) as it starts.
MODULES = ("numpy", "torch", "torch.nn", "torch.nn.functional", "matplotlib.pyplot", "scipy.special",
           "IPython.display", "tqdm.auto", "grader.selfcheck", "grader.progress", "grader.grading.harness",
           "ipykernel.kernelapp", "ipykernel.debugger", "jupyter_client.manager", "jupyter_client.provisioning",
           "nbclient", "nbformat")


class Unavailable(Exception):
    """Forking kernels cannot be used here now; the message says why."""


# ─── host side: the grading worker ───────────────────────────────────────────────────────────

class Template:
    """The worker's template sandbox, and the channel to it.

        template = Template(command, env, jobs)              # starts it: returns at once
        template.ready(startup_seconds)                      # waits for its imports: seconds
        job = template.start(workdir, runner_args, env)      # forks: milliseconds

    Between the first two the worker does its own imports, on another core.
    """

    def __init__(self, command: list[str], env: dict[str, str], jobs: Path):
        self.jobs, self.closed = jobs, False
        self.seconds: float | None = None   # how long its imports took, once it is ready
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control = ours
        # A session of its own (made without a preexec_fn: the worker has threads), killed as one.
        self.proc = subprocess.Popen(command + [sys.executable, "-m", "grader.grading.template", str(jobs),
                                                str(theirs.fileno())],
                                     cwd=jobs, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()

    def ready(self, startup_seconds: float) -> None:
        """Wait until the template has done its imports (at once after the first time); raises
        Unavailable, and closes it, when it said it cannot or did not answer in time."""
        if self.seconds is not None:
            return
        hello = self._receive(startup_seconds)
        if not hello or not hello.get("ready"):
            reason = (hello or {}).get("reason") or self._last_words() or "it did not answer"
            self.close()
            raise Unavailable(f"the kernels' template did not start: {reason}")
        self.seconds = hello["seconds"]

    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def start(self, workdir: Path, argv: list[str], env: dict[str, str], rlimits: list[tuple[int, int]],
              startup_seconds: int) -> Job:
        """Fork a job for the notebook in `workdir`: its runner gets `argv`, its processes `env`
        and the limits `rlimits` ((RLIMIT_*, value) pairs)."""
        read, write = os.pipe()
        try:
            request = json.dumps({"workdir": str(workdir), "argv": argv, "env": env, "rlimits": rlimits}).encode()
            socket.send_fds(self.control, [request], [write])
        except OSError as exc:
            os.close(read)
            self.close()
            raise Unavailable(f"the kernels' template is gone ({exc})") from exc
        finally:
            os.close(write)
        started = self._receive(startup_seconds)
        if not started or "started" not in started:
            os.close(read)
            self.close()
            raise Unavailable("the kernels' template did not fork the notebook's job")
        return Job(self, started["started"], open(read, "rb"))

    def _receive(self, timeout: float) -> dict | None:
        """The template's next message, or None when it is gone or silent for `timeout` s."""
        ready, _, _ = select.select([self.control], [], [], timeout)
        if not ready:
            return None
        try:
            data = self.control.recv(65536)
        except OSError:
            return None
        return json.loads(data) if data else None

    def _last_words(self) -> str:
        if self.proc.poll() is None:
            return ""
        lines = self.proc.stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else f"exit code {self.proc.returncode}"

    def close(self) -> None:
        """Kill the sandbox and every job in it; once only (a process group's id is free again
        once it is gone, and may be another sandbox's)."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.control.close()
        if self.proc.stderr:
            self.proc.stderr.close()


class Job:
    """One notebook's forked child, seen from the worker as a `subprocess.Popen` is: `stdout`
    (the runner's log), `poll`, `wait`, `returncode`, `pid` (the child's, here: its memory is
    the notebook's), `stop`."""

    def __init__(self, template: Template, inner: int, stdout):
        self.template, self.inner, self.stdout = template, inner, stdout
        self.returncode: int | None = None
        self.machine_failed = False   # the template died under it: no verdict may come from it
        self.pid = _host_pid(template.proc.pid, inner) or template.proc.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._settle(timeout):
            raise subprocess.TimeoutExpired("notebook job", timeout)
        return self.returncode

    def _settle(self, timeout: float | None) -> bool:
        """Wait up to `timeout` s for the template's word that the job ended."""
        if self.template.closed:   # gone under it
            self.returncode, self.machine_failed = STARTUP_FAILED, True
            return True
        ready, _, _ = select.select([self.template.control], [], [], timeout)
        if not ready:
            return False
        try:
            data = self.template.control.recv(65536)
        except OSError:
            data = b""
        if not data:   # the template is gone, and the job with it
            self.returncode, self.machine_failed = STARTUP_FAILED, True
            self.template.close()
            return True
        self.returncode = _exit_code(json.loads(data)["status"])
        return True

    def stop(self) -> None:
        """Kill the job and everything in its namespace (a no-op once it has ended)."""
        if self.returncode is None:
            with contextlib.suppress(OSError):
                self.template.control.send(b'{"kill": true}')
            if not self._settle(10):   # the template does not answer: it goes, and the job with it
                self.template.close()
                self.returncode, self.machine_failed = STARTUP_FAILED, True


def _exit_code(status: int) -> int:
    """As bubblewrap reports it: 128 + the signal for a job killed by one."""
    return 128 - status if status < 0 else status


def descendants(root: int):
    """`root` and every process below it, as /proc lists them now (one that ends meanwhile is
    skipped)."""
    todo, seen = [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        yield pid
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            pass


def _host_pid(root: int, inner: int) -> int | None:
    """The id, as this process sees it, of the descendant of `root` whose id in the sandbox's
    PID namespace is `inner` (NSpid in /proc/PID/status lists a process's ids, outermost first)."""
    for pid in descendants(root):
        try:
            ids = next(line.split()[1:] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                       if line.startswith("NSpid:"))
            if len(ids) == 2 and int(ids[1]) == inner:
                return pid
        except (OSError, ValueError, StopIteration):
            pass
    return None


# ─── inside the sandbox: the template and its children ──────────────────────────────────────

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x8000000, 0x10000000, 0x20000000
MNT_DETACH = 2
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = \
    1, 2, 4, 8, 32, 4096, 8192, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    def c(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None
    _check(_libc.mount(c(source), c(target), c(kind), ctypes.c_ulong(flags), c(data)), f"mount {target}")


def _drop_capabilities() -> None:
    """No capability left, none to gain: the runner and the kernel hold nothing in their namespaces
    (so they cannot undo the mounts that hide the other folders)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break   # past the last capability this kernel knows
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)    # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                   # effective, permitted, inheritable: none
    _check(_libc.capset(header, data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _enter_namespaces() -> None:
    """New user, mount, PID and IPC namespaces for this process (its children get the PID one),
    the user id unchanged inside."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC), "unshare")
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)   # a process that is not owns none of its /proc files
    try:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    finally:
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)


def _own_folder(jobs: Path, workdir: Path) -> None:
    """Hide every job folder behind an empty tmpfs, except `workdir`, at its own path; its .shm as
    /dev/shm and its .tmp as /tmp (`_own_tmp`)."""
    if workdir.parent != jobs:
        raise ValueError(f"{workdir} is not a job folder of {jobs}")
    _mount(str(workdir), HOLD, None, MS_BIND | MS_REC)
    if (Path(HOLD) / ".tmp").is_dir():
        _own_tmp(Path(HOLD) / ".tmp", jobs)
    if jobs.is_dir():   # every other job's folder behind an empty tmpfs, with nothing beside it to write
        _mount("tmpfs", str(jobs), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        workdir.mkdir()
        _mount(None, str(jobs), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    else:   # the jobs' folder was in /tmp, which is now the job's own: the job's path made again there
        workdir.mkdir(parents=True)
    _mount(HOLD, str(workdir), None, MS_MOVE)
    if (workdir / ".shm").is_dir():
        _mount(str(workdir / ".shm"), "/dev/shm", None, MS_BIND)


def _own_tmp(tmp: Path, jobs: Path) -> None:
    """The job's folder `tmp` as /tmp: what the notebook writes there lands in its own folder, which
    the watchdog counts against its limit on files and which goes when the job ends; no later
    notebook on this template sees it. What the sandbox mounts below /tmp (the course's package or
    its Python, where they lie in /tmp) is put back at its place, read-only as it was; the jobs'
    folder is not."""
    kept = []
    for mounted in sorted(_mount_points(), key=len):
        inside = mounted.startswith("/tmp/") and not Path(mounted).is_relative_to(jobs)
        if inside and not any(Path(mounted).is_relative_to(top) for top in kept):
            kept.append(mounted)
    _mount("/tmp", HOLD_TMP, None, MS_BIND | MS_REC)
    _mount(str(tmp), "/tmp", None, MS_BIND)
    for mounted in kept:
        Path(mounted).mkdir(parents=True, exist_ok=True)
        _mount(HOLD_TMP + mounted[len("/tmp"):], mounted, None, MS_BIND | MS_REC)
    _check(_libc.umount2(HOLD_TMP.encode(), MNT_DETACH), f"umount {HOLD_TMP}")   # the other jobs, out of reach


def _mount_points() -> list[str]:
    """Where something is mounted in this mount namespace (/proc/self/mountinfo's fifth field)."""
    with open("/proc/self/mountinfo") as table:
        return [line.split()[4].encode().decode("unicode_escape") for line in table]


def apply_rlimits(wanted: list[tuple[int, int]]) -> None:
    """Lower each limit to its value (never above the hard limit there is: only root may raise one)."""
    for limit, value in wanted:
        _, hard = resource.getrlimit(limit)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (cap, cap))


def _reseed() -> None:
    """Fresh randomness, as a cold kernel's: a fork copies the template's generators."""
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _job(jobs: Path, request: dict) -> int:
    """In C: make the job's namespaces and folder, run G, and return G's status as an exit code."""
    os.setsid()
    apply_rlimits(request["rlimits"])
    _enter_namespaces()
    workdir = Path(request["workdir"])
    _own_folder(jobs, workdir)
    with contextlib.suppress(OSError):   # when memory runs out, the kernel's killer takes a job, not the template
        Path("/proc/self/oom_score_adj").write_text("500")
    init = os.fork()
    if init == 0:   # G: PID 1 of the job's namespace
        code = STARTUP_FAILED
        try:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if request.get("proc"):   # its own /proc, where the system lets a namespace have one
                _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            _drop_capabilities()
            _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)   # as a started program is: its /proc files its own
            os.chdir(workdir)
            os.environ.clear()
            os.environ.update(request["env"])
            code = _init(request["argv"])
        except BaseException as exc:   # noqa: BLE001 - anything before the first cell is the machine's
            print(f"the forked job failed: {type(exc).__name__}: {exc}", flush=True)
        os._exit(code)
    return _status_code(os.waitpid(init, 0)[1])


def _status_code(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _init(argv: list[str]) -> int:
    """In G, the namespace's init, as bubblewrap's is in a cold sandbox: fork the runner, reap
    whatever is left to it, and end with the runner (which ends the namespace). The runner is
    not PID 1, so the kernel can signal it as it can a cold one."""
    runner = os.fork()
    if runner == 0:
        code = STARTUP_FAILED
        try:
            import tempfile
            tempfile.tempdir = None
            _reseed()
            from .runner import main
            code = main(argv, forked=True)
        except BaseException as exc:   # noqa: BLE001
            print(f"the forked job failed: {type(exc).__name__}: {exc}", flush=True)
        os._exit(code)
    while True:
        pid, status = os.wait()
        if pid == runner:
            return _status_code(status)


def _fork(jobs: Path, request: dict, log: int) -> int:
    """Fork C for `request`, its standard output and error on `log`, nothing else open."""
    pid = os.fork()
    if pid:
        return pid
    code = STARTUP_FAILED
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        code = _job(jobs, request)
    except BaseException as exc:   # noqa: BLE001
        with contextlib.suppress(Exception):
            print(f"the forked job failed: {type(exc).__name__}: {exc}", flush=True)
    os._exit(code)


def _probe() -> tuple[str | None, bool]:
    """Why jobs cannot be forked here (None: they can), and whether a job's namespace may mount
    a /proc of its own (a sandbox that covers parts of its /proc keeps a nested one from it): a
    child tries what a job does."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            _enter_namespaces()
            inner = os.fork()
            if inner == 0:
                try:
                    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                    proc = True
                except OSError:
                    proc = False
                os._exit(0 if os.getpid() == 1 and proc else 2 if os.getpid() == 1 else 1)
            code = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
        except BaseException as exc:   # noqa: BLE001
            with contextlib.suppress(Exception):
                sys.stderr.write(f"{exc}\n")
                sys.stderr.flush()
        os._exit(code)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status in (0, 2):
        return None, status == 0
    return "this machine refuses nested user or PID namespaces", False


def serve(jobs: Path, control: socket.socket) -> None:
    """The template: import, say hello, then fork one job at a time until the worker goes."""
    start = time.monotonic()
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")
    for module in MODULES:
        before = set(sys.modules)
        try:
            __import__(module)
        except Exception:   # noqa: BLE001 - a module half imported would break the kernels' own import
            for name in set(sys.modules) - before:
                del sys.modules[name]
    with contextlib.suppress(Exception):   # a kernel reads them itself if they cannot be read here
        _read_fixtures()
    threads = len(os.listdir("/proc/self/task"))
    reason, proc = _probe()
    if threads > 1:
        reason = f"the imports started {threads - 1} thread(s), which a fork would lose"
    control.send(json.dumps({"ready": reason is None, "reason": reason,
                             "seconds": time.monotonic() - start}).encode())
    if reason:
        return
    while True:
        message, fds, _, _ = socket.recv_fds(control, 65536, 1)
        if not message:
            return   # the worker is gone
        if not fds:
            continue   # a kill that crossed the job's end: nothing to do
        try:
            child = _fork(jobs, {**json.loads(message), "proc": proc}, fds[0])
        finally:
            for fd in fds:
                os.close(fd)
        control.send(json.dumps({"started": child}).encode())
        _supervise(control, child)


def _read_fixtures() -> None:
    """The self-checks' stored values, read here once rather than at every notebook's first
    self-check (about 0.3 s of each): the editions' values, and which unit checks what."""
    from grader import fixtures
    from grader.checks.i18n import CHINESE, ENGLISH, catalogue

    fixtures.exercises()
    for language in (ENGLISH, CHINESE):
        fixtures.entries(language)
        catalogue(language)


def _supervise(control: socket.socket, child: int) -> None:
    """Wait for the job to end, killing it when the worker says so; then send its status."""
    pidfd = os.pidfd_open(child)
    try:
        while True:
            ready, _, _ = select.select([control, pidfd], [], [])
            if pidfd in ready:
                break
            message = control.recv(65536)
            if not message:   # the worker is gone: so is the job
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                raise SystemExit(0)
            os.kill(child, signal.SIGKILL)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(child, 0)
    control.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())


if __name__ == "__main__":
    serve(Path(sys.argv[1]), socket.socket(fileno=int(sys.argv[2])))
