"""Which PyTorch build the course's installs ask pip for: the one rule, for `./course` and the class hub.

On Linux, PyPI's `torch` is the CUDA build: with the NVIDIA libraries and Triton it pulls in it
is about 5 GB installed. The course needs no GPU, and PyTorch publishes CPU-only wheels on its
own index (the one its install selector names for "CPU"), a tenth of that. So on Linux without an
NVIDIA GPU the installs add that index (`--extra-index-url`): the CPU index's `2.13.0+cpu` sorts
above PyPI's `2.13.0` (a local version label sorts higher), and `torch==2.13.0`, as the test extra
pins it, matches `2.13.0+cpu` (PEP 440 ignores the label when the pin has none). The other
packages still come from PyPI. macOS's and Windows's wheels on PyPI are CPU-only already.

An NVIDIA GPU counts as present when its driver is: `nvidia-smi` on PATH or
/proc/driver/nvidia/version (the loaded kernel module). The environment can decide instead:

    COURSE_TORCH=cpu     the CPU build wherever the index has one (even beside a GPU)
    COURSE_TORCH=cuda    PyPI's default build (CUDA on Linux)
    COURSE_TORCH_INDEX   another address for the CPU index (a mirror)

Before pip runs, the index is tried with a short timeout; when it does not answer, one line says
so and the install goes on from PyPI alone. Standard library only, and runnable by any Python 3:
`./course` runs this file before anything is installed, and prints pip's arguments one a line:

    python3 grader/classroom/torch_index.py
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_SECONDS = 5.0
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")


class ChoiceError(ValueError):
    """COURSE_TORCH holds something other than cpu, cuda or auto."""


def has_nvidia_gpu(environ: dict[str, str] | None = None) -> bool:
    """Whether an NVIDIA driver is installed here: nvidia-smi on PATH, or its kernel module loaded."""
    path = (os.environ if environ is None else environ).get("PATH", os.defpath)
    return shutil.which("nvidia-smi", path=path) is not None or NVIDIA_DRIVER.exists()


def _choice(env) -> str:
    choice = env.get("COURSE_TORCH", "").strip().lower() or "auto"
    if choice not in ("cpu", "cuda", "auto"):
        raise ChoiceError(f"COURSE_TORCH={env['COURSE_TORCH']!r} is not cpu, cuda or auto: "
                          "set COURSE_TORCH=cuda for PyTorch's CUDA build, cpu for its CPU build")
    return choice


def wanted_index(environ: dict[str, str] | None = None, platform: str = sys.platform) -> str | None:
    """The CPU index's address when this machine should get the CPU build, else None (pip's default).
    Raises ChoiceError for a COURSE_TORCH that is not cpu, cuda or auto."""
    env = os.environ if environ is None else environ
    choice = _choice(env)
    index = env.get("COURSE_TORCH_INDEX", "").strip() or CPU_INDEX
    if choice == "cpu":
        return index
    if choice == "cuda" or not platform.startswith("linux"):
        return None
    return None if has_nvidia_gpu(env) else index


def unreachable(index: str, timeout: float = PROBE_SECONDS) -> str | None:
    """Why pip could not read `index` (its page for torch), or None when it answers within `timeout`.
    The whole probe, name lookup included (which urlopen's timeout does not bound), gets `timeout`."""
    found: list[str | None] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(index.rstrip("/") + "/torch/", timeout=timeout):
                found.append(None)
        except urllib.error.HTTPError as error:
            found.append(f"it answered {error.code} {error.reason}")
        except (OSError, ValueError) as error:   # refused, no route, timed out, a malformed address
            reason = getattr(error, "reason", None) or error
            found.append(str(reason) or type(reason).__name__)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return found[0] if found else f"no answer within {timeout:g} s"


def torch_pip_arguments(environ: dict[str, str] | None = None, platform: str = sys.platform,
                        tell=print) -> list[str]:
    """The arguments that make `pip install` take PyTorch's CPU build where the course wants it:
    ["--extra-index-url", <the CPU index>], or [] for pip's default. When the index does not answer
    within PROBE_SECONDS, `tell` gets one line about it and the result is [] (PyPI alone), so that an
    install never hangs on it. Raises ChoiceError for a COURSE_TORCH that is not cpu, cuda or auto."""
    env = os.environ if environ is None else environ
    index = wanted_index(env, platform)
    if index is None:
        if platform.startswith("linux") and _choice(env) == "auto":
            tell("an NVIDIA GPU is here: installing PyTorch's CUDA build (several GB; "
                "COURSE_TORCH=cpu takes the CPU build)")
        return []
    why = unreachable(index)
    if why:
        tell(f"PyTorch's CPU index {index} did not answer ({why}): installing PyTorch from PyPI alone "
            "(on Linux its CUDA build, several GB)")
        return []
    return ["--extra-index-url", index]


def main() -> int:
    try:
        arguments = torch_pip_arguments(tell=lambda line: print(f"course: {line}", file=sys.stderr))
    except ChoiceError as error:
        print(f"course: {error}", file=sys.stderr)
        return 2
    for argument in arguments:
        print(argument)
    return 0


if __name__ == "__main__":
    sys.exit(main())
