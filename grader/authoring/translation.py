"""Editions in other languages, made from the one English source.

`solutions/` holds the code, the tests and the English text. The text a learner reads is
translated in gettext catalogues, one per unit and language (`translations/zh/<unit>.po`, which
Poedit, Lokalize or any PO editor opens); each entry's msgid is the English text it translates:

- every markdown cell, whole;
- in code cells that are not tests: comments, docstrings, and prose strings (printed text, plot
  titles, labels and legends);
- in test cells: the prose strings (known mistakes' messages, case labels, messages of the glue
  code), so the self-checks and the feedback come in the learner's language.

A string is prose when it holds a word and a space, or when it is a text a plot or `print`
shows. f-strings are translated as written, with their `{...}` fields left as they are, e.g.
msgid "random vectors of length {n}". Code, names and data stay the same: grading is blind to
the language, since the two editions run the same code on the same values.

When the English changes, its entry no longer matches: `python -m grader release` keeps the old
translation as a fuzzy entry (with the English it translated, as msgmerge does) for the
translator to update when the new English is close to the old, and as an obsolete entry (#~)
otherwise, which `tools/translations.py to-json` offers beside the closest new text; `release
--check` fails until every entry is translated and not fuzzy.
Each term of translations/<language>/glossary.tsv must be rendered the same way everywhere.
"""
from __future__ import annotations

import ast
import copy
import difflib
import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import notebook

TRANSLATIONS = Path(__file__).resolve().parent.parent.parent / "translations"
LANGUAGES = ("zh",)
GRADER = "grader"   # the catalogue of the grader's own messages: translations/<language>/grader.po
PO_LANGUAGE = {"zh": "zh_CN"}

# Comments that are nbgrader's markers or tool directives, not prose.
_MARKER = re.compile(r"^#+\s*(BEGIN|END) (SOLUTION|HIDDEN TESTS)\b|^#\s*(YOUR CODE HERE|noqa|type:|%%)")
_WORD = re.compile(r"[A-Za-z]{2,}")
# Calls and keywords whose string arguments a learner reads.
_SHOWN_CALLS = {"print", "title", "set_title", "suptitle", "xlabel", "ylabel", "set_xlabel", "set_ylabel",
                "set_zlabel", "text", "annotate", "legend", "Mistake", "Case", "NotAsAsked", "CheckFailed",
                "write", "set_description", "tqdm"}
_SHOWN_KEYWORDS = {"label", "title", "xlabel", "ylabel", "zlabel", "desc", "labels", "reason", "name"}
# Keywords whose strings are settings, not prose (legend(loc="upper right")).
_SETTING_KEYWORDS = {"loc", "cmap", "color", "colors", "marker", "linestyle", "ls", "ha", "va", "fontsize", "mode",
                     "approximate", "device", "dtype", "split", "layout", "merge", "pos", "scale", "mask",
                     "reduction", "nonlinearity", "projection", "origin", "interpolation", "aspect", "fmt"}
# Strings that name things in code: never prose, whatever they hold.
_NAMING_CALLS = {"forbid", "Spec", "getattr", "setattr", "hasattr", "register_buffer", "get", "open", "Path",
                 "startswith", "endswith", "split", "join", "replace", "encode", "decode", "compile", "exec", "eval",
                 "import_module", "einsum", "raised",   # raised("ValueError: matmul"): an error as raised
                 "tokenizer_parts"}   # unit 08's tests: the sample texts a tokenizer is tried on


@dataclass(frozen=True)
class Text:
    """One translatable text of a notebook: its English, what it is, and where (for translators)."""
    english: str
    kind: str    # "markdown", "comment", "docstring", "string", or "message" (a hidden test's)
    where: str   # the cell's grade id, or "cell N"


@dataclass(frozen=True)
class _Span:
    """A text inside a code cell's source, and how its translation is written back there."""
    start: int
    end: int
    text: Text
    render: Callable[[str], str]


# --- finding the texts -------------------------------------------------------------------------

def texts(nb) -> list[Text]:
    """The notebook's translatable texts, in reading order, each once."""
    found: dict[str, Text] = {}
    for index, cell in enumerate(nb.cells):
        for text in _cell_texts(cell, _where(cell, index)):
            found.setdefault(text.english, text)
    return list(found.values())


def _where(cell, index: int) -> str:
    return notebook.grade_id(cell) or f"cell {index}"


def _cell_texts(cell, where: str) -> list[Text]:
    if cell.cell_type == "markdown":
        return [Text(cell.source, "markdown", where)] if cell.source.strip() else []
    if cell.cell_type != "code":
        return []
    return [span.text for span in _code_spans(cell.source, where, test=notebook.is_test(cell))]


def _code_spans(source: str, where: str, test: bool) -> list[_Span]:
    """The translatable spans of a code cell. In a test cell only the hidden region's prose
    strings count (its comments and docstrings are for the course's maintainers)."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line.rstrip("\r\n") for line in lines)
    code_lines = code.split("\n")

    def at(row: int, col: int, in_bytes: bool = False) -> int:
        """Offset in `source` of a row (from 1) and column: in characters (tokenize) or, as the
        ast module counts, in UTF-8 bytes."""
        if in_bytes:
            col = _char_column(code_lines[row - 1], col)
        return offsets[row - 1] + col

    try:
        tree = ast.parse(code)
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (SyntaxError, tokenize.TokenError):
        return []
    spans: list[_Span] = []
    docstrings = _docstring_nodes(tree)
    if not test:
        spans += _comment_spans(tokens, code, at, where)
        for node in docstrings:
            spans.append(_docstring_span(node, code, at, where))
    for node, shown in _string_nodes(tree, docstrings, test):
        span = _string_span(node, tokens, code, at, where, shown, "message" if test else "string")
        if span:
            spans.append(span)
    return sorted(spans, key=lambda s: s.start)


def _char_column(line: str, byte_col: int) -> int:
    """The column, in characters, of what the ast module places at `byte_col` UTF-8 bytes."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8"))


def _comment_spans(tokens, code: str, at, where: str) -> list[_Span]:
    """Comments: a run of whole-line comments at one indentation is one text (a paragraph),
    a comment after code is one text of its own."""
    lines = code.splitlines()
    groups: list[list[tokenize.TokenInfo]] = []
    for tok in tokens:
        if tok.type != tokenize.COMMENT or _MARKER.match(tok.string):
            continue
        row, col = tok.start
        alone = not lines[row - 1][:col].strip()
        last = groups[-1][-1] if groups else None
        if (alone and last is not None and last.start[0] == row - 1 and last.start[1] == col
                and not lines[row - 2][:col].strip()):
            groups[-1].append(tok)
        else:
            groups.append([tok])
    spans = []
    for group in groups:
        body = [re.sub(r"^#+ ?", "", tok.string) for tok in group]
        english = "\n".join(body)
        if not _WORD.search(english) or not re.search(r"[A-Za-z]{3,}", english):
            continue   # shapes and formulas, such as "(T, d) -> (T,)"
        indent = " " * group[0].start[1]
        start, end = at(*group[0].start), at(*group[-1].end)

        def render(translation: str, indent=indent) -> str:
            return ("\n" + indent).join(f"# {line}".rstrip() for line in translation.split("\n"))

        spans.append(_Span(start, end, Text(english, "comment", where), render))
    return spans


def _docstring_nodes(tree: ast.AST) -> list[ast.Constant]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.append(first.value)
    return found


def _docstring_span(node: ast.Constant, code: str, at, where: str) -> _Span:
    raw = ast.get_source_segment(code, node)
    prefix = re.match(r"^[rRuU]*", raw).group(0)
    quote = raw[len(prefix):len(prefix) + 3] if raw[len(prefix):len(prefix) + 3] in ('"""', "'''") else raw[len(prefix)]
    inner = raw[len(prefix) + len(quote):-len(quote)]
    indent = " " * node.col_offset
    closing_alone = "\n" in inner and not inner.rsplit("\n", 1)[1].strip()
    english = _dedent_docstring(inner)

    def render(translation: str) -> str:
        first, *rest = translation.split("\n")
        body = "\n".join([first.rstrip()] + [indent + line.rstrip() if line.strip() else "" for line in rest])
        return f"{prefix}{quote}{body}{chr(10) + indent if closing_alone else ''}{quote}"

    return _Span(at(node.lineno, node.col_offset, True), at(node.end_lineno, node.end_col_offset, True),
                 Text(english, "docstring", where), render)


def _dedent_docstring(inner: str) -> str:
    lines = inner.split("\n")
    rest = [line for line in lines[1:] if line.strip()]
    margin = min((len(line) - len(line.lstrip()) for line in rest), default=0)
    out = [lines[0].strip()] + [line[margin:].rstrip() for line in lines[1:]]
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def _literal_text(node: ast.expr) -> str:
    return node.value if isinstance(node, ast.Constant) else "".join(
        v.value for v in node.values if isinstance(v, ast.Constant))


def _string_nodes(tree: ast.AST, docstrings: list[ast.Constant], test: bool = False) -> list[tuple[ast.expr, bool]]:
    """String literals (plain and f-strings, outermost only) with whether they sit where a
    learner reads them (see _SHOWN_CALLS), leaving out names: dictionary keys, subscripts,
    comparisons, the arguments of naming calls. In a test, values that checks compare stay
    too: what a call returns, a mistake's value, a lambda's result."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    skip = {id(node) for node in docstrings}
    found = []
    for node in ast.walk(tree):
        is_string = isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))
        if not is_string or id(node) in skip or isinstance(parents.get(node), (ast.JoinedStr, ast.FormattedValue)):
            continue
        parent, child, shown, naming, key, keyword = parents.get(node), node, False, False, False, ""
        while parent is not None and not isinstance(parent, ast.stmt):
            if (isinstance(parent, ast.Dict) and child in parent.keys) or \
                    (isinstance(parent, ast.DictComp) and child is parent.key) or \
                    (isinstance(parent, ast.Subscript) and child is parent.slice):
                # A key of a few words is a title a table or plot prints ({"entropy floor": ...}),
                # translated alike wherever the notebook uses it; in a test, a {message: value} map.
                key = " " in _literal_text(node)
                naming = naming or not key
            elif isinstance(parent, ast.Lambda) and test:
                naming = True   # a value a check compares, e.g. oracle=lambda **_: "the same tokens"
            elif isinstance(parent, ast.Compare):
                naming = True
            elif isinstance(parent, ast.keyword):
                keyword = parent.arg
                shown = shown or parent.arg in _SHOWN_KEYWORDS
                naming = naming or parent.arg in _SETTING_KEYWORDS
            elif isinstance(parent, ast.Call) and child is not parent.func:
                name = _call_name(parent)
                naming = naming or (name in _NAMING_CALLS and (name, keyword) != ("forbid", "reason")) or (
                    name == "Mistake" and child is not parent.args[0])
                shown = shown or name in _SHOWN_CALLS
                break
            child, parent = parent, parents.get(parent)
        if test and not shown and not key and isinstance(parent, ast.Return):
            naming = True   # what a check's call returns is compared with the values of mistakes
        if not naming:
            found.append((node, shown))
    return found


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _string_span(node: ast.expr, tokens, code: str, at, where: str, shown: bool, kind: str) -> _Span | None:
    """A string literal as its source text between the quotes (f-string fields as written):
    adjacent literals ("a " "b") are one text, written back as one literal."""
    lines = code.split("\n")
    start = node.lineno, _char_column(lines[node.lineno - 1], node.col_offset)
    end = node.end_lineno, _char_column(lines[node.end_lineno - 1], node.end_col_offset)
    parts = [tok.string for tok in tokens if tok.type == tokenize.STRING and start <= tok.start and tok.end <= end]
    if not parts:
        return None
    f_string = isinstance(node, ast.JoinedStr)
    english, first_prefix, first_quote = "", None, None
    for part in parts:
        prefix = re.match(r"^[A-Za-z]*", part).group(0)
        quote = part[len(prefix):len(prefix) + 3] if part[len(prefix):len(prefix) + 3] in ('"""', "'''") \
            else part[len(prefix)]
        inner = part[len(prefix) + len(quote):-len(quote)]
        if f_string and "f" not in prefix.lower():
            inner = inner.replace("{", "{{").replace("}", "}}")
        english += inner
        if first_prefix is None:
            first_prefix, first_quote = prefix, quote
    if "b" in first_prefix.lower():
        return None
    plain = re.sub(r"\{[^{}]*\}", "", english) if f_string else english
    if not _WORD.search(plain) or not (shown or " " in plain.strip()):
        return None
    prefix = first_prefix.replace("F", "f")
    if f_string and "f" not in prefix:
        prefix += "f"

    def render(translation: str) -> str:
        return f"{prefix}{first_quote}{translation}{first_quote}"

    return _Span(at(*start), at(*end), Text(english, kind, where), render)


def grader_texts() -> list[Text]:
    """The grader's own messages, and the learner's launcher's (attention_course): the templates
    of their `say(...)` calls (see grader.checks.i18n)."""
    package = Path(__file__).resolve().parent.parent
    launcher = package.parent / "attention_course"
    found: dict[str, Text] = {}
    modules = sorted((p for p in package.rglob("*.py") if "fixtures" not in p.relative_to(package).parts),
                     key=lambda p: p.name)
    for path in [*modules, *sorted(launcher.glob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # Where: the file alone, so that moving code around does not make the catalogue stale.
        where = path.name if package in path.parents else f"{launcher.name}/{path.name}"
        for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: n.lineno):
            if isinstance(node.func, ast.Name) and node.func.id == "say" \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.setdefault(node.args[0].value, Text(node.args[0].value, "message", where))
    return list(found.values())


# --- writing translations in --------------------------------------------------------------------

def translate(nb, table: dict[str, str]):
    """A copy of `nb` with every text that `table` translates (English -> translation) in the
    translation; texts it lacks stay English. Cell metadata and ids are kept."""
    out = copy.deepcopy(nb)
    for index, cell in enumerate(out.cells):
        where = _where(cell, index)
        if cell.cell_type == "markdown":
            if cell.source in table:
                cell.source = table[cell.source]
        elif cell.cell_type == "code":
            source = cell.source
            for span in reversed(_code_spans(source, where, test=notebook.is_test(cell))):
                if table.get(span.text.english, span.text.english) != span.text.english:
                    source = source[:span.start] + span.render(table[span.text.english]) + source[span.end:]
            cell.source = source
    return out


# --- the catalogues -------------------------------------------------------------------------------

def catalogue_path(language: str, unit: str) -> Path:
    return TRANSLATIONS / language / f"{unit}.po"


def load(language: str, unit: str):
    import polib

    path = catalogue_path(language, unit)
    return polib.pofile(str(path), wrapwidth=0) if path.exists() else polib.POFile(wrapwidth=0)


def table(po) -> dict[str, str]:
    """English -> translation for the finished entries (translated, not fuzzy)."""
    return {e.msgid: e.msgstr for e in po if e.msgstr and "fuzzy" not in e.flags and not e.obsolete}


def merged(po, found: list[Text], language: str, unit: str):
    """The catalogue `po` brought up to date with the texts `found` in the English source, as
    msgmerge does: entries in source order; a text whose English changed gets the old
    translation as a fuzzy entry (with the old English as its previous msgid) for the translator
    to check, when the two are close (60% alike); translations whose English is gone otherwise
    stay at the end as obsolete entries (#~), never lost."""
    import polib

    old = {e.msgid: e for e in po if not e.obsolete}
    current = {t.english for t in found}
    # Translations whose English is gone, the live ones first: a close new text takes one as fuzzy;
    # the rest stay as obsolete entries (#~), as msgmerge keeps them, for a text that comes back.
    orphans = [e for e in po if e.msgid not in current and e.msgstr and not e.obsolete] + \
              [e for e in po if e.msgid not in current and e.msgstr and e.obsolete]
    fresh = polib.POFile(wrapwidth=0)
    fresh.metadata = {
        "Project-Id-Version": f"attention-course {unit}",
        "Language": PO_LANGUAGE[language],
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
        **{k: v for k, v in po.metadata.items() if k in ("Last-Translator", "Language-Team")},
    }
    for text in found:
        source = "grader" if unit == GRADER else f"{unit}.ipynb"
        entry = polib.POEntry(msgid=text.english, msgstr="", occurrences=[(source, text.where)],
                              comment=text.kind)
        if text.english in old:
            kept = old[text.english]
            entry.msgstr, entry.flags, entry.tcomment = kept.msgstr, list(kept.flags), kept.tcomment
            entry.previous_msgid = kept.previous_msgid
        else:
            similar = _most_similar(text.english, orphans)
            if similar is not None:
                entry.msgstr, entry.flags = similar.msgstr, ["fuzzy"]
                entry.previous_msgid = similar.msgid
                orphans.remove(similar)
        if "python-format" in entry.flags:
            entry.flags.remove("python-format")
        fresh.append(entry)
    for gone in dict((e.msgid, e) for e in orphans).values():
        fresh.append(polib.POEntry(msgid=gone.msgid, msgstr=gone.msgstr, comment=gone.comment, obsolete=True))
    return fresh


def closest_obsolete(po, english: str):
    """The obsolete entry (#~) whose English is closest to `english`, if any is close enough (30%
    alike): a translation to start from (tools/translations.py to-json shows it)."""
    return _most_similar(english, [e for e in po if e.obsolete and e.msgstr], at_least=0.3)


def _most_similar(english: str, candidates, at_least: float = 0.6):
    best, best_ratio = None, at_least
    for entry in candidates:
        ratio = difflib.SequenceMatcher(None, english, entry.msgid, autojunk=False).ratio()
        if ratio > best_ratio:
            best, best_ratio = entry, ratio
    return best


def problems(po, language: str, unit: str) -> list[str]:
    """What keeps a catalogue from making a whole edition: untranslated and fuzzy entries, and
    translations that lose an f-string field or a code span of the English."""
    path = f"translations/{language}/{unit}.po"
    out = []
    for entry in po:
        if entry.obsolete:
            continue
        what = f"{path}: {entry.comment or 'entry'} at {entry.occurrences[0][1] if entry.occurrences else '?'} " \
               f"({_snippet(entry.msgid)})"
        if not entry.msgstr:
            out.append(f"{what} is not translated")
        elif "fuzzy" in entry.flags:
            out.append(f"{what} is fuzzy: its English changed since it was translated")
        else:
            lost = fields(entry.msgid) - fields(entry.msgstr)
            if lost:
                out.append(f"{what}: the translation lacks {', '.join(sorted(lost))}")
            if language == "zh" and entry.comment in ("message", "") and entry.msgstr != entry.msgid:
                out += [f"{what}: {problem}" for problem in chinese_form_problems(entry.msgstr)]
    return out


_HAN = "[\u3400-\u9fff]"
_FIELD_OR_CODE = re.compile(r"\{[^{}]*\}|`[^`]*`|'[^'\n]*'")
# A learner's message in Chinese: Han and Latin letters or digits apart by a space; Chinese
# punctuation, not ASCII, next to Han; English only as code. A field ({x}) and code (`x`, 'x')
# count as neither script: what fills them decides, and i18n.say spaces the grader's own.
CHINESE_FORM = {
    "ASCII punctuation next to Chinese (use ，；：！？)": re.compile(rf"{_HAN} ?[;,:!?]|[;,:!?] ?{_HAN}"),
    "no space between Chinese and Latin letters or digits": re.compile(rf"{_HAN}[A-Za-z0-9]|[A-Za-z0-9]{_HAN}"),
    "English words outside code": re.compile(r"(?<![\w.])[A-Za-z]{2,}(?: [A-Za-z]{2,}){2,}(?![\w(.])"
                                             r"|[\u3000-\u9fff\uff00-\uffef] ?(?:or|and) "),   # "（输入的宽度） or √T"
}


def chinese_form_problems(text: str, shown: bool = False) -> list[str]:
    """What breaks the Chinese edition's rules of punctuation, spacing and language in `text`, a
    message as stored, or as `shown` to a learner (where PyTorch's own English may be quoted):
    one line per rule, with the first place."""
    bare = _FIELD_OR_CODE.sub("\0", text)
    rules = {rule: pattern for rule, pattern in CHINESE_FORM.items() if not (shown and rule.startswith("English"))}
    return [f"{rule}: {match.group(0)!r}" for rule, pattern in rules.items() if (match := pattern.search(bare))]


def catalogue_problems(po, language: str, unit: str) -> list[str]:
    """Everything in a catalogue that keeps it from making its edition: `problems` and the
    glossary's (see `glossary_problems`)."""
    return problems(po, language, unit) + glossary_problems(po, language, unit, glossary(language))


def fields(text: str) -> set[str]:
    """What a translation must keep: f-string fields ({n}), inline code (`x`) and maths ($x$).
    An English plural ending, {'s' * (n > 1)}, may go."""
    kept = {f for f in re.findall(r"(?<!\{)\{[^{}\s][^{}]*\}(?!\})", text)
            if not re.match(r"\{['\"]s['\"] (\*|if )", f)}
    kept |= set(re.findall(r"`[^`\n]+`", text))
    kept |= set(re.findall(r"\$[^$\n]+\$", text))
    return kept


def _snippet(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return repr(line[:60] + ("…" if len(line) > 60 or "\n" in text.strip() else ""))


# --- the glossary ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    english: tuple[str, ...]   # the English forms, e.g. ("query", "queries")
    chinese: str


def glossary(language: str) -> list[Term]:
    """The terms every translation renders one way (translations/<language>/glossary.tsv)."""
    path = TRANSLATIONS / language / "glossary.tsv"
    terms = []
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        if not line.strip() or line.startswith("#") or line.startswith("english\t"):
            continue
        english, chinese, *_ = line.split("\t")
        terms.append(Term(tuple(form.strip() for form in english.split("|")), chinese.strip()))
    return terms


def _prose(text: str) -> str:
    """Text without what is not prose: inline code, maths, f-string fields, URLs, and code written
    without backticks (optimizer.zero_grad(), Tensor.softmax, W_value)."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\{[^{}]*\}|https?://\S+", " ", text, flags=re.S)
    return re.sub(r"\w+(\.\w+)+(\([^()]*\))?|\w+_\w+|\w+\([^()]*\)", " ", text)


def glossary_problems(po, language: str, unit: str, terms: list[Term]) -> list[str]:
    """Each finished entry whose English uses a glossary term and whose translation lacks the
    term's rendering. Entries kept as they are (data, names) are left out."""
    out = []
    for entry in po:
        if not entry.msgstr or entry.msgstr == entry.msgid or entry.obsolete or "fuzzy" in entry.flags:
            continue
        english = _prose(entry.msgid)
        for term in terms:
            pattern = r"(?<![\w-])(" + "|".join(re.escape(f) for f in term.english) + r")(?![\w-])"
            match = re.search(pattern, english, re.I)
            if match and term.chinese not in entry.msgstr and not _in_title(match.group(0), entry.msgstr):
                found = match.group(0)
                out.append(f"translations/{language}/{unit}.po: {_snippet(entry.msgid)} uses {found!r}, "
                           f"but its translation lacks {term.chinese!r} (translations/{language}/glossary.tsv)")
    return out


def _in_title(word: str, translation: str) -> bool:
    """Whether `word` stays in English inside a title in 《》 (a paper's title is not translated)."""
    return any(word.lower() in title.lower() for title in re.findall(r"《([^》]*)》", translation))


# --- one unit's catalogue, brought up to date ---------------------------------------------------

def update(language: str, unit: str, source_nb=None, write: bool = True) -> tuple[object, bool]:
    """The catalogue of a unit (or of the grader's messages, unit GRADER) merged with the
    English source's texts (see `merged`); with `write`, saved when it changed. Returns
    (catalogue, whether it was out of date)."""
    path = catalogue_path(language, unit)
    found = grader_texts() if unit == GRADER else texts(source_nb)
    po = merged(load(language, unit), found, language, unit)
    text = str(po)
    stale = not path.exists() or path.read_text(encoding="utf-8") != text
    if write and stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return po, stale


def code_problems(translated_nb, language: str, unit: str) -> list[str]:
    """Code cells that a translation broke (they no longer parse)."""
    out = []
    for index, cell in enumerate(translated_nb.cells):
        if cell.cell_type != "code":
            continue
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
        try:
            ast.parse(code)
        except SyntaxError as error:
            line = (code.splitlines()[error.lineno - 1]
                    if error.lineno and error.lineno <= len(code.splitlines()) else "")
            out.append(f"translations/{language}/{unit}.po breaks the code of {_where(cell, index)}: {error.msg} "
                       f"in {line.strip()[:80]!r}")
    return out


# --- a whole edition ---------------------------------------------------------------------------------

# The first code cell of another edition: its self-checks and plots in that language. Read-only,
# so nbgrader's autograde restores it if a learner deletes it.
LANGUAGE_CELLS = {
    "zh": 'from grader.i18n import use_language\n\n'
          'use_language("zh")  # 自检与评分反馈用中文，图中的中文用中文字体显示',
}


INSTALL_CELL = "install_course"   # the grade id of each unit's first code cell (grader/authoring/release.py writes it)


def edition(source_nb, language: str, table: dict[str, str]):
    """The source notebook of `language`'s edition: the English one translated by `table`, with
    the language in its metadata and the cell that sets it before the first code cell that needs
    the course (after the cell that installs it on a hosted notebook)."""
    import nbformat

    out = translate(source_nb, table)
    out.metadata["language"] = language
    cell = nbformat.v4.new_code_cell(LANGUAGE_CELLS[language])
    cell.id = f"language-{language}"
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": f"language_{language}", "locked": True,
                                 "schema_version": 3, "solution": False, "task": False}
    first_code = next(i for i, c in enumerate(out.cells) if c.cell_type == "code" and c.get("id") != INSTALL_CELL)
    out.cells.insert(first_code, cell)
    return out
