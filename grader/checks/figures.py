"""Figures that say what they show, for a learner who cannot see them.

    from grader.figures import show
    ...                       # draw with matplotlib as usual
    show()                    # instead of plt.show()

`show` reads what the figure draws (titles, axis labels, each labelled line, each heat map, bars,
labelled points) and writes it as text: the numbers a sighted learner reads off the picture. The
text is computed from the drawn values, so it stays true when the learner's own answers drew
them. It is the image's description where JupyterLab shows it (an <img> with `alt`, in the
output's text/html) and where nbconvert and the course's pages read it (the image's metadata,
`alt`). The words come from the grader's catalogue, in the notebook's language.
"""
from __future__ import annotations

import base64
import html
import io
from typing import Any

from .i18n import CHINESE, current, say

ALT = "alt"     # the key of the description in an image output's metadata


def show(fig: Any = None, note: str = "") -> None:
    """Show `fig` (default: the current figure) with its description, then close it. `note` adds
    what the figure means, where the drawn numbers alone do not say it."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    fig = plt.gcf() if fig is None else fig
    data, metadata = _bundle(fig, note)
    plt.close(fig)
    display(data, metadata=metadata, raw=True)


class LiveFigure:
    """A figure shown once and redrawn in place, such as a training curve: `update()` after each
    change shows the new picture with its new description."""

    def __init__(self, fig: Any, handle: Any):
        self.fig, self.handle = fig, handle

    def update(self) -> None:
        data, metadata = _bundle(self.fig)
        self.handle.update(data, metadata=metadata, raw=True)


def live(fig: Any) -> LiveFigure | None:
    """Show `fig` where it can be redrawn (see LiveFigure); None outside a notebook."""
    from IPython.display import display

    data, metadata = _bundle(fig)
    handle = display(data, metadata=metadata, raw=True, display_id=True)
    return None if handle is None else LiveFigure(fig, handle)


def _bundle(fig: Any, note: str = "") -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The figure as an output: its picture, and its description as text, as the picture's `alt`
    in HTML (what JupyterLab shows) and in the picture's metadata (what nbconvert's pages read)."""
    text = describe(fig) + (f" {note}" if note else "")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    png = base64.b64encode(buffer.getvalue()).decode()
    return ({"image/png": png, "text/plain": text,
             "text/html": f'<img src="data:image/png;base64,{png}" alt="{html.escape(text)}">'},
            {"image/png": {ALT: text}})


def describe(fig: Any) -> str:
    """The figure in words: each drawing area's title, then what it draws."""
    parts = []
    for ax in fig.axes:
        if hasattr(ax, "_colorbar"):   # a heat map's scale: its range is said with the heat map
            continue
        # a heat map's cells may carry their numbers as text: said once, with the heat map
        drawn = [*_heat_maps(ax), *_lines(ax), *_bars(ax), *([] if ax.get_images() else _points(ax))]
        if drawn:
            title = ax.get_title() or ax.get_title(loc="left")
            parts.append((title + ("：" if current() == CHINESE else ": ") if title else "") + _join(drawn))
    text = _sentences(parts) if parts else say("An empty figure.")
    return say("Figure. {text}", text=text)


def _number(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.3e}"


def _join(items: list[str]) -> str:
    return ("；" if current() == CHINESE else "; ").join(items)


def _sentences(items: list[str]) -> str:
    return ("。" if current() == CHINESE else ". ").join(items) + ("。" if current() == CHINESE else ".")


def _heat_maps(ax) -> list[str]:
    """Each heat map: its size and range, and each row's largest cell by the axis' tick labels."""
    import numpy as np

    found = []
    rows, columns = _tick_names(ax, "y"), _tick_names(ax, "x")
    for image in ax.get_images():
        values = np.asarray(image.get_array(), dtype=float)
        if values.ndim != 2:
            continue
        r, c = values.shape
        named_rows = rows if len(rows) == r and all(rows) else [str(i) for i in range(r)]
        named_columns = columns if len(columns) == c and all(columns) else [str(j) for j in range(c)]
        text = say("a heat map of {rows} rows by {columns} columns, values from {low} to {high}", rows=r, columns=c,
                   low=_number(np.nanmin(values)), high=_number(np.nanmax(values)))
        axes = [say("{x} across", x=ax.get_xlabel())] if ax.get_xlabel() else []
        axes += [say("{y} down", y=ax.get_ylabel())] if ax.get_ylabel() else []
        if axes:
            text += f" ({_join(axes)})"
        if r <= 16 and c > 1:
            largest = [say("{row}: {value} at {column}", row=named_rows[i], value=_number(values[i, j]),
                           column=named_columns[j])
                       for i, j in enumerate(np.nanargmax(np.where(np.isnan(values), -np.inf, values), axis=1))]
            text += say(". Largest in each row: {cells}", cells=_join(largest))
        found.append(text)
    return found


def _tick_names(ax, which: str) -> list[str]:
    """The tick labels of one axis, or of an axis it shares (subplots with sharey show them once)."""
    labels = [t.get_text() for t in (ax.get_yticklabels() if which == "y" else ax.get_xticklabels())]
    if any(labels):
        return labels
    shared = ax.get_shared_y_axes() if which == "y" else ax.get_shared_x_axes()
    for other in shared.get_siblings(ax):
        found = [t.get_text() for t in (other.get_yticklabels() if which == "y" else other.get_xticklabels())]
        if any(found):
            return found
    return labels


def _lines(ax) -> list[str]:
    """Each labelled line (or every line when none is labelled): where it starts, ends and peaks."""
    import numpy as np

    lines = [line for line in ax.get_lines() if line.get_visible() and len(np.atleast_1d(line.get_xdata())) > 1]
    labelled = [line for line in lines if not line.get_label().startswith("_")]
    found = []
    x_name = ax.get_xlabel() or "x"
    y_name = ax.get_ylabel()
    for line in labelled or lines:
        x = np.asarray(line.get_xdata(), dtype=float)
        y = np.asarray(line.get_ydata(), dtype=float)
        label = line.get_label() if not line.get_label().startswith("_") else y_name or say("a line")
        if np.allclose(x, x[0]):
            found.append(say("{label}: a vertical line at {x} = {value}", label=label, x=x_name, value=_number(x[0])))
            continue
        if np.allclose(y, y[0]):
            found.append(say("{label}: level at {value}", label=label, value=_number(y[0])))
            continue
        top, bottom = int(np.nanargmax(y)), int(np.nanargmin(y))
        found.append(say("{label}: from {first} at {x} = {x0} to {last} at {x} = {x1}, highest {top} at {x} = "
                         "{x_top}, lowest {bottom} at {x} = {x_bottom}", label=label, first=_number(y[0]),
                         last=_number(y[-1]), x=x_name, x0=_number(x[0]), x1=_number(x[-1]), top=_number(y[top]),
                         x_top=_number(x[top]), bottom=_number(y[bottom]), x_bottom=_number(x[bottom])))
    return found


def _bars(ax) -> list[str]:
    """Bars (and histograms), each set (a legend's entry) apart: each bar's height, named by the
    nearest tick label or by its place."""
    from matplotlib.container import BarContainer
    from matplotlib.patches import Rectangle

    sets = [(c.get_label(), list(c.patches)) for c in ax.containers if isinstance(c, BarContainer)]
    loose = [p for p in ax.patches if isinstance(p, Rectangle) and not any(p in bars for _, bars in sets)]
    if loose and not sets:
        sets = [("", loose)]
    ticks = [(t, label.get_text()) for t, label in zip(ax.get_xticks(), ax.get_xticklabels()) if label.get_text()]
    found = []
    for label, bars in sets:
        bars = [b for b in bars if b.get_visible()]
        if not bars:
            continue
        shown = []
        for bar in bars[:24]:
            middle = bar.get_x() + bar.get_width() / 2
            name = min(ticks, key=lambda t: abs(t[0] - middle))[1] if ticks else _number(middle)
            shown.append(say("{name}: {height}", name=name, height=_number(bar.get_height())))
        more = say(" and {n} more", n=len(bars) - 24) if len(bars) > 24 else ""
        what = label if label and not label.startswith("_") else ax.get_ylabel() or say("height")
        found.append(say("{n} bars ({y}): {bars}{more}", n=len(bars), y=what, bars=_join(shown), more=more))
    return found


def _points(ax) -> list[str]:
    """Text placed at points (the words of a 3-D plot of vectors): each with its coordinates."""
    found = []
    for text in ax.texts:
        if not text.get_text().strip() or not text.get_visible():
            continue
        where = getattr(text, "_x", None), getattr(text, "_y", None), getattr(text, "_z", None)
        coordinates = ", ".join(_number(v) for v in where if isinstance(v, (int, float)))
        found.append(say("{label} at ({where})", label=text.get_text(), where=coordinates))
    return [say("labelled points: {points}", points=_join(found))] if found else []
