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
    assert {"md-img", "md-svg", "md-link", "out-img", "out-js"} <= set(ran), ran


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
