"""A class report an instructor opens in a browser: one self-contained HTML file.

Per unit: the histogram of total scores, the pass rate of each exercise and the named mistakes
most often made; then every submission that was flagged or could not be graded, with why. A
notebook the machine failed to run (`regrade`) has no score: it counts in no chart, only in
that list.
"""
from __future__ import annotations

import base64
import contextlib
import html
import io
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from ..checks import i18n
from ..checks.figures import describe
from ..checks.i18n import say
from . import safe_html
from .results import NotebookResult

STYLE = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f3f3f3}td.n{text-align:right}.charts{display:flex;flex-wrap:wrap;gap:1em}img{max-width:100%}"""


def pass_rates(results: list[NotebookResult]) -> dict[str, dict[str, float]]:
    """{unit: {grade_id: share of graded notebooks that passed it}}."""
    passed: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        if result.unit and not result.regrade:
            for exercise in result.exercises:
                passed[result.unit][exercise.grade_id].append(exercise.passed)
    return {unit: {gid: sum(v) / len(v) for gid, v in ex.items()} for unit, ex in sorted(passed.items())}


def mistakes(results: list[NotebookResult]) -> Counter:
    """How many notebooks made each named mistake: {(exercise label, message): count}."""
    return Counter((_label(e.names, e.grade_id), e.mistake) for r in results if not r.regrade
                   for e in r.exercises if e.mistake)


def write_report(results: list[NotebookResult], path: Path, title: str | None = None,
                 language: str | None = None) -> None:
    """The report, in `language`: by default the class's edition (the language most of its
    notebooks are in, or COURSE_LANG), as its feedback is."""
    editions = Counter(r.language for r in results)
    language = language or i18n.for_edition(editions.most_common(1)[0][0] if editions else i18n.ENGLISH)
    with i18n.language(language), _chart_font(language):
        page = _page(results, title or say("Class report"))
    Path(path).write_text(safe_html.readable(page, language), encoding="utf-8")


def _page(results: list[NotebookResult], title: str) -> str:
    students = len({r.student for r in results})
    left = sum(1 for r in results if r.regrade)
    waiting = say(" {left} of them not graded yet: the machine failed to run them; grading the class again "
                  "grades them.", left=left) if left else ""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>{safe_html.POLICY_META}"
             f"<title>{_text(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{_text(title)}</h1>"
             f"<p>{say('{n} notebooks from {students} students.', n=len(results), students=students)}{waiting}</p>"]
    by_unit: dict[str, list[NotebookResult]] = defaultdict(list)
    for result in results:
        if result.unit and not result.regrade:
            by_unit[result.unit].append(result)
    parts += [_unit_section(unit, by_unit[unit]) for unit in sorted(by_unit)]
    parts += [_problems_section(results), "</body></html>"]
    return "\n".join(parts)


@contextlib.contextmanager
def _chart_font(language: str) -> Iterator[None]:
    """The charts' words drawn with a font that has the language's characters, where one is installed."""
    import matplotlib

    font = i18n.cjk_font() if language == i18n.CHINESE else None
    with matplotlib.rc_context({"font.family": ["DejaVu Sans", font]} if font else {}):
        yield


# Control characters, and the marks that reverse the direction of text (a name shown backwards)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _text(value: str) -> str:
    """A string from a submission (a name, a file name, a message) as HTML text: escaped, and
    without the control characters a terminal or a hostile notebook may leave in it."""
    return html.escape(_CONTROL.sub("", value))


def _label(names: list[str], grade_id: str) -> str:
    return ", ".join(names) if names else grade_id


def _unit_section(unit: str, results: list[NotebookResult]) -> str:
    scores = [r.score for r in results]
    top = max(r.max_score for r in results)
    rates = pass_rates(results)[unit]
    labels = {e.grade_id: _label(e.names, e.grade_id) for e in results[0].exercises}
    rows = "".join(f"<tr><td>{_text(exercise)}</td><td>{_text(message)}</td><td class=n>{count}</td></tr>"
                   for (exercise, message), count in mistakes(results).most_common(10))
    table = (f"<table><tr><th>{say('exercise')}</th><th>{say('named mistake')}</th><th>{say('notebooks')}</th></tr>"
             f"{rows}</table>" if rows else f"<p>{say('No named mistakes.')}</p>")
    summary = say("{n} notebooks; mean score {mean}, median {median} of {top}.", n=len(results),
                  mean=f"{statistics.mean(scores):.1f}", median=f"{statistics.median(scores):g}", top=f"{top:g}")
    return (f"<h2>{_text(unit)}</h2><p>{summary}</p><div class=charts>"
            f"{_histogram(scores, top, unit)}{_pass_chart([labels.get(g, g) for g in rates], list(rates.values()))}"
            f"</div><h3>{say('Most frequent named mistakes')}</h3>{table}")


def _problems_section(results: list[NotebookResult]) -> str:
    flagged = [r for r in results if r.problems()]
    if not flagged:
        return f"<h2>{say('Flagged or failed submissions')}</h2><p>{say('none')}</p>"
    rows = "".join(f"<tr><td>{_text(r.student or '?')}</td><td>{_text(r.unit or '?')}</td>"
                   f"<td>{_text(Path(r.notebook).name)}</td><td>{_status(r)}</td>"
                   f"<td><ul>{''.join(f'<li>{_text(p)}</li>' for p in r.problems())}</ul></td></tr>"
                   for r in sorted(flagged, key=lambda r: (r.student or "", r.unit or "")))
    headers = "".join(f"<th>{name}</th>" for name in (say("student"), say("unit"), say("file"), say("status"),
                                                       say("reasons")))
    return f"<h2>{say('Flagged or failed submissions')}</h2><table><tr>{headers}</tr>{rows}</table>"


def _status(result: NotebookResult) -> str:
    return say("to grade again") if result.regrade else say("failed") if result.error else say("flagged")


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def _png(fig) -> str:
    """The figure as an image in the page (a data: URL, so the report is one file), described for
    a screen reader as the units' figures are (grader.figures)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    text = describe(fig)
    plt.close(fig)
    return f"<img alt='{html.escape(text)}' src='data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}'>"


def _histogram(scores: list[float], top: float, unit: str) -> str:
    fig, ax = _figure(4.6, 3.0)
    bins = [b - 0.5 for b in range(int(top) + 2)]
    ax.hist(scores, bins=bins, color="tab:blue", edgecolor="white")
    ax.set_xticks(range(0, int(top) + 1, max(1, int(top) // 10)))
    ax.set_xlabel(say("total score"))
    ax.set_ylabel(say("students"))
    ax.set_title(say("{unit}: scores", unit=_CONTROL.sub("", unit)))
    ax.yaxis.get_major_locator().set_params(integer=True)
    return _png(fig)


def _pass_chart(labels: list[str], rates: list[float]) -> str:
    fig, ax = _figure(5.2, 0.4 * len(rates) + 1.2)
    ax.barh(range(len(rates)), [100 * r for r in rates], color="tab:green")
    ax.set_yticks(range(len(rates)), [_CONTROL.sub("", label) for label in labels])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(say("students passing (%)"))
    ax.set_title(say("pass rate per exercise"))
    return _png(fig)
