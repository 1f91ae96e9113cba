"""The attention course for learners: its notebooks, self-checks, corpus and checkpoint, and a launcher.

    pip install "attention_course-0.1.0-py3-none-any.whl[lab]"   # the course's wheel (see the README)
    attention-course lab            # or: python -m attention_course lab
    attention-course lab zh         # 中文版

The launcher copies the notebooks into a folder of your own (./attention-course) and opens it in
JupyterLab; `attention-course progress` shows which exercises pass. See the README.
"""
__version__ = "0.1.0"

# Where a hosted notebook (Colab, a JupyterHub image) installs the course from when it is missing:
# "" while the course is not published (the notebook's first cell then says how to install it), or
# the course's wheel at an https URL pinned by its sha256, which pip checks before installing:
#   "https://example.org/attention_course-0.1.0-py3-none-any.whl#sha256=<sha256sum of that wheel>"
# `python -m grader release` writes it into the first code cell of every notebook, and refuses
# anything else: a package name or an unpinned URL installs whatever someone publishes under it.
INSTALL_FROM = ""
