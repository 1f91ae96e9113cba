"""The documentation holds together: README.md and docs/*.md link only to files, folders and
headings that exist, and every command and repository path they name is one the course has."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from catalogue.verdicts import catalogued_message
from helpers import picture_shows

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^ *```.*?^ *```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")   # [text](target), ![alt](target)


def _prose(text: str) -> str:
    """The page without its code: a link or heading written inside code is not one."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _code(text: str) -> list[str]:
    """The page's code: fenced blocks and inline spans."""
    return [m.group(0) for m in FENCE.finditer(text)] + INLINE_CODE.findall(FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading numbered -1, -2…"""
    found: set[str] = set()
    for line in FENCE.sub("", text).splitlines():
        if m := re.match(r"#{1,6} +(.+?) *#*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
            candidate, n = slug, 0
            while candidate in found:
                n += 1
                candidate = f"{slug}-{n}"
            found.add(candidate)
    return found


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link or image of the page whose file, folder or heading is missing."""
    text = page.read_text(encoding="utf-8")
    problems = []
    for target in LINK.findall(_prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):   # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            problems.append(f"{page.relative_to(root)}: {target} (no {path})")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            problems.append(f"{page.relative_to(root)}: {target} (no heading #{anchor} in {path or page.name})")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_points_to_what_exists(page):
    assert link_problems(page) == []


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "there.md").write_text("# A heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[fine](there.md#a-heading) [gone](docs/gone.md) ![missing](missing.png) [no](there.md#nowhere)\n"
                    "`[in code](nothing.md)` [web](https://example.org/x.md)\n", encoding="utf-8")
    problems = link_problems(page, root=tmp_path)
    assert [p.split(": ")[1].split(" ")[0] for p in problems] == ["docs/gone.md", "missing.png", "there.md#nowhere"]


def _subcommands() -> dict[str, set[str]]:
    """What each of the course's commands accepts as its first word."""
    from attention_course.cli import _parser

    learner = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    course_script = (ROOT / "course").read_text(encoding="utf-8")
    cases = course_script[course_script.index('case "${1:-}" in'):]
    grader_cli = (ROOT / "grader" / "cli.py").read_text(encoding="utf-8")
    return {
        "./course": set(re.findall(r"^    (\w+)\)$", cases, re.M)),
        "python -m grader": set(re.findall(r"sub\.add_parser\(\"([\w-]+)\"", grader_cli)),
        "attention-course": set(learner.choices),
        "python -m attention_course": set(learner.choices),
    }


COMMAND = re.compile(r"(?<![\w/.~-])(\./course|python\s+-m\s+grader|attention-course|python\s+-m\s+attention_course)"
                     r"[ \t]+([a-z][\w-]*)")


def test_the_commands_read_as_expected():
    assert _subcommands()["./course"] == {"lab", "test", "hub"}
    assert {"release", "grade", "hub"} <= _subcommands()["python -m grader"]
    assert {"lab", "copy", "progress"} <= _subcommands()["attention-course"]


def test_every_command_the_docs_name_exists():
    known = _subcommands()
    unknown, seen = [], set()
    for page in PAGES:
        for program, word in COMMAND.findall(page.read_text(encoding="utf-8")):
            program = re.sub(r"\s+", " ", program)
            seen.add(program)
            if word not in known[program]:
                unknown.append(f"{page.relative_to(ROOT)}: {program} {word}")
    assert unknown == []
    assert seen == set(known), "the docs no longer name some command: is the pattern still right?"


def _repository_folders() -> set[str]:
    """The repository's top-level folders: those at its root that git does not ignore."""
    ignored = {line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()
               if line.strip().endswith("/")}
    return {p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in ignored
            and (p.name == ".ci" or not p.name.startswith("."))}


def path_problems(text: str, folders: set[str]) -> list[str]:
    """Each path in the text's code that starts in a folder of the repository and names nothing
    there; <placeholders> and … match any name."""
    problems = []
    for code in _code(text):
        for word in code.split():
            word = word.strip("\"'(),;:[]")
            if "/" not in word or "=" in word or "://" in word or word.split("/")[0] not in folders:
                continue
            pattern = re.sub(r"<[^>]*>|…", "*", word).rstrip("/")
            if not any(ROOT.glob(pattern)):
                problems.append(word)
    return problems


def test_every_repository_path_the_docs_name_exists():
    folders = _repository_folders()
    assert {"grader", "hub", "tools", "docs"} <= folders
    problems = [f"{page.relative_to(ROOT)}: {word}" for page in PAGES
                for word in path_problems(page.read_text(encoding="utf-8"), folders)]
    assert problems == []
    assert path_problems("`grader/gone.py`, `grader/<unit>.txt` and `python tools/translations.py`", folders) \
        == ["grader/gone.py", "grader/<unit>.txt"]


FILE_SUFFIXES = {"po", "py", "json", "md", "txt", "tsv"}


def test_every_grader_module_the_docs_name_exists():
    """`grader.lms.CanvasExport`, `grader.checks.selfcheck`: the module is a file or a folder of the package."""
    missing = []
    for page in PAGES:
        for code in _code(page.read_text(encoding="utf-8")):
            for package, module in re.findall(r"(?<![\w./])(grader|attention_course)\.(\w+)", code):
                if module in FILE_SUFFIXES:   # grader.po: a file's name
                    continue
                if not (ROOT / package / f"{module}.py").exists() and not (ROOT / package / module).is_dir():
                    missing.append(f"{page.relative_to(ROOT)}: {package}.{module}")
    assert missing == []


def test_the_source_distribution_carries_what_its_pages_link_to(tmp_path):
    """The sdist (PyPI's page of the README, a learner who unpacks it) holds every file, picture
    and guide that README.md and docs/*.md link to (MANIFEST.in)."""
    import subprocess
    import sys
    import tarfile

    (tmp_path / "egg").mkdir()   # a fresh file list: an installed checkout's egg-info would add its own
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path / "egg"),
                    "sdist", "-d", str(tmp_path / "dist")], cwd=ROOT, check=True, capture_output=True)
    with tarfile.open(next((tmp_path / "dist").glob("*.tar.gz"))) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    root = next((tmp_path / "unpacked").iterdir())
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    assert len(pages) == len(PAGES), [p.name for p in pages]
    assert [problem for page in pages for problem in link_problems(page, root)] == []


def test_the_course_index_is_in_sync():
    """docs/course-index.md, which "Adding an exercise" sends a maintainer to first, lists every
    unit's exercises, points and catalogued mistakes as they are now."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "course_index.py"), "--check"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_readme_picture_shows_the_message_the_course_gives_now():
    """docs/self-check-mistake.png shows unit 01's message for a cosine in place of the dot
    product; the PNG keeps the text it shows, so a reworded message finds the picture stale."""
    cosine = catalogued_message("01_dot_product", "dot product normalised into a cosine")
    assert picture_shows(ROOT / "docs" / "self-check-mistake.png") == cosine, \
        "the README's picture shows another message: remake it with UPDATE_SCREENSHOTS=1 pytest tests/test_browser.py"
