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
    for name, text, more in (("lab", "copy the notebooks into your folder and open them in JupyterLab",
                              " [JupyterLab options, e.g. --port 8890]"),
                             ("copy", "copy the notebooks into your folder (never over your own work)", "")):
        # The edition is taken off the arguments before they are parsed (see main), since
        # JupyterLab's options may take values ("--port 8890") that argparse cannot tell apart.
        command = commands.add_parser(name, help=text, usage=f"attention-course {name} [zh] [--dir DIR]{more}",
                                      description=f"{text}. zh: the Chinese edition, 中文版.")
        command.add_argument("--dir", type=Path, help="your working folder")
    progress = commands.add_parser("progress", help="which exercises pass, unit by unit")
    progress.add_argument("--dir", type=Path, help="your working folder (default: the current one)")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, str, Path | None, list[str]]:
    """The command's arguments, its edition, a folder named with JupyterLab's own option (served
    as it is), and the options that go to JupyterLab."""
    served, rest = lab.split_folder(argv)
    language = "en"
    if len(rest) > 1 and rest[0] in ("lab", "copy") and rest[1] in content.EDITIONS:
        language = rest.pop(1)
    parser = _parser()
    args, options = parser.parse_known_args(rest)
    if args.command != "lab" and (options or served):
        parser.error(f"unrecognized arguments: {' '.join(options) or '--notebook-dir'}")
    return args, language, served, options


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):   # a console that cannot show ✓ (GBK, cp1252) gets "?" for it
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    args, language, served, options = parse(sys.argv[1:] if argv is None else argv)
    from grader.progress import progress_file, report

    if args.command == "progress":
        print(report(args.dir))
        return 0
    if served is None:
        folder = workspace.prepare(language, args.dir)
    elif served.is_dir():
        folder = served   # a folder named with JupyterLab's own option is served as it is
    else:
        sys.exit(f"course: {served} is not a folder")
    if args.command == "copy":
        return 0
    first = f"{content.units()[0]}/{content.units()[0]}.ipynb"
    start_at = first if (folder / first).is_file() and not progress_file(folder).exists() else None
    return lab.open_lab(folder, language, options, start_at)
