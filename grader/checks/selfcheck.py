"""Self-checks for the learner: run your code on the notebook's fixed examples and say what is wrong.

    from grader.selfcheck import check
    check("dot_product")

Expected values and the values of known mistakes are stored in `grader/fixtures/*.json`
(made by `python -m grader release` from the instructor's notebooks); nothing here computes
a correct answer.
"""
from __future__ import annotations

import sys
from typing import Any

from ..fixtures import entries, exercises
from . import progress
from .compare import Mistake, NotWritten, judge_from_plain
from .i18n import current, say
from .spec import CheckFailed, attempt, failure_text, load_call, most_telling, named_mistake_of
from .wire import ERROR, from_json, is_error


def unit_of(name: str) -> str:
    return next((unit for unit, names in exercises().items() if name in names), "")


def entries_for(name: str) -> list[dict[str, Any]]:
    """The stored checks of `name`: its first check, then any further ones ("name #2", ...)."""
    return [entry for key, entry in entries(current()).items() if key == name or key.startswith(f"{name} #")]


def _bring_into_view() -> None:
    """Run All stops at the first failed self-check, but JupyterLab leaves the learner at the bottom
    of the notebook: scroll this cell's output into view (in a notebook's kernel, not under nbgrader)."""
    try:
        from IPython import get_ipython
        from IPython.display import Javascript, display
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell" or progress.under_grader():
        return
    display(Javascript(_SCROLL_TO_THIS_CELL))


# For about 8 s (plots above keep rendering, and JupyterLab moves to the last cell once Run All
# ends), whenever this cell is out of view, scroll it back; a learner who scrolls or types ends it.
_SCROLL_TO_THIS_CELL = """
const cell = element.closest('.jp-Cell') || element;
let ticks = 0;
const stop = () => { ticks = 20; };
window.addEventListener('wheel', stop, {once: true});
window.addEventListener('keydown', stop, {once: true});
const timer = setInterval(() => {
  if (++ticks > 20) {
    clearInterval(timer);
    window.removeEventListener('wheel', stop);
    window.removeEventListener('keydown', stop);
    return;
  }
  const box = cell.getBoundingClientRect();
  if (box.bottom < 0 || box.top > window.innerHeight) cell.scrollIntoView({block: 'center'});
}, 400);
"""


def _named(message: str, got: Any, mistakes: list[Mistake]) -> str | None:
    """What a failure names of the learner's slip, as `spec.most_telling` reads it: a known
    mistake (or several), or the check's own account of an object of another form (NotAsAsked);
    None for an error or a bare difference."""
    named = named_mistake_of(message, mistakes)
    return named or (message if is_error(got) and got[ERROR].startswith("NotAsAsked:") else None)


def check(name: str, namespace: dict[str, Any] | None = None) -> None:
    """Check the notebook's `name` (a function or class) on the stored examples.

    Prints a tick when everything matches; otherwise raises CheckFailed with a message that
    names the mistake, chosen among the failing examples as the graded tests choose among their
    cases (`spec.most_telling`). `namespace` defaults to the notebook's names (the kernel's `__main__`)."""
    if namespace is None:
        namespace = vars(sys.modules["__main__"])
    entries = entries_for(name)
    if not entries:
        raise KeyError(f"no self-check is stored for {name!r}")
    unit = unit_of(name)
    if name not in namespace:
        raise CheckFailed(say("{name} is not defined: run the cell where you wrote it first", name=name))
    count, failures = 0, []
    for entry in entries:
        fn = load_call(entry["call_source"], entry["call_name"], namespace, "<self-check>")
        judge = judge_from_plain(entry["judge"])
        for case in entry["cases"]:
            got = attempt(fn, *from_json(case["args"]), **from_json(case["kwargs"]))
            mistakes = [Mistake(message, from_json(value)) for message, value in case["mistakes"]]
            message = judge(got, from_json(case["want"]), mistakes)
            if not message:
                count += 1
                continue
            text = failure_text(name, case["label"], message)
            if isinstance(message, NotWritten) and not failures:   # code not written yet is not a try
                _bring_into_view()
                raise CheckFailed(text) from None
            failures.append((text, _named(message, got, mistakes)))
    if failures:   # as the graded tests choose: a later example may name what an earlier one only shows
        text, _ = most_telling(failures)
        progress.record(name, unit, progress.FAIL, text)
        progress.show(unit)
        _bring_into_view()
        raise CheckFailed(text) from None
    if count > 1:
        print(say("\u2713 {name}: right on {count} examples. The graded tests also try other inputs and shapes.",
                  name=name, count=count))
    else:
        print(say("\u2713 {name}: right on 1 example. The graded tests also try other inputs and shapes.", name=name))
    progress.record(name, unit, progress.PASS)
    progress.show(unit)
