"""The wheel is the learner's: the launcher (attention_course), the self-checks and the check
language (grader.checks), their stored values (grader.fixtures), and the course's content inside
attention_course/content/, as it is in the repository (see attention_course/content.py). Grading,
authoring and running a class need the repository itself (the source notebooks, the hidden tests,
the solutions), so instructors work from a clone, and their modules stay out of the wheel (see
docs/maintainers.md). Everything else about the package is in pyproject.toml."""
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


# Of the packages pyproject.toml lists, the modules the wheel leaves out: in grader/, all but the
# import paths notebooks use and the exchange's; in grader/classroom/, all but the exchange and the
# kernels a learner's server uses on a class hub. (grader.grading and grader.authoring are not listed at all.)
LEARNERS_MODULES = {
    "grader": {"__init__", "units", "selfcheck", "spec", "inputs", "progress", "i18n", "exchange", "figures"},
    "grader.classroom": {"__init__", "exchange", "kernels"},
}


class BuildWithContent(build_py):
    """build_py with the learner's modules only, then the course's content copied into the built package."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        keep = LEARNERS_MODULES.get(package)
        return modules if keep is None or self.editable_mode else [m for m in modules if m[1] in keep]

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
