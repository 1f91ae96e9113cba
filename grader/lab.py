"""The learner's JupyterLab: `./course lab [JupyterLab options]` runs `python -m grader.lab`.

Learners get the notebooks, their self-checks and nbgrader's Validate button. nbgrader's
instructor tools (Formgrader, Create Assignment, Course List) are hidden by the settings in
`lab/learner/`; its Assignment List is hidden too (`lab/alone/`) unless an nbgrader exchange
exists, as on a JupyterHub set up for a class, since without one it can only show errors.
The settings reach JupyterLab through JUPYTER_CONFIG_PATH, so the environment is not changed;
`lab/learner/nbgrader_config.py` gives Validate the course's nbgrader settings.

JupyterLab writes the kernel's description into a notebook it opens and marks the notebook
modified when that differs from the stored one, which holds the Python version: notebooks are
stored with the full description, and the launcher sets the version to this environment's.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat

from . import course

SETTINGS = course.ROOT / "lab"
FOLDER_OPTIONS = ("--notebook-dir", "--ServerApp.root_dir", "--ServerApp.notebook_dir", "--NotebookApp.notebook_dir")


def kernel_metadata() -> dict:
    """A notebook's metadata as this environment's Python 3 kernel (ipykernel) describes it."""
    from ipykernel.ipkernel import IPythonKernel

    return {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": dict(IPythonKernel.language_info)}


def align_kernel_metadata(folder: Path) -> list[Path]:
    """Give the course's notebooks in `folder` (<unit>/<unit>.ipynb) this kernel's description
    where only its Python version differs, so they open unmodified; returns those changed.
    Nothing else in a notebook changes; other notebooks, and files that are not plain
    nbformat JSON, are left alone."""
    want = kernel_metadata()["language_info"]
    changed = []
    for unit in course.units():
        path = folder / unit / f"{unit}.ipynb"
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
            info = nb["metadata"]["language_info"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if path.is_symlink() or info == want or {**info, "version": want["version"]} != want:
            continue
        nb["metadata"]["language_info"] = want
        tmp = path.with_name(f".{path.name}.tmp")
        nbformat.write(nbformat.from_dict(nb), tmp)
        tmp.replace(path)
        changed.append(path)
    return changed


def exchange_root() -> Path:
    """The nbgrader exchange as nbgrader's own tools find it: in the settings of the Jupyter
    config path and of the current folder (nbgrader's default: /usr/local/share/nbgrader/exchange)."""
    from nbgrader.apps import NbGrader
    from nbgrader.exchange.default.exchange import Exchange

    app = NbGrader()
    app.load_config_file()
    return Path(Exchange(config=app.config).root)


def config_path(exchange: Path) -> list[Path]:
    """The course's Jupyter config directories, first wins."""
    settings = [SETTINGS / "learner"]
    if not exchange.is_dir():
        settings.insert(0, SETTINGS / "alone")
    return settings


def split_folder(args: list[str]) -> tuple[Path, list[str]]:
    """The folder to serve (the learner's, as an absolute path, else the notebooks of the edition
    named first, `zh` or `en`, else notebooks/) and the learner's other JupyterLab arguments."""
    chosen, rest = course.NOTEBOOKS, []
    if args and args[0] in course.EDITIONS:
        chosen, args = course.EDITIONS[args[0]].notebooks, args[1:]
    values = iter(args)
    for arg in values:
        option, has_value, value = arg.partition("=")
        if option in FOLDER_OPTIONS:
            chosen = Path(value if has_value else next(values, ".")).expanduser().resolve()
        else:
            rest.append(arg)
    return chosen, rest


def main(args: list[str]) -> None:
    folder, rest = split_folder(args)
    if not folder.is_dir():
        sys.exit(f"course: {folder} is not a folder")
    os.chdir(folder)  # as nbgrader expects: its Assignment List fetches into the server's folder
    others = [os.environ["JUPYTER_CONFIG_PATH"]] if os.environ.get("JUPYTER_CONFIG_PATH") else []
    os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(SETTINGS / "learner"), *others])
    exchange = exchange_root()
    os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join([*map(str, config_path(exchange)), *others])
    if not exchange.is_dir():
        print(f"course: no nbgrader exchange at {exchange}: the Assignment List is hidden", flush=True)
    if align_kernel_metadata(folder):
        print(f"course: notebooks set to this environment's Python {sys.version.split()[0]}", flush=True)
    if hasattr(os, "getuid") and os.getuid() == 0 and "--allow-root" not in rest:
        rest.append("--allow-root")  # containers often run as root, which JupyterLab refuses untold
    os.execv(sys.executable, [sys.executable, "-m", "jupyter", "lab", f"--notebook-dir={folder}", *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
