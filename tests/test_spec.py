"""The specification format of hidden checks (grader/spec.py) and the inputs they share
(grader/inputs.py)."""
from __future__ import annotations

import ast
import inspect

import torch

import grader.inputs
from grader.spec import Case, Mistake, Number, Spec, attempt, collect, evaluate, run

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
