"""Hidden checks written as specifications.

A hidden check is a `Spec` with four parts:

1. `examples` and `cases` make the inputs: fixed examples (the ones the notebook prints) and
   seeded random cases of several shapes, each a `Case` with a label and named fields;
2. `call` calls the learner's code on one input and returns what it gave. It is the only part
   that touches learner code, and it must be a named `def` that uses nothing but its arguments,
   the notebook's names and the hidden region's imports: the grader ships its source, alone,
   into the learner's process (`python -m grader release` checks this);
3. `oracle` computes the expected value (PyTorch built-ins or small reference code), and
   `mistakes` (optional) yields `Mistake(message, value)` for the values known mistakes give;
4. `judge` (a judge of `grader.checks.compare`, e.g. `Tensor(steps=256)`) compares the two.

Each part receives the case's fields its signature names. The hidden region of a test cell
ends with `run(SPEC, ...)`. Under plain `nbgrader autograde` that runs all four parts in the
notebook's kernel. Under `python -m grader grade`, `collect` reads the specs handed to `run`
without running them: the grader makes the inputs, sends them with the `call` source into the
notebook's process (`grader.grading.harness`), takes back plain tensors and numbers, and runs the
oracle and the comparison in its own process, where learner code cannot reach the verdict.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from . import wire
from .compare import Crash, Exact, Float, Frequencies, Judge, Mistake, NotWritten, Number, Numpy, Several, Tensor, Tuple
from .i18n import CHINESE, current, say
from .wire import to_plain

__all__ = ["Case", "Spec", "Mistake", "raised", "run", "attempt", "load_params", "build", "dropout_seen", "forbid",
           "NotAsAsked", "CheckFailed", "DropoutLog",
           "Tensor", "Number", "Numpy", "Tuple", "Exact", "Float", "Frequencies"]


class Case:
    """One input of a check: a label the learner reads, and named fields. `call`, the oracle
    and the mistakes each receive the fields their signature names (all of them with **kw).

        Case("batched, T=1", x=torch.randn(2, 1, 4, generator=g), num_heads=2)
    """

    def __init__(self, label: str, /, **fields: Any):
        self.label = label
        self.fields = fields

    def arguments(self, fn: Callable[..., Any]) -> tuple[tuple, dict[str, Any]]:
        """The positional and keyword arguments with which `fn` receives this case: the fields
        its signature names, by name."""
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return (), dict(self.fields)
        return (), {p.name: self.fields[p.name] for p in params if p.name in self.fields}

    def __repr__(self) -> str:
        return f"Case({self.label!r}, {', '.join(self.fields)})"


@dataclass
class Spec:
    name: str                                                   # contract name checked, e.g. "dot_product"
    call: Callable[..., Any]                                     # learner side: runs learner code
    oracle: Callable[..., Any]                                   # grader side: the expected value
    examples: Callable[[], list[Case]] = lambda: []              # fixed inputs, also used by self-checks
    cases: Callable[[torch.Generator], list[Case]] = lambda g: []  # seeded random inputs
    mistakes: Callable[..., Iterable[Mistake]] | None = None     # grader side: the values of known mistakes
    judge: Judge = field(default_factory=Tensor)                 # how to compare (grader.checks.compare)
    seed: int = 0

    def all_cases(self) -> list[Case]:
        generator = torch.Generator().manual_seed(self.seed)
        return list(self.examples()) + list(self.cases(generator))


def raised(error: str) -> wire.ErrorValue:
    """A known mistake's value when the mistake raises instead of returning: the start of the
    error's text as the learner's code raises it, "ValueError: matmul" (see `compare.known_crash`).

        yield Mistake("the weights used transposed ...", raised("ValueError: matmul"))
    """
    return wire.error(error)


class CheckFailed(AssertionError):
    """A hidden or self-check failed; the message says what is wrong."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback, so the notebook, nbgrader's Validate and
        its feedback show the message alone, not the grader's insides above it."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class NotAsAsked(ValueError):
    """Raised by a check's glue code (not by the learner's code) when the learner's object does
    not have the form the exercise asks for, e.g. other parameter names. Reported as its message
    alone, without "it raised"."""


# Code objects of the checks' own glue: an error is located in learner code, never here.
_GLUE_FILES = ("<self-check>", "<check call>", "<hidden checks>")
# Code objects that are not a function the learner named.
_ANONYMOUS = ("<module>", "<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


def _in_notebook(filename: str) -> bool:
    """Whether code compiled from `filename` was written in the notebook. A cell has no file on
    disk: IPython names it <ipython-input-...> or, in ipykernel, /tmp/ipykernel_<pid>/<hash>.py,
    a file that only its debugger writes out."""
    import os

    if filename in _GLUE_FILES or filename.startswith("<frozen "):
        return False
    return os.path.basename(os.path.dirname(filename)).startswith("ipykernel_") or not os.path.exists(filename)


def _learner_frame(exc: BaseException) -> tuple[str, int | None] | None:
    """Where in the learner's code `exc` was raised: the innermost frame of a function written in
    the notebook, as (its qualified name, e.g. "KVCache.__init__", the line it was at, counted
    in its cell), or None when the error came from elsewhere."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if _in_notebook(code.co_filename) and code.co_name not in _ANONYMOUS:
            found = code.co_qualname.replace(".<locals>", ""), tb.tb_lineno
        tb = tb.tb_next
    return found


def error_value(exc: BaseException) -> wire.ErrorValue:
    """An error as the judges read it: {"__error__": "ValueError: text"}, with "where" (the
    learner function it was raised in, by qualified name) and "line" (its line in its cell)
    when it was raised inside the learner's code; {"__error__": "NotAsAsked: text"} for a check's
    own NotAsAsked. The judges word it in the learner's language (`compare.error_message`)."""
    text = str(exc).strip().splitlines()
    found = None if isinstance(exc, NotAsAsked) else _learner_frame(exc)
    return wire.error(f"{type(exc).__name__}: {text[0][:600] if text else ''}".rstrip(": "), *(found or ()))


def clone_args(value: Any) -> Any:
    """A deep copy of tensors in an input, so learner code that edits its input in place
    cannot change what the oracle sees."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone_args(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_args(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence warnings: nbgrader scores a test cell 0 when anything reaches stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call learner code and return its result as plain data, or the error it raised as the
    judges read it ("it raised ValueError: ..."). The one path by which learner errors reach a
    verdict: the grader wraps every `call` in it, and a `call` that returns several parts uses
    it for a part that may raise on its own, so the other parts are still judged."""
    try:
        with quiet():
            return to_plain(fn(*args, **kwargs))
    except (Exception, SystemExit) as exc:  # the learner's code may raise anything; report it
        return error_value(exc)


def load_call(source: str, name: str, namespace: dict[str, Any], filename: str = "<check call>") -> Callable[..., Any]:
    """The function `name` defined by `source`, a check's learner-side `call` (its imports and its
    `def`, as `learner_side_source` makes it), run on a copy of the learner's `namespace`: the
    learner's names resolve, the learner's globals stay untouched. `filename` (one of
    _GLUE_FILES) keeps errors located in learner code, not here."""
    scope = dict(namespace)
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


def call_learner(fn: Callable[..., Any], case: Case) -> Any:
    """Run the learner-side `call` on one case and return plain data (errors included)."""
    args, kwargs = case.arguments(fn)
    return attempt(fn, *clone_args(args), **clone_args(kwargs))


def call_inputs(spec: Spec, cases: list[Case]) -> list[tuple[str, tuple, dict]]:
    """What the learner's process receives for each case: (label, args, kwargs) of `call`."""
    return [(case.label, *case.arguments(spec.call)) for case in cases]


# --- the verdict ----------------------------------------------------------------------------

def failure_text(name: str, label: str, message: str) -> str:
    """What a learner reads when a check fails: the name checked, what is wrong, then the case
    (last: a label can be long, and the verdict must show first). Code not written yet gets no
    case, since none was looked at; when the function that still raises NotImplementedError
    belongs to another exercise than `name` (`KVCache.__init__` under a check of
    `cached_attention`), the message names that exercise."""
    if isinstance(message, NotWritten):
        exercise = message.function.split(".")[0]
        if exercise and exercise != name:
            return say("{name}: an earlier exercise, `{exercise}`, is not written yet (it still raises "
                       "NotImplementedError): write it and run its cell first", name=name, exercise=exercise)
        return say("{name}: {message}", name=name, message=message)
    return say("{name}: {message} (case: {label})", name=name, label=label, message=message)


def _run(fn: Callable[..., Any], case: Case) -> Any:
    args, kwargs = case.arguments(fn)
    return fn(*clone_args(args), **clone_args(kwargs))


def expected(spec: Spec, case: Case) -> tuple[Any, list[Mistake]]:
    """The oracle's value and the known mistakes' values for one case, as plain data."""
    with quiet(), torch.no_grad():
        want = _run(spec.oracle, case)
        found = _run(spec.mistakes, case) if spec.mistakes else ()
        mistakes = [Mistake(message, to_plain(value)) for message, value in found]
    return to_plain(want), mistakes


def _failure(spec: Spec, case: Case, got: Any) -> tuple[str, str | None] | None:
    """(message, the known mistake it names or None), or None when `got` is right."""
    want, mistakes = expected(spec, case)
    message = spec.judge(got, want, mistakes)
    if message is None:
        return None
    return failure_text(spec.name, case.label, message), named_mistake_of(message, mistakes)


def named_mistake_of(message: str, mistakes: list[Mistake]) -> str | None:
    """The known mistake a judge's message names (several, for a Several), or None for an error
    or a bare difference: what `most_telling` ranks failures by."""
    if isinstance(message, Crash):
        return message.mistake
    return message if isinstance(message, Several) or message in {m.message for m in mistakes} else None


def judge_all(spec: Spec, cases: list[Case], results: list[Any]) -> tuple[str, str | None] | None:
    """The verdict over all cases: None when all pass; else (message, mistake) for the first
    failure that names one known mistake, or failing that one that names several (a case where
    different mistakes give the same values), or the first failure (mistake None)."""
    failures = [f for f in (_failure(spec, c, r) for c, r in zip(cases, results)) if f]
    return most_telling(failures) if failures else None


def most_telling(failures: list[tuple[str, str | None]]) -> tuple[str, str | None]:
    """Of (message, named mistake or None) failures, the first that names one known mistake, else
    the first that names several, else the first: the one that says most of what was done."""
    return next((f for f in failures if f[1] and not isinstance(f[1], Several)),
                next((f for f in failures if f[1]), failures[0]))


# --- running specs ---------------------------------------------------------------------------

def evaluate(spec: Spec, call: Callable[..., Any] | None = None) -> str | None:
    """Run one spec in this process; None when every case passes, else its failure message."""
    cases = spec.all_cases()
    failure = judge_all(spec, cases, [call_learner(call or spec.call, case) for case in cases])
    return failure[0] if failure else None


def run(*specs: Spec) -> None:
    """Run hidden checks in this process: what plain `nbgrader autograde` does. The course's
    grader never calls it: it collects the specs (see `collect`) and runs them apart."""
    for spec in specs:
        message = evaluate(spec)
        if message:
            raise CheckFailed(message) from None


def _is_run(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "run")


def collect(source: str) -> list[Spec]:
    """The specs a hidden-test source hands to `run(...)`, without running any check: the
    region runs with each top-level `run(A, B)` read as the list [A, B]."""
    tree = ast.parse(source)
    body = []
    for node in tree.body:
        if _is_run(node):
            specs = ast.List(elts=list(node.value.args), ctx=ast.Load())
            node = ast.Expr(ast.Call(ast.Attribute(ast.Name("__specs__", ast.Load()), "extend", ast.Load()),
                                     [specs], []))
        body.append(node)
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    namespace: dict[str, Any] = {"__name__": "hidden_checks", "__specs__": []}
    with quiet():
        exec(compile(module, "<hidden checks>", "exec"), namespace)
    return namespace["__specs__"]


def learner_side_source(source: str, spec: Spec) -> str:
    """The part of a hidden-test source that runs in the learner's process: the region's
    imports and the `call` function of `spec`, nothing else (no oracle, no mistakes)."""
    tree = ast.parse(source)
    name = spec.call.__name__
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(defs) != 1:
        raise ValueError(f"the hidden checks of {spec.name!r} must define exactly one top-level "
                         f"`def {name}` (found {len(defs)}); lambdas cannot be shipped")
    parts = [ast.get_source_segment(source, n) for n in imports + defs]
    return "\n".join(p for p in parts if p)


def call_reads(source: str, spec: Spec) -> set[str]:
    """The global names the `call` of `spec` reads (nested functions and comprehensions
    included), builtins left out."""
    import builtins
    import symtable

    table = next(t for t in symtable.symtable(source, "<hidden checks>", "exec").get_children()
                 if t.get_name() == spec.call.__name__ and t.get_type() == "function")
    names: set[str] = set()
    todo = [table]
    while todo:
        scope = todo.pop()
        names |= {name for name in scope.get_identifiers() if scope.lookup(name).is_global()}
        todo += scope.get_children()
    return {name for name in names if not hasattr(builtins, name)}


def region_imports(source: str) -> set[str]:
    """The names the region's top-level imports bind."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


# --- parameters of learner modules -----------------------------------------------------------

def load_params(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """Copy reference parameters into a learner's module by name (parameters only: buffers such
    as a causal mask are the learner's own and are tested, not overwritten). A mismatch raises
    a message listing the expected and the found names and shapes."""
    found = {name: tuple(p.shape) for name, p in module.named_parameters()}
    expected = {name: tuple(t.shape) for name, t in state.items()}
    if found != expected:
        missing = sorted(set(expected) - set(found))
        extra = sorted(set(found) - set(expected))
        wrong = sorted(n for n in set(found) & set(expected) if found[n] != expected[n])
        parts = structure_hints(module, missing)   # first: what to do, before the listings
        if missing:
            parts.append(say("missing: {names}", names=", ".join(f"{n} {expected[n]}" for n in missing)))
        if extra:
            hint = (say(" (a mask belongs in register_buffer, not nn.Parameter)")
                    if any("mask" in n for n in extra) else "")
            parts.append(say("unexpected: {names}{hint}", names=", ".join(f"{n} {found[n]}" for n in extra), hint=hint))
        if wrong:
            parts.append(say("wrong shape: {names}", names=", ".join(
                say("{name} is {found}, expected {expected}", name=n, found=found[n],
                    expected=expected[n]) for n in wrong)))
        parts.append(say("the exercise asks for: {names}", names=", ".join(f"{n} {s}" for n, s in expected.items())))
        raise NotAsAsked(say("{module}'s parameter names or shapes are not the ones the exercise asks for; {parts}",
                             module=type(module).__name__, parts=("；" if current() == CHINESE else "; ").join(parts)))
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
    return module


def structure_hints(module: torch.nn.Module, missing: list[str]) -> list[str]:
    """What to do where a missing parameter's path meets something PyTorch does not register: a
    plain tensor (not an nn.Parameter), a Python list of modules (not an nn.ModuleList), or one
    module held several times (named once, so the later places lack parameters)."""
    hints = []
    for name in missing:
        owner, path = module, name.split(".")
        for depth, part in enumerate(path):
            value = getattr(owner, part, None) if not part.isdigit() else None
            if part.isdigit() and isinstance(owner, (list, tuple, torch.nn.ModuleList)) and int(part) < len(owner):
                value = owner[int(part)]
            where = ".".join(path[:depth + 1])
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                hint = say("{name} is a plain tensor: make it an nn.Parameter, so that the model owns and trains it",
                           name=where)
            elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.nn.Module) for v in value):
                hint = say("{name} is a Python {kind}: hold its modules in an nn.ModuleList, so that PyTorch sees "
                           "their parameters", name=where, kind=type(value).__name__)
            elif isinstance(value, torch.nn.ModuleList) and len({id(m) for m in value}) < len(value):
                hint = say("{name} holds the same module more than once: make a new module for each place (one "
                           "per head, per block)", name=where)
            elif isinstance(value, (torch.nn.Module, list, tuple)):
                owner = value
                continue
            else:
                break
            if hint not in hints:
                hints.append(hint)
            break
    for prefix, sub in module.named_modules():   # modules kept in a list under another name
        for attr, value in vars(sub).items():
            if isinstance(value, (list, tuple)) and any(isinstance(v, torch.nn.Module) for v in value):
                hint = say("{name} is a Python {kind}: hold its modules in an nn.ModuleList, so that PyTorch sees "
                           "their parameters", name=f"{prefix}.{attr}" if prefix else attr, kind=type(value).__name__)
                if hint not in hints:
                    hints.append(hint)
    return hints


def build(cls: type, state: dict[str, torch.Tensor], *args: Any, train: bool = False, **kwargs: Any) -> Any:
    """The learner's module `cls(*args, **kwargs)`, built after a fixed seed, with the reference
    parameters `state` copied in (see `load_params`) and in train or eval mode."""
    torch.manual_seed(0)
    module = cls(*args, **kwargs)
    load_params(module, state)
    return module.train(train)


class DropoutLog(list):
    """What dropout was applied to while learner code ran: one tensor per call made with
    training on and p > 0 (see `dropout_seen`)."""

    def values(self) -> torch.Tensor:
        """Every value dropout received, sorted: the same however the calls were split up or
        ordered (one call on all heads, or one per head in a loop)."""
        if not self:
            return torch.zeros(0, dtype=torch.float64)
        return torch.cat([t.detach().double().reshape(-1) for t in self]).sort().values


@contextlib.contextmanager
def dropout_seen() -> Iterator[DropoutLog]:
    """While learner code runs, dropout (`F.dropout`, `nn.Dropout`, `torch.dropout`, and the
    `dropout_p` of `F.scaled_dot_product_attention`, which drops the attention weights) passes its
    input through unchanged and records it when it would have dropped (training on, p > 0). A
    check can then ask, without depending on random draws, which tensors dropout was applied to
    and whether it acted at all: in train mode, the output equals the eval-mode one and the log
    holds the tensors the contract puts dropout on; in eval mode the log is empty."""
    import torch.nn.functional as F

    log = DropoutLog()

    def seen(input, p=0.5, training=True, inplace=False):
        if training and p > 0:
            log.append(input.detach().clone())
        return input

    sdpa = F.scaled_dot_product_attention

    def sdpa_seen(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        if dropout_p > 0:  # the weights it would drop: the same call with the identity as values
            eye = torch.eye(key.shape[-2], dtype=value.dtype, device=value.device)
            seen(sdpa(query, key, eye.expand(*value.shape[:-2], -1, -1), attn_mask, 0.0, is_causal, **kwargs),
                 dropout_p)
        return sdpa(query, key, value, attn_mask, 0.0, is_causal, **kwargs)

    saved = [(F, "dropout", F.dropout), (torch, "dropout", torch.dropout), (F, "scaled_dot_product_attention", sdpa)]
    try:
        F.dropout = seen
        torch.dropout = lambda input, p, train: seen(input, p, train)
        F.scaled_dot_product_attention = sdpa_seen
        yield log
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@contextlib.contextmanager
def forbid(*names: str, reason: str | None = None) -> Iterator[None]:
    """While learner code runs, make the named library functions raise (e.g. "torch.dot",
    "torch.Tensor.__matmul__"): for exercises whose point is to build them by hand. Names the
    notebook bound to them (`from torch import dot`, `_dot = torch.dot`) are blocked too. A
    teaching aid that names the shortcut, not an enforcement: a copy made another way (inside
    a closure, a default argument) is not found."""
    import importlib
    import sys

    reason = reason or say("this exercise asks you to write it yourself")
    saved = []
    notebook = vars(sys.modules["__main__"])   # the kernel's namespace: the learner's globals
    try:
        for name in names:
            owner_name, attr = name.rsplit(".", 1)
            head, *rest = owner_name.split(".")
            owner = importlib.import_module(head)
            for part in rest:
                owner = getattr(owner, part)

            def blocked(*args, _name=name, **kwargs):
                raise RuntimeError(say("{name} is not allowed here: {reason}", reason=reason,
                                       name=_name.replace("__matmul__", say("__matmul__ (the @ operator)"))))

            original = owner.__dict__.get(attr, getattr(owner, attr))
            saved.append((owner, attr, original))
            setattr(owner, attr, blocked)
            for alias in [k for k, v in notebook.items() if v is original and not k.startswith("__")]:
                saved.append((notebook, alias, original))
                notebook[alias] = blocked
        yield
    finally:
        for owner, attr, original in reversed(saved):
            if isinstance(owner, dict):
                owner[attr] = original
            else:
                setattr(owner, attr, original)
