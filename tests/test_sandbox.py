"""The sandbox on its own: what learner code can see and do, and grading without bubblewrap."""
from __future__ import annotations

import json
import os

import nbformat
import pytest

from grader import course, sandbox
from grader.settings import Limits

PROBE = """
import json, os, socket, sys
seen = {"uid": os.getuid(), "solutions": os.path.exists(%(solutions)r), "home": os.path.exists(%(home)r),
        "cwd_importable": any(p in ("", os.getcwd()) for p in sys.path)}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    seen["network"] = True
except OSError:
    seen["network"] = False
try:
    open(%(outside)r, "w").write("x")
    seen["wrote_outside"] = True
except OSError:
    seen["wrote_outside"] = False
print(json.dumps(seen))
"""


def _run(code: str, tmp_path, **limits) -> sandbox.Outcome:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell("print('after')")])
    work = tmp_path / "scratch"
    work.mkdir()
    return sandbox.execute(nb, work, Limits(**{"cell_seconds": 30, "notebook_seconds": 120, **limits}))


@pytest.mark.skipif(not sandbox.confinement().command, reason="bubblewrap is not installed or does not work here "
                                                              "(apt-get install bubblewrap)")
def test_learner_code_sees_only_its_scratch_folder(tmp_path):
    outside = tmp_path / "outside.txt"
    code = PROBE % {"solutions": str(course.SOLUTIONS), "home": os.path.expanduser("~/.bashrc"),
                    "outside": str(outside)}
    outcome = _run(code, tmp_path)
    seen = json.loads(outcome.executed.cells[0].outputs[0]["text"])
    assert seen == {"uid": seen["uid"], "solutions": False, "home": False, "cwd_importable": False,
                    "network": False, "wrote_outside": False}
    assert seen["uid"] != os.getuid() and not outside.exists()


def test_without_bubblewrap_grading_still_works_and_says_what_is_unprotected(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox.confinement.cache_clear()
    try:
        jail = sandbox.confinement()
        assert jail.command == () and "bubblewrap is missing" in jail.description
        outcome = _run("print(6 * 7)", tmp_path)
        assert outcome.executed.cells[0].outputs[0]["text"] == "42\n" and outcome.problem is None
    finally:
        sandbox.confinement.cache_clear()


def test_limits_stop_bombs_and_keep_the_next_cells(tmp_path):
    outcome = _run("hog = bytearray(20 * 2**30)", tmp_path)
    first, second = outcome.executed.cells
    assert first.outputs[-1]["ename"] == "MemoryError" and second.outputs[0]["text"] == "after\n"


def test_an_output_flood_is_cut_to_the_limit(tmp_path):
    outcome = _run("for _ in range(20_000):\n    print('x' * 500)", tmp_path, output_bytes=100_000)
    text = "".join(o.get("text", "") for o in outcome.executed.cells[0].outputs)
    assert 100_000 <= len(text) < 110_000 and "kept only the first" in text
    assert outcome.executed.cells[1].outputs[0]["text"] == "after\n"
