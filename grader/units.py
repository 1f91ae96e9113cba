"""What a unit is called: two digits, an underscore and a name (01_dot_product). Its folders, its
notebook, its source and its stored values all carry that name; every part of the course that
looks for units finds them by this one rule."""
from __future__ import annotations

import re

NAME = re.compile(r"\d\d_\w+")
GLOB = "[0-9][0-9]_*"          # the same rule, for Path.glob and nbgrader's ignore lists


def is_unit(name: str) -> bool:
    return NAME.fullmatch(name) is not None
