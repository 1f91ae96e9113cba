"""The attention course for learners: its notebooks, self-checks, corpus and checkpoint, and a launcher.

    pip install "attention-course[lab]"
    attention-course lab            # or: python -m attention_course lab
    attention-course lab zh         # 中文版

The launcher copies the notebooks into a folder of your own (./attention-course) and opens it in
JupyterLab; `attention-course progress` shows which exercises pass. See the README.
"""
__version__ = "0.1.0"

# Where a hosted notebook (Colab, a JupyterHub image) installs the course from when it is missing:
# anything `pip install` accepts, e.g. a wheel's URL. `python -m grader release` writes it into the
# first code cell of every notebook; change it here when the course is published, then release.
INSTALL_FROM = "attention-course"
