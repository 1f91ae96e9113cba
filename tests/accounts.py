"""Real Unix accounts for the tests of a class: learners, an instructor, each running the
course's Python as themselves.

The suite's own interpreter may live where other accounts cannot go (pyenv under a private
/root, say). `view()` then gives a command prefix that runs a command in a private mount
namespace where those folders can be passed through: the same Python and code, run by
anyone, and nothing changed on the machine itself.
"""
from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Account:
    name: str
    password: str
    home: Path

    def run(self, *args: str, cwd: Path | None = None, timeout: int = 600, env: dict | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a command as this account, with a clean environment of its own."""
        environment = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8",
                       "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", **(env or {})}
        prefix, _ = view()
        result = subprocess.run([*(prefix or []), "runuser", "-u", self.name, "--", "env", "-i",
                                 *(f"{k}={v}" for k, v in environment.items()), *args],
                                cwd=cwd or self.home, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} as {self.name} failed ({result.returncode}):\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result


def why_not() -> str | None:
    """Why accounts cannot be made here (None: they can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "making Unix accounts needs root (CI runs as root)"
    missing = [tool for tool in ("useradd", "userdel", "chpasswd", "runuser") if not shutil.which(tool)]
    return f"{', '.join(missing)} missing" if missing else None


def make(prefix: str, groups: tuple[str, ...] = ()) -> Account:
    """A new account with a private home and a random password."""
    name = f"{prefix}{secrets.token_hex(3)}"
    for group in groups:
        if subprocess.run(["getent", "group", group], capture_output=True).returncode != 0:
            subprocess.run(["groupadd", group], check=True)
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--key", "HOME_MODE=0700",
                    *(["--groups", ",".join(groups)] if groups else []), name], check=True)
    password = secrets.token_urlsafe(12)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    return Account(name, password, Path(os.path.expanduser(f"~{name}")))


def remove(account: Account) -> None:
    subprocess.run(["pkill", "-KILL", "-u", account.name], capture_output=True)
    subprocess.run(["userdel", "--remove", account.name], capture_output=True)


# Run as root in a private mount namespace: each folder in CLOSED is replaced, for the command
# only, by a folder of mode 0711 holding bind mounts of its entries, so other accounts may pass
# through it to what they are allowed to read below (its entries keep their own modes).
_VIEW = """set -e
for closed in "$@"; do
  [ "$closed" = -- ] && break
  view=$(mktemp -d /tmp/course-view.XXXXXX)
  mount -t tmpfs -o mode=0711 course-view "$view"     # its entries live in this namespace only
  for entry in "$closed"/.[!.]* "$closed"/*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    name=$(basename "$entry")
    if [ -L "$entry" ]; then cp -P "$entry" "$view/$name"; continue; fi
    if [ -d "$entry" ]; then mkdir "$view/$name"; else touch "$view/$name"; fi
    mount --bind "$entry" "$view/$name"
  done
  mount --rbind "$view" "$closed"
  umount --lazy "$view"; rmdir "$view"                 # the view lives on at "$closed" alone
done
while [ "$1" != -- ]; do shift; done; shift
exec "$@"
"""


def closed_folders() -> list[Path]:
    """Folders on the way to this Python, its environment and the repository that other
    accounts cannot pass through (pyenv under a private /root, say), outermost first."""
    found: list[Path] = []
    for target in (Path(os.path.realpath(sys.executable)), Path(sys.prefix).resolve(), ROOT):
        for folder in reversed(target.parents):
            if not folder.stat().st_mode & 0o001 and folder not in found:
                found.append(folder)
    return found


@functools.cache
def view() -> tuple[list[str] | None, str]:
    """A command prefix under which every account can run this Python with the course ([] when
    they can already), or None and why not."""
    closed = closed_folders()
    if not closed:
        return [], "the course and its Python lie in folders everyone can pass through"
    if shutil.which("unshare") is None:
        return None, f"other accounts cannot pass through {closed[0]} and unshare (util-linux) is missing"
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _VIEW, "view", *map(str, closed), "--"]
    probe = subprocess.run([*prefix, "runuser", "-u", "nobody", "--", sys.executable, "-c", "import grader, nbgrader"],
                           capture_output=True, text=True, cwd="/")
    if probe.returncode != 0:
        return None, (f"other accounts cannot pass through {', '.join(map(str, closed))}, and a private view of "
                      f"them failed: {(probe.stderr.strip().splitlines() or ['?'])[-1][:200]}")
    return prefix, f"a private mount namespace in which {', '.join(map(str, closed))} can be passed through"
