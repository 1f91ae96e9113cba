"""Red team: one class batch of hostile, faulty and broken unit-01 submissions, graded by
`python -m grader grade` as one class, one submission per attack vector of
../shared/nbgrader-notes.md ("Security: what default nbgrader does not stop") and per fault the
grader must contain. tests/test_grader.py has the first few (an input transformer, a patched
torch.allclose with an always-equal object, a torch.save forger, os._exit, an endless loop, a
copied test cell with a foreign kernel, a deleted test cell, broken JSON); they are not repeated.

Every submission must leave the batch complete, earn no more than the honest wrong answer where it
attacks a graded exercise (exact points where the fault sits in a known exercise), and have a
reason recorded. For the whole batch: no file outside the sandbox's scratch folders changed or
appeared, the honest student's grade in the gradebook is intact, no process of the batch is left
running, and no feedback shows solution text.

To add a vector, add a row to VECTORS: the code that replaces one answer cell (other answer cells
hold correct answers written differently from the reference, so that any reference text found in
a feedback report was leaked), or a builder that writes the submission folder, and what the
grader must make of it. `pytest -s` prints each vector's outcome.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from reference import answers, full_marks, points_of, student_notebook

from grader import course, notebook
from grader.checks.spec import collect, learner_side_source
from grader.grading import sandbox

# Without the sandbox these submissions would really write into the repository, read the
# solutions and fork-bomb the machine: the red team runs only where bubblewrap works.
# One worker runs the whole module, so its fixture (grading the whole red team) is built once.
pytestmark = [pytest.mark.system, pytest.mark.skipif(not sandbox.confinement().command,
                                 reason="bubblewrap is not installed or does not work here (apt-get install "
                                        "bubblewrap): hostile submissions are not run unconfined"),
              pytest.mark.xdist_group("test_redteam")]

UNIT = "01_dot_product"
NB = f"{UNIT}.ipynb"
TOKEN = uuid.uuid4().hex[:10]                   # written by every hostile write; must appear nowhere
MARK = f"/tmp/pwned-{TOKEN}"                    # a file no submission may create
PURELIB = Path(sysconfig.get_paths()["purelib"])  # the virtualenv's site-packages (read-only in the sandbox)
FULL = full_marks(UNIT)
HONEST_WRONG = FULL - points_of(UNIT, "u01_dot_product_check")   # what the honest wrong answer earns

WRONG = "def dot_product(a, b):\n    return (a * b).sum() + 1\n"
# Correct answers written differently from the reference answers: every notebook but the honest
# one holds no line of the reference, so reference text in its feedback can only be a leak.
ALT = {
    "u01_dot_product": "def dot_product(a, b):\n    total = 0\n    for x, y in zip(a, b):\n"
                       "        total = total + x * y\n    return total\n",
    "u01_attention_scores_for": "def attention_scores_for(query, inputs):\n    return (inputs * query).sum(dim=-1)\n",
    "u01_similarity_matrix": "def similarity_matrix(inputs):\n"
                             "    return (inputs[:, None, :] * inputs[None, :, :]).sum(-1)\n",
    "u01_cosine_similarity_matrix": "def cosine_similarity_matrix(inputs, eps=1e-8):\n"
                                    "    lengths = inputs.norm(dim=1, keepdim=True)\n"
                                    "    rows = inputs / torch.maximum(lengths, torch.tensor(eps))\n"
                                    "    return torch.einsum('id,jd->ij', rows, rows)\n",
}


# --- the vectors --------------------------------------------------------------------------------

@dataclass
class Seen:
    """What the batch made of one student, for a vector's own check."""
    root: Path
    result: dict                 # the result of submitted/<student>/01_dot_product/01_dot_product.ipynb
    results: list[dict]          # every result of the student (one per notebook found)

    @property
    def autograded(self) -> Path:
        return self.root / "autograded" / self.result["student"] / UNIT / NB

    def outputs(self) -> str:
        """The text the learner's code cells printed, as the autograded copy kept it."""
        nb = _read(self.autograded)
        return "\n".join(str(o.get("text", "")) + str(o.get("evalue", "")) for c in nb.cells
                         if c.cell_type == "code" for o in c.get("outputs", []))


@dataclass
class Vector:
    name: str
    build: str | Callable[[Path], None]   # code for answer cell `gid`, or a builder given the unit folder
    at_most: float = HONEST_WRONG         # the score it may reach
    at_least: float = 0.0
    reason: str | tuple[str, ...] = ""    # word(s), one of which the error, a flag or a feedback must contain
    gid: str = "u01_dot_product"          # the answer cell `build` replaces (others hold ALT)
    check: Callable[[Seen], None] | None = None   # anything else to check on the outcome


def _read(path: Path):
    with warnings.catch_warnings():   # submissions without cell ids, on purpose
        warnings.simplefilter("ignore")
        return notebook.read(path)


def _answers(code: str, gid: str = "u01_dot_product") -> dict[str, str]:
    return {**ALT, gid: code}


def _write(nb, folder: Path) -> None:
    nbformat.write(nb, folder / NB)


def _json_of(fill: dict[str, str] | None = None) -> dict:
    return json.loads(nbformat.writes(student_notebook(UNIT, fill)))


def _write_json(data: dict | str | bytes) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        raw = data if isinstance(data, (str, bytes)) else json.dumps(data)
        (folder / NB).write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    return build


def _edited(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        data = _json_of(ALT)
        edit(data)
        _write_json(data)(folder)
    return build


def _test_cell(data: dict, gid: str = "u01_dot_product_check") -> dict:
    return next(c for c in data["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)


def _no_ids(minor: int) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        data["nbformat_minor"] = minor
        for cell in data["cells"]:
            cell.pop("id", None)
    return edit


def _retype(data: dict) -> None:
    cell = _test_cell(data)
    cell["cell_type"] = "markdown"
    del cell["outputs"], cell["execution_count"]


def _nbformat3(folder: Path) -> None:
    """A minimal nbformat 3 notebook written by hand: plain code cells, no nbgrader metadata."""
    cells = [{"cell_type": "code", "input": "import torch", "language": "python", "outputs": [], "metadata": {}}]
    cells += [{"cell_type": "code", "input": code, "language": "python", "outputs": [], "metadata": {}}
              for code in _answers(WRONG).values()]
    _write_json({"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": ""},
                 "worksheets": [{"cells": cells, "metadata": {}}]})(folder)


SHADOW = ("import os\nfor path in [{mark!r}, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'IMPORTED')]:\n"
          "    try:\n        open(path, 'w').write('imported')\n    except OSError:\n        pass\n"
          "raise SystemExit('a module shipped with the submission was imported')\n")


def _shadowing_modules(folder: Path) -> None:
    """An honest notebook with modules beside it that shadow torch, numpy, the grader, site."""
    _write(student_notebook(UNIT, ALT), folder)
    for name in ("torch.py", "numpy.py", "grader.py", "sitecustomize.py", "usercustomize.py", "ipykernel.py"):
        (folder / name).write_text(SHADOW.format(mark=MARK + "-shadow"))


def _symlinked_notebook(folder: Path) -> None:
    """The submitted notebook is a symbolic link to the instructor's solution (an archive
    unpacked into submitted/ keeps links)."""
    (folder / NB).symlink_to(course.source_notebook(UNIT))


def _symlinked_folder(folder: Path) -> None:
    folder.rmdir()
    folder.symlink_to(course.source_notebook(UNIT).parent, target_is_directory=True)


def _two_notebooks(folder: Path) -> None:
    """The notebook named after the unit is wrong; a second one (a renamed copy) is right."""
    _write(student_notebook(UNIT, _answers(WRONG)), folder)
    nbformat.write(student_notebook(UNIT, ALT), folder / f"{UNIT}-Copy1.ipynb")


def _one_grade_per_notebook_slot(seen: Seen) -> None:
    """The gradebook holds one grade per student and unit: two notebooks graded as the same
    slot leave whichever finished last in it (and in autograded/ and feedback/)."""
    assert len(seen.results) == 1, [(Path(r["notebook"]).name, r["score"]) for r in seen.results]


def _other_unit(folder: Path) -> None:
    nbformat.write(student_notebook("02_softmax"), folder / NB)


# Learner code. %(name)s is filled in from _context(); the code runs in the sandbox.

AST_TRANSFORMER = """import ast
class NoAssert(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()
get_ipython().ast_transformers.append(NoAssert())
""" + WRONG

PATCHED_COMPARISONS = """import math, numpy, numpy.testing, torch, torch.testing
import grader.checks.compare, grader.checks.spec
numpy.testing.assert_allclose = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
math.isclose = lambda *a, **k: True
grader.checks.compare.close = lambda *a, **k: True
grader.checks.spec.judge_all = lambda *a, **k: None
""" + WRONG

LIAR_TENSOR = """import torch
class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, '__name__', '')
        if name in ('allclose', 'equal', '__eq__', 'eq', 'isclose'):
            return True
        if name in ('__ne__', 'ne'):
            return False
        return super().__torch_function__(func, types, args, kwargs or {})
    def __eq__(self, other):
        return True
    __hash__ = torch.Tensor.__hash__
def dot_product(a, b):
    return ((a * b).sum() + 1).as_subclass(Liar)
"""

# Reads every secret it can think of and prints it; then looks for any line of the solutions or
# of the hidden checks (by hash) in every file the sandbox can see.
READER = """import glob, hashlib, json, os
for path in ["../../../solutions/01_dot_product/01_dot_product.ipynb",
             "%(repo)s/solutions/01_dot_product/01_dot_product.ipynb", "%(root)s/gradebook.db",
             "%(klass)s/honest/01_dot_product/01_dot_product.ipynb", "/root/.bash_history",
             "/etc/shadow", "/etc/passwd", "%(repo)s/.git/config", "%(repo)s/nbgrader_config.py"]:
    try:
        print("READ", path, open(path, errors="replace").read()[:300])
    except OSError as exc:
        print("DENIED", path, type(exc).__name__)
for pattern in ["%(repo)s/solutions/*", "%(klass)s/*", "%(root)s/*", "/root/*", "/home/*", "../*"]:
    print("LISTED", pattern, glob.glob(pattern))
SECRETS = set(%(digests)r)
def lines(path):
    with open(path, "rb") as handle:
        text = handle.read(4_000_000).decode("utf-8", "replace")
    if path.endswith(".ipynb"):
        try:
            text = "\\n".join("".join(c.get("source", "")) for c in json.loads(text).get("cells", []))
        except Exception:
            pass
    return [line.strip() for line in text.splitlines()]
found, seen = [], 0
for top in ["/work", "/root", "/etc", "/tmp", "/home", "/srv", "/opt", "/var", "/mnt", "/dev/shm", os.getcwd()]:
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("python3.11", "__pycache__", "include", "static", "node_modules")]
        for name in files:
            path = os.path.join(folder, name)
            try:
                if os.path.getsize(path) > 2_000_000:
                    continue
                seen += 1
                if any(hashlib.sha256(line.encode()).hexdigest() in SECRETS for line in lines(path)):
                    found.append(path)
            except OSError:
                pass
print("SCANNED", seen, "FILES; SECRET-IN", found)
""" + WRONG


def _reader_check(seen: Seen) -> None:
    out = seen.outputs()
    assert "SECRET-IN []" in out, out[-2000:]
    assert "\nREAD " not in "\n" + out and "DENIED" in out, out[:3000]


WRITER = """import os, sysconfig
outside = ["%(root)s/gradebook.db", "%(klass)s/honest/01_dot_product/01_dot_product.ipynb",
           "%(repo)s/grader/spec.py", "%(repo)s/grader/pwned_%(token)s.py",
           "%(repo)s/solutions/01_dot_product/01_dot_product.ipynb",
           "%(repo)s/notebooks/01_dot_product/01_dot_product.ipynb",
           os.path.join(sysconfig.get_paths()["purelib"], "pwned-%(token)s.pth"), "%(mark)s",
           os.path.join(os.getcwd(), "..", "pwned-%(token)s"), os.path.expanduser("~/../pwned-%(token)s"),
           "/pwned-%(token)s"]
for path in outside + ["mine.txt", "/dev/shm/pwned-%(token)s"]:
    try:
        with open(path, "a") as handle:
            handle.write("\\n# pwned-%(token)s\\n")
        print("WROTE", path)
    except OSError as exc:
        print("REFUSED", path, type(exc).__name__)
for path in ["%(klass)s/honest/01_dot_product/01_dot_product.ipynb", "%(root)s/gradebook.db"]:
    try:
        os.remove(path)
        print("WROTE (deleted)", path)
    except OSError as exc:
        print("REFUSED", path, type(exc).__name__)
""" + WRONG


def _writer_check(seen: Seen) -> None:
    out = seen.outputs()
    wrote = [line for line in out.splitlines() if line.startswith("WROTE")]
    # its own places only: its folder, /dev/shm and /tmp, both of its own (the real paths are
    # checked unchanged by the tests below)
    assert sorted(line for line in wrote if not line.split(" ")[-1].startswith("/tmp/")) == \
        ["WROTE /dev/shm/pwned-" + TOKEN, "WROTE mine.txt"], out[:3000]


GRADING_DETECTOR = """import os
def dot_product(a, b):
    if os.environ.get("NBGRADER_EXECUTION") or os.getuid() != 0 or "grader" in str(globals().get("_grader_harness")):
        return (a * b).sum() + 1
    return (a * b).sum()
"""

NETWORK = """import socket
for host in [("1.1.1.1", 53), ("pypi.org", 443), ("127.0.0.1", 22)]:
    try:
        socket.create_connection(host, timeout=3).close()
        print("REACHED", host)
    except OSError as exc:
        print("NO-NETWORK", host, type(exc).__name__)
""" + ALT["u01_dot_product"]


def _network_check(seen: Seen) -> None:
    out = seen.outputs()
    assert out.count("NO-NETWORK") == 3 and "REACHED" not in out, out


def _small_autograded(seen: Seen) -> None:
    assert seen.autograded.stat().st_size < 5 * 2**20
    assert "kept only the first" in seen.outputs()


MEMORY_BOMB = "hog = bytearray(20 * 2**30)\n" + ALT["u01_dot_product"]

# Several fresh processes, each well under the per-process memory limit, together above the
# notebook's limit: 5 × 1.5 GiB.
MEMORY_FORKED = """import subprocess, sys
hog = "import sys, time\\nhog = b'1' * (3 * 2**29)\\nsys.stdout.write('1')\\nsys.stdout.flush()\\ntime.sleep(90)"
kids = [subprocess.Popen([sys.executable, "-c", hog], stdout=subprocess.PIPE) for _ in range(5)]
held = sum(kid.stdout.read(1) == b"1" for kid in kids)
print("HELD", held * 1.5, "GiB in", held, "processes")
for kid in kids:
    kid.kill()
""" + ALT["u01_similarity_matrix"]

FORK_BOMB = """import os, time
while True:
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
"""

OUTPUT_FLOOD = "for _ in range(200_000):\n    print('x' * 500)\n" + ALT["u01_dot_product"]

HUGE_FILE = ("with open('big', 'wb') as handle:\n    for _ in range(64):\n        handle.write(b'0' * 2**25)\n"
             + ALT["u01_dot_product"])

DISK_BOMB = "for i in range(40):\n    open(f'part{i}', 'wb').write(b'0' * 2**27)\n" + ALT["u01_similarity_matrix"]

# The same, in the sandbox's private /dev/shm (memory of the host, outside the scratch folder).
SHM_BOMB = ("for i in range(6):\n    open(f'/dev/shm/part{i}', 'wb').write(b'0' * 250 * 2**20)\n"
            + ALT["u01_similarity_matrix"])

# The same in /tmp, in files each under the limit on one file (the template's /tmp was one memory-
# backed folder for every notebook a worker graded, counted by nothing).
TMP_BOMB = ("import time\nfor i in range(6):\n    open(f'/tmp/part{i}', 'wb').write(b'0' * 240 * 2**20)\n"
            "time.sleep(5)   # holds them: the watchdog's next look finds them in this cell\n"
            + ALT["u01_similarity_matrix"])

SEGFAULT = "import ctypes\nctypes.string_at(0)\n" + ALT["u01_similarity_matrix"]

# Rewrites the runner's executed notebook with 30 MB of output, then kills the runner before it
# saves again: the output cap is the runner's, the file is the learner's.
FORGED_EXECUTED = """import json, os, signal
nb = json.load(open("executed.ipynb"))
cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
cell["outputs"].append({"output_type": "stream", "name": "stdout", "text": "y" * 30_000_000})
json.dump(nb, open("executed.ipynb", "w"))
os.kill(os.getppid(), signal.SIGKILL)
""" + ALT["u01_cosine_similarity_matrix"]

# Replaces exercise 1's results file, once the grader's calls wrote it, with a 1.6 KB pickle that
# unpickles into 20**5 shared references (see also test_a_forged_results_file_cannot_stall_the_grader).
RESULTS_BOMB = """import torch
x = [0.5] * 20
for _ in range(4):
    x = [x] * 20
torch.save(x, "u01_dot_product_check-0.out.pt")
""" + ALT["u01_attention_scores_for"]

# Links in the scratch folder where the grader reads its own files back.
SCRATCH_LINKS = """import os
for name, target in [("u01_dot_product_check-0.out.pt", "%(repo)s/solutions/01_dot_product/01_dot_product.ipynb"),
                     ("u01_dot_product_check-0.progress", "/etc/shadow"),
                     ("stopped.txt", "%(repo)s/solutions/01_dot_product/01_dot_product.ipynb")]:
    if os.path.lexists(name):
        os.remove(name)
    os.symlink(target, name)
""" + ALT["u01_cosine_similarity_matrix"]

FORBID_BYPASS = "import torch\n_dot = torch.dot\ndef dot_product(a, b):\n    return _dot(a, b)\n"


# Vector(name, answer code or builder, at_most, at_least, reason, gid=answer cell replaced, check=...)
VECTORS = [
    # references: what honest work earns
    Vector("honest", lambda f: _write(student_notebook(UNIT), f), 5, 5),
    Vector("honest_alternative", lambda f: _write(student_notebook(UNIT, ALT), f), 5, 5),
    Vector("honest_wrong", WRONG, HONEST_WRONG, HONEST_WRONG, "dot_product"),
    # nbgrader-notes, security vectors: none may earn more than the honest wrong answer
    Vector("ast_transformer", AST_TRANSFORMER, reason="dot_product"),
    Vector("patched_comparisons", PATCHED_COMPARISONS, reason="dot_product"),
    Vector("torch_function_subclass", LIAR_TENSOR, reason="dot_product"),
    Vector("shadowing_modules", _shadowing_modules, 5, 5),
    Vector("reads_everything", READER, reason="dot_product", check=_reader_check),
    Vector("writes_everywhere", WRITER, reason="dot_product", check=_writer_check),
    Vector("grading_detector", GRADING_DETECTOR, reason="dot_product"),
    Vector("network", NETWORK, 5, 5, check=_network_check),
    # beyond the notes: an exercise's forbidden function kept under another name, submissions
    # that are links out of the class folder, a second notebook in one unit folder, the
    # grader's own files in the scratch folder replaced by links or by a pickle bomb
    Vector("forbidden_function_alias", FORBID_BYPASS, reason="torch.dot"),
    Vector("symlinked_notebook", _symlinked_notebook, reason="link"),
    Vector("symlinked_folder", _symlinked_folder, reason="link"),
    Vector("two_notebooks", _two_notebooks, reason="dot_product", check=_one_grade_per_notebook_slot),
    Vector("scratch_links", SCRATCH_LINKS, reason="read back", gid="u01_cosine_similarity_matrix"),
    Vector("results_bomb", RESULTS_BOMB, reason="dot_product", gid="u01_attention_scores_for"),
    # faults: each costs the exercise it is in (or the cells after it), never the earlier ones
    Vector("memory_bomb", MEMORY_BOMB, 4, 4, "MemoryError"),
    Vector("memory_forked", MEMORY_FORKED, 4, 2, "memory", gid="u01_similarity_matrix"),
    Vector("fork_bomb", FORK_BOMB, 4, 1, ("BlockingIOError", "Resource temporarily unavailable"),
           gid="u01_attention_scores_for"),
    Vector("output_flood", OUTPUT_FLOOD, 5, 5, check=_small_autograded),
    Vector("huge_file", HUGE_FILE, 4, 4, "File too large"),
    Vector("disk_bomb", DISK_BOMB, 2, 2, "MiB of files", gid="u01_similarity_matrix"),
    Vector("shm_bomb", SHM_BOMB, 4, 2, "MiB", gid="u01_similarity_matrix"),
    Vector("tmp_bomb", TMP_BOMB, 2, 2, "MiB of files", gid="u01_similarity_matrix"),
    Vector("segfault", SEGFAULT, 2, 2, "kernel died", gid="u01_similarity_matrix"),
    Vector("forged_executed_notebook", FORGED_EXECUTED, 3, 3, "killed", gid="u01_cosine_similarity_matrix"),
    Vector("system_exit", "def dot_product(a, b):\n    raise SystemExit('bye')\n", 4, 4, "SystemExit"),
    Vector("sys_exit", "import sys\ndef dot_product(a, b):\n    sys.exit()\n", 4, 4, "SystemExit"),
    Vector("keyboard_interrupt", "def dot_product(a, b):\n    raise KeyboardInterrupt\n", 4, 4, "KeyboardInterrupt"),
    # broken inputs: repaired (and graded) or rejected with a reason, before anything runs
    Vector("empty_file", _write_json(""), 0, 0, "empty"),
    Vector("binary_file", _write_json(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" + bytes(range(256))), 0, 0, "UTF-8"),
    Vector("nbformat_3", _nbformat3, 4, 4, "nbformat 3"),
    Vector("no_ids_nbformat_4_4", _edited(_no_ids(4)), 5, 5),   # valid: ids came with 4.5
    Vector("no_ids_nbformat_4_5", _edited(_no_ids(5)), 5, 5, "id"),
    Vector("grade_id_removed", _edited(lambda d: _test_cell(d)["metadata"]["nbgrader"].pop("grade_id")), 5, 5,
           "missing"),
    Vector("test_cell_retyped", _edited(_retype), 5, 5, "markdown"),
    Vector("points_raised", _edited(lambda d: _test_cell(d)["metadata"]["nbgrader"].update(points=100)), 5, 5,
           "points"),
    Vector("another_unit", _other_unit, 0, 0, "02_softmax"),
]


# --- secrets: what only solutions/ holds ---------------------------------------------------------

def _secrets() -> set[str]:
    """Lines (over 30 characters) of the reference answers and of the hidden checks' grader
    side that no released notebook and no learner-side call shows, and the solution markers."""
    released = "\n".join(c.source for c in notebook.read(course.release_notebook(UNIT)).cells)
    shipped = released
    found = {"### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"}
    for exercise in notebook.exercises(notebook.read(course.source_notebook(UNIT))):
        shipped += "\n".join(learner_side_source(exercise.hidden, spec) for spec in collect(exercise.hidden))
        found |= {line.strip() for line in exercise.hidden.splitlines() if len(line.strip()) > 30}
    found |= {line.strip() for code in answers(UNIT).values() for line in code.splitlines() if len(line.strip()) > 30}
    return {s for s in found if s not in shipped or s.startswith("###")}


def _context(root: Path) -> dict[str, str]:
    return {"root": str(root), "klass": str(root / "submitted"), "repo": str(course.ROOT), "token": TOKEN,
            "mark": MARK, "digests": sorted(hashlib.sha256(s.encode()).hexdigest() for s in _secrets())}


# --- the batch ----------------------------------------------------------------------------------

def _digest(top: Path) -> dict[str, str]:
    """sha256 of every file under `top`, links not followed (a link is recorded as its target)."""
    found = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder, name)
            if path.is_symlink():
                found[str(path)] = "-> " + os.readlink(path)
            elif name in files:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "solutions", "notebooks", "grader", "nbgrader_config.py"],
                            capture_output=True, text=True, cwd=course.ROOT, check=True).stdout.split()
    return [course.ROOT / p for p in listed]


def _with_token(paths) -> list[str]:
    return [str(p) for p in paths if p.is_file() and TOKEN.encode() in p.read_bytes()]


def _batch_processes(root: Path) -> list[str]:
    """Processes still running whose command line or working folder is under `root`."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if str(root) in cmdline or cwd.startswith(str(root)):
            left.append(f"{entry.name} {cmdline[:200]}")
    return left


@dataclass
class Batch:
    root: Path
    results: dict[str, list[dict]]         # student -> results, one per notebook
    repository: tuple[dict, dict]           # sha256 of the tracked files before and after
    klass: tuple[dict, dict]                # sha256 of everything under submitted/ before and after
    seconds: float
    stderr: str
    leftovers: list[str] = field(default_factory=list)

    def result(self, student: str) -> dict:
        found = self.results[student]
        return next((r for r in found if Path(r["notebook"]).name == NB), found[0])


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Batch:
    root = tmp_path_factory.mktemp("redteam")
    klass, scratch = root / "submitted", root / "scratch"
    scratch.mkdir()
    context = _context(root)
    for vector in VECTORS:
        folder = klass / vector.name / UNIT
        folder.mkdir(parents=True)
        if isinstance(vector.build, str):
            code = vector.build % context if "%(" in vector.build else vector.build
            _write(student_notebook(UNIT, _answers(code, vector.gid)), folder)
        else:
            vector.build(folder)
    repository, before = _tracked(), _digest(klass)
    hashes = _digest_files(repository)
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "grader", "grade", str(klass), "--json", "--course-dir", str(root),
                          "--workers", "2", "--cell-timeout", "60", "--notebook-timeout", "240"],
                         capture_output=True, text=True, timeout=900, cwd=course.ROOT,
                         env={**os.environ, "TMPDIR": str(scratch)})   # scratch folders under root, to check
    seconds = time.monotonic() - start
    assert out.returncode == 0, out.stderr[-3000:]
    results: dict[str, list[dict]] = {}
    for r in json.loads(out.stdout):
        results.setdefault(r["student"], []).append(r)
    done = Batch(root, results, (hashes, _digest_files(repository)), (before, _digest(klass)), seconds, out.stderr,
                 _batch_processes(root))
    print(f"\nred-team batch: {len(results)} students in {seconds:.0f} s")
    for name in sorted(results):  # the outcome of each vector (pytest -s shows it)
        for r in results[name]:
            failed = "; ".join(f"{e['grade_id']}: {e['feedback']}" for e in r["exercises"] if not e["passed"])
            print(f"  {name:26} {r['score']:g}/{r['max_score']:g} {r['seconds']:5.1f} s "
                  f"{Path(r['notebook']).name[-22:]:>22}  "
                  f"{' | '.join(filter(None, [r['error'], '; '.join(r['flags']), failed]))}"[:400])
    return done


def _digest_files(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


# --- per vector ---------------------------------------------------------------------------------

def test_the_batch_grades_everyone(batch):
    assert set(batch.results) == {v.name for v in VECTORS}
    for found in batch.results.values():
        for r in found:
            assert r["sandbox"].startswith("bubblewrap"), r["sandbox"]
            assert r["max_score"] in (FULL, 0.0) and 0 <= r["score"] <= FULL, r


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.name)
def test_no_free_points_and_a_reason(batch, vector):
    result = batch.result(vector.name)
    said = " ".join([result["error"] or "", *result["flags"], *(e["feedback"] for e in result["exercises"])])
    assert vector.at_least <= result["score"] <= vector.at_most, said
    reasons = (vector.reason,) if isinstance(vector.reason, str) else vector.reason
    assert any(r.lower() in said.lower() for r in reasons), said
    if vector.check:
        vector.check(Seen(batch.root, result, batch.results[vector.name]))


# --- for the whole batch ------------------------------------------------------------------------

def test_no_submission_or_repository_file_changed(batch):
    before, after = batch.klass
    assert before == after, {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                             if before.get(k) != after.get(k)}
    before, after = batch.repository
    # Other people may edit the working tree during the batch: a change is learner-made when it
    # carries the token every hostile write writes, or when a tracked file disappeared.
    changed = [p for p in set(before) | set(after) if before.get(p) != after.get(p)]
    assert not _with_token(Path(p) for p in changed), changed
    assert set(after) >= set(before), set(before) - set(after)


def test_nothing_appeared_outside_the_scratch_folders(batch):
    appeared = [p for p in [Path(MARK), Path(MARK + "-shadow"), Path(f"/dev/shm/pwned-{TOKEN}"),
                            Path(f"/pwned-{TOKEN}"), PURELIB / f"pwned-{TOKEN}.pth",
                            course.ROOT / "grader" / f"pwned_{TOKEN}.py"] if p.exists()]
    appeared += [str(p) for p in batch.root.rglob("*") if TOKEN in p.name or p.name == "IMPORTED"]
    assert not appeared
    assert not _with_token([batch.root / "gradebook.db"])


def test_scratch_folders_are_removed_and_no_process_is_left(batch):
    assert not batch.leftovers
    assert not list((batch.root / "scratch").iterdir())


def test_the_gradebook_holds_the_grades_given(batch):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{batch.root / 'gradebook.db'}", course.COURSE_ID) as gb:
        assert gb.find_submission(UNIT, "honest").score == FULL
        for student in batch.results:
            assert gb.find_submission(UNIT, student).score == batch.result(student)["score"], student


def test_no_solution_text_in_any_feedback(batch):
    """Every report and autograded copy, against what only solutions/ holds; a line the student
    wrote themselves (the honest student's reference answers) is theirs to see."""
    secrets = _secrets()
    assert len(secrets) > 20
    for student in batch.results:
        own = _own_text(batch.root / "submitted" / student / UNIT / NB)
        hidden = {s for s in secrets if s not in own}
        for path in [batch.root / "feedback" / student / UNIT / f"{UNIT}.html",
                     batch.root / "autograded" / student / UNIT / NB]:
            if path.exists():
                text = path.read_text(errors="replace")
                if path.suffix == ".ipynb":   # compare sources, not their JSON-escaped form
                    text += "\n".join(c.source for c in _read(path).cells)
                leaked = sorted(s for s in hidden if s in text)
                assert not leaked, f"{path}: {leaked[:4]}"


def _own_text(submitted: Path) -> str:
    """What a student wrote: the file and its cells' sources; nothing for a link to someone else's."""
    if submitted.is_symlink() or submitted.parent.is_symlink() or not submitted.exists():
        return ""
    text = submitted.read_text(errors="replace")
    try:
        return text + "\n".join(c.source for c in _read(submitted).cells)
    except ValueError:
        return text


def test_every_feedback_stays_small(batch):
    for path in [*batch.root.glob("autograded/*/*/*.ipynb"), *batch.root.glob("feedback/*/*/*.html")]:
        assert path.stat().st_size < 5 * 2**20, path


def test_the_batch_stays_within_its_time(batch):
    assert batch.seconds < 600, batch.seconds


# --- the grader's own process -------------------------------------------------------------------

def test_a_forged_results_file_cannot_stall_the_grader(tmp_path):
    """The results file is learner-made (results_bomb shows learner code can replace it): an
    18 KB pickle of shared references (1000**5 floats) must be refused quickly, not expanded in
    the grader's process, which has no memory or time limit of its own. Run here under a 2 GiB
    address-space limit and 30 s, to keep the machine safe."""
    bomb = tmp_path / "bomb.out.pt"
    script = textwrap.dedent(f"""
        import resource, sys, torch
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
        from pathlib import Path
        from grader.grading import grade
        x = [0.5] * 1000
        for _ in range(4):
            x = [x] * 1000
        torch.save(x, {str(bomb)!r})
        print("SIZE", Path({str(bomb)!r}).stat().st_size)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        results = grade._read_results(Path({str(bomb)!r}))
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print("READ", type(results).__name__, "GREW", grown // 1024, "MiB")
    """)
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30,
                             cwd=course.ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading a 2 KB results file took more than {time.monotonic() - start:.0f} s")
    assert out.returncode == 0 and "READ" in out.stdout, out.stdout + out.stderr[-2000:]
    assert int(out.stdout.split("GREW")[1].split()[0]) < 256, out.stdout   # MiB


# --- one notebook after another on the same template (grader.grading.template) -------------------

LEAVE = """
import builtins, json, math, os, subprocess, sys
import matplotlib, torch
T = %(token)r
for folder in (".", os.environ["HOME"], os.environ["TMPDIR"], "/dev/shm", "/tmp"):
    with open(os.path.join(folder, "left-" + T), "w") as handle:
        handle.write(T)
subprocess.Popen(["sleep", "300", T], start_new_session=True)
if os.fork() == 0:   # a daemon, the classic way
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "301", T])
    os._exit(0)
torch.set_num_threads(3)
torch.set_default_dtype(torch.float64)
torch.manual_seed(1234)
matplotlib.rcParams["lines.linewidth"] = 17
os.environ["LEFT_BY_A"] = T
json.LEFT = T
sys.modules["math"] = "replaced"
builtins.sorted = lambda *args, **kwargs: T
print("left")
"""
REACH = """
import json, os, signal
T = %(token)r
own, opened = set(os.listdir("/proc/self/fd")), []
for fd in map(int, own):   # every descriptor it has but the kernel's own sockets and events
    try:
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(("socket:", "anon_inode:")):
            os.write(fd, T.encode())
    except OSError:
        pass
for pid in filter(str.isdigit, os.listdir("/proc")):   # every descriptor of every process it can see
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for name in names:
        try:
            fd = os.open(f"/proc/{pid}/fd/{name}", os.O_RDWR)
        except OSError:
            continue
        opened.append(f"{pid}/{name}")
        os.close(fd)
def depth(pid):   # how many PID namespaces a process is in, as this /proc shows it
    with open(f"/proc/{pid}/status") as handle:
        return next(len(line.split()) - 1 for line in handle if line.startswith("NSpid:"))
# the processes of the notebook's own namespace may be reached (its runner's, as with a cold kernel)
print(json.dumps(sorted(p for p in opened if depth(p.split("/")[0]) < depth("self"))))
"""
SIGNAL = """
import os, signal
for pid in range(1, 4096):   # every process it could signal, its own kernel's threads too: A's loss alone
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""
BOMB = "import os\nwhile True:\n    os.fork()\n"
HOG = ("import multiprocessing, time\n"
       "def hold():\n    block = bytearray(1500 * 2**20)\n    time.sleep(60)\n"
       "if __name__ == '__main__':\n    for _ in range(8):\n        multiprocessing.Process(target=hold).start()\n"
       "    time.sleep(60)\n")
LOOK = """
import builtins, glob, json, os, sys
import matplotlib, torch
T = %(token)r
found = [p for folder in (".", os.environ["HOME"], os.environ["TMPDIR"], "/dev/shm", "/tmp", "..")
         for p in glob.glob(os.path.join(folder, "**", "*" + T + "*"), recursive=True)]
running = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if T.encode() in handle.read():
                running.append(pid)
    except OSError:
        pass
print(json.dumps({"files": found, "processes": running, "threads": torch.get_num_threads(),
                  "dtype": str(torch.get_default_dtype()), "seed": torch.initial_seed() != 1234,
                  "linewidth": matplotlib.rcParams["lines.linewidth"] == matplotlib.rcParamsDefault["lines.linewidth"],
                  "environment": T in repr(dict(os.environ)), "module global": hasattr(json, "LEFT"),
                  "sys.modules": type(sys.modules["math"]).__name__, "builtin": sorted([2, 1]),
                  "jobs seen": len(os.listdir("..")), "shm": os.listdir("/dev/shm")}))
"""
CLEAN = {"files": [], "processes": [], "threads": 1, "dtype": "torch.float32", "seed": True,
         "linewidth": True, "environment": False, "module global": False, "sys.modules": "module",
         "builtin": [1, 2], "jobs seen": 1, "shm": []}


def _notebook(*cells: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c % {"token": TOKEN}) for c in cells])


PAIRS = {"leaves things behind": [LEAVE], "reaches for the template": [REACH, SIGNAL], "fork bomb": [BOMB],
         "memory hog": [HOG]}


def pair(attack: str, workdir: Path) -> dict:
    """Notebook A attacks, then notebook B, forked from the same template, looks for A: what each
    did and saw, as plain data (tests/test_nonroot.py runs it as an ordinary account too)."""
    from helpers import execute

    from grader.grading.settings import Limits

    # a fork bomb's processes spin until its cell is stopped: 5 s of that proves as much as 15
    limits = Limits(cell_seconds=5 if attack == "fork bomb" else 15, notebook_seconds=40, memory_bytes=4 * 2**30)
    if sandbox.scratch_parent(limits) is None:
        return {"cold": sandbox._cold_reason}
    template = sandbox._templates[""]
    a = execute(_notebook(*PAIRS[attack], "print('A after')"), workdir, limits)
    b = execute(_notebook(LOOK, "print('B after')"), workdir, limits)
    first = a.executed.cells[0]
    return {"token": TOKEN, "kernels": [a.kernel, b.kernel],
            "same template": template.alive() and sandbox._templates[""] is template,
            "b saw": json.loads(b.executed.cells[0].outputs[0]["text"]), "b problem": b.problem,
            "b after": b.executed.cells[1].outputs[0]["text"], "a problem": a.problem,
            "a printed": "".join(o["text"] for o in first.outputs if o.get("name") == "stdout"),
            "a stopped": bool(first.metadata.get("grader", {}).get("timed_out")
                              or any(o.get("output_type") == "error" for o in first.outputs))}


def check_pair(attack: str, seen: dict) -> None:
    """B saw nothing of A and was graded normally; the template survived A; A's attack ran."""
    assert seen["kernels"] == [sandbox.FORKED, sandbox.FORKED] and seen["same template"], seen
    assert seen["b saw"] == CLEAN
    assert seen["b problem"] is None and seen["b after"] == "B after\n"
    if attack == "leaves things behind":
        assert seen["a printed"] == "left\n"
    if attack == "reaches for the template":   # no descriptor but its own could be opened
        assert json.loads(seen["a printed"].replace(seen["token"], "").strip().splitlines()[-1]) == []
    if attack == "fork bomb":   # stopped: by the process limit, the cell's time limit or the watchdog
        assert seen["a problem"] or seen["a stopped"]
    if attack == "memory hog":
        assert seen["a problem"] and "memory" in seen["a problem"]


@pytest.mark.parametrize("attack", list(PAIRS))
def test_nothing_crosses_from_one_notebook_to_the_next_on_the_template(tmp_path, attack):
    """Notebook A attacks; notebook B, the next one forked from the same template, sees nothing of
    A and is graded normally; the template survives A."""
    seen = pair(attack, tmp_path)
    if "cold" in seen:
        pytest.skip(f"kernels are not forked here: {seen['cold']}")
    check_pair(attack, seen)
