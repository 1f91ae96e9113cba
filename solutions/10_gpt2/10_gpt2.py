# %% [markdown]
# # Unit 10 — Your GPT runs GPT-2 (bonus): real weights, copying heads and an attention sink
#
# The model you built in units 06 to 08 has the shape of OpenAI's GPT-2: learned positions,
# pre-norm blocks, the tanh GELU, `LayerNorm` with `eps = 1e-5`, biases on the queries, keys and
# values. Only its size differs. In this unit you load the weights of **GPT-2 small**, 124 million
# parameters trained on web text, into that same code, prove that it computes what Hugging Face's
# implementation computes, and then use your own tools to look inside a real language model: the
# heads that copy from earlier in the text, and the first token that gathers attention for
# no reason of its own.
#
# **By the end you will be able to**
# - write GPT-2 small as a `GPTConfig` and count its parameters with unit 08's function;
# - read a checkpoint in another library's format and copy it into your model, name by name:
#   transposed weights, fused projections, buffers that are not weights, a tied output head;
# - prove a loader right by comparing logits with an independent implementation;
# - generate text with unit 08's `generate` and unit 09's `generate_cached`, and measure what the
#   cache buys on a model this size;
# - find induction heads by their attention, and test what they do by switching them off;
# - measure how much attention each head puts on the first token, and what a rolling cache that
#   keeps or drops the first tokens costs on a real model.
#
# **How this notebook works.** Run the cells from top to bottom (Shift+Enter). Where you see
# `# YOUR CODE HERE`, delete the `raise NotImplementedError()` line and write your code. The
# cell below each exercise is a *self-check*: it runs your code on small examples and tells you
# what is wrong if it is not right. When you submit, the grader also runs hidden tests on other
# inputs, so write code that works in general, not just for the example.
#
# **Run All stops at an unfinished exercise.** Run ▸ Run All Cells stops at the first exercise you
# have not finished yet, with a red box under its **self-check**. Fix the exercise, then go on with
# Run ▸ Run Selected Cell and All Below.
#
# **The download.** GPT-2's weights (`model.safetensors`, 548 MB) and its tokenizer
# (`tokenizer.json`, 1.4 MB) come from the Hugging Face Hub once, into the Hugging Face cache
# (`~/.cache/huggingface`); they need the packages `huggingface_hub`, `safetensors` and
# `tokenizers`, and section 4's proof needs Hugging Face's own GPT-2, `transformers` (13.5 MB to
# download, about 140 MB installed): the course's `lab` extra installs all four. Without them, or
# offline, or under the grader, the cell that loads GPT-2 says so in one line and everything below
# runs on a **small GPT-2 with random weights** in the same format: every equality holds, but what
# it says and where it looks mean nothing. The exercises never need the download. With GPT-2 small
# the notebook takes about two minutes on a two-core laptop CPU (100 to 130 s measured).

# %% nbgrader={"grade": false, "grade_id": "install_course", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The self-checks come with the course's package. On a hosted notebook (Colab, a JupyterHub image)
# that does not have it, this cell installs it; everywhere else, and under the grader, it does nothing.
import importlib.util
import os
import subprocess
import sys

COURSE_WHEEL = ""  # written by `python -m grader release` from attention_course.INSTALL_FROM
if importlib.util.find_spec("attention_course") is None and not os.environ.get("NBGRADER_EXECUTION"):
    if not COURSE_WHEEL:
        print("The course's package is not installed here: install the course's wheel "
              "(%pip install attention_course-….whl, see the course's README), then run this cell again")
    else:
        print("Installing the course's package; a minute or two, PyTorch is kept if present")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", COURSE_WHEEL],
                             capture_output=True, text=True)
        why = (pip.stderr.strip().splitlines() or [""])[-1]
        if pip.returncode == 0:
            importlib.invalidate_caches()
        elif "HASHES" in pip.stderr:
            print(f"Nothing installed: the wheel at {COURSE_WHEEL} is not the course's "
                  "(its sha256 is not the one the course published)")
        else:
            print(f"Nothing installed: the course's wheel could not be fetched from {COURSE_WHEEL} "
                  f"({why})")

# %%
import math
import os
import random
import statistics
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

from grader.checks.gpt2 import GPT2_SMALL, WordTokenizer, gpt2_files, random_state_dict, tiny_state_dict
from grader.figures import show

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)
device = "cuda" if torch.cuda.is_available() else "cpu"
QUICK = bool(os.environ.get("NBGRADER_EXECUTION"))  # under grading, shorter texts and no download
torch.set_num_threads(1)  # steadier timings; PyTorch's threads wait by spinning, which a busy machine makes slow
print("device:", device, "| short version for grading:", QUICK)


# %% [markdown]
# ## 1. The model you wrote
#
# The next three cells hold your code from earlier units, as given code: unit 08's model
# (`GPTConfig`, the blocks of unit 07, `TinyGPT`), its sampling and `generate`, `gpt_param_count`,
# and unit 09's `KVCache`, `cached_attention`, `forward_cached`, `generate_cached` and the rolling
# cache. They are the reference solutions of those units, unchanged. Nothing in them knows about
# GPT-2.

# %% nbgrader={"grade": false, "grade_id": "u10_given_model", "locked": true, "schema_version": 3, "solution": false, "task": false}
@dataclass
class GPTConfig:
    """Hyper-parameters of TinyGPT (given). Build it with keywords."""
    vocab_size: int          # V, number of distinct tokens
    context_length: int      # longest input the model accepts (rows of pos_emb)
    emb_dim: int             # E, width of every token vector
    num_heads: int           # attention heads per block (must divide emb_dim)
    num_layers: int          # number of TransformerBlocks
    dropout: float = 0.0     # dropout rate everywhere
    qkv_bias: bool = False   # bias in the query/key/value projections


class LayerNorm(nn.Module):
    """Layer normalisation over the last dim: learned `scale` and `shift`, biased variance."""

    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):                                         # x: (..., E)
        centred = x - x.mean(dim=-1, keepdim=True)                # (..., E)
        var = (centred * centred).mean(dim=-1, keepdim=True)      # (..., 1), divides by E
        return self.scale * centred / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    """GELU, tanh approximation (as in GPT-2)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class FeedForward(nn.Module):
    """Linear(E, 4E) -> GELU -> Linear(4E, E), applied to every position."""

    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), GELU(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):                                         # (B, T, E) -> (B, T, E)
        return self.layers(x)


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention with an output projection."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool),
                                                diagonal=1))          # True above the diagonal = blocked

    def forward(self, x):                                               # x: (B, T, d_in)
        b, t, _ = x.shape
        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.W_key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)    # (B, H, T, hd)
        v = self.W_value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)                    # (B, H, T, T)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))                          # (B, H, T, T)
        context = (weights @ v).transpose(1, 2).contiguous().view(b, t, self.d_out)    # (B, T, d_out)
        return self.out_proj(context)


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attention(norm1(x)), then + feed-forward(norm2(x))."""

    def __init__(self, emb_dim, num_heads, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.att = MultiHeadAttention(emb_dim, emb_dim, context_length, dropout, num_heads, qkv_bias)
        self.ff = FeedForward(emb_dim)
        self.norm1 = LayerNorm(emb_dim)
        self.norm2 = LayerNorm(emb_dim)
        self.drop_shortcut = nn.Dropout(dropout)

    def forward(self, x):                                          # (B, T, E) -> (B, T, E)
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        x = x + self.drop_shortcut(self.ff(self.norm2(x)))
        return x


class TinyGPT(nn.Module):
    """A GPT: token + position embeddings, transformer blocks, final norm, output head."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.emb_dim)
        self.drop_emb = nn.Dropout(cfg.dropout)
        self.blocks = nn.Sequential(*[
            TransformerBlock(cfg.emb_dim, cfg.num_heads, cfg.context_length, cfg.dropout, cfg.qkv_bias)
            for _ in range(cfg.num_layers)])
        self.final_norm = LayerNorm(cfg.emb_dim)
        self.out_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        """idx (B, T) -> (logits (B, T, V), mean cross-entropy or None). ValueError when T > context_length."""
        batch, num_tokens = idx.shape
        if num_tokens > self.cfg.context_length:
            raise ValueError(f"the input has {num_tokens} tokens but context_length is "
                             f"{self.cfg.context_length}: crop it to the last {self.cfg.context_length}")
        positions = torch.arange(num_tokens, device=idx.device)          # (T,)
        x = self.tok_emb(idx) + self.pos_emb(positions)                  # (B, T, E) + (T, E)
        x = self.drop_emb(x)                                             # (B, T, E)
        x = self.blocks(x)                                               # (B, T, E)
        logits = self.out_head(self.final_norm(x))                       # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

# %% nbgrader={"grade": false, "grade_id": "u10_given_sampling", "locked": true, "schema_version": 3, "solution": false, "task": false}
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    """One token id per row of `logits` (B, V) -> (B, 1) long. Temperature 0: argmax."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)                               # (B, 1)
    logits = logits / temperature                                                # (B, V)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)                                        # (B, V)
    if top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)                # (B, V) each
        keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p         # the nucleus, in sorted order
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)     # back to token order
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, num_samples=1, generator=generator)          # (B, 1)


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    """Extend idx (B, T0) by max_new_tokens tokens -> (B, T0 + max_new_tokens): the whole text so far
    (its last context_length tokens) goes through the model for every new token."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for _ in range(max_new_tokens):
                context = idx[:, -model.cfg.context_length:]                  # (B, <= context_length)
                logits, _ = model(context)                                    # (B, t, V)
                next_id = sample_next_token(logits[:, -1, :], temperature, top_k, top_p, generator)  # (B, 1)
                idx = torch.cat((idx, next_id), dim=1)                        # (B, t + 1)
    finally:
        model.train(was_training)
    return idx

def gpt_param_count(cfg: GPTConfig, tied: bool = False) -> dict[str, int]:
    """Parameters of TinyGPT(cfg), part by part, computed from cfg (no model is built).

    Keys: tok_emb, pos_emb; att, ff, norms (one block); blocks (all of them); final_norm,
    out_head (0 when tied: the head reuses tok_emb's matrix); total (each parameter once)."""
    V, C, E = cfg.vocab_size, cfg.context_length, cfg.emb_dim
    counts = {"tok_emb": V * E, "pos_emb": C * E}
    counts["att"] = 3 * (E * E + (E if cfg.qkv_bias else 0)) + E * E + E   # W_query, W_key, W_value; out_proj
    counts["ff"] = (E * 4 * E + 4 * E) + (4 * E * E + E)                   # Linear(E, 4E), Linear(4E, E)
    counts["norms"] = 2 * (E + E)                                           # norm1, norm2: scale and shift
    counts["blocks"] = cfg.num_layers * (counts["att"] + counts["ff"] + counts["norms"])
    counts["final_norm"] = E + E
    counts["out_head"] = 0 if tied else E * V                               # no bias
    counts["total"] = (counts["tok_emb"] + counts["pos_emb"] + counts["blocks"] + counts["final_norm"]
                       + counts["out_head"])
    return counts

# %% nbgrader={"grade": false, "grade_id": "u10_given_cache", "locked": true, "schema_version": 3, "solution": false, "task": false}
class KVCache:
    """The keys and values one attention layer has computed so far, (B, H, T_cached, head_dim) each.

    append(k, v): store k, v (B, H, t, head_dim) after the cached ones; return all keys and all
    values, (B, H, T_cached + t, head_dim) each. len(cache): T_cached. reset(): forget everything."""

    def __init__(self):
        self.keys = None      # (B, H, T_cached, hd) once something is stored
        self.values = None    # (B, H, T_cached, hd)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat((self.keys, k), dim=-2)        # (B, H, T_cached + t, hd)
            self.values = torch.cat((self.values, v), dim=-2)    # (B, H, T_cached + t, hd)
        return self.keys, self.values

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def reset(self) -> None:
        self.keys = self.values = None


def cached_attention(att: MultiHeadAttention, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Causal attention of `att` for new tokens x (B, t, d_in) at positions len(cache) ... len(cache) + t - 1.

    Appends their keys and values to `cache`; returns (B, t, d_out), the last t rows of
    att(whole sequence). No dropout (inference)."""
    b, t, _ = x.shape
    past = len(cache)                                                               # P, before appending
    q = att.W_query(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)      # (B, H, t, hd)
    k = att.W_key(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)        # (B, H, t, hd)
    v = att.W_value(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)      # (B, H, t, hd)
    keys, values = cache.append(k, v)                                               # (B, H, P + t, hd) each
    scores = q @ keys.transpose(-2, -1) / math.sqrt(att.head_dim)                   # (B, H, t, P + t)
    blocked = torch.ones(t, past + t, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)  # (t, P + t)
    weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)     # (B, H, t, P + t)
    context = (weights @ values).transpose(1, 2).reshape(b, t, att.d_out)           # (B, t, d_out)
    return att.out_proj(context)


def forward_cached(model: TinyGPT, idx: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
    """Logits (B, t, V) for the new tokens idx (B, t) at positions P ... P + t - 1, P = len(caches[0]).

    caches: one KVCache per block, each extended by t positions. ValueError when P + t > context_length."""
    past, t = len(caches[0]), idx.shape[1]
    if past + t > model.cfg.context_length:
        raise ValueError(f"{past} cached and {t} new tokens make {past + t}, more than context_length "
                         f"{model.cfg.context_length}")
    positions = torch.arange(past, past + t, device=idx.device)                       # (t,)
    x = model.tok_emb(idx) + model.pos_emb(positions)                                 # (B, t, E)
    for block, cache in zip(model.blocks, caches):
        x = x + cached_attention(block.att, block.norm1(x), cache)                    # (B, t, E)
        x = x + block.ff(block.norm2(x))                                              # (B, t, E)
    return model.out_head(model.final_norm(x))                                        # (B, t, V)


def generate_cached(model: TinyGPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """`generate` with one KVCache per block -> (B, T0 + max_new_tokens), prompt first.

    Prefills with the last context_length tokens, then feeds one token per step; rebuilds the
    caches from the last context_length tokens whenever they are full. No gradients, eval() mode
    while sampling, the model's mode restored."""
    was_training = model.training
    model.eval()
    context_length = model.cfg.context_length
    caches = [KVCache() for _ in model.blocks]                     # new caches: this call's text only
    try:
        with torch.no_grad():
            for _ in range(max_new_tokens):
                if len(caches[0]) in (0, context_length):          # first step, or the window moves on
                    for cache in caches:
                        cache.reset()
                    new = idx[:, -context_length:]                 # (B, <= context_length), positions 0 ...
                else:
                    new = idx[:, -1:]                              # (B, 1), the token sampled last
                logits = forward_cached(model, new, caches)        # (B, t, V)
                next_id = sample_next_token(logits[:, -1, :], temperature, top_k, top_p, generator)  # (B, 1)
                idx = torch.cat((idx, next_id), dim=1)
    finally:
        model.train(was_training)
    return idx

class RollingKVCache:
    """A cache that keeps, after each append, the keys and values of the last `window` positions and
    of the positions in `keep` (range(4): the first four). append returns what was held plus the new
    entries, so the newest token sees the kept positions, the window and itself; len() counts the
    entries held."""

    def __init__(self, window, keep=()):
        self.window, self.keep = window, set(keep)
        self.keys = self.values = None
        self.positions, self.seen = [], 0                            # the position of each entry held

    def append(self, k, v):                                          # k, v: (B, H, t, hd)
        keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)
        values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        positions = self.positions + list(range(self.seen, self.seen + k.shape[-2]))
        self.seen += k.shape[-2]
        held = [i for i, p in enumerate(positions) if p >= self.seen - self.window or p in self.keep]
        index = torch.tensor(held, device=k.device)
        self.keys, self.values = keys.index_select(-2, index), values.index_select(-2, index)
        self.positions = [positions[i] for i in held]
        return keys, values

    def __len__(self):
        return len(self.positions)


def rolling_logits(model, idx, window, keep=(), rolling=None):
    """Logits (B, T, V) for idx (B, T), T <= context_length, each token at its own position, through one
    RollingKVCache(window, keep) per block (per block in `rolling` when given; the other blocks keep a
    KVCache of everything). The first window + 1 tokens lose nothing yet and go in as one prefill;
    the others go in one at a time."""
    caches = [RollingKVCache(window, keep) if rolling is None or n in rolling else KVCache()
              for n in range(len(model.blocks))]
    start = min(window + 1, idx.shape[1])
    logits = []
    with torch.no_grad():
        for begin, end in [(0, start)] + [(p, p + 1) for p in range(start, idx.shape[1])]:
            x = model.tok_emb(idx[:, begin:end]) + model.pos_emb.weight[begin:end]      # (B, t, E)
            for block, cache in zip(model.blocks, caches):
                x = x + cached_attention(block.att, block.norm1(x), cache)
                x = x + block.ff(block.norm2(x))
            logits.append(model.out_head(model.final_norm(x)))                          # (B, t, V)
    return torch.cat(logits, dim=1)


# %% [markdown]
# ## 2. GPT-2 small as a `GPTConfig`
#
# OpenAI released GPT-2 in four sizes (Radford et al., 2019, who list the smallest as 117M
# parameters; the released model has 124M, as section 3 counts). The smallest reads a vocabulary of
# 50,257 byte-level BPE tokens, looks at most 1,024 tokens back, and has 12 blocks of width 768
# with 12 heads of 64 features each. Its query, key and value projections have biases, and its
# output head shares the token embedding's matrix, as in unit 08's section on weight tying.
# Dropout is 0 here: this unit only runs the model, it never trains it.

# %%
GPT2_CONFIG = GPTConfig(vocab_size=50257, context_length=1024, emb_dim=768, num_heads=12, num_layers=12,
                        dropout=0.0, qkv_bias=True)
counts = gpt_param_count(GPT2_CONFIG, tied=True)
print(GPT2_CONFIG)
print(f"{counts['total']:,} parameters, the head tied to the token embedding")
print(f"of which the token embedding {counts['tok_emb']:,} and the 12 blocks {counts['blocks']:,}")
assert GPTConfig(**GPT2_SMALL) == GPT2_CONFIG   # the course's helper holds the same numbers

# %% [markdown]
# ## 3. How the checkpoint stores GPT-2
#
# A checkpoint is a dictionary from names to tensors, a *state dict*. Hugging Face's `gpt2`
# checkpoint was written from its `GPT2Model`, the body without the head (`GPT2LMHeadModel` wraps
# that body as `transformer.` and adds the tied `lm_head`). Its names and layouts differ from ours
# in four ways that matter:
#
# | the checkpoint | shape | ours |
# |---|---|---|
# | `wte.weight`, `wpe.weight` | `(V, E)`, `(C, E)` | `tok_emb.weight`, `pos_emb.weight` |
# | `h.N.ln_1.weight`, `h.N.ln_1.bias` | `(E,)` | `blocks[N].norm1.scale`, `.shift` |
# | `h.N.attn.c_attn.weight`, `.bias` | `(E, 3E)`, `(3E,)` | `W_query`, `W_key`, `W_value` together |
# | `h.N.attn.c_proj.weight`, `.bias` | `(E, E)`, `(E,)` | `att.out_proj` |
# | `h.N.ln_2.weight`, `.bias` | `(E,)` | `norm2.scale`, `.shift` |
# | `h.N.mlp.c_fc.weight`, `.bias` | `(E, 4E)`, `(4E,)` | `ff.layers[0]` |
# | `h.N.mlp.c_proj.weight`, `.bias` | `(4E, E)`, `(E,)` | `ff.layers[2]` |
# | `ln_f.weight`, `ln_f.bias` | `(E,)` | `final_norm.scale`, `.shift` |
# | `h.N.attn.bias` | `(1, 1, C, C)` | nothing: the causal mask, a buffer |
# | none | | `out_head.weight`: the token embedding's matrix |
#
# 1. **Conv1D.** GPT-2's linear layers are a class called `Conv1D`, which computes `x @ W + b`
#    with `W` of shape `(in, out)`. `nn.Linear` computes `x @ W.T + b` with `W` of shape
#    `(out, in)`. Every weight must be **transposed** on the way in. For `c_fc` and `mlp.c_proj`
#    the shapes refuse to fit otherwise; for the square `attn.c_proj` they fit either way, and a
#    forgotten transpose gives no error, only wrong numbers. So do the three square blocks of
#    `c_attn` if it is split before it is transposed.
# 2. **One projection for three.** `c_attn` computes queries, keys and values at once: its `3E`
#    outputs are the `E` queries, then the `E` keys, then the `E` values, each block split into
#    heads as unit 06 does.
# 3. **Buffers that are not weights.** `h.N.attn.bias` is not a bias: it is the causal mask, stored
#    as ones on and below the diagonal (1 = may look, the opposite of our `mask`, where `True` =
#    blocked). Checkpoints saved by `transformers` of about 2020 to 2023 (many fine-tuned GPT-2s on
#    the Hub) also store `h.N.attn.masked_bias`, a constant. Your model has its own mask; skip
#    both. The masks really are in the file: 124,439,808 weights of 4 bytes make 497.8 MB, and
#    twelve masks of 1,024 × 1,024 × 4 bytes add 50.3 MB, which is the download's 548 MB.
# 4. **Names.** The checkpoint's names have no prefix; `GPT2LMHeadModel.state_dict()` puts
#    `transformer.` before them and adds `lm_head.weight`, the tied head. Accept both.
#
# The course's helper `tiny_state_dict()` makes a state dict in exactly this format, for a GPT-2
# of width 8 with 2 layers and random weights. The self-checks use it; print its names:

# %%
example_state = tiny_state_dict()
for name, tensor in list(example_state.items())[:16]:
    print(f"{name:28s} {tuple(tensor.shape)}")
print(f"... {len(example_state)} tensors in all")

# %% [markdown]
# ### Exercise — `load_gpt2(model, state_dict)` (about 30 minutes)
#
# **Goal:** copy a GPT-2 state dict, in the checkpoint's format, into `model`, a `TinyGPT` built
# from a matching `GPTConfig` with `qkv_bias=True`, and return the model:
# - accept names with or without the `transformer.` prefix; ignore `lm_head.weight` and the mask
#   buffers `h.N.attn.bias` and `h.N.attn.masked_bias`;
# - transpose every `Conv1D` weight; split `c_attn` into queries, keys and values, in that order;
# - copy LayerNorm `weight` into `scale` and `bias` into `shift`;
# - **tie** the output head to the token embedding (`model.out_head.weight` must be the same
#   parameter as `model.tok_emb.weight`);
# - raise a `ValueError` that names the first name the model needs and the state dict lacks, or
#   the first tensor whose shape does not fit (in the checkpoint's order: `wte`, `wpe`, then
#   block by block);
# - after loading, raise a `ValueError` that names the first name of the state dict the model has
#   no place for (besides the three it skips): a deeper checkpoint (`h.12.…`) into a 12-layer model
#   must not load without a word.
#
# <details><summary>Hint</summary>
#
# Make a plain dictionary first, with the prefix removed from every name. Write one small helper
# that fetches a name, checks it is there and has the shape you expect, and raises the
# `ValueError` otherwise; then copy with `param.copy_(tensor)` inside `torch.no_grad()`, so the
# model keeps its own parameters. `W.T` turns `(in, out)` into `(out, in)`. Let the helper note
# each name it fetches: what is left at the end, less the skipped names, had no place.
# <details><summary>More</summary>
#
# For `c_attn`, transpose first: `(E, 3E)` becomes `(3E, E)`, and `weight.split(E, dim=0)` gives
# the three `(E, E)` matrices in the order queries, keys, values; the bias splits the same way.
# To tie, assign the parameter itself: `model.out_head.weight = model.tok_emb.weight`.
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u10_load_gpt2", "locked": false, "schema_version": 3, "solution": true, "task": false}
def load_gpt2(model: TinyGPT, state_dict: dict[str, torch.Tensor]) -> TinyGPT:
    """Copy a GPT-2 state dict (Hugging Face's names, with or without `transformer.`) into `model`.

    Conv1D weights (in, out) are transposed into nn.Linear (out, in); c_attn holds queries, keys,
    values along its outputs; the mask buffers attn.bias / attn.masked_bias and lm_head.weight are
    not used; out_head is tied to tok_emb. Returns the model. ValueError naming the first missing
    name, the first tensor of the wrong shape, or the first name the model has no place for."""
    ### BEGIN SOLUTION
    stored = {name.removeprefix("transformer."): tensor for name, tensor in state_dict.items()}
    E = model.cfg.emb_dim
    used = set()

    def fetch(name, shape):
        """The tensor `name`, of the stored shape `shape`."""
        if name not in stored:
            raise ValueError(f"the state dict has no {name!r} (nor 'transformer.{name}')")
        if tuple(stored[name].shape) != tuple(shape):
            raise ValueError(f"{name!r} has shape {tuple(stored[name].shape)}; this model needs {tuple(shape)}")
        used.add(name)
        return stored[name]

    def copy_linear(linear, name):
        """A Conv1D (in, out) into an nn.Linear (out, in)."""
        linear.weight.copy_(fetch(name + ".weight", linear.weight.shape[::-1]).T)
        linear.bias.copy_(fetch(name + ".bias", linear.bias.shape))

    def copy_norm(norm, name):
        norm.scale.copy_(fetch(name + ".weight", norm.scale.shape))
        norm.shift.copy_(fetch(name + ".bias", norm.shift.shape))

    with torch.no_grad():
        model.tok_emb.weight.copy_(fetch("wte.weight", model.tok_emb.weight.shape))
        model.pos_emb.weight.copy_(fetch("wpe.weight", model.pos_emb.weight.shape))
        for n, block in enumerate(model.blocks):
            h = f"h.{n}."
            copy_norm(block.norm1, h + "ln_1")
            weight = fetch(h + "attn.c_attn.weight", (E, 3 * E)).T                 # (3E, E): q, k, v rows
            bias = fetch(h + "attn.c_attn.bias", (3 * E,))
            for linear, w, b in zip((block.att.W_query, block.att.W_key, block.att.W_value),
                                    weight.split(E, dim=0), bias.split(E)):
                linear.weight.copy_(w)                                               # (E, E)
                linear.bias.copy_(b)
            copy_linear(block.att.out_proj, h + "attn.c_proj")
            copy_norm(block.norm2, h + "ln_2")
            copy_linear(block.ff.layers[0], h + "mlp.c_fc")
            copy_linear(block.ff.layers[2], h + "mlp.c_proj")
        copy_norm(model.final_norm, "ln_f")
    skipped = ("lm_head.weight", ".attn.bias", ".attn.masked_bias")
    unplaced = [name for name in stored if name not in used and not name.endswith(skipped)]
    if unplaced:
        raise ValueError(f"this model has no place for {unplaced[0]!r}: is the checkpoint deeper or bigger?")
    model.out_head.weight = model.tok_emb.weight                                     # tied: one matrix
    return model
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u10_load_gpt2_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("load_gpt2")
### BEGIN HIDDEN TESTS
import torch
import torch.nn.functional as F

from grader.checks.gpt2 import TINY, random_state_dict
from grader.spec import Case, Exact, Mistake, NotAsAsked, Spec, Tensor, run


def gpt2_logits(state, config, idx):
    """GPT-2's forward pass read straight from the checkpoint's tensors (Conv1D: x @ W + b), in float64."""
    sd = {name.removeprefix("transformer."): t.double() for name, t in state.items()}
    E, H = config["emb_dim"], config["num_heads"]
    b, t = idx.shape
    x = sd["wte.weight"][idx] + sd["wpe.weight"][:t]                                       # (B, T, E)
    for n in range(config["num_layers"]):
        p = f"h.{n}."
        a = F.layer_norm(x, (E,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], 1e-5)
        q, k, v = (a @ sd[p + "attn.c_attn.weight"] + sd[p + "attn.c_attn.bias"]).split(E, dim=-1)
        q, k, v = (z.view(b, t, H, E // H).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, E)
        x = x + a @ sd[p + "attn.c_proj.weight"] + sd[p + "attn.c_proj.bias"]
        a = F.layer_norm(x, (E,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], 1e-5)
        a = F.gelu(a @ sd[p + "mlp.c_fc.weight"] + sd[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + a @ sd[p + "mlp.c_proj.weight"] + sd[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (E,), sd["ln_f.weight"], sd["ln_f.bias"], 1e-5)
    return x @ sd["wte.weight"].T                                                           # (B, T, V)


def gpt2_case(label, config, seed, batch, tokens, prefix="", masked_bias=False, head=False):
    state = random_state_dict(**config, seed=seed, prefix=prefix, masked_bias=masked_bias)
    if head:
        state[prefix.replace("transformer.", "") + "lm_head.weight"] = state[prefix + "wte.weight"].clone()
    idx = torch.randint(0, config["vocab_size"], (batch, tokens), generator=torch.Generator().manual_seed(seed))
    return Case(label, state_dict=state, config=dict(config), idx=idx)


def load_gpt2_examples():
    return [gpt2_case("the tiny GPT-2 of tiny_state_dict(), names as the checkpoint stores them", TINY, 0, 1, 8),
            gpt2_case("a tiny GPT-2 as GPT2LMHeadModel.state_dict() names it (transformer. prefix, lm_head.weight), "
                      "with the older checkpoints' attn.masked_bias", TINY, 1, 2, 6, "transformer.", True, True),
            gpt2_case("a tiny GPT-2 of 3 layers, 2 heads each", dict(TINY, num_layers=3), 2, 1, 5)]


def load_gpt2_cases(g):
    wide = dict(TINY, vocab_size=40, context_length=12, emb_dim=12, num_heads=3, num_layers=3)
    return [gpt2_case("a GPT-2 of width 12, 3 heads, 3 layers", wide, 5, 2, 12),
            gpt2_case("a GPT-2 of width 12 with the transformer. prefix", wide, 6, 1, 5, "transformer.", False, True),
            gpt2_case("a GPT-2 of width 16, 4 heads, 1 layer", dict(wide, emb_dim=16, num_heads=4, num_layers=1), 7, 1, 9)]


def call_load_gpt2(state_dict, config, idx):
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(**config))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()                  # what load_gpt2 leaves alone stays 0
    loaded = load_gpt2(model, dict(state_dict))
    if loaded is not model:
        raise NotAsAsked(f"load_gpt2 must return the model it was given, loaded; it returned {type(loaded).__name__}")
    if loaded.out_head.weight is not loaded.tok_emb.weight:   # tied means one Parameter, not equal values
        raise NotAsAsked("the output head was not tied: model.out_head.weight must be the token embedding's "
                         "Parameter itself (model.out_head.weight = model.tok_emb.weight), not a copy of its values")
    with torch.no_grad():
        return loaded.eval()(idx)[0]


def load_gpt2_oracle(state_dict, config, idx):
    return gpt2_logits(state_dict, config, idx)


def changed(state_dict, rename):
    """The state dict with each (name, tensor) passed through rename(short name, tensor)."""
    return {name: rename(name.removeprefix("transformer."), t) for name, t in state_dict.items()}


def split_qkv(w, E, order=(0, 1, 2)):
    parts = w.split(E, dim=-1)
    return torch.cat([parts[i] for i in order], dim=-1)


def load_gpt2_mistakes(state_dict, config, idx):
    E, H = config["emb_dim"], config["num_heads"]

    def logits(rename):
        return gpt2_logits(changed(state_dict, rename), config, idx)

    def square_untransposed(name, t):      # the (E, E) blocks of c_attn and c_proj used as stored
        if name.endswith("attn.c_attn.weight"):
            return torch.cat([part.T for part in t.split(E, dim=-1)], dim=-1)
        return t.T if name.endswith("attn.c_proj.weight") else t

    message = ("a Conv1D weight went in as stored: Conv1D keeps (in, out), nn.Linear (out, in); transpose every "
               "weight of c_attn, c_proj and c_fc (the square c_proj fits either way and gives wrong numbers)")
    yield Mistake(message, logits(square_untransposed))
    yield Mistake(message, logits(lambda name, t: t.T if name.endswith("attn.c_proj.weight") else t))
    yield Mistake(message, logits(lambda name, t: torch.cat([part.T for part in t.split(E, dim=-1)], dim=-1)
                                  if name.endswith("attn.c_attn.weight") else t))
    for order in ((0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)):
        yield Mistake("queries, keys and values came out of c_attn in the wrong order: its 3E outputs are the "
                      "queries, then the keys, then the values",
                      logits(lambda name, t, order=order: split_qkv(t, E, order) if ".attn.c_attn." in name else t))
    for transposed in (False, True):    # (E, 3E) cut into 3 blocks of E/3 input rows, each read as (E, E)
        yield Mistake("c_attn was split along its input dimension: as stored it is (E, 3E), Conv1D's (in, out), and the "
                      "queries, keys and values are three blocks of its 3E outputs (transpose it, then split the rows; a reshape or view is not a transpose)",
                      logits(lambda name, t, transposed=transposed: torch.cat(
                          [b if transposed else b.T for b in t.reshape(3, E, E)], dim=-1)
                          if name.endswith("attn.c_attn.weight") else t))
    per_head = lambda t: t.unflatten(-1, (H, 3, E // H)).transpose(-3, -2).flatten(-3)  # noqa: E731
    per_feature = lambda t: t.unflatten(-1, (E, 3)).transpose(-2, -1).flatten(-2)        # noqa: E731
    for regroup in (per_head, per_feature):
        yield Mistake("c_attn was split along the wrong axis or interleaved: its 3E outputs are three "
                      "consecutive blocks of E (queries, keys, values), not a (q, k, v) triple per head or per "
                      "feature", logits(lambda name, t, regroup=regroup: regroup(t) if ".attn.c_attn." in name else t))
    yield Mistake("the final LayerNorm was not loaded: copy ln_f.weight and ln_f.bias into final_norm's scale and "
                  "shift (every logit came out 0)",
                  torch.zeros(idx.shape[0], idx.shape[1], config["vocab_size"], dtype=torch.float64))
    yield Mistake("the position embeddings were not loaded: copy wpe.weight into pos_emb.weight",
                  logits(lambda name, t: torch.zeros_like(t) if name == "wpe.weight" else t))

    def norms_swapped(name, t):
        if ".ln_" in name or name.startswith("ln_f"):
            other = name.replace(".weight", ".TMP").replace(".bias", ".weight").replace(".TMP", ".bias")
            return state_dict.get(other, state_dict.get("transformer." + other))
        return t

    yield Mistake("the LayerNorms' weight and bias were swapped: GPT-2's ln weight is our scale, its bias our shift",
                  logits(norms_swapped))
    biases = (".c_attn.bias", ".c_proj.bias", ".c_fc.bias")
    yield Mistake("biases were not copied: GPT-2's c_attn, c_proj and c_fc all have biases",
                  logits(lambda name, t: torch.zeros_like(t) if name.endswith(biases) else t))
    yield Mistake("biases were not copied: GPT-2's c_attn, c_proj and c_fc all have biases",
                  logits(lambda name, t: torch.zeros_like(t) if name.endswith(".c_attn.bias") else t))
    yield Mistake("the stored attn.bias went into the model: it is GPT-2's causal mask (1 = may look), not a "
                  "weight, and our mask means the opposite (True = blocked); skip it",
                  torch.full((idx.shape[0], idx.shape[1], config["vocab_size"]), float("nan"), dtype=torch.float64))


def refusal_case(label, config, seed, drop=None, reshape=None, prefix="", deeper=False):
    """A state dict `drop` is missing from, whose `reshape` = (name, shape) does not fit, or (`deeper`) that
    has one block more than the model; `key` is the name the ValueError must give."""
    state = random_state_dict(**dict(config, num_layers=config["num_layers"] + deeper), seed=seed, prefix=prefix)
    if drop:
        del state[prefix + drop]
    if reshape:
        name, shape = reshape
        state[prefix + name] = torch.zeros(shape)
    key = f"h.{config['num_layers']}.ln_1.weight" if deeper else drop or reshape[0]
    return Case(label, state_dict=state, config=dict(config), key=key, unplaced=deeper)


def call_load_gpt2_refuses(state_dict, config, key, unplaced):
    model = TinyGPT(GPTConfig(**config))
    try:
        load_gpt2(model, dict(state_dict))
    except ValueError as exc:
        return "a ValueError naming it" if key in str(exc) else "a ValueError that does not name it"
    return "no error"


def refusal_mistakes(key, unplaced):
    if unplaced:
        yield Mistake(f"load_gpt2 loaded a state dict with names the model has no place for, from {key!r} on (a "
                      "deeper checkpoint than the model), without a word: after loading, raise a ValueError naming "
                      "the first name you did not use (lm_head.weight and the attn.bias and attn.masked_bias "
                      "buffers aside)", "no error")
        yield Mistake(f"your ValueError does not name the first name the model has no place for ({key!r}): put it in "
                      "the message", "a ValueError that does not name it")
        return
    yield Mistake(f"load_gpt2 went on without a valid {key!r}: raise a ValueError naming it", "no error")
    yield Mistake(f"your ValueError does not name the tensor that is missing or of the wrong shape ({key!r}): put its "
                  "name in the message", "a ValueError that does not name it")


def refusal_examples():
    return [refusal_case("the tiny state dict without h.1.mlp.c_fc.bias", TINY, 0, drop="h.1.mlp.c_fc.bias"),
            refusal_case("a tiny state dict of 3 blocks, loaded into the 2-block model", TINY, 0, deeper=True)]


def refusal_cases(g):
    return [refusal_case("a state dict with the transformer. prefix, without ln_f.weight", TINY, 1, drop="ln_f.weight",
                         prefix="transformer."),
            refusal_case("a state dict whose wte.weight has one row too many", TINY, 2,
                         reshape=("wte.weight", (TINY["vocab_size"] + 1, TINY["emb_dim"]))),
            refusal_case("a state dict whose h.0.attn.c_attn.weight is (E, 2E)", TINY, 3,
                         reshape=("h.0.attn.c_attn.weight", (TINY["emb_dim"], 2 * TINY["emb_dim"]))),
            refusal_case("a state dict with the transformer. prefix and one block more than the 1-block model",
                         dict(TINY, num_layers=1), 4, prefix="transformer.", deeper=True)]


run(Spec("load_gpt2", call_load_gpt2, load_gpt2_oracle, examples=load_gpt2_examples, cases=load_gpt2_cases,
         mistakes=load_gpt2_mistakes, judge=Tensor(steps=1024)),   # a whole model: rounding adds up over the layers
    Spec("load_gpt2", call_load_gpt2_refuses, lambda **_: "a ValueError naming it", examples=refusal_examples,
         cases=refusal_cases, mistakes=refusal_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# ## 4. The proof: the same logits as Hugging Face's GPT-2
#
# The next cell gets GPT-2 small: from the Hugging Face cache, downloading it the first time. It
# says in one line when it cannot, and then builds the small random GPT-2 instead (width 64,
# 4 layers, 4 heads, a vocabulary of 256), in the same format, with a stand-in tokenizer that
# makes one token of each word, so that the rest of the notebook runs all the same. `tokenizer.encode(text)` gives GPT-2's token ids, and
# `tokenizer.decode(ids)` the text back.

# %%
found = gpt2_files()
if found is None:
    SMALL_GPT2 = {"vocab_size": 256, "context_length": 256, "emb_dim": 64, "num_heads": 4, "num_layers": 4,
                  "dropout": 0.0, "qkv_bias": True}
    state, tokenizer = random_state_dict(**SMALL_GPT2, seed=0), WordTokenizer(SMALL_GPT2["vocab_size"])
    gpt_cfg = GPTConfig(**SMALL_GPT2)
else:
    state, tokenizer = found
    gpt_cfg = GPT2_CONFIG

start = time.perf_counter()
gpt2 = load_gpt2(TinyGPT(gpt_cfg), state).to(device).eval()
print(f"loaded into your TinyGPT in {time.perf_counter() - start:.1f} s: "
      f"{sum(p.numel() for p in gpt2.parameters()):,} parameters (each counted once)")
print("head tied to the token embedding:", gpt2.out_head.weight is gpt2.tok_emb.weight)

# %% [markdown]
# Unit 08's model read characters. GPT-2 reads the pieces of byte-level BPE: a frequent word is one
# token, a rarer one several, and a word's leading space belongs to its token (`' attention'`).
# The vocabulary's last token, `<|endoftext|>` (id 50256), separates the documents of GPT-2's
# training data; nothing in this unit puts it in front of a text. (The small random GPT-2's
# stand-in tokenizer makes one token of each word instead.)

# %%
print([(i, tokenizer.decode([i])) for i in tokenizer.encode("The attention layer lets every token look back.")])
print("<|endoftext|> is", tokenizer.encode("<|endoftext|>"))

# %% [markdown]
# Now the test that matters. Hugging Face's `transformers` has its own GPT-2, ported from the
# code OpenAI released with it, independent of yours, which is what the proof needs:
# `GPT2LMHeadModel`. Load the same state dict into it and feed both models the same sentence. If
# your loader put every number in its place, the two agree up to float32 rounding: the largest
# difference is a small multiple of float32's precision (about 1e-7) times the largest logit (the
# course measured 7.8e-7 of the largest logit on random full-size weights; the two
# implementations add up in different orders, so not exactly 0), every position predicts the
# same next token, and greedy decoding writes the same tokens as `GPT2LMHeadModel.generate`,
# the test minGPT runs on its own loader.

# %%
sentence_ids = torch.tensor([tokenizer.encode("The attention layer lets every token look back at the tokens "
                                              "before it and choose what to copy.")], device=device)   # (1, T)
GPT2LMHeadModel = None
if not QUICK:                                   # importing transformers takes seconds: not under the grader
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        pass
if QUICK:
    print("the comparison with Hugging Face's GPT2LMHeadModel is skipped under the grader")
elif GPT2LMHeadModel is None:
    print("transformers is not installed: the comparison with Hugging Face's GPT2LMHeadModel is skipped "
          "(pip install transformers to run it)")
else:
    hf_config = GPT2Config(vocab_size=gpt_cfg.vocab_size, n_positions=gpt_cfg.context_length, n_embd=gpt_cfg.emb_dim,
                           n_layer=gpt_cfg.num_layers, n_head=gpt_cfg.num_heads,
                           bos_token_id=gpt_cfg.vocab_size - 1, eos_token_id=gpt_cfg.vocab_size - 1)
    hf = GPT2LMHeadModel(hf_config).to(device).eval()
    weights_only = {name: t for name, t in state.items() if not name.endswith((".attn.bias", ".attn.masked_bias"))}
    missing, unexpected = hf.transformer.load_state_dict(weights_only, strict=False)
    assert not unexpected and all(name.endswith((".attn.bias", ".attn.masked_bias")) for name in missing), missing
    with torch.no_grad():
        theirs = hf(sentence_ids).logits                                                 # (1, T, V)
        ours = gpt2(sentence_ids)[0]                                                     # (1, T, V)
    difference = (ours - theirs).abs().max().item()
    same_next = (ours.argmax(dim=-1) == theirs.argmax(dim=-1)).float().mean().item()
    print(f"{sentence_ids.shape[1]} tokens; largest difference between your logits and GPT2LMHeadModel's: "
          f"{difference:.2e}, {difference / theirs.abs().max().item():.1e} of the largest logit (float32 "
          f"rounding: about 1e-6 of it); the same next token at {same_next:.0%} of the positions")
    start_ids = sentence_ids[:, :4]
    with torch.no_grad():
        their_greedy = hf.generate(start_ids, attention_mask=torch.ones_like(start_ids), max_new_tokens=12,
                                   do_sample=False, pad_token_id=gpt_cfg.vocab_size - 1)
    print("greedy tokens the same as GPT2LMHeadModel.generate's:",
          torch.equal(generate(gpt2, start_ids, 12, temperature=0.0), their_greedy))
    del hf

# %% [markdown]
# What the proof rules out: a loader that forgets to transpose the square `attn.c_proj` loads
# without a word of complaint. The cell below builds one (it transposes `c_proj` in the state
# dict first, so that your loader's transpose undoes it) and measures what it costs.

# %%
forgetful = {name: (t.T if name.endswith("attn.c_proj.weight") else t) for name, t in state.items()}
broken = load_gpt2(TinyGPT(gpt_cfg), forgetful).to(device).eval()
with torch.no_grad():
    right_logits, right_loss = gpt2(sentence_ids[:, :-1], targets=sentence_ids[:, 1:])
    broken_logits, broken_loss = broken(sentence_ids[:, :-1], targets=sentence_ids[:, 1:])
print(f"c_proj untransposed: largest difference from your logits {(broken_logits - right_logits).abs().max():.2e}; "
      f"perplexity of the sentence {math.exp(broken_loss.item()):,.1f} against {math.exp(right_loss.item()):,.1f}")
del broken, forgetful

# %% [markdown]
# ### Text, with and without the cache
#
# Unit 08's `generate` runs the whole text through the model for every new token; unit 09's
# `generate_cached` feeds only the new token and keeps the keys and values of the others. Under
# greedy decoding (temperature 0) both must write the same tokens. The prompt is a paragraph, not
# a phrase: the longer the text before each new token, the more repeated work the cache can save.
# The cell times both on GPT-2 and on a model the size of unit 09's (width 64, 4 layers, random
# weights; its context stretched to 128 to take the prompt), with a prompt of the same length and
# as many new tokens, and counts the positions each version sends through the blocks. It also
# samples one continuation with unit 08's `sample_next_token` (temperature 0.8, top-p 0.9,
# seeded): greedy decoding takes the likeliest token every time, and a small model falls into
# loops that way, since a phrase it has written makes itself likelier.

# %%
def timed(fn, *args, **kwargs):
    begin = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - begin


CACHE_TEXT = "".join((
    "Running the model is slower than it needs to be if it is done naively. To write one more token, ",
    "the model would read the whole text again, although the keys and values of the earlier tokens ",
    "have not changed. Keeping them in a cache turns a quadratic amount of work into a linear one. The ",
    "cache has a price in memory, which grows with the length of the text, the number of layers and ",
    "the width of the model, and for long texts it can outgrow the model itself.",
))
prompt = torch.tensor([tokenizer.encode(CACHE_TEXT)[:96]], device=device)                      # (1, T0)
T0, new_tokens = prompt.shape[1], 6 if QUICK else 20
plain, plain_time = timed(generate, gpt2, prompt, new_tokens, temperature=0.0)
cached, cached_time = timed(generate_cached, gpt2, prompt, new_tokens, temperature=0.0)
print(f"the prompt: {T0} tokens, ending {tokenizer.decode(prompt[0, -6:].tolist())!r}")
print("greedy continuation:", repr(tokenizer.decode(plain[0, T0:].tolist())))
print("generate and generate_cached wrote the same tokens:", torch.equal(plain, cached))
sampled = generate(gpt2, prompt, new_tokens, temperature=0.8, top_p=0.9,
                   generator=torch.Generator(device=device).manual_seed(0))
print("sampled (temperature 0.8, top-p 0.9):", repr(tokenizer.decode(sampled[0, T0:].tolist())))
plain_positions = sum(T0 + step for step in range(new_tokens))    # generate: the whole text, every step
cached_positions = T0 + new_tokens - 1                             # the prompt once, then one token a step
print(f"positions through the blocks: {plain_positions:,} plain, {cached_positions:,} cached: "
      f"{plain_positions / cached_positions:.1f} times fewer multiplications by the weights")
print(f"weights read from memory at every step, cache or not: "
      f"{sum(p.numel() * p.element_size() for p in gpt2.parameters()) / 1e6:,.1f} MB")

torch.manual_seed(0)
unit09 = TinyGPT(GPTConfig(vocab_size=29, context_length=128, emb_dim=64, num_heads=4, num_layers=4)).to(device).eval()
small_prompt = torch.randint(0, 29, prompt.shape, device=device)
small_new = new_tokens
small_times = {"plain": [], "cached": []}
for _ in range(1 if QUICK else 3):                              # a tiny model's times are short: take the median
    small_times["plain"].append(timed(generate, unit09, small_prompt, small_new, temperature=0.0)[1])
    small_times["cached"].append(timed(generate_cached, unit09, small_prompt, small_new, temperature=0.0)[1])
small_plain, small_cached = (statistics.median(v) for v in small_times.values())
millions = sum(p.numel() for p in gpt2.parameters()) / 1e6
speedups = {f"unit 09's model ({sum(p.numel() for p in unit09.parameters()) / 1e6:.1f} M)": small_plain / small_cached,
            f"this GPT-2 ({millions:.1f} M)": plain_time / cached_time}
print(f"this GPT-2: {new_tokens} tokens in {plain_time:.2f} s plain, {cached_time:.2f} s cached; "
      f"unit 09's model: {small_new} tokens in {small_plain:.3f} s plain, {small_cached:.3f} s cached")
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar(list(speedups), list(speedups.values()), color=["tab:gray", "tab:blue"])
ax.set(ylabel="time without the cache / time with it", title="What the key/value cache buys")
show()
print("speed-up: " + ", ".join(f"{name} ×{value:.1f}" for name, value in speedups.items()))

# %% [markdown]
# Read your two speed-ups against the count of positions. Without the cache, each step sends the
# whole text so far through all the blocks; with it, the prompt goes through once and then one
# token a step, so the multiplications by the weights fall by the printed factor. The measured
# time falls by less. Each step, cached or not, also reads every weight from memory, about
# 500 MB for GPT-2 in float32, whatever it then computes; the cache saves arithmetic, not that
# reading, and on a CPU the reading is a floor under every step. Generating one token at a time is
# limited by memory bandwidth as much as by arithmetic, and the longer the text, the more the
# arithmetic weighs. (`generate` also computes the output head, `768 × 50,257`, at every position,
# though it keeps only the last one's logits.) On the tiny model most of each step's time is
# Python and PyTorch's fixed cost per operation, the same with or without the cache, so removing
# the repeated work saves little. With the small random GPT-2 of the offline run, both bars compare
# two tiny models and say nothing about GPT-2.
#
# ### Perplexity: English against the same words shuffled
#
# Unit 08 measured how surprised a model is by a text: the mean cross-entropy of each next token,
# or its exponential, the **perplexity**, the number of equally likely choices that would surprise
# it as much. Take one paragraph of English, then the same words in a random order: the same
# tokens, almost, but no grammar and no sense.

# %%
PARAGRAPH = "".join((
    "When a language model reads a sentence, it does not see words. It sees numbers, one for each ",
    "piece of text, and for each position it guesses what comes next. A model that guesses well ",
    "has learned something about spelling, grammar and the world, because all of them make some ",
    "continuations more likely than others. The attention layers decide, for every position, which ",
    "earlier tokens matter, and the feed-forward layers turn what they gathered into a guess.",
))


def perplexity(model, text):
    ids = torch.tensor([tokenizer.encode(text)[:model.cfg.context_length + 1]], device=device)   # (1, T + 1)
    with torch.no_grad():
        _, loss = model(ids[:, :-1], targets=ids[:, 1:])
    return math.exp(loss.item())


words = PARAGRAPH.split()
shuffled = " ".join(random.Random(0).sample(words, len(words)))
print(f"perplexity of the paragraph: {perplexity(gpt2, PARAGRAPH):.1f}")
print(f"perplexity of the same words shuffled: {perplexity(gpt2, shuffled):.1f}")
print(f"a model that knows nothing (every token as likely): {gpt_cfg.vocab_size:,}")

# %% [markdown]
# With GPT-2's weights the paragraph should be far less surprising than its shuffled words, and
# both far below the vocabulary's 50,257: even shuffled, the words are real words whose pieces
# follow each other. With random weights both come out near the vocabulary's size, or above it
# (random logits can do worse than an even guess): the model has learned nothing.
#
# ## 5. Induction heads: copying what came next last time
#
# Unit 08 found a head in your tiny model that attends to the name it will copy, the one the
# line's grammar points to: what Wang et al. (2022) call a *name mover* head. Large language
# models have a second way to copy, which finds *where* to copy from by matching: the **induction
# head** (Elhage et al., 2021; Olsson et al., 2022). At a token `A`, it looks for an earlier `A`
# and attends to the token that **followed** it, `B`, so the model can predict `B` again.
# "... Mr Dursley ... Mr" → "Dursley". Olsson et al. (2022) found such heads across the models
# they studied, and tied them to the model's ability to learn from its context; in GPT-2
# small, Wang et al. (2022, "Interpretability in the wild") name heads 5.5 and 6.9 (layer.head,
# counted from 0) among its induction heads. Those are the published findings your run is
# compared with below.
#
# The cleanest test is a sequence the model cannot have seen: `n` random tokens, then the same `n`
# again. In the first copy nothing can be predicted; in the second, every token can, by copying.
# The sequence repeats with **period** `n`: the token at position `t ≥ n` is the token at
# `t − n`, and the one that followed it stands at `t − n + 1`. An induction head, at position
# `t`, attends to `t − n + 1`.
#
# The cell below (given) collects every head's attention weights, the `T × T` matrices of unit 06,
# in one tensor of shape `(layers, heads, T, T)`, averaged over the sequences of a batch.

# %%
def attention_maps(model, idx):
    """Every layer's attention weights for idx (B, T), averaged over the batch: (layers, heads, T, T)."""
    found = []

    def keep(module, inputs, output):
        x = inputs[0]
        b, t, _ = x.shape
        q = module.W_query(x).view(b, t, module.num_heads, module.head_dim).transpose(1, 2)   # (B, H, T, hd)
        k = module.W_key(x).view(b, t, module.num_heads, module.head_dim).transpose(1, 2)     # (B, H, T, hd)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(module.head_dim)).masked_fill(module.mask[:t, :t], float("-inf"))
        found.append(torch.softmax(scores, dim=-1).mean(dim=0))                                # (H, T, T)

    hooks = [block.att.register_forward_hook(keep) for block in model.blocks]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return torch.stack(found)                                                                   # (L, H, T, T)


period = 16 if QUICK else 50
repeats = 2 if QUICK else 4
random_block = torch.randint(0, gpt_cfg.vocab_size, (repeats, period), generator=torch.Generator().manual_seed(0))
repeated = torch.cat([random_block, random_block], dim=1).to(device)                           # (B, 2n)
maps = attention_maps(gpt2, repeated)
print("attention weights:", tuple(maps.shape), "| sequences:", tuple(repeated.shape))

# %% [markdown]
# ### Exercise — `induction_scores(weights, period)` (about 10 minutes)
#
# **Goal:** for attention weights `weights` of shape `(layers, heads, T, T)` (a tensor, as
# `attention_maps` returns it) over a sequence that repeats with the given `period`, return a
# `(layers, heads)` tensor: for each head, the mean over the query positions
# `t = period, ..., T − 1` of the weight that position `t` puts on position `t − period + 1`.
#
# <details><summary>Hint</summary>
#
# `weights[..., t, s]` is what query `t` gives key `s`. Make the query positions with
# `torch.arange(period, T)`, the key positions from them, and index the last two dimensions with
# both at once (advanced indexing pairs them up); then average over the positions.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u10_induction_scores", "locked": false, "schema_version": 3, "solution": true, "task": false}
def induction_scores(weights: torch.Tensor, period: int) -> torch.Tensor:
    """(layers, heads, T, T) attention weights of a sequence repeating with `period` -> (layers, heads):
    the mean, over queries t = period ... T - 1, of the weight on key t - period + 1."""
    ### BEGIN SOLUTION
    queries = torch.arange(period, weights.shape[-1], device=weights.device)      # t = period ... T - 1
    return weights[..., queries, queries - period + 1].mean(dim=-1)                # (L, H)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u10_induction_scores_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("induction_scores")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Mistake, Spec, run


def causal_weights(g, layers, heads, tokens, sink=0.0):
    """Random causal attention weights (layers, heads, T, T); `sink` adds to every score of key 0."""
    scores = 2 * torch.randn(layers, heads, tokens, tokens, generator=g)
    scores[..., 0] += sink * torch.rand(layers, heads, 1, generator=g)
    blocked = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)


def induction_examples():
    g = torch.Generator().manual_seed(10)
    return [Case("random causal weights of 2 layers, 2 heads, T = 8, period 3", weights=causal_weights(g, 2, 2, 8),
                 period=3)]


def induction_cases(g):
    return [Case(f"random causal weights of {l} layers, {h} heads, T = {t}, period {p}",
                 weights=causal_weights(g, l, h, t), period=p)
            for l, h, t, p in ((1, 1, 10, 5), (3, 4, 20, 7), (2, 3, 9, 8), (4, 2, 12, 1))]


def call_induction_scores(weights, period):
    return induction_scores(weights.clone(), period)


def diagonal_mean(weights, period, first, shift):
    queries = torch.arange(first, weights.shape[-1])
    return weights.double()[..., queries, (queries - period + shift) % weights.shape[-1]].mean(dim=-1)


def induction_oracle(weights, period):
    return diagonal_mean(weights, period, period, 1)


def induction_mistakes(weights, period):
    w, T = weights.double(), weights.shape[-1]
    yield Mistake("you measured the attention on position t - period, the earlier copy of the same token; an induction "
                  "head looks at the token that followed it, t - period + 1", diagonal_mean(w, period, period, 0))
    message = ("you included queries before position period: only from t = period on has the sequence repeated, "
               "so average over t = period ... T - 1 (torch.diagonal with offset 1 - period starts at query "
               "period - 1: drop its first entry)")
    for first in range(0, period):
        yield Mistake(message, diagonal_mean(w, period, first, 1))
    queries = torch.arange(period, T)
    on_pattern = w[..., queries, queries - period + 1].sum(dim=-1)
    yield Mistake("you averaged over every position, dividing by T: TransformerLens's head detector scores so (its "
                  "'mul' score, attention on the pattern over all attention, is that sum over T), but only the "
                  "T - period queries of the second copy have a token to look for; average over those",
                  on_pattern / T)
    yield Mistake("you divided by the attention that is not on key 0, as TransformerLens's head detector does with "
                  "exclude_bos: that makes a head's score depend on how much it rests on the first token; average "
                  "the weights over the queries t = period ... T - 1",
                  on_pattern / (T - w[..., 0].sum(dim=-1)))
    yield Mistake("you added the weights up over the queries; take their mean",
                  w[..., queries, queries - period + 1].sum(dim=-1))
    yield Mistake("you read weights[..., key, query]: the query is the second-to-last dimension, the key the last",
                  w[..., queries - period + 1, queries].mean(dim=-1))
    yield Mistake("you averaged over the layers (dimension 0); keep layers and heads, and average over the query "
                  "positions", w[..., queries, queries - period + 1].mean(dim=0))


run(Spec("induction_scores", call_induction_scores, induction_oracle, examples=induction_examples,
         cases=induction_cases, mistakes=induction_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Every head of the model, scored: a bright cell is a head that, in the second copy, looks where
# an induction head looks. The cell names the four highest.

# %%
scores = induction_scores(maps, period).cpu()                                                  # (L, H)
fig, ax = plt.subplots(figsize=(6, 4.5))
image = ax.imshow(scores.numpy(), cmap="viridis", vmin=0, vmax=1)
ax.set(xlabel="head", ylabel="layer", title="Induction score: attention to t - period + 1",
       xticks=range(gpt_cfg.num_heads), yticks=range(gpt_cfg.num_layers))
fig.colorbar(image, ax=ax)
show()
top = [divmod(i, gpt_cfg.num_heads) for i in scores.flatten().argsort(descending=True)[:4].tolist()]
print("highest induction scores (layer.head): " + ", ".join(f"{l}.{h}: {scores[l, h]:.2f}" for l, h in top))
# The first of the two steps below: how much each head attends to the token just before the query.
previous = maps.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1).cpu()                       # (L, H)
leaders = [divmod(i, gpt_cfg.num_heads) for i in previous.flatten().argsort(descending=True)[:4].tolist()]
print(f"an even spread over the keys would give an induction score of about "
      f"{(1 / torch.arange(period + 1, 2 * period + 1)).mean():.3f}")               # queries of the second copy
print("highest previous-token scores (layer.head): "
      + ", ".join(f"{l}.{h}: {previous[l, h]:.2f}" for l, h in leaders))
print(f"an even spread over the keys would give a previous-token score of about "
      f"{(1 / torch.arange(2, maps.shape[-1] + 1)).mean():.3f}")                     # every query from position 1

# %% [markdown]
# Compare your top heads with the heads Wang et al. name for GPT-2 small: 5.5 and 6.9 in the
# paper, and 5.5, 5.8, 5.9 and 6.9 in the circuit they released; Vig & Belinkov (2019, §5.3.3)
# single out head 5.1 for words in repeated phrases. A score near 1 means the head, at every
# position of the second copy, puts almost all its attention on the one token an induction head
# needs. Each score has its own even-spread baseline, printed under it. The previous-token heads
# should sit in earlier layers than the induction heads: the paragraphs after the measurement
# below say why.
#
# A picture of attention is not yet evidence that the model *uses* it. Two measurements are. First,
# the loss. In the first copy the next token is random. A model that guessed evenly would score
# exactly `ln V` there; any other guess scores more on random tokens (the cross-entropy is
# `ln V` + KL(uniform ‖ model)), so expect at least `ln V`. In the second copy, a model that copies
# predicts the next token. Second, switch the top heads off (their outputs set to
# zero before `out_proj`, given below) and measure the second copy again. As a control, switch off
# four heads drawn at random among those with a low induction score instead, ten times over, and
# read the median and the range. Setting a head's output to zero is a crude switch: it also takes
# away what the head adds on every text; Wang et al. replace a head's output by its mean over
# other texts (*mean-ablation*), which takes away only what depends on this one.

# %%
class heads_zeroed:
    """Within `with heads_zeroed(model, [(layer, head), ...]):` those heads' outputs are zero."""

    def __init__(self, model, heads):
        self.model, self.heads, self.hooks = model, heads, []

    def __enter__(self):
        for layer, head in self.heads:
            att = self.model.blocks[layer].att
            span = slice(head * att.head_dim, (head + 1) * att.head_dim)

            def zero(module, inputs, span=span):                      # inputs[0]: (B, T, d_out), heads side by side
                context = inputs[0].clone()
                context[..., span] = 0
                return (context,)

            self.hooks.append(att.out_proj.register_forward_pre_hook(zero))
        return self

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()


def copy_losses(model, idx, n):
    """Mean loss of the next-token predictions inside the first copy and inside the second."""
    with torch.no_grad():
        logits, _ = model(idx)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), idx[:, 1:], reduction="none")   # (B, 2n - 1)
    return losses[:, :n - 1].mean().item(), losses[:, n:].mean().item()


first_copy, second_copy = copy_losses(gpt2, repeated, period)
with heads_zeroed(gpt2, top):
    _, without_top = copy_losses(gpt2, repeated, period)
others = [(l, h) for l in range(gpt_cfg.num_layers) for h in range(gpt_cfg.num_heads) if (l, h) not in top]
low = [(l, h) for l, h in others if scores[l, h] <= scores.median()]      # heads with a low induction score
controls, with_previous = [], []
for draw in range(3 if QUICK else 10):
    drawn = random.Random(draw).sample(low, len(top))
    with heads_zeroed(gpt2, drawn):
        controls.append(copy_losses(gpt2, repeated, period)[1])
    if any(head in leaders for head in drawn):                          # a top previous-token head among them
        with_previous.append(f"{controls[-1]:.2f} ({', '.join(f'{l}.{h}' for l, h in drawn if (l, h) in leaders)})")
print(f"loss in the first copy: {first_copy:.2f} (ln V = {math.log(gpt_cfg.vocab_size):.2f}); "
      f"in the second: {second_copy:.2f}")
print(f"second copy with the top heads {', '.join(f'{l}.{h}' for l, h in top)} switched off: {without_top:.2f}")
print(f"second copy with 4 low-scoring heads switched off instead, {len(controls)} draws: median "
      f"{statistics.median(controls):.2f}, from {min(controls):.2f} to {max(controls):.2f}")
print("draws that switched off a top previous-token head: " + (", ".join(with_previous) or "none"))

# %% [markdown]
# With GPT-2's weights, read three numbers. The drop from the first copy to the second is
# in-context learning at its simplest: nothing about this sequence was in the training data. If the
# loss in the second copy rises clearly when the top heads go, and the controls stay well below
# that, those heads do the copying: causal evidence, not only a picture, and at a size where
# Olsson et al. had only correlations ("for larger models with MLPs, we present correlational
# evidence"). If a control rises too, look at the last line: a previous-token head scores low on
# induction, so it can be drawn as a control, yet every induction head needs it for the first of
# its two steps (below); Wang et al. name 2.2 and 4.11 in GPT-2 small. A rising draw that switched
# one off shows the circuit's first step, not a flaw in the control. Wang et al.'s circuit also
# has more copying heads than four. Whether the loss comes back all the way to the first copy's,
# your run will show.
#
# This is not the head you found in unit 08. There a head in the last layer attended straight to
# the name it would copy, the one the grammar pointed to; the feed-forward layer and the output
# head after it turned that into the prediction. An induction head finds what to copy by
# matching, in two steps, which is why it cannot sit in the first layer: an earlier head (a
# previous-token head, scored above) first writes into each token "the token before me was A",
# and the induction head's query `A` then matches that key. On the small random GPT-2 none of
# this happens: its logits are nearly flat, a nearly even guess, so the first copy's loss sits
# near `ln V`, the second copy's too, and the scores near an even spread.
#
# ## 6. The attention sink
#
# Unit 09 let a cache roll, forgetting the oldest tokens, and found that the loss rises when the
# first tokens leave it, and that keeping a few early tokens, whatever they say, brings most of
# it back. It also found that our tiny model has no **attention sink**: no head puts much more
# than an even share on the first tokens. Xiao et al. (2023) named the sink. Their picture of it
# layer by layer is of one model, Llama-2-7B (their Fig. 2, over sentences of 16 tokens): beyond
# the first two layers, most heads put a large share of their attention on the first token,
# whatever it says. Softmax must give its weights to something, and a token every query can see
# is a convenient place to leave what a head does not need. For GPT-2 small itself, Vig &
# Belinkov (2019, §5.2.3) found 57% of the attention on the first token on average, some heads
# above 97%, and little in the first layers; their sentences were short (28 tokens on average).
# GPT-2 has no beginning-of-text token unless one is prepended (`<|endoftext|>`, id 50256, as
# TransformerLens and ARENA do); here the first token is the text's own first word. Whether GPT-2 small does the
# same on this text, and in which layers, is what your run measures.
#
# The text: a few paragraphs of English (given), its first 400 tokens at most.

# %%
LONG_TEXT = "".join((
    PARAGRAPH, "\n\n",
    "Attention was first used to help translation models, which had to squeeze a whole sentence ",
    "into one vector before writing its translation. Letting the decoder look back at every word of ",
    "the source, and weigh them, removed that bottleneck. A few years later the transformer kept ",
    "attention and dropped everything else: no recurrence, no convolution, only layers that mix ",
    "tokens by attention and layers that transform each token on its own.\n\n",
    "Training such a model is simple to describe. Take a large amount of text, cut it into windows, ",
    "and ask the model to predict every next token at once. The causal mask keeps each position ",
    "from seeing the answer. The loss is the mean surprise over all positions, and gradient descent ",
    "lowers it a little at every step. Nothing in this recipe mentions grammar, facts or style, yet ",
    "all of them appear, because each of them lowers the loss.\n\n",
    CACHE_TEXT, "\n\n",
    "What the heads of a trained model do is partly known. Some look at the previous token. Some ",
    "find an earlier copy of the current token and look at what followed it. Some spread their ",
    "attention over everything. And many, in large models, put much of their attention on the very ",
    "first token, which seems to serve as a place to park attention that is not needed elsewhere. ",
    "Researchers are still learning why models settle on these patterns, and what each of them costs ",
    "or buys.",
))
text_ids = tokenizer.encode(LONG_TEXT)[:64 if QUICK else min(400, gpt_cfg.context_length)]
text = torch.tensor([text_ids], device=device)                                           # (1, T)
text_maps = attention_maps(gpt2, text)                                                   # (L, H, T, T)
print(f"{text.shape[1]} tokens; attention weights {tuple(text_maps.shape)}")

# %% [markdown]
# ### Exercise — `first_token_share(weights)` (about 10 minutes)
#
# **Goal:** for attention weights of shape `(layers, heads, T, T)`, return a `(layers, heads)`
# tensor: for each head, the mean weight that the queries at positions `4, 5, ..., T − 1` put on
# position 0. The first four queries are left out: position 0 can only look at itself, and the
# next few have so few keys that any head gives each of them a large share. (This four is the
# exercise's own choice; it has nothing to do with the four first tokens that StreamingLLM keeps
# in its cache, below.)
#
# <details><summary>Hint</summary>
#
# Position 0 is a **key**, the last dimension; the queries are the second-to-last. One slice and
# one mean.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u10_first_token_share", "locked": false, "schema_version": 3, "solution": true, "task": false}
def first_token_share(weights: torch.Tensor) -> torch.Tensor:
    """(layers, heads, T, T) attention weights -> (layers, heads): the mean weight on key 0 of the
    queries at positions 4 ... T - 1."""
    ### BEGIN SOLUTION
    return weights[..., 4:, 0].mean(dim=-1)                                           # (L, H)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u10_first_token_share_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("first_token_share")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Mistake, Spec, run


def sink_weights(g, layers, heads, tokens):
    """Random causal attention weights (layers, heads, T, T) whose heads favour key 0 by different amounts."""
    scores = 2 * torch.randn(layers, heads, tokens, tokens, generator=g)
    scores[..., 0] += 4 * torch.rand(layers, heads, 1, generator=g)
    blocked = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)


def sink_examples():
    return [Case("random causal weights of 2 layers, 3 heads, T = 9", weights=sink_weights(torch.Generator().manual_seed(20),
                                                                                          2, 3, 9))]


def sink_cases(g):
    return [Case(f"random causal weights of {l} layers, {h} heads, T = {t}", weights=sink_weights(g, l, h, t))
            for l, h, t in ((1, 1, 5), (3, 4, 16), (2, 2, 30))]


def call_first_token_share(weights):
    return first_token_share(weights.clone())


def sink_oracle(weights):
    return weights.double()[..., 4:, 0].mean(dim=-1)


def sink_mistakes(weights):
    w = weights.double()
    message = ("you included the first queries: take only the queries at positions 4 ... T - 1 (position 0 can only "
               "look at itself)")
    for first in range(4):
        yield Mistake(message, w[..., first:, 0].mean(dim=-1))
    if w.shape[-1] > 5:
        yield Mistake("you started at query 5: the queries asked for are positions 4 ... T - 1",
                      w[..., 5:, 0].mean(dim=-1))
        yield Mistake("you averaged the weights on the last key (position -1, the newest token); the first token is "
                      "key 0", w[..., 4:, -1].mean(dim=-1))
    yield Mistake("you added the weights up over the queries; take their mean", w[..., 4:, 0].sum(dim=-1))
    yield Mistake("you counted the first four keys together; the share asked for is key 0 alone",
                  w[..., 4:, :4].sum(dim=-1).mean(dim=-1))
    yield Mistake("you read what query 0 gives the later keys (weights[..., 0, 4:]): the query is the second-to-last "
                  "dimension, the key the last", w[..., 0, 4:].mean(dim=-1))
    yield Mistake("you averaged over the layers (dimension 0); keep layers and heads, and average over the queries",
                  w[..., 4:, 0].mean(dim=0))


run(Spec("first_token_share", call_first_token_share, sink_oracle, examples=sink_examples, cases=sink_cases,
         mistakes=sink_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Layer by layer: the mean over the heads and the largest head, against the share that an even
# spread over the keys would give. The last line swaps the text's first word for a newline: if
# the share hardly moves, what the first token says does not matter, only where it stands
# (StreamingLLM found the content unimportant for the loss: four newlines in place of the first
# four tokens keep the perplexity about as low, their Table 1).

# %%
share = first_token_share(text_maps).cpu()                                               # (L, H)
T = text.shape[1]
even = (1 / torch.arange(5, T + 1)).mean().item()                                        # queries 4 ... T - 1
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(range(gpt_cfg.num_layers), share.mean(dim=1).numpy(), "o-", label="mean over the heads")
ax.plot(range(gpt_cfg.num_layers), share.amax(dim=1).numpy(), "s--", label="the largest head")
ax.axhline(even, color="gray", linestyle=":", label="an even spread over the keys")
ax.set(xlabel="layer", ylabel="attention on the first token", title="The first token's share, layer by layer",
       xticks=range(gpt_cfg.num_layers), ylim=(0, 1))
ax.legend()
show()
for layer in range(gpt_cfg.num_layers):
    print(f"layer {layer:2d}: mean {share[layer].mean():.1%}, largest head {share[layer].max():.1%}, "
          f"heads above half: {(share[layer] > 0.5).sum().item()} of {gpt_cfg.num_heads}")
print(f"an even spread would give {even:.1%}")
swapped = text.clone()
swapped[0, 0] = tokenizer.encode("\n")[0]
swapped_share = first_token_share(attention_maps(gpt2, swapped)).cpu()
print(f"with a newline as the first token: mean share {swapped_share.mean():.1%}, against {share.mean():.1%}")

# %% [markdown]
# Now the consequence. Unit 09's rolling cache keeps, in every layer, only the keys and values of
# the last `W` tokens, or of the last `W` and the first four, and feeds the text one token at a
# time, each at its own position. On GPT-2 that is one pass of 124 million parameters per token:
# minutes for a text of a few hundred tokens on a laptop CPU.
#
# There is a shortcut, exact up to rounding. With a rolling cache, the token at position `p` sees,
# in every layer, the keys of positions `p − W ... p` (and the first four, if kept), and each of
# those keys was computed, layer by layer, under the same rule. A single ordinary pass over the
# whole text whose causal mask also blocks every key more than `W` positions back (but not the
# kept ones) computes exactly that. `windowed_logits` below (given) lends each layer such a mask
# for one pass; the next cell checks it against your unit 09 code, the real rolling cache, on the
# first tokens of the text.

# %%
def windowed_logits(model, idx, window, keep=(), rolling=None):
    """The logits (B, T, V) a rolling cache of `window` recent keys (plus the positions in `keep`)
    gives, computed in one pass: each block's mask also blocks the keys more than `window` back
    (each block in `rolling` when given, as unit 09's rolling_logits; the others see everything)."""
    positions = torch.arange(model.cfg.context_length, device=idx.device)
    query, key = positions[:, None], positions[None, :]
    old = (key < query - window) & ~torch.isin(key, torch.tensor(list(keep), dtype=torch.long, device=idx.device))
    blocked = (key > query) | old                                        # (C, C): True = blocked
    saved = [block.att.mask for block in model.blocks]
    try:
        for n, block in enumerate(model.blocks):
            if rolling is None or n in rolling:
                block.att.mask = blocked
        with torch.no_grad():
            return model(idx)[0]
    finally:
        for block, mask in zip(model.blocks, saved):
            block.att.mask = mask


check_len = min(text.shape[1], 24 if QUICK else 48)
one_at_a_time = rolling_logits(gpt2, text[:, :check_len], 8, keep=range(4))
one_pass = windowed_logits(gpt2, text[:, :check_len], 8, keep=range(4))
print(f"{check_len} tokens, W = 8 and the first 4: largest difference between the rolling cache and one masked "
      f"pass: {(one_at_a_time - one_pass).abs().max().item():.1e}")

# %% [markdown]
# The same logits, in one pass instead of one per token. Now the experiment: the loss is measured
# on the second half of the text, where the rolling cache has already forgotten the start; the
# whole context is the reference.

# %%
def token_losses(logits):
    """The loss of each scored next-token prediction: positions scored ... T - 2."""
    return F.cross_entropy(logits[0, scored:-1], text[0, scored + 1:], reduction="none")


def rolling_loss(window, keep=(), rolling=None):
    return token_losses(windowed_logits(gpt2, text, window, keep, rolling)).mean().item()


scored = T // 2
with torch.no_grad():
    whole_tokens = token_losses(gpt2(text)[0])
whole = whole_tokens.mean().item()
windows = [8, 16] if QUICK else [16, 64, 128]
rolling = {"last W tokens": [], "last W tokens + the first 4": []}
for w in windows:
    rolling["last W tokens"].append(rolling_loss(w))
    rolling["last W tokens + the first 4"].append(rolling_loss(w, keep=range(4)))
fig, ax = plt.subplots(figsize=(7, 3.5))
for (name, values), style in zip(rolling.items(), ("o-", "s-")):
    ax.plot(windows, values, style, label=name)
ax.axhline(whole, color="gray", linestyle="--", label="the whole context")
every = [whole - 1, whole + 1, *rolling["last W tokens"], *rolling["last W tokens + the first 4"]]
ax.set(xlabel="W: recent tokens in the cache", ylabel="loss per token (nats)",
       title="A rolling cache on GPT-2", xticks=windows,
       ylim=(min(every) - 0.1, max(every) + 0.1))   # a nat either way at least: 0.01 nat looks small
ax.legend()
show()
print(f"the whole context: {whole:.3f} nats per token, on positions {scored} to {T - 2}")
for name, values in rolling.items():
    print(f"{name}: " + "  ".join(f"W={w}: {v:.3f}" for w, v in zip(windows, values)))
# The same tokens, scored with and without the first four: the difference token by token, and the
# standard error of its mean over these tokens (neighbouring tokens are correlated, so it is
# optimistic: a rough bar, and it says nothing of other texts).
w = windows[0]
paired = token_losses(windowed_logits(gpt2, text, w)) - token_losses(windowed_logits(gpt2, text, w, range(4)))
print(f"W={w}, losing the first 4 against keeping them: {paired.mean().item():+.3f} ± "
      f"{(paired.std() / len(paired) ** 0.5).item():.3f} nats per token (standard error, {len(paired)} tokens)")
# Where keeping the first four matters: the cache rolls in the first half of the layers only, then in
# the second half, and the same paired difference is taken there.
half = gpt_cfg.num_layers // 2
for name, layers in (("the first", range(half)), ("the second", range(half, gpt_cfg.num_layers))):
    lose = (token_losses(windowed_logits(gpt2, text, w, rolling=set(layers)))
            - token_losses(windowed_logits(gpt2, text, w, range(4), set(layers))))
    print(f"W={w}, rolling in {name} half of the layers only, losing the first 4 against keeping them: "
          f"{lose.mean().item():+.3f} ± {(lose.std() / len(lose) ** 0.5).item():.3f} nats per token")

# %% [markdown]
# **Read your numbers, and say only what they show.** This is one model and one text of a few
# hundred tokens. The paired line compares the same tokens with and without the first four: a
# mean difference within about two standard errors of 0 is no detectable effect on this text; the
# spread that matters most, from one text to another, would need more texts.
#
# - If the rolling cache's loss jumps far above the whole context's when the first tokens leave
#   it, and keeping the first four brings most of it back, GPT-2 shows the StreamingLLM effect
#   that unit 09's tiny model lacked. The last two lines take the same paired difference with the
#   cache rolling in one half of the layers only: where keeping the first four matters most.
# - If keeping the first four changes little, say so: this run cannot say why. Length alone is
#   not the reason: StreamingLLM's window attention fails as soon as the text outgrows its cache
#   (Xiao et al., the abstract and Fig. 3). The candidates: GPT-2 small may lean on its first
#   token less than the models they measured; the windows here hold at most 128 tokens, against
#   their 1,020; and this is one short text.
#
# With the small random GPT-2 neither curve means anything: it has no sink to lose.
#
# ## What you have done
#
# - GPT-2 small is your unit 08 model with other numbers in its `GPTConfig`: 124,439,808
#   parameters.
# - Loading another library's checkpoint means knowing its layouts: `Conv1D` stores `(in, out)`,
#   `c_attn` fuses the three projections, a buffer named `bias` is a mask, the head is tied. A
#   loader is proved by comparing outputs with an independent implementation, never by its running
#   without an error: a forgotten transpose of a square matrix runs fine.
# - The key/value cache saves most of the arithmetic; the time falls less, since every step still
#   reads every weight.
# - Induction heads and the attention sink are things you can now measure in any model you can
#   load into your code: find them by their attention, then test what they do: switch a head off,
#   or evict a token from the cache.
