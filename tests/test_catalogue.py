"""Every catalogued mistake loses its exercise's points with its named message; every
catalogued correct alternative keeps full marks. Each entry replaces one answer cell of the
reference solution; the hidden checks run with the same verdict code the grader uses."""
from __future__ import annotations

import importlib
import pkgutil

import catalogue
import pytest
from reference import answers, exercise_for, reference_namespace

from grader.checks.selfcheck import check
from grader.checks.spec import CheckFailed, collect, evaluate, learner_side_source, load_call

ENTRIES = []
for info in pkgutil.iter_modules(catalogue.__path__):
    module = importlib.import_module(f"catalogue.{info.name}")
    ENTRIES += [(module.UNIT, e) for e in module.MISTAKES + module.ALTERNATIVES]


def _with(unit: str, code: str, answer: str = "", graded_at: str = "") -> dict:
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


def selfcheck_messages(unit: str, answer: str, namespace: dict) -> list[str]:
    from grader.checks.selfcheck import entries_for

    exercise = exercise_for(unit, answer)
    messages = []
    for name in dict.fromkeys(spec.name for spec in collect(exercise.hidden)):
        if entries_for(name):
            try:
                check(name, namespace)
            except CheckFailed as exc:
                messages.append(str(exc))
    return messages


def _by_unit(kind: type) -> list:
    """The entries of one kind, each marked with its unit's xdist group: a unit's entries run on one
    worker, which runs the unit's reference solution once for them (reference_namespace)."""
    return [pytest.param(unit, entry, marks=pytest.mark.xdist_group(f"catalogue-{unit}"))
            for unit, entry in ENTRIES if isinstance(entry, kind)]


@pytest.mark.parametrize("unit,entry", _by_unit(catalogue.Mistake), ids=lambda v: getattr(v, "name", v))
def test_mistake_loses_points_with_its_message(unit, entry, capsys):
    namespace = _with(unit, entry.code, entry.answer, entry.graded_at)
    graded_at = entry.graded_at or entry.answer
    messages = hidden_messages(unit, graded_at, namespace)
    assert messages, f"hidden checks accept the mistake: {entry.name}"
    assert any(entry.message in m for m in messages), f"{entry.name}: message not named; got {messages}"
    if entry.selfcheck:
        found = selfcheck_messages(unit, graded_at, namespace)
        assert any(entry.message in m for m in found), f"{entry.name}: self-check does not name it; got {found}"


@pytest.mark.parametrize("unit,entry", _by_unit(catalogue.Alternative), ids=lambda v: getattr(v, "name", v))
def test_alternative_keeps_full_marks(unit, entry, capsys):
    namespace = _with(unit, entry.code)
    assert hidden_messages(unit, entry.answer, namespace) == []
    assert selfcheck_messages(unit, entry.answer, namespace) == []


@pytest.mark.parametrize("unit", [pytest.param(unit, marks=pytest.mark.xdist_group(f"catalogue-{unit}"))
                                  for unit in sorted({unit for unit, _ in ENTRIES})])
def test_a_catalogued_mistake_gets_its_message_in_chinese(unit, monkeypatch):
    """The Chinese edition's hidden checks name a catalogued mistake with the translation of
    its English message (the first mistake of the unit whose message is a plain string)."""
    from grader import course, notebook
    from grader.authoring import translation
    from grader.checks.spec import call_learner, judge_all

    table = translation.table(translation.load("zh", unit))

    def named(language: str, entry) -> list[str | None]:
        exercise = next(e for e in notebook.exercises(notebook.read(course.source_notebook(unit, language)))
                        if (entry.graded_at or entry.answer) in e.answer_ids)
        namespace = _with(unit, entry.code, entry.answer, entry.graded_at)
        found = []
        for spec in collect(exercise.hidden):
            call = load_call(learner_side_source(exercise.hidden, spec), spec.call.__name__, namespace)
            cases = spec.all_cases()
            failure = judge_all(spec, cases, [call_learner(call, c) for c in cases])
            found.append(failure[1] if failure else None)
        return found

    monkeypatch.setenv("COURSE_LANG", "zh")   # the grader's own messages too
    for _, entry in (e for e in ENTRIES if e[0] == unit and isinstance(e[1], catalogue.Mistake)):
        english = [m for m in named("en", entry) if m and entry.message in m]
        if english and english[0] in table:
            assert table[english[0]] in named("zh", entry), entry.name
            return
    pytest.fail(f"{unit}: no catalogued mistake whose message is a plain string")
