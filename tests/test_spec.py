"""The specification format of hidden checks (grader/checks/spec.py) and the inputs they share
(grader/checks/inputs.py)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import torch

import grader.checks.inputs
from grader.checks.spec import Case, Number, Spec, attempt, collect, evaluate, run

REGION = '''
import torch
from grader.checks.spec import Case, Mistake, Number, Spec, run


def double_examples():
    return [Case("a vector", x=torch.tensor([1.0, 2.0]), scale=2)]


def call_double(x):
    return double(x)


def double_oracle(x, scale):
    return x.double() * scale


def double_mistakes(x, **fields):
    yield Mistake("you added instead of multiplying", x + 2)
    yield Mistake("you added instead of multiplying", x + 2.5)


DOUBLE = Spec("double", call_double, double_oracle, examples=double_examples, mistakes=double_mistakes)
run(DOUBLE)
'''


def test_collecting_reads_the_specs_handed_to_run_and_runs_no_check():
    # `double` is not defined: running the check would fail, collecting it does not.
    (spec,) = collect(REGION)
    assert spec.name == "double" and isinstance(spec.judge, type(Spec("x", len, len).judge))


def test_each_part_receives_the_fields_its_signature_names():
    case = Case("a vector", x=torch.tensor([1.0]), scale=2)
    assert case.arguments(lambda x: x) == ((), {"x": case.fields["x"]})
    assert case.arguments(lambda x, scale, unused=0: x) == ((), {"x": case.fields["x"], "scale": 2})
    assert case.arguments(lambda **fields: 0) == ((), case.fields)


def test_one_message_may_name_several_wrong_values():
    (spec,) = collect(REGION)

    def plus_half(x):
        return x + 2.5

    assert evaluate(spec, plus_half) == "double: you added instead of multiplying (case: a vector)"
    assert evaluate(spec, lambda x: x * 2) is None


def test_learner_errors_reach_the_judge_as_messages():
    def broken(x):
        raise ValueError("no")

    assert attempt(broken, 1) == {"__error__": "ValueError: no"}   # raised in this file: not the learner's code
    assert Number()(attempt(broken, 1), torch.tensor(1.0), []) == "it raised ValueError: no"
    spec = Spec("double", broken, lambda x: x, examples=lambda: [Case("one", x=torch.tensor(1.0))])
    assert evaluate(spec) == "double: it raised ValueError: no (case: one)"


def test_run_raises_the_failure_under_plain_nbgrader():
    spec = Spec("double", lambda x: x, lambda x: x * 2, examples=lambda: [Case("one", x=torch.tensor(1.0))])
    try:
        run(spec)
    except AssertionError as failure:
        assert str(failure).startswith("double: ") and str(failure).endswith(" (case: one)")
    else:
        raise AssertionError("run() let a wrong answer pass")


# What the exercises compute: none of it may appear in the shared inputs.
ANSWERS = {"softmax", "log_softmax", "matmul", "bmm", "einsum", "mm", "mv", "dot", "inner", "layer_norm", "gelu",
           "scaled_dot_product_attention", "cross_entropy", "multinomial", "cumsum", "tril", "triu",
           "masked_fill", "normalize", "cosine_similarity", "var", "mean", "MultiheadAttention", "exp"}


def test_the_shared_inputs_hold_no_reference_answer():
    tree = ast.parse(inspect.getsource(grader.checks.inputs))
    operators = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)]
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
           {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    imports = {alias.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
               for alias in n.names} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not operators, "grader/checks/inputs.py multiplies matrices"
    assert not used & ANSWERS, f"grader/checks/inputs.py computes {sorted(used & ANSWERS)}"
    assert imports <= {"__future__", "annotations", "math", "torch"}, imports


def test_dropout_seen_records_what_dropout_is_applied_to_however_the_calls_are_split():
    from torch import nn
    from torch.nn import functional as F

    from grader.checks.spec import dropout_seen

    weights = torch.softmax(torch.randn(2, 3, 4, 4), dim=-1)          # (B, H, T, T)
    fused, per_head, in_eval = nn.Dropout(0.5).train(), nn.Dropout(0.5).train(), nn.Dropout(0.5).eval()
    with dropout_seen() as one:
        assert torch.equal(fused(weights), weights)                   # passed through, not dropped
    with dropout_seen() as loop:
        for h in reversed(range(3)):
            per_head(weights[:, h])
    with dropout_seen() as none:
        in_eval(weights)
        F.dropout(weights, 0.5, training=False)
        F.dropout(weights, 0.0)
    assert torch.equal(one.values(), loop.values()) and one.values().shape == (2 * 3 * 4 * 4,)
    assert none.values().shape == (0,)
    with dropout_seen() as always:
        F.dropout(weights, 0.1)                                       # training=True whatever the mode
    assert always.values().shape == (96,)
    q, k, v = torch.randn(3, 2, 5, 4).unbind(0)
    with dropout_seen() as fused_kernel:
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert torch.allclose(fused_kernel.values().float(), torch.softmax(
        (q @ k.mT / 2).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1),
                                   float("-inf")), -1).flatten().sort().values,
        atol=1e-6)
    assert F.dropout(torch.ones(1000), 0.5).eq(0).any()               # restored afterwards


def test_errors_name_the_learner_function_and_a_module_of_another_form_reads_plainly():
    from torch import nn

    from grader.checks.compare import error_message
    from grader.checks.spec import build

    source = "def sample(x):\n    raise RuntimeError('bad probabilities')\ndef generate(x):\n    return sample(x)\n"
    scope: dict = {}
    exec(compile(source, "<learner cell>", "exec"), scope)  # a notebook cell: no file on disk
    assert attempt(scope["generate"], 1) == {"__error__": "RuntimeError: bad probabilities", "where": "sample",
                                             "line": 2}
    assert error_message(attempt(scope["generate"], 1)) == \
        "it raised RuntimeError in sample (line 2 of its cell): bad probabilities"

    class Wrong(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Linear(2, 2)

    message = error_message(attempt(build, Wrong, {"W_query.weight": torch.zeros(2, 2)}))
    assert message.startswith("Wrong's parameter names or shapes are not the ones the exercise asks for")
    assert "missing: W_query.weight (2, 2)" in message and "raised" not in message


# Two exercises of a unit as a learner's kernel holds them: the first one still the stub.
STUBBED = """class KVCache:
    def __init__(self):
        # YOUR CODE HERE
        raise NotImplementedError()

    def append(self, k):
        raise NotImplementedError()


def cached_attention(x):
    cache = KVCache()
    return x
"""
LONG_LABEL = ("keys 0, 1, 2, ..., values their negatives: appends of [2, 1, 1] positions, each (B=1, H=2, t, "
              "head_dim=3); parts: 0 the keys and 1 the values the last append returned, 2 len(cache)")


def _kernel_cell(source: str, tmp_path=None) -> dict:
    """The names a cell defines, compiled as ipykernel compiles one (/tmp/ipykernel_<pid>/<hash>.py);
    with tmp_path, that file exists on disk, as when JupyterLab's debugger has written it out."""
    folder = (tmp_path if tmp_path is not None else Path("/tmp/no-such-folder")) / "ipykernel_4242"
    if tmp_path is not None:
        folder.mkdir()
        (folder / "1234.py").write_text(source)
    scope: dict = {}
    exec(compile(source, str(folder / "1234.py"), "exec"), scope)
    return scope


def test_code_not_written_yet_is_named_by_its_qualified_name_with_no_case(tmp_path):
    scope = _kernel_cell(STUBBED, tmp_path)
    case = Case(LONG_LABEL, x=torch.tensor(1.0))
    assert attempt(scope["KVCache"]) == {"__error__": "NotImplementedError", "where": "KVCache.__init__",
                                         "line": 4}
    spec = Spec("KVCache", lambda: scope["KVCache"](), lambda: 0.0, examples=lambda: [case])
    assert evaluate(spec) == ("KVCache: not written yet: replace `raise NotImplementedError()` in KVCache.__init__ "
                              "with your code, then run that cell (Shift+Enter)")
    # A method of the class checked is the same exercise.
    spec = Spec("KVCache", lambda: object.__new__(scope["KVCache"]).append(1), lambda: 0.0, examples=lambda: [case])
    assert evaluate(spec) == ("KVCache: not written yet: replace `raise NotImplementedError()` in KVCache.append "
                              "with your code, then run that cell (Shift+Enter)")


def test_an_exercise_that_depends_on_one_not_written_yet_names_that_one():
    scope = _kernel_cell(STUBBED)
    spec = Spec("cached_attention", lambda x: scope["cached_attention"](x), lambda x: x,
                examples=lambda: [Case(LONG_LABEL, x=torch.tensor(1.0))])
    assert evaluate(spec) == ("cached_attention: an earlier exercise, `KVCache`, is not written yet (it still "
                              "raises NotImplementedError): write it and run its cell first")


def test_the_verdict_comes_before_the_case_and_an_error_says_its_line_in_the_cell():
    source = "import torch\n\ndef causal_mask(n):\n    ones = tourch.ones(n, n)\n    return ones\n"
    scope = _kernel_cell(source)
    spec = Spec("causal_mask", lambda n: scope["causal_mask"](n), lambda n: torch.ones(n, n),
                examples=lambda: [Case(LONG_LABEL, n=4)])
    assert evaluate(spec) == ("causal_mask: it raised NameError in causal_mask (line 4 of its cell): name 'tourch' "
                              f"is not defined (case: {LONG_LABEL})")
    spec = Spec("causal_mask", lambda n: torch.zeros(n, n), lambda n: torch.ones(n, n),
                examples=lambda: [Case(LONG_LABEL, n=4)])
    assert evaluate(spec).startswith("causal_mask: values differ from the expected ones")
    assert evaluate(spec).endswith(f" (case: {LONG_LABEL})")


def test_a_learner_function_is_named_by_the_innermost_notebook_frame_that_has_a_name():
    source = ("class Head:\n    def forward(self, x):\n        return [self.scale(v) for v in x]\n\n"
              "    def scale(self, v):\n        f = lambda: v / 0\n        return f()\n")
    scope = _kernel_cell(source)
    # Through a comprehension and a lambda to the method that called them; the line is that method's.
    assert attempt(scope["Head"]().forward, [1]) == {"__error__": "ZeroDivisionError: division by zero",
                                                     "where": "Head.scale", "line": 7}
    nested = _kernel_cell("def outer(x):\n    def inner():\n        return x.missing\n    return inner()\n")
    assert attempt(nested["outer"], 1)["where"] == "outer.inner"
