"""JupyterHub for one class on one machine: `./course hub`, run as root, starts it with these settings.

Who may log in: the machine's own Unix accounts (JupyterHub's PAM authenticator) in the class's
two groups, which `./course hub add` creates: learners in attention-learners, instructors in
attention-instructors. Each server runs as its owner (LocalProcessSpawner),
so the file permissions of the system keep one learner's work from another's and from the
instructor's; nbgrader's exchange is the one folder they share. Learners' servers run the
learners' environment (STATE/env: the course without its answers) and are set up as
`./course lab` sets up a learner's JupyterLab (instructor tools hidden; Validate and the
Assignment List shown); instructors' servers run the clone's Python and add Formgrader and the
course folder in their home (see grader/classroom/hub.py).

The values that differ from class to class come from the environment `python -m grader hub`
sets: COURSE_HUB_STATE (the exchange and the hub's own database), COURSE_HUB_BIND and COURSE_LANG.
"""
import os
from pathlib import Path

from jupyterhub.auth import PAMAuthenticator

from grader.checks.i18n import course_language
from grader.classroom import hub

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

STATE = Path(os.environ.get("COURSE_HUB_STATE", str(hub.STATE)))

c.JupyterHub.bind_url = os.environ.get("COURSE_HUB_BIND", "http://:8000")
if os.environ.get("COURSE_HUB_SSL_CERT"):   # ./course hub --ssl-cert FILE --ssl-key FILE: HTTPS
    c.JupyterHub.ssl_cert = os.environ["COURSE_HUB_SSL_CERT"]
    c.JupyterHub.ssl_key = os.environ["COURSE_HUB_SSL_KEY"]
# The hub's own API and the proxy's take the two ports after the public one (not JupyterHub's
# fixed 8081 and 8001), so that two hubs on different ports can run on one machine.
PORT = int(c.JupyterHub.bind_url.rsplit(":", 1)[1].strip("/") or 8000)
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{PORT + 1}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PORT + 2}"
c.JupyterHub.db_url = f"sqlite:///{STATE / 'hub' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "hub" / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "hub" / "proxy.pid")


class ClassAuthenticator(PAMAuthenticator):
    """PAM, and nobody the hub's admin (see below): an account made admin by an earlier version of
    these settings loses it at its next login (PAM's own rule would leave it as it was)."""

    def is_admin(self, handler, authentication):
        return False


c.JupyterHub.authenticator_class = ClassAuthenticator
c.PAMAuthenticator.allowed_groups = {hub.LEARNERS, hub.INSTRUCTORS}
c.PAMAuthenticator.open_sessions = False   # no login session per server: nothing to clean up after

# One origin serves every server of the class (no user subdomains: see docs/instructors.md), so a
# page of one user's server, opened in another user's browser, could act on the visitor's server.
# So no page of a learner's server ever reaches another's browser:
# - nobody may open another's server: instructors are not the hub's admins (JupyterHub's admins
#   may open every server), and learners never could;
# - a server loads no Jupyter configuration from its user's home, where a learner's own config
#   could make their server answer a page without login, to anyone.
# Behind them, JupyterHub's own rules: cookies per server, XSRF checks on API calls, and a
# WebSocket that needs the server's token besides the cookie (JupyterLab sends the token:
# hub/learner/labconfig/page_config.json). JupyterHub tells a WebSocket by its Sec-Fetch-Mode
# header, which Chromium does not send on a WebSocket's handshake, so that rule holds only in
# browsers that do.
c.Spawner.disable_user_config = True
c.Spawner.environment = {"JUPYTERHUB_ALLOW_WEBSOCKET_COOKIE_AUTH": "0"}

c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.http_timeout = 120   # a first start on a busy machine imports JupyterLab and nbgrader
c.Spawner.start_timeout = 120


def course_settings(spawner) -> None:
    """Each server's Python and settings: what `./course lab` gives a learner's JupyterLab, and
    Formgrader to an instructor."""
    environment = hub.server_environment(spawner.user.name, STATE)
    spawner.environment.update(environment)
    spawner.cmd = [environment["COURSE_PYTHON"], "-m", "jupyterhub.singleuser"]
    if hub.is_instructor(spawner.user.name):
        # What an instructor makes is the team's to change, and nobody else's. Their JupyterLab
        # opens in the team's course folder, which nbgrader's Validate and Formgrader's links want
        # inside the server's root (~/attention-course links out of the home).
        spawner.cmd = ["/bin/sh", "-c", 'umask 007 && exec "$@"', "sh", *spawner.cmd]
        spawner.notebook_dir = f"~/{hub.COURSE_FOLDER}"
    if course_language() == "zh":   # JupyterLab's menus in Chinese
        spawner.args = [f"--LabApp.app_settings_dir={hub.settings(STATE) / 'lab' / 'zh'}"]


c.Spawner.pre_spawn_hook = course_settings
