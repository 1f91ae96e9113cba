"""`attention-course` (or `python -m attention_course`): the learner's commands, on any system.

    attention-course lab [zh] [--dir DIR] [JupyterLab options]   copy the notebooks, open JupyterLab
    attention-course copy [zh] [--dir DIR]                        only copy (or update) the notebooks
    attention-course progress [--dir DIR]                         which exercises pass, unit by unit
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import content, lab, workspace


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attention-course", description="The attention course: from the dot product to a tiny GPT.",
        epilog="In a clone of the course's repository the notebooks are edited where they are, and --dir is "
               "optional; otherwise they are copied into ./attention-course (./attention-course-zh).")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("lab", "copy the notebooks into your folder and open them in JupyterLab"),
                       ("copy", "copy the notebooks into your folder (never over your own work)")):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument("language", nargs="?", choices=sorted(content.EDITIONS), default="en",
                             help="the edition: en (default) or zh, 中文版")
        command.add_argument("--dir", type=Path, help="your working folder")
    progress = commands.add_parser("progress", help="which exercises pass, unit by unit")
    progress.add_argument("--dir", type=Path, help="your working folder (default: the current one)")
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):   # a console that cannot show ✓ (GBK, cp1252) gets "?" for it
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    served, rest = lab.split_folder(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args, options = parser.parse_known_args(rest)
    if args.command != "lab" and (options or served):
        parser.error(f"unrecognized arguments: {' '.join(options) or '--notebook-dir'}")
    from grader.progress import progress_file, report

    if args.command == "progress":
        print(report(args.dir))
        return 0
    if served is None:
        folder = workspace.prepare(args.language, args.dir)
    elif served.is_dir():
        folder = served   # a folder named with JupyterLab's own option is served as it is
    else:
        sys.exit(f"course: {served} is not a folder")
    if args.command == "copy":
        return 0
    first = f"{content.units()[0]}/{content.units()[0]}.ipynb"
    start_at = first if (folder / first).is_file() and not progress_file(folder).exists() else None
    return lab.open_lab(folder, args.language, options, start_at)
