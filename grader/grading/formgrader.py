"""Formgrader's pages of a learner's work run only Formgrader's own scripts, whatever the sanitiser
misses: a Content-Security-Policy on each, set by this Jupyter server extension of the
instructor's server on the class hub (hub/instructor/jupyter_server_config.json).

A page of an instructor's server runs with the instructor's account: a learner's script there
could read the answers through the Contents API and open a terminal. grader/grading/safe_html.py
cleans what the learner wrote; this is the layer that holds when a way past the cleaning is found
(an attribute built from an output's metadata, a template that leaves a value unquoted):

- the submission view (`formgrader/submissions/ID/`): scripts only with a nonce fresh for each
  response, given here to the `<script>` elements of Formgrader's own template, which all come
  before the notebook; nothing from the notebook on gets one. Formgrader's two inline click
  handlers are allowed by their hashes. No plugins, no `<base>`, no forms sent anywhere.
- the files of a submission (`formgrader/submissions/ID/PATH`, which nbgrader serves from the
  whole course folder): only a path inside the submission's own folder is served, as an inert
  document (`sandbox`: no script, its own opaque origin), with a type that cannot run: text, but
  for raster images.
"""
from __future__ import annotations

import base64
import hashlib
import posixpath
import re
import secrets
from urllib.parse import unquote

from tornado.web import OutputTransform

# Where the notebook starts in nbgrader's formgrade template: everything before it is the template's.
NOTEBOOK_STARTS = b'id="notebook"'   # an attribute of the notebook's first element
HANDLERS = ("toggle_name(true);", "toggle_name(false);")   # the template's own onclick attributes
NAVIGATION = re.compile(r"(next_incorrect|prev_incorrect|next|prev)/?")
RASTER = {"image/png", "image/jpeg", "image/gif", "image/webp"}
INERT = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def view_policy(nonce: str) -> str:
    """The submission view's policy: its own scripts by nonce, its two click handlers by hash."""
    handlers = " ".join(_hash(handler) for handler in HANDLERS)
    return (f"default-src 'self'; script-src 'nonce-{nonce}' 'unsafe-hashes' {handlers}; object-src 'none'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'self'; img-src 'self' data:; "
            "style-src 'self' 'unsafe-inline'")


def with_nonce(page: bytes, nonce: str) -> bytes:
    """The template's `<script` elements, those before the notebook, given the nonce."""
    cut = page.rfind(b"<", 0, page.find(NOTEBOOK_STARTS))
    if cut < 0:
        return page
    return page[:cut].replace(b"<script", f'<script nonce="{nonce}"'.encode()) + page[cut:]


def outside_submission(path: str) -> bool:
    """Whether a file path asked of a submission leaves its folder (`..`, encoded or not)."""
    plain = unquote(path)
    return plain.startswith("/") or posixpath.normpath(plain).split("/")[0] == ".."


class LearnerContentPolicy(OutputTransform):
    """The policies above, on the responses of Formgrader's submission pages (see the module)."""

    base_url = "/"

    def __init__(self, request):
        super().__init__(request)
        prefix = f"{self.base_url.rstrip('/')}/formgrader/submissions/"
        path = request.path
        self.kind, self.blocked = None, False
        if path.startswith(prefix) and not path.startswith(prefix + "components/"):
            submission, _, rest = path[len(prefix):].partition("/")
            if submission and (not rest or NAVIGATION.fullmatch(rest)):
                self.kind = "view"
            elif submission:
                self.kind, self.blocked = "file", outside_submission(rest)

    def transform_first_chunk(self, status_code, headers, chunk, finishing):
        if self.kind == "view" and headers.get("Content-Type", "").startswith("text/html"):
            nonce = secrets.token_urlsafe(18)
            chunk = with_nonce(chunk, nonce)
            headers["Content-Security-Policy"] = view_policy(nonce)
        elif self.kind == "file":
            if self.blocked:
                status_code, chunk = 404, b""
            if headers.get("Content-Type", "").split(";")[0].strip() not in RASTER:
                headers["Content-Type"] = "text/plain; charset=utf-8"
            headers["Content-Security-Policy"] = INERT
        if self.kind:
            headers["X-Content-Type-Options"] = "nosniff"
            if "Content-Length" in headers:
                headers["Content-Length"] = str(len(chunk))
        return status_code, headers, chunk

    def transform_chunk(self, chunk, finishing):
        return b"" if self.blocked else chunk


def _jupyter_server_extension_points():
    return [{"module": "grader.grading.formgrader"}]


def _load_jupyter_server_extension(serverapp) -> None:
    LearnerContentPolicy.base_url = serverapp.base_url
    serverapp.web_app.add_transform(LearnerContentPolicy)
