"""GPT-2 small for unit 10: its weights and tokenizer, downloaded once, and state dicts in the same
format with random weights. It lives with the learner's runtime because the notebook needs it
under the grader too (its sandbox holds this package and nothing else of the course).

The real files come from the Hugging Face Hub's `gpt2` repository: `model.safetensors` (548 MB)
and `tokenizer.json` (1.4 MB), kept in the Hugging Face cache (~/.cache/huggingface) so that they
download once. `gpt2_files()` never waits on a network that is not there: under the grader, or
offline, it says in one line what is missing and how to get it, and returns None.

`random_state_dict` makes a state dict with the names, shapes and dtypes of that checkpoint (no
`transformer.` prefix, no `lm_head.weight`, the causal-mask buffers `h.N.attn.bias` included) and
seeded random weights; `tiny_state_dict` a small one for the self-checks. With the environment
variable ATTENTION_COURSE_GPT2_RANDOM=1, `gpt2_files()` returns a full-size random one and a
tokenizer of words (`WordTokenizer`) in place of the download, so that the notebook's time can be measured offline.
"""
from __future__ import annotations

import math
import os
import re
import socket
import zlib

import torch

from .i18n import say

REPO = "gpt2"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
DOWNLOAD = "548 MB"
RANDOM_STAND_IN = "ATTENTION_COURSE_GPT2_RANDOM"
INSTALL = "pip install huggingface_hub safetensors tokenizers"

# GPT-2 small, as keyword arguments of the course's GPTConfig.
GPT2_SMALL = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768, "num_heads": 12, "num_layers": 12,
              "dropout": 0.0, "qkv_bias": True}
# A GPT-2 of the same format small enough for a self-check's stored example.
TINY = {"vocab_size": 32, "context_length": 16, "emb_dim": 8, "num_heads": 2, "num_layers": 2,
        "dropout": 0.0, "qkv_bias": True}


def checkpoint_shapes(vocab_size: int, context_length: int, emb_dim: int, num_layers: int,
                      **_) -> dict[str, tuple[int, ...]]:
    """The names and shapes of GPT-2's checkpoint, in its order. Conv1D weights are (in, out)."""
    e = emb_dim
    shapes = {"wte.weight": (vocab_size, e), "wpe.weight": (context_length, e)}
    for n in range(num_layers):
        h = f"h.{n}."
        shapes |= {h + "ln_1.weight": (e,), h + "ln_1.bias": (e,),
                   h + "attn.bias": (1, 1, context_length, context_length),   # the causal mask, a buffer
                   h + "attn.c_attn.weight": (e, 3 * e), h + "attn.c_attn.bias": (3 * e,),
                   h + "attn.c_proj.weight": (e, e), h + "attn.c_proj.bias": (e,),
                   h + "ln_2.weight": (e,), h + "ln_2.bias": (e,),
                   h + "mlp.c_fc.weight": (e, 4 * e), h + "mlp.c_fc.bias": (4 * e,),
                   h + "mlp.c_proj.weight": (4 * e, e), h + "mlp.c_proj.bias": (e,)}
    shapes |= {"ln_f.weight": (e,), "ln_f.bias": (e,)}
    return shapes


def random_state_dict(vocab_size: int, context_length: int, emb_dim: int, num_layers: int, seed: int = 0,
                      prefix: str = "", masked_bias: bool = False, **_) -> dict[str, torch.Tensor]:
    """A GPT-2 state dict in the checkpoint's format with seeded random weights (float32).

    Weights are about the size trained ones have (0.02, GPT-2's initialisation), biases and the
    LayerNorms' parameters away from 0 and 1, so that a weight put in the wrong place shows.
    `prefix="transformer."` gives the names GPT2LMHeadModel uses; `masked_bias` adds the older
    checkpoints' `h.N.attn.masked_bias` buffers (-1e4)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in checkpoint_shapes(vocab_size, context_length, emb_dim, num_layers).items():
        if name.endswith(".attn.bias"):
            state[prefix + name] = torch.ones(shape).tril()
            if masked_bias:
                state[prefix + name.replace(".attn.bias", ".attn.masked_bias")] = torch.tensor(-1e4)
        elif ".ln_" in name or name.startswith("ln_f"):
            offset = 1.0 if name.endswith("weight") else 0.0
            state[prefix + name] = offset + 0.2 * torch.randn(shape, generator=g)
        elif name.endswith("bias"):
            state[prefix + name] = 0.1 * torch.randn(shape, generator=g)
        else:
            scale = 0.02 if max(shape) > 64 else 1 / math.sqrt(shape[0])   # tiny models: weights of size ~1
            state[prefix + name] = scale * torch.randn(shape, generator=g)
    return state


def tiny_state_dict(seed: int = 0, prefix: str = "", masked_bias: bool = False) -> dict[str, torch.Tensor]:
    """A GPT-2 state dict of the TINY configuration (random, seeded): the self-checks' example."""
    return random_state_dict(**TINY, seed=seed, prefix=prefix, masked_bias=masked_bias)


class WordTokenizer:
    """A stand-in for GPT-2's tokenizer, for models with random weights: one token per word, space
    or punctuation mark (about as many tokens as GPT-2's BPE makes of English), its id a hash of
    the piece. decode gives back the pieces encode has seen, and "?" for other ids."""

    PIECES = re.compile(r" ?\w+| ?[^\w\s]|\s+")

    def __init__(self, vocab_size: int):
        self.vocab_size, self.seen = vocab_size, {}

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self.PIECES.findall(text):
            ids.append(zlib.crc32(piece.encode("utf-8")) % self.vocab_size)
            self.seen.setdefault(ids[-1], piece)
        return ids

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(self.seen.get(i, "?") for i in ids)


class GPT2Tokenizer:
    """GPT-2's byte-level BPE tokenizer, read from its tokenizer.json by Hugging Face's `tokenizers`."""

    def __init__(self, path):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(path))

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        return self._tokenizer.decode(ids.tolist() if isinstance(ids, torch.Tensor) else list(ids))


def _reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def gpt2_files():
    """(state dict, tokenizer) of GPT-2 small, or None after one line saying what is missing.

    The files are read from the Hugging Face cache, downloaded there first when the Hub can be
    reached (once, 548 MB). Under the grader nothing is downloaded."""
    if os.environ.get(RANDOM_STAND_IN):
        print(say("{variable} is set: a GPT-2 small with random weights and a tokenizer of words stand in for the "
                  "download (for timings: its text means nothing)", variable=RANDOM_STAND_IN))
        return random_state_dict(**GPT2_SMALL), WordTokenizer(GPT2_SMALL["vocab_size"])
    if os.environ.get("NBGRADER_EXECUTION"):
        print(say("GPT-2's weights are not used under the grader: the cells below run on the small random GPT-2"))
        return None
    try:
        import tokenizers  # noqa: F401  (GPT2Tokenizer needs it)
        from huggingface_hub import hf_hub_download
        from safetensors.torch import load_file
    except ImportError as exc:
        print(say("GPT-2 needs {package}, which is not installed: {install}, then run this cell again (the cells "
                  "below run on the small random GPT-2)", package=exc.name, install=INSTALL))
        return None
    try:
        paths = [hf_hub_download(REPO, name, local_files_only=True) for name in (WEIGHTS, TOKENIZER)]
    except Exception:   # not in the cache yet (huggingface_hub's error types differ between versions)
        if os.environ.get("HF_HUB_OFFLINE") or not _reachable():
            print(say("GPT-2's weights are not here and huggingface.co cannot be reached: run this cell once online "
                      "to download them ({size}, kept in the Hugging Face cache); the cells below run on the small "
                      "random GPT-2", size=DOWNLOAD))
            return None
        print(say("Downloading GPT-2 small from huggingface.co/{repo} ({size}, once, into the Hugging Face cache)",
                  repo=REPO, size=DOWNLOAD))
        try:
            paths = [hf_hub_download(REPO, name) for name in (WEIGHTS, TOKENIZER)]
        except Exception as exc:
            print(say("The download failed ({error}): run this cell again later; the cells below run on the small "
                      "random GPT-2", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"))
            return None
    return load_file(paths[0]), GPT2Tokenizer(paths[1])
