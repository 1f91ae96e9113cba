"""The wheel carries the learner-facing parts of the course inside the package attention_course,
in attention_course/content/, as they are in the repository (see attention_course/content.py).
Everything else about the package is in pyproject.toml."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# Folders and files of the repository, with what of them a learner needs.
CONTENT = {
    "notebooks": ["*/*.ipynb"],
    "notebooks-zh": ["*/*.ipynb"],
    "data": ["train.txt", "val.txt", "corpus_stats.json", "tiny_gpt.pt"],
    "lab": ["**/*.json", "**/*.py", "**/*.css"],
    ".": ["nbgrader_config.py"],
}


class BuildWithContent(build_py):
    """build_py, then the course's content copied into the built package."""

    def run(self):
        super().run()
        if self.editable_mode:  # an editable install reads the repository's own folders
            return
        target = Path(self.build_lib) / "attention_course" / "content"
        shutil.rmtree(target, ignore_errors=True)  # nothing left from an earlier build
        for folder, patterns in CONTENT.items():
            for pattern in patterns:
                for path in sorted(Path(folder).glob(pattern)):
                    if path.is_file() and "__pycache__" not in path.parts:
                        self.mkpath(str((target / path).parent))
                        self.copy_file(str(path), str(target / path), preserve_mode=False)


setup(cmdclass={"build_py": BuildWithContent})
