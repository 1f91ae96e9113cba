"""notebooks/ and the self-check fixtures are generated from solutions/ and kept in sync."""
from __future__ import annotations

import copy
import json
import re
import struct

import pytest

from grader import course, notebook
from grader.release import release


def test_student_notebooks_and_fixtures_are_in_sync_with_the_solutions():
    assert release(check=True) == []


@pytest.mark.parametrize("unit", course.units())
def test_student_notebook_has_no_solutions_or_hidden_tests(unit):
    text = course.release_notebook(unit).read_text(encoding="utf-8")
    assert not re.search(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)", text)
    nb = notebook.read(course.release_notebook(unit))
    answers = [c for c in nb.cells if notebook.is_answer(c)]
    assert answers and all("raise NotImplementedError()" in c.source for c in answers)


@pytest.mark.parametrize("unit", course.units())
def test_every_exercise_has_points_a_self_check_and_hidden_specs(unit):
    from grader.spec import collect

    exercises = notebook.exercises(notebook.read(course.source_notebook(unit)))
    assert exercises
    for exercise in exercises:
        assert exercise.points > 0, exercise.grade_id
        assert exercise.answer_ids, f"{exercise.grade_id} grades no answer cell"
        assert "check(" in exercise.visible, f"{exercise.grade_id} has no self-check"
        assert collect(exercise.hidden), f"{exercise.grade_id} has no hidden specification"


def test_fixtures_hold_no_code_but_the_calls():
    """The learner-importable fixtures carry expected values and `call` functions only."""
    for path in (course.ROOT / "grader" / "fixtures").glob("*.json"):
        for name, entry in json.loads(path.read_text()).items():
            defs = re.findall(r"^def (\w+)", entry["call_source"], re.M)
            assert defs == [entry["call_name"]], f"{path.name}:{name} ships more than its call: {defs}"


def test_self_check_names_are_unique_across_units():
    """check("name") looks a name up in every unit's fixtures: two units must not share one."""
    seen: dict[str, str] = {}
    for path in sorted((course.ROOT / "grader" / "fixtures").glob("*.json")):
        for name in json.loads(path.read_text()):
            assert name not in seen, f"{name!r} has self-checks in both {seen[name]} and {path.name}"
            seen[name] = path.name


def _fixture(unit: str = "01_dot_product") -> dict:
    return json.loads((course.ROOT / "grader" / "fixtures" / f"{unit}.json").read_text())


def _first_float(node):
    """The path to the first float in a fixture, for editing it."""
    if isinstance(node, float):
        return []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        path = _first_float(value)
        if path is not None:
            return [key, *path]
    return None


def _edit(fixture: dict, change) -> dict:
    fixture = copy.deepcopy(fixture)
    path = _first_float(fixture)
    parent = fixture
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = change(parent[path[-1]])
    return fixture


def test_fixtures_compare_within_float32_not_as_text():
    """Another CPU may round the last bit differently: still in sync. A real change is not."""
    from grader.release import same_fixture

    stored = _fixture()
    last_bit = _edit(stored, lambda v: struct.unpack("f", struct.pack("f", v))[0] * (1 + 2 ** -23))
    assert last_bit != stored and same_fixture(stored, last_bit) is None
    assert "vs" in same_fixture(stored, _edit(stored, lambda v: v * 1.001))
    renamed = copy.deepcopy(stored)
    name = next(iter(renamed))
    case = renamed[name]["cases"][0]
    case["mistakes"] = {k + "!": v for k, v in case["mistakes"].items()}
    assert same_fixture(stored, renamed)
    reshaped = copy.deepcopy(stored)
    reshaped[name]["cases"][0]["want"]["shape"] = [1]
    assert "shape" in same_fixture(stored, reshaped)
    extra = copy.deepcopy(stored)
    extra[name]["cases"].append(extra[name]["cases"][0])
    assert "items" in same_fixture(stored, extra)
