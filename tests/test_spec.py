"""The specification format of hidden checks (grader/spec.py) and the inputs they share
(grader/inputs.py)."""
from __future__ import annotations

import ast
import inspect

import torch

import grader.inputs
from grader.spec import Case, Number, Spec, attempt, collect, evaluate, run

REGION = '''
import torch
from grader.spec import Case, Mistake, Number, Spec, run


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

    assert evaluate(spec, plus_half) == "double (a vector): you added instead of multiplying"
    assert evaluate(spec, lambda x: x * 2) is None


def test_learner_errors_reach_the_judge_as_messages():
    def broken(x):
        raise ValueError("no")

    assert attempt(broken, 1) == {"__error__": "ValueError: no"}
    assert Number()(attempt(broken, 1), torch.tensor(1.0), []) == "it raised ValueError: no"
    spec = Spec("double", broken, lambda x: x, examples=lambda: [Case("one", x=torch.tensor(1.0))])
    assert evaluate(spec) == "double (one): it raised ValueError: no"


def test_run_raises_the_failure_under_plain_nbgrader():
    spec = Spec("double", lambda x: x, lambda x: x * 2, examples=lambda: [Case("one", x=torch.tensor(1.0))])
    try:
        run(spec)
    except AssertionError as failure:
        assert "double (one)" in str(failure)
    else:
        raise AssertionError("run() let a wrong answer pass")


# What the exercises compute: none of it may appear in the shared inputs.
ANSWERS = {"softmax", "log_softmax", "matmul", "bmm", "einsum", "mm", "mv", "dot", "inner", "layer_norm", "gelu",
           "scaled_dot_product_attention", "cross_entropy", "multinomial", "cumsum", "tril", "triu",
           "masked_fill", "normalize", "cosine_similarity", "var", "mean", "MultiheadAttention", "exp"}


def test_the_shared_inputs_hold_no_reference_answer():
    tree = ast.parse(inspect.getsource(grader.inputs))
    operators = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)]
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
           {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    imports = {alias.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
               for alias in n.names} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not operators, "grader/inputs.py multiplies matrices"
    assert not used & ANSWERS, f"grader/inputs.py computes {sorted(used & ANSWERS)}"
    assert imports <= {"__future__", "annotations", "math", "torch"}, imports


def test_dropout_seen_records_what_dropout_is_applied_to_however_the_calls_are_split():
    from torch import nn
    from torch.nn import functional as F

    from grader.spec import dropout_seen

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

    from grader.compare import error_message
    from grader.spec import build

    source = "def sample(x):\n    raise RuntimeError('bad probabilities')\ndef generate(x):\n    return sample(x)\n"
    scope: dict = {}
    exec(compile(source, "<learner cell>", "exec"), scope)  # a notebook cell: no file on disk
    assert error_message(attempt(scope["generate"], 1)) == "it raised RuntimeError in sample: bad probabilities"

    class Wrong(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Linear(2, 2)

    message = error_message(attempt(build, Wrong, {"W_query.weight": torch.zeros(2, 2)}))
    assert message.startswith("Wrong's parameter names or shapes are not the ones the exercise asks for")
    assert "missing: W_query.weight (2, 2)" in message and "raised" not in message
