"""A package index on this machine, made from the suite's own environment, so that an install the
tests run (the class hub's learners' environment) downloads nothing and meets what a real index
serves: wheels, found through pip's "simple" pages.

Each distribution the requirements need is packed again into a wheel from its installed files, as
its RECORD lists them: the package's files as they are, the files it put outside site-packages
(JupyterLab's extensions and their switches under share/ and etc/) in the wheel's .data folder,
its console scripts left for pip to write again from entry_points.txt. Compiled .pyc files and
what the installer added (INSTALLER, REQUESTED, direct_url.json, RECORD) stay out. The index is a
folder served over HTTP, one folder per project: `http.server` lists it as the anchor page pip
reads (PEP 503)."""
from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import importlib.metadata as metadata
import os
import sysconfig
import threading
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_ADDED_BY_INSTALLER = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}


def needed(requirements: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions that `requirements` (e.g. "jupyterlab", "nbgrader[docs]") need,
    themselves and all they require in turn, markers evaluated here."""
    found: dict[str, metadata.Distribution] = {}
    pending = [Requirement(text) for text in requirements]
    seen: set[tuple[str, str]] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        for extra in {"", *requirement.extras}:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            distribution = found.setdefault(name, metadata.distribution(name))
            for text in distribution.requires or []:
                child = Requirement(text)
                if child.marker is None or child.marker.evaluate({"extra": extra}):
                    pending.append(child)
    return list(found.values())


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _tags(wheel_file: str) -> str:
    """The filename's tags from the WHEEL file's Tag lines (several collapse into dotted sets)."""
    tags = [line.split(":", 1)[1].strip().split("-") for line in wheel_file.splitlines() if line.startswith("Tag:")]
    return "-".join(".".join(sorted({tag[k] for tag in tags})) for k in range(3))


def wheel(distribution: metadata.Distribution, folder: Path) -> Path:
    """`distribution` packed again into a wheel in `folder` (stored, not compressed: it is read
    once, on this machine); its path."""
    files = [path for path in distribution.files or [] if "__pycache__" not in path.parts]
    [info] = {path.parts[0] for path in files if path.parts[0].endswith(".dist-info")}
    data = info.removesuffix(".dist-info") + ".data"
    prefix = Path(sysconfig.get_paths()["data"])
    scripts = Path(sysconfig.get_paths()["scripts"])
    generated = {entry.name for entry in distribution.entry_points if entry.group in ("console_scripts", "gui_scripts")}
    target = folder / f"{info.removesuffix('.dist-info')}-{_tags(distribution.read_text('WHEEL') or '')}.whl"
    record = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as packed:
        for path in files:
            source = Path(os.path.normpath(distribution.locate_file(path)))
            if not source.is_file() or (path.parts[0] == info and path.name in _ADDED_BY_INSTALLER):
                continue
            content = source.read_bytes()
            if source.is_relative_to(scripts):
                if source.name in generated:
                    continue
                if content.startswith(b"#!") and b"python" in content.split(b"\n", 1)[0]:
                    content = b"#!python\n" + content.split(b"\n", 1)[1]   # pip writes the new environment's
                arcname = f"{data}/scripts/{source.name}"
            elif ".." in path.parts:
                arcname = f"{data}/data/{source.relative_to(prefix).as_posix()}"
            else:
                arcname = path.as_posix()
            entry = zipfile.ZipInfo(arcname, (2000, 1, 1, 0, 0, 0))
            entry.external_attr = (source.stat().st_mode & 0o777 | 0o100000) << 16   # executables stay so
            packed.writestr(entry, content)
            record.append(_record_line(arcname, content))
        packed.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return target


def build(requirements: Iterable[str], folder: Path, leave_out: Iterable[str] = ()) -> Path:
    """An index in `folder/simple` holding a wheel of every distribution `requirements` need but
    those named in `leave_out` (e.g. the course, which is installed from its source); its path."""
    simple = folder / "simple"
    left_out = {canonicalize_name(name) for name in leave_out}
    for distribution in needed(requirements):
        if canonicalize_name(distribution.metadata["Name"]) in left_out:
            continue
        project = simple / canonicalize_name(distribution.metadata["Name"])
        project.mkdir(parents=True, exist_ok=True)
        wheel(distribution, project)
    return simple


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:   # pip's every request would fill the test's output
        pass


@contextmanager
def serving(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on 127.0.0.1 while the block runs (an index made by `build`, or any
    files): its address, for pip's --index-url or a file's URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
