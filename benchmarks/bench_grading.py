"""How fast the learner's self-checks and the grader are, on this machine.

    python benchmarks/bench_grading.py [UNIT ...]

Prints, per unit: the slowest self-check (median of 5 runs, with the reference answers) and
the wall time of grading the reference notebook (one run, kernel start and imports included);
then a class of 20 notebooks across all units (honest, wrong, hostile, broken) graded with one
worker and with two in the same run (wall times, speed-up, whether the scores are identical),
and the same class killed half-way and resumed.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import statistics
import subprocess
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
from grader import notebook  # noqa: E402
from reference import answers, reference_namespace, student_notebook  # noqa: E402


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


def mixed_class(root: Path) -> int:
    """A class of 20 notebooks across all units: honest, wrong, hostile and broken ones."""
    units = course.units()

    def put(student: str, unit: str, nb=None, text: str | None = None) -> None:
        path = root / "submitted" / student / unit / f"{unit}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text) if text is not None else nbformat.write(nb, path)

    def answer(unit: str, gid: str, code: str):
        fill = answers(unit)
        fill[gid] = code
        return student_notebook(unit, fill)

    for unit in units:                                       # 8 honest
        put("honest", unit, student_notebook(unit))
    for unit in units[:4]:                                   # 4 blank: wrong everywhere
        put("blank", unit, notebook.read(course.release_notebook(unit)))
    put("hostile", units[0], answer(units[0], "u01_dot_product", "def dot_product(a, b):\n    return a.sum()\n"
        "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])"))
    put("hostile", units[2], answer(units[2], "u03_self_attention", "import os\nos._exit(1)"))
    put("hostile", units[4], answer(units[4], "u05_causal_attention_weights", "while True:\n    pass"))
    put("hostile", units[5], answer(units[5], "u06_multi_head_attention_wrapper", "hog = bytearray(20 * 2**30)"))
    put("broken", units[1], text="")
    put("broken", units[6], student_notebook(units[5]))     # another unit's notebook
    put("broken", units[7], text='{"cells": [ not json')
    copied = student_notebook(units[3])
    copied.cells.append(copy.deepcopy(next(c for c in copied.cells if notebook.is_test(c))))
    put("broken", units[3], copied)
    return len(list((root / "submitted").glob("*/*/*.ipynb")))


def class_times(cell_seconds: int = 30) -> None:
    """Grade the mixed class with 1 worker, then 2; then kill a run half-way and resume it."""
    from grader import settings
    from grader.batch import grade_folder

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        count = mixed_class(root)
        times, scores = [], []
        for workers in (1, 2):
            start = time.perf_counter()
            results, _ = grade_folder(root / "submitted", root, settings.load(cell_seconds, workers=workers),
                                      regrade=True, progress=False)
            times.append(time.perf_counter() - start)
            scores.append({(r.student, r.notebook): r.score for r in results})
        print(f"\nclass of {count} notebooks (honest, wrong, hostile, broken; all units):")
        print(f"  1 worker  {times[0]:6.1f} s ({times[0] / count:.1f} s per notebook)")
        print(f"  2 workers {times[1]:6.1f} s ({times[1] / count:.1f} s per notebook): speed-up x{times[0] / times[1]:.2f}; "
              f"scores {'identical' if scores[0] == scores[1] else 'DIFFERENT'}")

        command = [sys.executable, "-m", "grader", "grade", str(root / "submitted"), "--course-dir", str(root),
                   "--workers", "2", "--cell-timeout", str(cell_seconds), "--json"]
        stored = root / "grader_results"
        shutil.rmtree(stored)
        start = time.perf_counter()
        proc = subprocess.Popen(command + ["--regrade"], start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while len(list(stored.glob("*/*.json"))) < count // 2 and proc.poll() is None:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kept = {p: p.stat().st_mtime_ns for p in stored.glob("*/*.json")}
        out = subprocess.run(command, capture_output=True, text=True)
        total = time.perf_counter() - start
        resumed = {(r["student"], r["notebook"]): r["score"] for r in json.loads(out.stdout)}
        regraded = [p for p in stored.glob("*/*.json") if kept.get(p) != p.stat().st_mtime_ns]
        again = sum(p in kept for p in regraded)
        print(f"  killed after {len(kept)} notebooks were recorded, restarted: {len(regraded)} graded "
              f"({again} of them graded twice), {total:.1f} s in all; "
              f"scores {'identical' if resumed == scores[0] else 'DIFFERENT'}")


def main(units: list[str]) -> None:
    print(f"{'unit':22} {'slowest self-check':>30} {'grade reference':>18}")
    for unit in units:
        with redirect_stdout(StringIO()):
            times = selfcheck_times(unit)
        name, slowest = max(times.items(), key=lambda kv: kv[1]) if times else ("-", 0.0)
        seconds, score, max_score = grade_time(unit)
        print(f"{unit:22} {name[:18]:>18} {slowest * 1000:8.1f} ms {seconds:8.1f} s ({score:g}/{max_score:g})")
    class_times()


if __name__ == "__main__":
    main(sys.argv[1:] or course.units())
