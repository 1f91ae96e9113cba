"""Every catalogued mistake loses its exercise's points with its named message; every
catalogued correct alternative keeps full marks. Each entry replaces one answer cell of the
reference solution; the hidden checks run with the same verdict code the grader uses."""
from __future__ import annotations

import catalogue
import pytest
from catalogue.verdicts import EDITIONS, entries, hidden_messages, namespace_with, selfcheck_messages, selfcheck_outcome

from grader.authoring import translation
from grader.checks.spec import collect, learner_side_source, load_call

ENTRIES = entries()


def _by_unit(kind: type) -> list:
    """The entries of one kind, each marked with its unit's xdist group: a unit's entries run on one
    worker, which runs the unit's reference solution once for them (reference_namespace)."""
    return [pytest.param(unit, entry, marks=pytest.mark.xdist_group(f"catalogue-{unit}"))
            for unit, entry in ENTRIES if isinstance(entry, kind)]


@pytest.mark.parametrize("unit,entry", _by_unit(catalogue.Mistake), ids=lambda v: getattr(v, "name", v))
def test_mistake_loses_points_with_its_message(unit, entry, capsys):
    namespace = namespace_with(unit, entry.code, entry.answer, entry.graded_at)
    messages = hidden_messages(unit, entry.graded_at or entry.answer, namespace)
    assert messages, f"hidden checks accept the mistake: {entry.name}"
    assert any(entry.message in m for m in messages), f"{entry.name}: message not named; got {messages}"


@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("unit,entry", _by_unit(catalogue.Mistake), ids=lambda v: getattr(v, "name", v))
def test_the_selfcheck_names_the_mistake(unit, entry, edition, capsys):
    """A tick means the graded tests pass too: each catalogued mistake fails its exercise's
    self-check in both editions with its own message, unless its entry says why it cannot."""
    if entry.selfcheck_misses:
        pytest.skip(f"the self-check cannot show it: {entry.selfcheck_misses}")
    result = selfcheck_outcome(unit, entry, edition)
    assert result.outcome == "named", f"{entry.name} ({edition}): {result.outcome}; got {result.messages}"
    if edition == "zh":
        assert [p for m in result.messages for p in translation.chinese_form_problems(m, shown=True)] == [], \
            result.messages


@pytest.mark.parametrize("unit,entry", _by_unit(catalogue.Alternative), ids=lambda v: getattr(v, "name", v))
def test_alternative_keeps_full_marks(unit, entry, capsys):
    namespace = namespace_with(unit, entry.code)
    assert hidden_messages(unit, entry.answer, namespace) == []
    for edition in EDITIONS:
        assert selfcheck_messages(unit, entry.answer, namespace, edition) == [], edition


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
        namespace = namespace_with(unit, entry.code, entry.answer, entry.graded_at)
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
