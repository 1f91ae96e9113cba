"""What the hidden checks and the self-checks say about a catalogued entry, in either edition.

Used by tests/test_catalogue.py (each entry) and tests/catalogue/figures.py (the totals).
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from dataclasses import dataclass
from typing import Literal

from reference import answers, exercise_for, reference_namespace

import catalogue
from grader.checks.i18n import language
from grader.checks.selfcheck import check, entries_for
from grader.checks.spec import CheckFailed, collect, evaluate, learner_side_source, load_call

EDITIONS = ("en", "zh")
Outcome = Literal["tick", "named", "values differ", "other"]
VALUES_DIFFER = "values differ from the expected ones"


def entries() -> list[tuple[str, catalogue.Mistake | catalogue.Alternative]]:
    """(unit, entry) for every entry of every unit's module (u01.py, ...), in the order written."""
    found = []
    for info in sorted(pkgutil.iter_modules(catalogue.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"catalogue.{info.name}")
        if hasattr(module, "UNIT"):
            found += [(module.UNIT, e) for e in module.MISTAKES + module.ALTERNATIVES]
    return found


def namespace_with(unit: str, code: str, answer: str = "", graded_at: str = "") -> dict:
    """The reference namespace with `code` in place of an answer cell. With `graded_at`, the
    reference answers from there back to `answer` are defined again on top, so that they use
    the replaced code (a function keeps the namespace it was defined in)."""
    namespace = dict(reference_namespace(unit))
    exec(compile(code, "<catalogue entry>", "exec"), namespace)
    if graded_at:
        ids = list(answers(unit))
        for later in ids[ids.index(answer) + 1:ids.index(graded_at) + 1]:
            exec(compile(answers(unit)[later], "<reference answer>", "exec"), namespace)
    return namespace


def hidden_messages(unit: str, answer: str, namespace: dict) -> list[str]:
    """The hidden checks' failure messages for the exercise that grades `answer`."""
    exercise = exercise_for(unit, answer)
    messages = []
    for spec in collect(exercise.hidden):
        call = load_call(learner_side_source(exercise.hidden, spec), spec.call.__name__, namespace)  # as in grading
        message = evaluate(spec, call)
        if message:
            messages.append(message)
    return messages


def selfcheck_messages(unit: str, answer: str, namespace: dict, edition: str = "en") -> list[str]:
    """What the self-checks of the exercise that grades `answer` say, in `edition`'s language
    (its stored examples and messages): one message per failing check, none for ticks."""
    exercise = exercise_for(unit, answer)
    messages = []
    with language(edition):
        for name in dict.fromkeys(spec.name for spec in collect(exercise.hidden)):
            if entries_for(name):
                try:
                    check(name, namespace)
                except CheckFailed as exc:
                    messages.append(str(exc))
    return messages


@functools.cache
def _translations(unit: str) -> tuple[tuple[re.Pattern, re.Pattern, str], ...]:
    """(English pattern, its translation's pattern, the English's longest fixed piece) for every
    translated text of the unit and of the grader; a text's `{fields}` match anything."""
    from grader.authoring import translation

    texts = {**_grader_translations(), **translation.table(translation.load("zh", unit))}
    return tuple((_pattern(english), _pattern(translated), max(_FIELD.split(english), key=len))
                 for english, translated in texts.items() if len(max(_FIELD.split(english), key=len)) > 3)


@functools.cache
def _grader_translations() -> dict[str, str]:
    from grader.authoring import translation

    return translation.table(translation.load("zh", translation.GRADER))


def _translation_of(english: str) -> str:
    return _grader_translations()[english]


_FIELD = re.compile(r"\{[^{}]*\}")


def _pattern(text: str) -> re.Pattern:
    fixed = _FIELD.split(text)
    return re.compile("(.*?)".join(re.escape(piece) for piece in fixed), re.S)


def _fixed_spans(match: re.Match) -> list[tuple[int, int]]:
    """The spans of a match that its pattern's fixed text matched (not its fields)."""
    edges = [match.start(), *(i for g in range(1, len(match.groups()) + 1) for i in match.span(g)), match.end()]
    return [(edges[k], edges[k + 1]) for k in range(0, len(edges), 2)]


def named_in_chinese(unit: str, fragment: str, english: str, chinese: str) -> bool:
    """Whether `chinese` names what `english` names with `fragment`: it holds the fragment itself
    (code, PyTorch's own words), or the translation of a text whose fixed words in `english` are
    part of the fragment."""
    if fragment in chinese:
        return True
    at = english.find(fragment)
    if at < 0:
        return False
    for source, target, longest in _translations(unit):
        if longest not in english:
            continue
        for match in source.finditer(english):
            if any(start < at + len(fragment) and at < end for start, end in _fixed_spans(match) if end > start):
                if target.search(chinese):
                    return True
    return False


@dataclass(frozen=True)
class SelfCheck:
    """One catalogued mistake's self-check in one edition."""
    outcome: Outcome
    messages: list[str]


@functools.cache
def _selfcheck_of(unit: str, mistake: catalogue.Mistake, edition: str) -> list[str]:
    """What the self-check says of a catalogued mistake in one edition; kept, as the Chinese
    edition's verdict reads the English one too."""
    namespace = namespace_with(unit, mistake.code, mistake.answer, mistake.graded_at)
    return selfcheck_messages(unit, mistake.graded_at or mistake.answer, namespace, edition)


def selfcheck_outcome(unit: str, mistake: catalogue.Mistake, edition: str) -> SelfCheck:
    messages = list(_selfcheck_of(unit, mistake, edition))
    if not messages:
        return SelfCheck("tick", messages)
    if edition == "en":
        if any(mistake.message in m for m in messages):
            return SelfCheck("named", messages)
        generic = [VALUES_DIFFER]
    else:
        english = _selfcheck_of(unit, mistake, "en")
        if any(named_in_chinese(unit, mistake.message, e, z) for e in english if mistake.message in e
               for z in messages):
            return SelfCheck("named", messages)
        generic = [_FIELD.split(_translation_of(VALUES_DIFFER + "{where}"))[0]]
    if all(any(piece in m for piece in generic) for m in messages):
        return SelfCheck("values differ", messages)
    return SelfCheck("other", messages)


def catalogued_message(unit: str, name: str) -> str:
    """The whole English message that the unit's source gives the catalogued mistake `name`: the
    one message of the unit's hidden tests that holds the catalogue's piece of it and that the
    mistake's self-check shows. Tests show a message through this, never through a copy."""
    from grader import course, notebook
    from grader.authoring import translation

    mistake = next(e for u, e in entries() if u == unit and e.name == name and isinstance(e, catalogue.Mistake))
    shown = " ".join(selfcheck_outcome(unit, mistake, "en").messages)
    found = [t.english for t in translation.texts(notebook.read(course.source_notebook(unit)))
             if t.kind == "message" and mistake.message in t.english and t.english in shown]
    assert len(found) == 1, f"{unit}: the catalogued mistake {name!r} should show one message of the unit, not {found}"
    return found[0]

