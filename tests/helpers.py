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


def figure_problems(nb, language: str) -> list[str]:
    """What keeps each figure of an executed notebook from being read without seeing it: an image
    output without a description (grader.figures.show), one in another language, or one that
    JupyterLab's view of the output (its text/html) does not carry as `alt`."""
    import html
    import re

    from grader.checks.figures import ALT

    opening = {"en": "Figure. ", "zh": "图："}[language]
    found, figures = [], 0
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if "image/png" not in output.get("data", {}):
                continue
            figures += 1
            text = output.get("metadata", {}).get("image/png", {}).get(ALT, "")
            if not text.startswith(opening) or len(text) < len(opening) + 20:
                found.append(f"cell {index}: {text[:80]!r} is not a description in {language}")
            elif language == "en" and re.search(r"[\u4e00-\u9fff]", text):
                found.append(f"cell {index}: Chinese in an English description")
            elif f'alt="{html.escape(text)}"' not in output.data.get("text/html", ""):
                found.append(f"cell {index}: JupyterLab's view of the figure lacks the description")
    return found if figures else ["no figure at all"]


# The text a README picture shows, kept in the PNG itself, so that a fast test finds a picture
# older than what the course says now (tests/test_docs.py).
SHOWS = "Shows"


def keep_picture(made: Path, kept: Path, shows: str) -> None:
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_itxt(SHOWS, shows)
    kept.parent.mkdir(exist_ok=True)
    Image.open(made).save(kept, pnginfo=info)


def picture_shows(picture: Path) -> str | None:
    from PIL import Image

    return Image.open(picture).text.get(SHOWS)
