"""A class on a real JupyterHub, end to end in Chromium: the instructor releases unit 01; two
learners, real Unix accounts, log in, fetch it from the Assignment List and submit (one right,
one with a catalogued mistake); neither can read the other's work or the instructor's; the
instructor collects, grades with `python -m grader grade` as their own account with the
sandbox on, and releases the feedback; Formgrader shows both scores; each learner fetches their
own feedback and sees their score and, for the mistake, its message; the Canvas and Moodle
exports hold both.

Needs root (to make the accounts; CI runs as root), configurable-http-proxy (npm) and
Chromium; skipped with the reason where one is missing."""
from __future__ import annotations

import csv
import io
import json
import shutil
import sys
import time

import classroom
import nbformat
import pytest
from catalogue import u01
from classroom import UNIT
from reference import answers, student_notebook

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MISTAKE = u01.MISTAKES[0]   # the dot product normalised into a cosine
FULL = 5

playwright = pytest.importorskip("playwright.sync_api", reason="needs Playwright: pip install -e '.[test]'")
pytest.importorskip("jupyterhub", reason="needs JupyterHub: pip install -e '.[hub]'")
pytestmark = [
    pytest.mark.xdist_group("end-to-end"),
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)"),
    pytest.mark.skipif(shutil.which("configurable-http-proxy") is None,
                       reason="configurable-http-proxy is not installed (npm install -g configurable-http-proxy)"),
]


@pytest.fixture(scope="module")
def room():
    reason = classroom.why_not()
    if reason:
        pytest.skip(reason)
    with classroom.classroom(learners=2) as made:
        yield made


def _log_in(browser, url: str, account):
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.goto(f"{url}/hub/login")
    page.fill("#username_input", account.name)
    page.fill("#password_input", account.password)
    page.click("#login_submit")
    page.wait_for_selector(".jp-LabShell", timeout=120_000)   # the server started as the learner
    return page


def _assignment_list(page):
    page.click(".lm-MenuBar-itemLabel:text-is('Nbgrader')")
    page.click(".lm-Menu-itemLabel:text-is('Assignment List')")
    page.wait_for_selector("#released_assignments_list_loading", state="hidden")
    return page


def test_a_class_releases_submits_grades_and_returns_feedback_through_the_hub(room, capsys):
    started = time.monotonic()
    ann, ben = room.learners
    room.instructor_runs("-m", "nbgrader", "release_assignment", UNIT)
    wrong = answers(UNIT)
    wrong[MISTAKE.answer] = MISTAKE.code
    submission = {ann.name: student_notebook(UNIT), ben.name: student_notebook(UNIT, wrong)}

    with classroom.running_hub(room) as url, playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pages = {}
        for learner in (ann, ben):   # log in, fetch, answer, submit
            page = pages[learner.name] = _assignment_list(_log_in(browser, url, learner))
            page.locator("#released_assignments_list .list_item", has_text=UNIT).locator("button",
                                                                                        has_text="Fetch").click()
            submit = page.locator("#fetched_assignments_list .list_item", has_text=UNIT).locator("button",
                                                                                                has_text="Submit")
            submit.wait_for(timeout=60_000)
            assert room.learner_notebook(learner).is_file()   # fetched into the learner's home, as theirs
            room.give(learner, room.learner_notebook(learner), nbformat.writes(submission[learner.name]))
            submit.click()
            page.locator("#submitted_assignments_list .list_item", has_text=UNIT).wait_for(timeout=60_000)

        # Neither learner can read the other's work nor the instructor's.
        inbound = room.exchange / "attention-course" / "inbound"
        [ann_submission] = inbound.glob(f"{ann.name}+{UNIT}+*")
        for attempt in (["ls", str(inbound)], ["cat", str(room.learner_notebook(ann))],
                        ["ls", str(room.course)], ["cat", str(room.course / "gradebook.db")],
                        ["ls", str(ann_submission.with_name(ann_submission.name.rsplit("+", 1)[0] + "+x"))]):
            seen = ben.run(*attempt, check=False)
            assert seen.returncode != 0 and seen.stdout == "", (attempt, seen.stdout)

        # The instructor collects, grades as themselves (not root) in the sandbox, releases feedback.
        room.instructor_runs("-m", "nbgrader", "collect", UNIT)
        graded = json.loads(room.instructor_runs("-m", "grader", "grade", "submitted", "--course-dir", ".",
                                                 "--workers", "2", "--json").stdout)
        scores = {r["student"]: r for r in graded}
        assert scores[ann.name]["score"] == FULL and scores[ben.name]["score"] == FULL - 1
        assert all(r["sandbox"].startswith("bubblewrap: uid 65534 in a user namespace") for r in graded)
        room.instructor_runs("-m", "nbgrader", "release_feedback", UNIT)

        # Formgrader, opened in a browser tab of its own as nbgrader documents for JupyterHub 4.1+.
        teacher = _log_in(browser, url, room.instructor)
        teacher.goto(f"{url}/user/{room.instructor.name}/formgrader/manage_submissions/{UNIT}")
        table = teacher.locator("table", has_text=ann.name)
        table.locator("tr", has_text=ben.name).wait_for(timeout=30_000)
        assert f"{FULL} / {FULL}" in table.locator("tr", has_text=ann.name).inner_text()
        assert f"{FULL - 1} / {FULL}" in table.locator("tr", has_text=ben.name).inner_text()

        for learner in (ann, ben):   # each fetches and opens their own feedback
            page = pages[learner.name]
            page.reload()
            page.wait_for_selector(".jp-LabShell", timeout=60_000)
            item = _assignment_list(page).locator("#submitted_assignments_list .list_item", has_text=UNIT).first
            item.locator("button", has_text="Fetch Feedback").click()
            item.locator("a", has_text="view feedback").click()   # the feedback's folder, in the file browser
            page.locator(".jp-DirListing-item", has_text=f"{UNIT}.html").wait_for(timeout=60_000)
            [html] = (learner.home / UNIT / "feedback").glob(f"*/{UNIT}.html")
            report = page.context.new_page()   # as "Open in New Browser Tab" shows it
            report.goto(f"{url}/user/{learner.name}/files/{html.relative_to(learner.home).as_posix()}")
            text = report.locator("body").inner_text()
            points = FULL if learner is ann else FULL - 1
            assert f"Score: {points}" in text.replace(".0", ""), text[:500]
            verdicts = [line for line in text.splitlines() if line.startswith("Grader: ")]
            failed = [line for line in verdicts if "\u2717" in line]
            assert len(verdicts) == 4 and len(failed) == (learner is ben), verdicts
            assert all(MISTAKE.message in line for line in failed), failed
            assert "The course:" not in text   # progress() prints nothing under grading
        browser.close()

    for exporter, column in (("CanvasExport", "SIS Login ID"), ("MoodleExport", "Username")):
        room.instructor_runs("-m", "nbgrader", "export", f"--exporter=grader.lms.{exporter}", "--to", "lms.csv")
        rows = {row[column]: row for row in csv.DictReader(io.StringIO((room.course / "lms.csv").read_text()))}
        assert float(rows[ann.name][UNIT]) == FULL and float(rows[ben.name][UNIT]) == FULL - 1
    with capsys.disabled():
        print(f"\nthe class on JupyterHub, end to end: {time.monotonic() - started:.0f} s", file=sys.stderr)
