"""The grader run by an ordinary account, as an instructor without root runs it: bubblewrap's
user namespace confines learner code (uid 65534 inside), the grades are right, everything the
grader writes belongs to the account, and learner code cannot read the account's own files.

Run as root (as CI is): the test makes an account of its own, grades as that account with
runuser, and removes the account afterwards."""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import sys
import time
from pathlib import Path

import accounts
import nbformat
import pytest
from catalogue import u01
from reference import answers, full_marks, points_of, student_notebook

from grader import course

# One worker runs the whole module, so its fixture (an account and its graded class) is built once.
pytestmark = [pytest.mark.system, pytest.mark.xdist_group("test_nonroot")]

UNIT = "01_dot_product"
FULL = full_marks(UNIT)
DOT = points_of(UNIT, "u01_dot_product_check")   # what a wrong dot_product costs
MISTAKE = u01.MISTAKES[0]   # the dot product normalised into a cosine

# A hostile answer: reads what the account can read outside the scratch folder, says what it
# saw, then answers correctly (so its grade shows nothing of it).
HOSTILE = """import json, os
seen = {"uid": os.getuid()}
for name, path in %(paths)r.items():
    try:
        with open(path) as handle:
            seen[name] = handle.read()
    except OSError as exc:
        seen[name] = type(exc).__name__
print("SEEN " + json.dumps(seen))

def dot_product(a, b):
    return (a * b).sum()
"""


@pytest.fixture(scope="module")
def account():
    reason = accounts.why_not()
    if reason:
        pytest.skip(reason)
    prefix, how = accounts.view()
    if prefix is None:
        pytest.skip(how)
    made = accounts.make("grader-test-")
    try:
        yield made, sys.executable
    finally:
        accounts.remove(made)


def _give(path: Path, name: str) -> None:
    """`path` and everything below it to the account."""
    shutil.chown(path, name, name)
    for root, dirs, files in os.walk(path):
        for entry in (os.path.join(root, n) for n in dirs + files):
            shutil.chown(entry, name, name)


@pytest.fixture(scope="module")
def graded(account):
    """A class of two (correct, hostile) graded as the account, and a notebook with a
    catalogued mistake graded alone: their results and what the runs wrote."""
    account, python = account
    home = account.home
    secret = home / "secret.txt"
    token = secrets.token_hex(16)
    secret.write_text(token)
    root = home / "course"
    ann = root / "submitted" / "ann" / UNIT / f"{UNIT}.ipynb"
    hostile = answers(UNIT)
    hostile[MISTAKE.answer] = HOSTILE % {"paths": {"home": str(secret), "classmate": str(ann)}}
    for student, nb in {"ann": student_notebook(UNIT), "eve": student_notebook(UNIT, hostile)}.items():
        path = root / "submitted" / student / UNIT / f"{UNIT}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    wrong = answers(UNIT)
    wrong[MISTAKE.answer] = MISTAKE.code
    single = home / "single" / f"{UNIT}.ipynb"
    single.parent.mkdir()
    nbformat.write(student_notebook(UNIT, wrong), single)
    _give(home, account.name)
    secret.chmod(0o600)

    started = time.monotonic()
    batch = account.run(str(python), "-m", "grader", "grade", str(root / "submitted"), "--json",
                        "--course-dir", str(root), "--workers", "1", "--cell-timeout", "60", cwd=course.ROOT)
    alone = account.run(str(python), "-m", "grader", "grade", str(single), "--json", "--cell-timeout", "60",
                        cwd=course.ROOT)
    print(f"graded as {account.name} in {time.monotonic() - started:.1f} s")
    return {"results": {r["student"]: r for r in json.loads(batch.stdout)}, "mistake": json.loads(alone.stdout),
            "stderr": batch.stderr + alone.stderr, "root": root, "token": token}


def test_full_marks_and_a_catalogued_mistake_graded_as_an_ordinary_account(graded):
    results = graded["results"]
    assert results["ann"]["score"] == FULL and results["ann"]["error"] is None
    mistake = graded["mistake"]
    assert mistake["score"] == FULL - DOT and mistake["max_score"] == FULL
    failed = [e for e in mistake["exercises"] if not e["passed"]]
    assert [e["grade_id"] for e in failed] == [f"{MISTAKE.answer}_check"]
    assert MISTAKE.message in failed[0]["feedback"]


def test_learner_code_runs_in_bubblewraps_user_namespace(graded):
    for result in [*graded["results"].values(), graded["mistake"]]:
        assert result["sandbox"].startswith("bubblewrap: uid 65534 in a user namespace"), result["sandbox"]
        assert "process limits only" not in result["sandbox"]
    assert "WARNING" not in graded["stderr"]


def test_what_the_grader_writes_belongs_to_the_account(graded, account):
    uid = pwd.getpwnam(account[0].name).pw_uid
    root = graded["root"]
    for made in ("gradebook.db", "grades.csv", f"autograded/ann/{UNIT}/{UNIT}.ipynb",
                 f"feedback/ann/{UNIT}/{UNIT}.html", f"grader_results/ann/{UNIT}.json"):
        assert (root / made).is_file(), made
    foreign = [str(p) for p in [root, *root.rglob("*")] if p.lstat().st_uid != uid]
    assert foreign == []


def test_learner_code_cannot_read_the_accounts_files(graded):
    eve = graded["results"]["eve"]
    assert eve["score"] == FULL, eve   # the hostile cell ran, and then answered correctly
    copy = nbformat.read(graded["root"] / "autograded" / "eve" / UNIT / f"{UNIT}.ipynb", as_version=4)
    said = [o["text"] for c in copy.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "stream" and o["text"].startswith("SEEN ")]
    assert len(said) == 1, said
    seen = json.loads(said[0].removeprefix("SEEN "))
    assert seen["uid"] == 65534
    assert seen["home"] in ("FileNotFoundError", "PermissionError"), seen
    assert seen["classmate"] in ("FileNotFoundError", "PermissionError"), seen
    everything = "".join(p.read_text(errors="replace") for p in graded["root"].rglob("*") if p.is_file()
                         and p.suffix in (".ipynb", ".html", ".json", ".csv"))
    assert graded["token"] not in everything


# The red-team pair tests (tests/test_redteam.py), run by the account: one notebook after another
# on one template, as a class hub's instructor grades without root.
PAIRS = """import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_redteam
seen = {{attack: test_redteam.pair(attack, Path(tempfile.mkdtemp())) for attack in test_redteam.PAIRS}}
print("PAIRS " + json.dumps(seen))
"""


def test_nothing_crosses_from_one_notebook_to_the_next_as_an_ordinary_account(account):
    import test_redteam

    account, python = account
    script = account.home / "pairs.py"
    script.write_text(PAIRS.format(tests=str(Path(__file__).resolve().parent)))
    shutil.chown(script, account.name, account.name)
    done = account.run(str(python), str(script), cwd=course.ROOT, timeout=600)
    [line] = [line for line in done.stdout.splitlines() if line.startswith("PAIRS ")]
    for attack, seen in json.loads(line[len("PAIRS "):]).items():
        assert "cold" not in seen, seen   # an ordinary account forks kernels, as the hub's instructors do
        test_redteam.check_pair(attack, seen)
