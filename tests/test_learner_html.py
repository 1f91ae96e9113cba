"""Pages made from a learner's notebook run none of the learner's scripts (grader/grading/safe_html.py):
Formgrader's view of a submission, with the exporter settings the instructor's server on the hub
ships (hub/instructor/jupyter_server_config.json), and the feedback page (FeedbackExporter). Each
page is opened in Chromium with every `javascript:` link clicked; a control page made without the
course's settings proves the payloads would run. The hub test opens the real Formgrader too."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import hostile
import nbformat
import pytest
from traitlets.config import Config

from grader import course

pytestmark = pytest.mark.system


ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
UNIT = "01_dot_product"


def notebook() -> nbformat.NotebookNode:
    """Unit 01's released notebook with the hostile cells added, as a learner would submit it."""
    nb = nbformat.read(course.release_notebook(UNIT, "en"), as_version=4)
    nb.cells[1:1] = hostile.cells()
    return nb


def formgrader_page(nb) -> str:
    """The page Formgrader's submission view makes: nbconvert's HTMLExporter with nbgrader's
    formgrade template, configured as the instructor's server configures it."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    shipped = json.loads((ROOT / "hub" / "instructor" / "jupyter_server_config.json").read_text())
    config = Config({"HTMLExporter": {**shipped.get("HTMLExporter", {}), "template_name": "formgrade",
                                      "extra_template_basedirs": [handlers.template_path]}})
    resources = {"assignment_id": UNIT, "notebook_id": UNIT, "submission_id": "x", "index": 0, "total": 1,
                 "base_url": "", "student": "ben", "last_name": None, "first_name": None,
                 "notebook_path": f"autograded/ben/{UNIT}/{UNIT}.ipynb"}
    html, _ = HTMLExporter(config=config).from_notebook_node(nb, resources=resources)
    return html


def feedback_page(nb) -> str:
    """The page generate_feedback makes with the course's nbgrader_config.py."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    for cell in nb.cells:   # as nbgrader's GetGrades leaves a graded notebook
        if "points" in cell.metadata.get("nbgrader", {}):
            cell.metadata.nbgrader["score"] = 0
    config = course.config()
    converter = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    exporter = converter.exporter_class(parent=converter, config=converter.config)
    html, _ = exporter.from_notebook_node(
        nb, resources={"nbgrader": {"notebook": UNIT, "score": 0, "max_score": 5, "late_penalty": 0}})
    return html


def unsafe_page(nb) -> str:
    """The control: nbconvert's HTMLExporter as it comes, which shows learner HTML as it is."""
    from nbconvert.exporters import HTMLExporter

    html, _ = HTMLExporter().from_notebook_node(nb)
    return html


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="needs Playwright: pip install -e '.[test]'")
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


# The page's elements that carry one of the payloads as a script, an event handler or a link.
_HANDLERS = """() => [...document.querySelectorAll('*')].filter(e =>
    e.tagName === 'SCRIPT' && e.textContent.includes('pwned')
    || [...e.attributes].some(a => (a.name.startsWith('on') || a.name === 'href' || a.name === 'srcdoc')
                                   && a.value.includes('pwned'))).map(e => e.outerHTML.slice(0, 200))"""


def _ran(browser, html: str) -> tuple[list[str], list[str]]:
    """What ran in the page, and its elements that still carry a payload where it could run."""
    page = browser.new_page()
    try:
        page.set_content(html, wait_until="load")
        return hostile.pwned(page), page.evaluate(_HANDLERS)
    finally:
        page.close()


def test_the_payloads_run_in_a_page_made_without_the_courses_settings(browser):
    ran, _ = _ran(browser, unsafe_page(notebook()))
    assert {"md-img", "md-svg", "md-link", "out-img", "out-js", "out-png-width"} <= set(ran), ran


@pytest.mark.parametrize("make", [formgrader_page, feedback_page], ids=["formgrader", "feedback"])
def test_no_learner_script_runs_in_the_instructors_views(browser, make):
    html = make(notebook())
    assert _ran(browser, html) == ([], [])
    assert "A note for the grader." in html and "<b>table</b>" in html   # the learner's words are still shown


def test_the_courses_own_cells_keep_their_hints_and_maths():
    """<details> hints and MathML survive the cleaning that learner cells get."""
    nb = nbformat.read(course.release_notebook("04_scaling", "en"), as_version=4)
    nb.cells = [cell for cell in nb.cells if cell.cell_type == "markdown"]
    html = feedback_page(nb)
    assert "<details>" in html and "<summary>" in html and "<math" in html and "&lt;details" not in html


# What a way past the cleaning would leave in the page: script the sanitiser did not know of.
MISSED = ('<img src="/no-such-image.png" onerror="(window.pwned=window.pwned||[]).push(\'missed-img\')">'
          "<script>(window.pwned=window.pwned||[]).push('missed-script')</script>")


def _served(html: str, path: str, policy: bool):
    """`html` served at `path` by a real tornado server, with Formgrader's policy
    (grader/grading/formgrader.py) or without; yields the page's address."""
    import asyncio
    import threading

    import tornado.web

    from grader.grading.formgrader import LearnerContentPolicy

    class Page(tornado.web.RequestHandler):
        def get(self, _):
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(html)

    started, box = threading.Event(), {}

    def serve():
        async def main():
            app = tornado.web.Application([(r"/(.*)", Page)], transforms=[LearnerContentPolicy] if policy else [])
            server = app.listen(0, "127.0.0.1")
            box["port"], box["stop"] = next(iter(server._sockets.values())).getsockname()[1], asyncio.Event()
            box["loop"] = asyncio.get_running_loop()
            started.set()
            await box["stop"].wait()
            server.stop()
        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield f"http://127.0.0.1:{box['port']}{path}"
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


@pytest.mark.parametrize("policy", [True, False], ids=["with-the-policy", "control"])
def test_formgraders_policy_alone_stops_script_the_cleaning_missed(browser, policy):
    """The submission view with script planted after the notebook's start, as a way past the
    sanitiser would leave it: served with the policy, none of it runs, and the template's own
    inline script does; the control, served without, runs it."""
    from grader.grading.formgrader import NOTEBOOK_STARTS

    html = formgrader_page(notebook())
    start = html.index(NOTEBOOK_STARTS.decode())   # the first place learner content can be
    html = html[:start] + html[start:].replace('id="notebook">', 'id="notebook">' + MISSED, 1).replace(
        "A note for the grader.", "A note for the grader." + MISSED)
    for url in _served(html, "/formgrader/submissions/abc123/", policy):
        page = browser.new_page()
        try:
            answer = page.goto(url)
            ran = hostile.pwned(page)
            own = page.evaluate("typeof submission_id !== 'undefined' && submission_id")
        finally:
            page.close()
    if policy:
        assert "nonce-" in answer.headers["content-security-policy"]
        assert ran == [] and own == "x", (ran, own)
    else:
        assert {"missed-img", "missed-script"} <= set(ran), ran


@pytest.mark.parametrize("path,status,kind", [
    ("/formgrader/submissions/abc123/diagram.html", 200, "text/plain; charset=utf-8"),
    ("/formgrader/submissions/abc123/..%2F..%2F..%2Fsubmitted%2Fben%2F01%2Fdiagram.html", 404, None),
    ("/formgrader/submissions/abc123/sub/%2E%2E/%2E%2E%2F%2E%2E/x.html", 404, None),
    ("/formgrader/submissions/abc123/plot.png", 200, "text/plain; charset=utf-8")])
def test_a_submissions_files_are_served_inert_and_only_from_its_own_folder(browser, path, status, kind):
    """nbgrader's files of a submission, as Formgrader serves them with the policy: HTML a learner
    submitted is text in a sandbox, and a path out of the submission's folder is not served."""
    for url in _served(MISSED, path, policy=True):
        page = browser.new_page()
        try:
            if status == 200:
                answer, ran = page.goto(url), page.evaluate("window.pwned || []")
            else:   # Chromium shows no page for an empty 404: asked as its fetch would
                answer, ran = page.request.get(url), []
        finally:
            page.close()
    assert answer.status == status and ran == []
    assert answer.headers["content-security-policy"].startswith("sandbox")
    if kind:
        assert answer.headers["content-type"] == kind


@pytest.mark.parametrize("policy", [True, False], ids=["with-the-policy", "control"])
def test_the_feedback_pages_policy_alone_stops_script_the_cleaning_missed(browser, policy):
    """A feedback page (and so a class report, which carries the same policy) with script planted
    after its head: none of it runs under the page's own policy; without it, it does."""
    from grader.grading.safe_html import POLICY_META

    html = feedback_page(notebook())
    assert html.count(POLICY_META) == 1 and html.index(POLICY_META) < html.index("<title>")
    if not policy:
        html = html.replace(POLICY_META, "")
    html = html.replace("A note for the grader.", "A note for the grader." + MISSED)
    ran, _ = _ran(browser, html)
    assert (ran == []) if policy else ({"missed-img", "missed-script"} <= set(ran)), ran
