"""A maintainer adds an exercise by following only docs/maintainers.md: on a copy
of the course, its example exercise goes into unit 01's source, solutions/01_dot_product/
01_dot_product.py, is released with `python -m grader release`, and a right and a wrong answer
are graded."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import course, notebook

pytestmark = pytest.mark.system


UNIT = "01_dot_product"


def documented_example() -> str:
    """The code block of docs/maintainers.md's section on adding an exercise."""
    guide = (course.ROOT / "docs" / "maintainers.md").read_text(encoding="utf-8")
    section = guide[guide.index("## Adding an exercise"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run(copy: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    """A command of the course run in the copy: `python -m grader` there imports the copy's grader."""
    out = subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True, timeout=600)
    assert (out.returncode == 0) == ok, out.stdout[-2000:] + out.stderr[-3000:]
    return out


# The translator's part of step 4: the Chinese of the example's new texts.
CHINESE = {
    "The mean of the token vectors: (T, d) -> (d,), or (B, T, d) -> (B, d).":
        "词元向量的均值：(T, d) -> (d,)，或 (B, T, d) -> (B, d)。",
    "average over the tokens, the last-but-one dimension": "对词元求平均，也就是倒数第二个维度",
    "random x of shape {shape}": "形状为 {shape} 的随机 x",
    "you added the token vectors up: divide the sum by the number of tokens":
        "你把词元向量加起来了：还要把和除以词元的个数",
    "you averaged over the features (the last dimension) instead of over the tokens":
        "你对特征（最后一个维度）求了平均，而不是对词元求平均",
}


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


def test_the_documented_example_exercise_releases_and_grades(tmp_path):
    copy = tmp_path / "course"
    for part in ("grader", "lab", "tools", "nbgrader_config.py", f"solutions/{UNIT}", f"notebooks/{UNIT}",
                 f"solutions-zh/{UNIT}", f"notebooks-zh/{UNIT}", "translations/zh/glossary.tsv",
                 "translations/zh/grader.po", f"translations/zh/{UNIT}.po"):
        (copy / part).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (course.ROOT / part).is_dir() else shutil.copy)(course.ROOT / part, copy / part)
    for stored in (copy / "grader" / "fixtures").rglob("*.json"):   # the stored values, made anew below
        stored.unlink()

    # Steps 1-3 of docs/maintainers.md: add the two cells to the unit's .py file, release.
    text = copy / "solutions" / UNIT / f"{UNIT}.py"
    text.write_text(text.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + documented_example(), encoding="utf-8")
    # The English is released; the Chinese edition names the new texts it still lacks.
    untranslated = run(copy, "-m", "grader", "release", UNIT, ok=False)
    missing = [line for line in untranslated.stderr.splitlines() if line.startswith("translations/")]
    assert len(missing) == len(CHINESE) and all("is not translated" in line for line in missing), missing
    assert "mean_pool" in json.loads((copy / "grader" / "fixtures" / f"{UNIT}.json").read_text())
    made = notebook.read(copy / "solutions" / UNIT / f"{UNIT}.ipynb")   # nbgrader's source, made from the .py
    assert [c.id for c in made.cells][-2:] == ["u01_mean_pool", "u01_mean_pool_check"]
    assert notebook.nbgrader_meta(made.cells[-1])["points"] == 1

    # Step 4: translate them, release again.
    texts = tmp_path / "u01.json"
    run(copy, "tools/translations.py", "to-json", "zh", UNIT, str(texts))
    entries = json.loads(texts.read_text(encoding="utf-8"))
    for entry in entries:
        entry["translation"] = entry["translation"] or CHINESE[entry["english"]]
    texts.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    run(copy, "tools/translations.py", "from-json", "zh", UNIT, str(texts))
    assert "released: " + UNIT in run(copy, "-m", "grader", "release", UNIT).stdout
    run(copy, "-m", "grader", "release", "--check", UNIT)
    chinese = (copy / "grader" / "fixtures" / "zh" / f"{UNIT}.json").read_text(encoding="utf-8")
    assert CHINESE["you added the token vectors up: divide the sum by the number of tokens"] in chinese
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
