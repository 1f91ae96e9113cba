"""python -m grader: release the course, grade notebooks, report to the class."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import course


def _release(args) -> int:
    from .release import release

    problems = release(check=args.check, units=args.units or None)
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.check:
        print("in sync" if not problems else f"{len(problems)} problem(s): run `python -m grader release`")
    else:
        print("released: " + ", ".join(args.units or course.units()) if not problems else "release failed")
    return 1 if problems else 0


def _grade(args) -> int:
    path = Path(args.path)
    if not path.exists():
        print(f"no such file or folder: {path}", file=sys.stderr)
        return 2
    if path.is_file():
        from .grade import grade_notebook

        result = grade_notebook(path, args.unit, cell_timeout=args.cell_timeout)
        result.pop("executed", None)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(_summary(result))
        return 0
    from .batch import grade_folder, table

    course_root = Path(args.course_dir) if args.course_dir else path.resolve().parent
    results = grade_folder(path, course_root, jobs=args.jobs, cell_timeout=args.cell_timeout)
    for result in results:
        result.pop("executed", None)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(table(results))
        print(f"\ngradebook: {course_root / 'gradebook.db'}\nfeedback:  {course_root / 'feedback'}\n"
              f"grades:    {course_root / 'grades.csv'}")
    if args.plot:
        from .report import plot

        plot(results, Path(args.plot))
        print(f"plot:      {args.plot}")
    return 0


def _summary(result: dict) -> str:
    lines = [f"{result['notebook']} ({result['unit']}): {result['score']:g}/{result['max_score']:g}"]
    if result["error"]:
        lines.append(f"  error: {result['error']}")
    for flag in result["flags"]:
        lines.append(f"  note: {flag}")
    for e in result["exercises"]:
        mark = "\u2713" if e["passed"] else "\u2717"
        lines.append(f"  {mark} {e['grade_id']} {e['points']:g}/{e['max_points']:g}"
                     + ("" if e["passed"] else f"  {e['feedback']}"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="regenerate notebooks/ and the self-check fixtures from solutions/")
    p.add_argument("--check", action="store_true", help="only report whether they are in sync")
    p.add_argument("units", nargs="*", help="units to release (default: all)")
    p.set_defaults(func=_release)

    p = sub.add_parser("grade", help="grade a notebook, or a folder laid out as submitted/<student>/<unit>/")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--unit", help="the unit of a single notebook (default: found from the notebook)")
    p.add_argument("--course-dir", help="where the gradebook, autograded/, feedback/ and grades.csv go "
                                        "(default: the folder that holds PATH)")
    p.add_argument("--jobs", type=int, default=2, help="notebooks graded at once (default: 2)")
    p.add_argument("--plot", help="also save a class report plot to this PNG file")
    p.add_argument("--cell-timeout", type=int, default=60, help="seconds a cell may run (default: 60)")
    p.set_defaults(func=_grade)

    args = parser.parse_args(argv)
    return args.func(args)
