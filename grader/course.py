"""Where the course's parts live, and nbgrader set up with the shipped configuration."""
from __future__ import annotations

import ast
import functools
import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from .units import is_unit

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"
CONFIG_FILE = ROOT / "nbgrader_config.py"
COURSE_ID = "attention-course"


@dataclass(frozen=True)
class Edition:
    """The course in one language: its nbgrader source notebooks, the student notebooks made
    from them, and the self-checks' fixtures. English is the source of every other edition,
    which `python -m grader release` makes from it and translations/<language>/."""
    language: str
    solutions: Path
    notebooks: Path
    fixtures: Path


EDITIONS = {
    "en": Edition("en", SOLUTIONS, NOTEBOOKS, ROOT / "grader" / "fixtures"),
    "zh": Edition("zh", ROOT / "solutions-zh", ROOT / "notebooks-zh", ROOT / "grader" / "fixtures" / "zh"),
}


def language_of(nb) -> str:
    """The edition a notebook belongs to: its metadata's "language" when that is an edition's."""
    language = nb.get("metadata", {}).get("language")
    return language if isinstance(language, str) and language in EDITIONS else "en"


def gradebook_url(course_root: Path) -> str:
    """The gradebook a course folder keeps unless told otherwise: SQLite, course_root/gradebook.db."""
    return f"sqlite:///{Path(course_root) / 'gradebook.db'}"


class CourseMissing(RuntimeError):
    """The course's own files are not where the grader needs them."""


def config():
    """The shipped nbgrader_config.py, as traitlets loads it."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader(CONFIG_FILE.name, path=str(ROOT)).load_config()


def units() -> list[str]:
    """The units (nbgrader assignments) in order: the folders of solutions/."""
    if not SOLUTIONS.is_dir():
        raise CourseMissing(f"{SOLUTIONS} is missing: the grader needs the instructor's source notebooks. "
                            "Run it from a full copy of the course repository (git clone), not from notebooks/ alone.")
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and is_unit(p.name))


def source_text(unit: str) -> Path:
    """The one source of a unit that people edit (see grader.authoring.source)."""
    return SOLUTIONS / unit / f"{unit}.py"


def source_notebook(unit: str, language: str = "en") -> Path:
    """nbgrader's source notebook of a unit, made from its source_text by `python -m grader release`."""
    return EDITIONS[language].solutions / unit / f"{unit}.ipynb"


def solution_definitions(unit: str, names: tuple[str, ...], **given) -> types.ModuleType:
    """The top-level classes and functions `names` of a unit's solution notebook, for the course's
    own scripts (benchmarks, the checkpoint). Only those definitions run, from the code cells that
    are not tests, so nothing trains or plots; `given` holds the imports they use. The module is
    registered in sys.modules, where dataclasses look their classes up."""
    path = source_notebook(unit)
    module = types.ModuleType(f"unit{unit[:2]}_solution")
    sys.modules[module.__name__] = module
    module.__dict__.update(given)
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or (meta.get("grade") and not meta.get("solution")):
            continue   # prose, and the test cells
        tree = ast.parse("".join(cell["source"]))
        keep = [node for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in names]
        if keep:
            exec(compile(ast.Module(keep, type_ignores=[]), str(path), "exec"), module.__dict__)
    missing = [name for name in names if not hasattr(module, name)]
    if missing:
        raise RuntimeError(f"{path} no longer defines {', '.join(missing)}")
    return module


def release_notebook(unit: str, language: str = "en") -> Path:
    return EDITIONS[language].notebooks / unit / f"{unit}.ipynb"


def nbgrader_api(course_root: Path | None = None, release_dir: Path | None = None, db_url: str | None = None,
                 language: str = "en", source_dir: Path | None = None):
    """An NbGraderAPI with the shipped nbgrader_config.py for the edition in `language`,
    optionally writing its gradebook, autograded and feedback folders under `course_root`,
    taking the source notebooks from `source_dir` (default: the edition's), releasing into
    `release_dir`, and keeping grades in the database `db_url` (default: course_root/gradebook.db)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    edition = EDITIONS[language]
    cfg = config()
    if course_root is not None:
        course_root = Path(course_root).resolve()
        course_root.mkdir(parents=True, exist_ok=True)
        cfg.CourseDirectory.root = str(course_root)
    if course_root is not None or language != "en":
        cfg.CourseDirectory.source_directory = str(edition.solutions)
        cfg.CourseDirectory.release_directory = str(edition.notebooks)
    if course_root is not None:
        cfg.CourseDirectory.db_url = gradebook_url(course_root)
    if db_url is not None:
        cfg.CourseDirectory.db_url = db_url
    if source_dir is not None:
        cfg.CourseDirectory.source_directory = str(Path(source_dir).resolve())
    if release_dir is not None:
        cfg.CourseDirectory.release_directory = str(Path(release_dir).resolve())
    coursedir = CourseDirectory(config=cfg)
    nbgrader_environment()
    return NbGraderAPI(coursedir, config=cfg)


def nbgrader_environment() -> None:
    """nbgrader's gradebook runs the `alembic` command: find it beside this Python even when
    the environment is not activated. And a new gradebook asks `alembic heads` for the version of
    nbgrader's schema, in a new process each time (1.5 s, most of a unit's release): this process
    reads the same answer from nbgrader's migrations itself, once."""
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    import nbgrader.api

    nbgrader.api.get_alembic_version = _alembic_head


@functools.cache
def _alembic_head() -> str:
    """The head revision of nbgrader's migrations, as `alembic heads` prints it."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()
