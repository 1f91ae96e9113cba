"""Every server of the class hub, learners' and instructors': a terminal starts the account's
shell as an ordinary interactive shell, not a login shell. The hub gives each server its PATH
(its environment's python, nbgrader and attention-course first); a login shell reads
/etc/profile, which sets PATH anew (Debian's does), and those commands would be gone.
jupyter_server_terminals starts a login shell whenever the server's output is not a terminal,
as under a hub, unless a shell command is named here."""
import os
import pwd

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
shell = pwd.getpwuid(os.getuid()).pw_shell
if not shell or os.path.basename(shell) in ("nologin", "false"):
    shell = "/bin/sh"
c.ServerApp.terminado_settings = {"shell_command": [shell]}
