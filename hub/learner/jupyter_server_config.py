"""Every server of the class hub, instructors' too: terminals as in the learner's own JupyterLab
(an ordinary interactive shell, not a login shell: see lab/learner/jupyter_server_config.py), so
that the PATH the hub gives a server (its python, nbgrader, attention-course) survives in them;
and kernels that speak only to their owner: Unix sockets in the owner's runtime folder (mode 700),
not TCP ports that every account of the machine can reach, with the notebook's folder last on
their import path, never first (see grader/classroom/kernels.py)."""
from grader.classroom.kernels import TRANSPORT, runtime_folder

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
load_subconfig("../../lab/learner/jupyter_server_config.py")  # noqa: F821 (relative to this file's folder)
c.KernelManager.transport = TRANSPORT
c.ServerApp.kernel_manager_class = "grader.classroom.kernels.ClassKernels"   # an instructor's: InstructorKernels
runtime_folder()   # the sockets' folder, made private before the first kernel
