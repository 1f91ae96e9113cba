"""Generate the course corpus: short English-like lines whose names must be copied.

Every line is produced by a sequence of *choices*. A choice is a finite tuple of
(string, integer weight) options; the chosen string is appended to the line, so
the text is the concatenation of the chosen options. Within one choice no option
is a prefix of another, which makes every choice recoverable from the text, and
which choice comes next depends only on earlier choices. Hence the exact
probability of a line is the product of w / sum(w) over its choices, and

    entropy floor (nats/char) = -sum(log p(choice)) / number of characters,

newlines included. No model, however large, can beat this figure on average:
it is the cross-entropy of the true generating process itself.

Lines are independent (each starts fresh after "\\n") and at most 48 characters
long, so 64 characters of context always reach back to the start of the current
line, where the names that must be repeated were introduced.

Usage:
    python data/make_corpus.py              # (re)write train.txt, val.txt, corpus_stats.json
    python data/make_corpus.py --baselines  # also print the n-gram baselines
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import NamedTuple, Protocol

DEFAULT_SEED = 1337
TRAIN_LINES = 11_000
VAL_LINES = 1_100
MAX_LINE_CHARS = 48

Option = tuple[str, int]
Options = tuple[Option, ...]


class Choose(Protocol):
    """Callback that resolves one choice and returns the chosen string.

    ``steers=False`` promises that the outcome changes nothing later in the line
    (neither later options nor later text); the exact expectation in
    :func:`line_expectations` relies on it to avoid enumerating such choices.
    ``blind`` is the option list a reader who cannot look back at the line would
    fall back on; it is set only where the true process copies earlier words.
    """

    def __call__(
        self, options: Options, *, steers: bool = True, blind: Options | None = None
    ) -> str: ...


# ---------------------------------------------------------------------------
# Vocabulary. Unequal integer weights keep every probability an exact ratio.
# ---------------------------------------------------------------------------

NAMES: Options = (
    ("ann", 10), ("bob", 10), ("tom", 9), ("mia", 9), ("sam", 8), ("max", 8),
    ("eva", 7), ("ben", 7), ("zoe", 6), ("leo", 6), ("kim", 6), ("ned", 5),
    ("ivy", 5), ("amy", 5), ("dan", 4), ("joe", 4),
)

# The word after the first name selects the template, so the template is
# readable from the text as soon as that word is complete.
TEMPLATES: Options = (
    (" met ", 4),    # ann met bob. bob gave ann two red cups.
    (" saw ", 3),    # tom saw one big cat. the cat bit tom.
    (" asked ", 2),  # mia asked sam for six pens. sam said no.
    (" and ", 2),    # eva and ben swam, then ben slept.
)

# "one" takes the singular; every other quantity adds a plural "s".
QUANTITIES: Options = (
    ("one ", 5), ("two ", 5), ("three ", 3), ("four ", 3), ("five ", 2),
    ("six ", 2), ("ten ", 2), ("some ", 3),
)

ADJECTIVES: Options = (
    ("red ", 6), ("big ", 6), ("old ", 5), ("new ", 5), ("hot ", 4), ("wet ", 4),
    ("blue ", 4), ("tiny ", 3), ("pink ", 3), ("soft ", 3), ("cold ", 3), ("dry ", 2),
    ("odd ", 2), ("long ", 2), ("fat ", 2), ("sad ", 2),
)

# Stems with a regular "-s" plural, none a prefix of another.
OBJECTS: Options = (
    ("cup", 6), ("hat", 6), ("pen", 5), ("key", 5), ("map", 5), ("book", 5),
    ("bag", 4), ("egg", 4), ("jar", 4), ("toy", 4), ("mug", 3), ("kite", 3),
    ("drum", 3), ("lamp", 3), ("ring", 3), ("bell", 3), ("coin", 2), ("sock", 2),
    ("shoe", 2), ("boat", 2), ("card", 2), ("doll", 2), ("fork", 2), ("rope", 2),
)

ANIMALS: Options = (
    ("cat", 6), ("dog", 6), ("owl", 4), ("pig", 4), ("hen", 4), ("cow", 4),
    ("rat", 3), ("bee", 3), ("bat", 3), ("goat", 3), ("duck", 3), ("frog", 2),
    ("crab", 2), ("ant", 2), ("elk", 1), ("yak", 1),
)

GIVE_VERBS: Options = (
    ("gave ", 6), ("sent ", 4), ("sold ", 3), ("lent ", 3), ("threw ", 2),
    ("showed ", 2), ("handed ", 2), ("passed ", 1),
)

ANIMAL_VERBS: Options = (
    ("bit ", 4), ("saw ", 4), ("chased ", 3), ("licked ", 3), ("liked ", 2),
    ("hugged ", 2), ("kicked ", 2), ("scared ", 2), ("pecked ", 1), ("ignored ", 1),
)

ANSWERS: Options = (("no.", 4), ("yes.", 3), ("ok.", 2), ("never.", 1), ("maybe.", 1))

PASTIMES: Options = (
    ("played", 4), ("sang", 3), ("swam", 3), ("ate", 3), ("danced", 2), ("cooked", 2),
    ("talked", 2), ("ran", 2), ("read", 1), ("sat", 1),
)

OUTCOMES: Options = (
    ("won", 4), ("left", 3), ("fell", 3), ("slept", 3), ("cried", 2), ("laughed", 2),
    ("hid", 2), ("waved", 1), ("smiled", 1), ("yawned", 1),
)


def _emit(choose: Choose, text: str, blind: Options | None = None) -> str:
    """A forced piece of text: a choice with a single option of probability 1."""
    return choose(((text, 1),), blind=blind)


def _without(options: Options, word: str) -> Options:
    """``options`` minus ``word``: the second name differs from the first."""
    return tuple(opt for opt in options if opt[0] != word)


def _object_phrase(
    choose: Choose, nouns: Options, adjective: bool, noun_reused: bool
) -> tuple[str, str]:
    """Quantity, optional adjective, noun; returns (noun, plural suffix)."""
    quantity = choose(QUANTITIES)  # steers: decides the plural "s"
    if adjective:
        choose(ADJECTIVES, steers=False)
    noun = choose(nouns, steers=noun_reused)
    return noun, ("" if quantity == "one " else "s")


def line_process(choose: Choose) -> None:
    """Produce one line, newline included, by calling ``choose`` for every piece.

    The same description serves sampling, parsing and exact enumeration: only
    the ``choose`` callback differs.
    """
    first = choose(NAMES)
    template = choose(TEMPLATES)
    if template == " met ":
        # ann met bob. bob gave ann two red cups.
        second = choose(_without(NAMES, first))
        _emit(choose, ". ")
        giver = choose(((first, 1), (second, 1)), blind=NAMES)  # either may give
        _emit(choose, " ")
        choose(GIVE_VERBS, steers=False)
        _emit(choose, second if giver == first else first, blind=NAMES)
        _emit(choose, " ")
        _, plural = _object_phrase(choose, OBJECTS, adjective=True, noun_reused=False)
        _emit(choose, plural + ".\n")
    elif template == " saw ":
        # tom saw two big cats. the cats bit tom.
        animal, plural = _object_phrase(choose, ANIMALS, adjective=True, noun_reused=True)
        _emit(choose, plural + ". the ")
        _emit(choose, animal, blind=ANIMALS)
        _emit(choose, plural + " ")
        choose(ANIMAL_VERBS, steers=False)
        _emit(choose, first, blind=NAMES)
        _emit(choose, ".\n")
    elif template == " asked ":
        # mia asked sam for six pens. sam said no.
        second = choose(_without(NAMES, first))
        _emit(choose, " for ")
        _, plural = _object_phrase(choose, OBJECTS, adjective=False, noun_reused=False)
        _emit(choose, plural + ". ")
        _emit(choose, second, blind=NAMES)
        _emit(choose, " said ")
        choose(ANSWERS, steers=False)
        _emit(choose, "\n")
    elif template == " and ":
        # eva and ben swam, then ben slept.
        second = choose(_without(NAMES, first))
        _emit(choose, " ")
        choose(PASTIMES, steers=False)
        _emit(choose, ", then ")
        choose(((first, 1), (second, 1)), blind=NAMES)  # either may act
        _emit(choose, " ")
        choose(OUTCOMES, steers=False)
        _emit(choose, ".\n")
    else:  # pragma: no cover - TEMPLATES and this function must agree
        raise AssertionError(f"unknown template {template!r}")


# ---------------------------------------------------------------------------
# Checking choices, sampling and parsing.
# ---------------------------------------------------------------------------

_CHECKED: dict[Options, None] = {}


def check_options(options: Options) -> None:
    """Reject option lists that would make the text ambiguous or ill-formed."""
    if options in _CHECKED:
        return
    words = sorted(word for word, _ in options)
    if not words or any(w <= 0 for _, w in options):
        raise ValueError(f"empty choice or non-positive weight: {options!r}")
    # Words sharing a prefix sort next to it, so checking neighbours suffices
    # (this also catches duplicates and an empty option).
    for a, b in zip(words, words[1:]):
        if b.startswith(a):
            raise ValueError(f"option {a!r} is a prefix of {b!r}")
    _CHECKED[options] = None


def _log_prob(options: Options, index: int) -> float:
    return math.log(options[index][1] / sum(w for _, w in options))


def _blind_cost(blind: Options, word: str) -> float:
    """-log probability of ``word`` for a reader who cannot look back."""
    weights = dict(blind)
    return -math.log(weights[word] / sum(weights.values()))


class LineSample(NamedTuple):
    """One sampled line and what the generating process knows about it."""

    text: str
    log_prob: float  # exact log-probability of the line, in nats
    copy_extra: float  # extra nats paid by a reader who cannot look back
    copied_chars: int  # characters that repeat a word from earlier in the line


def sample_line(rng: random.Random) -> LineSample:
    """Draw one line by resolving each choice with ``rng``."""
    parts: list[str] = []
    log_probs: list[float] = []
    extras: list[float] = []
    copied = 0

    def choose(options: Options, *, steers: bool = True, blind: Options | None = None) -> str:
        nonlocal copied
        check_options(options)
        index = 0
        if len(options) > 1:  # forced text consumes no randomness
            r = rng.randrange(sum(w for _, w in options))
            while r >= options[index][1]:
                r -= options[index][1]
                index += 1
        word = options[index][0]
        log_p = _log_prob(options, index)
        parts.append(word)
        log_probs.append(log_p)
        if blind is not None:
            extras.append(_blind_cost(blind, word) + log_p)
            copied += len(word)
        return word

    line_process(choose)
    return LineSample("".join(parts), math.fsum(log_probs), math.fsum(extras), copied)


def _sample(rng: random.Random, num_lines: int) -> tuple[str, float, float, int]:
    """``num_lines`` lines: (text, total nats, total copy extra, copied chars)."""
    samples = [sample_line(rng) for _ in range(num_lines)]
    for sample in samples:
        if len(sample.text) - 1 > MAX_LINE_CHARS:
            raise AssertionError(f"line too long: {sample.text!r}")
    return (
        "".join(s.text for s in samples),
        -math.fsum(s.log_prob for s in samples),
        math.fsum(s.copy_extra for s in samples),
        sum(s.copied_chars for s in samples),
    )


def generate(seed: int = DEFAULT_SEED, num_lines: int = 100) -> tuple[str, float]:
    """Return ``num_lines`` lines drawn with ``random.Random(seed)`` and their
    total negative log-probability in nats under the generating process."""
    text, nll, _, _ = _sample(random.Random(seed), num_lines)
    return text, nll


def parse(text: str) -> tuple[float, list[str]]:
    """Recover every choice from ``text`` alone.

    Returns the total negative log-probability in nats and the list of chosen
    strings. Raises ValueError if the text could not have been generated.
    """
    position = 0
    chosen: list[str] = []
    log_probs: list[float] = []

    def choose(options: Options, *, steers: bool = True, blind: Options | None = None) -> str:
        nonlocal position
        check_options(options)
        # Prefix-freeness means at most one option can match here.
        for index, (word, _) in enumerate(options):
            if text.startswith(word, position):
                position += len(word)
                chosen.append(word)
                log_probs.append(_log_prob(options, index))
                return word
        raise ValueError(f"no option of {options!r} matches at offset {position}")

    while position < len(text):
        line_process(choose)
    return -math.fsum(log_probs), chosen


# ---------------------------------------------------------------------------
# Exact expectations over one line (the analytic entropy rate).
# ---------------------------------------------------------------------------


class _Pending(Exception):
    """Raised by the replaying callback when it reaches the next unresolved choice."""

    def __init__(self, options: Options, steers: bool, blind: Options | None) -> None:
        super().__init__()
        self.options, self.steers, self.blind = options, steers, blind


def _replay(path: tuple[int, ...]) -> tuple[str, _Pending | None]:
    """Run the process with the first choices fixed by ``path``; return the text
    so far and the next choice (None once the line is finished)."""
    parts: list[str] = []
    steps = iter(path)

    def choose(options: Options, *, steers: bool = True, blind: Options | None = None) -> str:
        index = next(steps, None)
        if index is None:
            raise _Pending(options, steers, blind)
        parts.append(options[index][0])
        return options[index][0]

    try:
        line_process(choose)
    except _Pending as pending:
        return "".join(parts), pending
    return "".join(parts), None


def line_expectations() -> dict[str, float]:
    """Exact expected entropy, length and copy cost of one line.

    Walks the tree of choices. Choices that do not steer the rest of the line
    contribute their entropy and expected length without being branched on,
    which keeps the walk to a few thousand paths. Lines are independent, so the
    entropy rate of the stream is E[entropy of a line] / E[length of a line].
    """
    entropy = length = blind_extra = 0.0
    longest = 0
    stack: list[tuple[tuple[int, ...], float, int]] = [((), 1.0, 0)]
    while stack:
        path, prob, slack = stack.pop()
        text, pending = _replay(path)
        if pending is None:
            longest = max(longest, len(text) - 1 + slack)
            continue
        options = pending.options
        check_options(options)
        total = sum(w for _, w in options)
        probs = [w / total for _, w in options]
        entropy += prob * -math.fsum(p * math.log(p) for p in probs)
        length += prob * math.fsum(p * len(word) for p, (word, _) in zip(probs, options))
        if pending.blind is not None:
            blind_extra += prob * math.fsum(
                p * (_blind_cost(pending.blind, word) + math.log(p))
                for p, (word, _) in zip(probs, options)
            )
        if pending.steers:
            stack.extend((path + (i,), prob * p, slack) for i, p in enumerate(probs))
        else:
            widest = max(len(word) for word, _ in options)
            stack.append((path + (0,), prob, slack + widest - len(options[0][0])))
    return {
        "entropy_nats_per_line": entropy,
        "chars_per_line": length,
        "copy_extra_nats_per_line": blind_extra,
        "max_line_chars": float(longest),
    }


# ---------------------------------------------------------------------------
# Baselines: what models without long-range context can reach.
# ---------------------------------------------------------------------------


def ngram_baselines(train: str, val: str) -> dict[str, float]:
    """Unigram and bigram cross-entropy on ``val`` (nats/char), fit on ``train``
    with add-one smoothing over the vocabulary of both files."""
    vocab = sorted(set(train) | set(val))
    size = len(vocab)
    unigram = Counter(train)
    uni_total = len(train)
    unigram_nll = math.fsum(
        -math.log((unigram[c] + 1) / (uni_total + size)) for c in val
    )
    # Treat the start of each file as following a newline: lines start fresh.
    pairs = Counter(zip("\n" + train[:-1], train))
    context = Counter("\n" + train[:-1])
    bigram_nll = math.fsum(
        -math.log((pairs[(p, c)] + 1) / (context[p] + size))
        for p, c in zip("\n" + val[:-1], val)
    )
    return {
        "unigram_val_nats_per_char": unigram_nll / len(val),
        "bigram_val_nats_per_char": bigram_nll / len(val),
    }


# ---------------------------------------------------------------------------
# Writing the files.
# ---------------------------------------------------------------------------


def _round(x: float) -> float:
    # 12 decimals: far below any figure the course compares, and robust to
    # last-bit differences between platforms' math libraries.
    return round(x, 12)


def build(
    seed: int = DEFAULT_SEED, train_lines: int = TRAIN_LINES, val_lines: int = VAL_LINES
) -> tuple[str, str, dict]:
    """Generate train and val text (val continues the same random stream) and
    the statistics that describe them."""
    rng = random.Random(seed)
    train, train_nll, _, _ = _sample(rng, train_lines)
    val, val_nll, val_extra, val_copied = _sample(rng, val_lines)
    expect = line_expectations()
    rate = expect["entropy_nats_per_line"] / expect["chars_per_line"]
    vocab = sorted(set(train) | set(val))
    stats = {
        "seed": seed,
        "train_lines": train_lines,
        "train_chars": len(train),
        "val_lines": val_lines,
        "val_chars": len(val),
        "vocab": vocab,
        "vocab_size": len(vocab),
        "max_line_chars": max(len(line) for line in (train + val).splitlines()),
        "train_entropy_nats_per_char": _round(train_nll / len(train)),
        "val_entropy_nats_per_char": _round(val_nll / len(val)),
        "val_total_nats": _round(val_nll),
        "expected_entropy_nats_per_char": _round(rate),
        "expected_chars_per_line": _round(expect["chars_per_line"]),
        "expected_max_line_chars": int(expect["max_line_chars"]),
        "val_copied_char_fraction": _round(val_copied / len(val)),
        "no_lookback_val_nats_per_char": _round((val_nll + val_extra) / len(val)),
        "expected_no_lookback_nats_per_char": _round(
            (expect["entropy_nats_per_line"] + expect["copy_extra_nats_per_line"])
            / expect["chars_per_line"]
        ),
        "templates": {
            word.strip(): _round(w / sum(v for _, v in TEMPLATES)) for word, w in TEMPLATES
        },
        **{k: _round(v) for k, v in ngram_baselines(train, val).items()},
    }
    return train, val, stats


def main(out_dir: Path | str | None = None, seed: int = DEFAULT_SEED) -> dict:
    """Write train.txt, val.txt and corpus_stats.json into ``out_dir``
    (default: the folder of this file) and return the statistics."""
    out = Path(out_dir) if out_dir is not None else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    train, val, stats = build(seed)
    for name, text in (("train.txt", train), ("val.txt", val)):
        with open(out / name, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    with open(out / "corpus_stats.json", "w", encoding="utf-8", newline="\n") as f:
        json.dump(stats, f, indent=2, sort_keys=True)
        f.write("\n")
    return stats


def _cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--baselines", action="store_true", help="print the n-gram baselines")
    args = parser.parse_args()
    stats = main(args.out_dir, args.seed)
    print(
        f"train: {stats['train_lines']} lines, {stats['train_chars']} chars; "
        f"val: {stats['val_lines']} lines, {stats['val_chars']} chars; "
        f"vocab {stats['vocab_size']}"
    )
    print(f"entropy floor on val: {stats['val_entropy_nats_per_char']:.4f} nats/char "
          f"(expected {stats['expected_entropy_nats_per_char']:.4f})")
    if args.baselines:
        for key in ("no_lookback_val_nats_per_char", "bigram_val_nats_per_char",
                    "unigram_val_nats_per_char"):
            print(f"{key}: {stats[key]:.4f}")


if __name__ == "__main__":
    _cli()
