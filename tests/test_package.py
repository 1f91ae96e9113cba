"""The course as a learner installs it: a wheel built from this repository, installed into a fresh
virtual environment outside it, whose launcher copies the notebooks into a working folder where
they run top to bottom, with the corpus and the checkpoint taken from the package."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

from tests.reference import fill_answers

# One worker runs the whole module, so its fixture (a fresh virtual environment with the wheel) is built once.
pytestmark = pytest.mark.xdist_group("test_package")

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "test-artifacts", ".pytest_cache")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtual environment with the course's wheel. The wheel is built (as pip builds it, in
    an isolated environment with the setuptools pyproject.toml asks for) from a copy of the
    repository, and installed without its dependencies, which the environment reads from this one
    (they are the same versions, and the suite must not download PyTorch); the course itself comes
    only from the wheel: the repository is on no path of the new environment."""
    tmp = tmp_path_factory.mktemp("package")
    shutil.copytree(ROOT, tmp / "source", ignore=SKIP)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "-w", str(tmp / "dist"),
                    str(tmp / "source")], check=True, capture_output=True, cwd=tmp)
    wheel = next((tmp / "dist").glob("attention_course-*.whl"))
    python = _environment(tmp / "venv")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, cwd=tmp)
    return python


def _environment(folder: Path) -> Path:
    """A fresh virtual environment that reads the course's dependencies from this one; its Python."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "course-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return python


def _run(python: Path, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NBGRADER_EXECUTION", "COURSE_LANG")}
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          encoding="utf-8", timeout=timeout)


def _execute(python: Path, path: Path) -> nbformat.NotebookNode:
    done = _run(python, "-m", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                "--ExecutePreprocessor.timeout=600", path.name, cwd=path.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return nbformat.read(path, as_version=4)


def _outputs(nb) -> str:
    return "\n".join(str(o.get("text", "")) + json.dumps(o.get("data", {}), ensure_ascii=False)
                     for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", []))


def test_the_course_comes_from_the_wheel_not_the_repository(installed, tmp_path):
    where = _run(installed, "-c", "import attention_course, grader; print(attention_course.__file__);"
                                  "print(grader.__file__)", cwd=tmp_path).stdout.split()
    assert all(Path(p).is_relative_to(installed.parent.parent) for p in where), where
    assert not any(Path(p).is_relative_to(ROOT) for p in where)


def test_a_learner_copies_a_unit_answers_it_and_every_self_check_passes(installed, tmp_path):
    scripts = installed.parent
    command = scripts / ("attention-course.exe" if os.name == "nt" else "attention-course")
    done = subprocess.run([str(command), "copy", "--dir", "work"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "9 notebooks copied" in done.stdout
    path = tmp_path / "work" / "01_dot_product" / "01_dot_product.ipynb"
    nbformat.write(fill_answers(nbformat.read(path, as_version=4), "01_dot_product"), path)
    ran = _execute(installed, path)
    checks = [c for c in ran.cells if c.cell_type == "code" and "check(" in c.source]
    assert checks and all("\u2713" in _outputs(nbformat.v4.new_notebook(cells=[c])) for c in checks)
    assert "Progress: unit 01" in _outputs(ran)
    recorded = json.loads((tmp_path / "work" / "attention-course-progress.json").read_text(encoding="utf-8"))
    assert {o["status"] for o in recorded["exercises"].values()} == {"pass"}
    assert "Installing" not in _outputs(ran)   # the package is there: the first cell installs nothing


def test_unit_08_runs_on_the_packages_corpus_and_checkpoint(installed, tmp_path):
    """As a learner on a slow laptop runs it: TRAIN = False, so the notebook loads the course's model.
    It runs to the validation loss of that model against the corpus's entropy floor; the sections
    after it (the copying rules, weight tying) train on their own and take no file."""
    assert _run(installed, "-m", "attention_course", "copy", "--dir", "work", cwd=tmp_path).returncode == 0
    path = tmp_path / "work" / "08_tiny_gpt" / "08_tiny_gpt.ipynb"
    nb = fill_answers(nbformat.read(path, as_version=4), "08_tiny_gpt")
    last = next(i for i, cell in enumerate(nb.cells) if "entropy floor:" in cell.source)
    nb.cells = nb.cells[:last + 1]
    for cell in nb.cells:
        cell.source = cell.source.replace("TRAIN = True", "TRAIN = False")
    nbformat.write(nb, path)
    out = _outputs(_execute(installed, path))
    assert "data/ not found" not in out
    assert "checkpoint loaded" in out and "model = the checkpoint" in out
    assert "entropy floor" in out


def test_a_hosted_notebook_installs_the_course_from_its_first_cell(installed, tmp_path):
    """On a hosted notebook without the course, the first code cell installs it from
    attention_course.INSTALL_FROM (here: the wheel, as a course published as a wheel would set it),
    says so in one line, and the self-checks import right after, in the same process."""
    from grader.source import INSTALL_LINE

    wheel = next(installed.parent.parent.parent.glob("dist/attention_course-*.whl"))
    first = next(c for c in nbformat.read(ROOT / "notebooks" / "01_dot_product" / "01_dot_product.ipynb",
                                          as_version=4).cells if c.cell_type == "code")
    cell = INSTALL_LINE.sub(lambda m: m.group(1) + json.dumps(str(wheel)), first.source)
    bare = _environment(tmp_path / "hosted")
    done = _run(bare, "-c", cell + "\nfrom grader.selfcheck import check\nprint('self-checks ready')", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("Installing the course's package") and lines[1] == "self-checks ready"
    again = _run(bare, "-c", cell, cwd=tmp_path)   # installed now: the cell does nothing
    assert again.returncode == 0 and again.stdout == ""
