"""Benchmark of the Chinese edition: does each Chinese notebook run top to bottom in the time of
its English twin?

    python benchmarks/bench_editions.py                     # every unit, 3 rounds, grading's short runs
    python benchmarks/bench_editions.py 01_dot_product 08_tiny_gpt --rounds 5
    python benchmarks/bench_editions.py --full              # the learner's full runs (unit 08 trains for minutes)

Each unit's reference notebook (solutions/ and solutions-zh/: the answers, the self-checks and
the hidden tests) runs in a fresh kernel with nbclient, English and Chinese in alternating
rounds of one run (the order flips every round). By default NBGRADER_EXECUTION is set, so
training cells take the short configuration the grader uses. It prints the median seconds of
each and their ratio, Chinese / English.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader import course  # noqa: E402


def run_once(path: Path) -> float:
    """Seconds to execute the notebook at `path` top to bottom in a fresh kernel."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("units", nargs="*", help="units to time (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="the learner's full runs, not grading's short ones")
    args = parser.parse_args()
    if args.full:
        os.environ.pop("NBGRADER_EXECUTION", None)
    else:
        os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.pop("COURSE_LANG", None)
    print(f"{'unit':<22} {'English s':>10} {'Chinese s':>10} {'zh / en':>8}   rounds (en, zh)")
    ratios = []
    for unit in args.units or course.units():
        times: dict[str, list[float]] = {"en": [], "zh": []}
        for round_ in range(args.rounds):
            for language in (("en", "zh") if round_ % 2 == 0 else ("zh", "en")):
                times[language].append(run_once(course.source_notebook(unit, language)))
        en, zh = statistics.median(times["en"]), statistics.median(times["zh"])
        ratios.append(zh / en)
        rounds = ", ".join(f"({a:.1f}, {b:.1f})" for a, b in zip(times["en"], times["zh"]))
        print(f"{unit:<22} {en:>10.1f} {zh:>10.1f} {zh / en:>8.3f}   {rounds}", flush=True)
    print(f"median ratio over {len(ratios)} unit(s): {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
