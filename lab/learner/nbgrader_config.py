"""nbgrader's Validate and Assignment List in the learner's JupyterLab use the course's settings
(the cell time limit among them): those of nbgrader_config.py at the repository root."""
c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
load_subconfig("../../nbgrader_config.py")  # noqa: F821 (relative to this file's folder)
