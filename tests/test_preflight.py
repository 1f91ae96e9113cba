"""Pre-flight: every broken input is repaired or rejected with a reason, before anything runs."""
from __future__ import annotations

import copy
import json

import nbformat
import pytest
from reference import student_notebook

from grader import course, notebook
from grader.grading import preflight
from grader.grading.settings import Limits

UNIT = "01_dot_product"
TEST = "u01_dot_product_check"


def _write(tmp_path, nb_or_text, name=f"{UNIT}.ipynb"):
    path = tmp_path / UNIT / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb_or_text, (str, bytes)):
        path.write_bytes(nb_or_text.encode() if isinstance(nb_or_text, str) else nb_or_text)
    else:
        path.write_text(json.dumps(nb_or_text), encoding="utf-8")
    return path


def _edited(edit) -> dict:
    nb = json.loads(nbformat.writes(student_notebook(UNIT)))
    edit(nb)
    return nb


def _test_cell(nb: dict) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == TEST)


REJECTED = {
    "empty file": ("", "is empty"),
    "only whitespace": ("  \n", "is empty"),
    "broken JSON": ('{"cells": [ oops', "broken JSON at line 1"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\xff", "not UTF-8"),
    "JSON but no cells": ('{"hello": 1}', "without a list of cells"),
}


@pytest.mark.parametrize("name", REJECTED)
def test_unreadable_files_are_rejected_with_a_reason(tmp_path, name):
    content, reason = REJECTED[name]
    check = preflight.check(_write(tmp_path, content), UNIT)
    assert check.notebook is None and reason in check.rejection


def test_a_notebook_larger_than_the_limit_is_rejected_unread(tmp_path):
    path = _write(tmp_path, json.loads(nbformat.writes(student_notebook(UNIT))))
    size = path.stat().st_size
    assert preflight.check(path, UNIT, Limits(notebook_bytes=size)).rejection is None
    check = preflight.check(path, UNIT, Limits(notebook_bytes=size - 1))
    assert check.notebook is None and "is larger than" in check.rejection


def test_another_units_notebook_is_rejected(tmp_path):
    path = _write(tmp_path, json.loads(nbformat.writes(student_notebook("02_softmax"))))
    check = preflight.check(path, UNIT)
    assert check.notebook is None and "02_softmax" in check.rejection


def test_a_notebook_of_no_unit_is_rejected_when_nothing_names_it(tmp_path):
    path = _write(tmp_path, json.loads(nbformat.writes(nbformat.v4.new_notebook())), name="mine.ipynb")
    path = path.rename(tmp_path / "mine.ipynb")
    assert "cannot tell" in preflight.check(path).rejection


def _set(key, value):
    def edit(nb):
        _test_cell(nb)["metadata"]["nbgrader"][key] = value
    return edit


def _retype(nb):
    cell = _test_cell(nb)
    cell.update(cell_type="markdown")
    cell.pop("outputs"), cell.pop("execution_count")


REPAIRED = {
    "cells without ids": (lambda nb: [c.pop("id") for c in nb["cells"]], "no valid or unique id"),
    "duplicate cell ids": (lambda nb: [c.update(id="same") for c in nb["cells"]], "no valid or unique id"),
    "copied test cell": (lambda nb: nb["cells"].append(copy.deepcopy(_test_cell(nb))), "2 cells with grade_id"),
    "grade_id removed": (lambda nb: _test_cell(nb)["metadata"].pop("nbgrader"), "is missing"),
    "test cell edited": (lambda nb: _test_cell(nb).update(source="pass"), "was edited"),
    "test cell retyped": (_retype, "changed from code to markdown"),
    "points raised": (_set("points", 100), "changed from 1 to 100"),
    "foreign kernel": (lambda nb: nb["metadata"].update(kernelspec={"name": "evil", "display_name": "e"}),
                       "'evil' is not the course's"),
}


@pytest.mark.parametrize("name", REPAIRED)
def test_form_problems_are_repaired_and_noted(tmp_path, name):
    edit, note = REPAIRED[name]
    check = preflight.check(_write(tmp_path, _edited(edit)), UNIT)
    assert check.rejection is None and check.notebook is not None
    assert any(note in r for r in check.repairs), check.repairs
    ids = [c.id for c in check.notebook.cells]
    assert len(set(ids)) == len(ids)


def test_nbformat_3_is_converted(tmp_path):
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {},
          "worksheets": [{"cells": [{"cell_type": "code", "input": "x = 1", "language": "python",
                                     "outputs": [], "metadata": {}}]}]}
    check = preflight.check(_write(tmp_path, v3), UNIT)
    assert check.rejection is None and "nbformat 3" in " ".join(check.repairs)
    assert check.notebook.nbformat == 4 and check.notebook.cells[0].source == "x = 1"


def test_the_reference_needs_no_repair(tmp_path):
    check = preflight.check(_write(tmp_path, json.loads(nbformat.writes(student_notebook(UNIT)))))
    assert (check.unit, check.repairs, check.rejection) == (UNIT, [], None)


def test_every_units_reference_is_recognised(tmp_path):
    for unit in course.units():
        nb = notebook.read(course.release_notebook(unit))
        assert preflight.unit_of(nb) == unit
