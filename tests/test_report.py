"""The class report: one self-contained HTML file with charts, mistakes and problems, escaped."""
from __future__ import annotations

import re

from grader.grading.report import pass_rates, write_report
from grader.grading.results import ExerciseResult, NotebookResult


def _result(student: str, unit: str, passed: list[bool], mistake: str | None = None, **kw) -> NotebookResult:
    exercises = [ExerciseResult(f"u01_ex{i}_check", [f"ex{i}"], 1.0) for i in range(len(passed))]
    for exercise, ok in zip(exercises, passed):
        exercise.grade([] if ok else [mistake or "values differ"], None if ok else mistake)
    return NotebookResult(f"{unit}.ipynb", unit, student, exercises, **kw)


def sample_class() -> list[NotebookResult]:
    cosine = "you computed the cosine <script>alert(1)</script>"
    return [_result("ann", "01_dot_product", [True, True]),
            _result("bob", "01_dot_product", [False, True], cosine),
            _result("cy", "01_dot_product", [False, False], cosine, flags=["kernel 'evil' is not python3"]),
            _result("dee", "02_softmax", [True, False]),
            NotebookResult("x.ipynb", None, "eve", error="x.ipynb is empty (0 bytes)")]


def test_pass_rates():
    rates = pass_rates(sample_class())
    assert rates["01_dot_product"] == {"u01_ex0_check": 1 / 3, "u01_ex1_check": 2 / 3}
    assert rates["02_softmax"] == {"u01_ex0_check": 1.0, "u01_ex1_check": 0.0}


def test_report_is_one_file_with_charts_mistakes_and_problems(tmp_path):
    path = tmp_path / "report.html"
    write_report(sample_class(), path)
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 4          # a histogram and a pass-rate chart per unit
    assert "<script>" not in text and "&lt;script&gt;" in text  # learner text is escaped
    row = text[text.index("you computed the cosine"):]
    assert row.split("<td class=n>")[1].startswith("2<")     # counted once per notebook that made it
    assert "is empty (0 bytes)" in text and "&#x27;evil&#x27; is not python3" in text
    assert "src='http" not in text and "<link" not in text   # nothing to fetch


def test_a_notebook_left_to_grade_again_counts_in_no_chart_and_is_listed(tmp_path):
    waiting = _result("fay", "01_dot_product", [False, False],
                      regrade="not graded: the machine failed before the notebook's first cell ran")
    assert pass_rates(sample_class() + [waiting]) == pass_rates(sample_class())
    path = tmp_path / "report.html"
    write_report(sample_class() + [waiting], path)
    text = path.read_text()
    assert "1 of them not graded yet" in text and "to grade again" in text
    assert "mean score 1.0, median 1 of 2" in text                  # fay's zeros are not scores


HOSTILE = "<script>alert(1)</script>\x1b[31m\x00\x07=cmd|' /C calc'!A0\u202e"   # markup, controls, a formula


def hostile_class() -> list[NotebookResult]:
    """A class where every string a learner controls is hostile: the student's name, the unit and
    notebook named in the submission, the exercise names, the messages and the flags."""
    unit = "01_dot_product" + HOSTILE
    exercise = ExerciseResult("u01_x_check", ["ex" + HOSTILE], 1.0)
    exercise.grade(["feedback " + HOSTILE], "mistake " + HOSTILE)
    return [NotebookResult("notebook" + HOSTILE + ".ipynb", unit, "student" + HOSTILE, [exercise],
                           flags=["flag " + HOSTILE]),
            NotebookResult("other" + HOSTILE + ".ipynb", unit, "other" + HOSTILE, error="error " + HOSTILE)]


def test_every_learner_string_reaches_the_report_as_text(tmp_path):
    path = tmp_path / "report.html"
    write_report(hostile_class(), path)
    text = path.read_text(encoding="utf-8")
    assert "<script" not in text and not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", text)
    shown = text.count("&lt;script&gt;")
    # student (2), unit (heading, 2 alts, 2 rows), notebook (1; the rejected one's is listed too),
    # mistake, flag, error: each field's escaping removed would leave a raw <script
    assert shown >= 9, shown


def test_cells_of_an_lms_export_are_plain_text():
    from grader.classroom.lms import cell

    assert cell("=HYPERLINK(\"http://x\")") == "'=HYPERLINK(\"http://x\")"
    assert cell("@SUM(A1)").startswith("'") and cell("-2+3").startswith("'") and cell("+1").startswith("'")
    assert cell("Ann\x00\x1b[31m\nLee") == "Ann[31m Lee"
    assert cell("王小明") == "王小明" and cell("ann@example.org") == "ann@example.org"


def test_a_chinese_class_gets_its_report_in_chinese(tmp_path, monkeypatch):
    """The report speaks the class's language, as its feedback does: its words, its charts' words
    and the charts' descriptions come from the grader's catalogue."""
    monkeypatch.delenv("COURSE_LANG", raising=False)
    results = sample_class()
    for result in results:
        result.language = "zh"
    path = tmp_path / "report.html"
    write_report(results, path)
    text = path.read_text(encoding="utf-8")
    assert '<html lang="zh-Hans"' in text and "<title>班级报告</title>" in text
    assert "5 份笔记本，来自 5 名学生。" in text and "被标记或失败的提交" in text
    assert re.findall(r"<img alt='([^']*)'", text)[0].startswith("图：")
    monkeypatch.setenv("COURSE_LANG", "en")   # an instructor who asks for English gets it
    write_report(results, path)
    assert "<title>Class report</title>" in path.read_text(encoding="utf-8")
