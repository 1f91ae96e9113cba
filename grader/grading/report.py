"""A class report an instructor opens in a browser: one self-contained HTML file.

Per unit: the histogram of total scores, the pass rate of each exercise and the named mistakes
most often made; then every submission that was flagged or could not be graded, with why. A
notebook the machine failed to run (`regrade`) has no score: it counts in no chart, only in
that list.
"""
from __future__ import annotations

import base64
import html
import io
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path

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


def write_report(results: list[NotebookResult], path: Path, title: str = "Class report") -> None:
    students = len({r.student for r in results})
    left = sum(1 for r in results if r.regrade)
    waiting = (f" {left} of them not graded yet: the machine failed to run them; grading the class again "
               "grades them." if left else "")
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{safe_html.POLICY_META}"
             f"<title>{_text(title)}</title><style>{STYLE}</style>{safe_html.readable_style()}</head><body><main>",
             f"<h1>{_text(title)}</h1><p>{len(results)} notebooks from {students} students.{waiting}</p>"]
    by_unit: dict[str, list[NotebookResult]] = defaultdict(list)
    for result in results:
        if result.unit and not result.regrade:
            by_unit[result.unit].append(result)
    parts += [_unit_section(unit, by_unit[unit]) for unit in sorted(by_unit)]
    parts += [_problems_section(results), "</main></body></html>"]
    Path(path).write_text("\n".join(parts), encoding="utf-8")


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
    table = (f"<table><tr><th>exercise</th><th>named mistake</th><th>notebooks</th></tr>{rows}</table>" if rows
             else "<p>No named mistakes.</p>")
    return (f"<h2>{_text(unit)}</h2><p>{len(results)} notebooks; mean score {statistics.mean(scores):.1f}, "
            f"median {statistics.median(scores):g} of {top:g}.</p><div class=charts>"
            f"<img alt='histogram of scores in {_text(unit)}' src='{_histogram(scores, top, unit)}'>"
            f"<img alt='pass rate per exercise in {_text(unit)}' "
            f"src='{_pass_chart([labels.get(g, g) for g in rates], list(rates.values()))}'></div>"
            f"<h3>Most frequent named mistakes</h3>{table}")


def _problems_section(results: list[NotebookResult]) -> str:
    flagged = [r for r in results if r.problems()]
    if not flagged:
        return "<h2>Flagged or failed submissions</h2><p>none</p>"
    rows = "".join(f"<tr><td>{_text(r.student or '?')}</td><td>{_text(r.unit or '?')}</td>"
                   f"<td>{_text(Path(r.notebook).name)}</td><td>{_status(r)}</td>"
                   f"<td><ul>{''.join(f'<li>{_text(p)}</li>' for p in r.problems())}</ul></td></tr>"
                   for r in sorted(flagged, key=lambda r: (r.student or "", r.unit or "")))
    return ("<h2>Flagged or failed submissions</h2><table><tr><th>student</th><th>unit</th><th>file</th>"
            f"<th>status</th><th>reasons</th></tr>{rows}</table>")


def _status(result: NotebookResult) -> str:
    return "to grade again" if result.regrade else "failed" if result.error else "flagged"


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def _png(fig) -> str:
    """The figure as a data: URL, so the report is one file."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _histogram(scores: list[float], top: float, unit: str) -> str:
    fig, ax = _figure(4.6, 3.0)
    bins = [b - 0.5 for b in range(int(top) + 2)]
    ax.hist(scores, bins=bins, color="tab:blue", edgecolor="white")
    ax.set_xticks(range(0, int(top) + 1, max(1, int(top) // 10)))
    ax.set_xlabel("total score")
    ax.set_ylabel("students")
    ax.set_title(f"{_CONTROL.sub('', unit)}: scores")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return _png(fig)


def _pass_chart(labels: list[str], rates: list[float]) -> str:
    fig, ax = _figure(5.2, 0.4 * len(rates) + 1.2)
    ax.barh(range(len(rates)), [100 * r for r in rates], color="tab:green")
    ax.set_yticks(range(len(rates)), [_CONTROL.sub("", label) for label in labels])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("students passing (%)")
    ax.set_title("pass rate per exercise")
    return _png(fig)
