"""A unit's source, solutions/<unit>/<unit>.py: a Python file in jupytext's percent format, and
the nbgrader source notebook that `python -m grader release` makes from it.

Each cell starts with a `# %%` line: `# %% [markdown]` for prose (its lines commented out),
`# %%` for code, and `# %% nbgrader={...}` for nbgrader's cells (answers, tests, read-only
code), with nbgrader's cell metadata as JSON. Jupytext's settings for the command line and
JupyterLab are in pyproject.toml ([tool.jupytext]).
"""
from __future__ import annotations

from pathlib import Path

import nbformat

FORMAT = "py:percent"

# Every source notebook's metadata: not this machine's kernel, so that the notebooks made on any
# machine are the same. A kernel that runs one reports its own version, and `./course lab`
# aligns the learner's copies with it (attention_course.workspace.align_kernel_metadata).
METADATA = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                      "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                      "pygments_lexer": "ipython3", "version": "3.11.7"},
}


class SourceError(ValueError):
    """A unit's source file that cannot be made into its notebook."""


def to_notebook(path: Path) -> nbformat.NotebookNode:
    """The nbgrader source notebook of a unit's .py file. Cell ids follow one rule, so that they
    stay the same from one release to the next: an nbgrader cell's grade id, else cell-<index>.
    Only nbgrader's metadata is kept (jupytext adds its own on reading)."""
    import jupytext

    try:
        nb = jupytext.read(path, fmt=FORMAT, as_version=4)
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot read it ({exc})") from None
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = nbformat.from_dict(METADATA)
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader")
        if meta is not None and not (isinstance(meta, dict) and isinstance(meta.get("grade_id"), str)):
            raise SourceError(f"{path}, cell {index}: its nbgrader metadata must be a JSON object with a "
                              f"\"grade_id\" (found {meta!r})")
        cell.metadata = nbformat.from_dict({"nbgrader": meta} if meta is not None else {})
        cell.id = meta["grade_id"] if meta is not None else f"cell-{index:03d}"
        if cell.id in seen:
            raise SourceError(f"{path}: cells {seen[cell.id]} and {index} have the same grade id {cell.id!r}")
        seen[cell.id] = index
    return nb


def unit_notebook(unit: str) -> nbformat.NotebookNode:
    """The source notebook of `unit`, made from its .py file as it is now."""
    from .. import course

    path = course.source_text(unit)
    if not path.is_file():
        raise SourceError(f"{path} is missing: each unit's source is solutions/<unit>/<unit>.py")
    return to_notebook(path)
