"""Pre-flight: read a submission and repair or reject what would stop grading, before any of it runs.

Plain `nbgrader autograde` stops a whole batch on some of these (a copied test cell) and
silently mis-scores others (an edited test cell's points); here each one is repaired with a
note, or the notebook is rejected with a reason, and the batch goes on.
"""
from __future__ import annotations

import functools
import json
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .. import course, notebook
from .settings import Limits


@dataclass
class Preflight:
    unit: str | None
    notebook: object | None = None                     # the repaired notebook; None when rejected
    language: str = "en"                               # the edition it belongs to (course.EDITIONS)
    repairs: list[str] = field(default_factory=list)    # what was wrong and how it was repaired
    rejection: str | None = None                        # why it cannot be graded at all


@functools.cache
def released(unit: str, language: str = "en"):
    """The student notebook of `unit` as released in the edition of `language` (read once;
    callers copy before editing)."""
    return notebook.read(course.release_notebook(unit, language))


def unit_of(nb) -> str | None:
    """The unit whose released graded cells the notebook shares most, if any."""
    ids = {notebook.grade_id(c) for c in nb.cells} - {None}
    scores = {u: len(ids & {notebook.grade_id(c) for c in released(u).cells}) for u in course.units()}
    best = max(scores, key=scores.get, default=None)
    return best if best is not None and scores[best] > 0 else None


def check(path: Path, unit: str | None = None, limits: Limits | None = None) -> Preflight:
    """Read `path` as a submission of `unit` (None: find the unit from the notebook's cells or
    its file and folder names), repairing what can be repaired; a file larger than
    `limits.notebook_bytes` (None: the default limits) is rejected."""
    path = Path(path)
    result = Preflight(unit)
    nb = _read(path, result, (limits or Limits()).notebook_bytes)
    if nb is None:
        return result
    own = unit_of(nb)
    if unit is None:
        unit = own or next((n for n in (path.stem, path.parent.name) if n in course.units()), None)
        if unit is None:
            result.rejection = (f"{path.name} has none of the course's graded cells and is not named after a unit "
                                f"({', '.join(course.units())}): cannot tell what to grade it as")
            return result
    elif own is not None and own != unit:
        result.rejection = (f"this is the notebook of unit {own} (its graded cells are {own}'s), "
                            f"submitted as {unit}: submit {unit}.ipynb in the {unit} folder")
        return result
    result.unit = unit
    result.language = course.language_of(nb)
    result.repairs += _repair_form(nb, released(unit, result.language))
    result.notebook = nb
    return result


def _read(path: Path, result: Preflight, max_bytes: int):
    """The notebook in nbformat 4.5, or None with `result.rejection` set."""
    if path.is_symlink():  # an unpacked archive keeps links: to the solutions, to someone else's work
        result.rejection = f"{path.name} is a symbolic link, not a notebook: links are not graded"
        return None
    try:
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        result.rejection = f"{path.name} could not be read: {exc.strerror}"
        return None
    if len(raw) > max_bytes:
        result.rejection = (f"{path.name} is larger than {max_bytes // 2**20} MiB: clear the outputs "
                            "(Edit > Clear Outputs of All Cells), save and submit it again")
        return None
    if not raw.strip():
        result.rejection = (f"{path.name} is empty ({len(raw)} bytes): the notebook was not saved "
                            "before it was submitted")
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        result.rejection = f"{path.name} is not a readable notebook: not UTF-8 text ({exc.reason})"
        return None
    except json.JSONDecodeError as exc:
        result.rejection = (f"{path.name} is not a readable notebook: broken JSON at line {exc.lineno}, column "
                            f"{exc.colno} ({exc.msg}); the file was damaged, submit it again")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        result.rejection = f"{path.name} is not a readable notebook: JSON without a list of cells"
        return None
    version = data.get("nbformat")
    if version == 4 and data.get("nbformat_minor", 0) >= 5:  # 4.5 requires ids; counted before nbformat mends them
        if bad := _give_cells_ids(data.get("cells", [])):
            result.repairs.append(f"{bad} cell(s) had no valid or unique id; ids were added")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as exc:  # nbformat raises several kinds on malformed notebooks
        result.rejection = f"{path.name} is not a readable notebook: {str(exc).splitlines()[0][:200]}"
        return None
    if version != 4:
        result.repairs.append(f"the notebook was in nbformat {version}; it was converted to nbformat 4")
    nb.nbformat, nb.nbformat_minor = 4, max(5, nb.get("nbformat_minor", 0))
    _give_cells_ids(nb.cells)
    return nb


def _give_cells_ids(cells: list) -> int:
    """Give every cell a unique id, as nbformat 4.5 requires; returns how many were changed."""
    seen, changed = set(), 0
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        cid = cell.get("id")
        if not isinstance(cid, str) or not cid or cid in seen or len(cid) > 64:
            cell["id"] = uuid.uuid4().hex[:8]
            changed += 1
        seen.add(cell["id"])
    return changed


def _repair_form(nb, release_nb) -> list[str]:
    """Problems with the graded cells compared with the released notebook; grading uses the
    released test and read-only cells and the course's points, so each is repaired by that."""
    notes = []
    ids = [notebook.grade_id(c) for c in nb.cells if notebook.grade_id(c)]
    for gid in sorted({g for g in ids if ids.count(g) > 1}):
        notes.append(f"the notebook has {ids.count(gid)} cells with grade_id {gid!r} (a copied cell?); "
                     "the first is kept")
    reference = {notebook.grade_id(c): c for c in release_nb.cells if notebook.grade_id(c)}
    for cell in nb.cells:
        gid = notebook.grade_id(cell)
        ref = reference.get(gid)
        if ref is None:
            continue
        if cell.cell_type != ref.cell_type:
            notes.append(f"cell {gid!r} was changed from {ref.cell_type} to {cell.cell_type}; "
                         + ("the released cell is used" if notebook.is_test(ref) or notebook.is_locked(ref)
                            else "it is run as code"))
        elif (notebook.is_test(ref) or notebook.is_locked(ref)) and cell.source != ref.source:
            notes.append(f"the read-only cell {gid!r} was edited; the released version is used")
        points, ref_points = notebook.nbgrader_meta(cell).get("points"), notebook.nbgrader_meta(ref).get("points")
        if notebook.is_test(ref) and points != ref_points:
            notes.append(f"the points of {gid!r} were changed from {ref_points} to {points}; "
                         f"the course's {ref_points} count")
    present = set(ids)
    for gid, ref in reference.items():
        if gid not in present and (notebook.is_test(ref) or notebook.is_answer(ref)):
            notes.append(f"cell {gid!r} is missing (deleted, or its nbgrader metadata removed); "
                         + ("the released test cell is put back" if notebook.is_test(ref)
                            else "its exercise is graded on whatever the notebook defines"))
    kernel = nb.metadata.get("kernelspec", {}).get("name")
    if kernel not in (None, "python3"):
        notes.append(f"kernel {kernel!r} is not the course's python3 kernel; python3 is used")
    return notes
