"""Tests for the shipped corpus and its exact entropy floor."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest
from reference import load_script

DATA = Path(__file__).resolve().parents[1] / "data"


mc = load_script(DATA / "make_corpus.py")


@pytest.fixture(scope="module")
def shipped() -> dict:
    return {
        "train": (DATA / "train.txt").read_text(encoding="utf-8"),
        "val": (DATA / "val.txt").read_text(encoding="utf-8"),
        "stats": json.loads((DATA / "corpus_stats.json").read_text(encoding="utf-8")),
    }


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    mc.main(out_dir=tmp_path)
    for name in ("train.txt", "val.txt", "corpus_stats.json"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


# --- An independent computation of the entropy, one character at a time. ---
#
# It makes no use of prefix-freeness or of the generator's bookkeeping: the
# probability that the text starts with a given prefix is summed over *every*
# path of choices consistent with that prefix, then p(next char | prefix) is a
# ratio of two such sums, in exact rational arithmetic.


class _Stop(Exception):
    def __init__(self, options: tuple) -> None:
        super().__init__()
        self.options = options


def _run(process: Callable, path: tuple[int, ...]) -> tuple[str, tuple | None]:
    """Text produced by the choices in ``path`` and the next choice (None if done)."""
    parts: list[str] = []
    steps = iter(path)

    def choose(options: tuple, **_: object) -> str:
        index = next(steps, None)
        if index is None:
            raise _Stop(options)
        parts.append(options[index][0])
        return options[index][0]

    try:
        process(choose)
    except _Stop as stop:
        return "".join(parts), stop.options
    return "".join(parts), None


def _prefix_mass(process: Callable, prefix: str) -> Fraction:
    """P(the text of ``process`` starts with ``prefix``), summed over all paths."""
    mass = Fraction(0)
    stack: list[tuple[tuple[int, ...], Fraction]] = [((), Fraction(1))]
    while stack:
        path, prob = stack.pop()
        text, options = _run(process, path)
        if text.startswith(prefix):
            mass += prob  # every continuation of this path keeps the prefix
            continue
        if options is None:
            continue
        total = sum(w for _, w in options)
        for index, (word, weight) in enumerate(options):
            extended = text + word
            if extended.startswith(prefix) or prefix.startswith(extended):
                stack.append((path + (index,), prob * Fraction(weight, total)))
    return mass


def test_generator_entropy_matches_char_by_char_marginal() -> None:
    num_lines = 8
    text, nll = mc.generate(seed=2024, num_lines=num_lines)

    def process(choose: Callable) -> None:
        for _ in range(num_lines):
            mc.line_process(choose)

    masses = [_prefix_mass(process, text[:k]) for k in range(len(text) + 1)]
    assert masses[0] == 1
    per_char = [-math.log(masses[k + 1] / masses[k]) for k in range(len(text))]
    assert math.fsum(per_char) == pytest.approx(nll, abs=1e-9)
    # Copied names are forced: the marginal gives them probability exactly 1.
    assert sum(1 for k in range(len(text)) if masses[k + 1] == masses[k]) > len(text) // 2


def test_parse_recovers_val_entropy_from_text_alone(shipped: dict) -> None:
    val, stats = shipped["val"], shipped["stats"]
    nll, chosen = mc.parse(val)
    assert "".join(chosen) == val
    assert nll == pytest.approx(stats["val_total_nats"], abs=1e-6)
    assert nll / len(val) == pytest.approx(stats["val_entropy_nats_per_char"], abs=1e-9)


def test_parse_agrees_with_generator() -> None:
    text, nll = mc.generate(seed=5, num_lines=300)
    assert mc.parse(text)[0] == pytest.approx(nll, abs=1e-9)


def test_parse_rejects_text_the_process_cannot_produce() -> None:
    with pytest.raises(ValueError):
        mc.parse("ann met ann. ann gave ann one cup.\n")  # second name must differ
    with pytest.raises(ValueError):
        mc.parse("ann met bob. tom gave ann one cup.\n")  # giver must be ann or bob


def test_every_choice_is_prefix_free() -> None:
    for name in dir(mc):
        value = getattr(mc, name)
        if name.isupper() and isinstance(value, tuple) and value and isinstance(value[0], tuple):
            mc.check_options(value)
    with pytest.raises(ValueError):
        mc.check_options((("ab", 1), ("abc", 1)))


def test_lines_are_short_and_complete(shipped: dict) -> None:
    for split in ("train", "val"):
        text = shipped[split]
        assert text.endswith("\n")
        lines = text.split("\n")[:-1]
        assert len(lines) == shipped["stats"][f"{split}_lines"]
        assert len(text) == shipped["stats"][f"{split}_chars"]
        assert all(0 < len(line) <= 48 for line in lines)
    assert shipped["stats"]["expected_max_line_chars"] <= 48


def test_vocab_and_sizes(shipped: dict) -> None:
    stats = shipped["stats"]
    assert stats["vocab"] == sorted(set(shipped["train"] + shipped["val"]))
    assert stats["vocab_size"] == len(stats["vocab"])
    assert set(stats["vocab"]) <= set("abcdefghijklmnopqrstuvwxyz .,\n")
    assert 300_000 <= len(shipped["train"]) <= 500_000
    assert 30_000 <= len(shipped["val"]) <= 50_000


def test_figures_are_consistent(shipped: dict) -> None:
    stats = shipped["stats"]
    floor = stats["val_entropy_nats_per_char"]
    # The empirical rates sit on the analytic one; baselines sit well above.
    assert stats["train_entropy_nats_per_char"] == pytest.approx(
        stats["expected_entropy_nats_per_char"], abs=0.005
    )
    assert floor == pytest.approx(stats["expected_entropy_nats_per_char"], abs=0.02)
    assert floor < stats["no_lookback_val_nats_per_char"] < stats["bigram_val_nats_per_char"]
    assert stats["bigram_val_nats_per_char"] < stats["unigram_val_nats_per_char"]
    assert sum(stats["templates"].values()) == pytest.approx(1.0)


def test_readme_quotes_current_figures(shipped: dict) -> None:
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    stats = shipped["stats"]
    for key in (
        "val_entropy_nats_per_char",
        "train_entropy_nats_per_char",
        "expected_entropy_nats_per_char",
        "no_lookback_val_nats_per_char",
        "bigram_val_nats_per_char",
        "unigram_val_nats_per_char",
    ):
        assert f"{stats[key]:.4f}" in readme, key
    assert f"{stats['train_chars']:,}" in readme and f"{stats['val_chars']:,}" in readme
