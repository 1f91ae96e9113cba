"""The learner's JupyterLab launcher (grader/lab.py) and what the notebooks store for it;
tests/test_browser.py drives the whole thing in a browser."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import course, lab

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(path for folder in ("notebooks", "solutions", "notebooks-zh", "solutions-zh")
                   for path in ROOT.glob(f"{folder}/*/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_notebooks_store_the_kernel_description_jupyterlab_would_write(path):
    """Anything less and JupyterLab fills it in on opening, marking the notebook modified."""
    stored = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    want = lab.kernel_metadata()
    assert stored["kernelspec"] == want["kernelspec"]
    assert {**stored["language_info"], "version": "any"} == {**want["language_info"], "version": "any"}


def test_the_launcher_sets_the_python_version_of_the_course_notebooks_and_nothing_else(tmp_path):
    source = ROOT / "notebooks" / "01_dot_product" / "01_dot_product.ipynb"
    nb = json.loads(source.read_text(encoding="utf-8"))
    nb["metadata"]["language_info"]["version"] = "3.11.0"
    old_text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"

    def put(unit: str, text: str) -> Path:
        path = tmp_path / unit / f"{unit}.ipynb"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    old = put("01_dot_product", old_text)
    current = put("02_softmax", json.dumps({**nb, "metadata": lab.kernel_metadata()}))
    broken = put("03_self_attention", "{ not json")
    foreign = put("04_scaling", json.dumps({**nb, "metadata": {"language_info": {"name": "julia", "version": "1.10"}}}))
    other = tmp_path / "my_notes.ipynb"  # not the course's: never touched
    other.write_text(old_text, encoding="utf-8")
    before = {p: p.read_bytes() for p in (current, broken, foreign, other)}

    assert lab.align_kernel_metadata(tmp_path) == [old]
    assert {p: p.read_bytes() for p in before} == before
    aligned = nbformat.read(old, as_version=4)
    assert aligned.metadata["language_info"]["version"] == sys.version.split()[0]
    assert aligned.cells == nbformat.read(source, as_version=4).cells
    assert lab.align_kernel_metadata(tmp_path) == []


@pytest.mark.parametrize("args, folder, rest", [
    ([], course.NOTEBOOKS, []),
    (["--port=8890"], course.NOTEBOOKS, ["--port=8890"]),
    (["--notebook-dir=work", "--no-browser"], "work", ["--no-browser"]),
    (["--notebook-dir", "work"], "work", []),
    (["--ServerApp.root_dir=work"], "work", []),
    (["zh"], course.EDITIONS["zh"].notebooks, []),
    (["zh", "--port=8890"], course.EDITIONS["zh"].notebooks, ["--port=8890"]),
    (["en", "--no-browser"], course.NOTEBOOKS, ["--no-browser"]),
])
def test_the_learner_names_the_folder_and_any_other_jupyterlab_option(args, folder, rest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chosen, others = lab.split_folder(args)
    assert chosen == (tmp_path / folder if isinstance(folder, str) else folder)
    assert others == rest


def test_the_assignment_list_shows_only_where_there_is_an_exchange(tmp_path):
    assert lab.config_path(tmp_path / "none") == [lab.SETTINGS / "alone", lab.SETTINGS / "learner"]
    assert lab.config_path(tmp_path) == [lab.SETTINGS / "learner"]
    hidden = json.loads((lab.SETTINGS / "alone" / "labconfig" / "page_config.json").read_text())
    assert hidden["disabledExtensions"]["@jupyter/nbgrader:assignment-list"]


def test_validate_runs_with_the_course_settings_from_any_folder(tmp_path):
    """nbgrader's Validate reads its settings as this does: from the server's folder and the
    Jupyter config path, on which the launcher puts lab/learner."""
    code = ("from nbgrader.apps import NbGrader\n"
            "app = NbGrader(); app.load_config_file()\n"
            "print(app.config.Execute.timeout)\n")
    course = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(lab.SETTINGS / "learner")}
    learner = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                             check=True)
    assert learner.stdout == course.stdout and learner.stdout.strip().isdigit()
    assert "No nbgrader_config.py" not in learner.stderr


def test_course_lab_passes_a_bad_folder_to_the_learner_as_a_message(tmp_path):
    done = subprocess.run([sys.executable, "-m", "grader.lab", f"--notebook-dir={tmp_path / 'missing'}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "is not a folder" in done.stderr
