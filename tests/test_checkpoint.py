"""The shipped checkpoint data/tiny_gpt.pt: its format, its size, and the loss it states."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from reference import load_script

DATA = Path(__file__).resolve().parents[1] / "data"
MAX_BYTES = 512 * 1024   # the limit data/README.md states
MARGIN = 0.05            # the checkpoint is within 5% of the entropy floor on val


mk = load_script(DATA / "make_checkpoint.py")


@pytest.fixture(scope="module")
def ref() -> dict:
    return mk.reference()


@pytest.fixture(scope="module")
def ckpt() -> dict:
    return torch.load(DATA / "tiny_gpt.pt", weights_only=True)


def test_size_under_the_limit() -> None:
    assert (DATA / "tiny_gpt.pt").stat().st_size <= MAX_BYTES


def test_format(ckpt, ref) -> None:
    assert set(ckpt) == {"config", "state_dict", "chars", "val_loss", "steps", "seed"}
    fields = {f.name for f in dataclasses.fields(ref["GPTConfig"])}
    assert set(ckpt["config"]) == fields
    assert isinstance(ckpt["val_loss"], float) and isinstance(ckpt["steps"], int) and isinstance(ckpt["seed"], int)
    text = (DATA / "train.txt").read_text(encoding="utf-8") + (DATA / "val.txt").read_text(encoding="utf-8")
    assert ckpt["chars"] == "".join(sorted(set(text)))          # the tokenizer's ids, in order
    assert ckpt["config"]["vocab_size"] == len(ckpt["chars"])
    assert all(t.dtype in (torch.float16, torch.bool) for t in ckpt["state_dict"].values())


def test_loads_into_the_reference_model(ckpt, ref) -> None:
    model = ref["TinyGPT"](ref["GPTConfig"](**ckpt["config"]))
    state = {name: t.float() if t.is_floating_point() else t for name, t in ckpt["state_dict"].items()}
    model.load_state_dict(state)                                   # strict: every name and shape matches
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), state[name])


def _val_loss(model, val: torch.Tensor, min_context: int = 48) -> float:
    """Cross-entropy on val, each character scored once, only where it sees min_context characters
    before it (written here independently of the notebook's estimate_loss)."""
    t = model.cfg.context_length
    windows = val.unfold(0, t + 1, t - min_context)                # (n, T + 1): inputs [:-1], targets [1:]
    total, count = 0.0, 0
    with torch.no_grad():
        for chunk in windows.split(256):
            logits, _ = model(chunk[:, :-1])
            total += F.cross_entropy(logits[:, min_context:].reshape(-1, logits.shape[-1]),
                                     chunk[:, 1 + min_context:].reshape(-1), reduction="sum").item()
            count += chunk[:, 1 + min_context:].numel()
    return total / count


def test_states_its_validation_loss_near_the_floor(ckpt, ref) -> None:
    model, _ = mk.load(DATA / "tiny_gpt.pt", ref)
    chars = ckpt["chars"]
    val = torch.tensor([chars.index(c) for c in (DATA / "val.txt").read_text(encoding="utf-8")])
    measured = _val_loss(model, val)
    # The stored figure came from the same float32 weights on another CPU (or thread count): the
    # sums differ by float32 rounding only, relative 1e-7 per operation over a few hundred
    # operations per logit, so 1e-4 relative is ample and far below any real change of weights.
    assert measured == pytest.approx(ckpt["val_loss"], rel=1e-4)
    floor = json.loads((DATA / "corpus_stats.json").read_text(encoding="utf-8"))["val_entropy_nats_per_char"]
    assert floor < measured <= (1 + MARGIN) * floor
