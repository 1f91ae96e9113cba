"""The reference solutions, run once per test session in this process."""
from __future__ import annotations

import functools
import os

from grader import course, notebook


@functools.cache
def reference_namespace(unit: str) -> dict:
    """The names the solution notebook defines, after running its code cells (not its tests)
    with the short configuration used under grading."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.environ["NBGRADER_EXECUTION"] = "autograde"
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
    return namespace


def _python(source: str) -> str:
    """Drop IPython magics and shell escapes, which plain Python cannot run."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def exercise_for(unit: str, answer: str) -> notebook.Exercise:
    for exercise in notebook.exercises(notebook.read(course.source_notebook(unit))):
        if answer in exercise.answer_ids:
            return exercise
    raise KeyError(f"{unit}: no test cell follows the answer cell {answer!r}")
