"""An import path kept where it was: nbgrader_config.py files name `grader.feedback.FeedbackExporter`.
The module is grader.grading.feedback."""
from .grading.feedback import FeedbackExporter  # noqa: F401
