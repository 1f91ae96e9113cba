"""The feedback page a learner opens (nbgrader's generate_feedback with grader.grading.feedback's exporter):
its maths drawn with no script and no network, and the line that names a mistake wrapped, not cut."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from catalogue.verdicts import catalogued_message
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

from grader import course
from grader.grading.feedback import FeedbackExporter
from grader.grading.safe_html import mathml

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
COSINE = ("01_dot_product", "dot product normalised into a cosine")   # a catalogued mistake: its message is long


def mistake_line() -> str:
    return (f"Grader: \u2717 dot_product: {catalogued_message(*COSINE)} (case: Your \u00b7 journey) (0/1) "
            + "and more words " * 12)


LONG_INPUT = ("scores = torch.stack([dot_product(query_vector_of_the_second_token, every_row_of_the_inputs) "
              "for every_row_of_the_inputs in inputs_of_the_six_token_sentence_given_above])  # one long line")


def feedback_page(tmp_path: Path) -> Path:
    """A feedback page as generate_feedback writes it with the course's nbgrader_config.py: a
    paragraph with inline and display maths, and a self-check's output with one long line."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    config = course.config()
    converter = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    assert converter.exporter_class is FeedbackExporter
    exporter = converter.exporter_class(parent=converter, config=converter.config)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("Its scores are the dot products of $x^{(2)}$ with every row:\n\n"
                                      "$$a \\cdot b = \\sum_{i=1}^{d} a_i\\, b_i .$$"),
        nbformat.v4.new_code_cell(LONG_INPUT),
        nbformat.v4.new_code_cell('check("dot_product")', outputs=[
            nbformat.v4.new_output("stream", name="stdout", text=mistake_line() + "\n")]),
    ])
    html, _ = exporter.from_notebook_node(
        nb, resources={"nbgrader": {"notebook": "01_dot_product", "score": 0, "max_score": 1, "late_penalty": 0}})
    path = tmp_path / "01_dot_product.html"
    path.write_text(html, encoding="utf-8")
    return path


def test_the_feedback_page_has_its_maths_as_mathml_and_no_mathjax(tmp_path):
    html = feedback_page(tmp_path).read_text(encoding="utf-8")
    assert html.count("<math") == 2 and 'display="block"' in html
    assert "$x^{(2)}$" not in html and "\\sum" not in html
    scripts = [str(script).lower() for script in BeautifulSoup(html, features="html.parser").find_all("script")]
    assert not any("mathjax" in script for script in scripts) and "cdnjs" not in html
    assert "white-space: pre-wrap" in html


def test_every_formula_of_the_course_becomes_mathml():
    """The notebooks' TeX, both editions: latex2mathml converts each (else the page shows it as code)."""
    formulas = set()

    class Collect(IPythonRenderer):
        def inline_math(self, body):
            formulas.add((body, False))
            return ""

        def block_math(self, body):
            formulas.add((body, True))
            return ""

        def latex_environment(self, name, body):
            formulas.add((f"\\begin{{{name}}}{body}\\end{{{name}}}", True))
            return ""

    for path in sorted(ROOT.glob("notebooks*/*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                MarkdownWithMath(renderer=Collect(escape=False)).render(cell.source)
    assert len(formulas) > 100
    failed = [tex for tex, display in formulas if not mathml(tex, display).startswith("<math")]
    assert failed == []


@pytest.mark.system
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_opened_from_disk_offline_the_mistake_and_long_code_wrap_and_the_maths_is_drawn(tmp_path):
    playwright = pytest.importorskip("playwright.sync_api", reason="needs Playwright: pip install -e '.[test]'")
    path = feedback_page(tmp_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 800, "height": 900})
            fetched = []
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                       else (fetched.append(route.request.url), route.abort()))
            page.goto(path.as_uri())
            line = page.locator("pre", has_text="Grader: \u2717")
            box, width = line.bounding_box(), page.evaluate("document.documentElement.clientWidth")
            assert box["x"] + box["width"] <= width, (box, width)
            assert line.evaluate("e => e.scrollWidth - e.clientWidth") <= 1
            assert box["height"] > 3 * line.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
            # The learner's own long line of code wraps too, instead of hiding behind a scroll bar.
            code = page.locator("div.input_area pre", has_text="every_row_of_the_inputs")
            box = code.bounding_box()
            assert box["x"] + box["width"] <= width, (box, width)
            assert code.evaluate("e => e.scrollWidth - e.clientWidth") <= 1
            assert box["height"] > 1.5 * code.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
            # MathML is drawn by the browser: a sum with limits is taller than a line of text.
            display = page.locator("math[display=block]")
            assert display.bounding_box()["height"] > 25
            assert fetched == []
        finally:
            browser.close()


def test_the_feedback_preprocessors_are_named_so_the_graders_settings_import_no_nbgrader():
    """nbgrader_config.py names generate_feedback's preprocessors rather than importing them
    (nbconvert imports each as it registers it): the grader reads its limits from that file, and
    importing nbgrader there cost each `python -m grader grade` about 1.4 s of its start."""
    code = ("import sys; from grader.grading import settings; settings.load(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nbgrader', 'nbconvert')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    from nbconvert.exporters import Exporter
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import ClearHiddenTests, GetGrades

    exporter = Exporter()
    for preprocessor in course.config().GenerateFeedback.preprocessors:   # as nbgrader's converters do
        exporter.register_preprocessor(preprocessor, enabled=True)
    assert [type(p) for p in exporter._preprocessors[-3:]] == [GetGrades, CSSHTMLHeaderPreprocessor, ClearHiddenTests]


def test_a_second_report_in_the_same_process_compiles_no_template(monkeypatch):
    """A grading worker writes one report per notebook, each with a new exporter (nbgrader's way):
    the templates are compiled for the first and reused after, and the page is the same."""
    from jinja2 import Environment

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("The dot product $a \\cdot b$."),
                                         nbformat.v4.new_code_cell("print(1)")])
    first, _ = FeedbackExporter().from_notebook_node(nb)
    compiled = []
    real = Environment.compile
    monkeypatch.setattr(Environment, "compile", lambda self, *a, **k: compiled.append(a[1:2]) or real(self, *a, **k))
    second, _ = FeedbackExporter().from_notebook_node(nb)
    assert compiled == [] and second == first


def test_a_markdown_cell_every_learner_repeats_is_rendered_once_per_process(monkeypatch):
    """Every learner's report repeats the unit's markdown cells: a second report renders none of
    them again and its page is the same; a cell with other text or other attachments is rendered."""
    from grader.grading import safe_html

    rendered = []

    class Counting(safe_html.MarkdownWithMath):
        def render(self, source):
            rendered.append(source)
            return super().render(source)

    monkeypatch.setattr(safe_html, "MarkdownWithMath", Counting)
    text = "The second learner's page: $q \\cdot k$, as the first learner's. ![](attachment:a.png)"

    def page(text, image="iVBORw0KGgo="):
        cell = nbformat.v4.new_markdown_cell(text, attachments={"a.png": {"image/png": image}}, id="unit-text")
        return FeedbackExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[cell]))[0]

    first = page(text)
    assert rendered == [text]
    assert page(text) == first
    assert rendered == [text]
    page(text, image="R0lGODlhAQABAAAAACw=")
    page(text + " More.")
    assert rendered == [text, text, text + " More."]
