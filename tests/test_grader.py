"""`python -m grader grade` on a class folder with honest, wrong, broken and hostile
submissions: every student is graded, nobody's verdict can be forged, nothing stops the batch."""
from __future__ import annotations

import copy
import csv
import json
import re
import subprocess
import sys

import nbformat
import pytest
from reference import answers, exercise_for, full_marks, points_of, student_notebook, unit_exercises

from grader import course, notebook

# One worker runs the whole module, so its fixture (grading the class) is built once.
pytestmark = [pytest.mark.system, pytest.mark.xdist_group("test_grader")]

UNIT = "01_dot_product"
FULL = full_marks(UNIT)
DOT = points_of(UNIT, "u01_dot_product_check")   # what a wrong dot_product costs


def _with_answer(gid_suffix: str, code: str, language: str = "en"):
    fill = answers(UNIT, language)
    fill[f"u01_{gid_suffix}"] = code
    return student_notebook(UNIT, fill, language)


def _submissions():
    subs = {"honest": student_notebook(UNIT)}
    subs["cosine"] = _with_answer("dot_product",
                                  "def dot_product(a, b):\n    return (a * b).sum() / (a.norm() * b.norm())")
    # Turns every later cell into `pass`: full marks under plain nbgrader.
    subs["transformer"] = _with_answer("dot_product", "def dot_product(a, b):\n    return a.sum()\n"
                                       "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])")
    # Always-equal objects and a patched torch.allclose.
    subs["patcher"] = _with_answer("dot_product", "import torch\ntorch.allclose = lambda *a, **k: True\n"
                                   "class Same:\n    def __eq__(self, other):\n        return True\n"
                                   "def dot_product(a, b):\n    return Same()")
    # Makes the grader's own save write a pickle that would run code when loaded.
    subs["forger"] = _with_answer("dot_product", "import pickle, torch\nclass Evil:\n"
                                  "    def __reduce__(self):\n        return (print, ('pwned',))\n"
                                  "torch.save = lambda obj, f, *a, **k: open(f, 'wb').write(pickle.dumps([Evil()]))\n"
                                  "def dot_product(a, b):\n    return (a * b).sum()")
    subs["exits"] = _with_answer("similarity_matrix", "import os\nos._exit(1)")
    subs["loops"] = _with_answer("dot_product", "def dot_product(a, b):\n    while True:\n        pass")
    # The same two in the Chinese edition, in the same class.
    subs["cosine-zh"] = _with_answer("dot_product",
                                     "def dot_product(a, b):\n    return (a * b).sum() / (a.norm() * b.norm())", "zh")
    # An endless loop that waits rather than spins: the same cut-off, without 15 s of a busy core.
    subs["loops-zh"] = _with_answer("dot_product", "import time\ndef dot_product(a, b):\n    while True:\n"
                                    "        time.sleep(1)", "zh")
    copied = student_notebook(UNIT)
    test_cell = next(c for c in copied.cells if notebook.grade_id(c) == "u01_dot_product_check")
    copied.cells.append(copy.deepcopy(test_cell))
    copied.metadata["kernelspec"] = {"name": "evil", "display_name": "evil", "language": "python"}
    subs["copied"] = copied
    deleted = student_notebook(UNIT)
    deleted.cells = [c for c in deleted.cells if notebook.grade_id(c) != "u01_similarity_matrix_check"]
    subs["deleted"] = deleted
    return subs


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    for student, nb in _submissions().items():
        path = root / "submitted" / student / UNIT / f"{UNIT}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    broken = root / "submitted" / "broken" / UNIT / f"{UNIT}.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [ this is not json')
    # 15 s a cell: unit 01's cells take well under a second, and the two endless loops wait it out.
    out = subprocess.run([sys.executable, "-m", "grader", "grade", str(root / "submitted"), "--json",
                          "--course-dir", str(root), "--cell-timeout", "15", "--report", str(root / "report.html")],
                         capture_output=True, text=True, timeout=900, cwd=course.ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    results = {r["student"]: r for r in json.loads(out.stdout)}
    return root, results


def _feedback(result, name):
    return next(e["feedback"] for e in result["exercises"] if name in e["names"])


def test_every_student_is_graded(graded):
    _, results = graded
    assert set(results) == set(_submissions()) | {"broken"}


def test_honest_full_marks_and_a_named_mistake(graded):
    _, results = graded
    assert results["honest"]["score"] == FULL
    assert results["cosine"]["score"] == FULL - DOT
    assert "cosine similarity" in _feedback(results["cosine"], "dot_product")


@pytest.mark.parametrize("student", ["transformer", "patcher", "forger"])
def test_forged_verdicts_do_not_pay(graded, student):
    _, results = graded
    assert _feedback(results[student], "dot_product") != "passed"
    assert results[student]["score"] <= FULL - DOT


def test_forger_cannot_run_code_in_the_grader(graded):
    _, results = graded
    assert "read back" in _feedback(results["forger"], "dot_product")


def test_a_dying_kernel_keeps_the_earlier_grades(graded):
    _, results = graded
    result = results["exits"]
    before = unit_exercises(UNIT)
    before = before[:before.index(exercise_for(UNIT, "u01_similarity_matrix"))]
    assert result["score"] == sum(e.points for e in before)  # the exercises before it ran before the kernel died
    assert any("kernel died" in f for f in result["flags"])


def test_an_endless_loop_costs_only_its_exercise(graded):
    _, results = graded
    result = results["loops"]
    assert result["score"] == FULL - DOT
    assert "did not finish" in _feedback(result, "dot_product")


def test_a_chinese_notebook_in_the_class_gets_the_same_points_and_chinese_feedback(graded):
    _, results = graded
    for student in ("cosine", "loops"):
        english, chinese = results[student], results[f"{student}-zh"]
        assert chinese["error"] is None and chinese["language"] == "zh"
        assert [e["points"] for e in chinese["exercises"]] == [e["points"] for e in english["exercises"]]
    # the verdict first, in Chinese, then the case
    cosine = _feedback(results["cosine-zh"], "dot_product")
    assert cosine.startswith("dot_product：你计算的是余弦相似度（除以了长度）；点积不做归一化（例子："), cosine
    loop = _feedback(results["loops-zh"], "dot_product")
    assert "没有运行完" in loop and "超过了评分程序给一个单元格的时间上限" in loop, loop


def test_copied_or_deleted_cells_and_foreign_kernels_are_flagged_not_fatal(graded):
    _, results = graded
    assert results["copied"]["score"] == FULL
    flags = " ".join(results["copied"]["flags"])
    assert "2 cells with grade_id 'u01_dot_product_check'" in flags and "'evil'" in flags
    assert results["deleted"]["score"] == FULL
    assert "deleted" in " ".join(results["deleted"]["flags"])


def test_a_broken_file_is_reported(graded):
    _, results = graded
    assert results["broken"]["score"] == 0 and "not a readable notebook" in results["broken"]["error"]


def test_gradebook_csv_feedback_and_report(graded):
    from nbgrader.api import Gradebook

    root, results = graded
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for student, result in results.items():
            assert gb.find_submission(UNIT, student).score == result["score"]
    rows = {r["student_id"]: float(r["score"]) for r in csv.DictReader(open(root / "grades.csv"))}
    assert rows["honest"] == FULL and rows["cosine"] == FULL - DOT
    report = (root / "feedback" / "cosine" / UNIT / f"{UNIT}.html").read_text()
    assert "cosine similarity" in report and "BEGIN HIDDEN TESTS" not in report and "dot_product_oracle" not in report
    assert "data:image/png;base64," in (root / "report.html").read_text()


def test_autograded_copy_keeps_prose_and_code_but_no_hidden_tests(graded):
    root, _ = graded
    copy_ = notebook.read(root / "autograded" / "cosine" / UNIT / f"{UNIT}.ipynb")
    released = notebook.read(course.release_notebook(UNIT))
    prose = [c.source for c in released.cells if c.cell_type == "markdown"]
    assert prose and [c.source for c in copy_.cells if c.cell_type == "markdown"] == prose
    text = nbformat.writes(copy_)
    assert "(a.norm() * b.norm())" in text                      # the learner's own code
    assert "HIDDEN TESTS" not in text and "_oracle" not in text and "Spec(" not in text
    assert "Grader: \u2717" in text and "cosine similarity" in text


# What the first cell prints when it installs the course, or cannot (grader/authoring/release.py, INSTALL_CELL_SOURCE).
INSTALL_OUTPUT = re.compile(r"<pre>(Installing the course|The course.s package is not installed|Nothing installed|"
                            r"正在安装课程|这里没有安装课程|没有安装任何东西)")


@pytest.mark.parametrize("student", ["honest", "cosine-zh"])
def test_feedback_does_not_open_with_installing_the_course(graded, student):
    """The sandbox holds the course's code but not its installed package, so the first cell, which
    installs the package on a hosted notebook, must stay quiet under the grader (NBGRADER_EXECUTION):
    no feedback opens with a line about installing it."""
    root, _ = graded
    autograded = notebook.read(root / "autograded" / student / UNIT / f"{UNIT}.ipynb")
    install = next(c for c in autograded.cells if notebook.grade_id(c) == "install_course")
    assert install.outputs == [], install.outputs
    report = (root / "feedback" / student / UNIT / f"{UNIT}.html").read_text(encoding="utf-8")
    assert not INSTALL_OUTPUT.search(report)


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>'


def test_pasted_images_are_graded_and_an_outputs_metadata_reaches_no_page(tmp_path):
    """A markdown cell with a pasted PNG and one with a pasted SVG (JupyterLab's `attachment:`) is
    graded with full marks and its feedback page drawn; an image output whose metadata carries
    markup in its width reaches the graded copy as whole numbers only."""
    import base64

    from grader.grading.feedback import FeedbackExporter
    from grader.grading.grade import grade_notebook

    nb = student_notebook(UNIT)
    pasted = [nbformat.v4.new_markdown_cell("![my drawing](attachment:drawing.png)"),
              nbformat.v4.new_markdown_cell("![my sketch](attachment:sketch.svg)")]
    pasted[0].attachments = {"drawing.png": {"image/png": PNG}}
    pasted[1].attachments = {"sketch.svg": {"image/svg+xml": base64.b64encode(SVG.encode()).decode()}}
    sized = nbformat.v4.new_code_cell(
        "from IPython.display import display\n"
        f"display({{'image/png': {PNG!r}, 'text/plain': 'p'}}, raw=True, metadata={{'image/png': "
        "{'width': '1 onerror=alert(1)', 'height': 20, 'isolated': True}, 'text/plain': {'x': 1}})")
    nb.cells[1:1] = [*pasted, sized]
    path, autograded = tmp_path / f"{UNIT}.ipynb", tmp_path / "autograded" / f"{UNIT}.ipynb"
    nbformat.write(nb, path)
    result = grade_notebook(path, UNIT, autograded=autograded)
    assert result.score == FULL and not result.error, (result.error, result.flags)
    graded = nbformat.read(autograded, as_version=4)
    kept = [cell.get("attachments") for cell in graded.cells if cell.cell_type == "markdown"]
    assert pasted[0].attachments in kept and pasted[1].attachments in kept
    [output] = [o for cell in graded.cells if cell.cell_type == "code" and "raw=True" in cell.source
                for o in cell.outputs]
    assert output.metadata == {"image/png": {"height": 20}}, output.metadata
    page, _ = FeedbackExporter().from_notebook_node(graded)
    assert f"data:image/png;base64,{PNG}" in page and not re.search(r"<img[^>]*onerror", page)
