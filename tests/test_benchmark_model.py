"""The benchmark's copy of unit 08's reference model computes what the notebook's does, and so
does its fast path (PyTorch's built-ins, the same parameters); its minimal GPT has the same size."""
from __future__ import annotations

import pytest
import torch
from reference import load_script, reference_namespace

from grader import course, notebook


def _bench():
    return load_script(course.ROOT / "benchmarks" / "bench_gpt.py")


def test_benchmark_model_matches_the_reference_solution():
    bench, ns = _bench(), reference_namespace("08_tiny_gpt")
    settings = dict(vocab_size=11, context_length=16, emb_dim=32, num_heads=4, num_layers=2, dropout=0.0,
                    qkv_bias=False)
    torch.manual_seed(0)
    reference = ns["TinyGPT"](ns["GPTConfig"](**settings)).eval()
    copy = bench.TinyGPT(bench.GPTConfig(**settings)).eval()
    assert {k: v.shape for k, v in copy.state_dict().items()} == {k: v.shape for k, v in reference.state_dict().items()}
    copy.load_state_dict(reference.state_dict())
    idx = torch.randint(0, 11, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = reference(idx)[0]
        torch.testing.assert_close(copy(idx)[0], want, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(bench.FastGPT(copy)(idx)[0], want, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ns["FastGPT"](reference)(idx)[0], want, rtol=1e-4, atol=1e-5)
    minimal = bench.MinimalGPT(bench.GPTConfig(**settings))
    assert sum(p.numel() for p in minimal.parameters()) == sum(p.numel() for p in reference.parameters())


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_training_the_fast_path_trains_the_model_itself(qkv_bias):
    """Steps taken through FastGPT change the wrapped model, the query/key/value weights included,
    exactly as they change FastGPT: nothing is left to copy back."""
    bench = _bench()
    cfg = bench.GPTConfig(vocab_size=11, context_length=16, emb_dim=32, num_heads=4, num_layers=2, qkv_bias=qkv_bias)
    torch.manual_seed(0)
    model = bench.TinyGPT(cfg)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    fast = bench.FastGPT(model)
    optimizer = torch.optim.AdamW(fast.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        idx = torch.randint(0, 11, (4, 16), generator=gen)
        bench.training_step(fast, optimizer, idx, idx.roll(-1, dims=1))
    changed = {name for name, t in model.state_dict().items() if not torch.equal(t, before[name])}
    assert {"blocks.0.att.W_query.weight", "blocks.1.att.W_value.weight", "tok_emb.weight"} <= changed
    if qkv_bias:
        assert "blocks.0.att.W_key.bias" in changed
    model.eval(), fast.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], fast(idx)[0], rtol=1e-4, atol=1e-5)


def test_the_fast_path_refuses_a_model_moved_after_wrapping():
    """Moving or converting after wrapping gives the model new memory that FastGPT does not train:
    a clear error, not a model that silently stays untrained."""
    bench = _bench()
    cfg = bench.GPTConfig(vocab_size=11, context_length=16, emb_dim=32, num_heads=4, num_layers=2)
    fast = bench.FastGPT(bench.TinyGPT(cfg)).double()
    with pytest.raises(RuntimeError, match="wrap it again"):
        fast(torch.zeros(1, 4, dtype=torch.long))


def test_the_notebook_and_the_benchmark_share_one_fast_path():
    """Unit 08's given FastGPT is the benchmark's, line for line."""
    text = (course.ROOT / "benchmarks" / "bench_gpt.py").read_text(encoding="utf-8")
    fast = text[text.index("class FastGPT(nn.Module):"):text.index("# --- a minimal GPT")].rstrip()
    given = [c.source for c in notebook.read(course.source_notebook("08_tiny_gpt")).cells
             if notebook.grade_id(c) == "u08_given_fast_path"]
    assert len(given) == 1 and fast in given[0]
