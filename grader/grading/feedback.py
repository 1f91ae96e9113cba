"""Feedback for each student: nbgrader's HTML report made from the autograded copy.

The report is a page a learner opens wherever they are: in JupyterLab's HTML viewer (which runs
no script unless trusted), in a browser tab from their server, or from disk, and often offline.
So FeedbackExporter, the exporter nbgrader_config.py gives generate_feedback, writes the maths as
MathML, which browsers draw themselves, instead of leaving TeX for MathJax from a CDN, and lets
long output lines wrap, so that the line naming a mistake is read whole. It runs no script of the
learner's: the page may be opened by the instructor too, as themselves (grader/grading/safe_html.py).
"""
from __future__ import annotations

import copy
from pathlib import Path

import nbformat
from jinja2 import BytecodeCache, FileSystemLoader, pass_context
from nbconvert.exporters import HTMLExporter
from traitlets import default

from .. import course
from ..checks import i18n
from ..checks.i18n import say
from . import safe_html
from .results import NotebookResult


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


class _CompiledTemplates(BytecodeCache):
    """The templates of the feedback page, compiled once per process. nbgrader makes a new exporter,
    and so a new Jinja environment, for every notebook's report: a grading worker compiled the same
    nine templates again for each (about 0.2 s of it). Jinja checks each template's source against
    what it compiled, so an edited template is compiled again."""

    def __init__(self):
        self.compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        if bucket.key in self.compiled:
            bucket.bytecode_from_string(self.compiled[bucket.key])

    def dump_bytecode(self, bucket) -> None:
        self.compiled[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _CompiledTemplates()


class FeedbackExporter(HTMLExporter):
    """The HTML exporter of nbgrader's feedback: learner HTML cleaned, maths as MathML and
    wrapping outputs (see the module and grader/grading/safe_html.py)."""

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _COMPILED
        return environment

    @default("sanitize_html")
    def _sanitized(self):
        return True

    @default("extra_loaders")
    def _without_mathjax(self):
        """Found before nbconvert's own templates: mathjax.html.j2, which loads no MathJax."""
        return [FileSystemLoader(safe_html.TEMPLATES)]

    def from_notebook_node(self, nb, resources=None, **kw):
        """The page, with a policy that lets no script run in it (safe_html.NO_SCRIPT), its
        outputs' metadata plain (safe_html.plain_metadata)."""
        nb = copy.deepcopy(nb)
        safe_html.PlainMetadata().preprocess(nb, {})
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                safe_html.without_colour(output)
        page, resources = super().from_notebook_node(nb, resources, **kw)
        page = safe_html.described_images(page, nb)
        return safe_html.readable(safe_html.with_policy(page), course.language_of(nb)), resources

    @pass_context
    def markdown2html(self, context, source: str) -> str:
        """HTMLExporter.markdown2html, cleaned and with its maths as MathML."""
        return safe_html.render_markdown(
            source, context.get("cell", {}), context.get("resources", {}).get("metadata", {}).get("path", ""),
            embed_images=self.embed_images, anchor_link_text=self.anchor_link_text,
            exclude_anchor_links=self.exclude_anchor_links, **self.lexer_options)
