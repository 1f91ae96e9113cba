"""Edit a source notebook as a plain Python file, and back.

    python tools/nbsource.py to-py solutions/01_dot_product/01_dot_product.ipynb unit01.py
    python tools/nbsource.py to-nb unit01.py solutions/01_dot_product/01_dot_product.ipynb

Cells are separated by `# %%` lines, as in the "percent" format most editors understand:

    # %% [markdown]          prose; every line starts with "# "
    # %%                     ordinary code
    # %% [answer ID]         an answer cell (nbgrader solution cell, grade id ID)
    # %% [check ID POINTS]   a test cell worth POINTS (nbgrader autograder tests)
    # %% [given ID]          code the learner reads but cannot edit (nbgrader read-only)

The notebook is the source of truth; this file format is only a convenient way to edit it.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from grader.lab import kernel_metadata

HEADER = re.compile(r"^# %%(?: \[(markdown|answer|check|given)(?: ([\w-]+))?(?: ([\d.]+))?\])?\s*$")


def _meta(kind: str, gid: str | None, points: str | None) -> dict:
    if kind == "answer":
        return {"grade": False, "grade_id": gid, "locked": False, "schema_version": 3, "solution": True, "task": False}
    if kind == "check":
        return {"grade": True, "grade_id": gid, "locked": True, "points": float(points) if "." in points else int(points),
                "schema_version": 3, "solution": False, "task": False}
    return {"grade": False, "grade_id": gid, "locked": True, "schema_version": 3, "solution": False, "task": False}


def to_notebook(text: str):
    cells, kind, gid, points, lines = [], None, None, None, None

    def flush():
        if lines is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(re.sub(r"^# ?", "", line) for line in body.splitlines())
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell(body)
            if kind:
                cell.metadata["nbgrader"] = _meta(kind, gid, points)
        cell.id = gid if gid else f"cell-{len(cells):03d}"
        cells.append(cell)

    for line in text.splitlines():
        match = HEADER.match(line)
        if match:
            flush()
            kind, gid, points = match.groups()
            lines = []
        elif lines is not None:
            lines.append(line)
    flush()
    return nbformat.v4.new_notebook(cells=cells, metadata=kernel_metadata())


def to_script(nb) -> str:
    out = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "markdown":
            out.append("# %% [markdown]")
            out += [("# " + line).rstrip() for line in cell.source.splitlines()]
        elif meta.get("solution"):
            out.append(f"# %% [answer {meta['grade_id']}]")
            out.append(cell.source)
        elif meta.get("grade"):
            out.append(f"# %% [check {meta['grade_id']} {meta.get('points', 0):g}]")
            out.append(cell.source)
        elif meta.get("locked"):
            out.append(f"# %% [given {meta['grade_id']}]")
            out.append(cell.source)
        else:
            out.append("# %%")
            out.append(cell.source)
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("to-py", "to-nb"):
        print(__doc__, file=sys.stderr)
        return 2
    command, src, dst = argv
    if command == "to-nb":
        nbformat.write(to_notebook(Path(src).read_text(encoding="utf-8")), dst)
    else:
        Path(dst).write_text(to_script(nbformat.read(src, as_version=4)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
