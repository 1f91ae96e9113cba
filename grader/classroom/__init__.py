"""A class: the class hub on one machine (`hub`) with the learners' environment and the PyTorch
build it installs (`torch_index`), nbgrader's exchange with a root only root may change
(`exchange`, the one module here that learners' servers load), and grades exported for an LMS
(`lms`)."""
