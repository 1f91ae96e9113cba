"""Red team: one class batch of hostile, faulty and broken unit-01 submissions, one per vector of
../shared/nbgrader-notes.md and per fault the grader must contain (test_grader.py has the first
few: an input transformer, a patched torch.allclose, a torch.save forger, os._exit, an endless
loop, a copied test cell, a deleted one, broken JSON).

For every submission: the batch completes, it earns no more than an honest wrong answer, and a
reason is recorded. For the batch: no file outside the scratch folders changed, the honest
student's grade is intact, and no feedback shows solution text.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat
import pytest

from grader import course, notebook, sandbox
from reference import answers, student_notebook

# Without the sandbox these submissions would really write into the repository and fork-bomb
# the machine: the red team runs only where bubblewrap works.
pytestmark = pytest.mark.skipif(not sandbox.confinement().command,
                                reason="bubblewrap is not installed or does not work here (apt-get install "
                                       "bubblewrap): hostile submissions are not run unconfined")

UNIT = "01_dot_product"
MARK = f"/tmp/redteam-{uuid.uuid4().hex[:8]}"          # a file no submission may create
WRONG = "def dot_product(a, b):\n    return (a * b).sum() + 1\n"   # the honest wrong answer: 4/5


@dataclass
class Vector:
    name: str
    build: Callable[[Path], object] | str   # answer code for dot_product, or a builder given the folder
    at_most: float = 4.0                      # the score it may reach
    reason: str = ""                          # a word the feedback, a flag or the error must contain
    at_least: float = 0.0


def _answer(code: str, gid: str = "u01_dot_product"):
    fill = answers(UNIT)
    fill[gid] = code
    return student_notebook(UNIT, fill)


def _json(nb) -> dict:
    return json.loads(nbformat.writes(nb))


def _write_json(data) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        (folder / f"{UNIT}.ipynb").write_text(data if isinstance(data, str) else json.dumps(data))
    return build


def _edited(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    data = _json(student_notebook(UNIT))
    edit(data)
    return _write_json(data)


def _test_cell(data: dict, gid: str = "u01_dot_product_check") -> dict:
    return next(c for c in data["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)


def _shadowing_modules(folder: Path) -> None:
    nbformat.write(student_notebook(UNIT), folder / f"{UNIT}.ipynb")
    for name in ("torch.py", "numpy.py", "grader.py"):
        (folder / name).write_text(f"open({MARK!r}, 'w').write('imported')\nraise SystemExit('shadowed')\n")


def _retype(data: dict) -> None:
    cell = _test_cell(data)
    cell["cell_type"] = "markdown"
    del cell["outputs"], cell["execution_count"]


READ_EVERYTHING = """
import glob, os
for pattern in ["../../../solutions/*/*.ipynb", "/work/*/solutions/*/*.ipynb", "%(root)s/solutions/*/*.ipynb",
                "%(root)s/*.db", "%(class)s/*/*/*.ipynb", "/root/*", "/etc/shadow", "autograded/*/*/*"]:
    for path in glob.glob(pattern):
        try:
            print(path, open(path, errors="replace").read()[:20000])
        except OSError as exc:
            print(path, exc)
"""

WRITE_EVERYWHERE = """
import os
for path in ["%(root)s/gradebook.db", "%(class)s/honest/01_dot_product/01_dot_product.ipynb",
             "%(repo)s/grader/spec.py", "%(repo)s/solutions/01_dot_product/01_dot_product.ipynb", "%(mark)s",
             os.path.expanduser("~/../../../../tmp/x")]:
    try:
        open(path, "a").write("pwned")
        print("wrote", path)
    except OSError as exc:
        print("refused", path, exc)
"""

VECTORS = [
    Vector("honest", lambda f: nbformat.write(student_notebook(UNIT), f / f"{UNIT}.ipynb"), 5, at_least=5),
    Vector("honest_wrong", WRONG, 4, "dot_product", at_least=4),
    # nbgrader-notes, security vectors
    Vector("ast_transformer", "import ast\nclass NoAssert(ast.NodeTransformer):\n"
           "    def visit_Assert(self, node):\n        return ast.Pass()\n"
           "get_ipython().ast_transformers.append(NoAssert())\n" + WRONG, reason="dot_product"),
    Vector("patched_comparisons", "import math, numpy, torch\nnumpy.testing.assert_allclose = lambda *a, **k: None\n"
           "torch.testing.assert_close = lambda *a, **k: None\nmath.isclose = lambda *a, **k: True\n" + WRONG,
           reason="dot_product"),
    Vector("torch_function_subclass", "import torch\nclass Liar(torch.Tensor):\n"
           "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
           "        return True\n    def __eq__(self, other):\n        return True\n"
           "def dot_product(a, b):\n    return torch.zeros(()).as_subclass(Liar)\n", reason="dot_product"),
    Vector("shadowing_modules", _shadowing_modules, 5, at_least=5),
    Vector("reads_everything", READ_EVERYTHING + WRONG, reason="dot_product"),
    Vector("writes_everywhere", WRITE_EVERYWHERE + WRONG, reason="dot_product"),
    Vector("grading_detector", "import os, torch\ndef dot_product(a, b):\n"
           "    if os.environ.get('NBGRADER_EXECUTION'):\n        return (a * b).sum() + 1\n"
           "    return (a * b).sum()\n", reason="dot_product"),
    Vector("network", "import socket\nfor host in [('1.1.1.1', 53), ('pypi.org', 443)]:\n    try:\n"
           "        socket.create_connection(host, timeout=3)\n        print('reached', host)\n"
           "    except OSError as exc:\n        print('no network', exc)\n" + WRONG, reason="dot_product"),
    # faults: each costs its exercise (or the cells after it), never the earlier ones
    Vector("memory_bomb", "hog = bytearray(20 * 2**30)\n" + answers(UNIT)["u01_dot_product"], 4, "MemoryError",
           at_least=4),
    Vector("fork_bomb", lambda f: nbformat.write(_answer(
        "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(120)\n        os._exit(0)\n",
        "u01_attention_scores_for"), f / f"{UNIT}.ipynb"), 4, "attention_scores_for", at_least=1),
    Vector("output_flood", "import sys\nfor _ in range(200_000):\n    print('x' * 500)\n"
           + answers(UNIT)["u01_dot_product"], 5, at_least=5),
    Vector("huge_file", "with open('big', 'wb') as f:\n    for _ in range(64):\n        f.write(b'0' * 2**25)\n"
           + answers(UNIT)["u01_dot_product"], 4, "File too large", at_least=4),
    Vector("disk_bomb", lambda f: nbformat.write(_answer(
        "for i in range(40):\n    open(f'part{i}', 'wb').write(b'0' * 2**27)\n", "u01_similarity_matrix"),
        f / f"{UNIT}.ipynb"), 2, "MiB of files", at_least=2),
    Vector("segfault", lambda f: nbformat.write(_answer(
        "import ctypes\nctypes.string_at(0)\n", "u01_similarity_matrix"), f / f"{UNIT}.ipynb"), 2, "kernel died",
        at_least=2),
    Vector("system_exit", "def dot_product(a, b):\n    raise SystemExit('bye')\n", reason="dot_product", at_least=4),
    Vector("keyboard_interrupt", "def dot_product(a, b):\n    raise KeyboardInterrupt\n", reason="dot_product",
           at_least=4),
    # broken inputs: repaired or rejected before anything runs
    Vector("empty_file", _write_json(""), 0, "empty"),
    Vector("binary_file", lambda f: (f / f"{UNIT}.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe"), 0,
           "UTF-8"),
    Vector("nbformat_3", _write_json({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [
        {"cells": [{"cell_type": "code", "input": WRONG, "language": "python", "outputs": [], "metadata": {}}]}]}),
        0, "nbformat 3"),
    Vector("cells_without_ids", _edited(lambda d: [c.pop("id") for c in d["cells"]]), 5, "unique id", at_least=5),
    Vector("grade_id_removed", _edited(lambda d: _test_cell(d)["metadata"].pop("nbgrader")), 5, "missing",
           at_least=5),
    Vector("test_cell_retyped", _edited(_retype), 5, "markdown", at_least=5),
    Vector("points_raised", _edited(lambda d: _test_cell(d)["metadata"]["nbgrader"].update(points=100)), 5,
           "points", at_least=5),
    Vector("another_unit", lambda f: nbformat.write(student_notebook("02_softmax"), f / f"{UNIT}.ipynb"), 0,
           "02_softmax"),
]


def _digest(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("redteam")
    klass = root / "submitted"
    for vector in VECTORS:
        folder = klass / vector.name / UNIT
        folder.mkdir(parents=True)
        if isinstance(vector.build, str):
            code = vector.build % {"root": root, "class": klass, "repo": course.ROOT, "mark": MARK} \
                if "%(" in vector.build else vector.build
            nbformat.write(_answer(code), folder / f"{UNIT}.ipynb")
        else:
            vector.build(folder)
    tracked = subprocess.run(["git", "ls-files", "solutions", "notebooks", "grader", "data", "nbgrader_config.py"],
                             capture_output=True, text=True, cwd=course.ROOT).stdout.split()
    repository = [course.ROOT / p for p in tracked]
    before = _digest(repository), _digest(klass.rglob("*"))
    out = subprocess.run([sys.executable, "-m", "grader", "grade", str(klass), "--json", "--course-dir", str(root),
                          "--workers", "2", "--cell-timeout", "20", "--notebook-timeout", "180"],
                         capture_output=True, text=True, timeout=1500, cwd=course.ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    after = _digest(repository), _digest(klass.rglob("*"))
    results = {r["student"]: r for r in json.loads(out.stdout)}
    for name, r in results.items():  # the outcome of each vector (pytest -s shows it)
        failed = next((e["feedback"] for e in r["exercises"] if not e["passed"]), "")
        print(f"{name:24} {r['score']:g}/{r['max_score']:g}  {r['error'] or '; '.join(r['flags']) or failed}"[:300])
    return root, results, before, after


def test_the_batch_grades_everyone(batch):
    _, results, _, _ = batch
    assert set(results) == {v.name for v in VECTORS}


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.name)
def test_no_free_points_and_a_reason(batch, vector):
    _, results, _, _ = batch
    result = results[vector.name]
    assert vector.at_least <= result["score"] <= vector.at_most, result
    assert result["max_score"] in (5.0, 0.0) and result["score"] <= 5.0
    said = " ".join([result["error"] or "", *result["flags"], *(e["feedback"] for e in result["exercises"])])
    assert vector.reason in said, said


def test_nothing_outside_the_scratch_folders_changed(batch):
    _, _, before, after = batch
    assert before == after
    assert not Path(MARK).exists()


def test_nothing_secret_reached_the_feedback(batch):
    """Every student's copy holds reference answers (the cells they did not attack), so the
    secrets are what only solutions/ holds: the hidden tests and the solution markers."""
    root, _, _, _ = batch
    source = notebook.read(course.source_notebook(UNIT))
    secrets = {line.strip() for exercise in notebook.exercises(source) for line in exercise.hidden.splitlines()
               if len(line.strip()) > 30} | {"BEGIN SOLUTION", "BEGIN HIDDEN TESTS"}
    assert len(secrets) > 10
    for path in [*root.glob("feedback/*/*/*.html"), *root.glob("autograded/*/*/*.ipynb")]:
        text = path.read_text(errors="replace")
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{path}: {leaked[:3]}"


def test_the_honest_grade_is_intact(batch):
    from nbgrader.api import Gradebook

    root, _, _, _ = batch
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course.COURSE_ID) as gb:
        assert gb.find_submission(UNIT, "honest").score == 5.0


def test_an_output_flood_leaves_a_small_feedback(batch):
    root, _, _, _ = batch
    assert (root / "autograded" / "output_flood" / UNIT / f"{UNIT}.ipynb").stat().st_size < 5 * 2**20
    graded = notebook.read(root / "autograded" / "output_flood" / UNIT / f"{UNIT}.ipynb")
    assert "kept only the first" in nbformat.writes(graded)
