"""nbgrader's exchange for a class on one machine, with a root that nobody but root may change.

nbgrader's default exchange asks for a root that every account may write (mode 777): a learner
could then rename the course's folder and hide every release and submission from the class,
or make the course's folder before the instructor does and own it. On the class hub
(grader/classroom/hub.py) the root belongs to root, mode 755, and the course's folder in it is made by
the hub and given to the instructor. These classes are nbgrader's own, with one change: before
each action they ask only that the root can be entered, not written (nbgrader's `ensure_root`).
Everything below the root (outbound/, inbound/ with its hidden submissions, feedback/) is
nbgrader's, unchanged. hub/learner/nbgrader_config.py names them for every server of the hub.
"""
from __future__ import annotations

import os

from nbgrader.exchange import default


class _EnterableRoot:
    """nbgrader's check of the exchange's root, asking for x instead of wx."""

    root: str

    def ensure_root(self) -> None:
        if not (os.path.isdir(self.root) and os.access(self.root, os.X_OK)):
            self.fail(f"The class's exchange {self.root} is missing or closed to you: please contact your instructor")


class FetchAssignment(_EnterableRoot, default.ExchangeFetchAssignment):
    pass


class FetchFeedback(_EnterableRoot, default.ExchangeFetchFeedback):
    pass


class ReleaseAssignment(_EnterableRoot, default.ExchangeReleaseAssignment):
    pass


class ReleaseFeedback(_EnterableRoot, default.ExchangeReleaseFeedback):
    pass


class List(_EnterableRoot, default.ExchangeList):
    pass


class Submit(_EnterableRoot, default.ExchangeSubmit):
    pass


class Collect(_EnterableRoot, default.ExchangeCollect):
    pass


# The names of ExchangeFactory's settings, and the class each takes.
FACTORY = {"fetch_assignment": FetchAssignment, "fetch_feedback": FetchFeedback,
           "release_assignment": ReleaseAssignment, "release_feedback": ReleaseFeedback,
           "list": List, "submit": Submit, "collect": Collect}
