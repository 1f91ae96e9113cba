"""The learner's path runs on any system: the launcher, the self-checks and a unit's notebook,
with every text file read and written as UTF-8 explicitly (Python's -X warn_default_encoding, as a
Windows machine set to Chinese would read GBK otherwise) and without the POSIX-only modules
fcntl, resource and pwd (absent on Windows)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

from tests.reference import answers, fill_answers

# Loaded by every Python process below (the kernel included) through PYTHONPATH: the POSIX-only
# modules cannot be imported, and an EncodingWarning raised by the course's code (its packages,
# and the notebook's own cells in __main__) is an error. Other libraries' warnings are theirs.
SITECUSTOMIZE = '''
import sys
import warnings

for name in ("fcntl", "resource", "pwd"):
    sys.modules[name] = None
warnings.filterwarnings("ignore", category=EncodingWarning)
warnings.filterwarnings("error", category=EncodingWarning, module=r"(grader|attention_course|__main__)(\\..*)?$")
'''


def _environment(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("NBGRADER_EXECUTION", "COURSE_LANG")}
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), env.get("PYTHONPATH")]))   # a second clone's too
    return {**env, "PYTHONPATH": path, "PYTHONWARNDEFAULTENCODING": "1"}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          encoding="utf-8", timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "EncodingWarning" not in done.stderr and "ImportError" not in done.stderr, done.stderr[-3000:]
    return done


def test_the_blocking_works(tmp_path):
    env = _environment(tmp_path)
    code = ("import warnings, importlib\n"
            "try:\n    import fcntl\nexcept ImportError:\n    print('blocked')\n"
            "open('x.txt', 'w').close()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "blocked" in done.stdout and "EncodingWarning" in done.stderr and done.returncode != 0


def test_the_launcher_the_self_checks_and_unit_01_run_without_posix_modules_or_default_encodings(tmp_path):
    env = _environment(tmp_path)
    _run(["-m", "attention_course", "copy", "zh", "--dir", "work"], tmp_path, env)
    _run(["-m", "attention_course", "copy", "--dir", "work"], tmp_path, env)
    done = _run(["-c", "from attention_course import lab\n"
                       "print(lab.config_path(lab.exchange_root()), lab.server_settings('zh'))\n"
                       "import jupyterlab.labapp\n"], tmp_path, env)
    assert "app_settings_dir" in done.stdout

    checks = ("from grader.selfcheck import check\n"
              "from grader.spec import CheckFailed\n"
              "check('dot_product', {'dot_product': lambda a, b: (a * b).sum()})\n"
              "try:\n    check('similarity_matrix', {'similarity_matrix': lambda x: x})\n"
              "except CheckFailed as e:\n    print('named:', e)\n"
              "from grader.i18n import use_language\nuse_language('zh')\n"
              "check('dot_product', {'dot_product': lambda a, b: (a * b).sum()})\n"
              "from grader.progress import progress\nprogress()\n")
    done = _run(["-c", checks], tmp_path / "work" / "01_dot_product", env)
    assert "\u2713 dot_product" in done.stdout and "named:" in done.stdout and "\u2717 similarity_matrix" in done.stdout
    _run(["-m", "attention_course", "progress", "--dir", "work"], tmp_path, env)

    path = tmp_path / "work" / "01_dot_product" / "01_dot_product.ipynb"
    nbformat.write(fill_answers(nbformat.read(path, as_version=4), "01_dot_product"), path)
    _run(["-m", "nbconvert", "--to", "notebook", "--execute", "--inplace", path.name], path.parent, env)
    ran = nbformat.read(path, as_version=4)
    errors = [o for c in ran.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    checks = [c for c in ran.cells if c.cell_type == "code" and "check(" in c.source]
    assert len(checks) == len(answers("01_dot_product"))
    assert all("\u2713" in "".join(o.get("text", "") for o in c.outputs) for c in checks)
