"""The course's authors' tools (`python -m grader release`): each unit's source, one .py file, made
into nbgrader's source notebook (`source`), the student notebooks and the self-checks' stored
values made from it (`release`), and every other edition translated from the English
(`translation`)."""
