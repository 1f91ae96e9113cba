"""A maintainer adds an exercise by following only the README's maintainer section: on a copy
of the course, the README's example exercise goes into unit 01 with tools/nbsource.py, is
released with `python -m grader release`, and a right and a wrong answer are graded."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from grader import course, notebook

UNIT = "01_dot_product"


def readme_example() -> str:
    """The code block of the README's section on adding an exercise."""
    readme = (course.ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Adding an exercise"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run(copy: Path, *args: str) -> subprocess.CompletedProcess:
    """A command of the course run in the copy: `python -m grader` there imports the copy's grader."""
    out = subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def filled(copy: Path, replace: dict[str, str]) -> nbformat.NotebookNode:
    """The copy's released notebook with every answer cell holding the reference answer, or the
    code in `replace` (by grade id)."""
    source = notebook.read(copy / "solutions" / UNIT / f"{UNIT}.ipynb")
    answers = {notebook.grade_id(c): "\n".join(line for line in c.source.splitlines() if "### " not in line)
               for c in source.cells if notebook.is_answer(c)}
    nb = notebook.read(copy / "notebooks" / UNIT / f"{UNIT}.ipynb")
    for cell in nb.cells:
        gid = notebook.grade_id(cell)
        if notebook.is_answer(cell):
            cell.source = replace.get(gid, answers[gid])
    return nb


def test_the_readme_example_exercise_releases_and_grades(tmp_path):
    copy = tmp_path / "course"
    for part in ("grader", "lab", "nbgrader_config.py", f"solutions/{UNIT}", f"notebooks/{UNIT}"):
        (shutil.copytree if (course.ROOT / part).is_dir() else shutil.copy)(course.ROOT / part, copy / part)
    shutil.rmtree(copy / "grader" / "fixtures")
    (copy / "grader" / "fixtures").mkdir()

    # Steps 1-3 of the README: to-py, add the two cells, to-nb, release.
    text = tmp_path / "u01.py"
    source_nb = copy / "solutions" / UNIT / f"{UNIT}.ipynb"
    run(copy, str(course.ROOT / "tools" / "nbsource.py"), "to-py", str(source_nb), str(text))
    text.write_text(text.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + readme_example(), encoding="utf-8")
    run(copy, str(course.ROOT / "tools" / "nbsource.py"), "to-nb", str(text), str(source_nb))
    assert "released: " + UNIT in run(copy, "-m", "grader", "release", UNIT).stdout
    assert "mean_pool" in json.loads((copy / "grader" / "fixtures" / f"{UNIT}.json").read_text())
    released = (copy / "notebooks" / UNIT / f"{UNIT}.ipynb").read_text(encoding="utf-8")
    assert 'check(\\"mean_pool\\")' in released and "x.mean(dim=-2)" not in released and "_oracle" not in released

    right, wrong = tmp_path / "right.ipynb", tmp_path / "wrong.ipynb"
    nbformat.write(filled(copy, {}), right)
    nbformat.write(filled(copy, {"u01_mean_pool": "def mean_pool(x):\n    return x.sum(dim=-2)\n"}), wrong)
    graded = {}
    for path in (right, wrong):
        result = json.loads(run(copy, "-m", "grader", "grade", str(path), "--json").stdout)
        graded[path.stem] = {e["grade_id"]: (e["points"], e["feedback"]) for e in result["exercises"]}

    assert graded["right"]["u01_mean_pool_check"] == (1, "passed")
    assert all(points > 0 for points, _ in graded["right"].values()), graded["right"]
    points, feedback = graded["wrong"]["u01_mean_pool_check"]
    assert points == 0 and "you added the token vectors up" in feedback, feedback
    assert {k: v for k, v in graded["wrong"].items() if k != "u01_mean_pool_check"} == \
        {k: v for k, v in graded["right"].items() if k != "u01_mean_pool_check"}
