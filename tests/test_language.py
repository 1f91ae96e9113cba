"""COURSE_LANG means one thing everywhere: one parser reads it (grader.checks.i18n), and every setting
that depends on it (the grader's messages, nbgrader's edition, the hub's menus) asks that parser."""
from __future__ import annotations

import ast

import pytest

from grader import course
from grader.checks import i18n

CHINESE = ["zh", "ZH", "zh_CN.UTF-8", "zh-Hans", " zh "]
ENGLISH = ["en", "EN", "en_US.UTF-8", "fr"]


@pytest.mark.parametrize("value", CHINESE)
def test_every_spelling_of_chinese_means_chinese(value):
    assert i18n.course_language({"COURSE_LANG": value}) == "zh"
    assert i18n.requested({"COURSE_LANG": value}) == "zh"


@pytest.mark.parametrize("value", ENGLISH)
def test_any_other_value_means_english(value):
    assert i18n.course_language({"COURSE_LANG": value}) == "en"
    assert i18n.requested({"COURSE_LANG": value}) == "en"


@pytest.mark.parametrize("environ", [{}, {"COURSE_LANG": ""}, {"COURSE_LANG": "  "}], ids=["unset", "empty", "blank"])
def test_unset_or_empty_means_english_and_asks_for_nothing(environ):
    assert i18n.course_language(environ) == "en"
    assert i18n.requested(environ) is None   # a notebook's own edition decides its messages


def test_the_process_environment_is_read_when_none_is_given(monkeypatch):
    monkeypatch.setenv("COURSE_LANG", "ZH")
    assert i18n.course_language() == "zh" and i18n.current() == "zh"
    monkeypatch.delenv("COURSE_LANG")
    assert i18n.course_language() == "en" and i18n.requested() is None


@pytest.mark.parametrize("value, folder", [("ZH", "solutions-zh"), ("zh_CN.UTF-8", "solutions-zh"),
                                           ("en", "solutions"), ("", "solutions")])
def test_nbgrader_works_on_the_edition_course_lang_names(monkeypatch, value, folder):
    monkeypatch.setenv("COURSE_LANG", value)
    assert course.config().CourseDirectory.source_directory == folder


def _reads_course_lang(node: ast.AST) -> bool:
    """`….get("COURSE_LANG"…)`, `getenv("COURSE_LANG")`, `….pop(…)` or `environ["COURSE_LANG"]` read."""
    def named(arg: ast.AST) -> bool:
        return isinstance(arg, ast.Constant) and arg.value == "COURSE_LANG"

    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        return name in ("get", "getenv", "pop") and bool(node.args) and named(node.args[0])
    return isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and named(node.slice)


def test_nothing_else_parses_course_lang():
    files = [course.ROOT / "nbgrader_config.py"]
    for folder in ("grader", "attention_course", "hub", "lab", "tools"):
        files += sorted((course.ROOT / folder).rglob("*.py"))
    readers = [str(path.relative_to(course.ROOT)) for path in files
               if "COURSE_LANG" in (text := path.read_text(encoding="utf-8"))
               and any(_reads_course_lang(node) for node in ast.walk(ast.parse(text)))]
    assert readers == ["grader/checks/i18n.py"], \
        f"read COURSE_LANG with grader.checks.i18n.course_language instead: {readers}"
