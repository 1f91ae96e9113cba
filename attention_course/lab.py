"""The learner's JupyterLab: the notebooks, their self-checks and nbgrader's Validate button.

nbgrader's instructor tools (Formgrader, Create Assignment, Course List) are hidden by the settings
in lab/learner/; its Assignment List is hidden too (lab/alone/) unless an nbgrader exchange exists,
as on a JupyterHub set up for a class, since without one it can only show errors. These settings
reach JupyterLab through JUPYTER_CONFIG_PATH, so nothing in the learner's environment or home
folder is changed. Two more are given to the server as it starts, since they are paths:
lab/learner/custom/custom.css lets long messages wrap in Validate's dialog, and lab/zh/ holds the
default settings of the Chinese edition (JupyterLab's menus in Chinese; a learner who picks
another language in Settings ▸ Language keeps their choice).

The server runs with this environment's scripts folder first on PATH, so that its terminals and
notebooks find `attention-course`, `jupyter` and `nbgrader` even when the learner started the lab
without activating the environment (`course-env/bin/attention-course lab`); lab/learner's
jupyter_server_config.py keeps the terminals from starting a login shell, which would set PATH
anew from the system's profile.
"""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from grader.checks.i18n import say

from . import content
from .workspace import PREFIX

FOLDER_OPTIONS = ("--notebook-dir", "--ServerApp.root_dir", "--ServerApp.notebook_dir", "--NotebookApp.notebook_dir")


def exchange_root() -> Path | None:
    """The nbgrader exchange as nbgrader's own tools find it (in the Jupyter config path and the
    current folder; nbgrader's default is /usr/local/share/nbgrader/exchange); None without nbgrader."""
    try:
        from nbgrader.apps import NbGrader
        from nbgrader.exchange.default.exchange import Exchange
    except ImportError:
        return None
    app = NbGrader()
    app.load_config_file()
    return Path(Exchange(config=app.config).root)


def config_path(exchange: Path | None) -> list[Path]:
    """The course's Jupyter config directories, first wins."""
    settings = content.lab_settings()
    path = [settings / "learner"]
    if exchange is None or not exchange.is_dir():
        path.insert(0, settings / "alone")
    return path


def server_settings(language: str) -> tuple[list[str], dict]:
    """The course's options that are paths: JupyterLab's default settings of an edition, and the
    stylesheet, whose folder (static_custom_path) the server takes only as it is made."""
    settings = content.lab_settings()
    options = [f"--LabApp.app_settings_dir={settings / language}"] if language != "en" else []
    from jupyter_core.paths import jupyter_config_dir

    custom = [str(settings / "learner" / "custom"), str(Path(jupyter_config_dir()) / "custom")]
    return options, {"static_custom_path": custom}


def scripts_first(path: str) -> str:
    """A PATH with the folder of this Python's scripts (where `attention-course` is) first, and
    nowhere else."""
    scripts = sysconfig.get_path("scripts")
    return os.pathsep.join([scripts, *(p for p in path.split(os.pathsep) if p and p != scripts)])


def split_folder(args: list[str]) -> tuple[Path | None, list[str]]:
    """A folder the learner named with JupyterLab's own options (served as it is), and the other options."""
    chosen, rest = None, []
    values = iter(args)
    for arg in values:
        option, has_value, value = arg.partition("=")
        if option in FOLDER_OPTIONS:
            chosen = Path(value if has_value else next(values, ".")).expanduser().resolve()
        else:
            rest.append(arg)
    return chosen, rest


def open_lab(folder: Path, language: str, options: list[str], start_at: str | None = None) -> int:
    """Run JupyterLab on `folder` with the course's settings until the learner stops it (Ctrl+C)."""
    from jupyterlab.labapp import LabApp

    os.chdir(folder)  # as nbgrader expects: its Assignment List fetches into the server's folder
    others = [os.environ["JUPYTER_CONFIG_PATH"]] if os.environ.get("JUPYTER_CONFIG_PATH") else []
    os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(content.lab_settings() / "learner"), *others])
    exchange = exchange_root()
    os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join([*map(str, config_path(exchange)), *others])
    if exchange is not None and not exchange.is_dir():
        print(PREFIX + say("no class exchange here (nbgrader's, on a JupyterHub): the Assignment List is hidden"),
              flush=True)
    os.environ["PATH"] = scripts_first(os.environ.get("PATH", ""))
    if hasattr(os, "getuid") and os.getuid() == 0 and "--allow-root" not in options:
        options = [*options, "--allow-root"]  # containers often run as root, which JupyterLab refuses untold
    if start_at and not any(o.startswith(("--LabApp.default_url", "--ServerApp.default_url")) for o in options):
        options = [*options, f"--LabApp.default_url=/lab/tree/{start_at}"]
    paths, made_with = server_settings(language)
    print(PREFIX + say("starting JupyterLab (stop it with Ctrl+C)"), flush=True)
    server = LabApp.initialize_server(argv=[f"--notebook-dir={folder}", *paths, *options], **made_with)
    server.start()
    return 0
