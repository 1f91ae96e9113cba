"""Reading notebooks: nbgrader cell roles, hidden regions, and checks of a submission's form."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n(.*?)^[ \t]*### END HIDDEN TESTS[ \t]*$", re.S | re.M)


def nbgrader_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def grade_id(cell) -> str | None:
    gid = nbgrader_meta(cell).get("grade_id")
    return gid if isinstance(gid, str) else None


def is_test(cell) -> bool:
    """An autograder test cell: graded, not an answer."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def is_answer(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_locked(cell) -> bool:
    return bool(nbgrader_meta(cell).get("locked"))


def hidden_source(source: str) -> str:
    """The code between ### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS, dedented to the margin."""
    return "\n".join(m.group(1) for m in HIDDEN.finditer(source))


def visible_source(source: str) -> str:
    return HIDDEN.sub("", source).rstrip() + "\n"


@dataclass
class Exercise:
    """A graded exercise: its test cell in the source notebook."""
    grade_id: str
    points: float
    source: str            # full source, hidden tests included
    answer_ids: list[str]  # answer cells since the previous test cell

    @property
    def hidden(self) -> str:
        return hidden_source(self.source)

    @property
    def visible(self) -> str:
        return visible_source(self.source)


def exercises(source_nb) -> list[Exercise]:
    """The exercises of a source notebook, in order."""
    found, answers = [], []
    for cell in source_nb.cells:
        if is_answer(cell) and grade_id(cell):
            answers.append(grade_id(cell))
        if is_test(cell):
            found.append(Exercise(grade_id(cell), float(nbgrader_meta(cell).get("points", 0)),
                                  cell.source, answers))
            answers = []
    return found


def python_tree(source: str):
    """A code cell's source parsed as Python (an ast.Module), its IPython magics and shell
    escapes left out; None when it is not valid Python."""
    import ast

    try:
        return ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return None


def learner_names(source_nb) -> set[str]:
    """The names the learner's notebook defines at top level: its code cells with the hidden
    regions taken out (answers, given code, the learner's own cells)."""
    import ast

    names: set[str] = set()
    for cell in source_nb.cells:
        if cell.cell_type != "code":
            continue
        tree = python_tree(visible_source(cell.source))
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def read(path: Path):
    """Read a notebook; raises ValueError with a clear message when it is not one."""
    try:
        with open(path, encoding="utf-8") as handle:
            return nbformat.read(handle, as_version=4)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path.name} is not UTF-8 text ({exc.reason})") from None
    except Exception as exc:  # nbformat raises several kinds on broken JSON
        raise ValueError(f"{path.name} is not a readable notebook: {str(exc).splitlines()[0][:200]}") from None
