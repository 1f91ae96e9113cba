"""nbgrader in every server of the class hub (learners' and instructors'): the course's settings,
the class's exchange, which the hub names in COURSE_EXCHANGE, and nbgrader's exchange actions
for a root that only root may change (see grader/classroom/exchange.py); Validate's kernels on
Unix sockets in the owner's private runtime folder (see grader/classroom/kernels.py)."""
import os

from grader.classroom.exchange import FACTORY

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
load_subconfig(os.path.join(os.path.dirname(__file__), "..", "..", "nbgrader_config.py"))  # noqa: F821
c.Exchange.root = os.environ.get("COURSE_EXCHANGE", "/srv/attention-course/exchange")
for action, plugin in FACTORY.items():
    setattr(c.ExchangeFactory, action, plugin)
c.Execute.kernel_manager_class = "grader.classroom.kernels.PrivateKernelManager"
