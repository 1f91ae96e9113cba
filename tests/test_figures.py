"""grader.figures.show: every figure says what it shows, from the values it draws, in the
notebook's language, where JupyterLab and the course's pages read it."""
from __future__ import annotations

import html

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grader.authoring.translation import chinese_form_problems  # noqa: E402
from grader.checks import figures  # noqa: E402
from grader.checks.i18n import language  # noqa: E402


def weights_and_loss():
    fig, (left, right) = plt.subplots(1, 2)
    left.imshow(np.array([[0.7, 0.2, 0.1], [0.23, 0.59, 0.18]]))
    left.set_xticks(range(3), ["Your", "journey", "starts"])
    left.set_yticks(range(2), ["Your", "journey"])
    left.set(title="weights", xlabel="key", ylabel="query")
    right.plot([1, 2, 3, 4], [2.3, 1.1, 0.6, 0.5], label="training loss")
    right.axhline(0.4, label="floor")
    right.axvline(3, label="warm-up ends")
    right.bar([0, 1], [5, 7], label="counts")
    right.set_xlabel("step")
    return fig


def test_a_description_carries_the_numbers_a_sighted_learner_reads():
    text = figures.describe(weights_and_loss())
    plt.close("all")
    assert text.startswith("Figure. weights: a heat map of 2 rows by 3 columns, values from 0.1 to 0.7")
    assert "Your: 0.7 at Your; journey: 0.59 at journey" in text       # each row's largest weight
    assert "(key across; query down)" in text
    assert "training loss: from 2.3 at step = 1 to 0.5 at step = 4, highest 2.3 at step = 1" in text
    assert "floor: level at 0.4" in text and "warm-up ends: a vertical line at step = 3" in text
    assert "2 bars (counts)" in text


def test_points_placed_in_three_dimensions_are_named_with_their_coordinates():
    fig = plt.figure()
    ax = fig.add_subplot(projection="3d")
    ax.quiver(0, 0, 0, 0.55, 0.87, 0.66)
    ax.text(0.55, 0.87, 0.66, "journey")
    text = figures.describe(fig)
    plt.close(fig)
    assert "journey at (0.55, 0.87, 0.66)" in text


def test_in_chinese_the_description_follows_the_editions_form():
    with language("zh"):
        text = figures.describe(weights_and_loss())
    plt.close("all")
    assert text.startswith("图：weights：一幅 2 行 3 列的热图")
    assert "Your 行在 Your 处为 0.7" in text
    assert chinese_form_problems(text, shown=True) == []


def test_show_puts_the_description_where_jupyterlab_and_nbconvert_read_it(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda data, metadata, raw: shown.append((data, metadata)))
    weights_and_loss()
    figures.show(note="The loss falls.")
    data, metadata = shown[0]
    text = metadata["image/png"][figures.ALT]
    assert text.endswith("The loss falls.") and data["text/plain"] == text
    assert f'alt="{html.escape(text)}"' in data["text/html"] and data["image/png"] in data["text/html"]
    assert plt.get_fignums() == []   # closed: the notebook shows it once


@pytest.mark.parametrize("description", ['"><script>alert(1)</script>', "x" * 5000])
def test_a_learners_description_reaches_the_page_as_text(description):
    """The feedback page sets each described image's alt from the output's metadata: escaped, and
    cut to a bounded length."""
    import nbformat

    from grader.grading import safe_html

    output = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/html": "<b>x</b>"},
                                    metadata={"image/png": {figures.ALT: description}})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[output])])
    safe_html.PlainMetadata().preprocess(nb, {})
    assert "text/html" not in nb.cells[0].outputs[0].data   # the image is shown, with its alt
    page = safe_html.described_images('<img src="data:image/png;base64,iVBORw0KGgo=">', nb)
    assert "<script>" not in page and len(page) < safe_html.MAX_ALT + 200


def grey_problems(fig) -> list[str]:
    """What in a figure tells apart only by colour: labelled lines of one line style and marker,
    or sets of bars with the same hatch."""
    from matplotlib.container import BarContainer

    found = []
    for ax in fig.axes:
        lines = [line for line in ax.get_lines() if not line.get_label().startswith("_") and len(line.get_xdata()) > 1]
        styles = [(line.get_linestyle(), line.get_marker()) for line in lines]
        if len(set(styles)) < len(styles):
            found.append(f"{ax.get_title()!r}: lines alike in grey: {[line.get_label() for line in lines]}")
        hatches = [c.patches[0].get_hatch() for c in ax.containers if isinstance(c, BarContainer)]
        if len(set(hatches)) < len(hatches):
            found.append(f"{ax.get_title()!r}: {len(hatches)} sets of bars told apart by colour only")
    return found


@pytest.mark.system
def test_every_figure_of_the_course_reads_in_grey(monkeypatch, capsys):
    """Every unit's code run as the reference answers run it, each figure looked at where it is
    shown: a learner who cannot tell colours apart tells its lines and bars apart by style."""
    from reference import reference_namespace

    from grader import course

    found = []

    def looked_at(fig=None, note=""):
        fig = plt.gcf() if fig is None else fig
        found.extend(grey_problems(fig))
        plt.close(fig)

    monkeypatch.setattr("grader.figures.show", looked_at)
    monkeypatch.setattr("grader.figures.live", lambda fig: found.extend(grey_problems(fig)))
    for unit in course.units():
        reference_namespace.__wrapped__(unit)   # not the cached run: its figures are shown again
    assert found == []
    assert grey_problems(weights_and_loss()), "a figure whose lines share one style is found"
    plt.close("all")
