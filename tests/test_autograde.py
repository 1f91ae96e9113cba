"""Through real nbgrader autograding: every reference solution earns full marks and every blank
student notebook zero; `python -m grader grade --json` gives the same points (its grading of the
same notebooks is made once for the session: tests/graded.py)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from helpers import figure_problems
from reference import student_notebook

from grader import course, notebook

pytestmark = pytest.mark.system



def nbgrader_autograde(unit: str, notebooks: dict[str, object], course_root: Path,
                       language: str = "en") -> dict[str, dict[str, float]]:
    """Autograde each student's notebook with nbgrader's API and the shipped config, for the
    edition in `language`; returns {student: {grade_id: points}}."""
    from nbgrader.api import Gradebook

    api = course.nbgrader_api(course_root, release_dir=course_root / "release", language=language)
    assert api.generate_assignment(unit, force=True)["success"]
    scores = {}
    for student, nb in notebooks.items():
        target = course_root / "submitted" / student / unit / f"{unit}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        outcome = api.autograde(unit, student, force=True)
        assert outcome["success"], outcome["log"][-3000:]
    with Gradebook(api.coursedir.db_url) as gb:
        for student in notebooks:
            submission = gb.find_submission_notebook(unit, unit, student)
            scores[student] = {g.name: g.score for g in submission.grades}
    return scores


@pytest.mark.parametrize("unit", course.units())
def test_reference_full_blank_zero_and_grader_agrees_with_nbgrader(unit, tmp_path, monkeypatch, course_graded):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")   # the kernels nbgrader starts: one thread each, as the grader's
    notebooks = {"reference": student_notebook(unit), "blank": notebook.read(course.release_notebook(unit))}
    nbgrader_scores = nbgrader_autograde(unit, notebooks, tmp_path / "course")
    exercises = notebook.exercises(notebook.read(course.source_notebook(unit)))
    full = {e.grade_id: e.points for e in exercises}

    assert nbgrader_scores["reference"] == full, "the reference solution must earn full marks"
    assert nbgrader_scores["blank"] == {gid: 0 for gid in full}, "a blank notebook must earn zero"

    for student in notebooks:   # python -m grader grade, on the same notebooks (tests/graded.py)
        result = course_graded.result(student, unit)
        assert result["unit"] == unit and result["error"] is None, result
        assert {e["grade_id"]: e["points"] for e in result["exercises"]} == nbgrader_scores[student]
        assert result["max_score"] == sum(full.values())
        if student == "blank":
            assert all("not written yet" in e["feedback"] for e in result["exercises"]), result
    reference = notebook.read(tmp_path / "course" / "autograded" / "reference" / unit / f"{unit}.ipynb")
    assert figure_problems(reference, "en") == []   # every figure described, for a screen reader


@pytest.mark.parametrize("unit", course.units())
def test_the_chinese_edition_grades_the_same_through_nbgrader(unit, tmp_path, monkeypatch):
    """The Chinese reference earns full marks and the blank notebook zero, with the same points;
    the blank's feedback is in Chinese."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")   # the kernels nbgrader starts: one thread each, as the grader's
    notebooks = {"reference": student_notebook(unit, language="zh"),
                 "blank": notebook.read(course.release_notebook(unit, "zh"))}
    scores = nbgrader_autograde(unit, notebooks, tmp_path / "course", language="zh")
    full = {e.grade_id: e.points for e in notebook.exercises(notebook.read(course.source_notebook(unit)))}
    assert scores["reference"] == full, "the Chinese reference solution must earn full marks"
    assert scores["blank"] == {gid: 0 for gid in full}, "a blank Chinese notebook must earn zero"
    autograded = notebook.read(tmp_path / "course" / "autograded" / "blank" / unit / f"{unit}.ipynb")
    errors = [o.get("evalue", "") for c in autograded.cells if notebook.is_test(c) for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert any("还没有写" in e for e in errors) and not any("not written yet" in e for e in errors), errors[:3]
    reference = notebook.read(tmp_path / "course" / "autograded" / "reference" / unit / f"{unit}.ipynb")
    assert figure_problems(reference, "zh") == []   # every figure described, in Chinese
