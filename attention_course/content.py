"""Where the learner-facing parts of the course are: the notebooks of each edition, the corpus and
checkpoint of units 08–09, and the settings of the learner's JupyterLab.

A wheel carries them in attention_course/content/ (setup.py copies them there); in a clone of the
repository, or an editable install of it, they are the repository's own folders.
"""
from __future__ import annotations

from pathlib import Path

from grader.units import GLOB

PACKAGE = Path(__file__).resolve().parent
BUNDLED = PACKAGE / "content"
REPOSITORY = PACKAGE.parent
EDITIONS = {"en": "notebooks", "zh": "notebooks-zh"}


def root() -> Path:
    """The folder that holds notebooks/, notebooks-zh/, data/, lab/ and nbgrader_config.py."""
    return BUNDLED if BUNDLED.is_dir() else REPOSITORY


def is_repository() -> bool:
    """Whether the course runs from a clone, whose notebooks are the learner's to edit in place."""
    return root() == REPOSITORY


def notebooks(language: str = "en") -> Path:
    """The released notebooks of an edition: <unit>/<unit>.ipynb."""
    return root() / EDITIONS[language]


def units() -> list[str]:
    return sorted(p.parent.name for p in notebooks("en").glob(f"{GLOB}/{GLOB}.ipynb"))


def data_dir() -> Path:
    """The course's corpus (train.txt, val.txt, corpus_stats.json) and trained checkpoint (tiny_gpt.pt)."""
    return root() / "data"


def lab_settings() -> Path:
    """The learner's JupyterLab settings (see attention_course.lab)."""
    return root() / "lab"
