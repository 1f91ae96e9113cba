"""The set-up: one dependency list in two formats, and the README's two commands."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pip_section_of_environment_yml() -> list[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    out = []
    for line in lines[start + 1:]:
        match = re.match(r"^\s+- (\S.*)$", line)
        if not match:
            break
        out.append(match.group(1).strip())
    return out


def _normalise(requirements: list[str]) -> list[str]:
    return [re.sub(r"\s+", "", r).lower().replace("_", "-") for r in requirements]


def test_environment_yml_lists_the_same_packages_as_pyproject():
    """environment.yml's pip list: pyproject's dependencies and every extra, each once."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for extra in project["optional-dependencies"].values() for r in extra]
    wanted = list(dict.fromkeys(_normalise(project["dependencies"] + extras)))
    listed = _normalise([r for r in _pip_section_of_environment_yml() if not r.startswith("-")])
    assert sorted(set(listed)) == sorted(wanted)
    assert len(listed) == len(set(listed)), ("listed twice in environment.yml: "
                                             f"{sorted({r for r in listed if listed.count(r) > 1})}")


def test_nbformat_imports_without_compiling_grammars():
    """Every process that reads a notebook imports nbformat; jsonschema from 4.25 on makes that
    import compile rfc3987-syntax's grammars (seconds of CPU). The pin in pyproject.toml keeps it out."""
    probe = "import sys, nbformat; print(sorted(m for m in ('lark', 'rfc3987_syntax') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", (f"importing nbformat loaded {loaded.strip()}: "
                                    "see the jsonschema pin in pyproject.toml")


def test_environment_yml_takes_pytorchs_cpu_build_as_the_course_does_without_a_gpu():
    """conda cannot ask whether a GPU is there: its pip list adds the CPU index that ./course adds
    on a machine without one, the same address, and no other pip option."""
    from grader.classroom.torch_index import CPU_INDEX

    options = [r for r in _pip_section_of_environment_yml() if r.startswith("-")]
    assert options == [f"--extra-index-url {CPU_INDEX}"]


def test_environment_yml_pins_the_python_the_course_needs():
    text = (ROOT / "environment.yml").read_text()
    assert "python=3.11" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"] == ">=3.11"


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "./course lab" in readme and "./course test" in readme
    assert "./course test" in (ROOT / ".ci" / "run").read_text()


def test_every_unit_has_a_source_and_a_student_notebook():
    from grader import course

    units = course.units()
    assert units, "no units in solutions/"
    for unit in units:
        assert course.source_notebook(unit).exists()
        assert course.release_notebook(unit).exists(), f"run python -m grader release for {unit}"


def test_readme_gives_the_learners_install_on_every_system_and_a_hosted_notebook():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for words in ("| Windows (PowerShell) |", "| macOS |", "| Linux |", "attention-course lab", "A hosted notebook",
                  "INSTALL_FROM", "attention_course/__init__.py"):
        assert words in readme, words
    from attention_course import INSTALL_FROM
    from grader.authoring.release import install_from_problem

    assert install_from_problem(INSTALL_FROM) is None and "#sha256=" in readme   # how to pin the wheel


def test_the_grouped_modules_stay_together_under_xdist(request):
    """Under the README's `pytest -n 2` (--dist loadgroup), a test marked xdist_group carries its
    group in its node id, which is how xdist keeps a group on one worker. When it does not (pytest
    9.2 with pytest-xdist 3.8, xdist #1386), nothing fails, but the class-grading fixtures are
    built once per worker and the browser, hub and class tests run against each other."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("run without xdist workers: there is nothing to group")
    grouped = [item.nodeid for item in request.session.items if item.get_closest_marker("xdist_group")]
    if not grouped:
        pytest.skip("none of the grouped tests is in this run")
    assert all("@" in nodeid for nodeid in grouped), grouped[:3]
