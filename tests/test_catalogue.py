"""Every catalogued mistake loses its exercise's points with its named message; every
catalogued correct alternative keeps full marks. Each entry replaces one answer cell of the
reference solution; the hidden checks run with the same verdict code the grader uses."""
from __future__ import annotations

import importlib
import pkgutil

import pytest

import catalogue
from grader.selfcheck import check
from grader.spec import CheckFailed, collect, evaluate, learner_side_source
from reference import answers, exercise_for, reference_namespace

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
        scope = dict(namespace)
        exec(compile(learner_side_source(exercise.hidden, spec), "<check call>", "exec"), scope)  # as in grading
        message = evaluate(spec, scope[spec.call.__name__])
        if message:
            messages.append(message)
    return messages


def selfcheck_messages(unit: str, answer: str, namespace: dict) -> list[str]:
    from grader.selfcheck import entries_for

    exercise = exercise_for(unit, answer)
    messages = []
    for name in dict.fromkeys(spec.name for spec in collect(exercise.hidden)):
        if entries_for(name):
            try:
                check(name, namespace)
            except CheckFailed as exc:
                messages.append(str(exc))
    return messages


@pytest.mark.parametrize("unit,entry", [e for e in ENTRIES if isinstance(e[1], catalogue.Mistake)],
                         ids=lambda v: getattr(v, "name", v))
def test_mistake_loses_points_with_its_message(unit, entry, capsys):
    namespace = _with(unit, entry.code, entry.answer, entry.graded_at)
    graded_at = entry.graded_at or entry.answer
    messages = hidden_messages(unit, graded_at, namespace)
    assert messages, f"hidden checks accept the mistake: {entry.name}"
    assert any(entry.message in m for m in messages), f"{entry.name}: message not named; got {messages}"
    if entry.selfcheck:
        found = selfcheck_messages(unit, graded_at, namespace)
        assert any(entry.message in m for m in found), f"{entry.name}: self-check does not name it; got {found}"


@pytest.mark.parametrize("unit,entry", [e for e in ENTRIES if isinstance(e[1], catalogue.Alternative)],
                         ids=lambda v: getattr(v, "name", v))
def test_alternative_keeps_full_marks(unit, entry, capsys):
    namespace = _with(unit, entry.code)
    assert hidden_messages(unit, entry.answer, namespace) == []
    assert selfcheck_messages(unit, entry.answer, namespace) == []
