"""What a hostile learner puts in a notebook for the instructor to open: scripts in markdown and in
outputs, each of which, if it ran, would add its name to `window.pwned` in the page that shows it.
A page is safe when, once loaded and with every link in it clicked, `pwned()` is empty."""
from __future__ import annotations

import nbformat


def _mark(kind: str) -> str:
    return f"(window.pwned=window.pwned||[]).push('{kind}')"


MARKDOWN = "\n\n".join([
    "A note for the grader.",
    f"<script>{_mark('md-script')}</script>",
    f'<img src="/no-such-image.png" style="display:none" onerror="{_mark("md-img")}">',
    f'<svg onload="{_mark("md-svg")}"><circle r="5"/></svg>',
    f"[the marking scheme](javascript:{_mark('md-link')})",
    f'<a href="javascript:{_mark("md-a")}">the rubric</a>',
    f'<details open ontoggle="{_mark("md-toggle")}"><summary>more</summary>text</details>',
    f'<iframe srcdoc="<script>parent.{_mark("md-iframe")}</script>"></iframe>',
])

# The outputs a code cell makes with IPython.display (HTML, SVG, Javascript, Markdown).
OUTPUTS = {
    "text/html": f'<b>table</b><img src="/no-such-image.png" onerror="{_mark("out-img")}">'
                 f"<script>{_mark('out-script')}</script>",
    "image/svg+xml": f'<svg xmlns="http://www.w3.org/2000/svg" onload="{_mark("out-svg")}"><circle r="5"/></svg>',
    "application/javascript": _mark("out-js"),
    "text/markdown": f"[results](javascript:{_mark('out-md-link')})",
}

# An image whose width, in the output's metadata, carries an event handler: nbconvert's template
# writes the width without quotes, and the sanitiser does not look at attributes it builds.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WIDTH = {"image/png": {"width": f"1 onerror={_mark('out-png-width')}"}}

# The same outputs, made by the learner's own code when the notebook runs (in the sandbox).
CODE = ("from IPython.display import HTML, SVG, Javascript, Markdown, display\n"
        f"display(HTML({OUTPUTS['text/html']!r}))\n"
        f"display(SVG({OUTPUTS['image/svg+xml']!r}))\n"
        f"display(Javascript({OUTPUTS['application/javascript']!r}))\n"
        f"display(Markdown({OUTPUTS['text/markdown']!r}))\n"
        f"display({{'image/png': 'x', 'text/plain': 'p'}}, raw=True, metadata={WIDTH!r})")

EVERY_KIND = ("md-script", "md-img", "md-svg", "md-link", "md-a", "md-toggle", "md-iframe",
              "out-img", "out-script", "out-svg", "out-js", "out-md-link", "out-png-width")


def cells() -> list:
    """A markdown cell and a code cell with its outputs already made, to add to a notebook."""
    outputs = [nbformat.v4.new_output("display_data", data={mime: text}) for mime, text in OUTPUTS.items()]
    outputs.append(nbformat.v4.new_output("display_data", data={"image/png": "x"}, metadata=WIDTH))
    return [nbformat.v4.new_markdown_cell(MARKDOWN), nbformat.v4.new_code_cell(CODE, outputs=outputs)]


def pwned(page) -> list[str]:
    """What ran in `page`: the page's own marks, after each of its links has been clicked."""
    page.wait_for_timeout(300)   # an image's onerror fires once its request has failed
    for link in page.locator("a[href]").all():
        href = link.get_attribute("href") or ""
        if href.lower().lstrip().startswith("javascript:"):
            link.click(force=True, no_wait_after=True)
    return page.evaluate("window.pwned || []")


# A page a learner submits beside their notebook and links to from it: run, it marks the page.
DIAGRAM = f"<!doctype html><title>my diagram</title><script>{_mark('submitted-page')}</script>"


PASTED = "my pasted drawing"


def pasted_image():
    """A markdown cell with an image pasted into it, as JupyterLab makes one (not an attack: it
    once broke the graded copy, Formgrader's page and the feedback)."""
    cell = nbformat.v4.new_markdown_cell(f"![{PASTED}](attachment:drawing.png)")
    cell.attachments = {"drawing.png": {"image/png": PNG}}
    return cell
