"""ruff, with the settings in pyproject.toml, finds nothing in the course's code or in the code
cells of the units' sources; pre-commit offers the same version. The import contracts in
.importlinter hold, and a broken one names the import that broke it."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

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


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's own command on the packages in `root`, with the contracts in .importlinter."""
    command = Path(sys.executable).parent / "lint-imports"
    return subprocess.run([str(command), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_hold():
    out = _lint_imports(course.ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "5 kept, 0 broken" in out.stdout


def test_a_broken_import_contract_names_the_import(tmp_path):
    """The learner's self-check reaching into grading, as an import inside a function."""
    for package in ("grader", "attention_course"):
        shutil.copytree(course.ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(course.ROOT / ".importlinter", tmp_path)
    with open(tmp_path / "grader" / "checks" / "selfcheck.py", "a", encoding="utf-8") as source:
        source.write("\n\ndef _peek():\n    from ..grading import grade  # noqa: F401\n")
    out = _lint_imports(tmp_path)
    assert out.returncode != 0
    assert "grader.checks is not allowed to import grader.grading" in out.stdout
    assert "grader.checks.selfcheck -> grader.grading.grade (l." in out.stdout
