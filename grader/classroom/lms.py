"""Grades out of nbgrader's gradebook as the CSV files that Canvas and Moodle import, made by
nbgrader's own command (run from the repository root, like every nbgrader command):

    nbgrader export --exporter=grader.lms.CanvasExport --to canvas.csv
    nbgrader export --exporter=grader.lms.MoodleExport --to moodle.csv

Each writes one row per student and one column per unit, named as the unit's nbgrader assignment
(e.g. `01_dot_product`): the name used by nbgrader, the folders and both editions alike, so that
exporting again later fills the same LMS column instead of creating another.
`--CanvasExport.per_exercise=True` (or `--MoodleExport...`, or `--LmsExport...` for both) writes
one column per exercise instead, e.g. `01_dot_product/u01_dot_product_check`.
nbgrader's `--assignment` and `--student` options limit the export as they do for its own CSV.

A unit's cell is the score Formgrader shows (automatic scores, replaced by manual ones where given,
plus extra credit) less any late-submission penalty, as in nbgrader's own grades.csv; an exercise's
cell is its grade's score. Numbers are rounded to two decimals, as Canvas's own export rounds them,
and written without trailing zeros (4, 3.5, 0.67). A unit a student has not submitted has no grade,
not 0, so that it stays visibly missing and the LMS's own policy for missing work applies: an empty
cell for Canvas (as its export writes one), "-" for Moodle (as its export writes one; its import
reads "-" as no grade in every column, but an empty cell as a grade in a new grade item's column).
The files are UTF-8 without a byte-order mark, which both importers read (Moodle's asks for the
encoding, UTF-8 by default), so names in any script survive.

Canvas (Grades ▸ Import): the header is Student, ID, SIS User ID, SIS Login ID, Section, then the
units; the row below it, "Points Possible", gives each column's maximum. Canvas finds each row's
student by ID (its own user id: nbgrader's lms_user_id), else by SIS User ID (left empty: nbgrader
does not know it), else by SIS Login ID (the nbgrader student id, the login people use on a
JupyterHub), else by the name in Student ("Last, First", as Canvas sorts names). A column whose
name matches an existing assignment's title updates it; any other column creates a new assignment
with that title and the points of the Points Possible row, after Canvas shows what will change.

Moodle (Grades ▸ Import ▸ CSV file): columns First name, Last name, Username (the nbgrader student
id), Email address, ID number (nbgrader's lms_user_id), then the units. On the preview page choose
how rows find their users, "Map from" one of these columns "Map to" username, useremail or
useridnumber (every student needs a value there, or Moodle stops the import), then map each unit's
column to its grade item, or to "New grade item", which Moodle names after the column (with
Moodle's default maximum of 100: create the items with the units' points first to keep those).
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from nbgrader.api import Gradebook, Student
from nbgrader.plugins import ExportPlugin
from traitlets import Bool


@dataclass(frozen=True)
class Column:
    """One graded column: a unit's total, or one of its exercises (an nbgrader grade cell)."""
    name: str
    unit: str
    exercise: str | None
    max_score: float


# Control characters, and the marks that reverse the direction of text (a name shown backwards)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def cell(value: str) -> str:
    """Text for a CSV cell an LMS imports and a spreadsheet may open: no control characters, and
    a leading ', as OWASP advises, where the text would start a formula (=, +, -, @)."""
    value = _CONTROL.sub("", value).replace("\r", " ").replace("\n", " ")
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t") else value


def number(value: float) -> str:
    """A score as LMSs read it: at most two decimals, no trailing zeros."""
    return f"{round(value, 2) + 0.0:.2f}".rstrip("0").rstrip(".")   # + 0.0: never "-0"


class LmsExport(ExportPlugin):
    """One row per student and one column per unit (or per exercise), in an LMS's CSV layout.
    Subclasses say how a student is named; `--LmsExport.per_exercise=True` applies to both."""

    per_exercise = Bool(False, help="One column per exercise (grade cell) instead of one per unit.").tag(config=True)

    default_file = "grades.csv"
    student_header: tuple[str, ...] = ()
    points_label: str | None = None   # first cell of a row of each column's maximum, if the LMS takes one
    no_grade = ""                     # the cell of an exercise or unit not submitted

    def student_cells(self, student: Student) -> list[str]:
        raise NotImplementedError

    def export(self, gradebook: Gradebook) -> None:
        dest = self.to or self.default_file
        columns = self.columns(gradebook)
        students = sorted((s for s in gradebook.students if not self.student or s.id in self.student),
                          key=lambda s: s.id)
        scores = self.scores(gradebook)
        self.log.info("Exporting %d students and %d columns to %s", len(students), len(columns), dest)
        with open(dest, "w", encoding="utf-8", newline="") as f:
            out = csv.writer(f)
            out.writerow([*self.student_header, *(cell(c.name) for c in columns)])
            if self.points_label is not None:
                blanks = [""] * (len(self.student_header) - 1)
                out.writerow([self.points_label, *blanks, *(number(c.max_score) for c in columns)])
            for student in students:
                cells = (scores.get((student.id, c.unit, c.exercise)) for c in columns)
                out.writerow([*(cell(value) for value in self.student_cells(student)),
                              *(self.no_grade if score is None else number(score) for score in cells)])

    def units(self, gradebook: Gradebook) -> list:
        """The gradebook's assignments (one per unit), in the course's order, as --assignment limits them."""
        return sorted((a for a in gradebook.assignments if not self.assignment or a.name in self.assignment),
                      key=lambda a: a.name)

    def columns(self, gradebook: Gradebook) -> list[Column]:
        if not self.per_exercise:
            return [Column(a.name, a.name, None, a.max_score) for a in self.units(gradebook)]
        return [Column(f"{a.name}/{cell.name}", a.name, cell.name, cell.max_score)
                for a in self.units(gradebook) for notebook in a.notebooks for cell in notebook.grade_cells]

    def scores(self, gradebook: Gradebook) -> dict[tuple[str, str, str | None], float]:
        """{(student, unit, None): the unit's score, (student, unit, exercise): the exercise's score},
        for the submissions there are."""
        found: dict[tuple[str, str, str | None], float] = {}
        for assignment in self.units(gradebook):
            for submission in assignment.submissions:
                student = submission.student.id
                found[student, assignment.name, None] = max(0.0, submission.score - submission.late_submission_penalty)
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        found[student, assignment.name, grade.name] = grade.score
        return found


class CanvasExport(LmsExport):
    """Canvas's gradebook import: see the module's description."""
    default_file = "canvas.csv"
    student_header = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
    points_label = "Points Possible"

    def student_cells(self, student: Student) -> list[str]:
        name = ", ".join(part for part in (student.last_name, student.first_name) if part) or student.id
        return [name, student.lms_user_id or "", "", student.id, ""]


class MoodleExport(LmsExport):
    """Moodle's CSV grade import: see the module's description."""
    default_file = "moodle.csv"
    student_header = ("First name", "Last name", "Username", "Email address", "ID number")
    no_grade = "-"

    def student_cells(self, student: Student) -> list[str]:
        return [student.first_name or "", student.last_name or "", student.id, student.email or "",
                student.lms_user_id or ""]
