"""The values that cross a process boundary: what a learner's code returned, as plain data.

A check's `call` runs in the learner's process and its result goes to the judge in another: the
grader's (`python -m grader grade`, through torch.save and a file) or the stored examples'
(`grader/fixtures/*.json`, written by `python -m grader release`). Both sides speak this format:

- `Plain`: an exact torch.Tensor (detached, on the CPU, no subclass), a Python scalar or string,
  or lists, tuples and dicts with string keys of these;
- `ArrayValue`, {"__ndarray__": tensor}: a NumPy array, kept apart from a tensor so that a judge
  can say which one the exercise asks for;
- `ErrorValue`, {"__error__": "ValueError: text", "where": ..., "line": ...}: an exception, or a
  value that cannot cross, in place of a result; the judges word it (`compare.error_message`).

`to_plain` makes these on the learner's side; `sanitize` checks, on the judge's side, that a value
read back is no more than this. `to_json` and `from_json` write them into the fixtures' JSON, where
a tensor is {"__tensor__": values, "dtype", "shape"} and a tuple {"__tuple__": items}.
"""
from __future__ import annotations

from typing import Any, NotRequired, TypeAlias, TypedDict

import torch

from .i18n import say

ERROR = "__error__"
ARRAY = "__ndarray__"
TENSOR = "__tensor__"   # in JSON only
TUPLE = "__tuple__"     # in JSON only

ErrorValue = TypedDict("ErrorValue", {ERROR: str, "where": NotRequired[str], "line": NotRequired[int]})
ArrayValue = TypedDict("ArrayValue", {ARRAY: torch.Tensor})
# What crosses: a learner's result as plain data (the containers hold Plain values again).
Plain: TypeAlias = "torch.Tensor | bool | int | float | str | None | list | tuple | dict[str, Any]"

_SCALARS = (bool, int, float, str, type(None))


def error(text: str, where: str | None = None, line: int | None = None) -> ErrorValue:
    """An error in place of a result: its text ("ValueError: no"), and where in the learner's
    code it was raised (a function's qualified name, its line in its cell) when known."""
    value: ErrorValue = {ERROR: text}
    if where:
        value["where"] = where
        if isinstance(line, int) and line > 0:
            value["line"] = line
    return value


def is_error(x: Any) -> bool:
    return isinstance(x, dict) and ERROR in x


def is_array(x: Any) -> bool:
    return isinstance(x, dict) and ARRAY in x


def to_plain(x: Any, depth: int = 0) -> Plain | ArrayValue | ErrorValue:
    """A learner's return value as plain data: tensors exact (no subclass, detached, on the CPU),
    scalars and strings as they are, lists/tuples/dicts of them; a NumPy array as an ArrayValue;
    anything else as an ErrorValue that names its type."""
    if depth > 4:
        return error("the result is nested too deeply")
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if type(t) is not torch.Tensor:
            t = t.as_subclass(torch.Tensor)
        return t.cpu().clone()
    if type(x) in _SCALARS:
        return x
    if type(x).__module__ == "numpy":
        import numpy as np
        if isinstance(x, np.ndarray):
            if x.dtype == object:
                return error("a NumPy array of Python objects")
            return {ARRAY: torch.from_numpy(np.array(x, copy=True))}
        if isinstance(x, np.generic):
            return x.item()
    if type(x) in (list, tuple) and len(x) <= 10_000:
        items = [to_plain(v, depth + 1) for v in x]
        return tuple(items) if type(x) is tuple else items
    if type(x) is dict and all(type(k) is str for k in x):
        return {k: to_plain(v, depth + 1) for k, v in x.items()}
    return error(say("returned an object of type {kind}", kind=type(x).__name__))


def sanitize(x: Any, max_values: int) -> Any:
    """Check that a value read back from the learner's process is plain data, as `to_plain`
    makes it: anything else (a forged file) becomes an ErrorValue; a structure of more than
    `max_values` values (a pickle of shared references expands without end) raises ValueError."""
    budget = [max_values]

    def walk(x: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueError(f"the results hold more than {max_values} values")
        if depth > 5:
            return error("the result is nested too deeply")
        if type(x) is torch.Tensor or type(x) in _SCALARS:
            return x
        if type(x) in (list, tuple):
            return type(x)(walk(v, depth + 1) for v in x)
        if isinstance(x, dict) and all(type(k) is str for k in x):
            return {k: walk(v, depth + 1) for k, v in x.items()}
        return error(f"unexpected value of type {type(x).__name__}")

    return walk(x, 0)


def to_json(value: Any) -> Any:
    """Plain data as JSON: a tensor as {"__tensor__": values, "dtype", "shape"}, a tuple as
    {"__tuple__": items}."""
    if isinstance(value, torch.Tensor):
        return {TENSOR: value.tolist(), "dtype": str(value.dtype).removeprefix("torch."),
                "shape": list(value.shape)}
    if isinstance(value, tuple):
        return {TUPLE: [to_json(v) for v in value]}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def from_json(value: Any) -> Any:
    """The inverse of `to_json`."""
    if isinstance(value, dict):
        if TENSOR in value:
            dtype = getattr(torch, value["dtype"])
            return torch.tensor(value[TENSOR], dtype=dtype).reshape(value["shape"])
        if TUPLE in value:
            return tuple(from_json(v) for v in value[TUPLE])
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value
