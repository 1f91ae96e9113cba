"""nbgrader's two ways of running a learner's notebook as the instructor, refused on the class hub:
Autograde (`nbgrader autograde`, and Formgrader's button that runs it) and Validate (the button in
the instructor's JupyterLab, and `nbgrader validate`).

Both run the notebook's code as the instructor, outside any sandbox: a learner's code could read
the gradebook and the answers, or act in the instructor's name. On the hub, learners' notebooks are
graded by `python -m grader grade`, in the sandbox. hub/instructor/nbgrader_config.py names:
- `RefuseUnsandboxed` as Autograde's exporter, which nbgrader makes before it touches any
  submission, so the refusal leaves every folder and grade as it was and says what to run instead;
- `OnlyCourseNotebooks` as the hook nbclient calls when nbgrader's Execute has started a kernel and
  before it runs the first cell (`Execute.on_notebook_start`), for Validate and Autograde alike.
  Validate runs there only in the course's own clone, where learners write nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nbconvert.exporters import NotebookExporter

from .. import course

GRADE = "In a terminal:\n  cd ~/attention-course\n  python -m grader grade submitted --course-dir ."
# Short lines: Formgrader shows the refusal in a box that cuts off what is wider.
MESSAGE = ("On this class hub, notebooks are graded in the sandbox,\n"
           "not by nbgrader autograde, which runs learners' code as you.\n" + GRADE)


class RefuseUnsandboxed(NotebookExporter):
    def __init__(self, **kwargs):
        raise RuntimeError(MESSAGE)


class LearnerNotebook(RuntimeError):
    """A notebook outside the course's clone, which nbgrader was about to run as the instructor."""


@dataclass(frozen=True)
class OnlyCourseNotebooks:
    """nbclient's on_notebook_start hook: refuses any notebook outside `clone`. nbgrader runs a
    notebook from its own folder, so the working folder says where the notebook is."""
    clone: Path = course.ROOT

    def __call__(self, notebook=None, **_) -> None:
        here = Path(os.getcwd()).resolve()
        if not here.is_relative_to(self.clone.resolve()):
            raise LearnerNotebook(
                f"On the class hub, Validate runs only the course's own notebooks (in {self.clone}).\n"
                f"The notebook in {here} may be a learner's:\nits code would run as you, outside the sandbox.\n"
                f"To grade learners' notebooks, {GRADE[0].lower()}{GRADE[1:]}")
