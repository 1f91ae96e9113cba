"""How fast the learner's self-checks and the grader are, on this machine.

    python benchmarks/bench_grading.py [UNIT ...]

Prints, per unit: the slowest self-check (median of 5 runs, with the reference answers) and
the wall time of grading the reference notebook (one run, kernel start and imports included);
then the wall time of grading a class of reference notebooks (two per unit) with one worker
and with two, in the same run, and the speed-up.
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import nbformat  # noqa: E402

from grader import course  # noqa: E402
from grader.grade import grade_notebook  # noqa: E402
from grader.selfcheck import FIXTURES, check  # noqa: E402
from reference import reference_namespace, student_notebook  # noqa: E402


def selfcheck_times(unit: str) -> dict[str, float]:
    namespace = reference_namespace(unit)
    names = json.loads((FIXTURES / f"{unit}.json").read_text())
    times = {}
    for name in names:
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            with redirect_stdout(StringIO()):
                check(name, namespace)
            runs.append(time.perf_counter() - start)
        times[name] = statistics.median(runs)
    return times


def grade_time(unit: str) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{unit}.ipynb"
        nbformat.write(student_notebook(unit), path)
        start = time.perf_counter()
        result = grade_notebook(path, unit)
        return time.perf_counter() - start, result.score, result.max_score


def class_times(units: list[str], per_unit: int = 2) -> tuple[float, float, int]:
    """Wall time of grading one class with 1 worker, then with 2, and how many notebooks."""
    from grader import settings
    from grader.batch import grade_folder

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for unit in units:
            for k in range(per_unit):
                path = root / "submitted" / f"student{k}" / unit / f"{unit}.ipynb"
                path.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(student_notebook(unit), path)
        times = []
        for workers in (1, 2):
            start = time.perf_counter()
            grade_folder(root / "submitted", root, settings.load(workers=workers), regrade=True, progress=False)
            times.append(time.perf_counter() - start)
        return times[0], times[1], per_unit * len(units)


def main(units: list[str]) -> None:
    print(f"{'unit':22} {'slowest self-check':>30} {'grade reference':>18}")
    for unit in units:
        with redirect_stdout(StringIO()):
            times = selfcheck_times(unit)
        name, slowest = max(times.items(), key=lambda kv: kv[1]) if times else ("-", 0.0)
        seconds, score, max_score = grade_time(unit)
        print(f"{unit:22} {name[:18]:>18} {slowest * 1000:8.1f} ms {seconds:8.1f} s ({score:g}/{max_score:g})")
    one, two, count = class_times(units)
    print(f"\nclass of {count} notebooks: 1 worker {one:.1f} s ({one / count:.1f} s per notebook), "
          f"2 workers {two:.1f} s ({two / count:.1f} s per notebook): speed-up x{one / two:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:] or course.units())
