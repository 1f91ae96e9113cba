"""Run a notebook's cells in a confined process: bubblewrap, plus limits on time and resources.

`execute(notebook, workdir, limits)` runs `python -m grader.sandbox` (the `_run` below) inside
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
limits apply, and `confinement()` says so loudly.

The runner saves the executed notebook after every cell, so whatever happens (an endless loop,
a crash, `os._exit`, running out of memory) the cells that finished keep their outputs.
"""
from __future__ import annotations

import argparse
import functools
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import i18n
from .i18n import say
from .settings import Limits, MiB

NOBODY = 65534
EXECUTED_BYTES = 64 * MiB   # the executed notebook read back: its outputs are capped per cell
PACKAGE = Path(__file__).resolve().parent


@dataclass
class Outcome:
    executed: object        # the notebook as far as it ran, or None
    problem: str | None     # why it stopped early, if it did
    seconds: float


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
    command += ["--proc", "/proc", "--dev", "/dev"]   # /dev/shm: in the scratch folder, see execute()
    command.append("--")
    tail = _drop_to(NOBODY) if as_root else []
    probe = subprocess.run(command + tail + [sys.executable, "-c", "pass"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        return Confinement((), unconfined.description + f" (bwrap failed: {reason[0][:200]})", False)
    who = "a user id of its own" if as_root else "uid 65534 in a user namespace"
    return Confinement(tuple(command), f"bubblewrap: {who}, no network, read-only system and course "
                                       "package, a private scratch folder", as_root)


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


def _limits(limits: Limits, processes: int | None) -> None:
    """Applied in the child before it starts: bubblewrap, the runner and the kernel inherit them."""
    os.setsid()
    wanted = [(resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.file_bytes),
              (resource.RLIMIT_CPU, limits.cpu_seconds), (resource.RLIMIT_CORE, 0)]
    if processes is not None:
        wanted.append((resource.RLIMIT_NPROC, processes))
    for limit, value in wanted:
        _, hard = resource.getrlimit(limit)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (cap, cap))


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


def _tree_memory(pid: int) -> int:
    """Bytes of memory that `pid` and all its descendants use (their proportional share of
    pages, so that forked children are not counted twice). RLIMIT_AS caps each process; this
    caps them together."""
    total, todo, seen = 0, [pid], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    todo += [int(child) for child in handle.read().split()]
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next((int(line.split()[1]) * 1024 for line in handle if line.startswith("Pss:")), 0)
        except (OSError, ValueError):  # it ended meanwhile
            pass
    return total


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
            if stream and output.get("text") == _capped_notice(output_bytes):  # the runner capped it already
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
            kept.append(nbformat.v4.new_output("stream", name="stdout", text=_capped_notice(output_bytes)))
            full = True
        cell.outputs = kept
    return nb


def _capped_notice(output_bytes: int) -> str:
    return "\n" + say("[the grader kept only the first {kib} KiB of this cell's output]", kib=output_bytes // 1024) + "\n"


def execute(notebook, workdir: Path, limits: Limits) -> Outcome:
    """Run `notebook` in `workdir` (a fresh folder holding nothing else the learner may see)."""
    workdir = Path(workdir).resolve()
    src, out, shm = workdir / "to_run.ipynb", workdir / "executed.ipynb", workdir / ".shm"
    nbformat.write(notebook, src)
    shm.mkdir()
    jail = confinement()
    prefix, suffix = list(jail.command), []
    if jail.drops_user:
        uid = sandbox_uid()
        for path in (workdir, *workdir.iterdir()):
            os.chown(path, uid, uid)
        suffix = _drop_to(uid)
        processes = limits.processes
    elif jail.command:
        processes = _own_tasks() + limits.processes   # the count includes the instructor's own
    else:
        processes = None   # the instructor's own processes share the count: leave it alone
    env = {
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
    if prefix:  # the scratch folder, the only writable place, goes before bubblewrap's "--";
        # /dev/shm lives in it, so that the watchdog's cap on files counts what is written there
        prefix[-1:-1] = [*_parents(workdir, set()), "--bind", str(workdir), str(workdir),
                         "--bind", str(shm), "/dev/shm", "--chdir", str(workdir)]
    command = prefix + suffix + [sys.executable, "-m", "grader.sandbox", str(src), str(out),
                        str(limits.cell_seconds), str(limits.startup_seconds), str(limits.output_bytes)]
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=lambda: _limits(limits, processes))
    problem = _watch(proc, workdir, limits, start)
    try:  # learner code may have replaced it: read it as the runner would have written it
        text = read_scratch(out, EXECUTED_BYTES).decode("utf-8")
        executed = cap_outputs(nbformat.reads(text, as_version=4), limits.output_bytes)
    except Exception:  # missing, replaced or broken by learner code
        executed = None
    marker = workdir / "stopped.txt"
    if problem is None and (text := read_scratch(marker, 4096)):
        problem = text.decode(errors="replace")[:300]
    return Outcome(executed, problem, time.monotonic() - start)


def _watch(proc: subprocess.Popen, workdir: Path, limits: Limits, start: float) -> str | None:
    """Wait for the runner, stopping it when the notebook runs too long or writes too much;
    the runner's own log (which learner code can flood) is kept to its last bytes."""
    import threading

    tail = bytearray()

    def drain() -> None:
        for chunk in iter(lambda: proc.stdout.read(65536), b""):
            tail.extend(chunk)
            del tail[:-4096]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    problem = None
    try:
        while proc.poll() is None:
            if time.monotonic() - start > limits.notebook_seconds:
                problem = say("the notebook ran longer than {seconds} s and was stopped", seconds=limits.notebook_seconds)
                break
            if _folder_bytes(workdir) > limits.scratch_bytes:
                problem = say("the notebook wrote more than {mib} MiB of files and was stopped",
                              mib=limits.scratch_bytes // MiB)
                break
            if _tree_memory(proc.pid) > limits.memory_bytes:
                problem = say("the notebook's processes together used more than {mib} MiB of memory and were "
                              "stopped", mib=limits.memory_bytes // MiB)
                break
            time.sleep(0.25)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the sandbox and everything in it
        except ProcessLookupError:
            pass
        proc.wait()
        reader.join(timeout=5)
    code = proc.returncode
    if problem is None and (code < 0 or code > 128):  # bubblewrap passes on a signal as 128 + its number
        problem = say("the notebook's process was killed (signal {signal}), by its own code or by running out "
                      "of memory", signal=abs(code) % 128)
    elif problem is None and code != 0:
        last = tail.decode(errors="replace").strip().splitlines()[-1:] or [""]
        problem = say("the notebook's process stopped (exit code {code}): {last}", code=code, last=last[0][:200])
    return problem


# --- inside the sandbox ------------------------------------------------------------------------

def _run(src: str, out: str, cell_seconds: int, startup_seconds: int, output_bytes: int) -> int:
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    class CappedClient(NotebookClient):
        """Keeps at most `output_bytes` of output per cell, then one notice; errors are always
        kept (they are how the grader learns that a self-check failed)."""
        sizes: dict[int, int] = {}   # bytes of output kept so far, per cell
        capped: set[int] = set()

        def output(self, outs, msg, display_id, cell_index):
            if msg["msg_type"] == "error":
                return super().output(outs, msg, display_id, cell_index)
            left = output_bytes - self.sizes.get(cell_index, 0)
            content, cut = msg["content"], False
            if msg["msg_type"] == "stream" and len(content.get("text", "")) > left > 0:
                content["text"], cut = content["text"][:left], True   # the kernel sends output in batches
            size = len(content["text"]) if msg["msg_type"] == "stream" else len(str(content))
            kept = None
            if size <= left:
                self.sizes[cell_index] = output_bytes - left + size
                kept = super().output(outs, msg, display_id, cell_index)
            if (cut or size > left) and cell_index not in self.capped:  # say it once
                self.capped.add(cell_index)
                outs.append(nbformat.v4.new_output("stream", name="stdout", text=_capped_notice(output_bytes)))
            return kept

        async def _async_handle_timeout(self, timeout, cell=None):
            if cell is not None:  # the grader tells a cut-off cell from one whose code raised
                cell.metadata.setdefault("grader", {})["timed_out"] = True
            return await super()._async_handle_timeout(timeout, cell)

    nb = nbformat.read(src, as_version=4)
    client = CappedClient(nb, timeout=cell_seconds, startup_timeout=startup_seconds, kernel_name="python3",
                          allow_errors=True, interrupt_on_timeout=True, record_timing=False,
                          extra_arguments=["--IPKernelApp.ignore_cwd=True"],
                          error_on_timeout={"ename": "TimeoutError",
                                            "evalue": say("the cell ran longer than {seconds} s", seconds=cell_seconds),
                                            "traceback": []},
                          resources={"metadata": {"path": str(Path(src).parent)}})
    _save(nb, out)  # a notebook killed in its first cell still comes back, unrun
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                Path(out).with_name("stopped.txt").write_text(
                    "the kernel died (a crash, running out of memory, or an exit call)")
                break
            finally:
                _save(nb, out)
    _save(nb, out)
    return 0


def _save(nb, out: str) -> None:
    """Write then rename, so a write cut short (file-size limit, kill) leaves the last good copy."""
    tmp = out + ".tmp"
    nbformat.write(nb, tmp)
    os.replace(tmp, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("src")
    parser.add_argument("out")
    parser.add_argument("cell_seconds", type=int)
    parser.add_argument("startup_seconds", type=int)
    parser.add_argument("output_bytes", type=int)
    ns = parser.parse_args()
    raise SystemExit(_run(ns.src, ns.out, ns.cell_seconds, ns.startup_seconds, ns.output_bytes))
