"""The learner's JupyterLab in a real browser: `python -m attention_course lab` (what `./course lab` runs)
on a copy of notebooks/, driven by Playwright in the system's Chromium (never a downloaded one).

A failing step leaves a screenshot in test-artifacts/. `UPDATE_SCREENSHOTS=1 pytest
tests/test_browser.py` also refreshes the README's picture of a self-check naming a mistake.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from catalogue.verdicts import catalogued_message
from helpers import keep_picture

from grader.fixtures import exercises

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
README_PICTURE = ROOT / "docs" / "self-check-mistake.png"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
UNITS = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir())

playwright = pytest.importorskip("playwright.sync_api",
                                 reason="the browser test needs Playwright: pip install -e '.[test]'")
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium); the "
                                                "browser test drives the system's Chromium and never downloads one"),
    pytest.mark.xdist_group("end-to-end"),
]

RIGHT = "def dot_product(a, b):\n    return (a * b).sum()"
COSINE = "def dot_product(a, b):\n    return (a * b).sum() / (a.norm() * b.norm())"
GRADER_INSIDES = ("Traceback", "selfcheck.py", "grader/", "decode(")


@dataclass
class Lab:
    url: str
    token: str
    log: Path

    def get(self, path: str) -> int:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    def terminal(self, command: str, until: str) -> str:
        """What a new terminal of the lab shows after `command` runs, up to `until` (its REST
        API and websocket, as JupyterLab's Terminal uses them)."""
        import websocket

        request = urllib.request.Request(self.url + "/api/terminals", method="POST",
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            name = json.load(response)["name"]
        socket = websocket.create_connection(
            f"ws{self.url.removeprefix('http')}/terminals/websocket/{name}?token={self.token}", timeout=60)
        try:
            socket.send(json.dumps(["stdin", command + "\r"]))
            shown = ""
            while until not in shown:
                kind, *content = json.loads(socket.recv())
                shown += content[0] if kind == "stdout" else ""
            return shown
        finally:
            socket.close()
            request = urllib.request.Request(f"{self.url}/api/terminals/{name}", method="DELETE",
                                             headers={"Authorization": f"token {self.token}"})
            urllib.request.urlopen(request, timeout=10).close()

    def problems(self) -> list[str]:
        """ERROR and CRITICAL lines of the server's log, and nbgrader's warning that it runs
        without the course's settings. One known race of jupyter_server is left out: a kernel's
        websocket that the page closes while the server opens it (moving on to the next notebook
        on a busy machine) logs an AttributeError on `kernel_ws_protocol`, its request's headers
        and a 500 (jupyter_server#1265); nothing is lost by it."""
        problems, race = [], None
        for entry in re.split(r"\n(?=\[)", self.log.read_text(errors="replace")):
            first = entry.splitlines()[0] if entry else ""
            if "kernel_ws_protocol" in entry and "/channels" in first:
                race = first.split(" GET ", 1)[-1].split()[0]
                continue
            if race and (race in first or first.rstrip().endswith("] {")):
                continue
            if re.match(r"\[[EC] ", first) or "No nbgrader_config.py file found" in entry:
                problems.append(first)
        return problems


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start_lab(tmp: Path, exchange: Path, course: bool = True, language: str = "en",
              every_cell: bool = False) -> Iterator[Lab]:
    """JupyterLab as a learner starts it, on a copy of the notebooks of the edition in `language`
    (an empty folder without `course`), with its own Jupyter folders (nothing from this machine's
    user settings) and nbgrader's exchange at `exchange`. With `every_cell`, notebooks render all
    their cells at once (JupyterLab otherwise renders those near the view), for checks of the whole."""
    folder, config = tmp / "notebooks", tmp / "config"
    if every_cell:
        tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
        tracker.parent.mkdir(parents=True)
        tracker.write_text(json.dumps({"windowingMode": "none"}))
    if course:
        shutil.copytree(ROOT / ("notebooks" if language == "en" else f"notebooks-{language}"), folder)
    folder.mkdir(exist_ok=True)
    config.mkdir()
    (config / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\n")
    learner = {k: v for k, v in os.environ.items() if k not in ("NBGRADER_EXECUTION", "COURSE_LANG")}
    # The environment not activated: its scripts folder (attention-course's) is not on PATH.
    learner["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                      if p != sysconfig.get_path("scripts"))
    env = {**learner, "JUPYTER_CONFIG_PATH": str(config), "JUPYTER_CONFIG_DIR": str(tmp / "user-config"),
           "JUPYTER_DATA_DIR": str(tmp / "data"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
           "IPYTHONDIR": str(tmp / "ipython")}
    port, token, log = _free_port(), secrets.token_hex(16), tmp / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "attention_course", "lab", language, f"--notebook-dir={folder}", "--no-browser",
             f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}"],
            cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
    lab = Lab(f"http://127.0.0.1:{port}", token, log)
    try:
        deadline = time.monotonic() + 90
        while lab_status(lab) != 200:
            assert server.poll() is None, f"JupyterLab stopped:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"JupyterLab did not answer in 90 s:\n{log.read_text()}"
            time.sleep(0.3)
        yield lab
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def lab_status(lab: Lab) -> int | None:
    try:
        return lab.get("/api/status")
    except OSError:
        return None


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@contextlib.contextmanager
def screenshot_on_failure(page, name: str) -> Iterator[None]:
    try:
        yield
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=ARTIFACTS / f"{name}.png")
        print(f"screenshot of the failure: {ARTIFACTS / f'{name}.png'}")
        raise


def wait_idle(page) -> None:
    """Until the kernel of the notebook in front is idle and no cell waits to run ("[*]"). The
    kernel reports busy only once it takes the first cell, which on a busy machine can come after
    JupyterLab has queued them all: the indicator alone would say idle too early."""
    time.sleep(0.3)
    page.wait_for_function("""() => {
        const panel = document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden)");
        if (!panel || !panel.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")) return false;
        return ![...panel.querySelectorAll(".jp-InputPrompt")].some(p => p.textContent.includes("[*]"));
    }""", timeout=120_000)


def open_notebook(page, lab: Lab, unit: str) -> None:
    page.goto(f"{lab.url}/lab/tree/{unit}/{unit}.ipynb?token={lab.token}&reset")
    wait_idle(page)
    time.sleep(1)  # the kernel's description arrives with its first reply; let JupyterLab store it


def current_tab_is_modified(page) -> bool:
    return "jp-mod-dirty" in (page.locator(".lm-TabBar-tab.jp-mod-current").first.get_attribute("class") or "")


def run_menu(page, item: str) -> None:
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel").get_by_text(item, exact=True).click()


_CELLS_STARTED = """() => [...document.querySelectorAll(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-InputPrompt")]
    .some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"""


def run_all_cells(page) -> None:
    """Run ▸ Run All Cells, until the kernel has taken its first cell ("[*]" or a number in a
    prompt). On a busy machine a click can land while the menu is still opening and be lost, with
    nothing queued; then the menu is used once more (a second Run All would only run again)."""
    for attempt in range(2):
        run_menu(page, "Run All Cells")
        try:
            page.wait_for_function(_CELLS_STARTED, timeout=30_000)
            return
        except playwright.Error:
            if attempt:
                raise


def type_answer(page, code: str) -> None:
    """Replace the first exercise's answer with `code`, then run it and its self-check."""
    page.locator(".jp-CodeCell", has_text="def dot_product(").locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    page.keyboard.press("Shift+Enter")  # runs the answer, moves to the self-check
    wait_idle(page)
    page.keyboard.press("Shift+Enter")
    wait_idle(page)


def type_without_running(page, code: str) -> None:
    """The most common slip: type the answer, then run only the self-check below it."""
    page.locator(".jp-CodeCell", has_text="def dot_product(").locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    page.locator(".jp-CodeCell", has_text='check("dot_product")').locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")
    wait_idle(page)


def self_check_output(page) -> str:
    return "\n".join(page.locator(".jp-CodeCell", has_text='check("dot_product")')
                     .locator(".jp-OutputArea-output").all_text_contents())


def test_a_learner_alone_works_through_unit_01_and_opens_every_unit(browser, tmp_path):
    cosine_message = catalogued_message("01_dot_product", "dot product normalised into a cosine")
    with start_lab(tmp_path, exchange=tmp_path / "no-exchange") as lab:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        with screenshot_on_failure(page, "learner"):
            # No instructor tool and, with no exchange, no Assignment List: neither in the
            # menus nor on the server. Validate is there.
            open_notebook(page, lab, UNITS[0])
            menus = page.locator(".lm-MenuBar-item").all_inner_texts()
            assert "Run" in menus and "Nbgrader" not in menus, menus
            for path in ("/formgrader", "/formgrader/api/assignments", "/assignments", "/courses"):
                assert lab.get(path) == 404, f"{path} is reachable"
            validate = page.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True)
            assert validate.is_visible()

            # The first cell says that Run All stops at an unfinished exercise, and it does.
            # (expect waits: on a busy machine JupyterLab renders the cells a little at a time)
            playwright.expect(page.locator(".jp-MarkdownCell").first).to_contain_text(
                "Run All stops at an unfinished exercise", timeout=60_000)
            run_all_cells(page)
            wait_idle(page)
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            playwright.expect(errors).to_have_count(1, timeout=30_000)
            assert "NotImplementedError" in errors.first.text_content()
            assert page.locator(".jp-Dialog").count() == 0
            # JupyterLab leaves the learner at the last cell; the failed self-check brings itself
            # into view, so the stop is what the learner sees.
            playwright.expect(errors.first).to_be_in_viewport(timeout=10_000)
            # The figure above the first exercise says what it shows, to a screen reader: the
            # words and their coordinates, as the image's alt (grader.figures.show).
            figure = page.locator(".jp-OutputArea-output img").first
            playwright.expect(figure).to_have_attribute(
                "alt", re.compile(r"^Figure\. The sentence as six arrows in 3-D: .*journey at \(0\.55, 0\.87, 0\.66\)"))

            # An answer typed but not run: the check says to run that cell.
            type_without_running(page, RIGHT)
            assert "run that cell" in self_check_output(page), self_check_output(page)

            type_answer(page, RIGHT)
            assert "\u2713 dot_product: right" in self_check_output(page)

            type_answer(page, COSINE)
            shown = self_check_output(page)
            assert f"CheckFailed: dot_product: {cosine_message}" in shown, shown     # the verdict first
            assert f"Progress: unit 01 0 of {len(exercises()['01_dot_product'])} exercises pass" in shown, shown
            assert not any(inside in shown for inside in GRADER_INSIDES), shown
            # The lab's terminal, whose server's output is not a terminal (a login shell unless the
            # course's settings say otherwise), finds `attention-course`, and `progress` there
            # reads the record the self-checks just kept.
            scripts = sysconfig.get_path("scripts")
            shown = lab.terminal("command -v attention-course; attention-course progress; echo END-$((6 * 7))",
                                 until="END-42")
            assert os.path.join(scripts, "attention-course") in shown, shown
            assert f"\u2717 dot_product: {cosine_message}" in shown, shown
            picture = page.locator(".jp-CodeCell", has_text='check("dot_product")')
            ARTIFACTS.mkdir(exist_ok=True)
            picture.screenshot(path=ARTIFACTS / "self-check-mistake.png")
            if os.environ.get("UPDATE_SCREENSHOTS"):
                keep_picture(ARTIFACTS / "self-check-mistake.png", README_PICTURE, shows=cosine_message)

            validate.click()
            dialog = page.locator(".jp-Dialog", has_text="The following cell failed")
            dialog.wait_for(timeout=120_000)
            report = dialog.inner_text()
            assert cosine_message in report and "not written yet" in report, report
            # Each message wraps inside the dialog: nothing to scroll sideways for.
            overflow = dialog.locator("pre").evaluate_all("els => els.map(e => e.scrollWidth - e.clientWidth)")
            assert overflow and max(overflow) <= 1, overflow
            assert not any(inside in report for inside in GRADER_INSIDES), report
            page.keyboard.press("Escape")
            dialog.wait_for(state="detached")

            # Every unit opens unmodified, with no dialog, and closes without asking to save.
            for unit in UNITS[1:]:
                open_notebook(page, lab, unit)
                assert page.locator(".jp-Dialog").count() == 0, f"{unit}: a dialog opened"
                assert not current_tab_is_modified(page), f"{unit} opens as modified"
                page.locator(".lm-TabBar-tab.jp-mod-current .lm-TabBar-tabCloseIcon").first.click()
                time.sleep(0.5)
                assert page.locator(".jp-Dialog").count() == 0, f"closing the untouched {unit} asks something"

            # Unit 08's configuration is given code: read-only.
            open_notebook(page, lab, "08_tiny_gpt")
            config = page.locator(".jp-CodeCell", has_text="class GPTConfig:").locator(".cm-content")
            before = config.text_content()
            config.click()
            page.keyboard.insert_text("oops")
            assert config.text_content() == before, "GPTConfig can be edited"
        assert lab.problems() == []


def test_with_an_exchange_the_assignment_list_fetches_a_released_unit(browser, tmp_path):
    """As on a JupyterHub set up for a class: the instructor released unit 01 to the exchange."""
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    released = exchange / "attention-course" / "outbound" / UNITS[0]
    shutil.copytree(ROOT / "notebooks" / UNITS[0], released)
    with start_lab(tmp_path, exchange=exchange, course=False) as lab:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        with screenshot_on_failure(page, "assignment-list"):
            page.goto(f"{lab.url}/lab?token={lab.token}&reset")
            page.locator(".lm-MenuBar-item", has_text="Nbgrader").click()
            page.locator(".lm-Menu-itemLabel").get_by_text("Assignment List", exact=True).click()
            released_row = page.locator("#released_assignments_list", has_text=UNITS[0])
            released_row.wait_for(timeout=30_000)
            released_row.get_by_text("Fetch", exact=True).click()
            page.locator("#fetched_assignments_list", has_text=UNITS[0]).wait_for(timeout=30_000)
            assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").all_inner_texts()
            fetched = tmp_path / "notebooks" / UNITS[0] / f"{UNITS[0]}.ipynb"
            assert fetched.exists()
        assert lab.problems() == []


def test_the_chinese_edition_opens_in_a_chinese_jupyterlab(browser, tmp_path):
    """`./course lab zh`: JupyterLab's menus in Chinese (the zh-CN language pack, chosen by the
    course's settings), as the Chinese notebooks quote them."""
    with start_lab(tmp_path, exchange=tmp_path / "no-exchange", language="zh") as lab:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        with screenshot_on_failure(page, "chinese-lab"):
            open_notebook(page, lab, UNITS[0])
            page.locator(".lm-MenuBar-item", has_text="运行").first.wait_for(timeout=30_000)
            menus = page.locator(".lm-MenuBar-item").all_inner_texts()
            assert "运行" in menus and "Run" not in menus, menus       # 运行
            intro = page.locator(".jp-MarkdownCell").first.text_content()
            page.locator(".lm-MenuBar-item", has_text="运行").first.click()
            items = page.locator(".lm-Menu-itemLabel").all_inner_texts()
            for quoted in ("运行所有单元格", "运行选中的单元格及以下所有"):
                assert quoted in items and quoted in intro, (quoted, items)
        assert lab.problems() == []
