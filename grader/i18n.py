"""An import path kept where it was: the Chinese edition's notebooks import `use_language` from here.
The module is grader.checks.i18n."""
from .checks.i18n import use_language  # noqa: F401
