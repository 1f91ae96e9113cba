"""Grade one student notebook with the verdict decided outside the learner's process.

`grade_notebook` is five steps, each a function below, each handing the next a typed value:

1. pre-flight (`preflight.check`): the submission repaired or rejected before anything runs;
2. assemble (`assemble`): the notebook to run, with each test cell followed by the `Call`s of
   its hidden checks, whose inputs the grader makes here;
3. run (`sandbox.Sandbox.run`): learner code and the calls, in the sandbox: an `Outcome`;
4. judge (`judge`): each exercise's verdict, decided here from the plain data the calls wrote;
5. write (`write_autograded`): the notebook as it ran, with the verdicts, for the feedback.

The sandbox starts right after pre-flight, and its kernel starts while this process makes the
hidden checks' inputs. PyTorch and the specs are therefore imported in the functions that use
them, not here: a first notebook's grader loads them while the kernel starts.
"""
from __future__ import annotations

import ast
import copy
import functools
import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat

from .. import course, notebook
from ..checks import i18n
from ..checks.i18n import say
from . import preflight, safe_html, sandbox, settings
from .results import ExerciseResult, NotebookResult
from .settings import Limits
from .stopwatch import Stopwatch

if TYPE_CHECKING:
    from ..checks.spec import Case, Spec


@dataclass(frozen=True)
class Call:
    """One hidden check of an exercise, sent into the learner's process: its spec, the inputs the
    grader made for it, and the scratch file where the harness writes what the learner's code gave."""
    grade_id: str
    spec: Spec
    cases: list[Case]
    outputs: Path


@dataclass(frozen=True)
class Assembled:
    """The notebook to run in the sandbox, and the calls its harness cells make."""
    notebook: nbformat.NotebookNode
    calls: tuple[Call, ...]

    def of(self, grade_id: str) -> list[Call]:
        return [call for call in self.calls if call.grade_id == grade_id]


@functools.cache
def _source(unit: str, language: str = "en"):
    return notebook.read(course.source_notebook(unit, language))


@functools.cache
def _specs(unit: str, grade_id: str, language: str = "en") -> tuple[tuple[Spec, str], ...]:
    """The specs of one exercise, in the edition of `language`, with the learner-side source of each."""
    from ..checks.spec import collect, learner_side_source

    exercise = next(e for e in notebook.exercises(_source(unit, language)) if e.grade_id == grade_id)
    return tuple((spec, learner_side_source(exercise.hidden, spec)) for spec in collect(exercise.hidden))


def blank_result(path: Path, unit: str | None, student: str | None = None) -> NotebookResult:
    """A result with every exercise of `unit` at zero, "not graded"."""
    result = NotebookResult(notebook=str(path), unit=unit, student=student,
                            sandbox=sandbox.confinement().description, checksum=checksum(path))
    if unit:
        result.exercises = [ExerciseResult(ex.grade_id,
                                           list(dict.fromkeys(s.name for s, _ in _specs(unit, ex.grade_id))),
                                           ex.points) for ex in notebook.exercises(_source(unit))]
    return result


def checksum(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def grade_notebook(path: Path, unit: str | None = None, limits: Limits | None = None,
                   student: str | None = None, autograded: Path | None = None,
                   stopwatch: Stopwatch | None = None) -> NotebookResult:
    """Grade one notebook; never raises for a bad submission (the reason goes in `error`).
    `limits` default to grader.grading.settings.load()'s. With `autograded`, also write the notebook as
    it ran, with the verdicts, to that path. `stopwatch` records the time of each step.

    A sandbox that fails before the notebook's first cell runs (its kernel could not start: the
    machine's fault, never the learner's) is started again, `limits.startup_tries` times in all,
    a little later each time; if it never gets that far, the result has no score but a reason
    in `regrade`."""
    path = Path(path)
    watch = stopwatch or Stopwatch()
    limits = limits or settings.load().limits
    with watch.step("pre-flight"):
        check = preflight.check(path, unit, limits)                                    # 1. pre-flight
    result = blank_result(path, check.unit, student)
    result.flags += check.repairs
    if check.rejection:
        result.error = check.rejection
        return result
    result.language = check.language
    failures: list[str] = []
    with i18n.language(i18n.for_edition(check.language)):
        for attempt in range(max(1, limits.startup_tries)):
            if attempt:
                time.sleep(RETRY_PAUSE_SECONDS * attempt)   # a moment for the machine to calm down
            with tempfile.TemporaryDirectory(prefix="grade-", dir=sandbox.scratch_parent(limits),
                                             ignore_cleanup_errors=True) as tmp:
                assembled, outcome = _assemble_and_run(check, limits, Path(tmp), watch)  # 2. assemble, 3. run
                if outcome.started:
                    result.sandbox += f"\n{outcome.kernel}"   # forked or cold, and why
                    with watch.step("judging"):
                        judge(result, check, assembled, outcome, limits)                    # 4. judge
                    if autograded is not None and outcome.executed is not None:
                        with watch.step("autograded copy"):
                            write_autograded(result, outcome.executed, autograded)          # 5. write
                    if failures:   # for the instructor: the machine is short of something
                        result.flags.append(f"graded at try {attempt + 1}: before, the machine failed before "
                                            f"the notebook's first cell ran ({failures[-1]})")
                    return result
            failures.append(outcome.problem)
    result.regrade = (f"not graded: the machine failed before the notebook's first cell ran, "
                      f"{len(failures)} time(s); grade it again. Last: {failures[-1]}")
    return result


RETRY_PAUSE_SECONDS = 2.0   # before the second start of a sandbox; twice that before the third


def _assemble_and_run(check: preflight.Preflight, limits: Limits, workdir: Path,
                      watch: Stopwatch) -> tuple[Assembled, sandbox.Outcome]:
    """Start a sandbox, assemble the notebook while its kernel starts, and run it there."""
    assembled = Assembled(check.notebook, ())
    with watch.step("sandbox start"):
        try:
            box = sandbox.Sandbox(workdir, limits, warm=warm_modules(check.unit, check.language))
        except OSError as exc:   # e.g. no process could be made: the machine is full
            return assembled, sandbox.Outcome(None, f"the sandbox could not be started: {exc}", 0.0, started=False)
    with box:
        with watch.step("inputs of the hidden checks"):
            assembled = assemble(check, workdir)
        with watch.step("sandbox run"):
            outcome = box.run(assembled.notebook)
    watch.sandbox = outcome.timing
    return assembled, outcome


def judge(result: NotebookResult, check: preflight.Preflight, assembled: Assembled, outcome: sandbox.Outcome,
          limits: Limits) -> None:
    """Each exercise's verdict into `result`, from what ran; the run's own problem as a flag or,
    when nothing ran, as the result's error."""
    result.seconds = outcome.seconds
    if outcome.executed is None:
        result.error = outcome.problem or "the notebook could not be run"
        return
    if outcome.problem:
        result.flags.append(outcome.problem)
    for exercise in result.exercises:
        exercise.grade(*_judge_exercise(exercise.grade_id, check, assembled, outcome, limits.result_values))


@functools.cache
def warm_modules(unit: str, language: str = "en") -> tuple[str, ...]:
    """The modules the released notebook imports at the top of its cells, and the harness of
    the hidden checks' calls: what the sandbox's kernel imports before the notebook arrives."""
    found = []
    for cell in preflight.released(unit, language).cells:
        tree = notebook.python_tree(cell.source) if cell.cell_type == "code" else None
        for node in tree.body if tree else ():
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(node.module)
    return tuple(dict.fromkeys(found + ["grader.grading.harness"]))


def assemble(check: preflight.Preflight, workdir: Path) -> Assembled:
    """The notebook to run: the learner's cells, locked and test cells restored from the
    released version, each test cell followed by the calls of its hidden checks, whose inputs
    are saved into `workdir`, where the harness reads them."""
    import torch

    from ..checks.spec import call_inputs
    nb, unit, language = check.notebook, check.unit, check.language
    release = {notebook.grade_id(c): c for c in preflight.released(unit, language).cells if notebook.grade_id(c)}
    tests = [e.grade_id for e in notebook.exercises(_source(unit, language))]
    cells, seen, calls_made = [], set(), []

    def test_cells(gid: str) -> list:
        visible = copy.deepcopy(release[gid])
        visible.metadata["grader"] = {"visible": gid}
        calls = []
        for k, (spec, source) in enumerate(_specs(unit, gid, language)):
            inputs, outputs = workdir / f"{gid}-{k}.in.pt", workdir / f"{gid}-{k}.out.pt"
            cases = spec.all_cases()
            torch.save(call_inputs(spec, cases), inputs)
            calls_made.append(Call(gid, spec, cases, outputs))
            calls.append(f"_grader_harness.run_calls({source!r}, {spec.call.__name__!r}, "
                         f"{inputs.name!r}, {outputs.name!r}, globals())")
        harness = nbformat.v4.new_code_cell("import grader.grading.harness as _grader_harness\n" + "\n".join(calls))
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
            cells.append(nbformat.v4.new_code_cell(cell.source, metadata={"nbgrader": notebook.nbgrader_meta(cell)}))
        elif cell.cell_type == "markdown":  # the learner's prose stays in the feedback, never runs
            prose = nbformat.v4.new_markdown_cell(cell.source, metadata={"nbgrader": notebook.nbgrader_meta(cell)})
            if isinstance(cell.get("attachments"), dict):   # a pasted image: `![](attachment:name.png)`
                prose.attachments = copy.deepcopy(cell.attachments)
            cells.append(prose)
    for gid in tests:
        if gid not in seen:
            cells += test_cells(gid)
    run = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                        "language": "python"}})
    return Assembled(run, tuple(calls_made))


def _judge_exercise(gid: str, check: preflight.Preflight, assembled: Assembled, outcome: sandbox.Outcome,
                    max_values: int) -> tuple[list[str], str | None]:
    """The failure messages of one exercise, decided here from plain data, and the known
    mistake named first, if any; results of more than `max_values` values are not read."""
    from ..checks.spec import failure_text, judge_all

    messages, mistake = [], None
    for call in assembled.of(gid):
        results = _read_results(call.outputs, max_values)
        if results is None:
            messages.append(say("{name}: its results could not be read back", name=call.spec.name))
            continue
        failure = judge_all(call.spec, call.cases, results)
        if failure:
            messages.append(failure[0])
            mistake = mistake or failure[1]
        elif len(results) < len(call.cases):
            reason = _unfinished(call.outputs, outcome, _cell(outcome.executed, "calls", gid))
            messages.append(failure_text(call.spec.name, call.cases[len(results)].label,
                                         say("did not finish — {reason}", reason=reason)))
    error = _error_of(_cell(outcome.executed, "visible", gid))
    if error:
        messages.append(say("the self-check failed: {error}", error=error))
    if messages:  # the root cause first: an answer cell that stopped with an error
        answers = next(e.answer_ids for e in notebook.exercises(_source(check.unit, check.language))
                       if e.grade_id == gid)
        for cell in outcome.executed.cells:
            if notebook.grade_id(cell) in answers and (error := _error_of(cell)) and error != NOT_REACHED:
                messages.insert(0, say("your answer cell {cell!r} raised {error}", cell=notebook.grade_id(cell),
                                       error=error))
                break
    return messages, mistake


def _read_results(outputs: Path, max_values: int = Limits.result_values) -> list[Any] | None:
    """The learner side's saved results ([] when none were saved), or None when the file is
    not what the harness writes (learner code replaced it) or holds more than `max_values` values."""
    import io

    import torch

    from ..checks.spec import quiet
    from ..checks.wire import sanitize

    if not outputs.exists() and not outputs.is_symlink():
        return []
    data = sandbox.read_scratch(outputs)
    try:
        with quiet():  # torch warns about the pickle protocol of its own files
            results = None if data is None else sanitize(torch.load(io.BytesIO(data), weights_only=True), max_values)
    except Exception:
        return None
    return results if isinstance(results, list) else None


def _cell(executed, role: str, gid: str):
    """The grader's own cell of one exercise in the executed notebook: "visible" or "calls"."""
    return next((c for c in executed.cells if c.get("metadata", {}).get("grader", {}).get(role) == gid), None)


def _unfinished(outputs: Path, outcome, calls_cell) -> str:
    """Why the calls of a check left no (or too few) results."""
    if calls_cell is not None and calls_cell.get("metadata", {}).get("grader", {}).get("timed_out"):
        return say("it ran longer than the grader's time limit for a cell and was stopped")
    error = _error_of(calls_cell)
    if error and error != NOT_REACHED:
        return say("the check stopped with {error} (raised by your code, or by the notebook's state); "
                   "run the notebook top to bottom and fix the first error", error=error)
    if sandbox.read_scratch(outputs.with_suffix(".progress"), 4096):
        return outcome.problem or say("it stopped the kernel")
    return outcome.problem or say("the check was not reached (an earlier cell stopped the notebook)")


NOT_REACHED = "not reached (an earlier cell stopped the notebook)"


def _error_of(cell) -> str | None:
    if cell is None or cell.get("execution_count") is None:
        return NOT_REACHED
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename', 'Error')}: {str(output.get('evalue', ''))[:300]}".rstrip(": ")
    return None


def write_autograded(result: NotebookResult, executed, path: Path) -> None:
    """The learner's notebook as it ran — prose, code and outputs — each test cell showing the
    grader's verdict and no hidden code: what nbgrader's generate_feedback turns into the report."""
    release = preflight.released(result.unit, result.language)
    release_meta = {notebook.grade_id(c): c.metadata for c in release.cells if notebook.grade_id(c)}
    cells = []
    for cell in executed.cells:
        role = cell.get("metadata", {}).get("grader", {})
        if "calls" in role:
            continue  # the grader's own calls
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            cell.outputs = [safe_html.plain_metadata(output) for output in cell.get("outputs", [])]
        gid = role.get("visible") or notebook.grade_id(cell)
        cell.metadata = copy.deepcopy(release_meta.get(gid, {})) if gid else {}
        if "visible" in role:
            exercise = result.exercise(gid)
            mark = say("\u2713 passed") if exercise.passed else "\u2717 " + exercise.feedback
            cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "error"]
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=say(
                "Grader: {mark} ({points:g}/{max_points:g})", mark=mark, points=exercise.points,
                max_points=exercise.max_points) + "\n"))
        cells.append(cell)
    out = nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(release.metadata))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(out, path)

