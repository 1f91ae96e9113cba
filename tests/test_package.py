"""The course as a learner installs it: a wheel built from this repository, installed into a fresh
virtual environment outside it, whose launcher copies the notebooks into a working folder where
they run top to bottom, with the corpus and the checkpoint taken from the package."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader import course
from tests.helpers import NOT_CLONED, environment_with_our_dependencies
from tests.package_index import serving
from tests.reference import fill_answers

# One worker runs the whole module, so its fixture (a fresh virtual environment with the wheel) is built once.
pytestmark = [pytest.mark.system, pytest.mark.xdist_group("test_package")]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtual environment with the course's wheel. The wheel is built (as pip builds it, in
    an isolated environment with the setuptools pyproject.toml asks for) from a copy of the
    repository, and installed without its dependencies, which the environment reads from this one
    (they are the same versions, and the suite must not download PyTorch); the course itself comes
    only from the wheel: the repository is on no path of the new environment."""
    tmp = tmp_path_factory.mktemp("package")
    shutil.copytree(ROOT, tmp / "source", ignore=NOT_CLONED)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "-w", str(tmp / "dist"),
                    str(tmp / "source")], check=True, capture_output=True, cwd=tmp)
    wheel = next((tmp / "dist").glob("attention_course-*.whl"))
    python = environment_with_our_dependencies(tmp / "venv")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, cwd=tmp)
    return python


def _run(python: Path, *args: str, cwd: Path, timeout: int = 600,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NBGRADER_EXECUTION", "COURSE_LANG")},
           **(env or {})}
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


# What the learner's wheel carries of the Python code: the launcher, the self-checks and the check
# language with their old import paths, the stored values, and the exchange (setup.py says why).
LEARNERS_CODE = {
    "attention_course": {"__init__", "__main__", "cli", "content", "lab", "workspace"},
    "grader": {"__init__", "units", "selfcheck", "spec", "inputs", "progress", "i18n", "exchange", "figures"},
    "grader/checks": {"__init__", *(p.stem for p in (ROOT / "grader" / "checks").glob("*.py"))},
    "grader/classroom": {"__init__", "exchange", "kernels"},
    "grader/fixtures": {"__init__"},
}
# What instructors install beside the course, and learners never need.
INSTRUCTORS_DEPENDENCIES = frozenset({"nbgrader", "jupyterhub", "psycopg", "psycopg2", "sqlalchemy", "alembic"})


def test_the_wheel_holds_the_learners_code_and_no_grading(installed):
    names = zipfile.ZipFile(_course_wheel(installed)).namelist()
    code: dict[str, set[str]] = {}
    for name in names:
        if name.endswith(".py") and "/content/" not in name:
            folder, _, module = name.rpartition("/")
            code.setdefault(folder, set()).add(module.removesuffix(".py"))
    assert code == LEARNERS_CODE
    assert {n.split("/")[2] for n in names if n.startswith("attention_course/content/")} \
        == {"notebooks", "notebooks-zh", "data", "lab", "nbgrader_config.py"}
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    scripts = zipfile.ZipFile(_course_wheel(installed)).read(entry_points).decode().split()
    assert scripts == ["[console_scripts]", "attention-course", "=", "attention_course.cli:main"]


def test_the_lab_extra_brings_what_unit_10_proves_its_loader_with(installed):
    """`pip install "attention_course-….whl[lab]"` installs transformers (unit 10's proof against
    GPT2LMHeadModel) beside the Hugging Face packages that download and read GPT-2."""
    wheel = zipfile.ZipFile(_course_wheel(installed))
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    lab = {re.split(r"[<>=!~ ;\[]", line.removeprefix("Requires-Dist: "))[0].lower()
           for line in metadata.splitlines() if line.startswith("Requires-Dist: ") and "extra == \"lab\"" in line}
    assert {"transformers", "huggingface-hub", "safetensors", "tokenizers"} <= {n.replace("_", "-") for n in lab}, lab


def test_the_learners_entry_points_work_without_nbgrader_jupyterhub_or_psycopg(installed, tmp_path):
    """A learner's Python with the wheel and none of the instructors' packages: the launcher answers,
    every import path the notebooks use imports, and a self-check names a mistake."""
    python = environment_with_our_dependencies(tmp_path / "venv", leave_out=INSTRUCTORS_DEPENDENCIES)
    done = _run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(_course_wheel(installed)),
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    absent = _run(python, "-c", "import importlib.util as u; print([m for m in ('nbgrader', 'jupyterhub', "
                  "'psycopg', 'psycopg2') if u.find_spec(m)])", cwd=tmp_path)
    assert absent.stdout.strip() == "[]", absent.stdout + absent.stderr
    launcher = _run(tmp_path / "venv" / "bin" / "attention-course", "--help", cwd=tmp_path)
    assert launcher.returncode == 0 and "lab" in launcher.stdout, launcher.stderr[-2000:]
    copied = _run(python, "-m", "attention_course", "copy", "--dir", "work", cwd=tmp_path)
    assert copied.returncode == 0 and (tmp_path / "work" / "01_dot_product" / "01_dot_product.ipynb").is_file()
    checks = _run(python, "-c", "\n".join([
        "import torch",
        "from grader.spec import Case, Mistake, Spec, run",
        "from grader.inputs import QKV, journey, linear_state",
        "from grader.i18n import use_language",
        "from grader.progress import progress",
        "from grader.selfcheck import check",
        "def dot_product(a, b):",
        "    return (a * b).sum() + 1",
        "check('dot_product', globals())"]), cwd=tmp_path / "work" / "01_dot_product")
    assert "CheckFailed" in checks.stderr and "dot_product" in checks.stderr, checks.stderr[-2000:]
    listed = _run(python, "-m", "attention_course", "progress", "--dir", "work", cwd=tmp_path)
    assert listed.returncode == 0 and "dot_product" in listed.stdout, listed.stdout[-2000:] + listed.stderr[-2000:]
    assert "ModuleNotFoundError" not in checks.stderr, checks.stderr[-2000:]


def test_a_learner_copies_a_unit_answers_it_and_every_self_check_passes(installed, tmp_path):
    scripts = installed.parent
    command = scripts / ("attention-course.exe" if os.name == "nt" else "attention-course")
    done = subprocess.run([str(command), "copy", "--dir", "work"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"{len(course.units())} notebooks copied" in done.stdout
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


def _install_cell(wheel_url: str) -> str:
    """The released notebooks' first code cell, with COURSE_WHEEL set as release writes
    attention_course.INSTALL_FROM into it (the released one holds "", the course being unpublished)."""
    first = next(c for c in nbformat.read(ROOT / "notebooks" / "01_dot_product" / "01_dot_product.ipynb",
                                          as_version=4).cells if c.cell_type == "code")
    assert re.search(r'^COURSE_WHEEL = ""', first.source, re.M), first.source
    return re.sub(r'^COURSE_WHEEL = ""', lambda _: f"COURSE_WHEEL = {json.dumps(wheel_url)}", first.source,
                  flags=re.M)


def _course_wheel(installed: Path) -> Path:
    return next(installed.parent.parent.parent.glob("dist/attention_course-*.whl"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_hosted_notebook_installs_the_course_from_its_first_cell(installed, tmp_path):
    """On a hosted notebook without the course, the first code cell installs the course's wheel from
    attention_course.INSTALL_FROM (its URL with its sha256, served here by a local server), says so
    in one line, and the self-checks import right after, in the same process."""
    wheel = _course_wheel(installed)
    shutil.copy(wheel, tmp_path / wheel.name)
    bare = environment_with_our_dependencies(tmp_path / "hosted")
    with serving(tmp_path) as address:
        cell = _install_cell(f"{address}/{wheel.name}#sha256={_sha256(wheel)}")
        done = _run(bare, "-c", cell + "\nfrom grader.selfcheck import check\nprint('self-checks ready')",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("Installing the course's package") and lines[1] == "self-checks ready"
    again = _run(bare, "-c", cell, cwd=tmp_path)   # installed now: the cell does nothing
    assert again.returncode == 0 and again.stdout == ""


def test_a_hosted_notebook_refuses_a_wheel_that_is_not_the_courses(installed, tmp_path):
    """Whoever controls the URL cannot make hosted learners run their code: a different wheel under
    the course's wheel's name and URL fails the sha256 pinned in the cell. pip installs nothing, and
    the cell says so in one line, with no traceback."""
    wheel = _course_wheel(installed)
    served = tmp_path / "served"
    served.mkdir()
    with zipfile.ZipFile(served / wheel.name, "w") as other:
        other.writestr("attention_course/__init__.py", "print('not the course')\n")
        other.writestr("attention_course-0.1.0.dist-info/METADATA",
                       "Metadata-Version: 2.1\nName: attention-course\nVersion: 0.1.0\n")
        other.writestr("attention_course-0.1.0.dist-info/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        other.writestr("attention_course-0.1.0.dist-info/RECORD", "")
    bare = environment_with_our_dependencies(tmp_path / "hosted")
    with serving(served) as address:
        url = f"{address}/{wheel.name}#sha256={_sha256(wheel)}"
        done = _run(bare, "-c", _install_cell(url), cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "Installing the course's package; a minute or two, PyTorch is kept if present",
        f"Nothing installed: the wheel at {url} is not the course's (its sha256 is not the one the course published)"]
    found = _run(bare, "-c", "import importlib.util; print(importlib.util.find_spec('attention_course'))",
                 cwd=tmp_path)
    assert found.stdout.strip() == "None", found.stdout


def test_a_hosted_notebook_says_in_one_line_when_the_wheel_cannot_be_fetched(installed, tmp_path):
    with socket.socket() as closed:   # a port that nothing listens on once this socket is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}/{_course_wheel(installed).name}#sha256={'0' * 64}"
    bare = environment_with_our_dependencies(tmp_path / "hosted")
    done = _run(bare, "-c", _install_cell(url), cwd=tmp_path, env={"PIP_RETRIES": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[1].startswith(f"Nothing installed: the course's wheel could not be fetched "
                                                   f"from {url} ("), lines


def test_an_unpublished_course_says_how_to_install_it_and_the_grader_hears_nothing(tmp_path):
    """As released (INSTALL_FROM empty), the cell installs nothing: one line says how to install the
    course. Under nbgrader or the course's grader (NBGRADER_EXECUTION), whose sandbox has the
    course's code but not its installed package, it prints nothing, so no feedback starts with it."""
    bare = environment_with_our_dependencies(tmp_path / "hosted")
    cell = _install_cell("")
    done = _run(bare, "-c", cell, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "The course's package is not installed here: install the course's wheel "
        "(%pip install attention_course-….whl, see the course's README), then run this cell again"]
    graded = _run(bare, "-c", cell, cwd=tmp_path, env={"NBGRADER_EXECUTION": "autograde"})
    assert graded.returncode == 0 and graded.stdout == "", graded.stdout
