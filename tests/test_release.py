"""notebooks/ and the self-check fixtures are generated from solutions/ and kept in sync."""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import operator
import re
import struct

import pytest

from grader import course, notebook
from grader.authoring.release import (
    FIXTURE_STEPS,
    call_problems,
    install_cell_problems,
    install_from_problem,
    release,
    same_fixture,
)
from grader.checks.compare import EPS32
from grader.fixtures import FOLDER as FIXTURES


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
    from grader.checks.spec import collect

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
            name = name.split(" #")[0]  # "name #2": a further check of the same name, in the same unit
            if seen.get(name) == path.name:
                continue
            assert name not in seen, f"{name!r} has self-checks in both {seen[name]} and {path.name}"
            seen[name] = path.name


# --- fixtures are compared as data, floats within float32 rounding (see release.same_fixture) ---

def _fixture(unit: str) -> dict:
    """A shipped fixture, parsed: the tests edit copies of it in memory, never the file."""
    return json.loads((FIXTURES / f"{unit}.json").read_text(encoding="utf-8"))


def _float32_steps(x: float, steps: int) -> float:
    """`x` as float32, moved `steps` float32 steps away from zero (what another CPU's rounding does)."""
    bits = struct.unpack("<I", struct.pack("<f", abs(x)))[0]
    return math.copysign(struct.unpack("<f", struct.pack("<I", max(0, bits + steps)))[0], x)


def _map_floats(node, change):
    """A copy of a fixture with `change` applied to every float in it."""
    if isinstance(node, float):
        return change(node)
    if isinstance(node, dict):
        return {k: _map_floats(v, change) for k, v in node.items()}
    return [_map_floats(v, change) for v in node] if isinstance(node, list) else node


def _paths(node, found, path=()):
    """The paths to the parts of a fixture where `found` holds, in order."""
    if found(node):
        yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield from _paths(value, found, (*path, key))


def _float_paths(node):
    return _paths(node, lambda v: isinstance(v, float))


def _edited(fixture: dict, path: tuple, change) -> dict:
    fixture = copy.deepcopy(fixture)
    parent = functools.reduce(operator.getitem, path[:-1], fixture)
    parent[path[-1]] = change(parent[path[-1]])
    return fixture


@pytest.mark.parametrize("unit", course.units())
def test_a_fixture_rounded_differently_in_the_last_bits_is_in_sync(unit):
    """Another CPU rounds float32 results differently: the fixture is still in sync. Up to 94
    steps were measured with PyTorch's unvectorised kernels (see release.FIXTURE_STEPS)."""
    stored = _fixture(unit)
    for steps in (1, -1, 100):
        moved = _map_floats(stored, lambda v, steps=steps: _float32_steps(v, steps) if math.isfinite(v) else v)
        assert moved != stored and same_fixture(stored, moved) is None


@pytest.mark.parametrize("unit", course.units())
def test_a_float_changed_for_real_is_reported_with_where(unit):
    stored = _fixture(unit)
    paths = list(_float_paths(stored))
    for path in (paths[0], paths[len(paths) // 2], paths[-1]):
        changed = _edited(stored, path, lambda v: v + 1e-3 * max(1.0, abs(v)))
        difference = same_fixture(stored, changed)
        assert difference and difference.startswith(f"{path[0]} › ") and " vs " in difference, difference


@pytest.mark.parametrize("unit", course.units())
def test_a_changed_message_label_shape_dtype_or_case_is_reported(unit):
    stored = _fixture(unit)
    name, entry = next((n, e) for n, e in stored.items() if e["cases"][0]["mistakes"])
    case = ("cases", 0)

    def edit(path: tuple, change) -> str | None:
        return same_fixture(stored, _edited(stored, (name, *path), change))

    message = entry["cases"][0]["mistakes"][0][0]
    renamed = edit((*case, "mistakes"), lambda m: [[k + "!" if k == message else k, v] for k, v in m])
    assert renamed and "mistakes[0][0]" in renamed and " vs " in renamed, renamed
    assert "label" in edit((*case, "label"), lambda label: label + " ")
    assert "call_source" in edit(("call_source",), lambda source: source.replace("(", "( ", 1))
    assert "judge › kind" in edit(("judge",), lambda judge: {**judge, "kind": "Other"})
    assert "judge › steps" in same_fixture({"judge": {"kind": "Tensor", "steps": 256}},
                                           {"judge": {"kind": "Tensor", "steps": 4096}})
    assert "3 vs 4 items" in same_fixture([1, 2, 3], [1, 2, 3, 4])
    assert "items" in edit(("cases",), lambda cases: cases + cases[:1])
    tensor = next(_paths(stored, lambda v: isinstance(v, dict) and "__tensor__" in v))
    assert "shape" in same_fixture(stored, _edited(stored, (*tensor, "shape"), lambda shape: [*shape, 1]))
    assert "dtype" in same_fixture(stored, _edited(stored, (*tensor, "dtype"), lambda dtype: "float16"))


def test_numbers_compare_within_float32_and_ints_equal_floats_only_in_tensors():
    nan, inf = float("nan"), float("inf")
    tensor = {"__tensor__": [1.0, nan, inf, -inf, 3], "dtype": "float32", "shape": [5]}
    assert same_fixture(tensor, {**tensor, "__tensor__": [1, nan, inf, -inf, 3.0]}) is None
    assert same_fixture(tensor, {**tensor, "__tensor__": [1.0, 0.0, inf, -inf, 3]})  # NaN is not a number
    assert same_fixture(tensor, {**tensor, "__tensor__": [1.0, nan, -inf, -inf, 3]})  # nor -inf inf
    assert same_fixture({"__tensor__": [10 ** 6]}, {"__tensor__": [10 ** 6 + 1]})  # int tensors: exact
    assert same_fixture({"want": 1.0}, {"want": 1}) == "want: float 1.0 vs int 1"  # a Python result: its type
    assert same_fixture({"want": True}, {"want": 1})
    tol = FIXTURE_STEPS * EPS32
    assert same_fixture(0.5, 0.5 + tol * 0.9) is None and same_fixture(0.5, 0.5 + tol * 1.1)
    assert same_fixture(1e4, 1e4 * (1 + tol * 0.9)) is None and same_fixture(1e4, 1e4 * (1 + tol * 1.1))


def test_release_check_reports_the_unit_and_its_first_real_difference(monkeypatch, tmp_path):
    """End to end: the stored 01 fixture rounded differently is in sync; 02 changed for real is not."""
    units = course.units()[:2]
    for unit, change in zip(units, (lambda v: _float32_steps(v, 1), lambda v: v * 1.001 + 1e-3)):
        stored = _fixture(unit)
        path = next(p for p in _float_paths(stored) if "want" in p)
        (tmp_path / f"{unit}.json").write_text(json.dumps(_edited(stored, path, change)))  # not the shipped text
    monkeypatch.setitem(course.EDITIONS, "en", dataclasses.replace(course.EDITIONS["en"], fixtures=tmp_path))
    [problem] = release(check=True, units=units)
    assert problem.startswith(f"{tmp_path / units[1]}.json is out of date: ") and " › want" in problem, problem


def test_release_rejects_a_call_that_reads_what_the_learners_process_lacks():
    unit = "01_dot_product"
    source_nb = notebook.read(course.source_notebook(unit))
    assert call_problems(unit, source_nb) == []
    cell = next(c for c in source_nb.cells if notebook.grade_id(c) == "u01_dot_product_check")
    cell.source = cell.source.replace("def call_dot_product(a, b):\n",
                                      "SCALE = 1.0\n\n\ndef call_dot_product(a, b):\n    a = a * SCALE\n", 1)
    problems = call_problems(unit, source_nb)
    assert len(problems) == 1 and "u01_dot_product_check" in problems[0] and "'SCALE'" in problems[0], problems


COURSE_WHEEL_URL = "https://example.org/dist/attention_course-0.1.0-py3-none-any.whl#sha256=" + "0123456789abcdef" * 4


@pytest.mark.parametrize("install_from", ["", COURSE_WHEEL_URL])
def test_install_from_is_nothing_or_the_courses_wheel_pinned_by_its_sha256(install_from):
    assert install_from_problem(install_from) is None


@pytest.mark.parametrize("install_from", [
    "attention-course",                                       # a name on PyPI: whoever registers it
    COURSE_WHEEL_URL.split("#")[0],                           # the wheel, unpinned
    COURSE_WHEEL_URL.replace("https://", "http://"),          # pinned, but over plain HTTP
    COURSE_WHEEL_URL.replace("#sha256=", "#md5="),
    COURSE_WHEEL_URL[:-1],                                    # 63 hex digits
    COURSE_WHEEL_URL.upper().replace("HTTPS://", "https://"),  # pip compares the digest as written: lower case
    COURSE_WHEEL_URL.replace("attention_course-", "other_package-"),
    "https://example.org/attention_course-0.1.0.tar.gz#sha256=" + "0" * 64,
])
def test_release_refuses_an_install_from_that_is_not_the_courses_pinned_wheel(install_from, monkeypatch, tmp_path):
    """A hosted notebook runs whatever its first cell installs: release writes nothing else into it,
    and says what to set instead."""
    import attention_course

    problem = install_from_problem(install_from)
    assert problem and "https" in problem and "sha256" in problem and repr(install_from) in problem
    source = tmp_path / "unit.py"
    source.write_text(course.source_text("01_dot_product").read_text(encoding="utf-8"), encoding="utf-8")
    before = source.read_text(encoding="utf-8")
    monkeypatch.setattr(attention_course, "INSTALL_FROM", install_from)
    assert install_cell_problems(source, check=False) == [problem]
    assert source.read_text(encoding="utf-8") == before


def test_release_writes_the_pinned_wheel_into_the_install_cell(monkeypatch, tmp_path):
    import attention_course

    source = tmp_path / "unit.py"
    source.write_text(course.source_text("01_dot_product").read_text(encoding="utf-8"), encoding="utf-8")
    assert install_cell_problems(source, check=True) == []
    monkeypatch.setattr(attention_course, "INSTALL_FROM", COURSE_WHEEL_URL)
    [problem] = install_cell_problems(source, check=True)
    assert "run `python -m grader release`" in problem
    assert install_cell_problems(source, check=False) == []
    assert f'\nCOURSE_WHEEL = "{COURSE_WHEEL_URL}"  # written by' in source.read_text(encoding="utf-8")
    assert install_cell_problems(source, check=True) == []
