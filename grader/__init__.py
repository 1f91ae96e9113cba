"""The attention course's checks and grader, one package per audience:

- `grader.checks`: the learner's runtime, which notebooks import (`from grader.selfcheck import check`);
- `grader.grading`: the instructor's grading (`python -m grader grade`);
- `grader.classroom`: a class (the class hub, nbgrader's exchange, LMS exports);
- `grader.authoring`: the course's sources made into notebooks and editions (`python -m grader release`).

docs/maintainers.md draws them and the imports allowed between them.
"""
__version__ = "0.1.0"
