"""Where the course's parts live, and nbgrader set up with the shipped configuration."""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"
CONFIG_FILE = ROOT / "nbgrader_config.py"


def units() -> list[str]:
    """The units (nbgrader assignments) in order: the folders of solutions/."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def source_notebook(unit: str) -> Path:
    return SOLUTIONS / unit / f"{unit}.ipynb"


def release_notebook(unit: str) -> Path:
    return NOTEBOOKS / unit / f"{unit}.ipynb"


def nbgrader_api(course_root: Path | None = None, release_dir: Path | None = None):
    """An NbGraderAPI with the shipped nbgrader_config.py, optionally writing its gradebook,
    autograded and feedback folders under `course_root` and releasing into `release_dir`."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(ROOT)).load_config()
    if course_root is not None:
        course_root = Path(course_root).resolve()
        course_root.mkdir(parents=True, exist_ok=True)
        config.CourseDirectory.root = str(course_root)
        config.CourseDirectory.source_directory = str(SOLUTIONS)
        config.CourseDirectory.release_directory = str(NOTEBOOKS)
        config.CourseDirectory.db_url = f"sqlite:///{course_root / 'gradebook.db'}"
    if release_dir is not None:
        config.CourseDirectory.release_directory = str(Path(release_dir).resolve())
    coursedir = CourseDirectory(config=config)
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    # nbgrader runs the `alembic` command: find it beside this Python even when the
    # environment is not activated.
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    return NbGraderAPI(coursedir, config=config)
