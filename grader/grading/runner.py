"""Inside the sandbox: start a kernel, then run the grader's notebook in it cell by cell.

    python -m grader.grading.runner SRC OUT CELL_SECONDS STARTUP_SECONDS OUTPUT_BYTES WARM PROCESSES

`grader.grading.sandbox` starts this in bubblewrap before the notebook is ready. The kernel is launched
first thing, so that it boots while this process imports the rest of what it needs; then the
kernel imports the modules in WARM (the ones the notebook will import), and this process waits
for the grader to put the notebook at SRC. It saves the executed notebook to OUT after every
cell, so whatever happens (an endless loop, a crash, `os._exit`, running out of memory) the
cells that finished keep their outputs, and records in timing.json where the time went.

When anything fails before the notebook's first cell runs (the kernel cannot start, dies
before it answers or while it imports WARM, the notebook never arrives), no learner code has
run: the runner prints why on one line and exits with STARTUP_FAILED, and the grader tries
again rather than blame the notebook. A runner killed before then (it never printed
FIRST_CELL) is the machine's failure too. PROCESSES, unless 0, is the process limit this runner
sets on itself first (see grader.grading.sandbox).

Only the standard library and jupyter_client are imported before the kernel is launched.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import time
from pathlib import Path

from ..checks.i18n import say

STARTUP_FAILED = 75   # EX_TEMPFAIL: the sandbox failed before any learner code ran; try again
# Printed on the runner's log just before the notebook's first cell. The grader reads the log as
# it comes, so once this has passed, learner code cannot take it back; a runner that ends
# without it (killed by a machine short of processes, say) ran no learner code.
FIRST_CELL = b"grader runner: the notebook's first cell starts"


def capped_notice(output_bytes: int) -> str:
    kept = say("[the grader kept only the first {kib} KiB of this cell's output]", kib=output_bytes // 1024)
    return "\n" + kept + "\n"


def run(src: str, out: str, cell_seconds: int, startup_seconds: int, output_bytes: int, warm: list[str],
        processes: int = 0, forked: bool = False) -> int:
    try:
        client, kernel, marks = _start(src, cell_seconds, startup_seconds, output_bytes, warm, processes, forked)
    except Exception as exc:   # nothing of the learner's has run: the grader tries again
        print(f"{type(exc).__name__}: {exc}".strip(), flush=True)
        return STARTUP_FAILED
    _execute(client, kernel, marks, out)
    return 0


class StartupError(Exception):
    """The sandbox could not get ready for the notebook."""


def _start(src: str, cell_seconds: int, startup_seconds: int, output_bytes: int, warm: list[str], processes: int,
           forked: bool):
    """A kernel that answers and has imported WARM, and the notebook at SRC read into a client:
    everything up to the notebook's first cell. `forked`: the kernel is forked from this process
    (a warm template's job, see grader.grading.template), not started as a program."""
    if processes:   # never above the limit it has (only root may raise one)
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        cap = processes if hard == resource.RLIM_INFINITY else min(processes, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
    marks: dict = {}
    from jupyter_client.manager import AsyncKernelManager  # the kind nbclient makes for itself
    from jupyter_core.utils import run_sync

    if forked:
        km = _forked_kernel()
    else:
        km = AsyncKernelManager(kernel_name="python3")
        run_sync(km.start_kernel)(extra_arguments=["--IPKernelApp.ignore_cwd=True"])

    import nbformat
    from nbclient import NotebookClient

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
                outs.append(nbformat.v4.new_output("stream", name="stdout", text=capped_notice(output_bytes)))
            return kept

        async def _async_handle_timeout(self, timeout, cell=None):
            if cell is not None:  # the grader tells a cut-off cell from one whose code raised
                cell.metadata.setdefault("grader", {})["timed_out"] = True
            return await super()._async_handle_timeout(timeout, cell)

    marks["runner"] = time.time()
    client = CappedClient(nbformat.v4.new_notebook(), km=km, timeout=cell_seconds, startup_timeout=startup_seconds,
                          allow_errors=True, interrupt_on_timeout=True, record_timing=False,
                          error_on_timeout={"ename": "TimeoutError",
                                            "evalue": say("the cell ran longer than {seconds} s", seconds=cell_seconds),
                                            "traceback": []},
                          resources={"metadata": {"path": str(Path(src).parent)}})
    alive = run_sync(km.is_alive)
    try:
        client.start_new_kernel_client()   # waits for the kernel's first answer (kernel_info)
    except RuntimeError as exc:   # "Kernel died before replying to kernel_info", "didn't respond in 120 seconds"
        raise StartupError(f"{exc} ({_exit_status(km)})") from exc
    kernel = _as_proc_sees(km.provisioner.pid)
    marks["kernel"], marks["kernel_start_cpu"] = time.time(), _cpu_seconds(kernel)
    if warm:  # imports that bind no name: the learner's namespace stays a fresh kernel's
        warming = client.kc.execute(f"for _m in {warm!r}:\n    try:\n        __import__(_m)\n"
                                    "    except Exception:\n        pass\ndel _m", silent=True, store_history=False)
        with contextlib.suppress(Exception):   # a slow import only means a slower first cell
            client.wait_for_reply(warming)
    marks["warm"], marks["kernel_warm_cpu"] = time.time(), _cpu_seconds(kernel)
    deadline = time.monotonic() + startup_seconds
    while not Path(src).exists():
        if time.monotonic() > deadline:
            raise StartupError(f"the notebook did not arrive within {startup_seconds} s")
        time.sleep(0.005)
    if not alive():
        raise StartupError(f"the kernel died before the notebook's first cell ({_exit_status(km)})")
    marks["notebook"] = time.time()
    client.nb = nbformat.read(src, as_version=4)
    return client, kernel, marks


def _forked_kernel():
    """A kernel manager whose kernel is a fork of this process: its connection file is written,
    then the child becomes the kernel, before this process makes any event loop or ZMQ context
    (a fork copies neither safely). The manager sees the child as it would a launched kernel."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_client.provisioning import LocalProvisioner

    km = AsyncKernelManager(kernel_name="python3")
    km.write_connection_file()
    pid = os.fork()
    if pid == 0:   # the kernel, as `python -m ipykernel_launcher -f FILE` would be
        code = 1
        try:
            os.setsid()   # its own process group, as a launched kernel's: interrupts go to it alone
            from ipykernel.kernelapp import IPKernelApp
            sys.argv = ["ipykernel_launcher", "-f", km.connection_file]
            app = IPKernelApp.instance()
            app.initialize(["-f", km.connection_file, "--IPKernelApp.ignore_cwd=True"])
            app.start()
            code = 0
        finally:
            os._exit(code)
    provisioner = LocalProvisioner(kernel_id=km.kernel_id or "forked", kernel_spec=km.kernel_spec, parent=km)
    provisioner.process, provisioner.pid, provisioner.pgid = _Child(pid), pid, pid
    provisioner.connection_info = km.get_connection_info()
    km.provisioner = provisioner
    return km


class _Child:
    """A forked child, with what jupyter_client's provisioner uses of a `subprocess.Popen`."""
    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(9)

    def terminate(self) -> None:
        self.send_signal(15)


def _execute(client, kernel: int, marks: dict, out: str) -> None:
    """Run the notebook's cells one by one, saving it after each; never returns."""
    from nbclient.exceptions import DeadKernelError

    nb, cells = client.nb, []
    _save(nb, out)  # a notebook killed in its first cell still comes back, unrun
    os.write(1, FIRST_CELL + b"\n")
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        start, cpu = time.monotonic(), _cpu_seconds(kernel)
        try:
            client.execute_cell(cell, index)
        except DeadKernelError:
            Path(out).with_name("stopped.txt").write_text(
                "the kernel died (a crash, running out of memory, or an exit call)")
            break
        finally:
            _save(nb, out)
            role = cell.metadata.get("grader", {})
            cells.append(("calls" if "calls" in role else "self-check" if "visible" in role else "cell",
                          time.monotonic() - start, _cpu_seconds(kernel) - cpu))
    _save(nb, out)
    marks["ended"], marks["runner_cpu"] = time.time(), time.process_time()
    Path(out).with_name("timing.json").write_text(json.dumps({**marks, "cells": cells}))
    # Everything is saved. The sandbox ends with this process, and the kernel with it: skip
    # shutting the kernel down and tearing the interpreter down (a fifth of a second).
    os._exit(0)


def _exit_status(km) -> str:
    """How the kernel ended, for the grader's log: "exit status -6" is a SIGABRT (zmq aborts so
    when it cannot start a thread)."""
    process = getattr(km.provisioner, "process", None)
    status = process.poll() if process is not None else None
    return "the kernel is still running" if status is None else f"the kernel's exit status: {status}"


def _save(nb, out: str) -> None:
    """Write then rename, so a write cut short (file-size limit, kill) leaves the last good copy.
    Plain JSON, neither validated nor pretty-printed: it is saved after every cell, and the
    grader reads it with nbformat, which validates it once."""
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(nb, handle, ensure_ascii=False)
    os.replace(tmp, out)


def _as_proc_sees(child: int) -> int:
    """`child`'s id in /proc: the same, unless /proc belongs to an outer PID namespace (a forked
    job's, where the system kept it from mounting its own), where this process's only child is
    found as /proc lists it."""
    with contextlib.suppress(OSError, ValueError):
        if os.readlink("/proc/self") != str(os.getpid()):
            me = os.readlink("/proc/self")
            for task in os.listdir(f"/proc/{me}/task"):
                found = Path(f"/proc/{me}/task/{task}/children").read_text().split()
                if found:
                    return int(found[0])
    return child


def _cpu_seconds(pid: int) -> float:
    """CPU seconds `pid` has used so far (its /proc/PID/stat), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def main(argv: list[str], forked: bool = False) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("src")
    parser.add_argument("out")
    parser.add_argument("cell_seconds", type=int)
    parser.add_argument("startup_seconds", type=int)
    parser.add_argument("output_bytes", type=int)
    parser.add_argument("warm", help="modules to import in the kernel before the notebook arrives, comma-separated")
    parser.add_argument("processes", type=int, help="the process limit to set first (0: as inherited)")
    ns = parser.parse_args(argv)
    return run(ns.src, ns.out, ns.cell_seconds, ns.startup_seconds, ns.output_bytes,
               [m for m in ns.warm.split(",") if m], ns.processes, forked)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
