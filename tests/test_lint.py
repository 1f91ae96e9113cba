"""ruff, with the settings in pyproject.toml, finds nothing in the course's code or in the code
cells of the units' sources; pre-commit offers the same version."""
from __future__ import annotations

import re
import subprocess
import sys

from grader import course


def test_ruff_finds_nothing():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=course.ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_ruff_covers_the_units_sources_and_every_code_folder():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--show-files", "."],
                         cwd=course.ROOT, capture_output=True, text=True, timeout=300)
    files = {line.strip() for line in out.stdout.splitlines()}
    for unit in course.units():
        assert str(course.source_text(unit)) in files, unit
    for folder in ("grader", "tests", "benchmarks", "data", "tools"):
        assert any(f.startswith(str(course.ROOT / folder) + "/") for f in files), folder
    assert not any(f.endswith(".ipynb") for f in files), "generated notebooks are linted through their .py"


def test_pre_commit_runs_the_pinned_ruff():
    pinned = re.search(r'"ruff==([\d.]+)"', (course.ROOT / "pyproject.toml").read_text(encoding="utf-8")).group(1)
    hook = re.search(r"ruff-pre-commit\s+rev: v([\d.]+)", (course.ROOT / ".pre-commit-config.yaml").read_text())
    assert hook and hook.group(1) == pinned
