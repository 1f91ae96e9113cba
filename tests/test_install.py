"""Which PyTorch build the course's installs ask pip for (the rule: grader/classroom/torch_index.py).

`./course` runs for real in a copy of the repository whose .venv/bin/python only records what it
is asked to do, so nothing is installed and nothing is downloaded; a local server stands in for
PyTorch's CPU index (COURSE_TORCH_INDEX), one that never answers and a closed port for an
unreachable one."""
from __future__ import annotations

import contextlib
import http.server
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from grader.classroom import torch_index
from grader.classroom.torch_index import CPU_INDEX, PROBE_SECONDS, torch_pip_arguments, wanted_index

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PATH = "/usr/bin:/bin"
# ./course's branches and the extras each installs
BRANCHES = {"lab": "lab", "test": "lab,grader,test", "hub": "lab,grader,hub"}


def _no_gpu_here() -> None:
    if shutil.which("nvidia-smi", path=SYSTEM_PATH) or torch_index.NVIDIA_DRIVER.exists():
        pytest.skip("this machine has an NVIDIA driver: a machine without one cannot be simulated here")


@contextlib.contextmanager
def _server(answers: bool = True, folder: Path | None = None):
    """A local stand-in for the CPU index: one that answers every page (with `folder`: serves it,
    listing each folder as an index's page), or one that accepts connections and never answers.
    Yields its address."""
    if not answers:
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)   # the kernel completes the connection; nobody ever reads or answers
            yield f"http://127.0.0.1:{silent.getsockname()[1]}/whl/cpu"
        return

    class Index(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder or Path.cwd()), **kwargs)

        def do_GET(self):
            if folder:
                return super().do_GET()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}" + ("" if folder else "/whl/cpu")
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> str:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"


def _run_course(tmp_path: Path, branch: str, env: dict[str, str], gpu: bool = False, check: bool = True):
    """`./course <branch>` in a copy of the repository's script, rule and dependency list, whose
    .venv/bin/python records each call. Returns (the finished process, the calls, seconds)."""
    copy = tmp_path / "repository"
    (copy / "grader" / "classroom").mkdir(parents=True)
    shutil.copy(ROOT / "course", copy / "course")
    shutil.copy(ROOT / "grader" / "classroom" / "torch_index.py", copy / "grader" / "classroom")
    shutil.copy(ROOT / "pyproject.toml", copy)
    calls = tmp_path / "calls"
    fake = copy / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(calls))}\n')
    fake.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpu:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI 550.54'\n")
        smi.chmod(0o755)
    environment = {"PATH": f"{bin_dir}:{SYSTEM_PATH}", "HOME": str(tmp_path), "PYTHON": sys.executable, **env}
    start = time.monotonic()
    # hub --help: the hub's own checks of the machine (root, its proxy) step aside for --help, the install does not
    arguments = [branch, "--help"] if branch == "hub" else [branch]
    done = subprocess.run([shutil.which("bash"), str(copy / "course"), *arguments], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - start
    assert done.returncode == 0 or not check, done.stderr
    return done, calls.read_text().splitlines() if calls.exists() else [], seconds


def _the_install(calls: list[str], branch: str) -> str:
    """The one pip call that installs the course with the branch's extras."""
    [install] = [c for c in calls if c.startswith("-m pip install") and f"-e .[{BRANCHES[branch]}]" in c]
    return install


@pytest.mark.parametrize("branch", BRANCHES)
def test_without_an_nvidia_gpu_every_branch_installs_pytorchs_cpu_build(branch, tmp_path):
    _no_gpu_here()
    with _server() as index:
        done, calls, _ = _run_course(tmp_path, branch, {"COURSE_TORCH_INDEX": index})
    install = _the_install(calls, branch)
    assert install.split().count("--extra-index-url") == 1 and f"--extra-index-url {index} " in install, install
    assert "--quiet" not in install, "the long install shows pip's progress"
    assert [c for c in calls if "--upgrade pip" in c] == ["-m pip install --quiet --upgrade pip"]
    assert "did not answer" not in done.stderr and "NVIDIA" not in done.stdout + done.stderr


@pytest.mark.parametrize("branch", BRANCHES)
def test_with_an_nvidia_gpu_pip_takes_its_default_build(branch, tmp_path):
    with _server() as index:
        done, calls, _ = _run_course(tmp_path, branch, {"COURSE_TORCH_INDEX": index}, gpu=True)
    assert "--extra-index-url" not in _the_install(calls, branch)
    assert "an NVIDIA GPU is here" in done.stderr


def test_course_torch_cuda_takes_the_default_build_and_cpu_the_cpu_one_even_beside_a_gpu(tmp_path):
    _no_gpu_here()
    with _server() as index:
        _, calls, _ = _run_course(tmp_path / "cuda", "lab", {"COURSE_TORCH_INDEX": index, "COURSE_TORCH": "cuda"})
        assert "--extra-index-url" not in _the_install(calls, "lab")
        _, calls, _ = _run_course(tmp_path / "cpu", "lab", {"COURSE_TORCH_INDEX": index, "COURSE_TORCH": "cpu"},
                                  gpu=True)
        assert f"--extra-index-url {index} " in _the_install(calls, "lab")


def test_a_wrong_course_torch_stops_before_installing(tmp_path):
    done, calls, _ = _run_course(tmp_path, "lab", {"COURSE_TORCH": "rocm"}, check=False)
    assert done.returncode != 0 and calls == []
    assert "course: COURSE_TORCH='rocm' is not cpu, cuda or auto" in done.stderr


@pytest.mark.parametrize("unreachable", ["silent", "closed"])
def test_an_unreachable_index_is_said_in_one_line_and_pip_goes_on_without_it(unreachable, tmp_path):
    """A server that never answers costs the probe's few seconds, a closed port none; pip then
    installs from PyPI alone."""
    _no_gpu_here()
    if unreachable == "closed":
        done, calls, seconds = _run_course(tmp_path, "lab", {"COURSE_TORCH_INDEX": _closed_port()})
    else:
        with _server(answers=False) as index:
            done, calls, seconds = _run_course(tmp_path, "lab", {"COURSE_TORCH_INDEX": index})
    said = [line for line in done.stderr.splitlines() if "did not answer" in line]
    assert len(said) == 1 and said[0].startswith("course: PyTorch's CPU index "), done.stderr
    assert "--extra-index-url" not in _the_install(calls, "lab")
    assert seconds < PROBE_SECONDS + 5, seconds


def test_the_rule_on_each_system():
    """The CPU index by default on Linux without a driver; PyPI's own wheels (CPU-only there) on
    macOS and Windows; COURSE_TORCH decides where it is set; a mirror replaces the address."""
    _no_gpu_here()
    bare = {"PATH": SYSTEM_PATH}
    assert wanted_index(bare, "linux") == CPU_INDEX
    assert wanted_index(bare, "darwin") is None and wanted_index(bare, "win32") is None
    assert wanted_index({**bare, "COURSE_TORCH": "cuda"}, "linux") is None
    assert wanted_index({**bare, "COURSE_TORCH": "CPU"}, "darwin") == CPU_INDEX
    assert wanted_index({**bare, "COURSE_TORCH_INDEX": "https://mirror.example/cpu"}, "linux") == \
        "https://mirror.example/cpu"
    assert torch_pip_arguments({**bare, "COURSE_TORCH": "cuda"}, "linux", tell=pytest.fail) == []


def _fake_wheel(folder: Path, version: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    dist_info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(folder / f"torch-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        wheel.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n")
        wheel.writestr(f"{dist_info}/RECORD", "")


@pytest.mark.parametrize("requirement", ["torch>=2.4", "torch==2.13.0"])
def test_pip_takes_the_cpu_build_from_the_added_index_for_the_course_and_its_pinned_test_extra(requirement,
                                                                                                tmp_path):
    """PyPI's torch 2.13.0 beside the CPU index's 2.13.0+cpu: pip takes +cpu, a local version sorting
    above its public one, and the test extra's torch==2.13.0 matches it (PEP 440 ignores a local
    label that the pin does not name). A local server's two indexes stand in for PyPI and the CPU
    index; pip reads no configuration of this machine's."""
    _fake_wheel(tmp_path / "pypi" / "torch", "2.13.0")
    _fake_wheel(tmp_path / "cpu" / "torch", "2.13.0+cpu")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull}
    with _server(folder=tmp_path) as address:
        pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet",
               "--report", "-", "--index-url", f"{address}/pypi/"]
        for added, wanted in (([], "2.13.0"), (["--extra-index-url", f"{address}/cpu/"], "2.13.0+cpu")):
            done = subprocess.run([*pip, *added, requirement], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert [item["metadata"]["version"] for item in json.loads(done.stdout)["install"]] == [wanted]


def test_the_readmes_linux_pip_lines_name_the_cpu_index():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linux = [line for line in readme.splitlines() if "pip install" in line and "Linux" in line]
    assert linux and all(f"--extra-index-url {CPU_INDEX}" in line for line in linux), linux
    assert "COURSE_TORCH=cuda" in readme
