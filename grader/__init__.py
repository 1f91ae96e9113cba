"""Self-checks, hidden-check specifications and grading tools for the attention course.

Learners use `grader.selfcheck.check`; instructors use `python -m grader`.
"""
__version__ = "0.1.0"
