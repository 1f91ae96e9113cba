"""The learner's terminals: the learner's shell as an ordinary interactive shell, not a login shell.

The launcher gives the server its PATH, with the course's environment first (attention-course,
jupyter, nbgrader: see attention_course/lab.py). jupyter_server_terminals starts a login shell
whenever the server's output is not a terminal (a lab started from an editor, a shortcut, a
script), and a login shell reads the system's profile, which on Debian and Ubuntu sets PATH anew:
those commands would be gone. Named here, the shell starts as it does when the lab runs in a
terminal. Windows keeps JupyterLab's own choice (PowerShell).
"""
import os
import shutil

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
if os.name != "nt":
    shell = os.environ.get("SHELL") or shutil.which("sh") or "/bin/sh"
    c.ServerApp.terminado_settings = {"shell_command": [shell]}
