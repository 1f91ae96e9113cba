"""The self-check library says what is wrong, in learner terms, on deliberately wrong values."""
from __future__ import annotations

import json

import pytest
import torch

from grader.checks.compare import (
    Exact,
    Float,
    Frequencies,
    Mistake,
    Number,
    Numpy,
    Tensor,
    Tuple,
    close,
    judge_from_plain,
    judge_to_plain,
    tensor_message,
)
from grader.checks.spec import load_params
from grader.checks.wire import to_plain

WANT = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


def test_right_values_pass_within_float32_error():
    assert tensor_message(WANT + 1e-6, WANT) is None
    assert tensor_message(WANT + 1e-3, WANT) is not None


@pytest.mark.parametrize("got,expected", [
    (WANT.sum(), "expected shape (2, 3), got ()"),
    (WANT[None], "an extra dimension"),
    (WANT[0], "a dimension is missing"),
    (WANT.T, "the last two dimensions are swapped"),
    (WANT.clone().fill_(float("nan")), "contains NaN"),
    (torch.full_like(WANT, float("inf")), "contains inf"),
    (WANT.tolist(), "expected a tensor"),
    ("text", "expected a tensor"),
    (WANT.bool(), "floating-point"),
    ({"__error__": "NotImplementedError"},
     "not written yet: replace `raise NotImplementedError()` with your code, then run that cell (Shift+Enter)"),
    ({"__error__": "NotImplementedError", "where": "sample_next_token", "line": 3},
     "not written yet: replace `raise NotImplementedError()` in sample_next_token with your code, then run that cell"),
    ({"__error__": "RuntimeError: shapes do not match"}, "it raised RuntimeError: shapes do not match"),
    ({"__error__": "RuntimeError: shapes do not match", "where": "attend"},
     "it raised RuntimeError in attend: shapes do not match"),
    ({"__error__": "RuntimeError: shapes do not match", "where": "Head.forward", "line": 4},
     "it raised RuntimeError in Head.forward (line 4 of its cell): shapes do not match"),
])
def test_wrong_values_get_a_message_naming_the_problem(got, expected):
    assert expected in tensor_message(got, WANT)


def test_an_error_names_where_it_was_raised_and_code_not_written_yet_says_to_run_its_cell():
    from grader.checks.compare import NotWritten, error_message

    # An error without a text ends at its location, with no colon after it.
    assert error_message({"__error__": "ValueError", "where": "attend", "line": 2}) == \
        "it raised ValueError in attend (line 2 of its cell)"
    assert error_message({"__error__": "ValueError", "where": "attend"}) == "it raised ValueError in attend"
    # The checks' own NotAsAsked reads as its message alone, wherever it was raised.
    assert error_message({"__error__": "NotAsAsked: other parameter names"}) == "other parameter names"
    # "Not written yet" keeps the function that still raises, for the verdict (spec.failure_text) ...
    stub = error_message({"__error__": "NotImplementedError", "where": "KVCache.__init__", "line": 3})
    assert isinstance(stub, NotWritten) and stub.function == "KVCache.__init__"
    assert "(Shift+Enter)" in stub and "line 3" not in stub
    assert isinstance(error_message({"__error__": "NotImplementedError"}), NotWritten)
    assert not isinstance(error_message({"__error__": "ValueError: no", "where": "f"}), NotWritten)
    # ... also when it is one part of a tuple: no "part 1 of the returned tuple" before it.
    part = Tuple()((WANT, {"__error__": "NotImplementedError", "where": "KVCache.append"}), (WANT, WANT), [])
    assert isinstance(part, NotWritten) and part.function == "KVCache.append" and "part 1" not in part
    assert Tuple()((WANT, {"__error__": "ValueError: no", "where": "f"}), (WANT, WANT), []) == \
        "part 1 of what the check compares: it raised ValueError in f: no"


def test_a_tuple_judge_names_each_part_by_what_it_is_and_keeps_the_names_in_the_fixtures():
    """The tuple is often the check's own bundle (len(cache), the output): its parts are named."""
    judge = Tuple(parts=("len(cache)", "the output"))
    message = judge((torch.tensor(2), WANT + 1), (torch.tensor(2), WANT), [])
    assert message.startswith("the output: ") and "tuple" not in message
    assert judge_from_plain(json.loads(json.dumps(judge_to_plain(judge)))) == judge


def test_transposed_square_result_and_the_rows_that_differ_are_named():
    square = torch.arange(9.0).reshape(3, 3)
    assert "transposed" in tensor_message(square.T, square)
    wrong = square.clone()
    wrong[1] += 1
    assert "rows [1] differ" in tensor_message(wrong, square)


def test_known_mistakes_are_named_and_never_shadow_the_right_answer():
    mistakes = [Mistake("you computed cosine similarity", WANT / 10)]
    assert tensor_message(WANT / 10, WANT, mistakes) == "you computed cosine similarity"
    # A "mistake" that happens to equal the right answer on this input is not reported.
    assert tensor_message(WANT, WANT, [Mistake("same as the answer", WANT.clone())]) is None
    # One message may stand for several wrong values.
    transposed = [Mistake("you transposed a weight", WANT * 2), Mistake("you transposed a weight", WANT * 3)]
    assert tensor_message(WANT * 3, WANT, transposed) == "you transposed a weight"


def test_number_judge_accepts_python_numbers_and_0d_tensors_only():
    want = torch.tensor(2.5, dtype=torch.float64)
    assert Number()(2.5, want, []) is None
    assert Number()(torch.tensor(2.5), want, []) is None
    assert "expected a torch tensor" in Tensor()(2.5, want, [])


def test_tuple_numpy_float_and_frequency_judges():
    assert "part 1" in Tuple()((WANT, WANT + 1), (WANT, WANT), [])
    assert "tuple of 2" in Tuple()(WANT, (WANT, WANT), [])
    assert "NumPy array" in Numpy()(WANT, {"__ndarray__": WANT}, [])
    assert "use .item()" in Float(rel=0.1)(torch.tensor(1.0), 1.0, [])
    assert "expected int 3, got int 4" in Exact()(4, 3, [])
    probs = torch.tensor([0.5, 0.5, 0.0])
    assert Frequencies(max_tv=0.05)(torch.tensor([480, 520, 0]), probs, []) is None
    assert "should have been filtered out" in Frequencies(max_tv=0.05)(torch.tensor([480, 510, 10]), probs, [])


@pytest.mark.parametrize("judge", [Tensor(), Tensor(steps=4096), Number(), Numpy(), Tuple(), Exact(), Float(rel=0.1),
                                   Frequencies(max_tv=0.05)], ids=repr)
def test_judges_are_stored_by_kind_and_named_settings(judge):
    plain = judge_to_plain(judge)
    assert plain["kind"] == type(judge).__name__
    assert judge_from_plain(plain) == judge


def test_close_treats_matching_infinities_and_nans_as_equal():
    a = torch.tensor([float("-inf"), 1.0, float("nan")])
    assert close(a, a.clone())
    assert not close(a, torch.tensor([0.0, 1.0, float("nan")]))


def test_to_plain_strips_tensor_subclasses_and_refuses_strange_objects():
    class Sneaky(torch.Tensor):
        pass

    sneaky = torch.ones(2).as_subclass(Sneaky)
    assert type(to_plain(sneaky)) is torch.Tensor

    class Always:
        def __eq__(self, other):
            return True

    assert "__error__" in to_plain(Always())


def test_load_params_lists_expected_and_found_names():
    module = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError) as info:
        load_params(module, {"W.weight": torch.zeros(2, 3)})
    text = str(info.value)
    assert ("missing: W.weight (2, 3)" in text and "unexpected: bias (2,), weight (2, 3)" in text
            and "register_buffer" not in text)


def test_an_error_value_of_another_form_reads_plainly():
    """A result is plain data from the learner's process, which learner code could forge: a
    location of another kind is left out rather than break the verdict."""
    from grader.checks.compare import error_message
    from grader.checks.spec import failure_text

    assert error_message({"__error__": "ValueError: no", "where": 5, "line": "3"}) == "it raised ValueError: no"
    assert failure_text("f", "one", error_message({"__error__": "NotImplementedError", "where": ["x"]})) == \
        "f: not written yet: replace `raise NotImplementedError()` with your code, then run that cell (Shift+Enter)"


def test_values_two_mistakes_share_name_both_and_a_case_that_tells_them_apart_wins():
    """Where two known mistakes give the same values, naming one alone could name a mistake the
    learner did not make: the message names both. Over several cases, a case that names one
    mistake alone is reported first."""
    from grader.checks.compare import Several
    from grader.checks.spec import Case, Spec, judge_all

    one = torch.ones(1, 1)
    message = tensor_message(one, torch.tensor([[2.0]]), [Mistake("you took a softmax", one),
                                                          Mistake("you took cosine similarities", one)])
    assert isinstance(message, Several)
    assert "you took a softmax" in message and "you took cosine similarities" in message

    def mistakes(x):
        yield Mistake("you took a softmax", torch.softmax(x, dim=-1))
        yield Mistake("you took cosine similarities", x / x.norm(dim=-1, keepdim=True))

    spec = Spec("f", lambda x: x, lambda x: x, examples=lambda: [], mistakes=mistakes)
    cases = [Case("T = 1", x=torch.tensor([[3.0]])), Case("T = 2", x=torch.tensor([[3.0, 1.0], [0.5, 2.0]]))]
    verdict = judge_all(spec, cases, [torch.softmax(c.fields["x"].double(), dim=-1) for c in cases])
    assert verdict[1] == "you took a softmax" and "T = 2" in verdict[0]
