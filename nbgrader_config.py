"""nbgrader settings for this course. Run nbgrader commands from the repository root.

solutions/<unit>/<unit>.ipynb are the instructor's source notebooks (one assignment per unit),
made by `python -m grader release` from solutions/<unit>/<unit>.py, the file people edit;
notebooks/<unit>/<unit>.ipynb are the student versions generated from them.
"""
import os

from grader import units
from grader.checks.i18n import course_language

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "attention-course"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The Chinese edition (made from the same source by `python -m grader release`): run nbgrader's
# commands with COURSE_LANG=zh, e.g. `COURSE_LANG=zh nbgrader autograde 01_dot_product`.
if course_language() == "zh":
    c.CourseDirectory.source_directory = "solutions-zh"
    c.CourseDirectory.release_directory = "notebooks-zh"

# A unit's .py source holds the answers and hidden tests: never copied to the learners' release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", f"{units.GLOB}.py"]

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Grading runs every cell; training cells read NBGRADER_EXECUTION and train briefly.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# A busy machine (a shared grading server, a laptop doing other work) is slow to start a kernel
# and to deliver a cell's last output after its reply: nbclient's defaults (60 s, 4 s) fail sound
# notebooks there, since nbgrader's Execute sets raise_on_iopub_timeout=True.
c.Execute.startup_timeout = 120
c.Execute.iopub_timeout = 60
# A learner who deletes a test cell gets it back rather than a "needs manual grading".
c.OverwriteCells.add_missing_cells = True

# Feedback reports show the visible self-checks, never the hidden tests. Named, not imported:
# nbconvert imports each when it registers it, so reading these settings (the grader reads its
# limits here) does not import nbgrader.
c.GenerateFeedback.preprocessors = ["nbgrader.preprocessors.GetGrades",
                                    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
                                    "nbgrader.preprocessors.ClearHiddenTests"]
# ...with their maths drawn without MathJax or a network, and long lines wrapped (grader/grading/feedback.py).
c.GenerateFeedback.exporter_class = "grader.grading.feedback.FeedbackExporter"
