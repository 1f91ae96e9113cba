"""How fast the learner's self-checks and the grader are, on this machine, and where the
grader's time goes.

    python benchmarks/bench_grading.py [UNIT ...] [--rounds N] [--skip-cli] [--skip-class] [--skip-forty]

Both ways a kernel can start: forked from the worker's warm template (grader.grading.template,
the default) and cold (COURSE_GRADER_KERNELS=cold, as where forking cannot be used).

1. Per unit: the slowest self-check (median of 5 runs, with the reference answers), then the
   grading of the reference notebook in a process that has already graded one (as a grading
   worker does), median of --rounds runs, step by step, wall and CPU seconds:
   pre-flight; starting the sandbox (bubblewrap and the runner); the kernel's start; the
   notebook's own imports, which the kernel does before the notebook arrives, while the grader
   makes the hidden checks' inputs; the notebook's cells, its self-checks and the hidden checks'
   calls; judging here; the autograded copy; the gradebook; the feedback report. The fixed cost
   is everything but the notebook's own imports and cells.
2. The command line against plain nbgrader on unit 01's reference submission, in alternating
   rounds of one run: `python -m grader grade X.ipynb --json` (sandboxed, verdicts outside)
   against `nbgrader autograde` (learner code and tests in one process), with the ratio of each
   round; and the start-up of the grader's own process.
3. A class of 21 notebooks across all units (honest, wrong, hostile, broken) graded with one
   worker and with two, in --class-rounds alternating rounds of one run (wall times, speed-up,
   whether the scores are identical), and the same class killed half-way and resumed.
4. A class of 40 unit-01 notebooks graded with 2 workers, kernels forked against kernels cold,
   alternating, median of --rounds: the throughput of each and its ratio.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import nbformat  # noqa: E402
from reference import answers, reference_namespace, student_notebook  # noqa: E402

from grader import course, notebook  # noqa: E402
from grader.checks.selfcheck import check  # noqa: E402
from grader.fixtures import FOLDER as FIXTURES  # noqa: E402
from grader.grading import gradebook  # noqa: E402
from grader.grading.feedback import Feedback  # noqa: E402
from grader.grading.grade import grade_notebook  # noqa: E402
from grader.grading.stopwatch import Step, Stopwatch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_OWN = ("the notebook's imports", "cells", "self-checks", "hidden checks' calls")


def selfcheck_times(unit: str) -> dict[str, float]:
    namespace = reference_namespace(unit)
    names = [name for name in json.loads((FIXTURES / f"{unit}.json").read_text(encoding="utf-8"))
             if " #" not in name]   # "name #2": a further check that check(name) runs too
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


@contextlib.contextmanager
def kernels(way: str):
    """Kernels started `way` ("forked" or "cold") in this process and the processes it starts."""
    before = os.environ.get("COURSE_GRADER_KERNELS")
    os.environ["COURSE_GRADER_KERNELS"] = way
    try:
        yield
    finally:
        if before is None:
            del os.environ["COURSE_GRADER_KERNELS"]
        else:
            os.environ["COURSE_GRADER_KERNELS"] = before


def breakdown(unit: str, rounds: int) -> tuple[list[Step], float, str]:
    """The median of each step of grading `unit`'s reference notebook over `rounds` runs (after
    one run that loads what a grading worker keeps), the median total, and the score."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "submitted" / "s" / unit / f"{unit}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(student_notebook(unit), path)
        db = f"sqlite:///{root / 'gradebook.db'}"
        gradebook.register_units([unit], root, db)
        feedback = Feedback(root, db)
        autograded = root / "autograded" / "s" / unit / f"{unit}.ipynb"
        runs, totals = [], []
        for k in range(rounds + 1):
            watch = Stopwatch()
            start = time.perf_counter()
            result = grade_notebook(path, unit, student="s", autograded=autograded, stopwatch=watch)
            with watch.step("gradebook"):
                gradebook.record(result, db)
            with watch.step("feedback report"):
                feedback.write(result, autograded)
            if k:
                runs.append(_steps(watch))
                totals.append(time.perf_counter() - start)
    names = list(runs[0])
    steps = [Step(name, statistics.median(r[name].wall for r in runs), statistics.median(r[name].cpu for r in runs))
             for name in names]
    return steps, statistics.median(totals), f"{result.score:g}/{result.max_score:g}"


def _steps(watch: Stopwatch) -> dict[str, Step]:
    """The grader's steps in the order they happen, the sandbox run split into the parts its
    runner recorded. The inputs of the hidden checks are made here while the sandbox starts, so
    their time is not added to the total; the sandbox's CPU is the runner's and the kernel's."""
    own = {step.name: step for step in watch.steps}
    t, start, inputs, run = watch.sandbox, own["sandbox start"], own["inputs of the hidden checks"], own["sandbox run"]
    handed_over = t.started + start.wall + inputs.wall
    cells = {role: Step(role, sum(c[1] for c in t.cells if c[0] == role), sum(c[2] for c in t.cells if c[0] == role))
             for role in ("cell", "self-check", "calls")}
    steps = [own["pre-flight"],
             Step("sandbox and runner start", t.runner - t.started, start.cpu),
             Step("kernel start", t.kernel - t.runner, t.kernel_start_cpu),
             Step("the notebook's imports", t.warm - t.kernel, t.kernel_warm_cpu - t.kernel_start_cpu),
             Step("(inputs of the hidden checks)", inputs.wall, inputs.cpu),
             Step("waiting for the grader", max(0.0, t.notebook - t.warm), 0.0),
             Step("cells", cells["cell"].wall, cells["cell"].cpu),
             Step("self-checks", cells["self-check"].wall, cells["self-check"].cpu),
             Step("hidden checks' calls", cells["calls"].wall, cells["calls"].cpu),
             Step("runner's CPU, whole run", 0.0, t.runner_cpu),
             Step("end of the sandbox", max(0.0, handed_over + run.wall - t.ended), run.cpu),
             *(own[name] for name in own if name not in ("pre-flight", "sandbox start", "inputs of the hidden checks",
                                                        "sandbox run"))]
    return {step.name: step for step in steps}


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


def _busy_seconds() -> float:
    """CPU seconds this machine's cores have been busy since it started, all processes (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]   # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def class_times(rounds: int = 1, cell_seconds: int = 30) -> None:
    """Grade the mixed class with 1 worker and with 2, in `rounds` alternating rounds (the order
    swapped each round); then kill a run half-way and resume it."""
    from grader.grading import settings
    from grader.grading.batch import grade_folder

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        count = mixed_class(root)
        times: dict[int, list[float]] = {1: [], 2: []}
        cores: dict[int, list[float]] = {1: [], 2: []}
        scores = []
        for k in range(rounds):
            for workers in ((1, 2) if k % 2 == 0 else (2, 1)):
                start, busy = time.perf_counter(), _busy_seconds()
                results, _ = grade_folder(root / "submitted", root, settings.load(cell_seconds, workers=workers),
                                          regrade=True, progress=False)
                times[workers].append(time.perf_counter() - start)
                cores[workers].append((_busy_seconds() - busy) / times[workers][-1])
                scores.append({(r.student, r.notebook): r.score for r in results})
        one, two = statistics.median(times[1]), statistics.median(times[2])
        ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(times[1], times[2]))
        print(f"\nclass of {count} notebooks (honest, wrong, hostile, broken; all units), {rounds} round(s), medians:")
        print(f"  1 worker  {one:6.1f} s ({one / count:.1f} s per notebook), "
              f"{statistics.median(cores[1]):.2f} cores busy on average")
        print(f"  2 workers {two:6.1f} s ({two / count:.1f} s per notebook): speed-up x{one / two:.2f} (per round: "
              f"{ratios}), {statistics.median(cores[2]):.2f} cores busy; "
              f"scores {'identical' if all(s == scores[0] for s in scores) else 'DIFFERENT'}")

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


def forty(rounds: int, workers: int = 2, count: int = 40) -> None:
    """A class of `count` unit-01 reference notebooks, graded with `workers` workers, kernels
    forked against cold, in alternating rounds."""
    from grader.grading import settings
    from grader.grading.batch import grade_folder

    unit = "01_dot_product"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for k in range(count):
            path = root / "submitted" / f"s{k:02}" / unit / f"{unit}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(student_notebook(unit), path)
        times: dict[str, list[float]] = {"forked": [], "cold": []}
        for k in range(rounds):
            for way in (("forked", "cold") if k % 2 == 0 else ("cold", "forked")):
                with kernels(way):
                    start = time.perf_counter()
                    results, _ = grade_folder(root / "submitted", root, settings.load(30, workers=workers),
                                              regrade=True, progress=False)
                    times[way].append(time.perf_counter() - start)
                assert all(r.score == r.max_score for r in results) and len(results) == count
                assert all(way in r.sandbox.splitlines()[-1] for r in results), results[0].sandbox
    forked, cold = statistics.median(times["forked"]), statistics.median(times["cold"])
    print(f"\na class of {count} {unit} notebooks, {workers} workers, {rounds} alternating round(s), medians:")
    print(f"  kernels forked {forked:6.1f} s ({count / forked * 60:5.1f} notebooks a minute)")
    print(f"  kernels cold   {cold:6.1f} s ({count / cold * 60:5.1f} notebooks a minute)")
    print(f"  throughput, forked / cold: x{cold / forked:.2f} (per round: "
          f"{', '.join(f'{c / f:.2f}' for f, c in zip(times['forked'], times['cold']))})")


def cli_against_nbgrader(rounds: int, warm_worker: dict[str, float]) -> None:
    """`python -m grader grade` against `nbgrader autograde` on unit 01's reference submission,
    alternating, each round in fresh processes; and the grader process's own start-up."""
    unit = "01_dot_product"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "submitted" / "s" / unit / f"{unit}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(student_notebook(unit), path)
        folders = [f"--CourseDirectory.root={root}", f"--CourseDirectory.source_directory={course.SOLUTIONS}",
                   f"--CourseDirectory.release_directory={root / 'release'}"]
        nbgrader = [str(Path(sys.executable).parent / "nbgrader")]
        subprocess.run(nbgrader + ["generate_assignment", unit, "--force", *folders], cwd=ROOT, check=True,
                       capture_output=True)
        grade = [sys.executable, "-m", "grader", "grade", str(path), "--json"]
        commands = {"grader": grade, "grader, cold": grade,
                    "nbgrader": nbgrader + ["autograde", unit, "--force", *folders],
                    "imports": [sys.executable, "-c",
                                "import grader.cli, grader.grading.grade, grader.grading.sandbox"]}
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(rounds):
            for name, command in commands.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                way = "cold" if name.endswith("cold") else "forked"
                done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                      env={**os.environ, "COURSE_GRADER_KERNELS": way})
                times[name].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                if done.returncode != 0:
                    raise RuntimeError(f"{name} failed: {done.stderr[-500:]}")
                if name.startswith("grader"):
                    result = json.loads(done.stdout)
                    assert result["score"] == result["max_score"], result
                    assert ("forked" in result["sandbox"]) == (way == "forked"), result["sandbox"]
    ratios = [g / n for g, n in zip(times["grader"], times["nbgrader"])]
    print(f"\n{unit}, reference submission, {rounds} alternating rounds (median wall; CPU of the process tree):")
    for name, label in (("grader", "python -m grader grade X --json"),
                        ("grader, cold", "  the same, kernels started cold"), ("nbgrader", "nbgrader autograde"),
                        ("imports", "the grader's start-up (imports)")):
        print(f"  {label:34} {statistics.median(times[name]):6.2f} s  (CPU {statistics.median(cpu[name]):5.2f} s)")
    nb = statistics.median(times["nbgrader"])
    print(f"  grader / nbgrader: x{statistics.median(times['grader']) / nb:.2f} "
          f"(per round: {', '.join(f'{r:.2f}' for r in ratios)}); kernels cold: "
          f"x{statistics.median(times['grader, cold']) / nb:.2f}")
    for way, seconds in warm_worker.items():   # a grading worker's second and later notebooks
        print(f"  one notebook in a grading worker, kernels {way}: {seconds:.2f} s, x{seconds / nb:.2f} of nbgrader")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("units", nargs="*", help="units to measure (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--skip-cli", action="store_true", help="skip the command line against nbgrader")
    parser.add_argument("--skip-class", action="store_true", help="skip the mixed class")
    parser.add_argument("--skip-forty", action="store_true", help="skip the class of 40 unit-01 notebooks")
    parser.add_argument("--class-rounds", type=int, default=1, help="alternating rounds of the class (1 and 2 workers)")
    args = parser.parse_args()
    units = args.units or course.units()
    totals: dict[str, dict[str, float]] = {"forked": {}, "cold": {}}
    for unit in units:
        with redirect_stdout(StringIO()), redirect_stderr(StringIO()):   # the reference's plots and bars
            times = selfcheck_times(unit)
        name, slowest = max(times.items(), key=lambda kv: kv[1]) if times else ("-", 0.0)
        print(f"\n{unit}: slowest self-check {name} {slowest * 1000:.1f} ms")
        for way in ("forked", "cold"):
            with kernels(way):
                steps, total, score = breakdown(unit, args.rounds)
            totals[way][unit] = total
            own = sum(step.wall for step in steps if step.name in NOTEBOOK_OWN)
            counted = [step for step in steps if not step.name.startswith("(")]
            print(f"  kernels {way}: graded {score} in {total:.2f} s (median of {args.rounds}, a worker's process); "
                  f"fixed cost {total - own:.2f} s, the notebook's own imports and cells {own:.2f} s")
            for step in steps:
                print(f"    {step.name:32} {step.wall:6.2f} s wall {step.cpu:6.2f} s CPU")
            print(f"    {'(sum of the steps)':32} {sum(step.wall for step in counted):6.2f} s")
    if len(units) > 1:
        for way, per_unit in totals.items():
            print(f"\nmedian wall per unit, kernels {way}: "
                  + ", ".join(f"{u[:2]} {t:.2f} s" for u, t in per_unit.items()))
    if not args.skip_cli:
        cli_against_nbgrader(args.rounds, {way: t["01_dot_product"] for way, t in totals.items()
                                           if "01_dot_product" in t})
    if not args.skip_forty:
        forty(args.rounds)
    if not args.skip_class:
        class_times(args.class_rounds)


if __name__ == "__main__":
    main()
