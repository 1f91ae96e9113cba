"""An import path kept where it was: instructors name the exports as `nbgrader export
--exporter=grader.lms.CanvasExport`. The module is grader.classroom.lms."""
from .classroom.lms import CanvasExport, LmsExport, MoodleExport  # noqa: F401
