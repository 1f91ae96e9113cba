"""A class of 20 under load: twenty learners, each a real Unix account, submit unit 01 at once
through nbgrader's exchange (the command line, in parallel); `nbgrader collect` gets all
twenty, none lost, none mixed up, each with the time the system saw its entry made (just after
its learner submitted); the instructor grades the class with 2 workers, as their own account,
and the gradebook keeps each time.
The instructor releases the feedback while one learner watches for another's, knowing the name
of its page: that learner can neither list, watch nor read it, nor anything in the exchange's
feedback/; then all twenty fetch at once, and each gets their own page and nobody else's, with
no solution and no hidden test in it (grader/classroom/exchange.py).

Needs root (to make the accounts; CI runs as root); skipped with the reason otherwise."""
from __future__ import annotations

import grp
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import classroom
import nbformat
import pytest
from catalogue import u01
from classroom import UNIT
from reference import answers, full_marks, points_of, student_notebook

from grader import course
from grader.classroom import hub
from grader.classroom.exchange import feedback_folder, feedback_page

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("end-to-end")]
LEARNERS = 20
MISTAKE = u01.MISTAKES[0]
FULL = full_marks(UNIT)
DOT = points_of(UNIT, "u01_dot_product_check")   # what a wrong dot_product costs

# What a learner who knows the name of another's feedback page tries, as the instructor releases
# it: watch the feedback folders (inotify), list them, read the page. Prints what it achieved.
WATCH = """
import ctypes, json, os, sys, time
feedback, folder, page, stop = sys.argv[1:5]
libc, achieved = ctypes.CDLL(None, use_errno=True), set()
queue = libc.inotify_init()
for target in (feedback, folder):
    if libc.inotify_add_watch(queue, target.encode(), 0xFFF) >= 0:
        achieved.add(f"watched {target}")
while True:
    done = os.path.exists(stop)
    for target in (feedback, folder):
        try:
            achieved.add(f"listed {target}: {os.listdir(target)}")
        except OSError:
            pass
    try:
        with open(page) as text:
            achieved.add(f"read {page}: {text.read(60)!r}")
    except OSError:
        pass
    if done:
        break
    time.sleep(0.02)
print(json.dumps(sorted(achieved)))
"""


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
    collected = {}
    for name, when in said.items():
        folder = submitted / name / UNIT
        cells = nbformat.read(folder / f"{UNIT}.ipynb", as_version=4).cells
        assert [f"# written by {name}" in c.source for c in cells].count(True) == 1, name
        # when the system saw the entry made: just after the time submit names it, never before
        collected[name] = (folder / "timestamp.txt").read_text().strip()
        late = (parse_utc(collected[name]) - parse_utc(when)).total_seconds()
        assert 0 <= late < 120, (name, when, collected[name])

    started = time.monotonic()
    results = json.loads(room.instructor_runs("-m", "grader", "grade", "submitted", "--course-dir", ".",
                                              "--workers", "2", "--json").stdout)
    grading = time.monotonic() - started
    scores = {r["student"]: r["score"] for r in results}
    assert scores == {name: FULL - DOT if wrong[name] else FULL for name in said}
    with Gradebook(f"sqlite:///{room.course / 'gradebook.db'}", course.COURSE_ID) as gb:
        for name, when in collected.items():
            assert gb.find_submission(UNIT, name).timestamp == parse_utc(when)

    started = time.monotonic()
    _feedback_reaches_each_learner_alone(room, wrong)
    returning = time.monotonic() - started
    with capsys.disabled():
        print(f"\n{LEARNERS} learners: submitted at once in {submitting:.1f} s, collected in {collecting:.1f} s, "
              f"graded with 2 workers in {grading:.1f} s, feedback released and fetched by all in {returning:.1f} s",
              file=sys.stderr)


def _feedback_reaches_each_learner_alone(room, wrong: dict[str, bool]) -> None:
    spy, victim = room.learners[0], room.learners[1]
    [entry] = (room.exchange / course.COURSE_ID / "inbound").glob(f"{victim.name}+{UNIT}+*")
    folder = feedback_folder(str(room.exchange), course.COURSE_ID, victim.name)
    page = feedback_page(folder, (entry / "submission_secret.txt").read_text(), UNIT)
    feedback = os.path.dirname(folder)
    with tempfile.TemporaryDirectory() as flags, ThreadPoolExecutor(max_workers=LEARNERS) as pool:
        os.chmod(flags, 0o755)
        stop = Path(flags) / "stop"
        watching = pool.submit(room.in_terminal, spy, "-c", WATCH, feedback, folder, page, str(stop))
        try:
            released = room.instructor_runs("-m", "nbgrader", "release_feedback", UNIT)
        finally:
            stop.touch()
        assert json.loads(watching.result().stdout) == [], "a learner reached another's feedback"
        assert "Feedback not released" not in released.stderr, released.stderr[-3000:]
        # the same attempts, by the page's own learner: each succeeds (the test's names are right)
        stop.touch()
        own = json.loads(room.in_terminal(victim, "-c", WATCH, feedback, folder, page, str(stop)).stdout)
        assert [line.split(" ")[0] for line in own] == ["listed", "read", "watched"], own
        status = os.stat(page)
        assert (status.st_mode & 0o777, status.st_gid) == (0o644, grp.getgrnam(hub.INSTRUCTORS).gr_gid)
        fetched = list(pool.map(lambda learner: room.in_terminal(learner, "-m", "nbgrader", "fetch_feedback", UNIT),
                                room.learners))
    source = (room.clone / "solutions" / UNIT / f"{UNIT}.py").read_text()
    hidden = [line for block in source.split("### BEGIN HIDDEN TESTS")[1:]
              for line in block.split("### END HIDDEN TESTS")[0].splitlines() if line.startswith("def ")]
    for learner, run in zip(room.learners, fetched):
        [html] = (learner.home / UNIT / "feedback").glob(f"*/{UNIT}.html")
        text = html.read_text()
        assert set(re.findall(r"# written by (\w+)", text)) == {learner.name}, (learner.name, run.stderr[-2000:])
        points = FULL - DOT if wrong[learner.name] else FULL
        assert f"Score: {points:g}" in text.replace(".0", ""), learner.name
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
        assert hidden and not any(line in text for line in hidden), learner.name
