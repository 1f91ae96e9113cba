"""Grade one student notebook with the verdict decided outside the learner's process.

submission -> form checks -> run in a sandbox (learner code + `call`s only) -> verdict here.
"""
from __future__ import annotations

import copy
import functools
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import torch

from . import course, notebook, sandbox
from .spec import Spec, collect, judge_all, learner_side_source, sanitize


@functools.cache
def _source(unit: str):
    return notebook.read(course.source_notebook(unit))


@functools.cache
def _release(unit: str):
    return notebook.read(course.release_notebook(unit))


@functools.cache
def _specs(unit: str, grade_id: str) -> tuple[tuple[Spec, str], ...]:
    """The specs of one exercise with the learner-side source of each."""
    exercise = next(e for e in notebook.exercises(_source(unit)) if e.grade_id == grade_id)
    return tuple((spec, learner_side_source(exercise.hidden, spec)) for spec in collect(exercise.hidden))


def find_unit(nb, path: Path) -> str:
    """The unit a notebook belongs to: the one whose released grade ids it shares most, else
    the unit named by its file or folder."""
    ids = {notebook.grade_id(c) for c in nb.cells} - {None}
    scores = {u: len(ids & {notebook.grade_id(c) for c in _release(u).cells}) for u in course.units()}
    best = max(scores, key=scores.get, default=None)
    if best is not None and scores[best] > 0:
        return best
    for name in (path.stem, path.parent.name):
        if name in course.units():
            return name
    raise ValueError(f"cannot tell which unit {path.name} belongs to: it has none of the course's "
                     f"graded cells and is not named after a unit ({', '.join(course.units())})")


def empty_result(path: Path, unit: str | None) -> dict[str, Any]:
    result = {"notebook": str(path), "unit": unit, "score": 0.0, "max_score": 0.0,
              "exercises": [], "flags": [], "error": None}
    if unit:
        for ex in notebook.exercises(_source(unit)):
            result["exercises"].append({"grade_id": ex.grade_id, "names": _names(unit, ex.grade_id),
                                        "points": 0.0, "max_points": ex.points, "passed": False,
                                        "feedback": "not graded"})
        result["max_score"] = sum(e["max_points"] for e in result["exercises"])
    return result


def _names(unit: str, grade_id: str) -> list[str]:
    return list(dict.fromkeys(spec.name for spec, _ in _specs(unit, grade_id)))


def grade_notebook(path: Path, unit: str | None = None, cell_timeout: int = sandbox.CELL_TIMEOUT,
                   notebook_timeout: int = sandbox.NOTEBOOK_TIMEOUT) -> dict[str, Any]:
    """Grade one notebook; never raises for a bad submission (the reason goes in "error")."""
    path = Path(path)
    try:
        nb = notebook.read(path)
        unit = unit or find_unit(nb, path)
    except ValueError as exc:
        result = empty_result(path, unit)
        result["error"] = str(exc)
        return result
    result = empty_result(path, unit)
    result["flags"] = notebook.form_problems(nb, _release(unit))
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        to_run, jobs = _build(nb, unit, Path(tmp))
        outcome = sandbox.execute(to_run, Path(tmp), cell_timeout, notebook_timeout)
        if outcome.executed is None:
            result["error"] = outcome.problem or "the notebook could not be run"
            return result
        if outcome.problem:
            result["flags"].append(outcome.problem)
        for entry in result["exercises"]:
            messages = _judge(entry["grade_id"], unit, jobs, outcome)
            entry["passed"] = not messages
            entry["points"] = entry["max_points"] if entry["passed"] else 0.0
            entry["feedback"] = "passed" if entry["passed"] else messages[0]
    result["score"] = sum(e["points"] for e in result["exercises"])
    result["executed"] = outcome.executed
    return result


def _build(nb, unit: str, workdir: Path):
    """The notebook to run: the learner's cells, locked and test cells restored from the
    released version, each test cell followed by the calls of its hidden checks."""
    release = {notebook.grade_id(c): c for c in _release(unit).cells if notebook.grade_id(c)}
    tests = [e.grade_id for e in notebook.exercises(_source(unit))]
    cells, seen, jobs = [], set(), {}

    def test_cells(gid: str) -> list:
        visible = copy.deepcopy(release[gid])
        visible.metadata["grader"] = {"visible": gid}
        calls = []
        for k, (spec, source) in enumerate(_specs(unit, gid)):
            inputs, outputs = workdir / f"{gid}-{k}.in.pt", workdir / f"{gid}-{k}.out.pt"
            cases = spec.all_cases()
            torch.save([(c.label, tuple(c.args), dict(c.kwargs)) for c in cases], inputs)
            jobs[(gid, k)] = (spec, cases, outputs)
            calls.append(f"_grader_harness.run_calls({source!r}, {spec.call.__name__!r}, "
                         f"{inputs.name!r}, {outputs.name!r}, globals())")
        harness = nbformat.v4.new_code_cell("import grader.harness as _grader_harness\n" + "\n".join(calls))
        harness.metadata["grader"] = {"calls": gid}
        return [visible, harness]

    for cell in nb.cells:
        gid = notebook.grade_id(cell)
        if gid is not None:
            if gid in seen:
                continue  # a copied cell: the first one counts
            seen.add(gid)
        ref = release.get(gid)
        if gid in tests:
            cells += test_cells(gid)
        elif ref is not None and notebook.is_locked(ref):
            cells.append(copy.deepcopy(ref))
        elif cell.cell_type == "code":
            cells.append(nbformat.v4.new_code_cell(cell.source))
    for gid in tests:
        if gid not in seen:
            cells += test_cells(gid)
    run = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                        "language": "python"}})
    return run, jobs


def _judge(gid: str, unit: str, jobs, outcome) -> list[str]:
    """The failure messages of one exercise, decided here from plain data."""
    messages = []
    for k, _ in enumerate(_specs(unit, gid)):
        spec, cases, outputs = jobs[(gid, k)]
        try:
            results = sanitize(torch.load(outputs, weights_only=True)) if outputs.exists() else []
        except Exception:
            results, messages = [], messages + [f"{spec.name}: its results could not be read back"]
        if not isinstance(results, list):
            results = []
        message = judge_all(spec, cases, results)
        if message:
            messages.append(message)
        elif len(results) < len(cases):
            reason = _unfinished(outputs, outcome, _cell(outcome.executed, "calls", gid))
            messages.append(f"{spec.name} ({cases[len(results)].label}): did not finish — {reason}")
    error = _error_of(_cell(outcome.executed, "visible", gid))
    if error:
        messages.append(f"the self-check failed: {error}")
    return messages


def _cell(executed, role: str, gid: str):
    """The grader's own cell of one exercise in the executed notebook: "visible" or "calls"."""
    return next((c for c in executed.cells if c.get("metadata", {}).get("grader", {}).get(role) == gid), None)


def _unfinished(outputs: Path, outcome, calls_cell) -> str:
    """Why the calls of a check left no (or too few) results."""
    progress = outputs.with_suffix(".progress")
    if progress.exists() and progress.read_text():
        return outcome.problem or "it ran too long or stopped the kernel"
    error = _error_of(calls_cell)
    if error and not error.startswith("not reached"):
        return f"the notebook's state broke the check ({error}); run it top to bottom and fix the first error"
    return outcome.problem or "the check was not reached (an earlier cell stopped the notebook)"


def _error_of(cell) -> str | None:
    if cell is None or cell.get("execution_count") is None:
        return "not reached (an earlier cell stopped the notebook)"
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename', 'Error')}: {str(output.get('evalue', ''))[:300]}"
    return None
