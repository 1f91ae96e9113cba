"""The pages the course writes conform to WCAG 2.1 AA as far as axe-core checks: the feedback page
in each language (from notebooks graded as a class's are) and the class report. axe-core comes
from the npm registry (`.ci/run` installs it), and runs in the system's Chromium."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from reference import student_notebook

from grader import course

pytestmark = pytest.mark.system

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# Rules outside those tags that the criteria name: headings in order, tables whose cells
# have headers, content inside landmarks.
ALSO = ["heading-order", "td-has-header", "region", "empty-heading", "empty-table-header"]


def axe_script() -> Path | None:
    """axe-core's script, installed with npm (globally, as `.ci/run` does, or where AXE_CORE says)."""
    if os.environ.get("AXE_CORE"):
        return Path(os.environ["AXE_CORE"])
    npm = shutil.which("npm")
    if npm is None:
        return None
    root = subprocess.run([npm, "root", "--global"], capture_output=True, text=True).stdout.strip()
    script = Path(root) / "axe-core" / "axe.min.js"
    return script if script.exists() else None


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="needs Playwright: pip install -e '.[test]'")
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    if axe_script() is None:
        pytest.skip("axe-core is not installed (npm install --global axe-core)")
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def violations(browser, html: str) -> list[str]:
    """axe-core's WCAG 2.0/2.1 A and AA violations on a page: one line per rule, with its first
    elements. The page's own policy forbids scripts, so axe comes in past it (bypass_csp)."""
    context = browser.new_context(bypass_csp=True)
    try:
        page = context.new_page()
        page.set_content(html, wait_until="load")
        page.add_script_tag(path=str(axe_script()))
        found = page.evaluate("""async ([tags, also]) => (await axe.run(document, {runOnly: {type: 'tag', values: tags},
                rules: Object.fromEntries(also.map(rule => [rule, {enabled: true}]))}))
            .violations.map(v => `${v.id} (${v.nodes.length}): ` + v.nodes.slice(0, 3).map(n => n.target.join(' ')
                + ' ' + n.failureSummary.split('\\n').slice(1, 2).join('').trim()).join('; '))""", [WCAG_AA, ALSO])
        return found
    finally:
        context.close()


def graded_pages(root: Path, notebooks: dict[str, nbformat.NotebookNode]) -> dict[str, str]:
    """The feedback pages of `notebooks` ({student: notebook of unit 01}), graded as a class is
    (`python -m grader grade`, which writes them as generate_feedback does)."""
    unit = "01_dot_product"
    for student, nb in notebooks.items():
        path = root / "submitted" / student / unit / f"{unit}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    done = subprocess.run([sys.executable, "-m", "grader", "grade", str(root / "submitted"), "--course-dir", str(root),
                           "--workers", "2"], capture_output=True, text=True, timeout=900, cwd=course.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return {student: (root / "feedback" / student / unit / f"{unit}.html").read_text(encoding="utf-8")
            for student in notebooks}


def test_every_english_feedback_page_conforms(browser, course_graded):
    """Every unit's feedback page, for a full notebook and a blank one (tracebacks, plots, MathML)."""
    found = {}
    for unit in course.units():
        for kind in ("reference", "blank"):
            page = course_graded.feedback(kind, unit).read_text(encoding="utf-8")
            assert '<html lang="en"' in page
            if kind == "reference":   # each figure of the learner's own run keeps its description
                alts = re.findall(r'<img[^>]* alt="([^"]*)"', page)
                assert alts and all(a.startswith("Figure. ") for a in alts), (unit, [a[:60] for a in alts])
            if problems := violations(browser, page):
                found[f"{unit} {kind}"] = problems
    assert found == {}


def test_a_chinese_feedback_page_conforms_and_says_its_language(browser, tmp_path):
    pages = graded_pages(tmp_path, {"full": student_notebook("01_dot_product", language="zh"),
                                    "blank": nbformat.read(course.release_notebook("01_dot_product", "zh"), 4)})
    for student, page in pages.items():
        assert '<html lang="zh-Hans"' in page, student
        if student == "full":
            alts = re.findall(r'<img[^>]* alt="([^"]*)"', page)
            assert alts and all(a.startswith("图：") for a in alts), [a[:60] for a in alts]
        assert violations(browser, page) == [], student


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_class_report_conforms(browser, tmp_path, language):
    from test_report import sample_class

    from grader.grading.report import write_report

    path = tmp_path / "report.html"
    write_report(sample_class(), path, language=language)
    page = path.read_text(encoding="utf-8")
    assert f'<html lang="{"zh-Hans" if language == "zh" else "en"}"' in page
    assert violations(browser, page) == []


def test_an_injected_violation_is_found(browser, course_graded):
    """The check can fail: a feedback page given a grey-on-grey paragraph, a link without a name and
    a heading that skips levels."""
    page = course_graded.feedback("reference", "01_dot_product").read_text(encoding="utf-8")
    broken = page.replace("</main>", "<p style='color:#bbb;background:#f5f5f5'>faint</p><a href='#x'></a>"
                                     "<h1>a</h1><h5>b</h5></main>")
    found = " ".join(violations(browser, broken))
    assert "color-contrast" in found and "link-name" in found and "heading-order" in found


@pytest.mark.xdist_group("end-to-end")
@pytest.mark.parametrize("language", ["en", "zh"])
def test_every_unit_as_jupyterlab_shows_it(browser, tmp_path, language):
    """Each unit opened in the learner's JupyterLab, every cell rendered: the course's own content
    (its rendered text and outputs) has no violation. What JupyterLab's interface itself violates is
    listed in docs/instructors.md ("Accessibility")."""
    from test_browser import UNITS, open_notebook, start_lab

    content = ("['.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownOutput'], "
               "['.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output']")
    found = {}
    with start_lab(tmp_path, exchange=tmp_path / "no-exchange", language=language, every_cell=True) as lab:
        context = browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        for unit in UNITS:
            open_notebook(page, lab, unit)
            rendered = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownOutput")
            rendered.last.wait_for(timeout=30_000)
            cells = nbformat.read(course.release_notebook(unit, language), 4).cells
            markdown = sum(c.cell_type == "markdown" for c in cells)
            assert rendered.count() == markdown, f"{unit}: {rendered.count()} of {markdown} text cells rendered"
            page.add_script_tag(path=str(axe_script()))
            problems = page.evaluate(f"""async ([tags, also]) => (await axe.run({{include: [{content}]}},
                {{runOnly: {{type: 'tag', values: tags}},
                  rules: Object.fromEntries(also.map(r => [r, {{enabled: true}}]))}}))
                .violations.map(v => `${{v.id}} (${{v.nodes.length}}): `
                                     + v.nodes.slice(0, 3).map(n => n.html.slice(0, 120)).join('; '))""",
                                     [WCAG_AA, [r for r in ALSO if r != "region"]])   # landmarks: JupyterLab's
            if problems:
                found[unit] = problems
        context.close()
    assert found == {}
