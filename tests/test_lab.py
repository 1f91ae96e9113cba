"""The learner's JupyterLab launcher (attention_course: the working folder, the lab's settings)
and what the notebooks store for it; tests/test_browser.py drives the whole thing in a browser."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

from attention_course import cli, content, lab, workspace
from grader import course

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(path for folder in ("notebooks", "solutions", "notebooks-zh", "solutions-zh")
                   for path in ROOT.glob(f"{folder}/*/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_notebooks_store_the_kernel_description_jupyterlab_would_write(path):
    """Anything less and JupyterLab fills it in on opening, marking the notebook modified."""
    stored = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    want = workspace.kernel_metadata()
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
    current = put("02_softmax", json.dumps({**nb, "metadata": workspace.kernel_metadata()}))
    broken = put("03_self_attention", "{ not json")
    foreign = put("04_scaling", json.dumps({**nb, "metadata": {"language_info": {"name": "julia", "version": "1.10"}}}))
    other = tmp_path / "my_notes.ipynb"  # not the course's: never touched
    other.write_text(old_text, encoding="utf-8")
    before = {p: p.read_bytes() for p in (current, broken, foreign, other)}

    assert workspace.align_kernel_metadata(tmp_path) == [old]
    assert {p: p.read_bytes() for p in before} == before
    aligned = nbformat.read(old, as_version=4)
    assert aligned.metadata["language_info"]["version"] == sys.version.split()[0]
    assert aligned.cells == nbformat.read(source, as_version=4).cells
    assert workspace.align_kernel_metadata(tmp_path) == []


@pytest.mark.parametrize("args, folder, rest", [
    ([], None, []),
    (["--port=8890"], None, ["--port=8890"]),
    (["--notebook-dir=work", "--no-browser"], "work", ["--no-browser"]),
    (["--notebook-dir", "work"], "work", []),
    (["--ServerApp.root_dir=work"], "work", []),
    (["zh", "--port=8890"], None, ["zh", "--port=8890"]),
])
def test_a_folder_named_with_jupyterlabs_own_option_is_served_as_it_is(args, folder, rest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chosen, others = lab.split_folder(args)
    assert chosen == (tmp_path / folder if folder else None)
    assert others == rest


@pytest.mark.parametrize("argv, language, folder, options", [
    (["lab"], "en", None, []),
    (["lab", "zh", "--port", "8890"], "zh", None, ["--port", "8890"]),
    (["lab", "--port", "8890", "--no-browser"], "en", None, ["--port", "8890", "--no-browser"]),
    (["lab", "zh", "--dir", "work", "--port=8890"], "zh", "work", ["--port=8890"]),
    (["copy", "en", "--dir", "work"], "en", "work", []),
    (["progress"], None, None, []),
    (["progress", "zh", "--dir", "work"], "zh", "work", []),
])
def test_the_launcher_takes_an_edition_its_folder_and_jupyterlabs_options(argv, language, folder, options):
    args, chosen, served, rest = cli.parse(argv)
    assert (chosen, args.dir, served, rest) == (language, Path(folder) if folder else None, None, options)


def test_copy_refuses_jupyterlabs_options(capsys):
    with pytest.raises(SystemExit):
        cli.parse(["copy", "--port", "8890"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_in_a_clone_the_learner_works_in_the_repositorys_notebooks():
    assert content.is_repository()
    assert workspace.default_folder("en") == ROOT / "notebooks"
    assert workspace.default_folder("zh") == ROOT / "notebooks-zh"
    assert workspace.prepare("en", None) == ROOT / "notebooks"


def test_the_copy_never_overwrites_the_learners_work(tmp_path):
    release, mine = tmp_path / "release", tmp_path / "mine"
    for unit in ("01_dot_product", "02_softmax"):
        (release / unit).mkdir(parents=True)
        shutil.copy(ROOT / "notebooks" / unit / f"{unit}.ipynb", release / unit)
    first = workspace.copy_notebooks(release, mine)
    assert first.new == ["01_dot_product/01_dot_product.ipynb", "02_softmax/02_softmax.ipynb"]
    assert workspace.copy_notebooks(release, mine).new == []            # nothing new: nothing to do

    worked = mine / "01_dot_product" / "01_dot_product.ipynb"
    worked.write_text(worked.read_text(encoding="utf-8").replace("# YOUR CODE HERE", "# mine"), encoding="utf-8")
    for unit in ("01_dot_product", "02_softmax"):                           # a newer release of both
        path = release / unit / f"{unit}.ipynb"
        path.write_text(path.read_text(encoding="utf-8").replace("Unit 0", "Unit #0"), encoding="utf-8")
    second = workspace.copy_notebooks(release, mine)
    assert second.updated == ["02_softmax/02_softmax.ipynb"]               # untouched: brought up to date
    assert second.beside == ["01_dot_product/01_dot_product.new.ipynb"]    # the learner's: the release beside it
    assert "# mine" in worked.read_text(encoding="utf-8")
    assert "Unit #0" in (mine / "01_dot_product" / "01_dot_product.new.ipynb").read_text(encoding="utf-8")
    assert any("untouched" in line for line in second.lines())

    beside = mine / "01_dot_product" / "01_dot_product.new.ipynb"
    beside.write_text(beside.read_text(encoding="utf-8") + " ", encoding="utf-8")  # the learner edits that too
    path = release / "01_dot_product" / "01_dot_product.ipynb"
    path.write_text(path.read_text(encoding="utf-8").replace("Unit #0", "Unit ##0"), encoding="utf-8")
    third = workspace.copy_notebooks(release, mine)
    assert third.kept == ["01_dot_product/01_dot_product.ipynb"] and third.beside == []
    assert beside.read_text(encoding="utf-8").endswith(" ") and "# mine" in worked.read_text(encoding="utf-8")


def test_the_launcher_copies_an_edition_into_the_folder_named(tmp_path, capsys):
    assert cli.main(["copy", "zh", "--dir", str(tmp_path / "work")]) == 0
    copied = sorted(p.relative_to(tmp_path / "work").as_posix() for p in (tmp_path / "work").glob("*/*.ipynb"))
    assert copied == [f"{u}/{u}.ipynb" for u in course.units()]
    copy = json.loads((tmp_path / "work" / "01_dot_product" / "01_dot_product.ipynb").read_text(encoding="utf-8"))
    assert copy["metadata"]["language"] == "zh"
    # the Chinese edition speaks Chinese
    assert f"course: 已把 {len(course.units())} 个笔记本复制到" in capsys.readouterr().out
    assert cli.main(["copy", "--dir", str(tmp_path / "work-en")]) == 0
    assert f"course: {len(course.units())} notebooks copied into" in capsys.readouterr().out


def test_the_assignment_list_shows_only_where_there_is_an_exchange(tmp_path):
    settings = content.lab_settings()
    assert lab.config_path(tmp_path / "none") == [settings / "alone", settings / "learner"]
    assert lab.config_path(tmp_path) == [settings / "learner"]
    hidden = json.loads((settings / "alone" / "labconfig" / "page_config.json").read_text())
    assert hidden["disabledExtensions"]["@jupyter/nbgrader:assignment-list"]


def test_the_lab_wraps_dialog_messages_and_speaks_chinese_for_the_chinese_edition():
    """What the browser test sees, as the launcher sets it: the learner's config loads custom CSS,
    served from the course's folder, that wraps dialogs' <pre>; the Chinese edition's default
    settings make zh_CN JupyterLab's language, from a language pack that is installed."""
    settings = content.lab_settings()
    server = json.loads((settings / "learner" / "jupyter_server_config.json").read_text(encoding="utf-8"))
    assert server["LabApp"]["custom_css"] is True
    options, made_with = lab.server_settings("en")
    assert options == [] and made_with["static_custom_path"][0] == str(settings / "learner" / "custom")
    css = (settings / "learner" / "custom" / "custom.css").read_text(encoding="utf-8")
    assert ".jp-Dialog pre" in css and "pre-wrap" in css
    options, _ = lab.server_settings("zh")
    assert options == [f"--LabApp.app_settings_dir={settings / 'zh'}"]
    overrides = json.loads((settings / "zh" / "overrides.json").read_text(encoding="utf-8"))
    assert overrides["@jupyterlab/translation-extension:plugin"]["locale"] == "zh_CN"
    from importlib.metadata import entry_points
    assert "zh_CN" in {e.name for e in entry_points(group="jupyterlab.languagepack")}


def test_validate_runs_with_the_course_settings_from_any_folder(tmp_path):
    """nbgrader's Validate reads its settings as this does: from the server's folder and the
    Jupyter config path, on which the launcher puts lab/learner."""
    code = ("from nbgrader.apps import NbGrader\n"
            "app = NbGrader(); app.load_config_file()\n"
            "print(app.config.Execute.timeout)\n")
    course = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(content.lab_settings() / "learner")}
    learner = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                             check=True)
    assert learner.stdout == course.stdout and learner.stdout.strip().isdigit()
    assert "No nbgrader_config.py" not in learner.stderr


def test_course_lab_passes_a_bad_folder_to_the_learner_as_a_message(tmp_path):
    done = subprocess.run([sys.executable, "-m", "attention_course", "lab", f"--notebook-dir={tmp_path / 'missing'}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "is not a folder" in done.stderr


def test_the_lab_puts_its_environments_scripts_first_on_path():
    """Where `attention-course` is, when the lab was started without activating its environment
    (course-env/bin/attention-course lab): its terminals and notebooks find the course's commands."""
    scripts = sysconfig.get_path("scripts")
    assert lab.scripts_first(os.pathsep.join(["/usr/bin", scripts, "", "/bin"])) == \
        os.pathsep.join([scripts, "/usr/bin", "/bin"])
    assert lab.scripts_first("") == scripts


def test_the_launcher_starts_the_server_with_that_path_and_speaks_the_editions_language(tmp_path, monkeypatch, capsys):
    from jupyterlab.labapp import LabApp

    scripts = sysconfig.get_path("scripts")
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", "/bin"]))   # the environment not activated
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    monkeypatch.chdir(tmp_path)                                          # the launcher moves into the folder
    started = {}

    class Server:
        def start(self):
            started["PATH"] = os.environ["PATH"]

    def initialize_server(cls, argv, **made_with):
        started["argv"] = argv
        return Server()

    monkeypatch.setattr(LabApp, "initialize_server", classmethod(initialize_server))
    assert cli.main(["lab", "zh", "--dir", str(tmp_path / "work"), "--no-browser"]) == 0
    assert started["PATH"].split(os.pathsep) == [scripts, "/usr/bin", "/bin"]
    assert f"--notebook-dir={tmp_path / 'work'}" in started["argv"] and "--no-browser" in started["argv"]
    said = capsys.readouterr().out
    assert "course: 正在启动 JupyterLab（按 Ctrl+C 停止）" in said and "starting" not in said, said


def test_the_lab_terminal_is_the_learners_shell_not_a_login_shell(monkeypatch):
    """A login shell reads the system's profile, which on Debian sets PATH anew; jupyter_server_terminals
    starts one whenever the server's output is not a terminal, unless lab/learner names the shell."""
    from traitlets.config.loader import PyFileConfigLoader

    monkeypatch.setenv("SHELL", "/bin/bash")
    config = PyFileConfigLoader("jupyter_server_config.py", path=str(content.lab_settings() / "learner")).load_config()
    assert config.ServerApp.terminado_settings == {"shell_command": ["/bin/bash"]}
