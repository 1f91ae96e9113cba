"""Unit 10's budget: its notebook top to bottom, offline and at full size, in time and memory.

    python benchmarks/bench_gpt2.py                 # offline, then at full size
    python benchmarks/bench_gpt2.py --offline       # only the small random GPT-2
    python benchmarks/bench_gpt2.py --language zh   # the Chinese edition
    python benchmarks/bench_gpt2.py --keep DIR      # also keep the executed notebooks, to read

What runs is what a learner who got every exercise right runs: the released student notebook with
the reference answers, self-checks included, in a fresh kernel, as the learner would start it (not
under the grader). Two configurations:
- offline: `HF_HUB_OFFLINE=1` and no cached GPT-2, so the notebook takes the small random GPT-2
  (width 64, 4 layers);
- full size: `ATTENTION_COURSE_GPT2_RANDOM=1`, GPT-2 small's shapes with random weights and a
  tokenizer of one token per word, which cost what the downloaded model costs.

Each run is a fresh Python that executes the notebook with nbclient and then reads the peak
resident memory of its children (`RUSAGE_CHILDREN`: the kernel, once shut down and reaped). The
budget: offline in 15 s at most; at full size in 2 minutes at most on 2 cores, 2.5 GB at most.
The notebook keeps PyTorch to one thread, so a busier machine mostly stretches the time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

BUDGET = {"offline": (15.0, None), "full size": (120.0, 2.5)}    # seconds, GB

# Run in a child Python, so that RUSAGE_CHILDREN holds this notebook's kernel alone.
_RUN = """
import json, resource, sys, time
import nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
client = NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}})
start = time.perf_counter()
client.execute()
seconds = time.perf_counter() - start
if sys.argv[3]:
    nbformat.write(nb, sys.argv[3])
print(json.dumps({"seconds": seconds, "peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def run(notebook: Path, folder: Path, env: dict[str, str], keep: Path | None) -> tuple[float, float]:
    """(seconds, peak GB of the kernel) for one run of `notebook` with `env` added; the executed
    notebook is written to `keep` if given."""
    done = subprocess.run([sys.executable, "-c", _RUN, str(notebook), str(folder), str(keep or "")],
                          capture_output=True, text=True, env={**os.environ, **env}, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return figures["seconds"], figures["peak_kb"] / 1e6   # ru_maxrss is in kB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offline", action="store_true", help="only the small random GPT-2")
    parser.add_argument("--language", default="en", choices=["en", "zh"])
    parser.add_argument("--keep", type=Path, help="a folder for the executed notebooks")
    args = parser.parse_args()

    import nbformat
    from reference import student_notebook

    from grader import course

    unit = "10_gpt2"
    folder = course.release_notebook(unit, args.language).parent
    configurations = {"offline": {"HF_HUB_OFFLINE": "1", "HF_HOME": tempfile.mkdtemp(prefix="no-gpt2-")},
                      "full size": {"ATTENTION_COURSE_GPT2_RANDOM": "1"}}
    if args.offline:
        del configurations["full size"]
    os.environ.pop("NBGRADER_EXECUTION", None)   # the learner's run, not the grader's short one
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{unit}.ipynb"
        nbformat.write(student_notebook(unit, language=args.language), path)
        print(f"unit 10, {args.language} edition, the student notebook with the reference answers; "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        for name, env in configurations.items():
            keep = args.keep / f"{unit}-{args.language}-{name.replace(' ', '-')}.ipynb" if args.keep else None
            seconds, peak = run(path, folder, env, keep)
            limit_s, limit_gb = BUDGET[name]
            memory = f", peak memory {peak:.2f} GB" + (f" (budget {limit_gb} GB)" if limit_gb else "")
            print(f"{name:9s}: {seconds:6.1f} s (budget {limit_s:.0f} s){memory}")


if __name__ == "__main__":
    main()
