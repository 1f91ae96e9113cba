"""An import path kept where it was: released notebooks' hidden tests import their shared inputs from
here. The module is grader.checks.inputs."""
from .checks.inputs import JOURNEY, QKV, journey, linear_state  # noqa: F401
