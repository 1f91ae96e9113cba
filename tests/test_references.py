"""The fast tier proves every reference answer: each unit's reference solution, in each edition,
passes its own hidden checks and self-checks, in this process. A wrong reference answer fails
here with its exercise's name (the catalogue's tests swap it out; the fixtures are made from it)."""
from __future__ import annotations

import pytest
from catalogue.verdicts import EDITIONS, hidden_messages, selfcheck_messages
from reference import reference_namespace, unit_exercises

from grader import course


def reference_failures(unit: str, namespace: dict) -> list[str]:
    """What each exercise's hidden checks and both editions' self-checks say of `namespace`: one
    line per failing exercise, its name first."""
    failures = []
    for exercise in unit_exercises(unit):
        answer = exercise.answer_ids[0]
        said = hidden_messages(unit, answer, namespace)
        for edition in EDITIONS:
            said += selfcheck_messages(unit, answer, namespace, edition)
        if said:
            failures.append(f"{exercise.grade_id}: {said[0][:300]}")
    return failures


@pytest.mark.parametrize("unit", [pytest.param(u, marks=pytest.mark.xdist_group(f"catalogue-{u}"))
                                  for u in course.units()])
def test_the_reference_answers_pass_their_own_checks(unit, capsys):
    assert reference_failures(unit, reference_namespace(unit)) == []


def test_a_wrong_reference_answer_is_named(capsys):
    """The newcomer's trial: a reference switched to torch.log2 passed the whole fast tier."""
    unit = "02_softmax"
    namespace = dict(reference_namespace(unit))
    exec("import torch\ndef softmax(x, dim=-1):\n    e = torch.exp2(x - x.amax(dim=dim, keepdim=True))\n"
         "    return e / e.sum(dim=dim, keepdim=True)\n", namespace)
    failures = reference_failures(unit, namespace)
    assert failures and failures[0].startswith("u02_softmax_check: softmax:"), failures
