"""Compare a learner's value with the expected one and say, in learner terms, what is wrong.

Used by the self-checks (stored expected values) and by the hidden checks (oracle values);
both go through `judge`, so a learner reads the same message in the notebook and in the
feedback report. Nothing here computes a correct answer: expected values and the values of
known mistakes are always handed in.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

EPS32 = torch.finfo(torch.float32).eps  # 1.19e-07: one rounding step of float32

# A check's tolerance is given in float32 rounding steps, relative to the size of the values
# compared: |got - want| <= tol * EPS32 * max(1, max|want|). The default allows for a few
# hundred roundings, enough for any order of summation over the sizes used in this course.
DEFAULT_TOL = 256


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape)


def describe(x: Any) -> str:
    """A short description of a value for messages: 'tensor of shape (6, 3)', 'int 5'."""
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {_shape(x)} and dtype {str(x.dtype).replace('torch.', '')}"
    if isinstance(x, dict) and "__ndarray__" in x:
        return f"NumPy array of shape {_shape(x['__ndarray__'])}"
    if isinstance(x, dict) and "__error__" in x:
        return f"an error ({x['__error__']})"
    return f"{type(x).__name__} {x!r}"[:120]


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
    if isinstance(x, dict) and "__ndarray__" in x:
        return x["__ndarray__"]
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return torch.tensor(float(x), dtype=torch.float64)
    return None


def _where_rows_differ(got: torch.Tensor, want: torch.Tensor, tol: float) -> str:
    """Name the rows (last-but-one dim) that differ, for 2-D+ results."""
    if got.dim() < 2:
        idx = [i for i in range(got.shape[0]) if not close(got[i], want[i], tol)] if got.dim() == 1 else []
        return f" (entries {idx[:8]} differ)" if idx else ""
    g, w = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    bad = [i for i in range(g.shape[0]) if not close(g[i], w[i], tol)]
    rows = got.shape[-2]
    if got.dim() == 2:
        return f" (rows {bad[:8]} differ, e.g. row {bad[0]}: got {_fmt(g[bad[0]])}, expected {_fmt(w[bad[0]])})" if bad else ""
    where = [(i // rows, i % rows) for i in bad[:4]]
    return f" ((batch, row) {where} differ)" if bad else ""


def _fmt(t: torch.Tensor, n: int = 6) -> str:
    vals = [f"{v:.4f}" for v in t.flatten()[:n].tolist()]
    return "[" + ", ".join(vals) + (", ...]" if t.numel() > n else "]")


def error_message(got: Any) -> str | None:
    """The message for a result that is an error raised by the learner's code."""
    if not (isinstance(got, dict) and "__error__" in got):
        return None
    if got["__error__"].startswith("NotImplementedError"):
        return "not written yet: replace `raise NotImplementedError()` with your code"
    return f"it raised {got['__error__']}"


def tensor_message(got: Any, want: torch.Tensor, mistakes: dict[str, Any] | None = None,
                   tol: float = DEFAULT_TOL, allow_number: bool = False, numpy: bool = False) -> str | None:
    """None when `got` matches `want`; otherwise a message naming what is wrong.

    `mistakes` maps a message ("you computed cosine similarity, not the dot product") to the
    value that mistake produces on the same input; a match names the mistake.
    """
    if error_message(got):
        return error_message(got)
    if numpy and not (isinstance(got, dict) and "__ndarray__" in got):
        return f"expected a NumPy array, got {describe(got)}"
    g = _as_tensor(got)
    if g is None:
        return f"expected a tensor of shape {_shape(want)}, got {describe(got)}"
    if not isinstance(got, torch.Tensor) and not numpy and not (allow_number and want.dim() == 0):
        return f"expected a torch tensor of shape {_shape(want)}, got {describe(got)}"
    if g.is_complex() or g.dtype == torch.bool:
        return f"expected a floating-point tensor, got dtype {str(g.dtype).replace('torch.', '')}"
    for message, value in (mistakes or {}).items():
        mv = _as_tensor(value)
        if mv is not None and close(g, mv, tol) and not close(mv, want, tol):
            return message
    if _shape(g) != _shape(want):
        hint = ""
        if g.dim() == want.dim() + 1:
            hint = " — an extra dimension: did you forget to sum or to reduce?"
        elif g.dim() + 1 == want.dim():
            hint = " — a dimension is missing: did you sum over too many axes?"
        elif g.dim() >= 2 and _shape(g.transpose(-2, -1)) == _shape(want):
            hint = " — the last two dimensions are swapped"
        return f"expected shape {_shape(want)}, got {_shape(g)}{hint}"
    if torch.isnan(g).any() and not torch.isnan(want).any():
        return "the result contains NaN (a 0/0, an inf - inf, or an overflow before the subtraction?)"
    if torch.isinf(g).any() and not torch.isinf(want).any():
        return "the result contains inf (an overflow, e.g. exp of a large number?)"
    if close(g, want, tol):
        return None
    if g.dim() >= 2 and g.shape[-1] == g.shape[-2] and close(g.transpose(-2, -1), want, tol):
        return "the values are right but transposed: rows and columns are swapped"
    return "values differ from the expected ones" + _where_rows_differ(g.double(), want.double(), tol)


def exact_message(got: Any, want: Any, mistakes: dict[str, Any] | None = None) -> str | None:
    """For ints, bools, strings, lists and integer tensors: equality, with mistakes named."""
    if error_message(got):
        return error_message(got)
    for message, value in (mistakes or {}).items():
        if _equal(got, value) and not _equal(value, want):
            return message
    if _equal(got, want):
        return None
    return f"expected {describe(want)}, got {describe(got)}"


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


def _judge_tensor(got, want, mistakes, tol):
    return tensor_message(got, want, mistakes, tol)


def _judge_number(got, want, mistakes, tol):
    """A 0-d result where a plain Python number is accepted too."""
    return tensor_message(got, want, mistakes, tol, allow_number=True)


def _judge_numpy(got, want, mistakes, tol):
    """NumPy results: a tuple of arrays, or one array."""
    if error_message(got):
        return error_message(got)
    if isinstance(want, tuple):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"expected a tuple of {len(want)} NumPy arrays, got {describe(got)}"
        return _first(tensor_message(g, w["__ndarray__"], _pick(mistakes, i), tol, numpy=True)
                      for i, (g, w) in enumerate(zip(got, want)))
    return tensor_message(got, want["__ndarray__"], mistakes, tol, numpy=True)


def _judge_tuple(got, want, mistakes, tol):
    """A tuple of tensors, such as (weights, context): each part compared in turn."""
    if error_message(got):
        return error_message(got)
    if not isinstance(got, (tuple, list)) or len(got) != len(want):
        return f"expected a tuple of {len(want)} tensors, got {describe(got)}"
    for i, (g, w) in enumerate(zip(got, want)):
        known = _pick(mistakes, i)
        msg = tensor_message(g, w, known, tol)
        if msg:
            return msg if msg in known else f"part {i} of the returned tuple: {msg}"
    return None


def _judge_exact(got, want, mistakes, tol):
    return exact_message(got, want, mistakes)


def _judge_float(got, want, mistakes, tol):
    """A Python float within a relative tolerance `tol` (a fraction, e.g. 0.1 for 10%)."""
    if error_message(got):
        return error_message(got)
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return f"expected a Python float, got {describe(got)} (use .item() to turn a tensor into a number)"
    if not math.isfinite(got):
        return f"expected a finite number, got {got}"
    for message, value in (mistakes or {}).items():
        if abs(got - value) <= tol * abs(value) and abs(value - want) > tol * abs(want):
            return message
    if abs(got - want) <= tol * abs(want):
        return None
    return f"expected about {want:.4g}, got {got:.4g}"


def _judge_frequencies(got, want, mistakes, tol):
    """Sampling checks: `got` counts how often each token was drawn (shape (..., V)), `want`
    holds the true probabilities. Passes when every token with probability 0 was never drawn
    and the total variation distance between frequencies and probabilities is at most `tol`."""
    if error_message(got):
        return error_message(got)
    if not isinstance(got, torch.Tensor) or _shape(got) != _shape(want):
        return f"expected counts of shape {_shape(want)}, got {describe(got)}"
    freq = got.double() / got.double().sum(-1, keepdim=True).clamp_min(1)
    for message, value in (mistakes or {}).items():
        if _shape(value) == _shape(want) and _tv(freq, value) <= tol and _tv(value, want) > 2 * tol:
            return message
    drawn_impossible = (got > 0) & (want == 0)
    if drawn_impossible.any():
        token = drawn_impossible.nonzero()[0].tolist()
        return f"token {token[-1]} was sampled although it should have been filtered out (probability 0)"
    distance = _tv(freq, want)
    if distance > tol:
        return f"the sampled frequencies are far from the expected probabilities (total variation {distance:.3f})"
    return None


def _tv(p: torch.Tensor, q: torch.Tensor) -> float:
    """Largest total variation distance between two (batches of) distributions."""
    return (0.5 * (p.double() - q.double()).abs().sum(-1)).max().item()


def _pick(mistakes: dict[str, Any] | None, i: int) -> dict[str, Any]:
    """Mistakes for the i-th part of a tuple result: a mistake value may itself be a tuple."""
    out = {}
    for message, value in (mistakes or {}).items():
        if isinstance(value, (tuple, list)):
            if i < len(value) and value[i] is not None:
                out[message] = value[i]
        elif i == 0:
            out[message] = value
    return out


def _first(messages) -> str | None:
    return next((m for m in messages if m), None)


# Judges are looked up by name so that a stored self-check can name its judge.
JUDGES: dict[str, Callable[[Any, Any, dict | None, float], str | None]] = {
    "tensor": _judge_tensor,
    "number": _judge_number,
    "numpy": _judge_numpy,
    "tuple": _judge_tuple,
    "exact": _judge_exact,
    "float": _judge_float,
    "frequencies": _judge_frequencies,
}
