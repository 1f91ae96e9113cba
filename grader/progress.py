"""An import path kept where it was: every notebook's last cell imports `progress` from here. The
module is grader.checks.progress."""
from .checks.progress import progress  # noqa: F401
