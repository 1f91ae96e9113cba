"""A maintainer adds an exercise by following only docs/maintainers.md's "Adding an exercise". On a
copy of the course, the section's example exercise goes into the middle of unit 01, with its
catalogue entries; both editions release and grade it; the fast tests that read the course pass
in the copy as they are; and the files that changed are exactly the ones the section names."""
from __future__ import annotations

import json
import os
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
BEFORE = "# ### Exercise — `cosine_similarity_matrix("   # the example goes before this exercise: mid-unit


def section() -> str:
    guide = (course.ROOT / "docs" / "maintainers.md").read_text(encoding="utf-8")
    start = guide.index("## Adding an exercise")
    return guide[start:guide.index("\n## ", start + 1)]


def documented_code() -> tuple[str, str]:
    """The section's two code blocks: the exercise's cells, and its catalogue entries."""
    cells, entries = re.findall(r"```python\n(.*?)```", section(), re.S)[:2]
    return cells, entries


def documented_files() -> set[str]:
    """The paths of the section's list of the files the steps change."""
    listing = section().split("These steps change these files, and no others:")[1].split("\n\n")[0]
    return set(re.findall(r"`([\w./-]+\.\w+)`", listing))


def copy_of_the_course(copy: Path) -> None:
    """The working tree's files (tracked, and new ones not ignored) in a git repository of their own."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=course.ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (course.ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(course.ROOT / name, copy / name)
    git = ["git", "-c", "user.name=maintainer", "-c", "user.email=maintainer@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the course as it is"]):
        subprocess.run(git + args, cwd=copy, check=True, capture_output=True)


def run(copy: Path, *args: str, ok: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    """A command run in the copy. PYTHONPATH makes every process there import the copy's grader,
    nbgrader's own command included (docs/maintainers.md: a second clone)."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True, timeout=timeout, env=env)
    assert (out.returncode == 0) == ok, out.stdout[-3000:] + out.stderr[-3000:]
    return out


# The translator's part of step 4: the Chinese of the example's new texts.
CHINESE = {
    "### Exercise — `mean_pool(x)` (about 5 minutes)\n\n**Goal:** the mean of the token vectors, "
    "`(T, d) -> (d,)` or `(B, T, d) -> (B, d)`: the\nsimplest summary of a sentence.":
        "### 练习 — `mean_pool(x)`（约 5 分钟）\n\n**目标：** 词元向量的均值，`(T, d) -> (d,)` 或 "
        "`(B, T, d) -> (B, d)`：对一个句子最简单的概括。",
    "The mean of the token vectors: (T, d) -> (d,), or (B, T, d) -> (B, d).":
        "词元向量的均值：(T, d) -> (d,)，或 (B, T, d) -> (B, d)。",
    "average over the tokens, the last-but-one dimension": "对词元求平均，也就是倒数第二个维度",
    "random x of shape {shape}": "形状为 {shape} 的随机 x",
    "you added the token vectors up: divide the sum by the number of tokens":
        "你把词元向量加起来了：还要把和除以词元的个数",
    "you averaged over the features (the last dimension) instead of over the tokens":
        "你对特征（最后一个维度）求了平均，而不是对词元求平均",
}


def filled(copy: Path, language: str, replace: dict[str, str]) -> nbformat.NotebookNode:
    """The copy's released notebook of `language`'s edition with every answer cell holding the
    reference answer, or the code in `replace` (by grade id)."""
    solutions, notebooks = ("solutions", "notebooks") if language == "en" else ("solutions-zh", "notebooks-zh")
    source = notebook.read(copy / solutions / UNIT / f"{UNIT}.ipynb")
    answers = {notebook.grade_id(c): "\n".join(line for line in c.source.splitlines() if "### " not in line)
               for c in source.cells if notebook.is_answer(c)}
    nb = notebook.read(copy / notebooks / UNIT / f"{UNIT}.ipynb")
    for cell in nb.cells:
        if notebook.is_answer(cell):
            cell.source = replace.get(notebook.grade_id(cell), answers[notebook.grade_id(cell)])
    return nb


def test_the_documented_example_exercise_inserted_mid_unit_releases_grades_and_changes_only_the_named_files(
        tmp_path):
    copy = tmp_path / "course"
    copy_of_the_course(copy)
    cells, entries = documented_code()

    # Steps 1-3: the cells go where the exercise belongs, before the unit's last exercise; release.
    text = copy / "solutions" / UNIT / f"{UNIT}.py"
    source = text.read_text(encoding="utf-8")
    at = source.rindex("# %% [markdown]", 0, source.index(BEFORE))
    text.write_text(source[:at] + cells.rstrip("\n") + "\n\n" + source[at:], encoding="utf-8")
    # The English is released; the Chinese edition names the new texts it still lacks, and only them.
    untranslated = run(copy, "-m", "grader", "release", UNIT, ok=False)
    missing = [line for line in untranslated.stderr.splitlines() if line.startswith("translations/")]
    assert len(missing) == len(CHINESE) and all("is not translated" in line for line in missing), missing
    made = notebook.read(copy / "solutions" / UNIT / f"{UNIT}.ipynb")   # nbgrader's source, made from the .py
    ids = [c.id for c in made.cells if notebook.grade_id(c)]
    assert ids.index("u01_mean_pool_check") < ids.index("u01_cosine_similarity_matrix"), ids

    # Step 4: translate them, release again.
    texts = tmp_path / "u01.json"
    run(copy, "tools/translations.py", "to-json", "zh", UNIT, str(texts))
    to_fill = json.loads(texts.read_text(encoding="utf-8"))
    for entry in to_fill:
        entry["translation"] = entry["translation"] or CHINESE[entry["english"]]
    texts.write_text(json.dumps(to_fill, ensure_ascii=False), encoding="utf-8")
    run(copy, "tools/translations.py", "from-json", "zh", UNIT, str(texts))
    assert "released: " + UNIT in run(copy, "-m", "grader", "release", UNIT).stdout
    released = (copy / "notebooks" / UNIT / f"{UNIT}.ipynb").read_text(encoding="utf-8")
    assert 'check(\\"mean_pool\\")' in released and "x.mean(dim=-2)" not in released and "_oracle" not in released

    # Steps 5-6: the catalogue's entries; the index.
    catalogue = copy / "tests" / "catalogue" / "u01.py"
    catalogue.write_text(catalogue.read_text(encoding="utf-8") + "\n" + entries, encoding="utf-8")
    run(copy, "tools/course_index.py")

    # Nothing else needed changing: in the copy, the fast tier passes as it is in every test file
    # that names unit 01, and in those that read every unit (the catalogue, the proof of the
    # reference answers, the self-checks' examples, lint), for unit 01.
    naming = sorted(f"tests/{f.name}" for f in (copy / "tests").glob("test_*.py")
                    if f.name != Path(__file__).name and re.search(r"01_dot_product|u01_", f.read_text("utf-8")))
    every_unit = ("tests/test_references.py", "tests/test_catalogue.py", "tests/test_selfcheck_examples.py",
                  "tests/test_lint.py")
    tests = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "-m", "not system", *naming,
                *every_unit, "-k", "not (test_catalogue or test_references or test_selfcheck_examples or test_source "
                "or test_release or test_translations or test_accessibility) or 01_dot_product or u01 or in_sync",
                timeout=1200)
    assert "mean_pool" in (copy / "docs" / "course-index.md").read_text(encoding="utf-8")
    assert re.search(r"\b[1-9]\d* passed", tests.stdout) and "failed" not in tests.stdout, tests.stdout[-3000:]

    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=copy,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    assert {line[3:] for line in changed} == documented_files()

    # Both editions grade the right answer fully and name the wrong one, in their language.
    wrong = {"u01_mean_pool": "def mean_pool(x):\n    return x.sum(dim=-2)\n"}
    message = "you added the token vectors up: divide the sum by the number of tokens"
    for language, said in (("en", message), ("zh", CHINESE[message])):
        graded = {}
        for name, replace in (("right", {}), ("wrong", wrong)):
            path = tmp_path / f"{name}-{language}.ipynb"
            nbformat.write(filled(copy, language, replace), path)
            result = json.loads(run(copy, "-m", "grader", "grade", str(path), "--json").stdout)
            graded[name] = {e["grade_id"]: (e["points"], e["feedback"]) for e in result["exercises"]}
        assert graded["right"]["u01_mean_pool_check"][0] == 1, graded["right"]
        assert all(points > 0 for points, _ in graded["right"].values()), graded["right"]
        points, feedback = graded["wrong"]["u01_mean_pool_check"]
        assert points == 0 and said in feedback, feedback
        assert {k: v for k, v in graded["wrong"].items() if k != "u01_mean_pool_check"} == \
            {k: v for k, v in graded["right"].items() if k != "u01_mean_pool_check"}
