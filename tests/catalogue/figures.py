"""What the self-checks say about every catalogued mistake, per unit and edition.

    .venv/bin/python tests/catalogue/figures.py              # every unit
    .venv/bin/python tests/catalogue/figures.py 06_multi_head

A "tick" passes a wrong answer; "named" gives the mistake's own message; "values differ" gives
only the generic message; "other" fails with another message. Mistakes whose entry says why the
self-check cannot show them (`selfcheck_misses`) are counted apart.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS.parent), str(TESTS)]

import catalogue  # noqa: E402
from catalogue.verdicts import EDITIONS, entries, selfcheck_outcome  # noqa: E402

COLUMNS = ("tick", "named", "values differ", "other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("units", nargs="*", help="units to count (default: all)")
    parser.add_argument("--list", action="store_true", help="also list the mistakes not named")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    counts: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    unnamed = []
    for unit, entry in entries():
        if not isinstance(entry, catalogue.Mistake) or (args.units and unit not in args.units):
            continue
        for edition in EDITIONS:
            if entry.selfcheck_misses:
                counts[unit, edition]["excused"] += 1
                continue
            with contextlib.redirect_stdout(io.StringIO()):   # the ticks and progress lines
                result = selfcheck_outcome(unit, entry, edition)
            counts[unit, edition][result.outcome] += 1
            if result.outcome != "named":
                unnamed.append(f"{unit} {edition} {result.outcome}: {entry.name} {result.messages[:1]}")

    header = f"{'unit':<22}{'edition':<9}" + "".join(f"{c:>15}" for c in (*COLUMNS, "excused"))
    print(header)
    total: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for (unit, edition), counter in sorted(counts.items()):
        total[edition].update(counter)
        print(f"{unit:<22}{edition:<9}" + "".join(f"{counter[c]:>15}" for c in (*COLUMNS, "excused")))
    for edition, counter in sorted(total.items()):
        print(f"{'all':<22}{edition:<9}" + "".join(f"{counter[c]:>15}" for c in (*COLUMNS, "excused")))
    if args.list:
        print("\n".join(unnamed))


if __name__ == "__main__":
    main()
