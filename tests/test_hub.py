"""A class on a real JupyterHub, end to end in Chromium, run from a copy of the course as an
instructor's clone would be. The hub's first start makes the learners' environment from nothing
through a package index (one made of the suite's own packages: nothing is downloaded, and PyTorch's
own index does not answer), which then holds what a learner's server needs and nothing of the tests'.
The instructor, in a terminal of their server opened in the browser,
types the commands of docs/instructors.md: release unit 01; two learners, real Unix accounts, log in, fetch it
from the Assignment List and submit (one right, one with a catalogued mistake); from a learner's
own terminal nothing of the answers can be read (the clone, its solutions and source notebooks,
the instructor's course folder, the gradebook), nor the other learner's work, and nothing in the
exchange's root can be made, moved or deleted, before the first release and after it; the
instructor collects; a second instructor joins the teaching team while the hub runs, grades what
the first collected with `python -m grader grade` as their own account with the sandbox on, into
the one gradebook, and releases a unit the first did not, which the learners see; nothing of the
second instructor's, nor the team's course folder, can be read from a learner's terminal; the
first instructor releases the feedback and exports grades; Formgrader shows both scores; each
learner fetches their own feedback and sees their score and, for the mistake, its message, and
cannot read the other's page, knowing its name; the Canvas and Moodle exports hold both. Then
`./course hub zh` serves the same class in Chinese (test_the_chinese_edition_through_the_hub).

Along the way a third learner attacks the class as tests/hub_attacks.py describes, and each attack
fails: a submission in another learner's name, an inbound entry that stopped nbgrader's collect for
everyone, links to the instructor's solutions and to /dev/urandom in their own submission (what
collect refuses: grader/classroom/exchange.py); a learner's own Jupyter configuration serving a page
without login, and a page on the hub's one origin that tries the visitor's terminals with their
cookie (jupyterhub_config.py). One learner's notebook carries scripts in its markdown and outputs
(tests/hostile.py): the instructor opens it in Formgrader and its feedback page, and none runs
(grader/grading/safe_html.py); pressing Validate on it in the instructor's JupyterLab is refused
before its code runs (grader/grading/unsandboxed.py).

Needs root (to make the accounts; CI runs as root), configurable-http-proxy (npm) and
Chromium; skipped with the reason where one is missing."""
from __future__ import annotations

import csv
import grp
import importlib.metadata as metadata
import io
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urljoin

import classroom
import hostile
import hub_attacks
import nbformat
import pytest
from catalogue import u01
from classroom import UNIT, in_browser_kernel, in_browser_terminal
from reference import answers, full_marks, points_of, student_notebook, unit_exercises

from grader.classroom import hub
from grader.classroom.exchange import feedback_folder, feedback_page
from grader.grading.sandbox import FORKED
from grader.grading.unsandboxed import MESSAGE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MISTAKE = u01.MISTAKES[0]   # the dot product normalised into a cosine
DIAGRAM = "open my diagram"   # ben's relative link to a page he submitted
LAUNCHED = Path("/tmp/launched-by-a-learners-file")   # what a learner's modules leave, should they run
TRAITLETS = Path("/tmp/traitlets-of-a-learner")
OTHER_UNIT = "02_softmax"    # released by the second instructor
FULL = full_marks(UNIT)
DOT = points_of(UNIT, "u01_dot_product_check")   # what a wrong dot_product costs

playwright = pytest.importorskip("playwright.sync_api", reason="needs Playwright: pip install -e '.[test]'")
pytest.importorskip("jupyterhub", reason="needs JupyterHub: pip install -e '.[hub]'")
pytestmark = [
    pytest.mark.system,
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
    with classroom.classroom(learners=3, clone=True) as made:
        yield made


def _log_in(browser, url: str, account):
    page = browser.new_context(viewport={"width": 1400, "height": 900}, ignore_https_errors=True).new_page()
    page.goto(f"{url}/hub/login")
    page.fill("#username_input", account.name)
    page.fill("#password_input", account.password)
    page.click("#login_submit")
    page.wait_for_selector(".jp-LabShell", timeout=120_000)   # the server started as the learner
    return page


def _assignment_list(page):
    """The Assignment List, opened from the menu and brought up to date (it may have been open
    since the learner logged in, before the instructor released anything)."""
    page.click(".lm-MenuBar-itemLabel:text-is('Nbgrader')")
    page.click(".lm-Menu-itemLabel:text-is('Assignment List')")
    page.click("#refresh_assignments_list")
    page.wait_for_selector("#released_assignments_list_loading", state="hidden")
    return page


def instructor_commands() -> list[str]:
    """The instructor's commands as the hub section of docs/instructors.md writes them, comments cut."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "instructors.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n\s*(cd ~/attention-course\n.*?)```", text, re.S)
    assert block, "docs/instructors.md's hub section lost the instructor's commands"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def _as_documented(page, room, command: str, seconds: int = 120, instructor=None) -> str:
    """One of the documented commands, typed into an instructor's terminal (the first's, unless
    given) after its `cd`; it must succeed."""
    cd, *_ = instructor_commands()
    name = (instructor or room.instructor).name
    typed = in_browser_terminal(page, name, f"{cd} && {command}", seconds)
    assert typed.status == 0, f"{command!r} in {name}'s terminal:\n{typed.output[-3000:]}"
    return typed.output


def _refused(page, learner, attempts: list[str]) -> None:
    """Each command, typed into the learner's own terminal, fails and shows nothing it should not."""
    for attempt in attempts:
        typed = in_browser_terminal(page, learner.name, f"{attempt} </dev/null 2>/dev/null")
        assert typed.status != 0, f"a learner's terminal could: {attempt}\n{typed.output[-2000:]}"


def _exchange_attempts(room) -> list[str]:
    root = room.exchange
    course = root / "attention-course"
    attempts = [f"mv {course} {root}/hijacked", f"mkdir {root}/mine", f"touch {root}/mine",
                f"rm -rf {course}", f"mkdir {course}/outbound-x", f"touch {course}/mine"]
    outbound = course / "outbound"
    if outbound.exists():
        attempts += [f"mv {outbound} {course}/gone", f"rm -rf {outbound}", f"touch {outbound}/{UNIT}/mine",
                     f"mv {outbound}/{UNIT} {outbound}/gone", f"ls {course}/inbound/"]
    return attempts


def _made_from_the_package_index(room, env: Path) -> None:
    """The hub's first start made `env` from the package index alone, as it would on a machine
    that reaches PyPI but not PyTorch's index: the same PyTorch build, the lab's and the hub's
    packages with nbgrader's extensions switched on, the course from the clone (not editable),
    and nothing of the tests'."""
    log = (room.state / "hub.log").read_text(errors="replace")
    assert "making the learners' environment" in log and "did not answer" in log, log[-3000:]
    listed = subprocess.run([env / "bin" / "python", "-c", "import importlib.metadata as m, json; print(json.dumps("
                             "{d.metadata['Name'].lower(): [d.version, d.read_text('direct_url.json')] "
                             "for d in m.distributions()}))"], capture_output=True, text=True, check=True)
    held = json.loads(listed.stdout)
    for name in ("torch", "nbgrader", "jupyterlab", "jupyterhub", "jupyterlab-language-pack-zh-cn", "attention-course"):
        assert held.get(name, [None])[0] == metadata.version(name), (name, held.get(name))
    installed_from = json.loads(held["attention-course"][1] or "{}")
    assert not installed_from.get("dir_info", {}).get("editable"), installed_from
    assert not {"pytest", "playwright", "ruff", "psycopg"} & held.keys(), sorted(held)
    assert (env / "share/jupyter/labextensions/@jupyter/nbgrader/package.json").is_file()
    switches = json.loads((env / "etc/jupyter/jupyter_server_config.d/nbgrader.json").read_text())
    assert switches["ServerApp"]["jpserver_extensions"]["nbgrader.server_extensions.assignment_list"] is True


def test_a_class_releases_submits_grades_and_returns_feedback_through_the_hub(room, capsys):
    started = time.monotonic()
    ann, ben, cat = room.learners   # cat attacks the class
    cd, release, collect, grade, feedback, export = instructor_commands()
    assert cd == "cd ~/attention-course" and release == f"nbgrader release_assignment {UNIT}", instructor_commands()
    wrong = answers(UNIT)
    wrong[MISTAKE.answer] = MISTAKE.code
    hostile_notebook = student_notebook(UNIT, wrong)   # a mistake, and scripts for whoever opens it
    planted = Path(f"/tmp/planted-by-{ben.name}")      # made by its code wherever it runs unsandboxed
    hostile_notebook.cells[1:1] = [*hostile.cells(), nbformat.v4.new_code_cell(f"open({str(planted)!r}, 'w')"),
                                   nbformat.v4.new_markdown_cell(f"[{DIAGRAM}](..%2F..%2F..%2Fsubmitted%2F{ben.name}"
                                                                 f"%2F{UNIT}%2Fdiagram.html)"), hostile.pasted_image()]
    submission = {ann.name: student_notebook(UNIT), ben.name: hostile_notebook}
    # beside ben's notebook: a module any kernel started in its folder would run, and a page of his
    beside = {"ipykernel_launcher.py": hub_attacks.launcher(str(LAUNCHED)), "diagram.html": hostile.DIAGRAM}
    mark = f"pwned-{room.instructor.name}"   # the files the origin attacks would leave in /tmp

    subprocess.run(["usermod", "--comment", "Ann Example", ann.name], check=True)   # a full name, as chfn gives

    with classroom.running_hub(room) as url, playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        teacher = _log_in(browser, url, room.instructor)
        pages = {learner.name: _log_in(browser, url, learner) for learner in (ann, ben, cat)}
        for page in pages.values():   # a learner's first screen: the Assignment List, not an empty Launcher
            page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current", has_text="Assignments").wait_for()

        # A learner's own terminal runs the learners' environment: the course, not its clone.
        where = in_browser_terminal(pages[ben.name], ben.name, "command -v python attention-course && python -c "
                                    "'import attention_course as a, grader as g; print(a.__file__, g.__file__)'")
        env = room.state / "env"
        assert where.status == 0 and where.output.count(str(env)) == 4, where.output
        _made_from_the_package_index(room, env)
        # Before the first release: nothing in the exchange's root can be made, moved or deleted.
        _refused(pages[ben.name], ben, _exchange_attempts(room))

        _as_documented(teacher, room, release)
        for learner in (ann, ben):   # fetch, answer, submit
            page = pages[learner.name] = _assignment_list(pages[learner.name])
            page.locator("#released_assignments_list .list_item", has_text=UNIT).locator("button",
                                                                                        has_text="Fetch").click()
            submit = page.locator("#fetched_assignments_list .list_item", has_text=UNIT).locator("button",
                                                                                                has_text="Submit")
            submit.wait_for(timeout=60_000)
            assert room.learner_notebook(learner).is_file()   # fetched into the learner's home, as theirs
            room.give(learner, room.learner_notebook(learner), nbformat.writes(submission[learner.name]))
            for name, text in beside.items() if learner is ben else ():
                room.give(learner, room.learner_notebook(learner).parent / name, text)
            submit.click()
            page.locator("#submitted_assignments_list .list_item", has_text=UNIT).wait_for(timeout=60_000)

        # From a learner's terminal: neither the answers nor the other's work, nor the exchange.
        inbound = room.exchange / "attention-course" / "inbound"
        [ann_submission] = inbound.glob(f"{ann.name}+{UNIT}+*")
        team = grp.getgrnam(hub.INSTRUCTORS).gr_gid   # the entry is the learner's and the instructors' alone
        assert (ann_submission.stat().st_gid, ann_submission.stat().st_mode & 0o777) == (team, 0o770)
        assert {path.stat().st_mode & 0o777 for path in ann_submission.iterdir()} == {0o644}   # closed by the folder
        clone, course = room.clone, room.course
        source = f"solutions/{UNIT}/{UNIT}"
        _refused(pages[ben.name], ben, [
            f"cat {clone}/{source}.py", f"cat {clone}/{source}.ipynb", f"cat {clone}/solutions-zh/{UNIT}/{UNIT}.ipynb",
            f"ls {clone}", f"ls {clone}/solutions", f"cat {clone}/translations/zh/{UNIT}.po", f"ls {clone}/.venv",
            f"cat {course}/{source}.ipynb", f"ls {course}", f"cat {course}/nbgrader_config.py",
            f"cat {room.learner_notebook(ann)}", f"ls {ann.home}", f"ls {inbound}",
            f"cat {ann_submission}/{UNIT}.ipynb", f"cat {room.state}/hub/jupyterhub.sqlite",
            f"ls {ann_submission}", f"cat {ann_submission}/submission_secret.txt",   # knowing the entry's name
            f"mv -f {ann_submission}/timestamp.txt {ann_submission}/{UNIT}.ipynb",
            *_exchange_attempts(room)])
        answer = next(line.strip() for line in (clone / f"{source}.py").read_text().split("### BEGIN SOLUTION")[4]
                      .splitlines() if line.strip())   # the last exercise's answer, a line no other code has
        for folder in (env, room.state / "settings"):   # what learners can read holds no answer, no hidden test
            # (but for nbgrader's own example notebooks, which its package carries)
            hidden = in_browser_terminal(pages[ben.name], ben.name, f"grep -rlF {json.dumps(answer)} {folder}; "
                                         f"grep -rlE 'BEGIN (SOLUTION|HIDDEN TESTS)' --include=*.ipynb "
                                         f"--exclude-dir=nbgrader {folder}")
            assert hidden.status == 1 and hidden.output.strip() == "", hidden.output
        assert (room.exchange / "attention-course" / "outbound" / UNIT).is_dir()   # all still in place

        # cat, in their own terminal, leaves in inbound/ what collect must refuse (each step succeeds).
        for attack in hub_attacks.inbound_attacks(room.exchange, ann.name, room.course / f"{source}.ipynb"):
            typed = in_browser_terminal(pages[cat.name], cat.name, attack)
            assert typed.status == 0, f"{attack}\n{typed.output[-2000:]}"
        _origin_attacks(url, room, teacher, pages, mark)
        _eavesdrop(room, teacher, pages)

        # The instructor, in their terminal: collect, grade as themselves (not root) in the sandbox,
        # release the feedback and export the grades, each as docs/instructors.md writes it.
        collected = _as_documented(teacher, room, collect)
        for refused in (f"claims to be {ann.name}'s but belongs to {cat.name}", "'not-a-date' is not a time",
                        f"{UNIT}.ipynb: a symbolic link", "data.bin: a symbolic link", "folders nested deeper than",
                        "longer than 1024 characters", "sparse40.bin: larger than the limit", "\\x1b[2K"):
            assert refused in collected, (refused, collected[-3000:])
        taken = room.course / "submitted" / cat.name / UNIT
        assert [path.name for path in taken.rglob("*") if path.is_file()] == ["timestamp.txt"]   # nothing of the links
        assert not (taken / "timestamp.txt").read_text().startswith(hub_attacks.LATER[:4])   # not the name's time
        assert (room.course / "submitted" / ben.name / UNIT / "ipykernel_launcher.py").is_file()   # his, collected

        # A second instructor joins the teaching team while the hub runs, grades what the first
        # collected, into the one gradebook, and releases a unit the first did not.
        second = room.join(instructor=True)
        colleague = _log_in(browser, url, second)
        _as_documented(colleague, room, grade, seconds=600, instructor=second)
        _as_documented(colleague, room, f"nbgrader release_assignment {OTHER_UNIT}", instructor=second)
        page = _assignment_list(pages[ann.name])
        page.locator("#released_assignments_list .list_item", has_text=OTHER_UNIT).wait_for(timeout=60_000)
        _refused(pages[ben.name], ben, [f"ls {second.home}", f"ls {room.course.resolve()}",
                                        f"cat {room.course.resolve()}/gradebook.db",
                                        f"ls {room.exchange}/attention-course/inbound/"])
        graded = [json.loads(path.read_text()) for path in (room.course / "grader_results").glob(f"*/{UNIT}.json")]
        scores = {r["student"]: r for r in graded}
        assert scores[ann.name]["score"] == FULL and scores[ben.name]["score"] == FULL - DOT
        assert all(r["sandbox"].startswith("bubblewrap: uid 65534 in a user namespace") for r in graded)
        assert all(r["sandbox"].endswith(FORKED) for r in graded), [r["sandbox"] for r in graded]
        released = _as_documented(teacher, room, feedback)
        # Each page is its learner's alone: ben knows the name of ann's, and still cannot read it.
        folder = feedback_folder(str(room.exchange), "attention-course", ann.name)
        ann_page = feedback_page(folder, (ann_submission / "submission_secret.txt").read_text(), UNIT)
        assert Path(ann_page).is_file(), released[-3000:]
        _refused(pages[ben.name], ben, [f"ls {Path(folder).parent}", f"ls {folder}", f"cat {ann_page}",
                                        f"printf fake > {folder}/.b", f"rm -f {ann_page}"])
        _as_documented(teacher, room, export)
        canvas = {row["SIS Login ID"]: row
                  for row in csv.DictReader(io.StringIO((room.course / "canvas.csv").read_text()))}
        assert float(canvas[ann.name][UNIT]) == FULL and float(canvas[ben.name][UNIT]) == FULL - DOT
        _refused(pages[ben.name], ben, [f"cat {room.course}/gradebook.db", f"cat {room.course}/canvas.csv",
                                        f"ls {room.course}/grader_results"])
        assert not (room.course / "feedback" / cat.name).exists()   # cat's links were never graded

        # Formgrader, opened in a browser tab of its own as nbgrader documents for JupyterHub 4.1+.
        teacher.goto(f"{url}/user/{room.instructor.name}/formgrader/manage_submissions/{UNIT}")
        table = teacher.locator("table", has_text=ann.name)
        table.locator("tr", has_text=ben.name).wait_for(timeout=30_000)
        # Each student by name (an account's full name, else its id), never "None, None".
        assert "Example, Ann" in table.locator("tr", has_text=ann.name).inner_text()
        assert "None" not in table.locator("tr", has_text=ben.name).inner_text()
        assert f"{FULL:g} / {FULL:g}" in table.locator("tr", has_text=ann.name).inner_text()
        assert f"{FULL - DOT:g} / {FULL:g}" in table.locator("tr", has_text=ben.name).inner_text()
        _instructor_views(url, room, teacher, ben, planted)
        # Its Autograde button (plain nbgrader autograde, learner code run as the instructor) is
        # refused with what to run instead, and leaves the grade and the graded notebook as they were.
        autograded = room.course / "autograded" / ben.name / UNIT / f"{UNIT}.ipynb"
        before = autograded.read_bytes()
        table.locator("tr", has_text=ben.name).locator(".autograde a").click()
        teacher.locator("#error-modal", has_text="graded in the sandbox").wait_for(timeout=60_000)
        fits = teacher.evaluate(hub_attacks.FITS, MESSAGE.splitlines())
        assert fits and all(inside for _, inside in fits), fits   # no line of the refusal cut off at the edge
        assert autograded.read_bytes() == before
        teacher.reload()
        teacher.locator("table tr", has_text=ben.name).wait_for(timeout=30_000)
        assert f"{FULL - DOT:g} / {FULL:g}" in teacher.locator("table tr", has_text=ben.name).inner_text()
        plain = in_browser_terminal(teacher, room.instructor.name, f"{cd} && nbgrader autograde {UNIT} --force")
        assert plain.status != 0 and "graded in the sandbox" in plain.output, plain.output[-2000:]
        assert autograded.read_bytes() == before

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
            points = FULL if learner is ann else FULL - DOT
            assert f"Score: {points:g}" in text.replace(".0", ""), text[:500]
            verdicts = [line for line in text.splitlines() if line.startswith("Grader: ")]
            failed = [line for line in verdicts if "\u2717" in line]
            assert len(verdicts) == len(unit_exercises(UNIT)) and len(failed) == (learner is ben), verdicts
            assert all(MISTAKE.message in line for line in failed), failed
            assert "The course:" not in text   # progress() prints nothing under grading
            assert hostile.pwned(report) == []
        browser.close()

    for exporter, column in (("CanvasExport", "SIS Login ID"), ("MoodleExport", "Username")):
        room.instructor_runs("-m", "nbgrader", "export", f"--exporter=grader.lms.{exporter}", "--to", "lms.csv")
        rows = {row[column]: row for row in csv.DictReader(io.StringIO((room.course / "lms.csv").read_text()))}
        assert float(rows[ann.name][UNIT]) == FULL and float(rows[ben.name][UNIT]) == FULL - DOT
    assert not planted.exists() and not list(Path("/tmp").glob(f"{mark}-*"))
    assert not list(Path("/tmp").glob(f"{LAUNCHED.name}*")) and not list(Path("/tmp").glob(f"{TRAITLETS.name}*"))
    with capsys.disabled():
        print(f"\nthe class on JupyterHub, end to end: {time.monotonic() - started:.0f} s", file=sys.stderr)


def test_the_chinese_edition_through_the_hub(room):
    """`./course hub zh`: JupyterLab's menus are Chinese; a learner who joins while the hub runs
    fetches the Chinese edition of unit 01 from the Assignment List, submits it with a catalogued
    mistake, and the feedback page they fetch is in Chinese, the mistake named in Chinese."""
    cd, release, collect, grade, feedback, _ = instructor_commands()
    wrong = answers(UNIT, "zh")
    wrong[MISTAKE.answer] = MISTAKE.code
    with classroom.running_hub(room, language="zh") as url, playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        teacher = _log_in(browser, url, room.instructor)
        dan = room.join(instructor=False)
        page = _log_in(browser, url, dan)
        page.locator(".lm-MenuBar-itemLabel", has_text="文件").wait_for()   # JupyterLab's menus, in Chinese
        _as_documented(teacher, room, f"{release} --force")   # the Chinese edition, in place of the English one
        page.click("#refresh_assignments_list")
        page.locator("#released_assignments_list .list_item", has_text=UNIT).locator("button",
                                                                                    has_text="Fetch").click()
        submit = page.locator("#fetched_assignments_list .list_item", has_text=UNIT).locator("button",
                                                                                            has_text="Submit")
        submit.wait_for(timeout=60_000)
        fetched = nbformat.read(room.learner_notebook(dan), as_version=4)
        released = nbformat.read(room.clone / "notebooks-zh" / UNIT / f"{UNIT}.ipynb", as_version=4)
        assert [c.source for c in fetched.cells] == [c.source for c in released.cells]   # the Chinese edition
        assert _chinese(fetched.cells[0].source)
        room.give(dan, room.learner_notebook(dan), nbformat.writes(student_notebook(UNIT, wrong, language="zh")))
        submit.click()
        page.locator("#submitted_assignments_list .list_item", has_text=UNIT).wait_for(timeout=60_000)

        for command in (collect, grade, feedback):
            _as_documented(teacher, room, command, seconds=600)
        page.reload()
        page.wait_for_selector(".jp-LabShell", timeout=60_000)
        item = _assignment_list(page).locator("#submitted_assignments_list .list_item", has_text=UNIT).first
        item.locator("button", has_text="Fetch Feedback").click()
        item.locator("a", has_text="view feedback").wait_for(timeout=60_000)
        [html] = (dan.home / UNIT / "feedback").glob(f"*/{UNIT}.html")
        report = page.context.new_page()
        report.goto(f"{url}/user/{dan.name}/files/{html.relative_to(dan.home).as_posix()}")
        text = report.locator("body").inner_text()
        verdicts = [line for line in text.splitlines() if line.startswith("评分：")]
        failed = [line for line in verdicts if "\u2717" in line]
        assert len(verdicts) == len(unit_exercises(UNIT)) and len(failed) == 1, verdicts
        assert _chinese(failed[0].split("\u2717", 1)[1]), failed   # the mistake's message, translated
        assert _chinese(text[:2000])   # the notebook's own text: the Chinese edition
        browser.close()


def _chinese(text: str) -> bool:
    return len(re.findall(r"[\u4e00-\u9fff]", text)) >= 10


def _origin_attacks(url: str, room, teacher, pages, mark: str) -> None:
    """No page of ann's server reaches another user's browser: the page her own Jupyter
    configuration would serve without login is not served (that configuration is not loaded),
    and nobody else may open her server, the instructor included. On the hub's origin, the
    instructor's cookie alone makes no terminal (JupyterHub's XSRF rule, in the browser)."""
    ann, ben, _ = room.learners
    page = hub_attacks.served_page([(room.instructor.name, "1"), (ben.name, "1")], mark)
    for path, text in (("~/.jupyter/jupyter_server_config.py", hub_attacks.user_config_serving(page)),
                       ("~/notes.html", page), ("~/traitlets.py", hub_attacks.traitlets(str(TRAITLETS)))):
        typed = in_browser_terminal(pages[ann.name], ann.name, hub_attacks.write_file(path, text))
        assert typed.status == 0, typed.output[-2000:]
    home = pages[ann.name]   # ann restarts her server from the hub's home page, so that it reads her config
    home.goto(f"{url}/hub/home")
    home.click("#stop")
    home.locator("#stop").wait_for(state="hidden", timeout=60_000)
    home.goto(f"{url}/hub/spawn/{ann.name}")   # what the page's Start button, then Launch, open
    home.wait_for_selector(".jp-LabShell", timeout=120_000)
    assert not list(Path("/tmp").glob(f"{TRAITLETS.name}*"))   # the server never loaded ann's module

    for visitor in (teacher, pages[ben.name]):   # each follows ann's links
        visit = visitor.context.new_page()
        answer = visit.goto(f"{url}/user/{ann.name}/hello")
        assert answer.status == 404 and visit.evaluate("window.outcome") is None, answer.status
        for path in ("files/notes.html", "lab"):
            answer = visit.goto(f"{url}/user/{ann.name}/{path}")
            assert answer.status == 403 and visit.evaluate("window.outcome") is None, (path, answer.status)
        visit.close()
    made = teacher.evaluate("""async (base) => (await fetch(`${base}/api/terminals`, {method: "POST"})).status""",
                            f"/user/{room.instructor.name}")   # no X-XSRFToken, as another page would send it
    assert made == 403, made
    assert not list(Path("/tmp").glob(f"{mark}-*"))


def _instructor_views(url: str, room, teacher, ben, planted: Path) -> None:
    """The instructor opens ben's submission in Formgrader's Manual Grading, his feedback page
    and, in JupyterLab, his notebook, and presses Validate there: no script of ben's runs, and
    Validate is refused before his code does."""
    view = teacher.context.new_page()
    view.goto(f"{url}/user/{room.instructor.name}/formgrader/gradebook/{UNIT}/{UNIT}")
    view.locator("tr", has_text=ben.name).locator("a").first.click()
    view.get_by_text("A note for the grader.").wait_for(timeout=60_000)   # the submission, rendered
    assert view.locator(f"img[alt='{hostile.PASTED}']").count() == 1   # with the image ben pasted
    assert hostile.pwned(view) == []
    assert view.evaluate("typeof jQuery === 'function' && typeof submission_id === 'string'")   # its own scripts ran
    policy = view.request.get(view.url).headers["content-security-policy"]
    assert "'nonce-" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0], policy
    # ben's relative link to his own page, as a click would follow it: not served
    link = view.locator("a", has_text=DIAGRAM)
    answer = view.request.get(urljoin(view.url, link.get_attribute("href")))
    assert answer.status == 404 and b"<script" not in answer.body(), answer.status
    # a file of the submission's own folder is served inert: text, in a sandbox
    inside = view.request.get(urljoin(view.url, f"{UNIT}.ipynb"))
    assert inside.headers["content-security-policy"].startswith("sandbox"), inside.headers
    assert inside.headers["content-type"].startswith("text/plain"), inside.headers
    view.close()

    lab = teacher.context.new_page()
    [page] = (room.course / "feedback" / ben.name / UNIT).glob("*.html")
    lab.goto(f"{url}/user/{room.instructor.name}/files/{page.relative_to(room.course).as_posix()}")
    assert hostile.pwned(lab) == []
    submitted = f"submitted/{ben.name}/{UNIT}/{UNIT}.ipynb"   # an instructor's JupyterLab opens in the course folder
    # No kernel starts for it (ben's ipykernel_launcher.py beside it would run as the instructor):
    # as JupyterLab asks for one, and when it is opened.
    ran, why = in_browser_kernel(teacher, room.instructor.name, submitted, "print('ran')")
    assert not ran and "no kernel starts" in why, why
    lab.goto(f"{url}/user/{room.instructor.name}/lab/tree/{submitted}")
    lab.locator(".jp-Dialog", has_text="no kernel starts").wait_for(timeout=120_000)
    for _ in range(5):   # the refusal, then JupyterLab's offer of another kernel: both closed, no kernel
        if not lab.locator(".jp-Dialog").count():
            break
        lab.keyboard.press("Escape")
        lab.wait_for_timeout(500)
    lab.locator(".jp-NotebookPanel-toolbar .validate-button").click(timeout=120_000)
    dialog = lab.locator(".jp-Dialog", has_text="Validate runs only the course's own notebooks")
    dialog.wait_for(timeout=120_000)
    assert not planted.exists() and not list(Path("/tmp").glob(f"{LAUNCHED.name}*"))
    lab.close()


def _eavesdrop(room, teacher, pages) -> None:
    """ben listens to every kernel port and socket he can reach while the instructor runs the
    solution notebook's kind of cell and ann runs one of hers: he hears his own TCP kernel (the
    control), and nothing of theirs, whose kernels speak over Unix sockets in private folders."""
    ann, ben, _ = room.learners
    heard = ben.home / "heard.json"
    listen = in_browser_terminal(pages[ben.name], ben.name, hub_attacks.write_file("~/listen.py", hub_attacks.EAVESDROP)
                                 + f" && (setsid nohup python ~/listen.py 40 {heard} > ~/listen.log 2>&1 &)")
    assert listen.status == 0, listen.output[-2000:]
    _wait_for(Path(f"{heard}.ready"), 120, ben.home / "listen.log")
    said = {}
    for page, user, path, word in ((teacher, room.instructor.name, f"solutions/{UNIT}/{UNIT}.ipynb", "ANSWER"),
                                   (pages[ann.name], ann.name, "notes.ipynb", "WORK")):
        ran, printed = in_browser_kernel(page, user, path, f"import time\nfor i in range(4):\n    print('{word}-'"
                                         " + 'SECRET', i)\n    time.sleep(0.5)")
        assert ran and f"{word}-SECRET 3" in printed, printed
        said[user] = word
    _wait_for(heard, 120, ben.home / "listen.log")
    caught = json.loads(heard.read_text())
    text = "\n".join(caught["heard"])
    assert "CONTROL-HEARD" in text, caught   # the listening works: a TCP kernel is heard
    assert caught["ports"] > 0 and not [word for word in said.values() if f"{word}-SECRET" in text], caught


def _wait_for(path: Path, seconds: float, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:] if log.exists() else "no log"
        time.sleep(0.5)
