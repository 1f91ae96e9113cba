"""Run a notebook in a separate process with limits on time, memory and file size.

`execute(notebook, workdir)` starts `python -m grader.sandbox` in its own process group. That
process runs the cells one by one in a fresh kernel, saving the executed notebook after each
cell, so whatever happens (an endless loop, a crash, `os._exit`, running out of memory) the
cells that finished keep their outputs and the grader still decides every grade.
"""
from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

CELL_TIMEOUT = 60          # seconds a cell may run
NOTEBOOK_TIMEOUT = 600     # seconds the whole notebook may run
MEMORY_LIMIT = 6 * 2**30   # bytes of address space for the kernel (torch needs about 1.5 GiB)
FILE_LIMIT = 256 * 2**20   # bytes any file written may have


@dataclass
class Outcome:
    executed: object        # the notebook as far as it ran
    problem: str | None     # why it stopped early, if it did
    seconds: float


def _limits() -> None:
    """Applied in the child before it starts: the kernel inherits them."""
    os.setsid()
    for limit, value in ((resource.RLIMIT_AS, MEMORY_LIMIT), (resource.RLIMIT_FSIZE, FILE_LIMIT),
                         (resource.RLIMIT_CORE, 0)):
        soft, hard = resource.getrlimit(limit)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (cap, cap))


def execute(notebook, workdir: Path, cell_timeout: int = CELL_TIMEOUT,
            notebook_timeout: int = NOTEBOOK_TIMEOUT) -> Outcome:
    workdir = Path(workdir)
    src, out = workdir / "to_run.ipynb", workdir / "executed.ipynb"
    nbformat.write(notebook, src)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "NBGRADER_EXECUTION": "autograde",   # training cells run their short configuration
        "JUPYTER_PLATFORM_DIRS": "1",
        "JUPYTER_RUNTIME_DIR": str(workdir / ".runtime"),
        "IPYTHONDIR": str(workdir / ".ipython"),
        "MPLCONFIGDIR": str(workdir / ".matplotlib"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
    }
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "grader.sandbox", str(src), str(out), str(cell_timeout)],
                            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_limits)
    problem = None
    try:
        log, _ = proc.communicate(timeout=notebook_timeout)
        if proc.returncode != 0:
            tail = log.decode(errors="replace").strip().splitlines()[-1:] or [""]
            problem = f"the notebook's process stopped (exit code {proc.returncode}): {tail[0][:200]}"
    except subprocess.TimeoutExpired:
        problem = f"the notebook ran longer than {notebook_timeout} s and was stopped"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the kernel and anything it started
        except ProcessLookupError:
            pass
        proc.wait()
    try:
        executed = nbformat.read(out, as_version=4)
    except Exception:
        executed = None
    marker = workdir / "stopped.txt"
    if marker.exists() and problem is None:
        problem = marker.read_text()
    return Outcome(executed, problem, time.monotonic() - start)


def _run(src: str, out: str, cell_timeout: int) -> int:
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.read(src, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                            interrupt_on_timeout=True, record_timing=False,
                            error_on_timeout={"ename": "TimeoutError",
                                              "evalue": f"the cell ran longer than {cell_timeout} s",
                                              "traceback": []},
                            resources={"metadata": {"path": str(Path(src).parent)}})
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                Path(out).with_name("stopped.txt").write_text(
                    f"the kernel died in cell {index + 1} (out of memory, a crash, or an exit call)")
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
    parser.add_argument("cell_timeout", type=int)
    ns = parser.parse_args()
    raise SystemExit(_run(ns.src, ns.out, ns.cell_timeout))
