"""An import path kept where it was: the hidden tests of released notebooks import the check language
from here. The module is grader.checks.spec."""
from .checks.spec import *  # noqa: F401,F403
