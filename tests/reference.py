"""The reference solutions, run once per test session in this process."""
from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from grader import course, notebook


@functools.cache
def reference_namespace(unit: str) -> dict:
    """The names the solution notebook defines, after running its code cells (not its tests)
    with the short configuration used under grading."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grading = os.environ.get("NBGRADER_EXECUTION")
    os.environ["NBGRADER_EXECUTION"] = "autograde"   # only while the cells run: later tests are not graded
    nb = notebook.read(course.source_notebook(unit))
    namespace: dict = {"__name__": "__main__"}
    cwd = os.getcwd()
    os.chdir(course.source_notebook(unit).parent)
    try:
        for cell in nb.cells:
            if cell.cell_type == "code" and not notebook.is_test(cell):
                exec(compile(_python(cell.source), f"<{unit} cell>", "exec"), namespace)
                plt.close("all")
    finally:
        os.chdir(cwd)
        if grading is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = grading
    return namespace


def load_script(path: Path) -> ModuleType:
    """One of the course's scripts (data/, benchmarks/: not packages) imported by its path, and
    registered in sys.modules, where dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _python(source: str) -> str:
    """Drop IPython magics and shell escapes, which plain Python cannot run."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def unit_exercises(unit: str) -> list[notebook.Exercise]:
    """The unit's exercises, their grade ids and points, read from its source notebook: a test
    counts these, never a copy of them."""
    return notebook.exercises(notebook.read(course.source_notebook(unit)))


def full_marks(unit: str) -> float:
    return sum(e.points for e in unit_exercises(unit))


def points_of(unit: str, grade_id: str) -> float:
    return next(e.points for e in unit_exercises(unit) if e.grade_id == grade_id)


def exercise_for(unit: str, answer: str) -> notebook.Exercise:
    for exercise in unit_exercises(unit):
        if answer in exercise.answer_ids:
            return exercise
    raise KeyError(f"{unit}: no test cell follows the answer cell {answer!r}")


def answers(unit: str, language: str = "en") -> dict[str, str]:
    """The reference answer of each answer cell, without the solution markers."""
    nb = notebook.read(course.source_notebook(unit, language))
    return {notebook.grade_id(c): "\n".join(line for line in c.source.splitlines()
                                            if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
            for c in nb.cells if notebook.is_answer(c)}


def student_notebook(unit: str, replace: dict[str, str] | None = None, language: str = "en"):
    """The released student notebook (of the edition in `language`) with the given answer cells
    filled in (by grade id); `replace=None` fills every answer cell with the reference answer."""
    return fill_answers(notebook.read(course.release_notebook(unit, language)), unit, replace, language)


def fill_answers(nb, unit: str, replace: dict[str, str] | None = None, language: str = "en"):
    """`nb`, a student notebook of `unit`, with its answer cells filled in as `student_notebook` does."""
    fill = answers(unit, language) if replace is None else replace
    for cell in nb.cells:
        gid = notebook.grade_id(cell)
        if gid in fill:
            cell.source = fill[gid]
    return nb


if __name__ == "__main__":
    # python tests/reference.py UNIT OUT.ipynb: the student notebook with the reference answers
    import sys

    import nbformat

    nbformat.write(student_notebook(sys.argv[1]), sys.argv[2])
