"""The learner's progress: each self-check records its outcome in the working folder, and
progress() shows the whole course from that file."""
from __future__ import annotations

import json

import pytest
import torch

from grader import progress
from grader.selfcheck import check, exercises
from grader.spec import CheckFailed


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A learner's working folder with two units' folders, outside nbgrader."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    for unit in ("01_dot_product", "02_softmax"):
        (tmp_path / unit).mkdir()
    return tmp_path


def test_progress_reports_a_right_and_a_wrong_answer_in_two_units(folder, monkeypatch, capsys):
    monkeypatch.chdir(folder / "01_dot_product")
    check("dot_product", {"dot_product": lambda a, b: (a * b).sum()})
    assert "Progress: unit 01 1 of 4 exercises pass" in capsys.readouterr().out

    monkeypatch.chdir(folder / "02_softmax")
    with pytest.raises(CheckFailed) as failed:   # no exponential: the scores normalised as they are
        check("softmax", {"softmax": lambda x, dim=-1: x / x.sum(dim=dim, keepdim=True)})
    assert "the course 1 of" in capsys.readouterr().out

    text = progress.report(folder)
    assert "\u2713 dot_product" in text
    assert f"\u2717 softmax: {failed.value}" in text
    assert "\u00b7 similarity_matrix" in text and "\u00b7 simple_self_attention" in text
    assert "01_dot_product: 1 of 4 pass" in text and "02_softmax: 0 of 5 pass" in text
    total = sum(map(len, exercises().values()))
    assert f"The course: 1 of {total} exercises pass" in text

    monkeypatch.chdir(folder)                 # from the working folder itself, the same file
    progress.progress()
    assert f"\u2717 softmax: {failed.value}" in capsys.readouterr().out
    stored = json.loads((folder / progress.FILE).read_text(encoding="utf-8"))["exercises"]
    assert stored["softmax"]["unit"] == "02_softmax" and stored["softmax"]["status"] == "fail"


def test_a_right_answer_after_a_wrong_one_replaces_it(folder, monkeypatch):
    monkeypatch.chdir(folder / "02_softmax")
    with pytest.raises(CheckFailed):
        check("softmax", {"softmax": lambda x, dim=-1: x / x.sum(dim=dim, keepdim=True)})
    def softmax(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    check("softmax", {"softmax": softmax})
    assert progress.load(folder)["softmax"].status == progress.PASS


def test_an_answer_not_written_yet_is_not_a_try(folder, monkeypatch):
    def dot_product(a, b):
        raise NotImplementedError()

    monkeypatch.chdir(folder / "01_dot_product")
    with pytest.raises(CheckFailed, match="not written yet"):
        check("dot_product", {"dot_product": dot_product})
    with pytest.raises(CheckFailed, match="not defined"):
        check("similarity_matrix", {})
    assert progress.load(folder) == {}


def test_nothing_is_recorded_while_nbgrader_runs_the_notebook(folder, monkeypatch, capsys):
    monkeypatch.chdir(folder / "01_dot_product")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    check("dot_product", {"dot_product": lambda a, b: (a * b).sum()})
    assert not (folder / progress.FILE).exists() and "Progress" not in capsys.readouterr().out
    progress.progress()   # a graded copy or feedback report saying "0 of 44 pass" would contradict its score
    assert capsys.readouterr().out == ""


def test_a_folder_that_cannot_be_written_keeps_no_record_and_the_check_still_answers(folder, monkeypatch, capsys):
    (folder / progress.FILE).mkdir()          # in the way: the record cannot be written
    monkeypatch.chdir(folder / "01_dot_product")
    check("dot_product", {"dot_product": lambda a, b: (a * b).sum()})
    assert "\u2713 dot_product" in capsys.readouterr().out and progress.load(folder) == {}
