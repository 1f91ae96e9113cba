"""Compare a learner's value with the expected one and say, in learner terms, what is wrong.

Used by the self-checks (stored expected values) and by the hidden checks (oracle values);
both go through `judge`, so a learner reads the same message in the notebook and in the
feedback report. Nothing here computes a correct answer: expected values and the values of
known mistakes are always handed in.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import torch

from . import wire
from .i18n import CHINESE, current, say

EPS32 = torch.finfo(torch.float32).eps  # 1.19e-07: one rounding step of float32

# A check's tolerance is given in float32 rounding steps, relative to the size of the values
# compared: |got - want| <= tol * EPS32 * max(1, max|want|). The default allows for a few
# hundred roundings, enough for any order of summation over the sizes used in this course.
DEFAULT_TOL = 256


class Mistake(NamedTuple):
    """A known mistake: the message a learner reads, and the value the mistake produces on the
    case at hand. Several values may share one message."""
    message: str
    value: Any


Mistakes = Iterable[Mistake]


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape)


def describe(x: Any) -> str:
    """A short description of a value for messages: 'tensor of shape (6, 3)', 'int 5'."""
    if isinstance(x, torch.Tensor):
        return say("tensor of shape {shape} and dtype {dtype}", shape=_shape(x),
                   dtype=str(x.dtype).replace("torch.", ""))
    if wire.is_array(x):
        return say("NumPy array of shape {shape}", shape=_shape(x[wire.ARRAY]))
    if wire.is_error(x):
        return say("an error ({error})", error=x[wire.ERROR])
    if isinstance(x, (tuple, list)) and any(isinstance(v, torch.Tensor) or wire.is_array(v) for v in x):
        shown = [describe(v) for v in x[:3]] + (["..."] if len(x) > 3 else [])   # each part whole, not cut
        return f"{type(x).__name__} ({('；' if current() == CHINESE else '; ').join(shown)})"
    text = f"{type(x).__name__} {x!r}"
    return text if len(text) <= 120 else text[:119] + "…"


def close(got: torch.Tensor, want: torch.Tensor, tol: float = DEFAULT_TOL) -> bool:
    """True when the two tensors have the same shape and agree within `tol` float32 steps."""
    if _shape(got) != _shape(want):
        return False
    g, w = got.detach().double(), want.detach().double()
    if g.numel() == 0:
        return True
    # Infinities and NaNs must sit in the same places (a fully masked row may be NaN on both sides).
    same_special = torch.equal(torch.isnan(g), torch.isnan(w)) and torch.equal(torch.isinf(g), torch.isinf(w))
    if not same_special or not torch.equal(g[torch.isinf(g)], w[torch.isinf(w)]):
        return False
    finite = torch.isfinite(w)
    if not finite.any():
        return True
    scale = max(1.0, w[finite].abs().max().item())
    return bool(((g[finite] - w[finite]).abs() <= tol * EPS32 * scale).all())


def _as_tensor(x: Any) -> torch.Tensor | None:
    """The tensor inside a learner's value, or None when there is none (errors, strings...)."""
    if isinstance(x, torch.Tensor):
        return x
    if wire.is_array(x):
        return x[wire.ARRAY]
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return torch.tensor(float(x), dtype=torch.float64)
    return None


def _where_rows_differ(got: torch.Tensor, want: torch.Tensor, tol: float) -> str:
    """Name the rows (last-but-one dim) that differ, for 2-D+ results."""
    if got.dim() < 2:
        idx = [i for i in range(got.shape[0]) if not close(got[i], want[i], tol)] if got.dim() == 1 else []
        return say(" (entries {entries} differ)", entries=idx[:8]) if idx else ""
    g, w = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    bad = [i for i in range(g.shape[0]) if not close(g[i], w[i], tol)]
    rows = got.shape[-2]
    if got.dim() == 2:
        return say(" (rows {rows} differ, e.g. row {row}: got {got}, expected {want})", rows=bad[:8], row=bad[0],
                   got=_fmt(g[bad[0]]), want=_fmt(w[bad[0]])) if bad else ""
    where = [(i // rows, i % rows) for i in bad[:4]]
    return say(" ((batch, row) {where} differ)", where=where) if bad else ""


def _fmt(t: torch.Tensor, n: int = 6) -> str:
    vals = [f"{v:.4f}" for v in t.flatten()[:n].tolist()]
    return "[" + ", ".join(vals) + (", ...]" if t.numel() > n else "]")


class NotWritten(str):
    """The message for code that still raises NotImplementedError: an answer not written yet,
    or typed but not run (or not valid Python), which leaves the stub's `raise` in the kernel.
    `function` is the learner function that raised it, by qualified name ("KVCache.__init__"),
    "" when unknown: `spec.failure_text` tells by it the exercise checked from an earlier one."""
    function: str

    def __new__(cls, text: str, function: str = "") -> NotWritten:
        message = super().__new__(cls, text)
        message.function = function
        return message


class Several(str):
    """The message for values that more than one known mistake gives: it names each of them, since
    naming one alone could name a mistake the learner did not make."""


def named_mistake(matching: Iterable[str]) -> str | None:
    """The message of the known mistakes whose values the learner's result has: the one message, or
    one that names them all when different mistakes give the same values; None for none."""
    found = list(dict.fromkeys(matching))
    if len(found) <= 1:
        return found[0] if found else None
    return Several(say("more than one mistake gives exactly these values; yours is one of them: {mistakes}",
                       mistakes=" ".join(f"({i}) {message}" for i, message in enumerate(found, 1))))


class Crash(str):
    """The message for an error that a known mistake raises: the mistake's message, then the
    error as it was raised. `mistake` is the mistake's message alone."""
    mistake: str

    def __new__(cls, text: str, mistake: str) -> Crash:
        message = super().__new__(cls, text)
        message.mistake = mistake
        return message


def known_crash(got: Any, mistakes: Mistakes) -> str | None:
    """The message of the known mistakes that raise the error `got` is: a mistake's value may be
    an error (`spec.raised`), the start of the error's text, "ValueError: matmul"."""
    if not wire.is_error(got):
        return None
    text = str(got[wire.ERROR])
    return named_mistake(message for message, value in mistakes
                         if wire.is_error(value) and text.startswith(str(value[wire.ERROR])))


def error_message(got: Any, mistakes: Mistakes = ()) -> str | None:
    """The message for a result that is an error raised by the learner's code (see
    `spec.error_value`): where it was raised, worded in the learner's language; first the known
    mistake that raises it, if one does."""
    if not wire.is_error(got):
        return None
    message = _raised(got)
    known = known_crash(got, mistakes) if not isinstance(message, NotWritten) else None
    return Crash(say("{mistake} ({error})", mistake=known, error=message), known) if known else message


def _raised(got: wire.ErrorValue) -> str:
    """The error as raised: where, worded in the learner's language."""
    text = str(got[wire.ERROR])
    error, _, detail = text.partition(": ")
    where, line = got.get("where"), got.get("line")   # plain data the learner's process sent: check its kind
    where, line = (where if isinstance(where, str) else None), (line if type(line) is int else None)
    if error == "NotImplementedError" and not detail:   # the stub's bare raise (PyTorch's say what is missing)
        if where:
            return NotWritten(say("not written yet: replace `raise NotImplementedError()` in {function} with your "
                                  "code, then run that cell (Shift+Enter)", function=where), where)
        return NotWritten(say("not written yet: replace `raise NotImplementedError()` with your code, "
                              "then run that cell (Shift+Enter)"))
    if error == "NotAsAsked":  # the check's glue found the learner's object of another form
        return detail
    if where and line:
        message = say("it raised {error} in {function} (line {line} of its cell): {text}", error=error,
                      function=where, line=line, text=detail)
    elif where:
        message = say("it raised {error} in {function}: {text}", error=error, function=where, text=detail)
    else:
        return say("it raised {error}", error=text)
    return message if detail else message.rstrip(": \uff1a")   # an error without a text: no colon after it


def tensor_message(got: Any, want: torch.Tensor, mistakes: Mistakes = (),
                   tol: float = DEFAULT_TOL, allow_number: bool = False, numpy: bool = False) -> str | None:
    """None when `got` matches `want`; otherwise a message naming what is wrong.

    `mistakes` pairs a message ("you computed cosine similarity, not the dot product") with the
    value that mistake produces on the same input; a match names the mistake.
    """
    if error_message(got):
        return error_message(got, mistakes)
    if numpy and not wire.is_array(got):
        return say("expected a NumPy array, got {got}", got=describe(got))
    g = _as_tensor(got)
    if g is None:
        return say("expected a tensor of shape {shape}, got {got}", shape=_shape(want), got=describe(got))
    if not isinstance(got, torch.Tensor) and not numpy and not (allow_number and want.dim() == 0):
        return say("expected a torch tensor of shape {shape}, got {got}", shape=_shape(want), got=describe(got))
    if g.is_complex() or g.dtype == torch.bool:
        return say("expected a floating-point tensor, got dtype {dtype}", dtype=str(g.dtype).replace("torch.", ""))
    known = named_mistake(message for message, value in mistakes
                          if (mv := _as_tensor(value)) is not None and close(g, mv, tol) and not close(mv, want, tol))
    if known:
        return known
    if _shape(g) != _shape(want):
        hint = ""
        if g.dim() == want.dim() + 1:
            hint = say(" — an extra dimension: did you forget to sum or to reduce?")
        elif g.dim() + 1 == want.dim():
            hint = say(" — a dimension is missing: did you sum over too many axes?")
        elif g.dim() >= 2 and _shape(g.transpose(-2, -1)) == _shape(want):
            hint = say(" — the last two dimensions are swapped")
        return say("expected shape {want}, got {got}{hint}", want=_shape(want), got=_shape(g), hint=hint)
    if torch.isnan(g).any() and not torch.isnan(want).any():
        return say("the result contains NaN (a 0/0, an inf - inf, or an overflow before the subtraction?)")
    if torch.isinf(g).any() and not torch.isinf(want).any():
        return say("the result contains inf (an overflow, e.g. exp of a large number?)")
    if close(g, want, tol):
        return None
    if g.dim() >= 2 and g.shape[-1] == g.shape[-2] and close(g.transpose(-2, -1), want, tol):
        return say("the values are right but transposed: rows and columns are swapped")
    return say("values differ from the expected ones{where}", where=_where_rows_differ(g.double(), want.double(), tol))


def exact_message(got: Any, want: Any, mistakes: Mistakes = ()) -> str | None:
    """For ints, bools, strings, lists and integer tensors: equality, with mistakes named."""
    if error_message(got):
        return error_message(got, mistakes)
    known = named_mistake(message for message, value in mistakes if _equal(got, value) and not _equal(value, want))
    if known:
        return known
    if _equal(got, want):
        return None
    return say("expected {want}, got {got}", want=describe(want), got=describe(got))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype \
            and _shape(a) == _shape(b) and torch.equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


# --- judges: how a check compares, with named settings -----------------------------------------
# Each is a small frozen dataclass, stored by name and settings in the self-check fixtures.

@dataclasses.dataclass(frozen=True)
class Tensor:
    """A torch tensor of the expected shape, within `steps` float32 rounding steps relative to
    the size of the expected values (see `close`)."""
    steps: float = DEFAULT_TOL

    def __call__(self, got: Any, want: Any, mistakes: list[Mistake]) -> str | None:
        return tensor_message(got, want, mistakes, self.steps)


@dataclasses.dataclass(frozen=True)
class Number(Tensor):
    """A 0-d tensor, or a plain Python number, within `steps` as for Tensor."""

    def __call__(self, got, want, mistakes):
        return tensor_message(got, want, mistakes, self.steps, allow_number=True)


@dataclasses.dataclass(frozen=True)
class Numpy(Tensor):
    """NumPy results: one array, or a tuple of arrays, within `steps` as for Tensor."""

    def __call__(self, got, want, mistakes):
        if error_message(got):
            return error_message(got, mistakes)
        if isinstance(want, tuple):
            if not isinstance(got, (tuple, list)) or len(got) != len(want):
                return say("expected a tuple of {n} NumPy arrays, got {got}", n=len(want), got=describe(got))
            return _first(tensor_message(g, w[wire.ARRAY], _part(mistakes, i), self.steps, numpy=True)
                          for i, (g, w) in enumerate(zip(got, want)))
        return tensor_message(got, want[wire.ARRAY], mistakes, self.steps, numpy=True)


@dataclasses.dataclass(frozen=True)
class Tuple(Tensor):
    """Several tensors judged together, such as (weights, context), each within `steps` as for
    Tensor. A mistake's value may be a tuple too, with None for the parts it says nothing about.
    `parts` names each part for the learner ("the weights", "len(cache)", "the gradient of q"):
    the tuple is often the check's own bundle, not something the learner's code returned."""
    parts: tuple[str, ...] = ()

    def part(self, i: int) -> str:
        return self.parts[i] if i < len(self.parts) else say("part {i} of what the check compares", i=i)

    def __call__(self, got, want, mistakes):
        if error_message(got):
            return error_message(got, mistakes)
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return say("expected a tuple of {n} tensors, got {got}", n=len(want), got=describe(got))
        for i, (g, w) in enumerate(zip(got, want)):
            known = _part(mistakes, i)
            msg = tensor_message(g, w, known, self.steps)
            if msg:  # a known mistake, or code not written yet, says it all; another message names the part
                named = msg in {m.message for m in known} or isinstance(msg, (NotWritten, Several, Crash))
                return msg if named else say("{part}: {message}", part=self.part(i), message=msg)
        return None


@dataclasses.dataclass(frozen=True)
class Exact:
    """Equality: ints, bools, strings, lists and integer tensors (dtype included)."""

    def __call__(self, got, want, mistakes):
        return exact_message(got, want, mistakes)


@dataclasses.dataclass(frozen=True)
class Float:
    """A Python float within a relative tolerance `rel` (0.1: within 10%)."""
    rel: float

    def __call__(self, got, want, mistakes):
        if error_message(got):
            return error_message(got, mistakes)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return say("expected a Python float, got {got} (use .item() to turn a tensor into a number)",
                       got=describe(got))
        if not math.isfinite(got):
            return say("expected a finite number, got {got}", got=got)
        known = named_mistake(message for message, value in mistakes
                              if abs(got - value) <= self.rel * abs(value) and abs(value - want) > self.rel * abs(want))
        if known:
            return known
        if abs(got - want) <= self.rel * abs(want):
            return None
        return say("expected about {want:.4g}, got {got:.4g}", want=want, got=got)


@dataclasses.dataclass(frozen=True)
class Frequencies:
    """Sampling: `got` counts how often each token was drawn (shape (..., V)), the expected
    value holds the true probabilities. Passes when no token of probability 0 was drawn and
    the total variation distance between frequencies and probabilities is at most `max_tv`."""
    max_tv: float

    def __call__(self, got, want, mistakes):
        if error_message(got):
            return error_message(got, mistakes)
        if not isinstance(got, torch.Tensor) or _shape(got) != _shape(want):
            return say("expected counts of shape {shape}, got {got}", shape=_shape(want), got=describe(got))
        freq = got.double() / got.double().sum(-1, keepdim=True).clamp_min(1)
        known = named_mistake(message for message, value in mistakes if _shape(value) == _shape(want)
                              and _tv(freq, value) <= self.max_tv and _tv(value, want) > 2 * self.max_tv)
        if known:
            return known
        drawn_impossible = (got > 0) & (want == 0)
        if drawn_impossible.any():
            token = drawn_impossible.nonzero()[0].tolist()
            return say("token {token} was sampled although it should have been filtered out (probability 0)",
                       token=token[-1])
        distance = _tv(freq, want)
        if distance > self.max_tv:
            return say("the sampled frequencies are far from the expected probabilities "
                       "(total variation {distance:.3f})", distance=distance)
        return None


Judge = Tensor | Exact | Float | Frequencies
JUDGES: dict[str, type] = {cls.__name__: cls for cls in (Tensor, Number, Numpy, Tuple, Exact, Float, Frequencies)}


def judge_to_plain(judge: Judge) -> dict[str, Any]:
    """A judge as JSON-ready data: {"kind": "Tensor", "steps": 256}."""
    return {"kind": type(judge).__name__, **dataclasses.asdict(judge)}


def judge_from_plain(data: dict[str, Any]) -> Judge:
    settings = dict(data)
    if isinstance(settings.get("parts"), list):   # JSON has no tuples
        settings["parts"] = tuple(settings["parts"])
    return JUDGES[settings.pop("kind")](**settings)


def _tv(p: torch.Tensor, q: torch.Tensor) -> float:
    """Largest total variation distance between two (batches of) distributions."""
    return (0.5 * (p.double() - q.double()).abs().sum(-1)).max().item()


def _part(mistakes: Mistakes, i: int) -> list[Mistake]:
    """Mistakes for the i-th part of a tuple result: a mistake value may itself be a tuple."""
    out = []
    for message, value in mistakes:
        if isinstance(value, (tuple, list)):
            if i < len(value) and value[i] is not None:
                out.append(Mistake(message, value[i]))
        elif i == 0:
            out.append(Mistake(message, value))
    return out


def _first(messages) -> str | None:
    return next((m for m in messages if m), None)
