"""Catalogue of learner mistakes and correct alternatives, one module per unit (`u01.py`, ...).

Each module names its unit in UNIT. Each entry replaces the code of one answer cell of the
reference solution. The catalogue test proves that every mistake loses the points of that
exercise (or of the later exercise in `graded_at`, whose check must name the earlier cause) and
gets its named message, and that every alternative keeps full marks.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    name: str                # what the learner did, in a few words
    answer: str              # grade id of the answer cell the code replaces
    code: str                # the learner's (wrong) code
    message: str             # a piece of the message the learner must see
    selfcheck_misses: str = ""   # why the notebook's self-check cannot show it (empty: it names it too)
    graded_at: str = ""      # a later exercise's answer cell whose check must name this earlier cause


@dataclass(frozen=True)
class Alternative:
    name: str
    answer: str
    code: str
