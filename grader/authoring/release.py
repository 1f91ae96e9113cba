"""Make everything else from the units' sources, solutions/<unit>/<unit>.py (see grader.authoring.source):
nbgrader's source notebooks beside them, the learner's notebooks/ (via nbgrader
generate_assignment) and the self-check fixtures (the oracle run on each check's examples), and
the same for every other edition, translated from the English source (see grader.authoring.translation):
solutions-<language>/, notebooks-<language>/ and grader/fixtures/<language>/."""
from __future__ import annotations

import filecmp
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import torch

from .. import course, notebook
from ..checks.compare import DEFAULT_TOL, EPS32, judge_to_plain
from ..checks.spec import call_reads, collect, expected, learner_side_source, region_imports
from ..checks.wire import TENSOR, to_json
from . import source, translation


def fixtures(source_nb) -> dict[str, Any]:
    """Expected values and known-mistake values on each check's fixed examples."""
    entries: dict[str, Any] = {}
    for exercise in notebook.exercises(source_nb):
        for spec in collect(exercise.hidden):
            examples = spec.examples()
            if not examples:
                continue
            key = spec.name
            for number in range(2, 100):  # a second check of the same name: "name #2", run by check(name) too
                if key not in entries:
                    break
                key = f"{spec.name} #{number}"
            cases = []
            for case in examples:
                want, mistakes = expected(spec, case)
                args, kwargs = case.arguments(spec.call)
                cases.append({"label": case.label, "args": to_json(tuple(args)), "kwargs": to_json(kwargs),
                              "want": to_json(want), "mistakes": [[m.message, to_json(m.value)] for m in mistakes]})
            entries[key] = {"call_name": spec.call.__name__,
                                  "call_source": learner_side_source(exercise.hidden, spec),
                                  "judge": judge_to_plain(spec.judge), "cases": cases}
    return entries


def call_problems(unit: str, source_nb=None) -> list[str]:
    """Each `call` that reads a name the learner's process will not have: not its argument, a
    name of the learner's notebook, an import of its region or a builtin (the grader ships the
    call alone, with the region's imports)."""
    source_nb = source_nb or source.unit_notebook(unit)
    learner = notebook.learner_names(source_nb)
    problems = []
    for exercise in notebook.exercises(source_nb):
        allowed = learner | region_imports(exercise.hidden)
        for spec in collect(exercise.hidden):
            for name in sorted(call_reads(exercise.hidden, spec) - allowed):
                problems.append(f"{unit}, cell {exercise.grade_id}: {spec.call.__name__} reads {name!r}, which the "
                                f"learner's process does not have (only the call and the region's imports are sent "
                                f"there): pass it in a case field, or write it inside {spec.call.__name__}")
    return problems


def _fixture_text(source_nb) -> str:
    """One line per check, so a change shows as a change of that line."""
    entries = fixtures(source_nb)
    lines = [f" {json.dumps(name)}: {json.dumps(entry, ensure_ascii=False)}" for name, entry in entries.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


# Stored values are float32 results computed on some CPU; another CPU rounds differently (other
# SIMD widths, summation orders, exp/sqrt kernels): 1.0000001192092896 there, 1.0 here. Measured on
# these fixtures: PyTorch's unvectorised kernels (ATEN_CPU_CAPABILITY=default, as on CPUs without
# AVX2) move the near-zero-variance LayerNorm case by 94 float32 steps, 16 steps would fail it.
# Values agree within the checks' own tolerance (compare.DEFAULT_TOL = 256 steps, relative to
# max(1, |value|), about 3e-5): closer than any check can tell apart, while a real change of an
# example, oracle or mistake moves values by far more (1e-3 and up).
FIXTURE_STEPS = DEFAULT_TOL


def _close(a: float, b: float) -> bool:
    """Two numbers of a fixture agree: an int with an int exactly, else as _close_all."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return _close_all(torch.tensor(float(a), dtype=torch.float64), torch.tensor(float(b), dtype=torch.float64))


def _close_all(stored: torch.Tensor, fresh: torch.Tensor) -> bool:
    """Each pair of numbers agrees as the checks compare one number (compare.close): NaN with
    NaN, an infinity with the same one, else within FIXTURE_STEPS float32 steps of max(1, |fresh|)."""
    nan = stored.isnan()
    if stored.shape != fresh.shape or not torch.equal(nan, fresh.isnan()):
        return False
    inf = stored.isinf() | fresh.isinf()
    if not torch.equal(stored[inf], fresh[inf]):
        return False
    finite = ~(nan | inf)
    a, b = stored[finite], fresh[finite]
    return bool(((a - b).abs() <= FIXTURE_STEPS * EPS32 * b.abs().clamp(min=1.0)).all())


def _whole_tensor_close(stored: list, fresh: list) -> bool:
    """A tensor's values at once (a fixture holds some 120,000): True when they all agree, as
    _close would find one by one; False when they do not, or are not a rectangular block."""
    try:
        a, b = torch.tensor(stored), torch.tensor(fresh)
    except (TypeError, ValueError, RuntimeError):
        return False
    if not (a.is_floating_point() or b.is_floating_point()):
        return torch.equal(a, b)
    return _close_all(a.double(), b.double())


def _short(value: Any, at: int = 0) -> str:
    """A value for a message; a string from `at` (where it first differs) on, cut short."""
    if not isinstance(value, str):
        return repr(value)[:60]
    start = max(0, at - 20)
    return ("…" if start else "") + repr(value[start:start + 60]) + ("…" if len(value) > start + 60 else "")


def _first_difference(a: str, b: str) -> int:
    """Where two strings first differ (the shorter one's length when one begins the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def same_fixture(stored: Any, fresh: Any, where: str = "", in_tensor: bool = False) -> str | None:
    """None when two parsed fixtures agree: the same structure, strings, integers, booleans,
    dtypes and shapes, and floats within FIXTURE_STEPS float32 steps (see _close); else where
    they first differ, e.g. 'dot_product › cases[0] › want › __tensor__: 0.9544 vs 0.9551'."""
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    # A float tensor's values are floats, yet 1 and 1.0 are the same tensor value. Elsewhere (a
    # Python result, a check's tol) an int where a float was is a real change: compare types.
    if number(stored) and number(fresh) and (in_tensor or type(stored) is type(fresh) is float):
        return None if _close(stored, fresh) else f"{where}: {stored!r} vs {fresh!r}"
    if type(stored) is not type(fresh):
        return f"{where}: {type(stored).__name__} {_short(stored)} vs {type(fresh).__name__} {_short(fresh)}"
    if isinstance(stored, dict):
        if list(stored) != list(fresh):
            gone, new = [k for k in stored if k not in fresh][:1], [k for k in fresh if k not in stored][:1]
            at = _first_difference(gone[0], new[0]) if gone and new else 0  # a renamed mistake message
            what = "; ".join([f"removed {_short(k, at)}" for k in gone] + [f"added {_short(k, at)}" for k in new])
            return f"{where or 'the checks'}: {what or 'the same keys in another order'}"
        return next((d for k in stored if (d := same_fixture(
            stored[k], fresh[k], f"{where} › {k[:40]}" if where else k, in_tensor or k == TENSOR))), None)
    if isinstance(stored, list):
        if len(stored) != len(fresh):
            return f"{where}: {len(stored)} vs {len(fresh)} items"
        if in_tensor and _whole_tensor_close(stored, fresh):
            return None   # else one by one below, to say where they first differ
        return next((d for i, (a, b) in enumerate(zip(stored, fresh))
                     if (d := same_fixture(a, b, f"{where}[{i}]", in_tensor))), None)
    if isinstance(stored, str) and stored != fresh:
        at = _first_difference(stored, fresh)
        return f"{where}: {_short(stored, at)} vs {_short(fresh, at)}"
    return None if stored == fresh else f"{where}: {_short(stored)} vs {_short(fresh)}"


# --- the first code cell: the course's package on a hosted notebook ---------------------------------

# Every unit's first code cell, written here once (release puts it into each unit's source). It does
# nothing where the course is installed and under the grader (nbgrader and the course's grader set
# NBGRADER_EXECUTION; the grader's sandbox has the course's code but not its installed package). On
# a hosted notebook without the course it installs only attention_course.INSTALL_FROM, the course's
# wheel at an https URL pinned by its sha256, which pip checks before it installs anything.
INSTALL_CELL_SOURCE = """\
# The self-checks come with the course's package. On a hosted notebook (Colab, a JupyterHub image)
# that does not have it, this cell installs it; everywhere else, and under the grader, it does nothing.
import importlib.util
import os
import subprocess
import sys

COURSE_WHEEL = {wheel}  # written by `python -m grader release` from attention_course.INSTALL_FROM
if importlib.util.find_spec("attention_course") is None and not os.environ.get("NBGRADER_EXECUTION"):
    if not COURSE_WHEEL:
        print("The course's package is not installed here: install the course's wheel "
              "(%pip install attention_course-….whl, see the course's README), then run this cell again")
    else:
        print("Installing the course's package; a minute or two, PyTorch is kept if present")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", COURSE_WHEEL],
                             capture_output=True, text=True)
        why = (pip.stderr.strip().splitlines() or [""])[-1]
        if pip.returncode == 0:
            importlib.invalidate_caches()
        elif "HASHES" in pip.stderr:
            print(f"Nothing installed: the wheel at {{COURSE_WHEEL}} is not the course's "
                  "(its sha256 is not the one the course published)")
        else:
            print(f"Nothing installed: the course's wheel could not be fetched from {{COURSE_WHEEL}} "
                  f"({{why}})")
"""
INSTALL_CELL_AT = re.compile(r'(^# %% nbgrader=\{[^\n]*"grade_id": "install_course"[^\n]*\n)(.*?)(?=\n\n# %%)',
                             re.MULTILINE | re.DOTALL)
# What a hosted notebook may install: the course's wheel over https, pinned by its sha256.
WHEEL_URL = re.compile(r"https://[^\s#]+/attention_course-[^\s/#]+\.whl#sha256=[0-9a-f]{64}")


def install_from_problem(install_from: str) -> str | None:
    """Why `install_from` (attention_course.INSTALL_FROM) cannot go into the notebooks, or None.
    Empty (the course is not published: the cell says how to install it) or the course's wheel
    at an https URL with its sha256, which pip checks: a name or an unpinned URL would install
    whatever is published under it."""
    if install_from == "" or WHEEL_URL.fullmatch(install_from):
        return None
    return (f"attention_course.INSTALL_FROM is {install_from!r}: a hosted notebook installs only the course's "
            "wheel at an https URL pinned by its sha256, e.g. "
            "'https://example.org/attention_course-0.1.0-py3-none-any.whl#sha256=<the 64 hex digits that "
            "`sha256sum` prints for the wheel you uploaded>', or nothing: set it to \"\"")


def install_cell_problems(path: Path, check: bool) -> list[str]:
    """Put INSTALL_CELL_SOURCE, with attention_course.INSTALL_FROM, into the unit source `path` as its
    install_course cell, or with `check` only say where it differs."""
    from attention_course import INSTALL_FROM

    if problem := install_from_problem(INSTALL_FROM):
        return [problem]
    text = path.read_text(encoding="utf-8")
    if len(INSTALL_CELL_AT.findall(text)) != 1:
        return [f"{path}: it must have one cell with grade_id install_course (the first code cell, which "
                "installs the course on a hosted notebook)"]
    cell = INSTALL_CELL_SOURCE.format(wheel=json.dumps(INSTALL_FROM)).rstrip("\n")
    fixed = INSTALL_CELL_AT.sub(lambda m: m.group(1) + cell, text)
    if fixed == text:
        return []
    if check:
        return [f"{path}: its install_course cell is not the one grader/authoring/release.py writes "
                "(with attention_course.INSTALL_FROM): run `python -m grader release`"]
    path.write_text(fixed, encoding="utf-8")
    return []

def release(check: bool = False, units: list[str] | None = None) -> list[str]:
    """Regenerate every edition's notebooks and fixtures from solutions/ (and the translation
    catalogues from the English), or with `check` only report what is out of date, untranslated
    or fuzzy. Returns the problems found (empty when all is in sync)."""
    problems: list[str] = []
    units = units or course.units()
    with tempfile.TemporaryDirectory() as tmp:
        for unit in units:
            problems += install_cell_problems(course.source_text(unit), check)
            try:
                source_nb = source.unit_notebook(unit)
            except source.SourceError as error:
                problems.append(str(error))
                continue
            problems += call_problems(unit, source_nb)
            problems += _release_edition(unit, course.EDITIONS["en"], source_nb, Path(tmp), check)
            for language in translation.LANGUAGES:
                po, stale = translation.update(language, unit, source_nb, write=not check)
                if check and stale:
                    problems.append(f"translations/{language}/{unit}.po does not match the English of "
                                    f"solutions/{unit}: run `python -m grader release` to bring it up to date")
                problems += translation.catalogue_problems(po, language, unit)
                translated = translation.edition(source_nb, language, translation.table(po))
                problems += translation.code_problems(translated, language, unit)
                problems += _release_edition(unit, course.EDITIONS[language], translated, Path(tmp), check)
        for language in translation.LANGUAGES:
            problems += _release_messages(language, check)
    if check:
        problems += _strays(units)
    return problems


def _release_edition(unit: str, edition: course.Edition, source_nb, tmp: Path, check: bool) -> list[str]:
    """One unit of one edition: its source notebook (the English one made from the unit's .py
    file, another edition's from the English), the student notebook nbgrader generates from it,
    and the self-checks' fixtures."""
    problems: list[str] = []
    language = edition.language
    source_dir = tmp / f"solutions-{language}"
    made = source_dir / unit / f"{unit}.ipynb"
    made.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(source_nb, made)
    shipped_source = course.source_notebook(unit, language)
    if check:
        if not shipped_source.exists() or shipped_source.read_bytes() != made.read_bytes():
            problems.append(f"{_relative(shipped_source)} is out of date")
    else:
        shipped_source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(made, shipped_source)
    api = course.nbgrader_api(tmp / f"course-{language}", release_dir=tmp / f"release-{language}",
                              language=language, source_dir=source_dir)
    outcome = api.generate_assignment(unit, force=True)
    if not outcome["success"]:
        return problems + [f"{unit} ({language}): nbgrader generate_assignment failed:\n{outcome['log'][-2000:]}"]
    fresh, shipped = tmp / f"release-{language}" / unit, edition.notebooks / unit
    text, fixture = _fixture_text(source_nb), edition.fixtures / f"{unit}.json"
    # Compared as data, not text: another CPU rounds the last bits of floats differently, so a
    # file that agrees is kept as it is.
    try:
        difference = same_fixture(json.loads(fixture.read_text(encoding="utf-8")), json.loads(text))
    except FileNotFoundError:
        difference = "the file is missing"
    except json.JSONDecodeError as error:
        difference = f"not valid JSON ({error})"
    if check:
        problems += [f"{_relative(shipped)}/{name} is out of date" for name in _differences(fresh, shipped)]
        if difference:
            problems.append(f"{_relative(fixture)} is out of date: {difference}")
    else:
        shutil.rmtree(shipped, ignore_errors=True)
        shutil.copytree(fresh, shipped)
        if difference:
            fixture.parent.mkdir(parents=True, exist_ok=True)
            fixture.write_text(text, encoding="utf-8")
    return problems


def _release_messages(language: str, check: bool) -> list[str]:
    """The grader's own messages in `language`: its catalogue brought up to date with the
    `say(...)` templates, compiled for the learner's process into fixtures/<language>/messages.json."""
    po, stale = translation.update(language, translation.GRADER, write=not check)
    problems = translation.catalogue_problems(po, language, translation.GRADER)
    if check and stale:
        problems.append(f"translations/{language}/grader.po does not match the grader's messages: "
                        "run `python -m grader release` to bring it up to date")
    compiled = course.EDITIONS[language].fixtures / "messages.json"
    text = json.dumps(translation.table(po), ensure_ascii=False, indent=0, sort_keys=True) + "\n"
    if check:
        if not compiled.exists() or compiled.read_text(encoding="utf-8") != text:
            problems.append(f"{_relative(compiled)} is out of date")
    else:
        compiled.parent.mkdir(parents=True, exist_ok=True)
        compiled.write_text(text, encoding="utf-8")
    return problems


def _strays(units: list[str]) -> list[str]:
    """Files of every edition that belong to no unit."""
    problems = []
    for edition in course.EDITIONS.values():
        names = {p.stem for p in edition.fixtures.glob("*.json")} - {"messages"}
        problems += [f"{_relative(edition.fixtures)}/{name}.json belongs to no unit"
                     for name in sorted(names - set(course.units()))]
        for folder in {edition.notebooks, edition.solutions} - {course.SOLUTIONS}:
            if folder.is_dir():
                extra = {p.name for p in folder.iterdir() if p.is_dir()} - set(course.units())
                problems += [f"{_relative(folder)}/{name} belongs to no unit" for name in sorted(extra)]
    return problems


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(course.ROOT))
    except ValueError:
        return str(path)


def _differences(a: Path, b: Path) -> list[str]:
    """Files that differ between two folders (missing on either side included)."""
    if not b.exists():
        return ["(the whole folder)"]
    cmp = filecmp.dircmp(a, b)
    out = cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files
    for sub in cmp.common_dirs:
        out += [f"{sub}/{name}" for name in _differences(a / sub, b / sub)]
    return out
