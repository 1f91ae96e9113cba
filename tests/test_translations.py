"""The Chinese edition: made from the one English source, complete, consistent in its terms,
graded the same way, and stale the moment the English changes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from catalogue.verdicts import catalogued_message

from grader import course, notebook
from grader.authoring import translation
from grader.authoring.release import same_fixture
from grader.checks import i18n

LANGUAGE = "zh"


def catalogue(unit: str):
    po, stale = translation.update(LANGUAGE, unit, notebook.read(course.source_notebook(unit)), write=False)
    return po, stale


@pytest.mark.parametrize("unit", course.units())
def test_every_text_of_a_unit_is_translated_and_keeps_its_code(unit):
    po, stale = catalogue(unit)
    assert not stale, f"translations/zh/{unit}.po does not match the English: run python -m grader release"
    assert translation.problems(po, LANGUAGE, unit) == []
    translated = translation.edition(notebook.read(course.source_notebook(unit)), LANGUAGE, translation.table(po))
    assert translation.code_problems(translated, LANGUAGE, unit) == []


def test_each_glossary_term_is_translated_the_same_way_everywhere():
    terms = translation.glossary(LANGUAGE)
    forms = [form.lower() for term in terms for form in term.english]
    assert len(forms) == len(set(forms)), "a term is listed twice in the glossary"
    problems = []
    for unit in [*course.units(), translation.GRADER]:
        po = translation.load(LANGUAGE, unit)
        problems += translation.glossary_problems(po, LANGUAGE, unit, terms)
    assert problems == []


def test_the_glossary_check_catches_a_term_translated_another_way():
    import polib

    po = polib.POFile()
    po.append(polib.POEntry(msgid="the attention weights of each query", msgstr="每个询问的关注权重"))
    found = translation.glossary_problems(po, LANGUAGE, "demo", translation.glossary(LANGUAGE))
    assert any("'注意力'" in p for p in found) and any("'查询'" in p for p in found)
    po[0].msgstr = "每个查询的注意力权重"
    assert translation.glossary_problems(po, LANGUAGE, "demo", translation.glossary(LANGUAGE)) == []
    # a paper's title stays in English inside 《》, but only there
    po.append(polib.POEntry(msgid='the table of "Attention is all you need"',
                            msgstr="论文《Attention Is All You Need》中的表"))
    assert translation.glossary_problems(po, LANGUAGE, "demo", translation.glossary(LANGUAGE)) == []
    po[1].msgstr = "论文 Attention Is All You Need 中的表"
    assert translation.glossary_problems(po, LANGUAGE, "demo", translation.glossary(LANGUAGE)) != []


def _numbers_only(value):
    """A fixture with its strings (labels, messages, the calls' source) taken out."""
    if isinstance(value, dict):
        return {k: _numbers_only(v) for k, v in value.items() if k not in ("label", "call_source")}
    if isinstance(value, list):
        return [_numbers_only(v) for v in value if not isinstance(v, str)]
    return value


@pytest.mark.parametrize("unit", course.units())
def test_the_editions_check_the_same_values(unit):
    """Grading is blind to the language: the same checks, cases, expected values and mistakes'
    values; only labels and messages differ."""
    english = json.loads((course.EDITIONS["en"].fixtures / f"{unit}.json").read_text(encoding="utf-8"))
    chinese = json.loads((course.EDITIONS[LANGUAGE].fixtures / f"{unit}.json").read_text(encoding="utf-8"))
    assert same_fixture(_numbers_only(english), _numbers_only(chinese)) is None
    exercises = {e.grade_id: e.points for e in notebook.exercises(notebook.read(course.source_notebook(unit)))}
    translated = notebook.exercises(notebook.read(course.source_notebook(unit, LANGUAGE)))
    assert {e.grade_id: e.points for e in translated} == exercises


def test_the_grader_speaks_the_language_asked_for(monkeypatch):
    import torch

    from grader.checks.compare import Tensor

    monkeypatch.delenv("COURSE_LANG", raising=False)
    wrong_shape = Tensor()(torch.zeros(2, 3), torch.zeros(3, 2), [])
    assert wrong_shape == "expected shape (3, 2), got (2, 3) — the last two dimensions are swapped"
    with i18n.language(LANGUAGE):
        assert (Tensor()(torch.zeros(2, 3), torch.zeros(3, 2), [])
                == "形状应为 (3, 2)，得到的是 (2, 3) —— 最后两个维度对调了")
    monkeypatch.setenv("COURSE_LANG", "zh_CN")
    assert i18n.current() == LANGUAGE


def test_a_chinese_self_check_names_the_mistake_in_chinese(monkeypatch):
    from grader.checks.selfcheck import check
    from grader.checks.spec import CheckFailed

    monkeypatch.setenv("COURSE_LANG", LANGUAGE)

    def dot_product(a, b):
        return (a * b).sum() / (a.norm() * b.norm())

    with pytest.raises(CheckFailed) as failed:
        check("dot_product", {"dot_product": dot_product})
    table = translation.table(translation.load(LANGUAGE, "01_dot_product"))
    message = catalogued_message("01_dot_product", "dot product normalised into a cosine")
    assert str(failed.value) == f"dot_product：{table[message]}（例子：{table['Your · journey']}）"


def test_a_chinese_self_check_says_where_an_error_was_raised_and_what_is_not_written_in_chinese(
        monkeypatch, tmp_path):
    """The location of an error is worded in Chinese (no English "in dot_product" inside it, as
    the f-string once left); code not written yet gets no case, and an exercise that uses one
    not written yet names that one."""
    from grader.checks.selfcheck import check
    from grader.checks.spec import CheckFailed

    monkeypatch.setenv("COURSE_LANG", LANGUAGE)
    monkeypatch.chdir(tmp_path)   # where a self-check may keep the learner's progress
    cell = ("import torch\n\ndef dot_product(a, b):\n    return (a * b).sum(dim=1)\n\n"
            "def attention_scores_for(query, inputs):\n"
            "    return torch.stack([dot_product(query, x) for x in inputs])\n")
    scope: dict = {}
    exec(compile(cell, "/tmp/ipykernel_4242/1234.py", "exec"), scope)   # as ipykernel compiles a cell
    with pytest.raises(CheckFailed) as failed:
        check("dot_product", scope)
    table = translation.table(translation.load(LANGUAGE, "01_dot_product"))
    shown = str(failed.value)
    assert shown.startswith("dot_product：它在 dot_product 中抛出了 IndexError（位于其所在单元格的第 4 行）："
                            "Dimension out of range"), shown
    assert shown.endswith(f"（例子：{table['Your · journey']}）") and "in dot_product" not in shown, shown

    stub = "def dot_product(a, b):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"
    exec(compile(stub, "/tmp/ipykernel_4242/5678.py", "exec"), scope)
    with pytest.raises(CheckFailed) as failed:
        check("dot_product", scope)
    assert str(failed.value) == ("dot_product：还没有写：把 dot_product 中的 `raise NotImplementedError()` "
                                 "换成你的代码，然后运行那个单元格（Shift+Enter）")
    with pytest.raises(CheckFailed) as failed:
        check("attention_scores_for", scope)
    assert str(failed.value) == ("attention_scores_for：前面的练习 `dot_product` 还没有写（它仍在抛出 "
                                 "NotImplementedError）：先写好它，并运行它所在的单元格")


def test_a_chinese_label_is_drawn_with_chinese_glyphs(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if i18n.cjk_font() is None:
        pytest.skip("no font with Chinese glyphs: sudo apt-get install fonts-noto-cjk")
    import torch

    monkeypatch.setenv("COURSE_LANG", LANGUAGE)   # what use_language sets, undone after the test
    saved = dict(matplotlib.rcParams)
    # UPDATE_SCREENSHOTS=1 keeps the picture in docs/, as the browser test does its own.
    target = (course.ROOT / "docs" / "chinese-plot.png" if os.environ.get("UPDATE_SCREENSHOTS")
              else tmp_path / "plot.png")
    try:
        i18n.use_language(LANGUAGE)
        scores = torch.tensor([[10.0, 8, 5], [7, 12, 9], [6, 8, 15]])   # unit 05's I / love / coding
        blocked = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
        weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
        fig, ax = plt.subplots(figsize=(5, 4))
        fig.colorbar(ax.imshow(weights.numpy(), cmap="viridis"))
        ax.set_xticks(range(3), ["I", "love", "coding"])
        ax.set_yticks(range(3), ["I", "love", "coding"])
        ax.set(title="因果注意力权重（每行之和为 1）", xlabel="键 (key)", ylabel="查询 (query)")
        for (i, j), w in zip(torch.cartesian_prod(torch.arange(3), torch.arange(3)).tolist(), weights.flatten()):
            ax.text(j, i, f"{w:.2f}", ha="center", va="center", color="white")
        fig.tight_layout()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fig.savefig(target, dpi=80)
        plt.close(fig)
    finally:
        matplotlib.rcParams.update(saved)
    missing = [str(w.message) for w in caught if "missing from" in str(w.message)]
    assert missing == [], missing


def run(copy: Path, *args: str, ok: bool = True) -> tuple[int, str, str]:
    """A command run in the copy of the course: (exit status, stdout, stderr)."""
    out = subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True, timeout=600)
    assert (out.returncode == 0) == ok, out.stdout[-3000:] + out.stderr[-3000:]
    return out.returncode, out.stdout, out.stderr


def test_release_check_fails_when_the_english_changes_and_passes_once_the_translation_follows(tmp_path):
    """A maintainer edits one English markdown cell: `release --check` names the stale
    translation; `release` keeps the old translation as a fuzzy entry; once the translator has
    updated it, `release --check` passes."""
    unit = "01_dot_product"
    copy = tmp_path / "course"
    parts = ["grader", "lab", "tools", "nbgrader_config.py", f"solutions/{unit}", f"notebooks/{unit}",
             f"solutions-zh/{unit}", f"notebooks-zh/{unit}", "translations/zh/glossary.tsv",
             f"translations/zh/{unit}.po", "translations/zh/grader.po"]
    for part in parts:
        (copy / part).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (course.ROOT / part).is_dir() else shutil.copy)(course.ROOT / part, copy / part)
    for folder in (copy / "grader" / "fixtures", copy / "grader" / "fixtures" / "zh"):
        for path in folder.glob("*.json"):
            if path.stem not in (unit, "messages"):
                path.unlink()

    nb = notebook.read(copy / "solutions" / unit / f"{unit}.ipynb")
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## 1. Words as vectors"))
    old = cell.source
    cell.source = old.replace("we use three, so we can draw them", "we use three, so that we can draw them")
    source = copy / "solutions" / unit / f"{unit}.py"   # the unit's one source
    text = source.read_text(encoding="utf-8")
    assert text.count("we use three, so we can draw them") == 1
    source.write_text(text.replace("we use three, so we can draw them", "we use three, so that we can draw them"),
                      encoding="utf-8")
    stale = "".join(run(copy, "-m", "grader", "release", "--check", unit, ok=False)[1:])
    assert f"translations/zh/{unit}.po does not match the English" in stale
    assert "markdown at cell 3 ('## 1. Words as vectors…') is fuzzy: its English changed" in stale, stale

    fuzzy = "".join(run(copy, "-m", "grader", "release", unit, ok=False)[1:])
    assert "is fuzzy: its English changed since it was translated" in fuzzy
    json_path = tmp_path / "u01.json"
    run(copy, "tools/translations.py", "to-json", "zh", unit, str(json_path))
    entries = json.loads(json_path.read_text(encoding="utf-8"))
    entry = next(e for e in entries if e.get("fuzzy"))
    assert entry["previous"] == old and entry["english"] == cell.source
    entry["translation"] = entry["translation"].replace("这样就能把它们画出来", "这样才能把它们画出来")
    del entry["fuzzy"]
    json_path.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    run(copy, "tools/translations.py", "from-json", "zh", unit, str(json_path))
    run(copy, "-m", "grader", "release", unit)
    run(copy, "-m", "grader", "release", "--check", unit)
    zh = notebook.read(copy / "notebooks-zh" / unit / f"{unit}.ipynb")
    assert any("这样才能把它们画出来" in c.source for c in zh.cells)


def test_the_chinese_form_rules_catch_what_a_learner_saw():
    """The rules `release --check` applies to every Chinese message: each slip a learner met is
    caught (no space between scripts, ASCII punctuation, English prose), and right forms pass."""
    from grader.authoring.translation import chinese_form_problems

    assert chinese_form_problems("应为int 96，得到的是float 96.0")
    assert chinese_form_problems("缺少：scale (4,); 练习要求的是：scale (4,)")
    assert chinese_form_problems("这里不允许使用 torch.softmax：this exercise asks you to write it")
    assert chinese_form_problems("（(批, 行) 为 {where} 处不同）")
    assert chinese_form_problems("你似乎用了 √d_in（输入的宽度） or √T（词元的个数）")
    assert chinese_form_problems("应为 int 96，得到的是 float 96.0") == []
    assert chinese_form_problems("在{name}上做了归一化；应对 x_q (2, 4)、x_kv (3, 4) 用 `torch.cat`") == []
    assert chinese_form_problems("PyTorch 的报错信息：mat1 and mat2 shapes cannot be multiplied", shown=True) == []


def test_the_grader_spaces_a_value_between_chinese_and_latin():
    from grader.checks.i18n import language, say

    with language("zh"):
        assert say("expected {want}, got {got}", want="int 96", got="float 96.0") == "应为 int 96，得到的是 float 96.0"
        assert say("expected a tensor of shape {shape}, got {got}", shape="(2,)", got="形状为 (3,) 的张量") == \
            "应返回形状为 (2,) 的张量，得到的是形状为 (3,) 的张量"
    assert say("expected {want}, got {got}", want="int 96", got="float 96.0") == "expected int 96, got float 96.0"


def test_a_reworded_text_keeps_its_old_translation_as_fuzzy_or_obsolete():
    """As msgmerge does: a text reworded a little keeps its Chinese as a fuzzy entry; one reworded
    beyond recognition leaves its Chinese as an obsolete entry (#~), which the JSON for
    translators then offers beside the closest new text. Nothing translated is lost."""
    import polib

    po = polib.POFile(wrapwidth=0)
    po.append(polib.POEntry(msgid="you divided the scores by d instead of its square root", msgstr="你把分数除以了 d"))
    po.append(polib.POEntry(msgid="the mask blocks the past", msgstr="掩码屏蔽了过去"))
    found = [translation.Text("you divided the scores by d, not by its square root", "message", "u04"),
             translation.Text("the mask lets every query see the keys after it", "message", "u05")]
    merged = translation.merged(po, found, "zh", "04_scaling")
    close, far = merged.find(found[0].english), merged.find(found[1].english)
    assert close.msgstr == "你把分数除以了 d" and "fuzzy" in close.flags
    assert close.previous_msgid == "you divided the scores by d instead of its square root"
    assert far.msgstr == ""
    kept = [e for e in merged if e.obsolete]
    assert [(e.msgid, e.msgstr) for e in kept] == [("the mask blocks the past", "掩码屏蔽了过去")]
    assert "#~ msgid" in str(merged)
    offered = translation.closest_obsolete(merged, "the mask blocks the future and lets the past through")
    assert offered is not None and offered.msgstr == "掩码屏蔽了过去"
    again = translation.merged(merged, found, "zh", "04_scaling")   # a second release keeps it
    assert [e.msgid for e in again if e.obsolete] == ["the mask blocks the past"]
