"""A class of 20 under load: twenty learners, each a real Unix account, submit unit 01 at once
through nbgrader's exchange (the command line, in parallel); `nbgrader collect` gets all
twenty, none lost, none mixed up, each with the time its learner submitted; the instructor
grades the class with 2 workers, as their own account, and the gradebook keeps each time.

Needs root (to make the accounts; CI runs as root); skipped with the reason otherwise."""
from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import classroom
import nbformat
import pytest
from catalogue import u01
from classroom import UNIT
from reference import answers, student_notebook

from grader import course

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("end-to-end")]
LEARNERS = 20
MISTAKE = u01.MISTAKES[0]
FULL = 5


@pytest.fixture(scope="module")
def room():
    reason = classroom.why_not()
    if reason:
        pytest.skip(reason)
    with classroom.classroom(learners=LEARNERS) as made:
        yield made


def _answered(name: str, wrong: bool) -> str:
    """A learner's notebook signed with their name in the answer, so a mix-up shows."""
    chosen = answers(UNIT)
    code = MISTAKE.code if wrong else chosen[MISTAKE.answer]
    chosen[MISTAKE.answer] = f"# written by {name}\n{code}"
    return nbformat.writes(student_notebook(UNIT, chosen))


def _submitted_at(log: str) -> str:
    """The time nbgrader's submit says it recorded: "Submitted as: COURSE UNIT TIMESTAMP"."""
    line = next(line for line in log.splitlines() if "Submitted as:" in line)
    return line.split("Submitted as:", 1)[1].strip().split(" ", 2)[2]


def test_twenty_learners_submit_at_once_and_the_class_is_collected_and_graded_whole(room, capsys):
    from nbgrader.api import Gradebook
    from nbgrader.utils import parse_utc

    room.instructor_runs("-m", "nbgrader", "release_assignment", UNIT)
    wrong = {learner.name: k % 4 == 3 for k, learner in enumerate(room.learners)}   # every fourth: the mistake
    for learner in room.learners:   # each answers the notebook fetched into their home
        room.give(learner, room.learner_notebook(learner), _answered(learner.name, wrong[learner.name]))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=LEARNERS) as pool:
        logs = dict(zip([learner.name for learner in room.learners],
                        pool.map(lambda learner: room.in_terminal(learner, "-m", "nbgrader", "submit", UNIT).stderr,
                                 room.learners)))
    submitting = time.monotonic() - started
    said = {name: _submitted_at(log) for name, log in logs.items()}

    started = time.monotonic()
    room.instructor_runs("-m", "nbgrader", "collect", UNIT)
    collecting = time.monotonic() - started
    submitted = room.course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted(said)   # all twenty, nobody else
    for name, when in said.items():
        folder = submitted / name / UNIT
        cells = nbformat.read(folder / f"{UNIT}.ipynb", as_version=4).cells
        assert [f"# written by {name}" in c.source for c in cells].count(True) == 1, name
        assert (folder / "timestamp.txt").read_text().strip() == when

    started = time.monotonic()
    results = json.loads(room.instructor_runs("-m", "grader", "grade", "submitted", "--course-dir", ".",
                                              "--workers", "2", "--json").stdout)
    grading = time.monotonic() - started
    scores = {r["student"]: r["score"] for r in results}
    assert scores == {name: FULL - 1 if wrong[name] else FULL for name in said}
    with Gradebook(f"sqlite:///{room.course / 'gradebook.db'}", course.COURSE_ID) as gb:
        for name, when in said.items():
            assert gb.find_submission(UNIT, name).timestamp == parse_utc(when)
    with capsys.disabled():
        print(f"\n{LEARNERS} learners: submitted at once in {submitting:.1f} s, collected in {collecting:.1f} s, "
              f"graded with 2 workers in {grading:.1f} s", file=sys.stderr)
