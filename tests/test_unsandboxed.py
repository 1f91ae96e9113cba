"""nbgrader's Validate with an instructor's settings on the class hub (hub/instructor/): a notebook
outside the course's clone, as a collected submission is, is refused before its kernel starts,
with what to run instead; the course's own notebooks still validate. `nbgrader validate` is the
command; the Validate button of JupyterLab runs the same Validator (the hub test presses it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

from grader import course

ROOT = Path(__file__).resolve().parent.parent
UNIT = "01_dot_product"


def _validate(notebook: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """`nbgrader validate NOTEBOOK` in a terminal of an instructor's server on the hub."""
    hub = ROOT / "hub"
    env = {**os.environ, "JUPYTER_CONFIG_PATH": os.pathsep.join([str(hub / "instructor"), str(hub / "learner")]),
           "COURSE_EXCHANGE": str(tmp_path / "exchange"), "HOME": str(tmp_path),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    return subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(notebook)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_validate_refuses_a_learners_notebook_before_its_first_cell(tmp_path):
    marker = tmp_path / "ran-as-the-instructor"
    nb = nbformat.read(course.release_notebook(UNIT), as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"open({str(marker)!r}, 'w').close()"))
    submitted = tmp_path / "attention-course" / "submitted" / "ben" / UNIT / f"{UNIT}.ipynb"
    submitted.parent.mkdir(parents=True)
    nbformat.write(nb, submitted)
    # A file submitted beside the notebook, which a kernel started there would run (its -m puts the
    # working folder first on the path): no kernel starts, so nothing of it runs. The environment
    # here has no PYTHONSAFEPATH: the refusal alone stops it.
    (submitted.parent / "ipykernel_launcher.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = _validate(submitted, tmp_path)
    out = done.stdout + done.stderr
    assert "Validate runs only the course's own notebooks" in out and "python -m grader grade" in out, out[-3000:]
    assert not marker.exists()


def test_validate_still_runs_the_courses_own_notebooks(tmp_path):
    done = _validate(ROOT / "solutions" / UNIT / f"{UNIT}.ipynb", tmp_path)
    out = done.stdout + done.stderr
    assert "Success! Your notebook passes all the tests." in out, out[-3000:]
