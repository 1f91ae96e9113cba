"""An instructor's nbgrader on the class hub: the course folder in their home, which
`./course hub add --instructor` made (its gradebook is what Formgrader shows)."""
import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
c.CourseDirectory.root = os.path.expanduser("~/attention-course")
# Formgrader's Autograde button, and `nbgrader autograde`, would run learners' code as the
# instructor, unsandboxed: refused with what to run instead (see grader/grading/unsandboxed.py).
c.Autograde.exporter_class = "grader.grading.unsandboxed.RefuseUnsandboxed"
