"""An import path kept where it was: class hubs' instructor settings name
`grader.unsandboxed.RefuseUnsandboxed`. The module is grader.grading.unsandboxed."""
from .grading.unsandboxed import RefuseUnsandboxed  # noqa: F401
