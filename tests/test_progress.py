"""The learner's progress: each self-check records its outcome in the working folder, and
progress() shows the whole course from that file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attention_course import cli, content, workspace
from grader.checks import i18n, progress
from grader.checks.selfcheck import check, exercises
from grader.checks.spec import CheckFailed

ROOT = Path(__file__).resolve().parent.parent


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
    counts = {unit: len(names) for unit, names in exercises().items()}   # read from the course, not copied
    assert f"Progress: unit 01 1 of {counts['01_dot_product']} exercises pass" in capsys.readouterr().out

    monkeypatch.chdir(folder / "02_softmax")
    with pytest.raises(CheckFailed) as failed:   # no exponential: the scores normalised as they are
        check("softmax", {"softmax": lambda x, dim=-1: x / x.sum(dim=dim, keepdim=True)})
    assert "the course 1 of" in capsys.readouterr().out

    text = progress.report(folder)
    assert "\u2713 dot_product" in text
    assert f"\u2717 {failed.value}" in text
    assert "\u00b7 similarity_matrix" in text and "\u00b7 simple_self_attention" in text
    assert f"01_dot_product: 1 of {counts['01_dot_product']} pass" in text
    assert f"02_softmax: 0 of {counts['02_softmax']} pass" in text
    total = sum(map(len, exercises().values()))
    assert f"The course: 1 of {total} exercises pass" in text

    monkeypatch.chdir(folder)                 # from the working folder itself, the same file
    progress.progress()
    assert f"\u2717 {failed.value}" in capsys.readouterr().out
    stored = json.loads((folder / progress.FILE).read_text(encoding="utf-8"))["exercises"]
    assert stored["softmax"]["unit"] == "02_softmax" and stored["softmax"]["status"] == "fail"
    assert progress.recorded_language(folder) == "en"


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


def _wrong_softmax(x, dim=-1):
    return x / x.sum(dim=dim, keepdim=True)   # no exponential: the self-check names it


def test_progress_run_where_lab_was_started_reads_the_folder_lab_works_in(tmp_path, monkeypatch, capsys):
    """An installed course: `lab` works in ./attention-course (./attention-course-zh), and
    `progress` run from the same folder reads the record there, in the language the self-checks
    spoke; with no record, it says where it looked."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    installed = tmp_path / "installed"        # the package's content, as a wheel carries it
    installed.mkdir()
    for folder in content.EDITIONS.values():
        (installed / folder).symlink_to(ROOT / folder)
    monkeypatch.setattr(content, "BUNDLED", installed)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    assert cli.main(["copy"]) == 0 and cli.main(["copy", "zh"]) == 0
    english, chinese = home / "attention-course", home / "attention-course-zh"
    capsys.readouterr()

    assert cli.main(["progress"]) == 1
    said = capsys.readouterr().out
    assert "No record of progress here" in said and progress.FILE in said
    assert all(str(folder) in said for folder in (home, english, chinese)), said
    assert cli.main(["progress", "zh"]) == 1 and "这里没有进度记录" in capsys.readouterr().out

    monkeypatch.chdir(english / "01_dot_product")
    check("dot_product", {"dot_product": lambda a, b: (a * b).sum()})
    monkeypatch.chdir(chinese / "02_softmax")
    with i18n.language("zh"), pytest.raises(CheckFailed) as failed:
        check("softmax", {"softmax": _wrong_softmax})
    capsys.readouterr()

    monkeypatch.chdir(home)
    assert cli.main(["progress"]) == 0
    both = capsys.readouterr().out
    first, second = both.split("\n\n")
    assert f"Progress kept in {english / progress.FILE}:" in first and "\u2713 dot_product" in first
    assert "The course: 1 of" in first
    assert f"{chinese / progress.FILE}" in second and f"\u2717 {failed.value}" in second
    assert "整个课程" in second                # the record's language: the Chinese edition's
    assert cli.main(["progress", "zh"]) == 0
    assert capsys.readouterr().out == second

    monkeypatch.chdir(english / "02_softmax")  # from inside the working folder: its record alone
    assert cli.main(["progress"]) == 0
    assert capsys.readouterr().out == first + "\n"


def test_in_a_clone_progress_from_the_repository_root_reads_its_notebooks_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    clone = tmp_path / "clone"                 # a clone: no content bundled into the package
    (clone / "notebooks" / "01_dot_product").mkdir(parents=True)
    monkeypatch.setattr(content, "REPOSITORY", clone)
    monkeypatch.setattr(content, "BUNDLED", clone / "attention_course" / "content")
    assert workspace.default_folder("en") == clone / "notebooks"
    monkeypatch.chdir(clone / "notebooks" / "01_dot_product")
    check("dot_product", {"dot_product": lambda a, b: (a * b).sum()})
    capsys.readouterr()

    monkeypatch.chdir(clone)
    assert cli.main(["progress"]) == 0
    out = capsys.readouterr().out
    assert f"Progress kept in {clone / 'notebooks' / progress.FILE}:" in out and "\u2713 dot_product" in out
    assert cli.main(["progress", "--dir", str(tmp_path)]) == 1   # a folder named is the only one read
    assert f"none is in {tmp_path}. " in capsys.readouterr().out
