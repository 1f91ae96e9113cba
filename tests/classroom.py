"""A class on this machine for the tests: an exchange, an instructor and learners made by
`python -m grader hub add` (real Unix accounts), and, on request, the hub itself.

With `clone=True` the class runs from a copy of the course, as an instructor's clone in /opt
would be, which the hub then closes to learners (this checkout stays as it is). The hub's first
start then makes the learners' environment from nothing, as on an instructor's machine, but
from a package index on this machine made of the suite's own packages (tests/package_index.py),
so that nothing is downloaded; PyTorch's own index does not answer there, as on a machine that
can reach one package index only."""
from __future__ import annotations

import grp
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import accounts
import package_index
from helpers import NOT_CLONED

from grader.classroom import hub

UNIT = "01_dot_product"


@dataclass
class Classroom:
    state: Path
    instructors: list[accounts.Account]   # the teaching team
    learners: list[accounts.Account]
    clone: Path    # the course the class runs from (this checkout, or a copy of it)
    tag: str       # in every account's name
    package_index: str | None = None   # with a clone: where the hub's pip finds packages

    @property
    def instructor(self) -> accounts.Account:
        """The first instructor."""
        return self.instructors[0]

    def join(self, instructor: bool) -> accounts.Account:
        """One more account, made by `hub add` now (while the hub runs, if it does)."""
        kind, people = ("teach", self.instructors) if instructor else ("learner", self.learners)
        [account] = _add([f"{kind}{self.tag}x{len(people)}"], self.state, instructor, self.clone)
        people.append(account)
        return account

    @property
    def course(self) -> Path:
        return self.instructor.home / hub.COURSE_FOLDER

    @property
    def exchange(self) -> Path:
        return hub.exchange(self.state)

    def instructor_runs(self, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
        """`python ARGS` as the instructor, in their course folder."""
        return self.instructor.run(sys.executable, *args, cwd=self.course, timeout=timeout)

    def in_terminal(self, learner: accounts.Account, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        """`python ARGS` as a learner, in a terminal of their server on the hub (its environment)."""
        return learner.run(sys.executable, *args, timeout=timeout, env=hub.server_environment(learner.name, self.state))

    def learner_notebook(self, learner: accounts.Account) -> Path:
        return learner.home / UNIT / f"{UNIT}.ipynb"

    def give(self, learner: accounts.Account, path: Path, data: str) -> None:
        """Write `path` in a learner's home as theirs."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data, encoding="utf-8")
        for made in (path.parent, path):
            shutil.chown(made, learner.name, learner.name)


def why_not() -> str | None:
    """Why no class can be made here (None: it can)."""
    reason = accounts.why_not()
    if reason:
        return reason
    prefix, how = accounts.view()
    return how if prefix is None else None


def _add(names: list[str], state: Path, instructor: bool, clone: Path) -> list[accounts.Account]:
    prefix, _ = accounts.view()
    made = subprocess.run([*prefix, sys.executable, "-m", "grader", "hub", "add", *names, "--state", str(state),
                           *(["--instructor"] if instructor else [])], capture_output=True, text=True, check=True,
                          cwd=clone)   # python -m grader, from the clone's folder: the clone's grader
    passwords = {line.split("\t")[0]: line.split("\t")[2].removeprefix("password ")
                 for line in made.stdout.splitlines() if line.count("\t") == 2}
    return [accounts.Account(name, passwords[name], Path(pwd.getpwnam(name).pw_dir)) for name in names]


def _copy_course(top: Path) -> Path:
    """A copy of this checkout's course, as `git clone` would leave it (no .venv, no build)."""
    clone = top / "attention-course"
    shutil.copytree(accounts.ROOT, clone, ignore=NOT_CLONED)
    return clone


@contextmanager
def classroom(learners: int, clone: bool = False) -> Iterator[Classroom]:
    """An exchange, an instructor with the team's course folder and `learners` learners (more join
    with `Classroom.join`); all removed after. clone: the class runs from a copy of the course, with
    a learners' environment for the hub."""
    groups_before = {g.gr_name for g in grp.getgrall()}
    top = Path(tempfile.mkdtemp(prefix="course-class-", dir="/tmp"))
    top.chmod(0o755)
    state = top / "state"
    state.mkdir(mode=0o755)
    room = Classroom(state, [], [], accounts.ROOT, secrets.token_hex(2))
    try:
        with ExitStack() as serving:
            if clone:
                room.clone = _copy_course(top)
                # what the learners' environment needs, and setuptools, with which pip builds the course
                simple = package_index.build(["attention-course[lab,hub]", "setuptools"], top / "index",
                                             leave_out=["attention-course"])
                room.package_index = serving.enter_context(package_index.serving(simple))
            room.join(instructor=True)
            room.learners += _add([f"learner{room.tag}x{k}" for k in range(learners)], state, False, room.clone)
            yield room
    finally:
        for account in room.instructors + room.learners:
            accounts.remove(account)
        for group in (hub.LEARNERS, hub.INSTRUCTORS):
            if group not in groups_before:
                subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


def _free_ports(count: int) -> int:
    """A port P such that P ... P+count-1 are free now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            start = probe.getsockname()[1]
        if start + count < 65536 and all(_free(start + k) for k in range(count)):
            return start
    raise RuntimeError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (browsers are told to accept it)."""
    cert, key = folder / "hub-cert.pem", folder / "hub-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


@contextmanager
def running_hub(room: Classroom, timeout: float = 300, language: str | None = None) -> Iterator[str]:
    """`python -m grader hub [language]` on free ports, over HTTPS as a class's hub must be
    (JupyterHub tells a WebSocket by a header browsers send over HTTPS only): its URL while it runs."""
    port = _free_ports(3)   # the hub's public port, its API and the proxy's API
    prefix, _ = accounts.view()
    environment = dict(os.environ)
    if room.package_index:
        if not hub.learners_python(room.state).exists():
            timeout += 900   # the first start makes the learners' environment (minutes on a busy machine)
        # pip reads this index only: no configuration file, no other index or folder of wheels;
        # the hub asks for PyTorch's CPU index (even beside a GPU), where nothing answers
        environment = {key: value for key, value in environment.items() if not key.startswith("PIP_")}
        environment.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=room.package_index,
                           COURSE_TORCH_INDEX=f"http://127.0.0.1:{_free_ports(1)}/whl/cpu", COURSE_TORCH="cpu")
    log = room.state / "hub.log"
    cert, key = _certificate(room.state)
    with open(log, "wb") as out:
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "grader", "hub", *([language] if language else []),
                                 "--port", str(port), "--ip",
                                 "127.0.0.1", "--state", str(room.state), "--ssl-cert", str(cert),
                                 "--ssl-key", str(key)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=room.clone,
                                env=environment)
    url = f"https://127.0.0.1:{port}"
    trusting = ssl.create_default_context(cafile=str(cert))   # this certificate, as the browsers are told
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/hub/login", timeout=5, context=trusting) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        try:
            yield url
        except BaseException:   # what the hub saw goes with the failure: the state folder goes with the class
            lines = [line for line in log.read_text(errors="replace").splitlines()
                     if not re.search(r"\] (200|204|301|302) (GET|PUT|POST|DELETE|HEAD) ", line)]
            print("the hub's log, but for answered requests:", *lines[-80:], sep="\n", file=sys.stderr)
            raise
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# A terminal of a user's server, opened from their browser page as JupyterLab opens one: a new
# terminal over the server's REST API, then its WebSocket with the token JupyterLab's page holds
# (the hub refuses a WebSocket with only a cookie), in terminado's protocol: ["stdin", text] in,
# ["stdout", text] out. What the command printed lies between two lines the shell computes, so the
# echo of the typed line is not taken for them.
_TERMINAL = """async ([base, command, seconds]) => {
  const xsrf = decodeURIComponent((document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || "");
  const made = await fetch(`${base}/api/terminals`, {method: "POST", credentials: "same-origin",
                                                     headers: {"X-XSRFToken": xsrf}});
  if (!made.ok) throw new Error(`no terminal: ${made.status} ${await made.text()}`);
  const name = (await made.json()).name;
  let config = document.getElementById("jupyter-config-data")?.textContent;
  if (!config || !location.pathname.startsWith(base + "/")) {   // not JupyterLab's page: read it
    const lab = await (await fetch(`${base}/lab`, {credentials: "same-origin", headers: {"X-XSRFToken": xsrf}})).text();
    config = new DOMParser().parseFromString(lab, "text/html").getElementById("jupyter-config-data").textContent;
  }
  const token = encodeURIComponent(JSON.parse(config).token || "");
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}${base}/terminals/websocket/${name}?token=${token}`);
  let text = "";
  const marks = /__start_42__([\\s\\S]*?)__done_42_(\\d+)__/;
  const found = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no end after ${seconds} s:\\n${text.slice(-3000)}`)),
                             seconds * 1000);
    socket.onopen = () => socket.send(JSON.stringify(["stdin",
        `stty cols 500; echo __start_$((6*7))__; ${command}; echo __done_$((6*7))_$?__\\r`]));
    socket.onmessage = (event) => {
      const [kind, data] = JSON.parse(event.data);
      if (kind !== "stdout") return;
      text += data;
      const match = text.match(marks);
      if (match) { clearTimeout(timer); resolve(match); }
    };
    socket.onerror = () => reject(new Error("the terminal's WebSocket failed"));
  });
  socket.close();
  await fetch(`${base}/api/terminals/${name}`, {method: "DELETE", credentials: "same-origin",
                                                headers: {"X-XSRFToken": xsrf}});
  return [Number(found[2]), found[1]];
}"""
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\r")


@dataclass(frozen=True)
class Typed:
    """What a command typed into a terminal printed, and its exit status."""
    status: int
    output: str


def in_browser_terminal(page, user: str, command: str, seconds: int = 120) -> Typed:
    """Type `command` into a new terminal of `user`'s server, from their logged-in browser page."""
    status, text = page.evaluate(_TERMINAL, [f"/user/{user}", command, seconds])
    return Typed(status, _ESCAPES.sub("", text))


# A kernel of a user's server, as JupyterLab runs one for a notebook at `path`: a session over the
# REST API (the kernel starts in the notebook's folder), then the kernel's WebSocket with the
# page's token, an execute_request in the Jupyter protocol, and what the cell printed until its
# reply. [true, printed] or [false, the server's refusal].
_KERNEL = """async ([base, path, code, seconds]) => {
  const xsrf = decodeURIComponent((document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || "");
  const headers = {"X-XSRFToken": xsrf, "Content-Type": "application/json"};
  const made = await fetch(`${base}/api/sessions`, {method: "POST", credentials: "same-origin", headers,
      body: JSON.stringify({path, name: path.split("/").pop(), type: "notebook", kernel: {name: "python3"}})});
  if (!made.ok) return [false, `${made.status} ${await made.text()}`];
  const session = await made.json();
  let config = document.getElementById("jupyter-config-data")?.textContent;
  if (!config || !location.pathname.startsWith(base + "/")) {   // not JupyterLab's page: read it
    const lab = await (await fetch(`${base}/lab`, {credentials: "same-origin"})).text();
    config = new DOMParser().parseFromString(lab, "text/html").getElementById("jupyter-config-data").textContent;
  }
  const token = encodeURIComponent(JSON.parse(config).token || "");
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}${base}/api/kernels/${session.kernel.id}/channels` +
                               `?token=${token}`);
  const id = crypto.randomUUID();
  let printed = "";
  const done = await new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), seconds * 1000);
    socket.onopen = () => socket.send(JSON.stringify({channel: "shell", buffers: [], metadata: {},
        parent_header: {}, header: {msg_id: id, msg_type: "execute_request", username: "", session: id,
                                    version: "5.3", date: new Date().toISOString()},
        content: {code, silent: false, store_history: true, user_expressions: {}, allow_stdin: false,
                  stop_on_error: true}}));
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.parent_header?.msg_id !== id) return;
      if (message.msg_type === "stream") printed += message.content.text;
      if (message.msg_type === "execute_reply") { clearTimeout(timer); resolve(true); }
    };
  });
  socket.close();
  await fetch(`${base}/api/sessions/${session.id}`, {method: "DELETE", credentials: "same-origin", headers});
  return [done, printed];
}"""


def in_browser_kernel(page, user: str, path: str, code: str, seconds: int = 120) -> tuple[bool, str]:
    """Run `code` in a kernel of `user`'s server for a notebook at `path` (relative to the server's
    root), from their logged-in browser page: whether it ran, and what it printed (or why not)."""
    ran, text = page.evaluate(_KERNEL, [f"/user/{user}", path, code, seconds])
    return bool(ran), text
