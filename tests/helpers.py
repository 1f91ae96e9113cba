"""Shortcuts the tests take through the grader's parts, which the grader itself never needs:
a notebook run in a sandbox of its own, a unit's scores read back from the gradebook; and the
copies the tests make of the course: the checkout as `git clone` leaves it, a fresh virtual
environment that reads the course's dependencies from this one (so no test downloads PyTorch)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from grader.grading import gradebook, sandbox
from grader.grading.settings import Limits


def execute(notebook, workdir: Path, limits: Limits) -> sandbox.Outcome:
    """Run `notebook` in a fresh folder holding nothing else the learner may see, as the grader
    does: in the kernels' template's folder of jobs where kernels are forked, else `workdir`."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=sandbox.scratch_parent(limits) or workdir) as job, \
            sandbox.Sandbox(Path(job), limits) as box:
        return box.run(notebook)


def scores(db_url: str, unit: str) -> dict[str, float]:
    """{student: total score} of one unit, as the gradebook has it."""
    from nbgrader.api import MissingEntry

    with gradebook.opened(db_url) as gb:
        try:
            return {s.student.id: s.score for s in gb.find_assignment(unit).submissions}
        except MissingEntry:
            return {}


# What a copy of the checkout leaves out: what `git clone` would not bring, and what builds leave.
NOT_CLONED = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "test-artifacts",
                                    ".pytest_cache", ".ruff_cache", ".import_linter_cache")


def environment_with_our_dependencies(folder: Path, leave_out: frozenset[str] = frozenset()) -> Path:
    """A fresh virtual environment at `folder` that reads the course's dependencies from this one
    (a .pth file naming this environment's site-packages); its Python. With `leave_out` (names of
    distributions, e.g. "nbgrader"), it reads them from a folder of links to this environment's
    packages without those, so that they are absent as on a machine that never installed them."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    if leave_out:
        links = folder / "dependencies"
        links.mkdir()
        for entry in ours.iterdir():
            distribution = entry.name.split("-")[0].split(".")[0].lower().removesuffix("_binary")
            # .pth files and the course's own editable install do nothing here, or would shadow the wheel
            if distribution not in leave_out | {"attention_course", "__editable__"} and entry.suffix != ".pth":
                (links / entry.name).symlink_to(entry)
        ours = links
    (site / "course-dependencies.pth").write_text(f"{ours}\n", encoding="utf-8")
    return python
