"""`attention-course` (or `python -m attention_course`): the learner's commands, on any system.

    attention-course lab [zh] [--dir DIR] [JupyterLab options]   copy the notebooks, open JupyterLab
    attention-course copy [zh] [--dir DIR]                        only copy (or update) the notebooks
    attention-course progress [zh] [--dir DIR]                    which exercises pass, unit by unit

`progress` reads the record the self-checks keep in the working folder: the current folder's, else
that of the folder `lab` works in (see workspace.record_folders). The launcher's own messages are
in the edition's language.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.checks import i18n
from grader.checks.i18n import say

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
    progress = commands.add_parser(
        "progress", help="which exercises pass, unit by unit", usage="attention-course progress [zh] [--dir DIR]",
        description="which exercises pass, unit by unit. zh: the Chinese edition's folder, 中文版.")
    progress.add_argument("--dir", type=Path, help="your working folder (default: the current one if it holds "
                                                   "a record, else the one `attention-course lab` works in)")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, str | None, Path | None, list[str]]:
    """The command's arguments, its edition ("en" unless named; for `progress`, None unless
    named), a folder named with JupyterLab's own option (served as it is), and the options that
    go to JupyterLab."""
    served, rest = lab.split_folder(argv)
    language = None
    if len(rest) > 1 and rest[0] in ("lab", "copy", "progress") and rest[1] in content.EDITIONS:
        language = rest.pop(1)
    if language is None and rest[:1] != ["progress"]:
        language = "en"
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
    if args.command == "progress":
        return show_progress(args.dir, language)
    with i18n.language(language):
        return _lab_or_copy(args, language, served, options)


def _lab_or_copy(args: argparse.Namespace, language: str, served: Path | None, options: list[str]) -> int:
    from grader.checks.progress import progress_file

    if served is None:
        folder = workspace.prepare(language, args.dir)
    elif served.is_dir():
        folder = served   # a folder named with JupyterLab's own option is served as it is
    else:
        sys.exit(workspace.PREFIX + say("{folder} is not a folder", folder=served))
    if args.command == "copy":
        return 0
    first = f"{content.units()[0]}/{content.units()[0]}.ipynb"
    start_at = first if (folder / first).is_file() and not progress_file(folder).exists() else None
    return lab.open_lab(folder, language, options, start_at)


def show_progress(folder: Path | None, language: str | None) -> int:
    """Print the record of `folder`, or each record found where workspace.record_folders looks,
    in the language the self-checks spoke (or the edition's, when named); 1 when there is none."""
    from grader.checks.progress import FILE, progress_file, recorded_language, report

    looked = [folder] if folder is not None else workspace.record_folders(language)
    records = list(dict.fromkeys(progress_file(f).resolve() for f in looked))
    found = [record for record in records if record.is_file()]
    if not found:
        with i18n.language(language or "en"):
            print(say("No record of progress here: the self-checks keep it in {file}, in the folder that "
                      "`attention-course lab` works in, and none is in {folders}. Name that folder with --dir.",
                      file=FILE, folders=", ".join(str(r.parent) for r in records)))
        return 1
    for number, record in enumerate(found):
        with i18n.language(language or recorded_language(record.parent) or "en"):
            print(("\n" if number else "") + say("Progress kept in {file}:", file=record))
            print(report(record.parent))
    return 0
