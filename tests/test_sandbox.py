"""The sandbox on its own: what learner code can see and do, and grading without bubblewrap."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest
from helpers import execute
from reference import full_marks, student_notebook

from grader import course
from grader.grading import sandbox
from grader.grading.settings import Limits

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


def printed(cell) -> str:
    """What a cell printed, however the kernel batched it into stream outputs (a busy machine may
    send "after" and its newline as two)."""
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def _run(code: str, tmp_path, **limits) -> sandbox.Outcome:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell("print('after')")])
    work = tmp_path / "scratch"
    work.mkdir()
    return execute(nb, work, Limits(**{"cell_seconds": 30, "notebook_seconds": 120, **limits}))


@pytest.mark.skipif(not sandbox.confinement().command, reason="bubblewrap is not installed or does not work here "
                                                              "(apt-get install bubblewrap)")
def test_learner_code_sees_only_its_scratch_folder(tmp_path):
    outside = tmp_path / "outside.txt"
    code = PROBE % {"solutions": str(course.SOLUTIONS), "home": os.path.expanduser("~/.bashrc"),
                    "outside": str(outside)}
    outcome = _run(code, tmp_path)
    seen = json.loads(printed(outcome.executed.cells[0]))
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
        assert printed(outcome.executed.cells[0]) == "42\n" and outcome.problem is None
    finally:
        sandbox.confinement.cache_clear()


def test_limits_stop_bombs_and_keep_the_next_cells(tmp_path):
    outcome = _run("hog = bytearray(20 * 2**30)", tmp_path)
    first, second = outcome.executed.cells
    assert first.outputs[-1]["ename"] == "MemoryError" and printed(second) == "after\n"


def test_an_output_flood_is_cut_to_the_limit(tmp_path):
    outcome = _run("for _ in range(20_000):\n    print('x' * 500)", tmp_path, output_bytes=100_000)
    text = printed(outcome.executed.cells[0])
    assert 100_000 <= len(text) < 110_000 and "kept only the first" in text
    assert printed(outcome.executed.cells[1]) == "after\n"


def test_a_kernel_that_refuses_namespaces_is_named_with_the_fix_and_grading_goes_on(tmp_path):
    """Ubuntu 24.04's AppArmor refuses an ordinary user's bubblewrap its user namespace. A bwrap
    that fails as it does there, first on PATH: the warning names the cause and both ways to
    allow bubblewrap, and the notebook is still graded, with the limits alone."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    notebook = tmp_path / "01_dot_product.ipynb"
    nbformat.write(student_notebook("01_dot_product"), notebook)
    out = subprocess.run([sys.executable, "-m", "grader", "grade", str(notebook), "--json"], capture_output=True,
                         text=True, timeout=600, cwd=course.ROOT,
                         env={**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["score"] == result["max_score"] == full_marks("01_dot_product") and result["error"] is None
    description = result["sandbox"]
    warning = [line.removeprefix("WARNING: ") for line in out.stderr.splitlines() if line.startswith("WARNING: ")]
    *confined, kernel = description.splitlines()
    assert warning[1:-1] == confined and len(warning) <= 8   # short enough to read
    assert kernel == "the kernel started cold: there is no bubblewrap sandbox to fork them in"
    for named in ("process limits only", "bwrap: setting up uid map: Permission denied", "AppArmor",
                  "/etc/apparmor.d/bwrap", f"profile bwrap {os.path.realpath(fake)} flags=(unconfined)", "userns,",
                  "apparmor_parser -r", "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"):
        assert named in description, named


def test_debians_switch_is_named_when_it_is_off(tmp_path):
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "unprivileged_userns_clone").write_text("0\n")
    said = sandbox.namespaces_refused("/usr/bin/bwrap", "bwrap: No permissions to create new namespace", tmp_path)
    assert "sudo sysctl -w kernel.unprivileged_userns_clone=1" in said.splitlines()[-1]
    (tmp_path / "kernel" / "unprivileged_userns_clone").write_text("1\n")
    assert "unprivileged_userns_clone" not in sandbox.namespaces_refused("/usr/bin/bwrap", "?", tmp_path)


@pytest.mark.skipif(not sandbox.confinement().command, reason="bubblewrap is not installed or does not work here "
                                                              "(apt-get install bubblewrap)")
def test_a_forked_kernel_arrives_with_the_self_checks_values_read(tmp_path):
    """The template reads the self-checks' stored values once (grader/grading/template.py), so a
    notebook's first self-check does not read every unit's file again; its kernel has them."""
    code = ("from grader import fixtures\nfrom grader.checks import i18n\n"
            "print(fixtures.entries.cache_info().currsize, fixtures.exercises.cache_info().currsize,"
            " i18n.catalogue.cache_info().currsize)")
    outcome = _run(code, tmp_path)
    assert outcome.kernel.endswith(sandbox.FORKED), outcome.kernel
    assert printed(outcome.executed.cells[0]) == "2 1 2\n"


@pytest.mark.skipif(not sandbox.confinement().command, reason="bubblewrap is not installed or does not work here "
                                                              "(apt-get install bubblewrap)")
def test_a_forked_kernel_starts_with_its_debuggers_modules_imported(tmp_path):
    """An IPython kernel imports its debugger (debugpy, about 130 modules, 0.1-0.3 s of CPU) as it
    starts; the template has imported it, so a forked kernel does not import it again."""
    outcome = _run("import json, sys\nprint(json.dumps(sorted(sys.modules)))", tmp_path)
    assert outcome.kernel.endswith(sandbox.FORKED), outcome.kernel
    kernel = set(json.loads(printed(outcome.executed.cells[0])))
    templates = subprocess.run([sys.executable, "-c", "import json, sys\nfrom grader.grading import template\n"
                                "for m in template.MODULES: __import__(m)\nprint(json.dumps(sorted(sys.modules)))"],
                               capture_output=True, text=True, check=True, cwd=course.ROOT).stdout
    own = kernel - set(json.loads(templates))
    assert "debugpy" in kernel and not [m for m in own if m.startswith(("debugpy", "pydevd", "_pydevd"))], sorted(own)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="Linux's /proc counts shared pages")
def test_the_memory_watch_counts_shared_pages_once_and_walks_page_tables_only_near_the_limit(monkeypatch):
    """A process and the child it forked share 200 MiB, so their resident sizes together count it
    twice and their proportional shares once. Far under the limit the watch reads only the
    resident sizes; between the two sums the shares decide (not over); under the shares, over."""
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys, time\nheld = bytearray(200 * 2**20)\n"
                               "held[::4096] = b'x' * len(held[::4096])\nos.fork()\nprint(flush=True)\ntime.sleep(60)"],
                              stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert holder.stdout.read(1) == b"\n"   # the child is forked
        from grader.grading import template
        tree = list(template.descendants(holder.pid))
        assert len(tree) == 2
        resident, shares = sum(map(sandbox._resident, tree)), sum(map(sandbox._proportional, tree))
        assert resident - shares > 150 * 2**20, (resident, shares)

        walked = []
        real = sandbox._proportional
        monkeypatch.setattr(sandbox, "_proportional", lambda pid: walked.append(pid) or real(pid))
        assert not sandbox._over_memory(holder.pid, resident + 64 * 2**20) and not walked
        assert not sandbox._over_memory(holder.pid, (resident + shares) // 2) and walked
        assert sandbox._over_memory(holder.pid, shares - 64 * 2**20)
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
