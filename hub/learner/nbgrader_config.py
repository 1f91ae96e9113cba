"""nbgrader in every server of the class hub (learners' and instructors'): the course's settings
and the class's exchange, which the hub names in COURSE_EXCHANGE."""
import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
load_subconfig(os.path.join(os.path.dirname(__file__), "..", "..", "nbgrader_config.py"))  # noqa: F821
c.Exchange.root = os.environ.get("COURSE_EXCHANGE", "/srv/attention-course/exchange")
