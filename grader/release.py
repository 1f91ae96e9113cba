"""Make the learner's material from the instructor's: notebooks/ (via nbgrader
generate_assignment) and the self-check fixtures (the oracle run on each check's examples)."""
from __future__ import annotations

import filecmp
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from . import course, notebook
from .selfcheck import FIXTURES, encode
from .spec import collect, expected, learner_side_source


def fixtures(unit: str) -> dict[str, Any]:
    """Expected values and known-mistake values on each check's fixed examples."""
    entries: dict[str, Any] = {}
    for exercise in notebook.exercises(notebook.read(course.source_notebook(unit))):
        for spec in collect(exercise.hidden):
            examples = spec.examples()
            if not examples:
                continue
            if spec.name in entries:
                raise ValueError(f"{unit}: two checks with examples are named {spec.name!r}; give one examples only")
            cases = []
            for case in examples:
                want, mistakes = expected(spec, case)
                cases.append({"label": case.label, "args": encode(tuple(case.args)), "kwargs": encode(case.kwargs),
                              "want": encode(want), "mistakes": {k: encode(v) for k, v in mistakes.items()}})
            entries[spec.name] = {"call_name": spec.call.__name__,
                                  "call_source": learner_side_source(exercise.hidden, spec),
                                  "judge": spec.judge, "tol": spec.tol, "cases": cases}
    return entries


def _fixture_text(unit: str) -> str:
    """One line per check, so a change shows as a change of that line."""
    entries = fixtures(unit)
    lines = [f" {json.dumps(name)}: {json.dumps(entry, ensure_ascii=False)}" for name, entry in entries.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


# Stored values are float32 results computed on some CPU; another CPU may round the last bit
# differently (1.0000001192092896 here, 1.0 there). Values agree when they are within a few
# float32 steps, relative to their size; a real change of a check is far larger.
FLOAT32_STEPS = 16
EPS32 = 2.0 ** -23


def same_fixture(stored: Any, fresh: Any, where: str = "") -> str | None:
    """None when two fixtures agree: the same structure, strings, integers and booleans, and
    floats within FLOAT32_STEPS float32 steps; else where they first differ."""
    if isinstance(stored, float) or isinstance(fresh, float):
        if isinstance(stored, bool) or isinstance(fresh, bool) or not all(
                isinstance(v, (int, float)) for v in (stored, fresh)):
            return f"{where}: {stored!r} vs {fresh!r}"
        if math.isnan(stored) and math.isnan(fresh) or stored == fresh:
            return None
        if abs(stored - fresh) <= FLOAT32_STEPS * EPS32 * max(1.0, abs(fresh)):
            return None
        return f"{where}: {stored!r} vs {fresh!r}"
    if type(stored) is not type(fresh):
        return f"{where}: {type(stored).__name__} vs {type(fresh).__name__}"
    if isinstance(stored, dict):
        if list(stored) != list(fresh):
            return f"{where}: keys {sorted(set(stored) ^ set(fresh))[:3]} differ"
        return next((d for k in stored if (d := same_fixture(stored[k], fresh[k], f"{where} › {k}" if where else k))), None)
    if isinstance(stored, list):
        if len(stored) != len(fresh):
            return f"{where}: {len(stored)} vs {len(fresh)} items"
        return next((d for i, (a, b) in enumerate(zip(stored, fresh))
                     if (d := same_fixture(a, b, f"{where}[{i}]"))), None)
    return None if stored == fresh else f"{where}: {str(stored)[:60]!r} vs {str(fresh)[:60]!r}"


def release(check: bool = False, units: list[str] | None = None) -> list[str]:
    """Regenerate notebooks/ and grader/fixtures/ from solutions/, or with `check` only report
    what is out of date. Returns the problems found (empty when all is in sync)."""
    problems: list[str] = []
    units = units or course.units()
    with tempfile.TemporaryDirectory() as tmp:
        api = course.nbgrader_api(Path(tmp), release_dir=Path(tmp) / "release")
        for unit in units:
            outcome = api.generate_assignment(unit, force=True)
            if not outcome["success"]:
                problems.append(f"{unit}: nbgrader generate_assignment failed:\n{outcome['log'][-2000:]}")
                continue
            fresh, shipped = Path(tmp) / "release" / unit, course.NOTEBOOKS / unit
            text, fixture = _fixture_text(unit), FIXTURES / f"{unit}.json"
            if check:
                problems += [f"notebooks/{unit}/{name} is out of date" for name in _differences(fresh, shipped)]
                stored = json.loads(fixture.read_text(encoding="utf-8")) if fixture.exists() else None
                difference = "the file is missing" if stored is None else same_fixture(stored, json.loads(text))
                if difference:
                    problems.append(f"grader/fixtures/{unit}.json is out of date: {difference}")
            else:
                shutil.rmtree(shipped, ignore_errors=True)
                shutil.copytree(fresh, shipped)
                fixture.write_text(text, encoding="utf-8")
    if check:
        stale = {p.stem for p in FIXTURES.glob("*.json")} - set(course.units())
        problems += [f"grader/fixtures/{name}.json belongs to no unit" for name in sorted(stale)]
        extra = {p.name for p in course.NOTEBOOKS.iterdir() if p.is_dir()} - set(course.units())
        problems += [f"notebooks/{name} belongs to no unit" for name in sorted(extra)]
    return problems


def _differences(a: Path, b: Path) -> list[str]:
    """Files that differ between two folders (missing on either side included)."""
    if not b.exists():
        return ["(the whole folder)"]
    cmp = filecmp.dircmp(a, b)
    out = cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files
    for sub in cmp.common_dirs:
        out += [f"{sub}/{name}" for name in _differences(a / sub, b / sub)]
    return out
