"""Unit 10's GPT-2 without the network: the course's random GPT-2 state dicts have the format of
Hugging Face's checkpoint, and the reference `load_gpt2` gives transformers' logits on them."""
from __future__ import annotations

import pytest
import torch
from reference import reference_namespace
from transformers import GPT2Config, GPT2LMHeadModel

from grader.checks import gpt2

UNIT = "10_gpt2"


def hugging_face_model(cfg: dict) -> GPT2LMHeadModel:
    config = GPT2Config(vocab_size=cfg["vocab_size"], n_positions=cfg["context_length"], n_embd=cfg["emb_dim"],
                        n_layer=cfg["num_layers"], n_head=cfg["num_heads"],
                        bos_token_id=cfg["vocab_size"] - 1, eos_token_id=cfg["vocab_size"] - 1)
    return GPT2LMHeadModel(config).eval()


def _is_mask(name: str) -> bool:
    return name.endswith((".attn.bias", ".attn.masked_bias"))


def test_the_tiny_state_dict_has_the_names_and_shapes_of_gpt2lmheadmodel():
    """GPT2LMHeadModel.state_dict() holds the checkpoint's names with `transformer.` before them,
    plus `lm_head.weight` (the tied head); the helper holds the checkpoint's causal-mask buffers
    `h.N.attn.bias`, which the transformers installed here no longer registers (older versions
    register it, and `attn.masked_bias`, as buffers). Everything else is the same, name for name,
    shape for shape and dtype for dtype."""
    theirs = hugging_face_model(gpt2.TINY).state_dict()
    ours = gpt2.tiny_state_dict()
    expected = {name.removeprefix("transformer."): (tuple(t.shape), t.dtype) for name, t in theirs.items()
                if name != "lm_head.weight" and not _is_mask(name)}
    found = {name: (tuple(t.shape), t.dtype) for name, t in ours.items() if not _is_mask(name)}
    assert found == expected
    assert list(found) == list(expected), "the helper keeps the checkpoint's order"
    layers = gpt2.TINY["num_layers"]
    assert sorted(name for name in ours if _is_mask(name)) == [f"h.{n}.attn.bias" for n in range(layers)]
    assert set(theirs) - {"transformer." + name for name in ours} == {"lm_head.weight"}
    prefixed = gpt2.tiny_state_dict(prefix="transformer.", masked_bias=True)
    assert {name for name in prefixed if not _is_mask(name)} == {"transformer." + name for name in found}


def test_full_size_shapes_are_gpt2_small():
    shapes = gpt2.checkpoint_shapes(**gpt2.GPT2_SMALL)
    count = sum(torch.Size(s).numel() for name, s in shapes.items() if not _is_mask(name))
    assert count == 124_439_808   # the head is tied: no lm_head.weight to count


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_the_reference_load_gpt2_gives_transformers_logits(prefix):
    namespace = reference_namespace(UNIT)
    cfg = dict(gpt2.TINY, vocab_size=50, context_length=24, emb_dim=16, num_heads=4, num_layers=3)
    state = gpt2.random_state_dict(**cfg, seed=3, prefix=prefix)
    model = namespace["load_gpt2"](namespace["TinyGPT"](namespace["GPTConfig"](**cfg)), state).eval()
    assert model.out_head.weight is model.tok_emb.weight
    theirs = hugging_face_model(cfg)
    weights = {name.removeprefix("transformer."): t for name, t in state.items() if not _is_mask(name)}
    missing, unexpected = theirs.transformer.load_state_dict(weights, strict=False)
    assert not unexpected and all(_is_mask(name) for name in missing)
    idx = torch.randint(0, cfg["vocab_size"], (2, cfg["context_length"]), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, expected = model(idx)[0], theirs(idx).logits
    assert (ours - expected).abs().max().item() < 1e-4


def test_gpt2_files_says_in_one_line_what_is_missing_under_the_grader(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.delenv(gpt2.RANDOM_STAND_IN, raising=False)
    assert gpt2.gpt2_files() is None
    assert len(capsys.readouterr().out.strip().splitlines()) == 1


def test_gpt2_files_offline_says_so_without_waiting(monkeypatch, capsys):
    import huggingface_hub

    def not_cached(*args, local_files_only=False, **kwargs):
        assert local_files_only, "an offline run must not try to download"
        raise FileNotFoundError("not in the cache")            # as on a machine that never downloaded GPT-2

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv(gpt2.RANDOM_STAND_IN, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", not_cached)
    monkeypatch.setattr(gpt2, "_reachable", lambda *a, **k: pytest.fail("an offline run must not try the network"))
    assert gpt2.gpt2_files() is None
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and gpt2.DOWNLOAD in out[0], out


def test_the_stand_in_tokenizer_makes_a_token_per_word_and_gives_the_text_back():
    tokenizer = gpt2.WordTokenizer(gpt2.GPT2_SMALL["vocab_size"])
    text = "The cache, in every layer, keeps keys.\n\nThen values."
    ids = tokenizer.encode(text)
    assert all(0 <= i < gpt2.GPT2_SMALL["vocab_size"] for i in ids)
    assert len(ids) == 14 and tokenizer.decode(ids) == text
