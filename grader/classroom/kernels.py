"""Kernels on the class hub that speak only to their owner, and none run where learners write.

A kernel and its server talk over five ZeroMQ sockets. jupyter_client's default puts them on TCP
ports of 127.0.0.1, which every account of the machine can reach: messages are signed, not
encrypted, and subscribing to a kernel's IOPub port needs no key, so any learner could read every
cell an instructor runs (the solution notebook's answers) and every output. Here every kernel
that a server of the hub starts (JupyterLab's, and nbgrader's Validate) listens on Unix sockets
in its owner's Jupyter runtime folder instead, mode 700 in a private home: nobody else can even
reach them (`ipc`). hub/learner/jupyter_server_config.py and hub/learner/nbgrader_config.py name
them for every server.

An instructor's server starts no kernel in a folder a learner wrote: collected submissions, the
graded copies, the exchange. A learner's file there (`ipykernel_launcher.py` beside the notebook)
would otherwise run as the instructor the moment the notebook opens, whatever else the notebook
holds; such notebooks are graded by `python -m grader grade`, in the sandbox. `InstructorKernels`
refuses them in the server's kernel manager (JupyterLab), `OnlyCourseKernels` in nbgrader's
Validate, both before any process starts. Behind them, the hub gives every server
PYTHONSAFEPATH=1 (grader/classroom/hub.py), so no Python started for the class puts its working
folder first on its import path (`ClassKernels` puts a notebook's folder last).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.paths import jupyter_runtime_dir
from jupyter_core.utils import ensure_dir_exists
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web
from traitlets import Unicode, default

TRANSPORT = "ipc"
SOCKET_PATH = 107   # bytes of a Unix socket's path, at most (sockaddr_un), its port number appended
GRADE = "In a terminal:\n  cd ~/attention-course\n  python -m grader grade submitted --course-dir ."


def runtime_folder() -> str:
    """The owner's Jupyter runtime folder, mode 700."""
    folder = jupyter_runtime_dir()
    ensure_dir_exists(folder, mode=0o700)
    os.chmod(folder, 0o700)   # one made before, by another program, may be open to others
    return folder


class PrivateKernelManager(AsyncKernelManager):
    """nbclient's kernel manager (nbgrader's Validate), its sockets in the owner's runtime folder.
    Without a connection file of its own, jupyter_client would make the sockets' names relative
    to the kernel's working folder, the notebook's."""

    @default("transport")
    def _transport_default(self) -> str:
        return TRANSPORT

    @default("ip")
    def _ip_default(self) -> str:
        name = f"k-{uuid.uuid4().hex[:12]}"
        path = os.path.join(runtime_folder(), name)
        if len(path.encode()) > SOCKET_PATH - len("-99"):   # a long home: a private folder of the owner's in /tmp
            self._own_folder = tempfile.mkdtemp(prefix="kernel-")   # mode 700
            path = os.path.join(self._own_folder, name)
        return path

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart and getattr(self, "_own_folder", None):
            shutil.rmtree(self._own_folder, ignore_errors=True)


class LearnersFolder(web.HTTPError):
    """A kernel refused: the folder is one a learner wrote."""

    def __init__(self, where: Path):
        self.message = (f"On the class hub, no kernel starts in {where}: a learner wrote this folder, and "
                        f"whatever they left in it would run as you.\nYou can read the notebook here. To grade "
                        f"learners' notebooks (in the sandbox), {GRADE[0].lower()}{GRADE[1:]}")
        super().__init__(403, self.message)

    def __str__(self) -> str:
        return self.message


def learners_folders(course_folder: Path, exchange: str | None) -> tuple[Path, ...]:
    """Where learners' files land in an instructor's reach: nbgrader's submitted/ and autograded/
    (and feedback/, made from them) in the course folder, and the class's exchange."""
    found = [course_folder / name for name in ("submitted", "autograded", "feedback")]
    if exchange:
        found.append(Path(exchange))
    return tuple(Path(os.path.realpath(path)) for path in found)


def refuse_learners_folder(cwd: str | os.PathLike | None, refused: tuple[Path, ...]) -> None:
    """Raise LearnersFolder if a kernel would start in (or under) one of the `refused` folders."""
    where = Path(os.path.realpath(cwd or os.getcwd()))
    if any(where.is_relative_to(folder) for folder in refused):
        raise LearnersFolder(where)


# Run by each kernel as it starts: its folder last on the import path (see ClassKernels).
FOLDER_LAST = "import os as _os, sys as _sys; _sys.path.append(_os.getcwd()); del _os, _sys"


class ClassKernels(AsyncMappingKernelManager):
    """Every server's kernels on the hub. PYTHONSAFEPATH=1 keeps the notebook's folder off the
    import path, where a file named like a module the kernel loads would run in its place; each
    Python kernel then puts that folder back at the end, after the standard library and the
    installed packages, which it can never shadow, so that a learner's own helper module beside
    their notebook still imports."""

    async def start_kernel(self, *, kernel_id: str | None = None, path: str | None = None, **kwargs):
        if kwargs.get("kernel_name") in (None, "", "python3"):
            folder_last = f"--IPKernelApp.exec_lines={[FOLDER_LAST]!r}"
            kwargs["extra_arguments"] = [*kwargs.get("extra_arguments", []), folder_last]
        return await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)


class InstructorKernels(ClassKernels):
    """An instructor's server: no kernel in a learner's folder (see the module); the notebook
    still opens, to be read, with JupyterLab's "Error Starting Kernel" saying why and what to run."""

    def _refused(self) -> tuple[Path, ...]:
        return learners_folders(Path(self.root_dir), os.environ.get("COURSE_EXCHANGE"))

    async def start_kernel(self, *, kernel_id: str | None = None, path: str | None = None, **kwargs):
        if kernel_id is None or kernel_id not in self:
            refuse_learners_folder(self.cwd_for_path(path) if path is not None else self.root_dir, self._refused())
        return await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)


class LearnerNotebook(RuntimeError):
    """A notebook outside the course's clone, which nbgrader's Validate was about to run as the instructor."""


class OnlyCourseKernels(PrivateKernelManager):
    """An instructor's Validate (nbgrader's Execute): a kernel only in the course's clone (`clone`,
    which hub/instructor/nbgrader_config.py sets), where learners write nothing; refused before it
    starts anywhere else. nbgrader starts it in the notebook's folder."""

    clone = Unicode("", config=True, help="the course's clone, where Validate may run notebooks")

    async def _async_pre_start_kernel(self, **kw):
        where = Path(os.path.realpath(kw.get("cwd") or os.getcwd()))
        if not self.clone or not where.is_relative_to(os.path.realpath(self.clone)):
            raise LearnerNotebook(
                f"On the class hub, Validate runs only the course's own notebooks (in {self.clone}).\n"
                f"The notebook in {where} may be a learner's:\nits code would run as you, outside the sandbox.\n"
                f"To grade learners' notebooks, {GRADE[0].lower()}{GRADE[1:]}")
        return await super()._async_pre_start_kernel(**kw)
