"""The learner's working folder: the course's notebooks copied where the learner owns them.

The copy never overwrites the learner's work. The folder's `.attention-course.json` records what
the launcher last wrote to each file; a file may be replaced only while it is still exactly that.
When a newer release meets a notebook the learner has changed, the release goes beside it as
<unit>.new.ipynb, and the learner's own stays as it is.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.checks.i18n import say
from grader.units import GLOB

from . import content

MANIFEST = ".attention-course.json"
PREFIX = "course: "   # before each of the launcher's own lines, to tell them from JupyterLab's


@dataclass
class Copy:
    """What one copy step did, by file, relative to the working folder."""
    folder: Path
    new: list[str] = field(default_factory=list)       # copied for the first time
    updated: list[str] = field(default_factory=list)   # a newer release over an untouched copy
    beside: list[str] = field(default_factory=list)    # a newer release beside the learner's changed notebook
    kept: list[str] = field(default_factory=list)      # changed by the learner, and so is the file beside it

    def lines(self) -> list[str]:
        """What to tell the learner, in the language of the messages (grader.checks.i18n)."""
        out = []
        if self.new:
            out.append(say("{count} notebooks copied into {folder}", count=len(self.new), folder=self.folder))
        if self.updated:
            out.append(say("updated to the new release (you had not changed them): {files}",
                           files=", ".join(self.updated)))
        for path in self.beside:
            out.append(say("a newer release is beside your notebook, which is untouched: {path}", path=path))
        for path in self.kept:
            out.append(say("a newer release of {path} exists; yours and the .new copy beside it are both changed, "
                           "so neither was replaced", path=path))
        return [f"{PREFIX}{line}" for line in out]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def kernel_metadata() -> dict | None:
    """A notebook's kernel metadata as this environment's Python 3 kernel (ipykernel) describes it:
    JupyterLab writes it into a notebook it opens, and marks the notebook modified when it differs."""
    try:
        from ipykernel.ipkernel import IPythonKernel
    except ImportError:
        return None
    return {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": dict(IPythonKernel.language_info)}


def aligned(text: str) -> str | None:
    """A course notebook's text with this kernel's description where only its Python version
    differs from the stored one; None when there is nothing to change (or it is not a notebook)."""
    want = kernel_metadata()
    try:
        nb = json.loads(text)
        info = nb["metadata"]["language_info"]
    except (ValueError, KeyError, TypeError):
        return None
    if want is None or info == want["language_info"] or {**info, "version": want["language_info"]["version"]} \
            != want["language_info"]:
        return None
    nb["metadata"]["language_info"] = want["language_info"]
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"   # nbformat's own layout


def align_kernel_metadata(folder: Path) -> list[Path]:
    """Give the course's notebooks in `folder` (<unit>/<unit>.ipynb) this kernel's Python version,
    so that they open unmodified; returns those changed. Other files are left alone."""
    changed = []
    for unit in content.units():
        path = folder / unit / f"{unit}.ipynb"
        try:
            if path.is_symlink():
                continue
            text = aligned(path.read_text(encoding="utf-8"))
        except OSError:
            continue
        if text is not None:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8", newline="\n")
            tmp.replace(path)
            changed.append(path)
    return changed


def copy_notebooks(source: Path, folder: Path) -> Copy:
    """Copy the notebooks of `source` (<unit>/<unit>.ipynb) into `folder`, as the module says."""
    folder.mkdir(parents=True, exist_ok=True)
    report = Copy(folder)
    manifest_path = folder / MANIFEST
    try:
        written: dict[str, str] = json.loads(manifest_path.read_text(encoding="utf-8"))["written"]
    except (OSError, ValueError, KeyError, TypeError):
        written = {}

    def replaceable(rel: str) -> bool:
        path = folder / rel
        return not path.exists() or written.get(rel) == _digest(path.read_bytes())

    for release in sorted(source.glob(f"{GLOB}/{GLOB}.ipynb")):
        text = release.read_text(encoding="utf-8")
        data = (aligned(text) or text).encode("utf-8")
        rel = release.relative_to(source).as_posix()
        mine = folder / rel
        if mine.exists() and mine.read_bytes() == data:
            written[rel] = _digest(data)
            continue
        new_rel = rel.removesuffix(".ipynb") + ".new.ipynb"
        if replaceable(rel):
            target, bucket = rel, (report.updated if mine.exists() else report.new)
        elif (folder / new_rel).exists() and (folder / new_rel).read_bytes() == data:
            continue
        elif replaceable(new_rel):
            target, bucket = new_rel, report.beside
        else:
            report.kept.append(rel)
            continue
        path = folder / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written[target] = _digest(data)
        bucket.append(target)
    manifest_path.write_text(json.dumps({"written": written}, indent=1) + "\n", encoding="utf-8")
    return report


def default_folder(language: str) -> Path:
    """Where the launcher puts the learner's notebooks when no --dir is given: in a clone of the
    repository, its own notebooks (edited in place, as always); else ./attention-course[-zh]."""
    if content.is_repository():
        return content.notebooks(language)
    return Path.cwd() / ("attention-course" if language == "en" else f"attention-course-{language}")


def record_folders(language: str | None = None) -> list[Path]:
    """Where `attention-course progress` looks for the learner's record, in order: the current
    folder (or, from inside a unit's folder, the folder above), then the folder `lab` works in for
    the edition named, or for each edition when none is."""
    editions = [language] if language else list(content.EDITIONS)
    return [Path.cwd(), *(default_folder(edition) for edition in editions)]


def prepare(language: str, folder: Path | None) -> Path:
    """The learner's working folder for an edition, with the course's notebooks in it."""
    folder = (folder or default_folder(language)).expanduser().resolve()
    source = content.notebooks(language).resolve()
    if folder == source:
        if align_kernel_metadata(folder):
            print(PREFIX + say("notebooks set to this environment's Python {version}",
                               version=sys.version.split()[0]), flush=True)
        return folder
    if folder.exists() and not folder.is_dir():
        sys.exit(PREFIX + say("{folder} is not a folder", folder=folder))
    for line in copy_notebooks(source, folder).lines():
        print(line, flush=True)
    return folder
