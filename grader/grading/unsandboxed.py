"""`nbgrader autograde`, and Formgrader's Autograde button that runs it, refused on the class hub.

nbgrader's autograde runs each learner's notebook as the instructor, outside any sandbox: their
code could read the gradebook and the instructor's files. On the hub, learners' notebooks are
graded by `python -m grader grade`, in the sandbox. hub/instructor/nbgrader_config.py names this
class as Autograde's exporter, which nbgrader makes before it touches any submission, so the
refusal leaves every folder and grade as it was and says what to run instead.
"""
from __future__ import annotations

from nbconvert.exporters import NotebookExporter

MESSAGE = ("On the class hub, learners' notebooks are graded in the sandbox, not by nbgrader autograde "
           "(which runs their code as you): in a terminal, cd ~/attention-course and run "
           "python -m grader grade submitted --course-dir .")


class RefuseUnsandboxed(NotebookExporter):
    def __init__(self, **kwargs):
        raise RuntimeError(MESSAGE)
