"""An instructor's nbgrader on the class hub: the teaching team's course folder, which
`./course hub add --instructor` links into their home (its gradebook is what Formgrader shows)."""
import os

from grader import course

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
c.CourseDirectory.root = os.path.expanduser("~/attention-course")   # a link to the team's (grader/classroom/hub.py)
c.CourseDirectory.groupshared = True   # what nbgrader makes there, and in the exchange, stays the team's
# Formgrader's Autograde button, `nbgrader autograde`, the Validate button and `nbgrader validate`
# would run learners' code as the instructor, unsandboxed: refused with what to run instead (see
# grader/grading/unsandboxed.py and grader/classroom/kernels.py). Validate still runs the course's
# own notebooks.
c.Autograde.exporter_class = "grader.grading.unsandboxed.RefuseUnsandboxed"
c.Execute.kernel_manager_class = "grader.classroom.kernels.OnlyCourseKernels"
c.OnlyCourseKernels.clone = str(course.ROOT)
