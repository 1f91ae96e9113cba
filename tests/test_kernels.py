"""The class hub's kernels and Pythons, each layer on its own (grader/classroom/kernels.py,
grader/classroom/hub.py): no Python the hub starts puts its working folder on its import path, so
a learner's module beside a notebook or in a home never loads in place of the real one; an
instructor's server starts no kernel in a folder learners write; kernels listen on Unix sockets in
their owner's private runtime folder, not on TCP ports every account can reach."""
from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader.classroom import hub, kernels

# Modules Python would load from the working folder: what the hub's servers and kernels start with
# (`python -m jupyterhub.singleuser`, `python -m ipykernel_launcher`), what they import first, and
# one no filter could know of.
PLANTED = ("ipykernel_launcher", "traitlets", "jupyterhub", "json", "zmq")


def _plant(folder: Path) -> Path:
    marker = folder / "planted-ran"
    for name in PLANTED:
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    return marker


@pytest.mark.parametrize("command", [["-m", "ipykernel_launcher", "--help"], ["-m", "jupyterhub.singleuser", "--help"],
                                     ["-c", "import json, zmq, traitlets"]])
def test_no_python_of_the_hub_loads_a_module_from_its_working_folder(tmp_path, command):
    marker = _plant(tmp_path)
    given = hub.server_environment("somebody-not-in-the-class", tmp_path / "state")
    assert given["PYTHONSAFEPATH"] == "1"
    env = {**os.environ, "PYTHONSAFEPATH": given["PYTHONSAFEPATH"]}
    done = subprocess.run([sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert not marker.exists(), (marker.read_text(), done.stderr[-2000:])
    # The same command without the switch runs the planted module: the test can fail.
    env.pop("PYTHONSAFEPATH")
    subprocess.run([sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert marker.exists()


@pytest.fixture
def course_folder(tmp_path, monkeypatch):
    folder = tmp_path / "attention-course"
    for name in ("submitted/ben/01_dot_product", "autograded/ben/01_dot_product", "source/01_dot_product"):
        (folder / name).mkdir(parents=True)
    (folder / "a-link").symlink_to(folder / "submitted" / "ben")
    exchange = tmp_path / "exchange" / "attention-course" / "inbound"
    exchange.mkdir(parents=True)
    monkeypatch.setenv("COURSE_EXCHANGE", str(tmp_path / "exchange"))
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))   # short: a socket's path holds 107 bytes at most
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime / "runtime"))
    yield folder
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.parametrize("path", ["submitted/ben/01_dot_product", "autograded/ben/01_dot_product", "submitted",
                                  "a-link/01_dot_product"])
def test_an_instructors_server_starts_no_kernel_where_learners_write(course_folder, path):
    manager = kernels.InstructorKernels(root_dir=str(course_folder))
    with pytest.raises(kernels.LearnersFolder) as refused:
        asyncio.run(manager.start_kernel(path=path))
    assert refused.value.status_code == 403 and "python -m grader grade" in str(refused.value)
    assert list(manager.list_kernel_ids()) == []


def test_the_exchange_is_refused_too(course_folder, tmp_path):
    refused = kernels.learners_folders(course_folder, os.environ["COURSE_EXCHANGE"])
    with pytest.raises(kernels.LearnersFolder):
        kernels.refuse_learners_folder(tmp_path / "exchange" / "attention-course" / "inbound", refused)
    kernels.refuse_learners_folder(course_folder / "source" / "01_dot_product", refused)   # the team's own: allowed


def test_kernels_speak_over_unix_sockets_in_a_private_folder(course_folder, tmp_path):
    """A kernel of PrivateKernelManager (Validate's on the hub) answers over ipc, its sockets in the
    owner's runtime folder, mode 700; nothing of it is on a TCP port."""
    async def run() -> tuple[dict, str]:
        manager = kernels.PrivateKernelManager()
        await manager.start_kernel(cwd=str(course_folder / "source" / "01_dot_product"))
        try:
            client = manager.client()
            client.start_channels()
            await client.wait_for_ready(timeout=60)
            reply = await client.execute_interactive("print(6 * 7)", timeout=60,
                                                     output_hook=lambda msg: seen.append(msg))
            assert reply["content"]["status"] == "ok"
            client.stop_channels()
            return manager.get_connection_info(), "".join(m["content"].get("text", "") for m in seen)
        finally:
            await manager.shutdown_kernel(now=True)

    seen: list = []
    info, printed = asyncio.run(run())
    assert printed.strip() == "42"
    assert info["transport"] == "ipc"
    runtime = Path(os.environ["JUPYTER_RUNTIME_DIR"])
    assert Path(info["ip"]).parent == runtime and stat.S_IMODE(runtime.stat().st_mode) == 0o700


def test_a_hub_kernel_imports_a_learners_own_module_but_never_in_place_of_a_real_one(tmp_path, monkeypatch):
    """A kernel of the hub's servers (PYTHONSAFEPATH=1, ClassKernels) imports `helpers.py` beside
    the notebook, and `json` is still the standard library's."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "helpers.py").write_text("ANSWER = 42\n")
    (tmp_path / "notes" / "json.py").write_text("raise SystemExit('the planted json ran')\n")
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("PYTHONSAFEPATH", "1")

    async def run() -> str:
        manager = kernels.ClassKernels(root_dir=str(tmp_path))
        kernel = await manager.start_kernel(path="notes")
        seen: list[str] = []
        try:
            client = manager.get_kernel(kernel).client()
            client.start_channels()
            await client.wait_for_ready(timeout=60)
            await client.execute_interactive("import helpers, json; print(helpers.ANSWER, json.__file__)", timeout=60,
                                             output_hook=lambda msg: seen.append(msg["content"].get("text", "")))
            client.stop_channels()
        finally:
            await manager.shutdown_kernel(kernel, now=True)
            shutil.rmtree(runtime, ignore_errors=True)
        return "".join(seen)

    printed = asyncio.run(run())
    assert printed.startswith("42 ") and str(tmp_path) not in printed, printed


def test_a_long_runtime_folder_puts_the_sockets_in_a_private_folder_of_the_owner(tmp_path, monkeypatch):
    """Where the runtime folder's path leaves no room for a socket's name (107 bytes at most), the
    sockets go to a folder of the owner's own in /tmp, mode 700, removed with the kernel."""
    deep = tmp_path / ("x" * 60) / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(deep))

    async def run() -> tuple[str, int]:
        manager = kernels.PrivateKernelManager()
        await manager.start_kernel(cwd=str(tmp_path))
        folder = os.path.dirname(manager.get_connection_info()["ip"])
        mode = stat.S_IMODE(os.stat(folder).st_mode)
        client = manager.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
        return folder, mode

    folder, mode = asyncio.run(run())
    assert folder.startswith(tempfile.gettempdir()) and mode == 0o700
    assert not os.path.exists(folder)
