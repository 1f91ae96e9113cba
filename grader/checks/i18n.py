"""The learner's language, for the grader's own messages and for plots.

The grader's messages are written in English with `say("expected shape {want}, got {got}", ...)`;
their translations are the catalogue translations/<language>/grader.po, which `python -m grader
release` compiles into grader/fixtures/<language>/messages.json. The language is, first, the
environment variable COURSE_LANG (an instructor's grading run: `COURSE_LANG=zh nbgrader autograde
...`), else the one a Chinese notebook sets in its first cell (`use_language("zh")`), else English.
The messages of the exercises themselves are translated in the notebooks of each edition.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import string
from collections.abc import Iterator, Mapping
from pathlib import Path

ENGLISH = "en"
CHINESE = "zh"
MESSAGES = Path(__file__).resolve().parent.parent / "fixtures"
_chosen: list[str] = []   # set by `language(...)`, innermost last


def requested(environ: Mapping[str, str] | None = None) -> str | None:
    """The language the environment variable COURSE_LANG asks for, in `environ` (None: this
    process's): "zh" for any spelling of Chinese (zh, ZH, zh_CN.UTF-8, zh-Hans), "en" for any
    other value, None when it is unset or empty. The one place COURSE_LANG is read."""
    value = (os.environ if environ is None else environ).get("COURSE_LANG", "").strip().lower()
    if not value:
        return None
    return CHINESE if value.startswith(CHINESE) else ENGLISH


def course_language(environ: Mapping[str, str] | None = None) -> str:
    """The course's language by COURSE_LANG in `environ` (None: this process's): "zh" or "en"
    (also when unset): which edition nbgrader's commands work on, JupyterLab's menus."""
    return requested(environ) or ENGLISH


def for_edition(language: str) -> str:
    """The language of messages about a notebook of the edition in `language`: COURSE_LANG's
    when an instructor set it, else the notebook's own."""
    return requested() or language


def current() -> str:
    """The language messages are given in: "en" or "zh"."""
    if _chosen:
        return _chosen[-1]
    return requested() or ENGLISH


@contextlib.contextmanager
def language(code: str) -> Iterator[None]:
    """Give messages in `code` inside this block (the grader, for one notebook's verdicts)."""
    _chosen.append(code)
    try:
        yield
    finally:
        _chosen.pop()


@functools.cache
def catalogue(code: str) -> dict[str, str]:
    """English template -> translation for the grader's messages in `code` (empty for English,
    or when the catalogue is missing)."""
    if code == ENGLISH:
        return {}
    try:
        return json.loads((MESSAGES / code / "messages.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def say(template: str, /, **values: object) -> str:
    """A message for the learner: `template` in the current language, filled with `values`."""
    language = current()
    text = catalogue(language).get(template, template)
    return _spaced(text, values) if language == CHINESE else text.format(**values)


_HAN = re.compile(r"[\u3400-\u9fff]")
_LATIN = re.compile(r"[A-Za-z0-9]")


def _spaced(template: str, values: dict[str, object]) -> str:
    """`template` filled with `values`, with a space where a value meets Han characters with a
    Latin letter or digit ("应为 int 96"), as Chinese text separates the two scripts; a value
    may start either way ("得到的是形状为 (2, 3) 的张量", "得到的是 float 96.0")."""
    formatter = string.Formatter()
    pieces: list[tuple[str, bool]] = []
    for literal, field, spec, conversion in formatter.parse(template):
        pieces.append((literal, False))
        if field is not None:
            value = formatter.convert_field(formatter.get_field(field, (), values)[0], conversion)
            pieces.append((formatter.format_field(value, spec or ""), True))
    out, after_value = "", False
    for piece, is_value in pieces:
        if piece and out and (is_value or after_value) and _scripts_meet(out[-1], piece[0]):
            out += " "
        out += piece
        after_value = is_value if piece else after_value
    return out


def _scripts_meet(left: str, right: str) -> bool:
    return bool((_HAN.match(left) and _LATIN.match(right)) or (_LATIN.match(left) and _HAN.match(right)))


# Fonts with Chinese glyphs, by platform: Debian/Ubuntu (fonts-noto-cjk, fonts-wqy-zenhei),
# macOS, Windows. The first one installed is used after DejaVu Sans, matplotlib's default, which
# keeps drawing Latin letters, digits and maths.
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
             "PingFang SC", "Heiti SC", "Microsoft YaHei", "SimHei")


CJK_FILES = ("notosanscjk", "notosanssc", "sourcehansans", "wqy-zenhei", "pingfang", "stheiti", "msyh", "simhei")


def cjk_font() -> str | None:
    """The first font of CJK_FONTS that matplotlib finds on this machine, or None. A font
    installed after matplotlib made its font cache is added from the system's font folders."""
    from matplotlib import font_manager

    def first() -> str | None:
        installed = {font.name for font in font_manager.fontManager.ttflist}
        return next((name for name in CJK_FONTS if name in installed), None)

    if first() is None:
        for path in font_manager.findSystemFonts():
            if any(part in Path(path).name.lower() for part in CJK_FILES):
                font_manager.fontManager.addfont(path)
    return first()


def use_language(code: str) -> None:
    """Called by the first cell of a notebook in another language: the self-checks answer in
    `code` (unless COURSE_LANG already says otherwise), and plots can draw its characters."""
    os.environ.setdefault("COURSE_LANG", code)
    if code == "zh":
        import matplotlib

        font = cjk_font()
        if font is None:
            print("图中的中文需要一种中文字体，例如在 Debian/Ubuntu 上：sudo apt-get install fonts-noto-cjk")
            return
        matplotlib.rcParams["font.family"] = ["DejaVu Sans", font]   # a glyph DejaVu lacks comes from `font`
