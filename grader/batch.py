"""Grade a folder of submissions (nbgrader's submitted/<student>/<unit>/*.ipynb): every notebook
on its own, then the gradebook, the autograded copies, the feedback reports and a CSV."""
from __future__ import annotations

import copy
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import nbformat

from . import course, notebook, sandbox
from .grade import _release, empty_result, grade_notebook


def submissions(folder: Path) -> list[tuple[str, str | None, Path]]:
    """(student, unit or None, notebook) for every notebook under folder/<student>/<unit>/."""
    found = []
    for student in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for unit_dir in sorted(p for p in student.iterdir() if p.is_dir() and not p.name.startswith(".")):
            unit = unit_dir.name if unit_dir.name in course.units() else None
            for path in sorted(unit_dir.glob("*.ipynb")):
                found.append((student.name, unit, path))
    return found


def _grade_one(item: tuple[str, str | None, Path], cell_timeout: int) -> dict[str, Any]:
    student, unit, path = item
    try:
        result = grade_notebook(path, unit, cell_timeout=cell_timeout)
    except Exception as exc:  # a grader fault must not cost the other students their grades
        result = empty_result(path, unit)
        result["error"] = f"the grader failed on this notebook: {type(exc).__name__}: {exc}"
    result["student"] = student
    return result


def grade_folder(folder: Path, course_root: Path, jobs: int = 2,
                 cell_timeout: int = sandbox.CELL_TIMEOUT) -> list[dict[str, Any]]:
    """Grade every submission, record the grades and write feedback; returns the results."""
    items = submissions(Path(folder))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda item: _grade_one(item, cell_timeout), items))
    record(results, Path(course_root))
    return results


def record(results: list[dict[str, Any]], course_root: Path) -> None:
    """Write grades into nbgrader's gradebook, the autograded notebooks, the feedback HTML and
    grades.csv, all under course_root, with nbgrader's own tools."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.plugins import CsvExportPlugin

    course_root.mkdir(parents=True, exist_ok=True)
    api = course.nbgrader_api(course_root)
    db_url = api.coursedir.db_url
    units = sorted({r["unit"] for r in results if r["unit"]})
    with tempfile.TemporaryDirectory() as release_tmp:
        releaser = course.nbgrader_api(course_root, release_dir=Path(release_tmp))
        with Gradebook(db_url) as gb:
            missing = [u for u in units if not _has_assignment(gb, u, MissingEntry)]
        for unit in missing:  # records the unit's cells in this gradebook
            outcome = releaser.generate_assignment(unit, force=True)
            if not outcome["success"]:
                raise RuntimeError(f"could not record {unit} in the gradebook: {outcome['log'][-500:]}")
    with Gradebook(db_url) as gb:
        for result in results:
            if not result["unit"]:
                continue
            student, unit = result["student"], result["unit"]
            gb.update_or_create_student(student)
            gb.update_or_create_submission(unit, student)
            for entry in result["exercises"]:
                grade = gb.find_grade(entry["grade_id"], unit, unit, student)
                grade.auto_score = entry["points"]
            gb.db.commit()
            _write_autograded(result, course_root / "autograded" / student / unit / f"{unit}.ipynb")
    for result in results:
        if result["unit"]:
            outcome = api.generate_feedback(result["unit"], result["student"], force=True)
            if not outcome["success"]:
                result["flags"].append("no feedback report: " + outcome["log"].strip().splitlines()[-1][:200])
    with Gradebook(db_url) as gb:
        CsvExportPlugin(to=str(course_root / "grades.csv")).export(gb)


def _has_assignment(gb, unit: str, missing_entry) -> bool:
    try:
        return bool(gb.find_assignment(unit).notebooks)
    except missing_entry:
        return False


def _write_autograded(result: dict[str, Any], path: Path) -> None:
    """The learner's notebook as it ran, each test cell showing the grader's verdict and no
    hidden code: what nbgrader's generate_feedback turns into the report."""
    release = _release(result["unit"])
    verdicts = {e["grade_id"]: e for e in result["exercises"]}
    executed = result.get("executed")
    cells = []
    source_cells = executed.cells if executed is not None else copy.deepcopy(release.cells)
    release_meta = {notebook.grade_id(c): c.metadata for c in release.cells if notebook.grade_id(c)}
    for cell in source_cells:
        if "calls" in cell.get("metadata", {}).get("grader", {}):
            continue  # the grader's own calls
        cell = copy.deepcopy(cell)
        gid = cell.get("metadata", {}).get("grader", {}).get("visible") or notebook.grade_id(cell)
        cell.metadata = copy.deepcopy(release_meta.get(gid, {})) if gid else {}
        if gid in verdicts and notebook.is_test(cell):
            entry = verdicts[gid]
            mark = "\u2713 passed" if entry["passed"] else "\u2717 " + entry["feedback"]
            cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "error"]
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout",
                                                       text=f"Grader: {mark} ({entry['points']:g}/{entry['max_points']:g})\n"))
        cells.append(cell)
    out = nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(release.metadata))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(out, path)


def table(results: list[dict[str, Any]]) -> str:
    """A plain-text table: one row per student, one column per unit, plus problems found."""
    units = sorted({r["unit"] or "?" for r in results})
    students = sorted({r["student"] for r in results})
    cell = {(r["student"], r["unit"] or "?"): r for r in results}
    width = max([7] + [len(s) for s in students])
    lines = ["student".ljust(width) + "".join(f"  {u[:16]:>16}" for u in units)]
    notes = []
    for s in students:
        row = s.ljust(width)
        for u in units:
            r = cell.get((s, u))
            score = f"{r['score']:g}/{r['max_score']:g}" if r else "-"
            row += f"  {score:>16}"
            if r and (r["error"] or r["flags"]):
                notes.append(f"{s} / {u}: " + "; ".join(filter(None, [r["error"], *r["flags"]])))
        lines.append(row)
    return "\n".join(lines + ([""] + notes if notes else []))
