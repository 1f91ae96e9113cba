"""python -m grader: release the course, grade notebooks, report to the class."""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from pathlib import Path

from . import course
from .grading.submissions import ShardError, chosen_shard, parse_shard


def _release(args) -> int:
    from .authoring.release import release

    problems = release(check=args.check, units=args.units or None)
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.check:
        print("in sync" if not problems else f"{len(problems)} problem(s): run `python -m grader release`")
    else:
        print("released: " + ", ".join(args.units or course.units())
              + (f", with {len(problems)} problem(s) listed above (a text to translate: see "
                 "tools/translations.py)" if problems else ""))
    return 1 if problems else 0


def _grade(args) -> int:
    from .grading import sandbox, settings

    path = Path(args.path)
    if not path.exists():
        print(f"no such file or folder: {path}", file=sys.stderr)
        return 2
    if args.unit and args.unit not in course.units():
        print(f"unknown unit {args.unit!r}; the course's units are: {', '.join(course.units())}", file=sys.stderr)
        return 2
    if path.is_file():
        sandbox.warm_up()   # the kernels' template does its imports while this process does its own
    config = settings.load(cell_seconds=args.cell_timeout, notebook_seconds=args.notebook_timeout,
                           workers=args.workers, db_url=args.db)
    shard = None
    if path.is_dir():
        try:
            chosen = chosen_shard(args.shard, os.environ)
        except ShardError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if chosen:
            shard, source = chosen
            print(f"grading shard {shard[0]}/{shard[1]} of the students, from {source}", file=sys.stderr)
    jail = sandbox.confinement()
    if not jail.command:
        rule = "WARNING: " + "!" * 70
        print("\n".join([rule, *("WARNING: " + line for line in jail.description.splitlines()), rule]),
              file=sys.stderr)
    if path.is_file():
        from .grading.grade import grade_notebook

        result = grade_notebook(path, args.unit, config.limits)
        print(json.dumps(result.to_json(), indent=2) if args.json else _summary(result))
        return 0
    from .grading.batch import grade_folder, table

    course_root = Path(args.course_dir) if args.course_dir else path.resolve().parent
    if course_root.is_dir() and course_root.stat().st_mode & stat.S_ISGID:
        os.umask(os.umask(0) & ~0o070)   # a teaching team's folder (hub.team_course): what grading writes stays theirs
    results, graded_now = grade_folder(path, course_root, config, shard=shard, regrade=args.regrade,
                                       progress=not args.json)
    if args.report:
        from .grading.report import write_report

        write_report(results, Path(args.report))
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
        return 0
    print(table(results))
    skipped = len(results) - graded_now
    print(f"\ngraded {graded_now} notebook(s)" + (f", {skipped} already graded (--regrade grades them again)"
                                                   if skipped else ""))
    print(f"gradebook: {config.gradebook_url(course_root)}\nfeedback:  {course_root / 'feedback'}\n"
          f"grades:    {course_root / 'grades.csv'}")
    if args.report:
        print(f"report:    {args.report}")
    return 0


def _summary(result) -> str:
    lines = [f"{result.notebook} ({result.unit}): "
             + ("not graded" if result.regrade else f"{result.score:g}/{result.max_score:g}")]
    if result.regrade:
        lines.append(f"  {result.regrade}")
    if result.error:
        lines.append(f"  error: {result.error}")
    lines += [f"  note: {flag}" for flag in result.flags]
    for e in result.exercises:
        mark = "\u2713" if e.passed else "\u2717"
        lines.append(f"  {mark} {e.grade_id} {e.points:g}/{e.max_points:g}" + ("" if e.passed else f"  {e.feedback}"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="regenerate notebooks/, the self-check fixtures and the Chinese edition "
                                        "(solutions-zh/, notebooks-zh/) from solutions/ and translations/")
    p.add_argument("--check", action="store_true", help="only report whether they are in sync")
    p.add_argument("units", nargs="*", help="units to release (default: all)")
    p.set_defaults(func=_release)

    p = sub.add_parser("grade", help="grade a notebook, or a class laid out as submitted/<student>/<unit>/")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--unit", help="the unit of a single notebook (default: found from the notebook)")
    p.add_argument("--course-dir", help="where the gradebook, autograded/, feedback/, grader_results/ and "
                                        "grades.csv go (default: the folder that holds PATH)")
    p.add_argument("--db", help="the gradebook's database URL, e.g. postgresql://user@host/course "
                                "(default: nbgrader_config.py's db_url, else COURSE_DIR/gradebook.db)")
    p.add_argument("--workers", type=int, help="notebooks graded at once (default: the number of cores)")
    p.add_argument("--shard", type=parse_shard, help="K/N: grade only the K-th of N shares of the students (one per "
                                                "machine, all writing to one --db); N alone: K from the scheduler "
                                                "(a SLURM job array's task, a Kubernetes Indexed Job's "
                                                "JOB_COMPLETION_INDEX); no --shard inside a SLURM job array: K and "
                                                "N from the array")
    p.add_argument("--regrade", action="store_true", help="grade again notebooks already graded and unchanged")
    p.add_argument("--report", help="also write a class report (self-contained HTML) to this file")
    p.add_argument("--cell-timeout", type=int, help="seconds a cell may run (default: nbgrader_config.py's "
                                                    "Execute.timeout)")
    p.add_argument("--notebook-timeout", type=int, help="seconds a whole notebook may run (default: 900)")
    p.set_defaults(func=_grade)

    p = sub.add_parser("hub", add_help=False, help="a class on one machine: start JupyterHub (hub [zh] [--port N]), "
                                                   "or make its accounts (hub add NAME ... [--instructor])")
    p.set_defaults(func=None)

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["hub"]:
        from .classroom.hub import main as hub

        return hub(argv[1:])
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except course.CourseMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
