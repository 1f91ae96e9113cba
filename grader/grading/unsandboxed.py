"""nbgrader's two ways of running a learner's notebook as the instructor, refused on the class hub:
Autograde (`nbgrader autograde`, and Formgrader's button that runs it) and Validate (the button in
the instructor's JupyterLab, and `nbgrader validate`).

Both run the notebook's code as the instructor, outside any sandbox: a learner's code could read
the gradebook and the answers, or act in the instructor's name. On the hub, learners' notebooks are
graded by `python -m grader grade`, in the sandbox. hub/instructor/nbgrader_config.py names:
- `RefuseUnsandboxed` as Autograde's exporter, which nbgrader makes before it touches any
  submission, so the refusal leaves every folder and grade as it was and says what to run instead;
- grader.classroom.kernels.OnlyCourseKernels as the kernel manager of nbgrader's Execute, for
  Validate and Autograde alike: it starts a kernel only in the course's own clone, where learners
  write nothing, and refuses before any process starts anywhere else.
"""
from __future__ import annotations

from nbconvert.exporters import NotebookExporter

GRADE = "In a terminal:\n  cd ~/attention-course\n  python -m grader grade submitted --course-dir ."
# Short lines: Formgrader shows the refusal in a box that cuts off what is wider.
MESSAGE = ("On this class hub, notebooks are graded in the sandbox,\n"
           "not by nbgrader autograde, which runs learners' code as you.\n" + GRADE)


class RefuseUnsandboxed(NotebookExporter):
    def __init__(self, **kwargs):
        raise RuntimeError(MESSAGE)
