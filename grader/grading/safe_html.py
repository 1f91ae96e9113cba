"""Learner notebooks as HTML that runs no learner script, for every page an instructor or a learner
opens from the grader: nbgrader's feedback pages (grader/grading/feedback.py) and Formgrader's
views of a submission (hub/instructor/jupyter_server_config.py).

A learner writes the markdown and, through their code, the outputs of the notebook the instructor
then views as themselves: `<img onerror=…>`, `<svg onload=…>`, `<script>` or a `javascript:` link
there would run with the instructor's account. So, with nbconvert's own means:
- outputs go through nbconvert's `HTMLExporter.sanitize_html` (bleach on HTML and markdown
  outputs; JavaScript and widget outputs dropped; SVG shown as an image, whose scripts never run);
- markdown cells, which nbgrader's Formgrader and feedback templates render raw, are rendered by
  `markdown2html` below: nbconvert's renderer with harmful link protocols refused, TeX as MathML,
  and the result cleaned by bleach with nbconvert's list of tags plus what the course's own cells
  use (`<details>`, MathML). Formgrader still loads MathJax for what TeX is left, with its Safe
  extension (no `javascript:` in `\\href`); feedback pages load none (`TEMPLATES`).
"""
from __future__ import annotations

import functools
import html
import json
import re
from pathlib import Path

import bleach
import nbformat
from jinja2 import pass_context
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor

from ..checks.figures import ALT

TEMPLATES = Path(__file__).resolve().parent / "templates"   # mathjax.html.j2: no MathJax; outputs wrap

_MATHML = ("math", "semantics", "annotation", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub", "msup",
           "msubsup", "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd", "mstyle",
           "mpadded", "mphantom", "menclose", "merror", "mfenced", "mmultiscripts", "mprescripts", "none")
_MATHML_ATTRIBUTES = ["xmlns", "display", "mathvariant", "mathsize", "stretchy", "fence", "separator", "separators",
                      "accent", "accentunder", "columnalign", "columnlines", "columnspacing", "rowalign", "rowlines",
                      "rowspacing", "frame", "width", "height", "depth", "lspace", "rspace", "displaystyle",
                      "scriptlevel", "linethickness", "open", "close", "notation", "minsize", "maxsize",
                      "movablelimits", "form", "largeop", "symmetric", "encoding"]
TAGS = frozenset({*bleach.ALLOWED_TAGS, "p", "div", "span", "pre", "code", "br", "hr", "img", "h1", "h2", "h3", "h4",
                  "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "del", "sup", "sub", "dl", "dt", "dd",
                  "kbd", "details", "summary", *_MATHML})
ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "*": ["class", "id", "title"], "img": ["src", "alt", "title", "width",
              "height"], "th": ["align", "colspan", "rowspan"], "td": ["align", "colspan", "rowspan"],
              "ol": ["start"], **{tag: _MATHML_ATTRIBUTES for tag in _MATHML}}


# The policy of a page the grader writes (feedback pages, the class report): they need no script at
# all, so none runs, wherever the page is opened, whatever got past the cleaning.
NO_SCRIPT = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
             "form-action 'none'")
POLICY_META = f'<meta http-equiv="Content-Security-Policy" content="{NO_SCRIPT}">'


def with_policy(page: str) -> str:
    """`page` with POLICY_META first in its head (before anything of the learner's)."""
    at = page.find("<head>")
    at = at + len("<head>") if at >= 0 else 0
    return page[:at] + POLICY_META + page[at:]


HTML_LANG = {"en": "en", "zh": "zh-Hans"}
CODE_BACKGROUND = "#f5f5f5"   # the grey of input cells in nbconvert's and nbgrader's templates


def contrast(foreground: str, background: str) -> float:
    """WCAG 2.1's contrast ratio of two colours written #rrggbb (1 to 21)."""
    def luminance(colour: str) -> float:
        value = colour.lstrip("#")
        value = "".join(c * 2 for c in value) if len(value) == 3 else value
        linear = [(c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
                  for c in (int(value[i:i + 2], 16) / 255 for i in (0, 2, 4))]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    light, dark = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def darkened(colour: str, background: str, ratio: float = 4.6) -> str:
    """`colour`, darkened in steps of 4% until it stands out from `background` by `ratio`."""
    value = colour.lstrip("#")
    rgb = [int(value[i:i + 2], 16) for i in (0, 2, 4)]
    while contrast(written := "#" + "".join(f"{c:02x}" for c in rgb), background) < ratio:
        rgb = [int(c * 0.96) for c in rgb]
    return written


@functools.cache
def readable_style() -> str:
    """What nbconvert's and nbgrader's templates miss of WCAG 2.1 AA, for every page the course
    writes: links dark enough on grey (4.5:1) and underlined, told apart from the text around them
    by more than colour; white links on nbgrader's blue cell headings; and each colour of the code
    highlighting (pygments' default style) darkened where it falls below 4.5:1 on the cells' grey."""
    from pygments.styles import get_style_by_name
    from pygments.token import STANDARD_TYPES, Whitespace

    rules = ["a,a:visited{color:#0b4f8a;text-decoration:underline}",
             "div.nbgrader_cell.panel-primary .panel-heading a{color:#fff}"]
    for token, style in get_style_by_name("default"):
        colour = style["color"]
        if colour and token is not Whitespace and contrast(f"#{colour}", CODE_BACKGROUND) < 4.5:
            rules.append(f".highlight .{STANDARD_TYPES[token]}{{color:{darkened(f'#{colour}', CODE_BACKGROUND)}}}")
    return f"<style>{''.join(rules)}</style>"


def readable(page: str, language: str) -> str:
    """`page` with the language of its text on <html> (a screen reader picks its voice by it),
    `readable_style()` last in its head and its body in a <main> landmark."""
    lang = HTML_LANG.get(language, language)
    start = page.find("<html")
    if start >= 0:
        end = page.find(">", start)
        tag = re.sub(r"\slang=(\"[^\"]*\"|'[^']*'|\S+)", "", page[start:end])
        page = page[:start] + f'{tag} lang="{lang}"' + page[end:]
    else:
        page = f'<html lang="{lang}">' + page
    at = page.find("</head>")
    page = page[:at] + readable_style() + page[at:] if at >= 0 else readable_style() + page
    body = re.search(r"<body[^>]*>", page)
    end = page.rfind("</body>")
    if body and end > body.end():   # one landmark around all of it: a screen reader's "main content"
        page = page[:body.end()] + "<main>" + page[body.end():end] + "</main>" + page[end:]
    return page


MAX_ALT = 4000    # characters of an image's description kept (grader.figures.show writes a few hundred)


def plain_metadata(output):
    """An output with no metadata but an image's width and height, as whole numbers: every page
    made from a learner's notebook writes them into HTML, and nbconvert's template writes a width
    without quotes, where a learner's text would become an attribute of its own."""
    if "metadata" not in output:
        return output
    kept = {}
    for kind, given in output.metadata.items():
        sizes = {key: _pixels(given.get(key)) for key in ("width", "height")} if isinstance(given, dict) else {}
        kept_here = {key: size for key, size in sizes.items() if size is not None}
        if isinstance(given, dict) and isinstance(given.get(ALT), str):
            kept_here[ALT] = given[ALT][:MAX_ALT]   # text: the page escapes it (described_images)
        if kind.startswith("image/") and kept_here:
            kept[kind] = kept_here
    output.metadata = nbformat.from_dict(kept)
    return output


def described(output) -> str | None:
    """The description an image output carries (grader.figures.show), if any."""
    given = output.get("metadata", {}).get("image/png", {})
    return given.get(ALT) if isinstance(given, dict) and isinstance(given.get(ALT), str) else None


def described_images(page: str, nb) -> str:
    """`page` with each described image's `alt` set to its description (nbconvert's templates
    write none, and nbconvert fills in a placeholder)."""
    from bs4 import BeautifulSoup

    texts = {output.data["image/png"].strip(): text for cell in nb.cells for output in cell.get("outputs", [])
             if "image/png" in output.get("data", {}) and (text := described(output))}
    if not texts:
        return page
    soup = BeautifulSoup(page, features="html.parser")
    for image in soup.select('img[src^="data:image/png;base64,"]'):
        text = texts.get(image["src"].split(",", 1)[1].strip())
        if text:
            image["alt"] = text
    return str(soup)


def _pixels(value) -> int | None:
    """A size as nbconvert would show it: a whole number of pixels, or nothing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 100_000:
        return None
    return int(value)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def without_colour(output):
    """An error's traceback or a stream's text without terminal colours: IPython colours
    tracebacks inline (green on grey, 3.9:1), which no page's style can darken."""
    if output.get("output_type") == "error":
        output.traceback = [_ANSI.sub("", line) for line in output.get("traceback", [])]
    elif output.get("output_type") == "stream" and isinstance(output.get("text"), str):
        output.text = _ANSI.sub("", output.text)
    return output


class PlainMetadata(Preprocessor):
    """`plain_metadata` on every output, before a page is made (Formgrader's exporter; the
    graded copy is written so already)."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            cell.outputs = [_image_first(plain_metadata(output)) for output in cell.get("outputs", [])]
        return cell, resources


def _image_first(output):
    """A described figure shown as its image (with the description as `alt`), not as the HTML
    JupyterLab shows: pages clean HTML of data: links, which would leave it empty."""
    if "text/html" in output.get("data", {}) and described(output):
        del output.data["text/html"]
    return output


def clean(page_part: str) -> str:
    """HTML with only the tags and attributes above, and links only to http(s), mailto and the page
    itself; anything else is shown as text."""
    return bleach.clean(page_part, tags=TAGS, attributes=ATTRIBUTES, protocols={"http", "https", "mailto"})


def mathml(tex: str, display: bool) -> str:
    """TeX maths as a MathML element; the TeX itself, shown as code, if it cannot be converted."""
    from latex2mathml.converter import convert

    try:
        return convert(tex, display="block" if display else "inline")
    except Exception:  # latex2mathml raises many kinds; the reader still sees the TeX
        return f"<code>{html.escape(tex)}</code>"


class MathMLRenderer(IPythonRenderer):
    """nbconvert's Markdown renderer, with $…$, $$…$$ and \\begin{…} environments as MathML."""

    def inline_math(self, body: str) -> str:
        return mathml(body, display=False)

    def block_math(self, body: str) -> str:
        return mathml(body, display=True)

    def latex_environment(self, name: str, body: str) -> str:
        return mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)


def render_markdown(source: str, cell: dict, path: str = "", **options) -> str:
    """A markdown cell as cleaned HTML (see the module); `options` go to nbconvert's renderer.
    Every learner's notebook repeats the unit's markdown cells, so each distinct cell is rendered
    once per process (a grading worker's feedback pages, a Formgrader server's views)."""
    key = (source, json.dumps(cell.get("attachments", {}), sort_keys=True), path, tuple(sorted(options.items())))
    try:
        hash(key)
    except TypeError:   # an option that cannot be a key (a lexer option holding a dict): rendered each time
        return _render(*key)
    return _rendered(*key)


def _render(source: str, attachments: str, path: str, options: tuple) -> str:
    renderer = MathMLRenderer(escape=False, allow_harmful_protocols=False, attachments=json.loads(attachments),
                              path=path, **dict(options))
    return clean(MarkdownWithMath(renderer=renderer).render(source))


_rendered = functools.lru_cache(maxsize=4096)(_render)


@pass_context
def markdown2html(context, source: str) -> str:
    """The `markdown2html` filter of Formgrader's HTMLExporter (`HTMLExporter.filters`)."""
    path = context.get("resources", {}).get("metadata", {}).get("path", "")
    return render_markdown(source, context.get("cell", {}), path)
