"""Feedback for each student: nbgrader's HTML report made from the autograded copy.

The report is a page a learner opens wherever they are: in JupyterLab's HTML viewer (which runs
no script unless trusted), in a browser tab from their server, or from disk, and often offline.
So FeedbackExporter, the exporter nbgrader_config.py gives generate_feedback, writes the maths as
MathML, which browsers draw themselves, instead of leaving TeX for MathJax from a CDN, and lets
long output lines wrap, so that the line naming a mistake is read whole.
"""
from __future__ import annotations

import copy
import html
from pathlib import Path

import nbformat
from jinja2 import DictLoader, pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from traitlets import default

from .. import course
from ..checks import i18n
from ..checks.i18n import say
from .results import NotebookResult

# Outputs wrap at the page's edge (nbgrader's page keeps each output line on one line, behind a
# scroll bar): at spaces where it can, anywhere in a long word.
WRAPPING = """
div.output_area pre { white-space: pre-wrap; word-break: normal; overflow-wrap: anywhere; }
"""


class Feedback:
    """Writes feedback/<student>/<unit>/<unit>.html with nbgrader's generate_feedback, whose
    shipped configuration strips hidden tests (the grader's copies hold none anyway)."""

    def __init__(self, course_root: Path, db_url: str):
        self.course_root = course_root
        self.api = course.nbgrader_api(course_root, db_url=db_url)

    def write(self, result: NotebookResult, autograded: Path) -> None:
        if not (result.unit and result.student):
            return
        if result.error:  # nothing ran: the released notebook, headed by the reason
            _rejected_copy(result, autograded)
        outcome = self.api.generate_feedback(result.unit, result.student, force=True)
        if not outcome["success"]:
            lines = outcome["log"].strip().splitlines() or ["(no log)"]
            result.flags.append("no feedback report: " + lines[-1][:200])


def _rejected_copy(result: NotebookResult, path: Path) -> None:
    """The released notebook with the reason it could not be graded on top, as the autograded copy."""
    nb = copy.deepcopy(nbformat.read(course.release_notebook(result.unit, result.language), as_version=4))
    with i18n.language(i18n.for_edition(result.language)):
        reason = say("**This notebook could not be graded:** {error}\n\nEvery exercise scores 0.", error=result.error)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(reason))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def mathml(tex: str, display: bool) -> str:
    """TeX maths as a MathML element; the TeX itself, shown as code, if it cannot be converted."""
    from latex2mathml.converter import convert

    try:
        return convert(tex, display="block" if display else "inline")
    except Exception:  # latex2mathml raises many kinds; the learner still reads the TeX
        return f"<code>{html.escape(tex)}</code>"


class MathMLRenderer(IPythonRenderer):
    """nbconvert's Markdown renderer, with $…$, $$…$$ and \\begin{…} environments as MathML."""

    def inline_math(self, body: str) -> str:
        return mathml(body, display=False)

    def block_math(self, body: str) -> str:
        return mathml(body, display=True)

    def latex_environment(self, name: str, body: str) -> str:
        return mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)


class FeedbackExporter(HTMLExporter):
    """The HTML exporter of nbgrader's feedback, with maths as MathML and wrapping outputs (see the module)."""

    @pass_context
    def markdown2html(self, context, source: str) -> str:
        """HTMLExporter.markdown2html with MathMLRenderer for its renderer."""
        cell = context.get("cell", {})
        renderer = MathMLRenderer(
            escape=False,
            attachments=cell.get("attachments", {}),
            embed_images=self.embed_images,
            path=context.get("resources", {}).get("metadata", {}).get("path", ""),
            anchor_link_text=self.anchor_link_text,
            exclude_anchor_links=self.exclude_anchor_links,
            **self.lexer_options,
        )
        return MarkdownWithMath(renderer=renderer).render(source)

    @default("extra_loaders")
    def _without_mathjax(self):
        """Where nbgrader's page loads MathJax (`{{ mathjax() }}` in its head), the wrapping rule
        instead: nothing is left for MathJax, which would load from the network."""
        return [DictLoader({"mathjax.html.j2": "{%- macro mathjax(url=None) -%}<style>" + WRAPPING + "</style>"
                                               "{%- endmacro %}"})]
