"""Each unit's one source is solutions/<unit>/<unit>.py in jupytext's percent format: it makes
nbgrader's source notebook, a change to it is a change of Python lines, and its answers never
reach the learners' release."""
from __future__ import annotations

import difflib
import re

import nbformat
import pytest

from grader import course, notebook
from grader.authoring import source

UNIT = "01_dot_product"


@pytest.mark.parametrize("unit", course.units())
def test_the_py_source_makes_the_shipped_source_notebook(unit):
    made = nbformat.writes(source.to_notebook(course.source_text(unit))) + "\n"   # as release writes it
    assert made == course.source_notebook(unit).read_text(encoding="utf-8"), \
        f"solutions/{unit}/{unit}.ipynb is not what {unit}.py makes: run `python -m grader release {unit}`"


def test_a_changed_hidden_check_is_a_change_of_one_python_line(tmp_path):
    text = course.source_text(UNIT).read_text(encoding="utf-8")
    old = 'yield Mistake("you computed the cosine similarity'
    assert text.count(old) == 1
    edited = text.replace(old, 'yield Mistake("you computed the cosine similarity, not the dot product')
    path = tmp_path / f"{UNIT}.py"
    path.write_text(edited, encoding="utf-8")

    changed = [line for line in difflib.unified_diff(text.splitlines(), edited.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(changed) == 2 and all("yield Mistake(" in line for line in changed), changed
    before, after = notebook.read(course.source_notebook(UNIT)), source.to_notebook(path)
    differing = [(a.id, b.id) for a, b in zip(before.cells, after.cells) if a != b]
    assert differing == [("u01_dot_product_check", "u01_dot_product_check")]
    assert notebook.hidden_source(after.cells[[c.id for c in after.cells].index("u01_dot_product_check")].source) \
        .count("not the dot product") == 1


@pytest.mark.parametrize("header, problem", [
    ('# %% nbgrader={"grade": true, "points": 1}', "must be a JSON object with a \"grade_id\""),
    ('# %% nbgrader={"grade": false, "grade_id": "u01_dot_product", "solution": true}', "the same grade id"),
])
def test_a_cell_header_with_bad_nbgrader_metadata_is_named(tmp_path, header, problem):
    path = tmp_path / f"{UNIT}.py"
    path.write_text(course.source_text(UNIT).read_text(encoding="utf-8") + f"\n{header}\nx = 1\n", encoding="utf-8")
    with pytest.raises(source.SourceError, match=problem) as raised:
        source.to_notebook(path)
    assert str(path) in str(raised.value)


def test_nbgrader_releases_the_notebook_without_the_py_source(tmp_path):
    """The shipped configuration, as `nbgrader generate_assignment` uses it from the repository
    root: the .py beside the source notebook holds the answers and must stay behind."""
    api = course.nbgrader_api(tmp_path / "course", release_dir=tmp_path / "release")
    assert api.generate_assignment(UNIT, force=True)["success"]
    assert sorted(p.name for p in (tmp_path / "release" / UNIT).iterdir()) == [f"{UNIT}.ipynb"]


def test_every_unit_folder_holds_its_source_and_only_generated_notebooks_beside():
    for unit in course.units():
        files = sorted(p.name for p in (course.SOLUTIONS / unit).iterdir() if not p.name.startswith("."))
        assert files == [f"{unit}.ipynb", f"{unit}.py"], files


def test_a_missing_source_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(course, "SOLUTIONS", tmp_path)
    (tmp_path / UNIT).mkdir()
    with pytest.raises(source.SourceError, match=f"{UNIT}.py is missing"):
        source.unit_notebook(UNIT)



# "Exercise 3", "练习 3": a number that an exercise inserted before it would change.
EXERCISE_NUMBER = re.compile(r"\b[Ee]xercises? \d|练习 ?\d")


@pytest.mark.parametrize("language", course.EDITIONS)
def test_no_text_numbers_the_exercises(language):
    """Exercises are named by their function, so inserting one changes no other text (nor its
    translation)."""
    numbered = [f"{unit} cell {i}: {m.group(0)!r}"
                for unit in course.units()
                for i, cell in enumerate(notebook.read(course.source_notebook(unit, language)).cells)
                for m in EXERCISE_NUMBER.finditer(cell.source)]
    assert not numbered, numbered
