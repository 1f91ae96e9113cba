"""An import path kept where it was: nbgrader configurations of class hubs name the exchange's classes
from here. The module is grader.classroom.exchange."""
from .classroom.exchange import FACTORY  # noqa: F401
