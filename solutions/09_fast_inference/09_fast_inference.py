# %% [markdown]
# # Unit 09 — Fast inference (bonus): a key/value cache and the online softmax
#
# Your tiny GPT from unit 08 writes one character at a time, and for every character it runs the
# whole text so far through all its layers again. Almost all of that work was already done one
# step earlier. In this unit you remove the waste with a **key/value cache**, measure what it
# buys, and find out why a model with learned absolute positions (like ours, and like GPT-2)
# cannot keep its cache once the text outgrows the context. Then you turn to memory: attention
# builds a `T × T` matrix of scores, and the **online softmax**, the idea FlashAttention is
# built on, computes the same result while looking at the keys one block at a time.
#
# **By the end you will be able to**
# - show that the keys and values of earlier tokens do not change when a token is added, and
#   count how much work plain generation repeats;
# - store keys and values in a cache and run causal attention for new tokens only, with the
#   mask shifted to where those tokens stand;
# - run the GPT on new tokens at the right positions, and generate text with a cache that gives
#   exactly the tokens of plain generation, also past the context length;
# - explain what absolute position embeddings cost past the context, and how rotary positions
#   and sliding windows avoid it;
# - turn new tokens by their rotary positions under a cache, and measure what a cache that
#   forgets the first tokens of a text costs;
# - compute softmax attention block by block with a running maximum and a running sum, and
#   measure the memory it saves;
# - count what the cache itself costs in memory, for our model and for a 7B one, and write the
#   grouped-query attention that shrinks it;
# - (optional) write FlashAttention's backward pass, which recomputes each block instead of
#   keeping it.
#
# **How this notebook works.** Run the cells from top to bottom (Shift+Enter). Where you see
# `# YOUR CODE HERE`, delete the `raise NotImplementedError()` line and write your code. The
# cell below each exercise is a *self-check*: it runs your code on the example from the text
# and tells you what is wrong if it is not right. When you submit, the grader also runs hidden
# tests on other inputs and shapes, so write code that works in general, not just for the example.
#
# **Run All stops at an unfinished exercise.** Run ▸ Run All Cells stops at the first exercise you
# have not finished yet, with a red box under its **self-check**. The cells below it wait, plots
# included, since many of them use your answers. JupyterLab scrolls that red box into view. Fix the
# exercise, then go on with Run ▸ Run Selected Cell and All Below.
#
# The whole notebook runs in under a minute on a laptop CPU (about 40 seconds on a two-core
# one); the timing cells and the rolling-cache experiment take a few seconds each.

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
import statistics
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from grader.figures import show

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)
torch.set_num_threads(1)  # a tiny model runs as fast on one CPU thread, and its timings are steadier
device = "cuda" if torch.cuda.is_available() else "cpu"
GRADING = bool(os.environ.get("NBGRADER_EXECUTION"))  # under grading, the timing cells run a short version
print("device:", device, "| short version for grading:", GRADING)


# %% [markdown]
# ## 1. The model of unit 08
#
# The next two cells hold unit 08's model and its sampling code, as given code: `GPTConfig`,
# the blocks of unit 07, `TinyGPT`, `sample_next_token` and `generate`. They are the
# reference solutions of unit 08, with one simplification: the attention no longer records its
# weights for plotting. Read `MultiHeadAttention` and `generate` again: this unit takes them
# apart.

# %% nbgrader={"grade": false, "grade_id": "u09_given_model", "locked": true, "schema_version": 3, "solution": false, "task": false}
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


# %% nbgrader={"grade": false, "grade_id": "u09_given_sampling", "locked": true, "schema_version": 3, "solution": false, "task": false}
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


# %% [markdown]
# Now the trained weights. The course ships the model of unit 08 already trained, as
# `data/tiny_gpt.pt` (4 layers, 4 heads, width 64, context 64, trained as in unit 08; the next
# cell prints its validation loss). The cell looks for `data/` as unit 08 does: in the current
# folder and its parents, then in the course's package. Under the grader, or if it finds no
# checkpoint, it builds an untrained model of the same shape, so that
# every cell still runs: its text is then gibberish, but every equality and timing below holds
# just the same.

# %%
CORPUS_CHARS = "\n ,.abcdefghijklmnoprstuvwxyz"   # the course corpus's characters, for the stand-in


def find_data_dir(start=None):
    """The nearest folder data/ holding corpus_stats.json, looking in `start` and its parents."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "data" / "corpus_stats.json").is_file():
            return folder / "data"
    if GRADING:  # the grader keeps to the small stand-in below
        return None
    try:  # else the copy installed with the course's package
        from attention_course.content import data_dir
    except ImportError:
        return None
    return data_dir() if (data_dir() / "corpus_stats.json").is_file() else None


DATA_DIR = find_data_dir()
CHECKPOINT_PATH = DATA_DIR / "tiny_gpt.pt" if DATA_DIR else None   # <- or any checkpoint in this format

if CHECKPOINT_PATH is not None and Path(CHECKPOINT_PATH).is_file():
    checkpoint = torch.load(CHECKPOINT_PATH, weights_only=True)
    cfg = GPTConfig(**checkpoint["config"])
    model = TinyGPT(cfg)
    model.load_state_dict({name: t.float() if t.is_floating_point() else t      # stored as float16
                           for name, t in checkpoint["state_dict"].items()})
    chars = checkpoint["chars"]
    print(f"loaded {CHECKPOINT_PATH}: validation loss {checkpoint['val_loss']:.4f} after {checkpoint['steps']} steps")
else:
    chars = CORPUS_CHARS
    cfg = GPTConfig(vocab_size=len(chars), context_length=64, emb_dim=64, num_heads=4, num_layers=4)
    torch.manual_seed(0)
    model = TinyGPT(cfg)
    print("no checkpoint found: using an untrained model of the same shape")
model = model.to(device).eval()
stoi = {ch: i for i, ch in enumerate(chars)}


def encode(text):
    return [stoi[ch] for ch in text]


def decode(ids):
    return "".join(chars[i] for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids))


print(cfg)
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
start = torch.tensor([encode("\n")], device=device)                         # (1, 1)
print(repr(decode(generate(model, start, 80, temperature=0.0)[0])))


# %% [markdown]
# ## 2. What plain generation computes again and again
#
# To write one more character, `generate` feeds the model the whole text so far and keeps only
# the logits of the **last** position. Start with the smallest case: feed `"ann met bob"` (11
# characters), then `"ann met bob."` (12), and compare the keys that every attention layer
# computes. A forward hook on `W_key` catches them on the way.

# %%
def keys_per_layer(model, idx):
    """The keys each attention layer computes for idx (1, T): one (T, E) tensor per layer."""
    found = []
    hooks = [block.att.W_key.register_forward_hook(lambda module, inputs, output: found.append(output[0]))
             for block in model.blocks]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return found


text = "ann met bob"
before = keys_per_layer(model, torch.tensor([encode(text)], device=device))
after = keys_per_layer(model, torch.tensor([encode(text + ".")], device=device))
for layer, (k_before, k_after) in enumerate(zip(before, after)):
    change = (k_after[:len(text)] - k_before).abs().max().item()
    print(f"layer {layer}: keys {tuple(k_before.shape)} then {tuple(k_after.shape)}; "
          f"largest change of the first {len(text)} keys: {change:.1e}")

# %% [markdown]
# The first 11 keys of every layer come out the same (up to the last bit or so of float32
# rounding, since a longer input may be summed in another order): only the 12th row is new.
# This is the causal mask at work. The hidden state of position *t* depends on the tokens
# `0 ... t` and on nothing after them, in every layer; a position's key and value are computed from
# its hidden state alone (a LayerNorm of that position, then a linear map); so appending a token cannot change any earlier key or value. The **queries**
# of earlier positions are not needed again either: they served to predict tokens we already have.
# To predict the next token we need
#
# - the query, key and value of the **new** token in every layer, and
# - the keys and values of **all earlier** tokens in every layer, which we computed before.
#
# So we keep the keys and values, layer by layer, in a **key/value cache** (KV cache), and each
# step feeds the model just the newest token. Queries are not cached.
#
# How much does that save? Count the token positions that go through the layers, and the
# attention scores (query-key dot products, per head and layer), for a prompt of 64 tokens
# followed by 256 new ones, in a model whose context is long enough for all 320.

# %%
prompt_len, new_tokens = 64, 256
lengths = [prompt_len + i for i in range(new_tokens)]        # tokens in the text at each step
plain_positions = sum(lengths)                               # the whole text, every step
cached_positions = prompt_len + (new_tokens - 1)             # the prompt once, then one token per step
plain_scores = sum(t * t for t in lengths)                   # a (t, t) matrix of scores every step
cached_scores = prompt_len ** 2 + sum(lengths[1:])           # the prompt's (64, 64) once, then one row of t
print(f"positions through the layers: {plain_positions:,} without a cache, {cached_positions:,} with one "
      f"({plain_positions / cached_positions:.0f}x fewer)")
print(f"attention scores per head and layer: {plain_scores:,} without, {cached_scores:,} with "
      f"({plain_scores / cached_scores:.0f}x fewer)")


# %% [markdown]
# Without a cache, step *t* processes *t* positions, so the work **per new token** grows in
# proportion to the length of the text (its attention, as $t^2$), and the whole generation of *T* tokens costs about
# $T^2/2$ position passes (and $T^3/3$ attention scores). With a cache each step processes one
# position and computes one row of *t* scores: the work per token is constant in the layers and
# grows only in proportion to *t* in attention. We will measure the real speed-up once the cache
# works; it is smaller than these counts, and we will see why.

# %% [markdown]
# ## 3. A cache for keys and values
#
# Each attention layer gets a cache of its own. It holds the keys and the values of the tokens
# seen so far, in the layout the attention already uses, `(B, H, T_cached, head_dim)`: batch,
# head, position, feature. Every step adds the new tokens' keys and values **along the position
# axis** (dimension −2) and hands back everything stored, ready for `q @ keys.transpose(-2, -1)`.
#
# The course's `KVCache` has three operations:
#
# | operation | does | returns |
# |---|---|---|
# | `cache.append(k, v)` | stores `k`, `v` of shape `(B, H, t, head_dim)` after the cached ones | all keys and all values, `(B, H, T_cached + t, head_dim)` each |
# | `len(cache)` | | `T_cached`, the number of cached **positions** (0 when empty) |
# | `cache.reset()` | forgets everything | |
#
# How it stores them is up to you. The simplest way grows two tensors with `torch.cat`, which
# copies the whole cache at every step. Fast generation loops (Hugging Face's static cache, for
# example) instead allocate a buffer for the longest text once and keep a pointer to how much of
# it is filled, so that a step writes only the new row; the cache then shows a slice of the
# buffer. (Servers of many texts, such as vLLM, hand out fixed-size pages of cache as a text
# grows, so as not to reserve the longest text for each.) `KVCache()` is not told the longest
# text, so a buffer here would grow as it fills, doubling its size as Python's lists do; with
# `torch.cat` or with such a buffer, either is fine.

# %% [markdown]
# ### Exercise — `KVCache` (about 10 minutes)
#
# **Goal:** the class of the table: `append(k, v)` stores keys and values of shape
# `(B, H, t, head_dim)` after the ones already stored (along dimension −2) and returns all the
# keys and all the values; `len(cache)` is the number of stored positions (0 for a new or reset
# cache); `reset()` empties the cache.
#
# <details><summary>Hint</summary>
#
# Start with `None` for "nothing stored yet". `torch.cat((old, new), dim=-2)` joins along the
# positions; in `(B, H, T, head_dim)`, dimension 1 is the heads and −1 the features. `len()`
# calls `__len__`, which must return a Python `int`: the size of the position axis, not the
# number of `append` calls (the first call may bring several positions at once).
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_kv_cache", "locked": false, "schema_version": 3, "solution": true, "task": false}
class KVCache:
    """The keys and values one attention layer has computed so far, (B, H, T_cached, head_dim) each.

    append(k, v): store k, v (B, H, t, head_dim) after the cached ones; return all keys and all
    values, (B, H, T_cached + t, head_dim) each. len(cache): T_cached. reset(): forget everything."""

    def __init__(self):
        ### BEGIN SOLUTION
        self.keys = None      # (B, H, T_cached, hd) once something is stored
        self.values = None    # (B, H, T_cached, hd)
        ### END SOLUTION

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ### BEGIN SOLUTION
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat((self.keys, k), dim=-2)        # (B, H, T_cached + t, hd)
            self.values = torch.cat((self.values, v), dim=-2)    # (B, H, T_cached + t, hd)
        return self.keys, self.values
        ### END SOLUTION

    def __len__(self) -> int:
        ### BEGIN SOLUTION
        return 0 if self.keys is None else self.keys.shape[-2]
        ### END SOLUTION

    def reset(self) -> None:
        ### BEGIN SOLUTION
        self.keys = self.values = None
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_kv_cache_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("KVCache")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Exact, Mistake, Spec, Tuple, run


def kv_case(label, batch, heads, head_dim, chunks, k=None, v=None):
    g = torch.Generator().manual_seed(sum(chunks) * 31 + batch * 7 + heads)
    shape = (batch, heads, sum(chunks), head_dim)
    k = torch.randn(*shape, generator=g) if k is None else k
    v = torch.randn(*shape, generator=g) if v is None else v
    return Case(f"{label}: appends of {list(chunks)} positions, each (B={batch}, H={heads}, t, head_dim={head_dim})",
                ks=list(k.split(list(chunks), dim=-2)), vs=list(v.split(list(chunks), dim=-2)))


def kv_cache_examples():
    k = torch.arange(24.0).view(1, 2, 4, 3)
    return [kv_case("keys 0, 1, 2, ..., values their negatives", 1, 2, 3, [2, 1, 1], k, -k),
            kv_case("random keys and values", 2, 1, 2, [1, 1, 1])]


def kv_cache_cases(g):
    return [kv_case("random", b, h, d, chunks) for b, h, d, chunks in
            ((3, 4, 8, [5, 1, 1, 2]), (1, 1, 4, [1]), (2, 2, 16, [3, 3]), (1, 3, 2, [1, 1, 1, 1, 1, 1]))]


def call_kv_cache(ks, vs):
    cache = KVCache()
    lengths = [len(cache)]
    for k, v in zip(ks, vs):
        try:
            keys, values = (t.clone() for t in cache.append(k, v))   # a buffer may be reused later: copy now
        except RuntimeError as exc:    # add a hint to PyTorch's message, keep where it came from
            if "Sizes of tensors must match" in str(exc):
                exc.args = (str(exc).splitlines()[0] + " (keys and values are joined along the positions, "
                            "dimension -2 of (B, H, T, head_dim))",)
            raise
        lengths.append(len(cache))
    cache.reset()
    lengths.append(len(cache))
    again = cache.append(ks[-1], vs[-1])[0].clone()
    lengths.append(len(cache))
    return keys, values, torch.tensor(lengths, dtype=torch.float64), again


def kv_cache_oracle(ks, vs):
    sizes = [k.shape[-2] for k in ks]
    lengths = [0] + [sum(sizes[:i + 1]) for i in range(len(sizes))] + [0, sizes[-1]]
    return torch.cat(ks, dim=-2), torch.cat(vs, dim=-2), torch.tensor(lengths, dtype=torch.float64), ks[-1]


def kv_cache_mistakes(ks, vs):
    keys, values, lengths, again = kv_cache_oracle(ks, vs)
    total, n = lengths[len(ks)], len(ks)
    others = ((0, "the batch (dimension 0)"), (1, "the heads (dimension 1)"), (-1, "the features (dimension -1)"))
    for dim, name in others:
        if all(k.shape[-2] == ks[0].shape[-2] for k in ks):
            yield Mistake(f"you joined the keys and values along {name}; join them along the positions, "
                          "dimension -2 of (B, H, T, head_dim)", (torch.cat(ks, dim=dim), torch.cat(vs, dim=dim)))
    if n > 1:
        yield Mistake("append returned only the keys and values it was given; return all of them, the cached ones "
                      "first", (ks[-1], vs[-1]))
        counted = torch.tensor([0.0] + [i + 1.0 for i in range(n)] + [0.0, 1.0], dtype=torch.float64)
        message = ("len(cache) counts the calls of append; it must count the cached positions (the size of "
                   "dimension -2)")
        if not torch.equal(counted, lengths):
            yield Mistake(message, (None, None, counted))
            not_reset = counted.clone()
            not_reset[-2:] = torch.tensor([n, n + 1.0], dtype=torch.float64)
            yield Mistake(message, (None, None, not_reset))
    for dim, name in others:
        wrong = torch.tensor([0.0] + [float(ks[0].shape[dim])] * n + [0.0, float(ks[0].shape[dim])],
                             dtype=torch.float64)
        if not torch.equal(wrong, lengths):
            yield Mistake(f"len(cache) is the size of {name}; it must be the number of cached positions "
                          "(dimension -2)", (None, None, wrong))
    stale = lengths.clone()
    stale[-2:] = torch.tensor([total, total + ks[-1].shape[-2]], dtype=torch.float64)
    message = "reset() does not empty the cache: after reset(), len(cache) must be 0 and append starts afresh"
    yield Mistake(message, (None, None, stale))
    yield Mistake(message, (None, None, None, torch.cat(ks + ks[-1:], dim=-2)))


def kv_dtype_case(g, chunks, dtype):
    k, v = torch.randn(1, 2, sum(chunks), 3, generator=g), torch.randn(1, 2, sum(chunks), 3, generator=g)
    return Case(f"appends of {list(chunks)} positions in {dtype}, each (B=1, H=2, t, head_dim=3): the dtype of what "
                "the last append returned", ks=list(k.split(list(chunks), dim=-2)),
                vs=list(v.split(list(chunks), dim=-2)), dtype=dtype)


def call_kv_cache_dtype(ks, vs, dtype):
    cache = KVCache()
    for k, v in zip(ks, vs):
        keys, values = cache.append(k.to(getattr(torch, dtype)), v.to(getattr(torch, dtype)))
    return f"keys {str(keys.dtype).removeprefix('torch.')}, values {str(values.dtype).removeprefix('torch.')}"


def kv_dtype_mistakes(dtype):
    if dtype != "float32":
        yield Mistake("append returned float32 keys and values for keys and values of another dtype: a buffer made by "
                      "torch.zeros or torch.empty is float32 unless told otherwise; make it with the dtype and device "
                      "of k (k.new_zeros, or dtype=k.dtype)", "keys float32, values float32")


run(Spec("KVCache", call_kv_cache, kv_cache_oracle, examples=kv_cache_examples, cases=kv_cache_cases,
         mistakes=kv_cache_mistakes,
         judge=Tuple(parts=("the keys the last append returned", "the values the last append returned",
                            "len(cache) when new, after each append, after reset() and after one more append",
                            "the keys the append after reset() returned"))),
    Spec("KVCache", call_kv_cache_dtype, lambda dtype: f"keys {dtype}, values {dtype}",
         examples=lambda: [kv_dtype_case(torch.Generator().manual_seed(3), [2, 1], "bfloat16")],
         cases=lambda g: [kv_dtype_case(g, [3, 2], "float64"), kv_dtype_case(g, [1, 1, 1], "bfloat16")],
         mistakes=kv_dtype_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Attention for the new tokens only
#
# Take one attention layer and a cache that already holds `P = len(cache)` positions. New tokens
# arrive, `x` of shape `(B, t, d_in)`: they stand at positions `P, P + 1, ..., P + t − 1`.
# Their queries, keys and values come from the layer's own projections `W_query`, `W_key`,
# `W_value`, split into heads as in unit 06. The keys and values go into the cache, which hands
# back all `P + t` of them; the scores are then a `(t, P + t)` matrix per head: the new queries
# against every key so far.
#
# The causal rule does not change: the token at position `P + i` may look at positions
# `0 ... P + i`. For `P = 3` cached tokens and `t = 2` new ones (✓ = may look, ✗ = blocked):
#
# | query ↓ key → | 0 | 1 | 2 | 3 | 4 |
# |---|---|---|---|---|---|
# | position 3 (new token 0) | ✓ | ✓ | ✓ | ✓ | ✗ |
# | position 4 (new token 1) | ✓ | ✓ | ✓ | ✓ | ✓ |
#
# These are the **last `t` rows** of the full `(P + t) × (P + t)` causal mask. Two cases matter:
# - the **prefill**: the prompt goes in first, `P = 0` and `t = T0` tokens at once, and the mask
#   is the ordinary causal mask of unit 05;
# - a **decoding step**: one token, `t = 1`; its single row blocks nothing, since the newest
#   token may look at everything.
#
# The top-left corner of the mask, `att.mask[:t, :P + t]`, is a tempting shortcut, and a wrong
# one as soon as `P > 0`: its first row lets the query see key 0 only.

# %% [markdown]
# ### Exercise — `cached_attention(att, x, cache)` (about 25 minutes)
#
# **Goal:** the output of the causal multi-head attention layer `att` (a `MultiHeadAttention`
# of the given code: use its `W_query`, `W_key`, `W_value`, `out_proj`, `num_heads`, `head_dim`
# and `d_out`) for new tokens `x` of shape `(B, t, d_in)` that follow the `len(cache)` tokens
# already in `cache`: append their keys and values to `cache`, and return a `(B, t, d_out)`
# tensor equal to the last `t` rows of what `att` gives for the whole sequence. This is for
# inference: leave dropout out.
#
# <details><summary>Hint</summary>
#
# Read `len(cache)` **before** appending: call it `P`. Split heads as `att.forward` does. New
# token `i` stands at position `P + i`: in the `(t, P + t)` table of scores, key `j` is blocked
# when it comes after that position, `j > P + i`. Draw the table for `P = 3`, `t = 2` first.
# After `weights @ values`, merge the heads back and apply `out_proj`.
# <details><summary>More</summary>
#
# Build the `(t, P + t)` boolean table of blocked keys on `x.device` in one line: either compare
# a column of query positions `P ... P + t − 1` with a row of key positions `0 ... P + t − 1`, or
# take the upper triangle of a table of ones with its diagonal moved `P` places to the right
# (`torch.triu` has an argument for that). Check it against the table you drew.
# (`F.scaled_dot_product_attention(..., is_causal=True)` would not do: with more keys than
# queries its mask is the top-left corner.)
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_cached_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def cached_attention(att: MultiHeadAttention, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Causal attention of `att` for new tokens x (B, t, d_in) at positions len(cache) ... len(cache) + t - 1.

    Appends their keys and values to `cache`; returns (B, t, d_out), the last t rows of
    att(whole sequence). No dropout (inference)."""
    ### BEGIN SOLUTION
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
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_cached_attention_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("cached_attention")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.inputs import QKV, linear_state
from grader.spec import Case, Exact, Mistake, Spec, Tuple, build, dropout_seen, run


def cached_attention_case(g, batch, num_tokens, width, heads, chunks, qkv_bias=False, context_length=None):
    state = linear_state(g, QKV, width, width, qkv_bias) | linear_state(g, ("out_proj",), width, width, True)
    context_length = context_length or num_tokens + 2
    return Case(f"x of shape {(batch, num_tokens, width)}, {heads} heads, qkv_bias={qkv_bias}, context_length "
                f"{context_length}, fed in chunks of {list(chunks)} tokens to one cache",
                x=torch.randn(batch, num_tokens, width, generator=g), state=state, heads=heads, chunks=list(chunks),
                qkv_bias=qkv_bias, context_length=context_length)


def cached_attention_examples():
    g = torch.Generator().manual_seed(9)
    return [cached_attention_case(g, 1, 6, 8, 2, [3, 1, 2]), cached_attention_case(g, 2, 5, 8, 2, [1, 1, 1, 1, 1])]


def cached_attention_cases(g):
    return [cached_attention_case(g, 2, 7, 12, 3, [4, 1, 1, 1], qkv_bias=True),
            cached_attention_case(g, 1, 5, 8, 1, [5]),                              # the prefill alone
            cached_attention_case(g, 3, 1, 8, 4, [1]),                              # one token, empty cache
            cached_attention_case(g, 2, 9, 16, 4, [2, 3, 1, 3], context_length=9),  # fills the context
            cached_attention_case(g, 1, 8, 6, 2, [1, 1, 1, 1, 4], qkv_bias=True)]


def call_cached_attention(x, state, heads, chunks, qkv_bias, context_length):
    width = x.shape[-1]
    att = build(MultiHeadAttention, state, width, width, context_length, 0.0, heads, qkv_bias)
    cache = KVCache()
    outputs, lengths = [], []
    with torch.no_grad():
        for part in x.split(chunks, dim=1):
            outputs.append(cached_attention(att, part, cache))
            lengths.append(len(cache))
    return torch.cat(outputs, dim=1), torch.tensor(lengths, dtype=torch.float64)


def attention_reference(x, state, heads, chunks, allowed=None, scale=None, project=True):
    """Attention of the whole x in float64: causal (PyTorch's own kernel) when `allowed` is None,
    else with the boolean mask allowed[i, j] (True = query i may look at key j)."""
    s = {k: v.double() for k, v in state.items()}
    (b, t, width), hd = x.shape, x.shape[-1] // heads

    def lin(name, z):
        return F.linear(z, s[name + ".weight"], s.get(name + ".bias"))

    q, k, v = (lin(n, x.double()).view(b, t, heads, hd).transpose(1, 2) for n in QKV)   # (B, H, T, hd)
    if allowed is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    out = out.transpose(1, 2).reshape(b, t, width)
    return lin("out_proj", out) if project else out


def chunk_masks(chunks):
    """(query, key, start of the query's chunk, end of the query's chunk) index grids."""
    starts = torch.repeat_interleave(torch.tensor([sum(chunks[:i]) for i in range(len(chunks))]), torch.tensor(chunks))
    ends = starts + torch.repeat_interleave(torch.tensor(chunks), torch.tensor(chunks))
    i, j = torch.arange(sum(chunks))[:, None], torch.arange(sum(chunks))[None, :]
    return i, j, starts[:, None], ends[:, None]


def cached_attention_oracle(x, state, heads, chunks):
    lengths = torch.tensor([sum(chunks[:n + 1]) for n in range(len(chunks))], dtype=torch.float64)
    return attention_reference(x, state, heads, chunks), lengths


def cached_attention_mistakes(x, state, heads, chunks):
    i, j, start, end = chunk_masks(chunks)
    causal, hd = j <= i, x.shape[-1] // heads
    if max(chunks) > 1:
        yield Mistake("the new tokens of one call see each other's keys in both directions, which shows when "
                      "several tokens come at once (the prefill): either the causal mask is missing, or its offset "
                      "was read after the new keys were appended (len(cache) is then P + t, and a mask offset by it "
                      "blocks nothing); take P = len(cache) before cache.append, then the token at position P + i "
                      "may only look at keys 0 ... P + i",
                      (attention_reference(x, state, heads, chunks, allowed=j < end),))
    if len(chunks) > 1:
        yield Mistake("you cut the mask from its top-left corner (rows 0 ... t-1), as "
                      "F.scaled_dot_product_attention(..., is_causal=True) does when there are more keys than "
                      "queries: once the cache holds P tokens the new rows are rows P ... P + t - 1 of the causal "
                      "mask; new token i may look at keys 0 ... P + i",
                      (attention_reference(x, state, heads, chunks, allowed=j <= i - start),))
        yield Mistake("the new queries look only at the new keys: attend to all the keys and values the cache "
                      "returns, the cached ones included",
                      (attention_reference(x, state, heads, chunks, allowed=causal & (j >= start)),))
    if heads > 1:
        yield Mistake("the scores are divided by the square root of d_out; divide by the square root of head_dim, "
                      "the size of one head's keys",
                      (attention_reference(x, state, heads, chunks, allowed=causal, scale=1 / math.sqrt(x.shape[-1])),))
    yield Mistake("the scores are not scaled: divide them by the square root of head_dim",
                  (attention_reference(x, state, heads, chunks, allowed=causal, scale=1.0),))
    yield Mistake("att.out_proj is not applied to the merged heads",
                  (attention_reference(x, state, heads, chunks, allowed=causal, scale=1 / math.sqrt(hd),
                                       project=False),))


def train_mode_case(g, batch, num_tokens, width, heads, chunks):
    state = linear_state(g, QKV, width, width, False) | linear_state(g, ("out_proj",), width, width, True)
    return Case(f"x of shape {(batch, num_tokens, width)}, {heads} heads, the layer left in train() mode with dropout "
                f"0.5, fed in chunks of {list(chunks)} tokens: does dropout act?",
                x=torch.randn(batch, num_tokens, width, generator=g), state=state, heads=heads, chunks=list(chunks))


def call_cached_attention_in_train_mode(x, state, heads, chunks):
    width = x.shape[-1]
    att = build(MultiHeadAttention, state, width, width, x.shape[1], 0.5, heads, train=True)
    cache = KVCache()
    with dropout_seen() as log, torch.no_grad():
        for part in x.split(chunks, dim=1):
            cached_attention(att, part, cache)
    return "dropout acted" if log.values().numel() else "no dropout"


def train_mode_mistakes():
    yield Mistake("the layer was in train() mode and your function applied its dropout: cached attention is for "
                  "inference, so leave dropout out whatever the layer's mode", "dropout acted")


run(Spec("cached_attention", call_cached_attention, cached_attention_oracle, examples=cached_attention_examples,
         cases=cached_attention_cases, mistakes=cached_attention_mistakes,
         judge=Tuple(parts=("the outputs of all chunks, joined along the tokens", "len(cache) after each chunk"))),
    Spec("cached_attention", call_cached_attention_in_train_mode, lambda: "no dropout",
         examples=lambda: [train_mode_case(torch.Generator().manual_seed(19), 1, 5, 8, 2, [3, 1, 1])],
         cases=lambda g: [train_mode_case(g, 2, 6, 12, 3, [2, 1, 3])], mistakes=train_mode_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Feed a sequence to one layer in pieces, a prefill of 5 tokens and then single tokens and a
# pair, and compare with the layer's own forward pass on the whole sequence. Each piece's output
# should be the matching rows of the full output.

# %%
torch.manual_seed(1)
layer = model.blocks[0].att                                          # the first attention layer of the model
x_demo = torch.randn(1, 10, cfg.emb_dim, device=device)              # (1, 10, E)
cache = KVCache()
with torch.no_grad():
    full = layer(x_demo)                                             # (1, 10, E), all at once
    pieces = [cached_attention(layer, part, cache) for part in x_demo.split([5, 1, 1, 2, 1], dim=1)]
print("pieces:", [tuple(p.shape) for p in pieces], "| cached positions:", len(cache))
print("largest difference from the full pass:", (torch.cat(pieces, dim=1) - full).abs().max().item())


# %% [markdown]
# ## 5. The whole model, new tokens only
#
# With one `KVCache` per block, the model can take new tokens only. The path is the one of
# `TinyGPT.forward` (read it again above), with two changes:
#
# 1. **Positions.** The new tokens stand at positions `P ... P + t − 1`, where `P` is the number
#    of tokens already cached (any block's cache will do: they all hold the same positions). The
#    position embedding must be looked up at those positions, not at `0 ... t − 1`: the keys in
#    the cache were computed with the positions their tokens had.
# 2. **Attention.** In each block, `block.att(...)` becomes `cached_attention(block.att, ..., cache)`
#    with that block's cache; layer norms, feed-forward network, residual connections, final norm
#    and output head stay as they are.
#
# The model has position vectors for `context_length` positions only, so a call that would go past
# them must fail with a clear message, as `TinyGPT.forward` does.

# %% [markdown]
# ### Exercise — `forward_cached(model, idx, caches)` (about 15 minutes)
#
# **Goal:** the logits `(B, t, V)` of a `TinyGPT` for the new tokens `idx` `(B, t)` that follow the
# `P = len(caches[0])` tokens already cached, using `caches`, a list of one `KVCache` per block
# (which this call extends by `t` positions). When `P + t > model.cfg.context_length`, raise a
# `ValueError` whose message says the limit, before anything is computed. For inference: leave the
# dropout layers out.
#
# <details><summary>Hint</summary>
#
# The new tokens stand after the `P` cached ones: their positions do not start at 0.
# `zip(model.blocks, caches)` pairs each block with its cache. A block computes
# `x = x + attention(norm1(x))`, then `x = x + ff(norm2(x))`: write those two lines out with
# `block.norm1`, `block.att`, `block.ff` and `block.norm2`.
# <details><summary>More</summary>
#
# `torch.arange(P, P + t, device=idx.device)` gives the positions.
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_forward_cached", "locked": false, "schema_version": 3, "solution": true, "task": false}
def forward_cached(model: TinyGPT, idx: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
    """Logits (B, t, V) for the new tokens idx (B, t) at positions P ... P + t - 1, P = len(caches[0]).

    caches: one KVCache per block, each extended by t positions. ValueError when P + t > context_length."""
    ### BEGIN SOLUTION
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
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_forward_cached_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("forward_cached")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.inputs import QKV, linear_state
from grader.spec import Case, Exact, Mistake, Spec, Tensor, build, dropout_seen, run


def gpt_state(g, cfg):
    """Random parameters with the names and shapes of TinyGPT(cfg)."""
    V, E = cfg["vocab_size"], cfg["emb_dim"]
    state = {"tok_emb.weight": torch.randn(V, E, generator=g),
             "pos_emb.weight": torch.randn(cfg["context_length"], E, generator=g)}
    for i in range(cfg["num_layers"]):
        state |= linear_state(g, tuple(f"blocks.{i}.att.{n}" for n in QKV), E, E, cfg["qkv_bias"], bias_size=0.1)
        for name, d_in, d_out in (("att.out_proj", E, E), ("ff.layers.0", E, 4 * E), ("ff.layers.2", 4 * E, E)):
            state |= linear_state(g, (f"blocks.{i}.{name}",), d_in, d_out, True, bias_size=0.1)
    for n in [f"blocks.{i}.norm{k}" for i in range(cfg["num_layers"]) for k in (1, 2)] + ["final_norm"]:
        state |= {n + ".scale": 1 + 0.1 * torch.randn(E, generator=g), n + ".shift": 0.1 * torch.randn(E, generator=g)}
    return state | linear_state(g, ("out_head",), E, V, False)


def gpt_logits(cfg, state, idx, positions=None):
    """Logits of TinyGPT in float64 for idx (B, T), causal; the token at column i sits at positions[i]
    (default 0 ... T-1)."""
    s = {k: v.double() for k, v in state.items()}
    (b, t), E, H = idx.shape, cfg["emb_dim"], cfg["num_heads"]
    positions = torch.arange(t) if positions is None else positions

    def lin(name, z):
        return F.linear(z, s[name + ".weight"], s.get(name + ".bias"))

    def norm(name, z):
        return F.layer_norm(z, z.shape[-1:], s[name + ".scale"], s[name + ".shift"], eps=1e-5)

    x = s["tok_emb.weight"][idx] + s["pos_emb.weight"][positions]
    for i in range(cfg["num_layers"]):
        p = f"blocks.{i}."
        q, k, v = (lin(p + "att." + n, norm(p + "norm1", x)).view(b, t, H, E // H).transpose(1, 2) for n in QKV)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, E)
        x = x + lin(p + "att.out_proj", att)
        x = x + lin(p + "ff.layers.2", F.gelu(lin(p + "ff.layers.0", norm(p + "norm2", x)), approximate="tanh"))
    return lin("out_head", norm("final_norm", x))


def forward_cached_case(g, cfg, batch, chunks):
    cfg = dict(dropout=0.0, **cfg)
    return Case(f"TinyGPT with V={cfg['vocab_size']}, context {cfg['context_length']}, width {cfg['emb_dim']}, "
                f"{cfg['num_heads']} heads, {cfg['num_layers']} layer{'s' * (cfg['num_layers'] > 1)}, qkv_bias="
                f"{cfg['qkv_bias']}; {batch} sequence{'s' * (batch > 1)} fed in chunks of {list(chunks)} tokens; the "
                "logits of all chunks joined along the tokens",
                cfg=cfg, state=gpt_state(g, cfg), chunks=list(chunks),
                idx=torch.randint(0, cfg["vocab_size"], (batch, sum(chunks)), generator=g))


SMALL = dict(vocab_size=7, context_length=8, emb_dim=8, num_heads=2, num_layers=1, qkv_bias=False)


def forward_cached_examples():
    g = torch.Generator().manual_seed(5)
    return [forward_cached_case(g, SMALL, 1, [3, 1, 2]), forward_cached_case(g, SMALL, 2, [1, 1, 1, 1]),
            forward_cached_case(g, dict(SMALL, context_length=6, num_layers=2), 1, [2, 1, 1])]


def forward_cached_cases(g):
    return [forward_cached_case(g, dict(vocab_size=11, context_length=10, emb_dim=16, num_heads=4, num_layers=2,
                                        qkv_bias=True), 2, [4, 1, 1, 2, 2]),
            forward_cached_case(g, dict(vocab_size=5, context_length=6, emb_dim=12, num_heads=3, num_layers=3,
                                        qkv_bias=False), 1, [6]),
            forward_cached_case(g, dict(vocab_size=9, context_length=12, emb_dim=8, num_heads=2, num_layers=2,
                                        qkv_bias=False), 3, [1, 1, 1, 1, 1, 1, 1])]


def call_forward_cached(cfg, state, idx, chunks):
    model = build(TinyGPT, state, GPTConfig(**cfg))
    caches = [KVCache() for _ in range(cfg["num_layers"])]
    with torch.no_grad():
        return torch.cat([forward_cached(model, part, caches) for part in idx.split(chunks, dim=1)], dim=1)


def forward_cached_oracle(cfg, state, idx):
    return gpt_logits(cfg, state, idx)


def forward_cached_mistakes(cfg, state, idx, chunks):
    if len(chunks) > 1:
        restart = torch.cat([torch.arange(c) for c in chunks])
        yield Mistake("the new tokens were given the positions 0, 1, ... again; they stand at len(cache), "
                      "len(cache) + 1, ... (the cached keys keep the positions they were computed with)",
                      gpt_logits(cfg, state, idx, positions=restart))
    # The offset taken from something other than the cache's length (while it stays inside the
    # position table: past it, pos_emb raises).
    for offset, used in ((lambda c: cfg["num_layers"], "len(caches), the number of layers"),
                         (lambda c: c, "idx.shape[1], the number of new tokens")):
        positions = torch.cat([offset(c) + torch.arange(c) for c in chunks])
        if int(positions.max()) < cfg["context_length"]:
            yield Mistake(f"the new tokens' positions start at {used}; they start at len(caches[0]), the number of "
                          "positions the cache already holds", gpt_logits(cfg, state, idx, positions=positions))


def overflow_cases(g):
    cases = []
    for cached, new in ((8, 1), (5, 4), (0, 9)):
        label = (f"TinyGPT with context 8: {cached} tokens cached, then {new} more" if cached
                 else "TinyGPT with context 8: 9 tokens at once into empty caches")
        cases.append(Case(label, state=gpt_state(g, dict(SMALL, dropout=0.0)), cached=cached, new=new))
    return cases


def call_forward_cached_overflow(state, cached, new):
    cfg = dict(vocab_size=7, context_length=8, emb_dim=8, num_heads=2, num_layers=1, qkv_bias=False, dropout=0.0)
    model = build(TinyGPT, state, GPTConfig(**cfg))
    caches = [KVCache()]
    with torch.no_grad():
        if cached:
            forward_cached(model, torch.zeros(1, cached, dtype=torch.long), caches)
        try:
            forward_cached(model, torch.ones(1, new, dtype=torch.long), caches)
        except ValueError as exc:
            return "a ValueError that says the limit" if "8" in str(exc) else "a ValueError without the limit"
        except IndexError:
            return "IndexError"
    return "no error"


def overflow_mistakes():
    yield Mistake("going past context_length raised an IndexError from the position embedding; check "
                  "len(cache) + t against model.cfg.context_length first and raise a ValueError that says the limit",
                  "IndexError")
    yield Mistake("going past context_length raised no error; raise a ValueError that says the limit", "no error")
    yield Mistake("the ValueError for going past context_length does not say the limit: put "
                  "model.cfg.context_length in the message", "a ValueError without the limit")


def overflow_examples():
    return overflow_cases(torch.Generator().manual_seed(6))[:1]


def train_mode_case(g, cfg, chunks):
    cfg = dict(dropout=0.5, **cfg)
    return Case(f"TinyGPT with context {cfg['context_length']}, width {cfg['emb_dim']}, {cfg['num_heads']} heads, "
                f"{cfg['num_layers']} layer{'s' * (cfg['num_layers'] > 1)}, left in train() mode with dropout 0.5; "
                f"chunks of {list(chunks)} tokens: does dropout act?",
                cfg=cfg, state=gpt_state(g, cfg), chunks=list(chunks),
                idx=torch.randint(0, cfg["vocab_size"], (1, sum(chunks)), generator=g))


def call_forward_cached_in_train_mode(cfg, state, idx, chunks):
    model = build(TinyGPT, state, GPTConfig(**cfg), train=True)
    caches = [KVCache() for _ in range(cfg["num_layers"])]
    with dropout_seen() as log, torch.no_grad():
        for part in idx.split(chunks, dim=1):
            forward_cached(model, part, caches)
    return "dropout acted" if log.values().numel() else "no dropout"


def train_mode_mistakes():
    yield Mistake("the model was in train() mode and dropout acted in forward_cached: it is for inference, so leave "
                  "out the dropout layers (drop_emb, drop_shortcut, and any dropout in cached_attention) whatever the "
                  "model's mode", "dropout acted")


run(Spec("forward_cached", call_forward_cached, forward_cached_oracle, examples=forward_cached_examples,
         cases=forward_cached_cases, mistakes=forward_cached_mistakes, judge=Tensor()),
    Spec("forward_cached", call_forward_cached_overflow, lambda: "a ValueError that says the limit",
         examples=overflow_examples, cases=lambda g: overflow_cases(g)[1:], mistakes=overflow_mistakes,
         judge=Exact()),
    Spec("forward_cached", call_forward_cached_in_train_mode, lambda: "no dropout",
         examples=lambda: [train_mode_case(torch.Generator().manual_seed(7), SMALL, [3, 1, 1])],
         cases=lambda g: [train_mode_case(g, dict(SMALL, num_layers=2), [2, 2, 1])], mistakes=train_mode_mistakes,
         judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# The same test for the whole model: the logits of a prompt fed in pieces through the cache
# equal the logits of one plain forward pass.

# %%
ids = torch.tensor([encode("ann met bob. bob gave ann two red cups.")], device=device)   # (1, 39)
caches = [KVCache() for _ in model.blocks]
with torch.no_grad():
    plain, _ = model(ids)                                                                 # (1, 39, V)
    pieces = torch.cat([forward_cached(model, part, caches) for part in ids.split([20, 1, 1, 17], dim=1)], dim=1)
print("logits", tuple(pieces.shape), "| largest difference from the plain forward pass:",
      (pieces - plain).abs().max().item())


# %% [markdown]
# ## 6. Generating with the cache, and the end of the context
#
# `generate_cached` takes the steps of `generate`, with less work in each:
#
# 1. **Prefill.** The prompt (its last `context_length` tokens) goes into fresh caches in one call;
#    the logits of its last position give the first new token.
# 2. **Decode.** Every further step feeds only the token just sampled, at the next position.
#
# Then the text reaches the end of the context. Our model has learned position vectors for the
# positions `0 ... 63` and no others. Once the text is longer, `generate` feeds its **last 64
# tokens at the positions 0 ... 63**: at every step the window moves by one, and every token in it
# moves down one position. The cached keys and values were computed from each token *and its old
# position*, and in the layers above the first also from a context that still held the token that
# has just dropped out of the window. None of them is what a forward pass over the new window
# computes. Dropping the oldest entry and keeping the rest (a "sliding" cache) therefore gives
# other tokens than `generate`.
#
# The exact way is to start again: when the caches are full and another token must go in, empty
# them and prefill with the last `context_length` tokens. That is a full forward pass over the
# window, exactly the work `generate` does at each step, and past the context the window moves at
# *every* step. So with learned absolute positions the cache saves work only until the text
# fills the context; after that every step is a rebuild. We will measure it.

# %% [markdown]
# ### Exercise — `generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None)` (about 20 minutes)
#
# **Goal:** `generate` with a cache, with the same contract: return the prompt `idx` `(B, T0)`
# followed by `max_new_tokens` new tokens, each chosen by `sample_next_token` from the logits of
# the last position; run without gradient tracking, in `eval()` mode, and restore the model's
# previous mode before returning. Use one new `KVCache` per block for each call (a cache left over
# from another call belongs to another text), feed the prompt's last `context_length` tokens
# first and then one token per step, and rebuild the caches from the last `context_length` tokens
# whenever they are full. With `temperature=0` the result must equal `generate`'s token for
# token, also when the prompt is longer than the context and when generation goes past it.
#
# <details><summary>Hint</summary>
#
# Keep the loop of `generate` and change what goes into the model: only the tokens the caches
# have not seen, unless the caches are empty or full, when they start again from the window of
# the last `context_length` tokens. `forward_cached` returns logits `(B, t, V)`: the last row
# picks the next token.
# <details><summary>More</summary>
#
# One `if` at the top of the loop decides what to feed, from how many positions the caches hold:
# two cases start afresh (every cache reset, the window fed), every other step feeds the newest
# token alone. After `forward_cached`, the step ends as a step of `generate` does.
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_generate_cached", "locked": false, "schema_version": 3, "solution": true, "task": false}
def generate_cached(model: TinyGPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """`generate` with one KVCache per block -> (B, T0 + max_new_tokens), prompt first.

    Prefills with the last context_length tokens, then feeds one token per step; rebuilds the
    caches from the last context_length tokens whenever they are full. No gradients, eval() mode
    while sampling, the model's mode restored."""
    ### BEGIN SOLUTION
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
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_generate_cached_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("generate_cached")
### BEGIN HIDDEN TESTS
import torch
import torch.nn.functional as F

from grader.inputs import QKV, linear_state
from grader.spec import Case, Exact, Mistake, Spec, build, run


def gpt_state(g, cfg):
    """Random parameters with the names and shapes of TinyGPT(cfg)."""
    V, E = cfg["vocab_size"], cfg["emb_dim"]
    state = {"tok_emb.weight": torch.randn(V, E, generator=g),
             "pos_emb.weight": torch.randn(cfg["context_length"], E, generator=g)}
    for i in range(cfg["num_layers"]):
        state |= linear_state(g, tuple(f"blocks.{i}.att.{n}" for n in QKV), E, E, cfg["qkv_bias"], bias_size=0.1)
        for name, d_in, d_out in (("att.out_proj", E, E), ("ff.layers.0", E, 4 * E), ("ff.layers.2", 4 * E, E)):
            state |= linear_state(g, (f"blocks.{i}.{name}",), d_in, d_out, True, bias_size=0.1)
    for n in [f"blocks.{i}.norm{k}" for i in range(cfg["num_layers"]) for k in (1, 2)] + ["final_norm"]:
        state |= {n + ".scale": 1 + 0.1 * torch.randn(E, generator=g), n + ".shift": 0.1 * torch.randn(E, generator=g)}
    return state | linear_state(g, ("out_head",), E, V, False)


class Decoder64:
    """TinyGPT in float64 with a list of keys and values per layer: feed(idx, positions) runs new
    tokens causally after the stored ones and returns their logits."""

    def __init__(self, cfg, state):
        self.cfg, self.s = cfg, {k: v.double() for k, v in state.items()}
        self.keys, self.values = [None] * cfg["num_layers"], [None] * cfg["num_layers"]

    def __len__(self):
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    def lin(self, name, z):
        return F.linear(z, self.s[name + ".weight"], self.s.get(name + ".bias"))

    def norm(self, name, z):
        return F.layer_norm(z, z.shape[-1:], self.s[name + ".scale"], self.s[name + ".shift"], eps=1e-5)

    def feed(self, idx, positions):
        (b, t), E, H, past = idx.shape, self.cfg["emb_dim"], self.cfg["num_heads"], len(self)
        x = self.s["tok_emb.weight"][idx] + self.s["pos_emb.weight"][positions]
        allowed = torch.arange(past + t)[None, :] <= torch.arange(past, past + t)[:, None]    # (t, past + t)
        for i in range(self.cfg["num_layers"]):
            p = f"blocks.{i}."
            q, k, v = (self.lin(p + "att." + n, self.norm(p + "norm1", x)).view(b, t, H, E // H).transpose(1, 2)
                       for n in QKV)
            if self.keys[i] is not None:
                k, v = torch.cat((self.keys[i], k), dim=-2), torch.cat((self.values[i], v), dim=-2)
            self.keys[i], self.values[i] = k, v
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed).transpose(1, 2).reshape(b, t, E)
            x = x + self.lin(p + "att.out_proj", att)
            x = x + self.lin(p + "ff.layers.2", F.gelu(self.lin(p + "ff.layers.0", self.norm(p + "norm2", x)),
                                                      approximate="tanh"))
        return self.lin("out_head", self.norm("final_norm", x))

    def drop_oldest(self):
        self.keys = [k[..., 1:, :] for k in self.keys]
        self.values = [v[..., 1:, :] for v in self.values]


def greedy(cfg, state, prompt, n, slide=False):
    """(greedy tokens, smallest gap between the two largest logits over the steps). The default is
    `generate`: a fresh forward pass over the last context_length tokens at every step. With `slide`,
    one decoder whose oldest keys and values are dropped when it is full (a known mistake)."""
    C, idx, gap, decoder = cfg["context_length"], prompt.clone(), float("inf"), Decoder64(cfg, state)
    for _ in range(n):
        if not slide:
            window = idx[:, -C:]
            logits = Decoder64(cfg, state).feed(window, torch.arange(window.shape[1]))[:, -1]
        elif len(decoder) == 0:
            window = idx[:, -C:]
            logits = decoder.feed(window, torch.arange(window.shape[1]))[:, -1]
        else:
            if len(decoder) == C:
                decoder.drop_oldest()
            logits = decoder.feed(idx[:, -1:], torch.tensor([len(decoder)]))[:, -1]
        top2 = logits.topk(min(2, logits.shape[-1]), dim=-1).values
        gap = min(gap, float((top2[:, 0] - top2[:, -1]).min()))
        idx = torch.cat((idx, logits.argmax(-1, keepdim=True)), dim=1)
    return idx, gap


def generate_cached_case(g, cfg, prompt_shape, n, train):
    cfg = dict(dropout=0.0, **cfg)
    while True:   # keep away from near-ties between the two most likely tokens, which float32 may break otherwise
        state = gpt_state(g, cfg)
        prompt = torch.randint(0, cfg["vocab_size"], prompt_shape, generator=g)
        if greedy(cfg, state, prompt, n)[1] > 1e-3:
            break
    where = ("a prompt longer than the context" if prompt_shape[1] > cfg["context_length"] else
             "past the context" if prompt_shape[1] + n > cfg["context_length"] else "within the context")
    return Case(f"TinyGPT with context {cfg['context_length']}, width {cfg['emb_dim']}, {cfg['num_heads']} heads, "
                f"{cfg['num_layers']} layer{'s' * (cfg['num_layers'] > 1)}; prompt {tuple(prompt_shape)}, {n} new "
                f"tokens ({where}), model in {'train' if train else 'eval'} mode",
                cfg=cfg, state=state, prompt=prompt, n=n, train=train)


TINY = dict(vocab_size=7, context_length=6, emb_dim=8, num_heads=2, num_layers=1, qkv_bias=False)


def generate_cached_examples():
    g = torch.Generator().manual_seed(21)
    return [generate_cached_case(g, TINY, (2, 3), 8, True), generate_cached_case(g, TINY, (1, 8), 3, False)]


def generate_cached_cases(g):
    return [generate_cached_case(g, dict(vocab_size=5, context_length=4, emb_dim=8, num_heads=2, num_layers=2,
                                         qkv_bias=False), (1, 1), 9, False),
            generate_cached_case(g, dict(vocab_size=9, context_length=10, emb_dim=16, num_heads=4, num_layers=2,
                                         qkv_bias=True), (3, 3), 5, True),
            generate_cached_case(g, dict(vocab_size=6, context_length=5, emb_dim=12, num_heads=3, num_layers=1,
                                         qkv_bias=False), (2, 5), 4, False),
            generate_cached_case(g, dict(vocab_size=8, context_length=7, emb_dim=8, num_heads=2, num_layers=3,
                                         qkv_bias=False), (1, 2), 0, False),
            generate_cached_case(g, dict(vocab_size=11, context_length=8, emb_dim=16, num_heads=2, num_layers=2,
                                         qkv_bias=False), (2, 12), 6, True)]


def call_generate_cached(cfg, state, prompt, n, train):
    """(greedy tokens, model in train mode while sampling, gradients tracked, mode after, top_k=1 gives the
    greedy tokens, a tiny top_p gives the greedy tokens, a seeded generator reproduces the tokens, fewer
    positions went through the model than without a cache)"""
    model = build(TinyGPT, state, GPTConfig(**cfg), train=train)
    seen, fed = [], [0]
    for module in model.modules():
        module.register_forward_pre_hook(lambda mod, args: seen.append((mod.training, torch.is_grad_enabled())))
    model.blocks[0].att.W_query.register_forward_hook(lambda mod, args, out: fed.__setitem__(
        0, fed[0] + args[0].shape[:-1].numel()))
    try:
        tokens = generate_cached(model, prompt.clone(), n, temperature=0.0)
    except (IndexError, ValueError) as exc:   # add a hint to the message, keep where it came from
        if prompt.shape[1] + n > cfg["context_length"]:
            exc.args = ((str(exc).splitlines() or [""])[0] + " (this happened past context_length: once the caches "
                        "hold context_length positions, reset them and feed the last context_length tokens again)",)
        raise
    saw_train, saw_grad = any(m for m, _ in seen), any(gr for _, gr in seen)
    mode_after = model.training
    plain = sum(min(prompt.shape[1] + i, cfg["context_length"]) for i in range(n)) * prompt.shape[0]
    saves = fed[0] < plain if prompt.shape[1] < cfg["context_length"] and n >= 2 else True
    model.eval()
    greedy_tokens = generate_cached(model, prompt.clone(), n, temperature=0.0)
    top1 = generate_cached(model, prompt.clone(), n, temperature=1.0, top_k=1)
    nucleus = generate_cached(model, prompt.clone(), n, temperature=1.0, top_p=1e-6)
    torch.manual_seed(1)
    first = generate_cached(model, prompt.clone(), n, temperature=2.0, generator=torch.Generator().manual_seed(7))
    torch.manual_seed(2)
    second = generate_cached(model, prompt.clone(), n, temperature=2.0, generator=torch.Generator().manual_seed(7))
    return (tokens, saw_train, saw_grad, mode_after, bool(torch.equal(greedy_tokens, top1)),
            bool(torch.equal(greedy_tokens, nucleus)), bool(torch.equal(first, second)), saves)


def result(tokens, train, in_train=False, grad=False, after=None, top1=True, nucleus=True, repro=True, saves=True):
    """What call_generate_cached returns for these tokens; the other parts as the right generate_cached gives
    them unless a mistake says otherwise."""
    return tokens, in_train, grad, train if after is None else after, top1, nucleus, repro, saves


def generate_cached_oracle(cfg, state, prompt, n, train):
    return result(greedy(cfg, state, prompt, n)[0], train)


def generate_cached_mistakes(cfg, state, prompt, n, train):
    right = greedy(cfg, state, prompt, n)[0]
    yield Mistake("you returned only the new tokens; return the prompt followed by them",
                  result(right[:, prompt.shape[1]:], train))
    if prompt.shape[1] + n - 1 > cfg["context_length"]:
        yield Mistake("once the caches were full you dropped the oldest keys and values and kept the others; but "
                      "when the window moves every token moves down one position, so the kept keys and values are "
                      "no longer what the model computes for the new window: reset the caches and feed the last "
                      "context_length tokens again", result(greedy(cfg, state, prompt, n, slide=True)[0], train))
    yield Mistake("generate_cached tracks gradients: run the loop under torch.no_grad()",
                  result(right, train, grad=True))
    yield Mistake("top_k is not passed on to sample_next_token (with top_k=1 the output must equal greedy decoding)",
                  result(right, train, top1=False))
    yield Mistake("top_p is not passed on to sample_next_token (with a tiny top_p the output must equal greedy "
                  "decoding)", result(right, train, nucleus=False))
    yield Mistake("`generator` is not passed on to sample_next_token, so a seeded generator does not reproduce the "
                  "text", result(right, train, repro=False))
    if prompt.shape[1] < cfg["context_length"] and n >= 2:
        yield Mistake("the whole text goes through the model at every step, as in generate: after the first step, "
                      "feed only the newest token and let the caches supply the rest", result(right, train, saves=False))
    if train:
        message = "the model was in train mode while sampling: call model.eval() first"
        yield Mistake(message, result(right, train, in_train=True))
        yield Mistake(message + " (and run the loop under torch.no_grad())", result(right, train, in_train=True,
                                                                                   grad=True))
        yield Mistake("generate_cached leaves the model in eval mode: restore the mode it had before (model.training)",
                      result(right, train, after=False))
    else:
        yield Mistake("generate_cached switches the model to train mode at the end although it was in eval mode: "
                      "restore the mode it had before (model.training)", result(right, train, after=True))


def repeat_examples():
    g = torch.Generator().manual_seed(22)
    cfg = dict(vocab_size=7, context_length=12, emb_dim=8, num_heads=2, num_layers=1, qkv_bias=False, dropout=0.0)
    return [Case("the same model, prompt (2, 3) and 4 new tokens, twice in a row", cfg=cfg, state=gpt_state(g, cfg),
                 prompt=torch.randint(0, 7, (2, 3), generator=g), n=4)]


def repeat_cases(g):
    cfg = dict(vocab_size=9, context_length=10, emb_dim=12, num_heads=3, num_layers=2, qkv_bias=True, dropout=0.0)
    return [Case("the same model, prompt (1, 4) and 3 new tokens, twice in a row", cfg=cfg, state=gpt_state(g, cfg),
                 prompt=torch.randint(0, 9, (1, 4), generator=g), n=3)]


def call_generate_cached_twice(cfg, state, prompt, n):
    model = build(TinyGPT, state, GPTConfig(**cfg))
    first = generate_cached(model, prompt.clone(), n, temperature=0.0)
    try:
        again = generate_cached(model, prompt.clone(), n, temperature=0.0)
    except Exception:  # the learner's code may raise anything the second time; that is the finding
        return "the second call raised an error"
    return "the same tokens" if torch.equal(first, again) else "other tokens"


def repeat_mistakes():
    message = ("a second call with the same arguments gave {}: caches were kept from the previous call; make new "
               "caches inside generate_cached for every call")
    yield Mistake(message.format("other tokens"), "other tokens")
    yield Mistake(message.format("an error"), "the second call raised an error")


run(Spec("generate_cached", call_generate_cached_twice, lambda: "the same tokens", examples=repeat_examples,
         cases=repeat_cases, mistakes=repeat_mistakes, judge=Exact()),
    Spec("generate_cached", call_generate_cached, generate_cached_oracle, examples=generate_cached_examples,
         cases=generate_cached_cases, mistakes=generate_cached_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# First the promise: on the trained model, greedy generation with the cache writes exactly the
# text of plain generation, here 200 characters from a single newline, far past the context of
# 64. A forward hook on the token embedding counts the token positions that go into the model.

# %%
def count_positions(model, fn, *args, **kwargs):
    """(what fn(*args, **kwargs) returns, the number of token positions `model` embedded meanwhile)."""
    count = [0]
    hook = model.tok_emb.register_forward_hook(lambda module, inputs, output: count.__setitem__(
        0, count[0] + inputs[0].numel()))
    try:
        return fn(*args, **kwargs), count[0]
    finally:
        hook.remove()


def clock():
    """Seconds on a steady clock, after the GPU (if any) has finished its queued work."""
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


start = torch.tensor([encode("\n")], device=device)                                      # (1, 1)
seconds, counts, outputs = {}, {}, {}
for name, fn in (("generate", generate), ("generate_cached", generate_cached)):
    begin = clock()
    outputs[name], counts[name] = count_positions(model, fn, model, start, 200, temperature=0.0)
    seconds[name] = clock() - begin
print("the same 201 tokens:", torch.equal(outputs["generate"], outputs["generate_cached"]))
print(decode(outputs["generate_cached"][0]))
for name in outputs:
    print(f"{name:>15}: {counts[name]:6,} positions through the model, {seconds[name]:.2f} s")

# %% [markdown]
# Identical text, and hardly any saving (in our run 10,784 positions without the cache, 8,768 with
# it). The prompt is a single token, so the first 64 steps cost one position each; then the window
# is full, and each of the remaining 136 steps rebuilds the caches from all 64 tokens of the
# window, as plain generation does. That is the price of learned **absolute** positions: a
# token's key depends on the position it occupies, and past the context every position changes at
# every step.
#
# To see what the cache can do when the text fits in the context, time a model of the same shape
# whose context is long enough: 320 positions, for a prompt of 64 tokens and 256 new ones. Its
# weights are untrained, which does not matter for timing. First the time **per new token** as the
# text grows: without a cache a step is a forward pass over the whole text; with one it is a pass
# over one token that reads the cache.

# %%
long_context = 96 if GRADING else 320
timing_cfg = GPTConfig(vocab_size=cfg.vocab_size, context_length=long_context, emb_dim=cfg.emb_dim,
                       num_heads=cfg.num_heads, num_layers=cfg.num_layers)
torch.manual_seed(0)
timing_model = TinyGPT(timing_cfg).to(device).eval()
text_ids = torch.randint(0, cfg.vocab_size, (1, long_context), generator=torch.Generator().manual_seed(0)).to(device)
repeats = 2 if GRADING else 5
checkpoints = list(range(16, long_context + 1, 16))                 # text lengths at which a step is timed

plain_ms = {t: [] for t in checkpoints}
cached_ms = {t: [] for t in checkpoints}
with torch.no_grad():
    for _ in range(repeats):
        for t in checkpoints:                                        # a plain step: the whole text of t tokens
            begin = clock()
            timing_model(text_ids[:, :t])
            plain_ms[t].append(1000 * (clock() - begin))
        caches = [KVCache() for _ in timing_model.blocks]
        forward_cached(timing_model, text_ids[:, :checkpoints[0] - 1], caches)   # prefill, not timed
        for t in range(checkpoints[0], long_context + 1):            # a cached step: token t - 1, t - 1 cached
            begin = clock()
            forward_cached(timing_model, text_ids[:, t - 1:t], caches)
            if t in cached_ms:
                cached_ms[t].append(1000 * (clock() - begin))

plain_step = [statistics.median(plain_ms[t]) for t in checkpoints]
cached_step = [statistics.median(cached_ms[t]) for t in checkpoints]
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(checkpoints, plain_step, "o-", label="without a cache: forward pass over the whole text")
ax.plot(checkpoints, cached_step, "s--", label="with a cache: one new token")
ax.set(xlabel="tokens in the text", ylabel="milliseconds per new token", ylim=(0, None),
       title="The cost of one generation step")
ax.legend()
show()
for t, a, b in list(zip(checkpoints, plain_step, cached_step))[::4] + [(checkpoints[-1], plain_step[-1], cached_step[-1])]:
    print(f"{t:4d} tokens: {a:6.2f} ms without a cache, {b:5.2f} ms with one")

# %% [markdown]
# Without a cache the cost of a step grows in proportion to the length of the text; with a cache
# it barely moves (attention over a longer cache is a small part of a step at this size). Now the
# whole generation: the time to write *n* new tokens after a prompt of 64, with `generate` and
# `generate_cached`, in alternating rounds so that both see the same state of the machine.

# %%
prompt_len = 16 if GRADING else 64
counts_new = [16, 32, 64] if GRADING else [32, 64, 128, 256]
rounds = 1 if GRADING else 3
prompt = text_ids[:, :prompt_len]                                              # (1, 64)
runs = {"generate": {n: [] for n in counts_new}, "generate_cached": {n: [] for n in counts_new}}
for _ in range(rounds):
    for n in counts_new:
        for name, fn in (("generate", generate), ("generate_cached", generate_cached)):
            begin = clock()
            fn(timing_model, prompt, n, temperature=0.0)
            runs[name][n].append(clock() - begin)
total = {name: [statistics.median(runs[name][n]) for n in counts_new] for name in runs}
speedup = total["generate"][-1] / total["generate_cached"][-1]

fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(counts_new, total["generate"], "o-", label="generate (no cache)")
ax.plot(counts_new, total["generate_cached"], "s--", label="generate_cached")
ax.set(xlabel="new tokens", ylabel="seconds", title=f"Generation time after a prompt of {prompt_len} tokens")
ax.legend()
show()
for n, a, b in zip(counts_new, total["generate"], total["generate_cached"]):
    print(f"{n:4d} new tokens: {a:6.3f} s without a cache, {b:6.3f} s with one (x{a / b:.1f})")
print(f"speed-up at {counts_new[-1]} new tokens: x{speedup:.1f}")

# %% [markdown]
# **What we measured.** On a two-core CPU, one step without a cache grew from about 1 ms for a
# text of 16 tokens to about 9 ms at 320 tokens, while a cached step stayed just under 1 ms;
# writing 256 tokens after a prompt of 64 took about 1.3 s without the cache and 0.2 s with it:
# **about 6× faster**. (Your numbers will differ with the machine. On a machine busy with other
# work, a timing can even come out the wrong way round: time again when it is quiet.)
#
# The counts of section 2 promised 154× fewer positions. The difference is the fixed cost of a
# step: a forward pass over one token still runs every operation of the model, about 330 of them
# for ours (counted as PyTorch dispatches them, views included), each with a few microseconds of
# overhead; at width 64 that overhead, not arithmetic, is most of the millisecond. The speed-up
# approaches the count only where a step's time is arithmetic: many texts generated together, or a
# large model on a CPU. On a GPU, one text's step is limited by reading the weights from memory,
# so a plain step over a few hundred tokens costs little more than a cached one; there the cache
# pays off for long texts and for serving many texts at once. (Even counted in arithmetic the gain
# stays below 154×: with a cache, each step's attention still reads every earlier key.)
#
# **Beyond absolute positions.** The rebuild past the context comes from *learned absolute
# position embeddings*, as in GPT-2, not from caching itself:
# - With **rotary position embeddings** (RoPE, used by Llama and most recent models) a position is
#   a rotation applied to queries and keys, and the score of a query and a key depends on their
#   positions only through how far apart they are. A cached key stays valid as the text grows:
#   turned once, by its own position, it gives every later query the right score. That makes the
#   cache exact at any length; it does not make the model good at any length. RoPE does not
#   extrapolate to distances never seen in training, and a model trained on texts of a few
#   thousand tokens degrades past them. This is why position interpolation, NTK-aware scaling and
#   YaRN exist: they change a trained model's angles so that a longer text maps onto distances it
#   knows, usually with some further training. (Dropping old tokens is not free either, for a model
#   trained without a window: section 7 measures what it costs ours.)
# - With **sliding-window attention** (Mistral 7B, for example, which also uses RoPE) the model is
#   *trained* so that each token attends only to the last `W` tokens. The cache becomes a ring
#   buffer of `W` entries: the oldest entry is overwritten, nothing is rebuilt, and that is
#   exactly the model's own computation.
# - Other relative schemes (ALiBi's penalty growing with the distance, T5's learned biases per
#   distance) put positions into the scores, not into the keys, with the same benefit.
#
# A rolling cache like the sliding one of section 6 is therefore exact for a model trained with
# relative positions and a sliding window. For ours it is not: our keys carry absolute positions,
# and our model was trained to see its whole window.

# %% [markdown]
# ## 7. Rotary positions under the cache, and the first tokens
#
# In unit 05 you wrote `rope(x, positions, base)`: it turns each pair of entries `(2i, 2i+1)` of
# a vector by the angle `positions[t] · base^(−2i/d)`. A model with rotary positions has no table
# of position vectors. Its attention layers turn each head's queries and keys by their positions
# just before the scores, so that a score depends on their positions only through how far apart
# the query and the key stand. The next cell gives `rope` and such a layer,
# `RotaryMultiHeadAttention`: the `MultiHeadAttention` above with `rope` on its queries and keys
# at positions `0 ... T − 1`, and a causal mask built for any `T`: nothing in the layer limits the
# length of the text. Its `rope` is the answer to unit 05's exercise `rope`: if you have not done
# unit 05 yet, do it first and come back, since the cell gives that exercise away.
#
# Under a cache, the question of `forward_cached` comes back in a new form: **at which positions do the
# new tokens stand?** At `P ... P + t − 1`, with `P = len(cache)` read before the append. The keys
# of the cached tokens were turned by their own positions when they arrived, and they stay right:
# turning a query at `P + i` and a key at `j` gives the score their distance `P + i − j` calls
# for. A call that turns the new tokens by `0 ... t − 1` again puts every new token at the start of
# the text; with one token per step, each step's query and key then stand at position 0, however
# long the text has grown.

# %% nbgrader={"grade": false, "grade_id": "u09_given_rotary", "locked": true, "schema_version": 3, "solution": false, "task": false}
def rope(x, positions, base=10000.0):
    """Unit 05's rotary positions (given): each pair (2i, 2i+1) of x (..., T, d) turned counter-clockwise
    by positions[t] * base ** (-2i / d). positions: 1-D integers, length T."""
    d = x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)     # (d/2,)
    angle = positions.to(device=x.device, dtype=torch.float64)[:, None] * omega            # (T, d/2)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]                                             # (..., T, d/2)
    return torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)


class RotaryMultiHeadAttention(MultiHeadAttention):
    """MultiHeadAttention with rotary positions: each head's queries and keys (head_dim wide) turned by
    rope at positions 0 ... T-1 with `base`. No table of positions, so any T."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, base=10000.0):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.base = base

    def forward(self, x):                                                              # x: (B, T, d_in)
        b, t, _ = x.shape
        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.W_key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)    # (B, H, T, hd)
        v = self.W_value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        positions = torch.arange(t, device=x.device)
        q, k = rope(q, positions, self.base), rope(k, positions, self.base)            # turned per head
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)                    # (B, H, T, T)
        blocked = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(diagonal=1)
        weights = self.dropout(torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1))
        context = (weights @ v).transpose(1, 2).contiguous().view(b, t, self.d_out)    # (B, T, d_out)
        return self.out_proj(context)


# %% [markdown]
# ### Exercise — `rotary_cached_attention(att, x, cache)` (about 10 minutes)
#
# **Goal:** `cached_attention` for a `RotaryMultiHeadAttention` `att`: for new tokens `x` of shape
# `(B, t, d_in)` that follow the `len(cache)` tokens in `cache`, turn each head's new queries and
# keys by `rope` at their positions, with `att.base`; append the keys and values to `cache`; and
# return a `(B, t, d_out)` tensor equal to the last `t` rows of what `att` gives for the whole
# sequence. As for `cached_attention`: no dropout, and any number of tokens (a rotary layer has no
# end of the context, so do not cut the mask from `att.mask`).
#
# <details><summary>Hint</summary>
#
# Start from your `cached_attention`: the only new step turns the new queries and keys after the
# heads are split and before the keys go into the cache. Which positions do the new tokens hold?
# <details><summary>More</summary>
#
# The positions are the ones `forward_cached` gave the position embedding, for the same reason. `rope`
# accepts any leading dimensions: give it the split `(B, H, t, head_dim)` queries and keys, so that
# each head turns its own pairs, and the layer's `base`. The values are not turned.
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_rotary_cached_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rotary_cached_attention(att: RotaryMultiHeadAttention, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Causal rotary attention of `att` for new tokens x (B, t, d_in) at positions len(cache) ... len(cache) + t - 1.

    Turns each head's new queries and keys by rope at those positions (base att.base), appends the
    keys and values to `cache`; returns (B, t, d_out), the last t rows of att(whole sequence)."""
    ### BEGIN SOLUTION
    b, t, _ = x.shape
    past = len(cache)                                                               # P, before appending
    q = att.W_query(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)      # (B, H, t, hd)
    k = att.W_key(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)        # (B, H, t, hd)
    v = att.W_value(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)      # (B, H, t, hd)
    positions = torch.arange(past, past + t, device=x.device)                       # P ... P + t - 1
    q, k = rope(q, positions, att.base), rope(k, positions, att.base)
    keys, values = cache.append(k, v)                                               # turned keys are cached
    scores = q @ keys.transpose(-2, -1) / math.sqrt(att.head_dim)                   # (B, H, t, P + t)
    blocked = torch.ones(t, past + t, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)
    weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)     # (B, H, t, P + t)
    context = (weights @ values).transpose(1, 2).reshape(b, t, att.d_out)           # (B, t, d_out)
    return att.out_proj(context)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_rotary_cached_attention_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("rotary_cached_attention")
### BEGIN HIDDEN TESTS
import torch
import torch.nn.functional as F

from grader.inputs import QKV, linear_state
from grader.spec import Case, Exact, Mistake, Spec, Tuple, build, dropout_seen, run


def rotary_case(g, batch, num_tokens, width, heads, chunks, base=10000.0, qkv_bias=False, context_length=None):
    state = linear_state(g, QKV, width, width, qkv_bias) | linear_state(g, ("out_proj",), width, width, True)
    context_length = context_length or num_tokens
    return Case(f"x of shape {(batch, num_tokens, width)}, {heads} heads, base {base}, qkv_bias={qkv_bias}, "
                f"context_length {context_length}, fed in chunks of {list(chunks)} tokens to one cache",
                x=torch.randn(batch, num_tokens, width, generator=g), state=state, heads=heads, chunks=list(chunks),
                base=base, qkv_bias=qkv_bias, context_length=context_length)


def rotary_examples():
    g = torch.Generator().manual_seed(10)
    return [rotary_case(g, 1, 6, 8, 2, [3, 1, 2]), rotary_case(g, 2, 5, 8, 2, [1, 1, 1, 1, 1], base=100.0),
            rotary_case(g, 1, 10, 8, 2, [6, 1, 1, 2], context_length=8)]                  # past context_length


def rotary_cases(g):
    return [rotary_case(g, 2, 7, 12, 3, [4, 1, 1, 1], qkv_bias=True),
            rotary_case(g, 1, 5, 8, 1, [5]),                                       # the prefill alone
            rotary_case(g, 3, 1, 8, 2, [1]),                                       # one token, empty cache
            rotary_case(g, 2, 12, 16, 4, [6, 1, 1, 1, 1, 2], context_length=8),    # past context_length
            rotary_case(g, 1, 9, 12, 2, [2, 3, 1, 3], base=500.0, qkv_bias=True)]


def call_rotary_cached_attention(x, state, heads, chunks, base, qkv_bias, context_length):
    width = x.shape[-1]
    att = build(RotaryMultiHeadAttention, state, width, width, context_length, 0.0, heads, qkv_bias, base)
    cache = KVCache()
    outputs, lengths, done = [], [], 0
    with torch.no_grad():
        for part in x.split(chunks, dim=1):
            try:
                outputs.append(rotary_cached_attention(att, part, cache))
            except (RuntimeError, IndexError) as exc:   # add a hint to the message, keep where it came from
                if done + part.shape[1] > context_length:
                    exc.args = ((str(exc).splitlines() or [""])[0] + " (this happened past context_length: a rotary "
                                "layer has no end of the context, so build the causal mask for the P + t keys instead "
                                "of cutting it from att.mask)",)
                raise
            done += part.shape[1]
            lengths.append(len(cache))
    return torch.cat(outputs, dim=1), torch.tensor(lengths, dtype=torch.float64)


def turned(z, positions, base):
    """rope in float64: pairs (2i, 2i+1) of z (..., T, d) turned by positions[t] * base ** (-2i / d)."""
    d = z.shape[-1]
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    a, b = z[..., 0::2], z[..., 1::2]
    return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), dim=-1).flatten(-2)


def rotary_reference(x, state, heads, base, pos_q, pos_k, per_head=True, turn_values=False, allowed=None):
    """Causal attention of the whole x in float64, query i turned by pos_q[i] and key j by pos_k[j]
    (each head's vectors, or whole rows of width d_out when per_head is False); allowed[i, j]: the mask."""
    s = {name: t.double() for name, t in state.items()}
    (b, t, width), hd = x.shape, x.shape[-1] // heads

    def lin(name, z):
        return F.linear(z, s[name + ".weight"], s.get(name + ".bias"))

    def heads_of(z):
        return z.view(b, t, heads, hd).transpose(1, 2)                                # (B, H, T, hd)

    def turn(z, positions):
        return turned(heads_of(z), positions, base) if per_head else heads_of(turned(z, positions, base))

    q, k, v = (lin(name, x.double()) for name in QKV)
    q, k, v = turn(q, pos_q), turn(k, pos_k), turn(v, pos_k) if turn_values else heads_of(v)
    allowed = torch.ones(t, t, dtype=torch.bool).tril() if allowed is None else allowed
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return lin("out_proj", out.transpose(1, 2).reshape(b, t, width))


def chunk_grid(chunks):
    """(position of each token, start of its chunk, length of its chunk), each (T,)."""
    sizes = torch.tensor(chunks)
    starts = torch.repeat_interleave(sizes.cumsum(0) - sizes, sizes)
    return torch.arange(sum(chunks)), starts, torch.repeat_interleave(sizes, sizes)


def rotary_oracle(x, state, heads, chunks, base):
    positions, _, _ = chunk_grid(chunks)
    lengths = torch.tensor([sum(chunks[:n + 1]) for n in range(len(chunks))], dtype=torch.float64)
    return rotary_reference(x, state, heads, base, positions, positions), lengths


def rotary_mistakes(x, state, heads, chunks, base):
    p, start, size = chunk_grid(chunks)
    zero = torch.zeros_like(p)
    if len(chunks) > 1:
        yield Mistake("the new tokens were turned as if they stood at positions 0 ... t-1, as at the start of the "
                      "text: after P cached tokens they stand at P ... P+t-1 (P = len(cache), read before the "
                      "append); turn them by torch.arange(P, P + t)",
                      (rotary_reference(x, state, heads, base, p - start, p - start),))
        yield Mistake("the new tokens were turned by positions that start at len(cache) read after the append "
                      "(P + t ... P + 2t - 1): read P = len(cache) before cache.append",
                      (rotary_reference(x, state, heads, base, p + size, p + size),))
    yield Mistake("the cached keys were turned twice: once before they went into the cache, and again by "
                  "positions 0 ... P+t-1 when the cache gave them back; turn each key once",
                  (rotary_reference(x, state, heads, base, p, 2 * p),))
    yield Mistake("only the queries were turned: turn the new keys by the same positions before caching them",
                  (rotary_reference(x, state, heads, base, p, zero),))
    yield Mistake("only the keys were turned: turn the new queries by the same positions as well",
                  (rotary_reference(x, state, heads, base, zero, p),))
    if heads > 1:
        yield Mistake("rope turned whole rows of width d_out before the heads were split: turn each head's "
                      "queries and keys, (B, H, t, head_dim), as RotaryMultiHeadAttention does (the pairs and "
                      "their speeds belong to one head)",
                      (rotary_reference(x, state, heads, base, p, p, per_head=False),))
    yield Mistake("the values were turned too: rotary positions turn only the queries and the keys",
                  (rotary_reference(x, state, heads, base, p, p, turn_values=True),))
    if len(chunks) > 1:
        yield Mistake("you cut the mask from its top-left corner (rows 0 ... t-1), as "
                      "F.scaled_dot_product_attention(..., is_causal=True) does when there are more keys than "
                      "queries: once the cache holds P tokens the new rows are rows P ... P + t - 1 of the causal "
                      "mask; new token i may look at keys 0 ... P + i",
                      (rotary_reference(x, state, heads, base, p, p, allowed=p[None, :] <= (p - start)[:, None]),))
    if base != 10000.0:
        yield Mistake("rope used its default base 10000 instead of the layer's att.base",
                      (rotary_reference(x, state, heads, 10000.0, p, p),))
    if max(chunks) > 1:
        yield Mistake("the new tokens of one call see each other's keys in both directions, which shows when "
                      "several tokens come at once (the prefill): the causal mask is missing; the token at "
                      "position P + i may only look at keys 0 ... P + i",
                      (rotary_reference(x, state, heads, base, p, p, allowed=p[None, :] < (start + size)[:, None]),))


def train_mode_case(g, batch, num_tokens, width, heads, chunks):
    state = linear_state(g, QKV, width, width, False) | linear_state(g, ("out_proj",), width, width, True)
    return Case(f"x of shape {(batch, num_tokens, width)}, {heads} heads, the layer left in train() mode with dropout "
                f"0.5, fed in chunks of {list(chunks)} tokens: does dropout act?",
                x=torch.randn(batch, num_tokens, width, generator=g), state=state, heads=heads, chunks=list(chunks))


def call_rotary_in_train_mode(x, state, heads, chunks):
    width = x.shape[-1]
    att = build(RotaryMultiHeadAttention, state, width, width, x.shape[1], 0.5, heads, train=True)
    cache = KVCache()
    with dropout_seen() as log, torch.no_grad():
        for part in x.split(chunks, dim=1):
            rotary_cached_attention(att, part, cache)
    return "dropout acted" if log.values().numel() else "no dropout"


def train_mode_mistakes():
    yield Mistake("the layer was in train() mode and your function applied its dropout: cached attention is for "
                  "inference, so leave dropout out whatever the layer's mode", "dropout acted")


run(Spec("rotary_cached_attention", call_rotary_cached_attention, rotary_oracle, examples=rotary_examples,
         cases=rotary_cases, mistakes=rotary_mistakes,
         judge=Tuple(parts=("the outputs of all chunks, joined along the tokens", "len(cache) after each chunk"))),
    Spec("rotary_cached_attention", call_rotary_in_train_mode, lambda: "no dropout",
         examples=lambda: [train_mode_case(torch.Generator().manual_seed(20), 1, 5, 8, 2, [3, 1, 1])],
         cases=lambda g: [train_mode_case(g, 2, 6, 12, 3, [2, 1, 3])], mistakes=train_mode_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Feed 100 tokens to a rotary layer with the model's width and heads: a prefill of 8, then one
# token at a time, and compare with the layer's own pass over all 100. Nothing needs rebuilding
# and nothing limits the length: every key went into the cache once, turned by its own position.
# This checks the arithmetic only. The layer is untrained; a trained rotary model would meet
# distances up to 99 here, and one trained on texts of 64 tokens has never seen a distance past 63.

# %%
torch.manual_seed(2)
rotary = RotaryMultiHeadAttention(cfg.emb_dim, cfg.emb_dim, cfg.context_length, 0.0, cfg.num_heads).to(device).eval()
x_long = torch.randn(1, 100, cfg.emb_dim, device=device)                    # (1, 100, E)
cache = KVCache()
with torch.no_grad():
    full = rotary(x_long)                                                     # (1, 100, E), all at once
    pieces = [rotary_cached_attention(rotary, part, cache) for part in x_long.split([8] + [1] * 92, dim=1)]
print("cached positions:", len(cache))
print("largest difference from the full pass:", (torch.cat(pieces, dim=1) - full).abs().max().item())

# %% [markdown]
# ### What a rolling cache loses: the first tokens
#
# A rotary cache can also **roll**: when memory runs short, drop the oldest keys and values and
# go on. If the cache holds turned keys, the keys that stay keep their true distances to every new
# query, and those distances grow with the text, past any the model was trained on. StreamingLLM
# (Xiao et al., 2023, section 3.2) does the opposite: it caches the keys *before* turning them,
# and at every step turns all of them by their places *in the cache*, `0 ... len(cache) − 1`, so
# that no distance exceeds the size of the cache. `rotary_cached_attention` has a second correct answer that does
# just that: cache the keys unturned, and at every step turn all of them by `0 ... P + t − 1`. For
# a cache that never forgets, both answers give the same scores; for a rolling one, only the
# second keeps the distances within what the model knows.
#
# A rolling cache also loses the start of the text, and a model learns with its whole window in
# view. Xiao et al. (2023) found that large models fall apart once the first tokens of a text
# leave such a cache, and recover when the cache keeps the first four ("Efficient Streaming
# Language Models with Attention Sinks"): those models put a large share of their attention on
# the first tokens, whatever they say, which the authors call **attention sinks**.
#
# Our model can show whether that holds for it, too. Its positions are learned, so its cache can
# roll only inside its context: texts of 64 characters go in one character at a time (the first
# `W + 1` together, since they lose nothing yet), each at its own position `0 ... 63` as usual,
# through caches that keep only the last `W` entries
# (`RollingKVCache` below; the newest token sees those `W` and itself), or the last `W` and the
# first four (`keep=range(4)`). The loss on the last 16 characters of each text is compared with
# two references:
#
# - the **whole context**: the model's ordinary pass over all 64 characters;
# - a **fresh pass** over the same `W + 1` characters that the rolling cache lets the newest token
#   see, run through the model from scratch at positions `0 ... W`. This is what `generate` does
#   past the context, and the work a rolling cache is meant to save.
#
# The rolling pass reuses your `cached_attention` unchanged; only the cache forgets.

# %%
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


def fresh_logits(model, idx, window, first):
    """Logits (B, V) for each position p >= first of idx (B, T): the characters p - window ... p alone,
    fed to the model from scratch at positions 0 ... window. Returns (B, T - first, V)."""
    with torch.no_grad():
        return torch.stack([model(idx[:, p - window:p + 1])[0][:, -1] for p in range(first, idx.shape[1])], dim=1)


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()


num_texts, text_len, scored = (8, 64, 16) if GRADING else (256, 64, 16)
first = text_len - scored                                                            # 48: the last 16 characters
if DATA_DIR is not None and not GRADING:
    val_ids = torch.tensor(encode((DATA_DIR / "val.txt").read_text(encoding="utf-8")))
else:
    val_ids = torch.randint(0, cfg.vocab_size, (10_000,), generator=torch.Generator().manual_seed(0))
starts = torch.randint(0, len(val_ids) - text_len - 1, (num_texts,), generator=torch.Generator().manual_seed(0))
texts = torch.stack([val_ids[s:s + text_len + 1] for s in starts.tolist()]).to(device)      # (N, 65)
inputs, targets = texts[:, :-1], texts[:, first + 1:]                                 # (N, 64), (N, 16)

windows = [8, 16] if GRADING else [4, 8, 16, 24, 32, 48]
with torch.no_grad():
    whole = loss_of(model(inputs)[0][:, first:], targets)
losses = {"fresh pass": [], "rolling cache": [], "rolling cache + first 4": []}
for w in windows:
    losses["fresh pass"].append(loss_of(fresh_logits(model, inputs, w, first), targets))
    losses["rolling cache"].append(loss_of(rolling_logits(model, inputs, w)[:, first:], targets))
    losses["rolling cache + first 4"].append(loss_of(rolling_logits(model, inputs, w, keep=range(4))[:, first:],
                                                     targets))
w = 16                                                                               # the window looked at below
wider = loss_of(rolling_logits(model, inputs, w + 4)[:, first:], targets)

fig, ax = plt.subplots(figsize=(7, 3.8))
for (name, values), style in zip(losses.items(), ("o-", "s-", "^-")):
    ax.plot(windows, values, style, label=name)
ax.axhline(whole, color="gray", linestyle="--", label="whole context (64)")
ax.set(xlabel="W: cache entries kept (besides the first 4)", ylabel="loss on the last 16 characters (nats)",
       title="A rolling cache inside the context", xticks=windows)
ax.legend()
show()
print(f"whole context: {whole:.3f}")
for name, values in losses.items():
    print(f"{name}: " + "  ".join(f"W={w}: {v:.3f}" for w, v in zip(windows, values)))
print(f"rolling cache with W={w + 4} (as many entries as W={w} and the first 4): {wider:.3f}")

# %% [markdown]
# **What our model shows** (in our run; yours should be close).
#
# - **A cache that forgets the start of the text costs a lot.** With `W = 16` the rolling cache's
#   loss is 0.80, about twice the 0.41 of a fresh pass over the same 17 characters, and far from
#   the 0.36 of the whole context.
# - **It is not missing information.** At `W = 48` the fresh pass scores 0.359, the loss of the
#   whole context: the 15 characters or fewer that it leaves out tell the model nothing more. The
#   rolling cache at `W = 48` sees the same 49 characters and still does worse (0.41 against
#   0.36). What differs is the view: its newest query meets a set of keys that begins in the
#   middle of the text, which the model never met in training.
# - **Keeping the first four characters brings most of it back**: 0.48 at `W = 16`. Four more
#   recent entries instead (`W = 20`, the same size of cache) give only 0.71. The first tokens are
#   worth more than recent ones, as the paper found for large models.
#
# Where does each layer's attention go? The next cell recomputes the attention weights of the
# ordinary pass and looks at the last 16 positions. For each head it prints the share of
# attention given to the first four characters (if every one of the `p + 1` keys a query may see
# got the same weight, the first four would get `4 / (p + 1)`, about 7% here), how evenly the
# head spreads its attention (its entropy, as a fraction of the largest possible, `log(p + 1)`,
# which every key at the same weight gives), its largest weight, and its share on the last 17
# keys, the query's own and 16 before it. Then it lets the cache roll in layer 0 only, and in
# layers 1 to 3 only. (Layers are numbered from 0, as the cell prints them.)

# %%
def attention_weights(model, idx):
    """Each layer's attention weights (B, H, T, T) in the ordinary pass over idx (B, T)."""
    found = []

    def keep(module, inputs, output):
        x = inputs[0]
        b, t, _ = x.shape
        q = module.W_query(x).view(b, t, module.num_heads, module.head_dim).transpose(1, 2)
        k = module.W_key(x).view(b, t, module.num_heads, module.head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(module.head_dim)).masked_fill(module.mask[:t, :t], float("-inf"))
        found.append(torch.softmax(scores, dim=-1))

    hooks = [block.att.register_forward_hook(keep) for block in model.blocks]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return found


def per_head(values, percent=False):
    return " ".join(f"{v:6.1%}" if percent else f"{v:6.2f}" for v in values.tolist())


even = (4 / torch.arange(first + 1, text_len + 1)).mean().item()
positions = torch.arange(first, text_len, device=device)                               # the 16 scored queries
for layer, weights in enumerate(attention_weights(model, inputs)):
    rows = weights[:, :, first:]                                                        # (N, H, 16, 64)
    share = rows[..., :4].sum(dim=-1).mean(dim=(0, 2))                                  # (H,): per head
    entropy = -(rows * torch.log(rows.clamp_min(1e-30))).sum(dim=-1)                    # (N, H, 16)
    evenness = (entropy / torch.log(positions + 1.0)).mean(dim=(0, 2))                  # 1: all keys alike
    largest = rows.amax(dim=-1).mean(dim=(0, 2))
    recent = (torch.arange(text_len, device=device) >= positions[:, None] - 16)         # (16, 64): the last 17 keys
    on_recent = (rows * recent).sum(dim=-1).mean(dim=(0, 2))
    print(f"layer {layer}, per head: share of the first 4 characters", per_head(share, percent=True),
          f"(even share {even:.1%}) | entropy / largest possible", per_head(evenness),
          "| largest weight", per_head(largest), "| share of the last 17 keys", per_head(on_recent, percent=True))
first_layer_only = loss_of(rolling_logits(model, inputs, w, rolling={0})[:, first:], targets)
other_layers_only = loss_of(rolling_logits(model, inputs, w, rolling=set(range(1, cfg.num_layers)))[:, first:], targets)
every_layer = losses["rolling cache"][windows.index(w)]
print(f"W={w}, the cache rolling in layer 0 only: {first_layer_only:.3f}; in layers 1 to {cfg.num_layers - 1} "
      f"only: {other_layers_only:.3f}; in every layer: {every_layer:.3f}")

# %% [markdown]
# **The cure works, but there is no sink.** No head of our model gives the first four characters
# more than about their even share: layers 1 to 3 give them almost nothing (0.0–0.2%) and put
# 85.7–99.5% of their attention on their last 17 keys; layer 0 gives them 4.7–7.2% against an even
# share of 7.1%. So our model has no attention sink in Xiao et al.'s sense (and we measured only
# positions 0 to 3). Layer 0 averages instead: its heads spread their attention almost evenly over
# everything before them (entropy 0.98–1.00 of the largest possible, largest weights 0.02–0.05),
# and the layers above have learned to read that average.
#
# Evicting early keys hurts mostly through layer 0: rolling the cache there alone gives 0.73 at
# `W = 16`, most of the increase from 0.36 to 0.80; rolling it in layers 1 to 3 together gives
# 0.46. This also rules out an explanation that sounds right, that the rolling cache's keys and
# values were computed while their tokens still saw the whole text: in layer 0 a key and a value
# depend only on the token and its position, the same in any pass, and that layer costs the most.
# What hurts is the truncated set of keys the newest query sees.
#
# Which early tokens help? The next cell keeps four characters other than the first four, or fewer
# of them, or keeps the first four after changing what they say.

# %%
scrambled = inputs.clone()
scrambled[:, :4] = torch.randint(0, cfg.vocab_size, (num_texts, 4), generator=torch.Generator().manual_seed(1)).to(device)
newlines = inputs.clone()
newlines[:, :4] = stoi["\n"]
early = [("the first 4, replaced by random characters", scrambled, range(4)),
         ("the first 4, replaced by newlines", newlines, range(4)),
         ("positions 8 to 11", inputs, range(8, 12)), ("positions 20 to 23", inputs, range(20, 24)),
         ("positions 0, 10, 20 and 30", inputs, (0, 10, 20, 30)), ("position 0 alone", inputs, (0,)),
         ("positions 0 and 1", inputs, (0, 1))]
first_four = losses["rolling cache + first 4"][windows.index(w)]
print(f"W={w}, keeping the first 4 (as above): {first_four:.3f}")
for name, text_ids_early, kept in early:
    loss = loss_of(rolling_logits(model, text_ids_early, w, keep=kept)[:, first:], targets)
    print(f"W={w}, keeping {name}: {loss:.3f}")

# %% [markdown]
# **Early tokens of any content restore most of the loss, and the earlier they stand the
# better.** Four random characters in place of the first four give 0.49, four newlines 0.51,
# against 0.48 for the text's own: in our corpus the lines are independent and at most 48
# characters long, so the first four characters of a window tell the model next to nothing about
# its last 16. StreamingLLM found the same for large models: four newline tokens at the start work nearly
# as well as the text's own first four (its Table 1). Four kept tokens at positions 8–11 give
# 0.52, at 20–23 give 0.62, spread over 0, 10, 20 and 30 give 0.54. One kept token gives 0.65,
# two give 0.56.
#
# So a cache that must forget should keep the first few tokens, for our small model as for large
# ones, though not for the paper's reason. A model can also be trained for it: with a sliding
# window, as Mistral was, or with a learned "sink" token at the start of every training text.
#
# These numbers come from one model, one seed and 256 windows. The benchmark
# (`benchmarks/bench_inference.py`) measures the same losses on 1,024 other windows, and they
# differ from these by up to about 0.02: a difference that small, such as 0.46 against 0.48, is
# no difference.


# %% [markdown]
# ## 8. Memory: attention without the `T × T` matrix
#
# The cache makes each generation step cheap, but a forward pass over many tokens at once (the
# prefill, or training) still runs attention the way unit 04 does: a `(T, T)` matrix of scores
# per head, its softmax, then the weighted sum of the values. Memory grows with `T²`: at 4096
# tokens, 12 heads and float32, the scores of one layer take 12 × 4096² × 4 bytes ≈ 805 MB.
# FlashAttention (Dao et al., 2022; Dao, 2023) computes the same output (up to rounding) without
# ever holding those matrices. Its central idea is the **online softmax** (Milakov & Gimelshein,
# 2018): a softmax computed in one pass, block by block, keeping only two running numbers per query.
#
# Start with one row of scores seen one number at a time, `s = [1, 3, 2, 5]`. The softmax needs
# the maximum `m` (subtracted for stability, unit 02) and the sum `l = Σ exp(s_j − m)`. Both
# can be kept *running*: when a new score arrives, the maximum may grow, and then the sum so far,
# computed relative to the old maximum, is out of date; multiplying it by `exp(m_old − m_new)`
# brings it up to date:
#
# $$m_\text{new} = \max(m_\text{old}, s), \qquad l_\text{new} = l_\text{old}\, e^{m_\text{old} - m_\text{new}} + e^{s - m_\text{new}}.$$

# %%
scores = torch.tensor([1.0, 3.0, 2.0, 5.0])
m, l = torch.tensor(float("-inf")), torch.tensor(0.0)        # nothing seen yet: exp(-inf) = 0 wipes the old sum
for s in scores:
    m_new = torch.maximum(m, s)
    l = l * torch.exp(m - m_new) + torch.exp(s - m_new)
    m = m_new
    print(f"after {s.item():.0f}: running max {m.item():.0f}, running sum {l.item():.4f}")
print(f"in one go: max {scores.max().item():.0f}, sum {torch.exp(scores - scores.max()).sum().item():.4f}")


# %% [markdown]
# Attention needs one more running quantity per query: the weighted sum of the values,
# `acc = Σ exp(s_j − m) v_j`, a vector of the size of a value. It was computed relative to the
# running maximum too, so it is rescaled by the same factor. Nothing forces us to take the keys
# one at a time: take them in **blocks** of `b` keys. For each block, compute the `(T_q, b)`
# scores of every query against the block's keys, and update:
#
# | step | for each query row |
# |---|---|
# | 1 | `m_new = max(m, scores.max())`, the larger of `m` and the block's largest score |
# | 2 | `p = exp(scores − m_new)`, the block's unnormalised weights |
# | 3 | `c = exp(m − m_new)`, the rescaling factor (0 on the first block, where `m = −∞`) |
# | 4 | `l = l · c + p.sum()`, and `acc = acc · c + p @ v_block` |
# | 5 | `m = m_new` |
#
# After the last block, `acc / l` is the attention output. The largest intermediate is a
# `(T_q, b)` block of scores instead of `(T_q, T_k)`. FlashAttention tiles the queries as well and
# runs the whole loop inside one GPU kernel, so that blocks never leave the chip's fast memory;
# the arithmetic of FlashAttention-2 is the table above (the first FlashAttention rescaled the
# output at every block instead of dividing once at the end).

# %% [markdown]
# ### Exercise — `online_softmax_attention(q, k, v, block_size, causal=False)` (about 30 minutes)
#
# **Goal:** the scaled dot-product attention output of unit 04, `softmax(q kᵀ / √d) v`, for
# `q` of shape `(..., T_q, d)`, `k` of shape `(..., T_k, d)` and `v` of shape `(..., T_k, d_v)`
# (any leading dimensions), computed by going through the keys and values in blocks of
# `block_size` (the last block may be shorter) with a running maximum, a running sum and a running
# weighted sum of the values, as in the table above. With `causal=True`, query `i` may not look at
# keys `j > i`: query `i` and key `i` stand at the same position, the top-left alignment of
# `is_causal=True`, unlike `cached_attention`, where new query `i` stands at `P + i`. No tensor may be as
# large as the full matrix of `T_q × T_k` scores (a boolean mask of that size is fine). Return
# `(..., T_q, d_v)` in the dtype of `q`.
#
# <details><summary>Hint</summary>
#
# Give the running quantities a last dimension of size 1 (`m` and `l` of shape `(..., T_q, 1)`)
# so that they broadcast against a block of scores `(..., T_q, b)` and against `acc`
# `(..., T_q, d_v)`. Start with `m = −∞`, `l = 0`, `acc = 0`, with `torch.full` and `torch.zeros`
# on the device and dtype of `q`. `range(0, T_k, block_size)` gives the block starts, and slicing
# past the end is harmless. For the causal mask of a block, compare the query index with the
# key's index **in the whole sequence**, `start + j`, not with `j`. `.amax(dim=-1, keepdim=True)`
# is the largest score of each row of the block.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_online_softmax_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def online_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int,
                             causal: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over blocks of `block_size` keys, with a running max and sum.

    q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v) -> (..., T_q, d_v), in the dtype of q. causal:
    query i does not see keys j > i. No intermediate holds all T_q x T_k scores."""
    ### BEGIN SOLUTION
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)     # (..., T_q, 1)
    l = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)                  # (..., T_q, 1)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)      # (..., T_q, d_v)
    rows = torch.arange(num_queries, device=q.device)[:, None]                           # (T_q, 1)
    for start in range(0, num_keys, block_size):
        k_block = k[..., start:start + block_size, :]                                    # (..., b, d)
        v_block = v[..., start:start + block_size, :]                                    # (..., b, d_v)
        scores = (q @ k_block.transpose(-2, -1)) * scale                                 # (..., T_q, b)
        if causal:
            cols = torch.arange(start, start + k_block.shape[-2], device=q.device)       # (b,) key positions
            scores = scores.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))                      # (..., T_q, 1)
        p = torch.exp(scores - m_new)                                                    # (..., T_q, b)
        correction = torch.exp(m - m_new)                                                # (..., T_q, 1)
        l = l * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ v_block                                             # (..., T_q, d_v)
        m = m_new
    return acc / l
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_online_softmax_attention_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("online_softmax_attention")
### BEGIN HIDDEN TESTS
import math
import weakref

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from grader.spec import Case, Exact, Mistake, Spec, Tensor, run


def online_case(g, shape_q, num_keys, d_v, block_size, causal=False, size=1.0, about=""):
    *lead, t_q, d = shape_q
    q = torch.randn(*shape_q, generator=g) * size
    k = torch.randn(*lead, num_keys, d, generator=g)
    v = torch.randn(*lead, num_keys, d_v, generator=g)
    return Case(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, block_size={block_size}, "
                f"causal={causal}{about}", q=q, k=k, v=v, block_size=block_size, causal=causal)


def online_examples():
    g = torch.Generator().manual_seed(13)
    return [online_case(g, (5, 4), 5, 4, 2, causal=False),
            online_case(g, (2, 7, 4), 7, 3, 3, causal=True),
            online_case(g, (6, 8), 6, 2, 4, causal=True, size=60.0, about=" (large scores, up to about 150)"),
            negative_case(g, (6, 4), 8, 3, 3)]


def negative_case(g, shape_q, num_keys, d_v, block_size, causal=False):
    """Every second query meets only very negative scores (about -240, all below -100)."""
    *lead, t_q, d = shape_q
    q = torch.randn(*shape_q, generator=g)
    q[..., ::2, :] = -30 + torch.randn(*lead, (t_q + 1) // 2, d, generator=g)
    k = 4 + torch.randn(*lead, num_keys, d, generator=g)
    v = torch.randn(*lead, num_keys, d_v, generator=g)
    return Case(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, block_size={block_size}, causal={causal} "
                "(every score of queries 0, 2, 4, ... below -100)", q=q, k=k, v=v, block_size=block_size, causal=causal)


def online_cases(g):
    return [online_case(g, (2, 3, 9, 8), 9, 8, 1, causal=True),                 # one key at a time
            online_case(g, (2, 3, 9, 8), 9, 8, 9, causal=True),                 # one block: plain softmax
            online_case(g, (1, 2, 10, 4), 10, 6, 4, causal=True),               # 4 does not divide 10
            online_case(g, (3, 6, 16), 11, 5, 3, causal=False),                 # cross-attention shapes
            online_case(g, (4, 8), 12, 8, 5, causal=False),                     # no batch dimension
            online_case(g, (1, 1, 4), 1, 3, 2, causal=True),                    # a single key
            online_case(g, (2, 13, 8), 13, 4, 20, causal=True),                 # block larger than T
            online_case(g, (2, 12, 16), 12, 16, 5, causal=False, size=60.0, about=" (large scores)"),
            negative_case(g, (2, 7, 4), 7, 4, 2, causal=True)]


def call_online_softmax_attention(q, k, v, block_size, causal):
    return online_softmax_attention(q, k, v, block_size, causal=causal)


def online_oracle(q, k, v, causal):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)


def online_reference(q, k, v, block_size, causal, rescale_sum=True, rescale_acc=True, local_mask=False,
                     drop_last=False, scale=None, subtract_max=True, dtype=torch.float64, m_start=float("-inf")):
    """The block loop with switches that reproduce known mistakes."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    m = torch.full((*q.shape[:-1], 1), m_start, dtype=dtype)
    l, acc = torch.zeros_like(m), torch.zeros(*q.shape[:-1], v.shape[-1], dtype=dtype)
    num_keys = k.shape[-2]
    for start in range(0, num_keys - num_keys % block_size if drop_last else num_keys, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if causal:
            cols = torch.arange(kb.shape[-2]) + (0 if local_mask else start)
            s = s.masked_fill(cols[None, :] > torch.arange(q.shape[-2])[:, None], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True)) if subtract_max else torch.zeros_like(m)
        p, c = torch.exp(s - m_new), torch.exp(m - m_new) if subtract_max else torch.ones_like(m)
        l = (l * c if rescale_sum else l) + p.sum(-1, keepdim=True)
        acc = (acc * c if rescale_acc else acc) + p @ vb
        m = m_new
    return acc / l


def blocks_averaged(q, k, v, block_size, causal):
    """A known mistake: each block's own softmax, and the blocks' outputs averaged."""
    q, k, v = q.double(), k.double(), v.double()
    outs = []
    for start in range(0, k.shape[-2], block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            cols = torch.arange(kb.shape[-2]) + start
            s = s.masked_fill(cols[None, :] > torch.arange(q.shape[-2])[:, None], float("-inf"))
        outs.append(torch.softmax(s, dim=-1).nan_to_num() @ vb)
    return torch.stack(outs).mean(dim=0)


def online_mistakes(q, k, v, block_size, causal):
    def ref(**switches):
        return online_reference(q, k, v, block_size, causal, **switches)

    num_keys, d = k.shape[-2], q.shape[-1]
    if num_keys > block_size:
        yield Mistake("the running sum is not rescaled when the maximum grows: multiply the old sum by "
                      "exp(m_old - m_new) before adding the block's sum", ref(rescale_sum=False))
        yield Mistake("the running weighted sum of the values is not rescaled when the maximum grows: multiply it by "
                      "exp(m_old - m_new) before adding the block's p @ v", ref(rescale_acc=False))
        yield Mistake("each block's softmax was taken on its own and the blocks' outputs averaged: a block's weights "
                      "must be shared with every other block's. Keep a running maximum m and sum l over all blocks, "
                      "rescale the sum and the output by exp(m_old - m_new) when m grows, and divide by l at the end",
                      blocks_averaged(q, k, v, block_size, causal))
        if causal:
            yield Mistake("the causal mask compares the query index with the key's index inside the block; compare "
                          "it with the key's position in the whole sequence, start + j", ref(local_mask=True))
    if num_keys % block_size and num_keys > block_size:
        yield Mistake("the keys of the last, shorter block are left out: when block_size does not divide T_k the "
                      "last block has fewer keys, but it counts", ref(drop_last=True))
    yield Mistake("the output is NaN: the scores were exponentiated before the running maximum was updated (on the "
                  "first block it is -inf, and exp(s - (-inf)) overflows); take the new maximum first, then subtract "
                  "it", torch.full(q.shape[:-1] + v.shape[-1:], float("nan"), dtype=torch.float64))
    yield Mistake("queries whose scores are all very negative get NaN: the running maximum must start at -inf, not at "
                  "0 or another number, or exp(s - m) underflows to 0 for every key of such a row and the sum l stays 0",
                  ref(m_start=0.0, dtype=torch.float32))
    big = ref(subtract_max=False, dtype=torch.float32)
    if not bool(torch.isfinite(big).all()):
        yield Mistake("without subtracting the running maximum, exp overflows for large scores (float32 overflows "
                      "past exp(88.7)): subtract the running maximum before exponentiating", big)
    last_start = (num_keys - 1) // block_size * block_size
    if causal and last_start > 0:
        holed = online_oracle(q, k, v, causal).clone()
        holed[..., :min(last_start, q.shape[-2]), :] = float("nan")
        yield Mistake("a query whose keys in a block all lie in its future gets NaN (a softmax or log-sum-exp of a row "
                      "of -inf); such a block must add nothing for that query: take the running maximum over it, or "
                      "give its weights 0", holed)
    if causal and q.shape[-2] > 1:
        yield Mistake("the causal mask is ignored: with causal=True, query i must not look at keys after i",
                      online_reference(q, k, v, block_size, False))
    if d > 1:
        yield Mistake("the scores are not scaled: divide them by sqrt(d), d the size of a query", ref(scale=1.0))
        yield Mistake("the scores are divided by d; divide them by sqrt(d)", ref(scale=1.0 / d))


def memory_examples():
    g = torch.Generator().manual_seed(14)
    return [Case("q, k, v of shape (2, 512, 8), block_size=16, causal=True: the most memory held at once by "
                 "tensors your function creates, against the (2, 512, 512) scores of full attention",
                 q=torch.randn(2, 512, 8, generator=g), k=torch.randn(2, 512, 8, generator=g),
                 v=torch.randn(2, 512, 8, generator=g), block_size=16, causal=True)]


def memory_cases(g):
    return [Case("q, k, v of shape (1, 2, 384, 4), block_size=12, causal=False: the most memory held at once, "
                 "against the scores of full attention", q=torch.randn(1, 2, 384, 4, generator=g),
                 k=torch.randn(1, 2, 384, 4, generator=g), v=torch.randn(1, 2, 384, 4, generator=g), block_size=12,
                 causal=False)]


def call_online_memory(q, k, v, block_size, causal):
    """Whether the tensors the function creates never hold as much as half the bytes of the full
    (..., T_q, T_k) scores at once."""
    class PeakBytes(TorchDispatchMode):
        def __init__(self, inputs):
            super().__init__()
            self.users, self.sizes, self.live, self.peak = {}, {}, 0, 0
            self.inputs = {t.untyped_storage().data_ptr() for t in inputs}

        def release(self, address):
            self.users[address] -= 1
            if not self.users[address]:
                del self.users[address]
                self.live -= self.sizes.pop(address)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    address = t.untyped_storage().data_ptr()
                    if address in self.inputs or address == 0:
                        continue
                    if address not in self.users:
                        self.users[address], self.sizes[address] = 0, t.untyped_storage().nbytes()
                        self.live += self.sizes[address]
                        self.peak = max(self.peak, self.live)
                    self.users[address] += 1
                    weakref.finalize(t, self.release, address)
            return out

    full_scores = q[..., :, :1].numel() * k.shape[-2] * q.element_size()
    with PeakBytes((q, k, v)) as meter:
        out = online_softmax_attention(q, k, v, block_size, causal=causal)
    del out
    return "less than half" if meter.peak < full_scores / 2 else "as much as the full scores"


def memory_mistakes():
    yield Mistake("your function holds as much memory as the full (..., T_q, T_k) matrix of scores (or a good part "
                  "of it, half or more) at once: compute the scores of one block of keys at a time and keep only the running "
                  "max, sum and weighted sum between blocks", "as much as the full scores")


def dtype_case(g, dtype, shape_q, num_keys, block_size, causal):
    *lead, t_q, d = shape_q
    return Case(f"q {tuple(shape_q)}, {num_keys} keys, block_size={block_size}, causal={causal}, all in {dtype}: the "
                "dtype of the result", q=torch.randn(*shape_q, generator=g), k=torch.randn(*lead, num_keys, d, generator=g),
                v=torch.randn(*lead, num_keys, d, generator=g), block_size=block_size, causal=causal, dtype=dtype)


def call_online_dtype(q, k, v, block_size, causal, dtype):
    q, k, v = (t.to(getattr(torch, dtype)) for t in (q, k, v))
    return str(online_softmax_attention(q, k, v, block_size, causal=causal).dtype).removeprefix("torch.")


def online_dtype_mistakes(dtype):
    if dtype != "float32":
        yield Mistake("for inputs in float16, bfloat16 or float64 the result must keep their dtype, and yours is "
                      "float32: create m, l and acc with dtype=q.dtype (torch.full and torch.zeros make float32 unless "
                      "told otherwise)", "float32")


run(Spec("online_softmax_attention", call_online_softmax_attention, online_oracle, examples=online_examples,
         cases=online_cases, mistakes=online_mistakes, judge=Tensor()),
    Spec("online_softmax_attention", call_online_memory, lambda: "less than half", examples=memory_examples,
         cases=memory_cases, mistakes=memory_mistakes, judge=Exact()),
    Spec("online_softmax_attention", call_online_dtype, lambda dtype: dtype,
         examples=lambda: [dtype_case(torch.Generator().manual_seed(15), "bfloat16", (2, 6, 4), 6, 4, True)],
         cases=lambda g: [dtype_case(g, "float64", (3, 5, 8), 9, 4, False), dtype_case(g, "bfloat16", (4, 4), 4, 3, True)],
         mistakes=online_dtype_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Check the result against full attention on the model's own sizes (4 heads of 16 features),
# with block sizes that divide the 100 keys and ones that do not:

# %%
def full_attention(q, k, v, causal=False):
    """Unit 04's attention output, with the whole (..., T_q, T_k) matrix of scores."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])                     # (..., T_q, T_k)
    if causal:
        blocked = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(diagonal=1)
        scores = scores.masked_fill(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v                                       # (..., T_q, d_v)


torch.manual_seed(2)
q, k, v = (torch.randn(1, 4, 100, 16, device=device) for _ in range(3))           # (B, H, T, head_dim)
reference = full_attention(q, k, v, causal=True)
for block_size in (1, 7, 25, 64, 100, 128):
    difference = (online_softmax_attention(q, k, v, block_size, causal=True) - reference).abs().max().item()
    print(f"block_size {block_size:3d}: largest difference from full attention {difference:.1e}")


# %% [markdown]
# Now the memory. PyTorch lets code watch every operation it runs (a *dispatch mode*). The
# given `PeakMemory` below uses it to add up the bytes of each tensor that an operation creates
# while it is active, to subtract them when the tensor is freed, and to remember the highest
# total. That is a measurement of what the code really allocates, on a CPU or a GPU (tensors
# only: a kernel's small private buffers are not seen).

# %% nbgrader={"grade": false, "grade_id": "u09_given_meter", "locked": true, "schema_version": 3, "solution": false, "task": false}
class PeakMemory(TorchDispatchMode):
    """with PeakMemory(inputs...) as meter: ... -> meter.peak, the most bytes held at once by the
    tensors that operations created inside the block (the given inputs and their views not counted)."""

    def __init__(self, *inputs):
        super().__init__()
        self.users = {}          # storage address -> live tensors created here that use it
        self.sizes = {}          # storage address -> bytes
        self.live = self.peak = 0
        self.inputs = {t.untyped_storage().data_ptr() for t in inputs}

    def _release(self, address):
        self.users[address] -= 1
        if self.users[address] == 0:
            del self.users[address]
            self.live -= self.sizes.pop(address)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                address = t.untyped_storage().data_ptr()
                if address in self.inputs or address == 0:
                    continue
                if address not in self.users:               # a new block of memory
                    self.users[address], self.sizes[address] = 0, t.untyped_storage().nbytes()
                    self.live += self.sizes[address]
                    self.peak = max(self.peak, self.live)
                self.users[address] += 1                    # one more tensor (or view) uses it
                weakref.finalize(t, self._release, address)
        return out


# %% [markdown]
# Measure full attention and your online softmax (blocks of 128 keys) as the sequence grows, for
# one sequence with 4 heads of 64 features, together with PyTorch's own
# `F.scaled_dot_product_attention`, next to the size of the scores of full attention, a
# `(1, 4, T, T)` tensor.

# %%
def peak_bytes(fn, *inputs, **kwargs):
    with PeakMemory(*inputs) as meter:
        out = fn(*inputs, **kwargs)
        del out
    return meter.peak


lengths_t = [128, 256, 512] if GRADING else [256, 512, 1024, 2048]
memory = {"full attention": [], "online softmax, blocks of 128": [], "F.scaled_dot_product_attention": [],
          "the scores, (1, 4, T, T)": []}
for t in lengths_t:
    q, k, v = (torch.randn(1, 4, t, 64, device=device) for _ in range(3))          # (B, H, T, head_dim)
    memory["full attention"].append(peak_bytes(full_attention, q, k, v, causal=True))
    memory["online softmax, blocks of 128"].append(peak_bytes(online_softmax_attention, q, k, v, block_size=128,
                                                              causal=True))
    memory["F.scaled_dot_product_attention"].append(peak_bytes(F.scaled_dot_product_attention, q, k, v, is_causal=True))
    memory["the scores, (1, 4, T, T)"].append(4 * t * t * q.element_size())
for t, row in zip(lengths_t, zip(*memory.values())):
    print(f"T = {t:5d}: " + ", ".join(f"{name} {b / 2 ** 20:.2f} MiB" for name, b in zip(memory, row)))

fig, ax = plt.subplots(figsize=(7, 3.5))
for (name, values), style in zip(memory.items(), ("o-", "s--", "^-.", "k:")):
    ax.plot(lengths_t, [b / 2 ** 20 for b in values], style, label=name)
ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="peak memory (MiB)",
       title="Memory held at once by attention's tensors")
ax.set_xticks(lengths_t, [str(t) for t in lengths_t])
ax.tick_params(axis="x", which="minor", labelbottom=False)
ax.legend()
show()

# %% [markdown]
# Full attention holds about two tensors of scores at its peak (the scores and their masked copy,
# then the masked copy and the weights), so its memory grows as `T²`: ×4 for each doubling of `T`.
# The online softmax holds a few `(T, 128)` blocks per head and the `(T, 64)` running sums: its
# memory grows as `T`, ×2 for each doubling. In our run at `T = 2048` that was 134 MiB against
# 18 MiB. That saving holds for a pass without gradients (generation, a prefill), as here: `q`, `k`
# and `v` do not require grad. Under autograd your loop would keep every block's scores and weights
# for the backward pass, `T²` numbers again. FlashAttention's backward keeps only `m` and `l` per
# query (as their log-sum-exp, `m + log l`) and recomputes each block's weights from them. PyTorch's own `F.scaled_dot_product_attention` needed hardly more than its 2 MiB output:
# on a CPU it runs a FlashAttention kernel (its profiler names it
# `_scaled_dot_product_flash_attention_for_cpu`), the same block loop in compiled code, whose small
# working buffers the meter does not see.
#
# And the time? The next cell times the three at the largest length.

# %%
t = lengths_t[-1]
q, k, v = (torch.randn(1, 4, t, 64, device=device) for _ in range(3))
with torch.no_grad():
    for name, fn in (("full attention", lambda: full_attention(q, k, v, causal=True)),
                     ("online softmax, blocks of 128", lambda: online_softmax_attention(q, k, v, 128, causal=True)),
                     ("F.scaled_dot_product_attention", lambda: F.scaled_dot_product_attention(q, k, v,
                                                                                              is_causal=True))):
        fn()                                                     # a first call to warm up
        times = []
        for _ in range(3):
            begin = clock()
            fn()
            times.append(clock() - begin)
        print(f"T = {t}: {name:>31}: {1000 * statistics.median(times):7.1f} ms")

# %% [markdown]
# In our runs at `T = 2048`: 120 to 170 ms for full attention, 100 to 140 ms for our loop, about
# 20 ms for PyTorch's kernel. Our loop is no slower than full attention although it is a Python
# loop of small operations, most likely because its blocks of scores (4 MiB here) fit in the
# processor's caches, while the 64 MiB tensors of full attention travel to main memory and back
# at every operation. The compiled kernel goes further: no Python in the loop, and the
# exponentials, sums and products of a block done in one pass.
#
# On a GPU this is the whole point of **FlashAttention**: a block of queries and a block of keys
# are loaded into the chip's small, fast on-chip memory, and the scores, the running maximum, sum
# and weighted sum stay there until the output is written. The `T × T` matrices never travel to and
# from the GPU's main memory, which is what limits plain attention there. PyTorch's
# `F.scaled_dot_product_attention` picks such a fused kernel when one exists for the device and the
# inputs; your `online_softmax_attention` is the same arithmetic, written so that you can read it.

# %% [markdown]
# ## 9. What the cache itself costs
#
# The cache trades memory for time, and so far we have counted only the time. Every layer keeps
# a key and a value for every position of every text being written: per token,
#
# $$2 \times \text{layers} \times \text{heads} \times \text{head\_dim} \times \text{bytes per number}$$
#
# (the 2 for keys and values). Our model has 4 layers of 4 heads of 16 features in float32: 2 ×
# 4 × 4 × 16 × 4 = 2,048 bytes, 2 KiB per token, 128 KiB for a full context of 64 tokens, next to
# 809 KiB of weights (828,416 bytes). Small. But the count grows with the model, the text and the number of
# texts written at once, and for large models it is the cache, not the weights, that fills the
# memory of an inference server.
#
# Some models share one key and value head among several query heads (*grouped-query
# attention*, as in Llama 2 70B and Llama 3, with 8 key/value heads for 64 or 32 query heads),
# and their cache holds `num_kv_heads` heads instead of `num_heads`: that is the whole point.

# %% [markdown]
# ### Exercise — `kv_cache_bytes(cfg, num_tokens, batch_size=1, dtype=torch.float32, num_kv_heads=None)` (about 5 minutes)
#
# **Goal:** return, as a Python `int`, the bytes that the keys and values of every layer of a
# model with configuration `cfg` take for `num_tokens` positions of `batch_size` texts, stored
# as `dtype` (e.g. `torch.float16`: 2 bytes per number). `num_kv_heads=None` means one key and
# value head per query head, `cfg.num_heads`; otherwise the cache holds `num_kv_heads` heads of
# `head_dim = cfg.emb_dim // cfg.num_heads` features.
#
# <details><summary>Hint</summary>
#
# Multiply, per layer and per position, what the formula above lists; the batch is one more
# factor. `dtype.itemsize` is the size of one number in bytes.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_kv_cache_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def kv_cache_bytes(cfg: GPTConfig, num_tokens: int, batch_size: int = 1, dtype: torch.dtype = torch.float32,
                   num_kv_heads: int | None = None) -> int:
    """Bytes of the keys and values of every layer for num_tokens positions of batch_size texts,
    stored as dtype; num_kv_heads key/value heads of head_dim features (None: cfg.num_heads)."""
    ### BEGIN SOLUTION
    heads = cfg.num_heads if num_kv_heads is None else num_kv_heads
    head_dim = cfg.emb_dim // cfg.num_heads
    return 2 * cfg.num_layers * batch_size * num_tokens * heads * head_dim * dtype.itemsize
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_kv_cache_bytes_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("kv_cache_bytes")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Exact, Mistake, Spec, run

SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def cache_case(label, emb_dim, num_heads, num_layers, num_tokens, batch_size=1, dtype="float32", num_kv_heads=None):
    cfg = dict(vocab_size=50, context_length=max(num_tokens, 8), emb_dim=emb_dim, num_heads=num_heads,
               num_layers=num_layers)
    return Case(label, cfg=cfg, num_tokens=num_tokens, batch_size=batch_size, dtype=dtype, num_kv_heads=num_kv_heads)


def cache_examples():
    return [cache_case("our model: emb_dim 64, 4 heads, 4 layers, 64 tokens in float32", 64, 4, 4, 64),
            cache_case("GPT-2 small: emb_dim 768, 12 heads, 12 layers, 1024 tokens in float16", 768, 12, 12, 1024,
                       dtype="float16"),
            cache_case("emb_dim 4096, 32 heads, 32 layers, 4096 tokens, 4 texts, float16, 8 key/value heads", 4096,
                       32, 32, 4096, batch_size=4, dtype="float16", num_kv_heads=8),
            cache_case("emb_dim 12, 3 heads, 2 layers, 5 tokens (every size differs)", 12, 3, 2, 5)]


def cache_cases(g):
    return [cache_case("emb_dim 12, 3 heads, 2 layers, 5 tokens", 12, 3, 2, 5),
            cache_case("emb_dim 8, 2 heads, 1 layer, 1 token, 3 texts, float64", 8, 2, 1, 1, batch_size=3,
                       dtype="float64"),
            cache_case("emb_dim 32, 8 heads, 3 layers, 7 tokens, bfloat16, 2 key/value heads", 32, 8, 3, 7,
                       dtype="bfloat16", num_kv_heads=2),
            cache_case("emb_dim 16, 4 heads, 2 layers, 10 tokens, num_kv_heads=4 given", 16, 4, 2, 10, num_kv_heads=4),
            cache_case("emb_dim 24, 6 heads, 5 layers, 0 tokens", 24, 6, 5, 0)]


def call_kv_cache_bytes(cfg, num_tokens, batch_size, dtype, num_kv_heads):
    return kv_cache_bytes(GPTConfig(**cfg), num_tokens, batch_size=batch_size, dtype=getattr(torch, dtype),
                          num_kv_heads=num_kv_heads)


def cache_oracle(cfg, num_tokens, batch_size, dtype, num_kv_heads):
    heads = cfg["num_heads"] if num_kv_heads is None else num_kv_heads
    return 2 * cfg["num_layers"] * batch_size * num_tokens * heads * (cfg["emb_dim"] // cfg["num_heads"]) * SIZES[dtype]


def cache_mistakes(cfg, num_tokens, batch_size, dtype, num_kv_heads):
    right = cache_oracle(cfg, num_tokens, batch_size, dtype, num_kv_heads)
    if right == 0:
        return
    yield Mistake("you counted the keys only: the cache holds keys and values, twice as many numbers", right // 2)
    if cfg["num_layers"] > 1:
        yield Mistake("you counted one layer: every layer keeps its own keys and values", right // cfg["num_layers"])
    if batch_size > 1:
        yield Mistake("the batch is missing: each text being written has its own keys and values",
                      right // batch_size)
    if SIZES[dtype] != 4:
        yield Mistake("you counted 4 bytes per number whatever the dtype: dtype.itemsize is the size of one number",
                      right // SIZES[dtype] * 4)
    if num_kv_heads is not None and num_kv_heads != cfg["num_heads"]:
        yield Mistake("with num_kv_heads given, the cache holds num_kv_heads heads of keys and values, not "
                      "num_heads", cache_oracle(cfg, num_tokens, batch_size, dtype, None))
    yield Mistake("each head holds head_dim = emb_dim // num_heads features, not emb_dim",
                  right * cfg["num_heads"])


run(Spec("kv_cache_bytes", call_kv_cache_bytes, cache_oracle, examples=cache_examples, cases=cache_cases,
         mistakes=cache_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Now measure it. The meter of section 8 counts the tensors created inside its block and still
# alive at the end, `meter.live`: after a prefill, that is exactly your cache. Then the same
# count for bigger models, in float16 as they usually run.

# %%
prompt = torch.tensor([encode(CORPUS_CHARS[:1] * cfg.context_length)], device=device)   # (1, C)
with torch.no_grad(), PeakMemory() as meter:
    caches = [KVCache() for _ in model.blocks]
    logits = forward_cached(model, prompt, caches)
    del logits
print(f"our cache after {cfg.context_length} tokens: measured {meter.live:,} bytes, "
      f"kv_cache_bytes says {kv_cache_bytes(cfg, cfg.context_length):,}")
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"our weights: {weights:,} bytes\n")

gpt2 = GPTConfig(vocab_size=50257, context_length=1024, emb_dim=768, num_heads=12, num_layers=12)
llama7b = GPTConfig(vocab_size=32000, context_length=4096, emb_dim=4096, num_heads=32, num_layers=32)
for name, big, weights_gb in (("GPT-2 small", gpt2, 0.25), ("a 7B model like Llama 2", llama7b, 13.5)):
    per_token = kv_cache_bytes(big, 1, dtype=torch.float16)
    per_text = kv_cache_bytes(big, big.context_length, dtype=torch.float16)
    print(f"{name}: {per_token / 2**10:,.0f} KiB per token, {per_text / 1e9:.2f} GB per text of "
          f"{big.context_length} tokens; the weights in float16: about {weights_gb} GB")
grouped = kv_cache_bytes(llama7b, llama7b.context_length, dtype=torch.float16, num_kv_heads=8)
print(f"the 7B model with 8 key/value heads instead of 32: {grouped / 1e9:.2f} GB per text")

# %% [markdown]
# Our cache is as small as our model. A 7B model's is not: at 512 KiB per token, one text of 4096
# tokens holds 2 GiB of keys and values (2.15 GB), and seven such texts outweigh the 13.5 GB of
# weights.
# This is why servers count their memory in tokens of cache, and why newer models share key and
# value heads (grouped-query attention: 8 heads instead of 32 divide the cache by 4) or compress
# them (DeepSeek's multi-head latent attention). Grouped-query attention is a small change to
# the attention of section 1; write it.

# %% [markdown]
# ### Exercise — `GroupedQueryAttention(d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False)` (about 20 minutes)
#
# **Goal:** the causal multi-head attention of section 1, with `num_kv_heads` key/value heads
# shared by the `num_heads` query heads. Consecutive query heads share one: with 8 query heads
# and 2 key/value heads, query heads 0–3 use key/value head 0 and heads 4–7 use head 1, that is,
# query head `h` uses key/value head `h // (num_heads // num_kv_heads)`.
#
# - `W_query`: `d_in → d_out`, as before; `W_key` and `W_value`: `d_in → num_kv_heads · head_dim`,
#   with `head_dim = d_out // num_heads`; `out_proj`: `d_out → d_out`; `dropout` on the attention
#   weights; the causal `mask` as a buffer.
# - A `ValueError` when `d_out` is not divisible by `num_heads`, or `num_heads` by `num_kv_heads`.
# - With `num_kv_heads == num_heads` it is `MultiHeadAttention`, weight for weight; with
#   `num_kv_heads == 1` every query head shares one key and one value head (*multi-query
#   attention*).
#
# <details><summary>Hint</summary>
#
# Make the keys and values `(B, num_kv_heads, T, head_dim)`, then give each query head its own
# copy, so that the attention of `MultiHeadAttention` runs unchanged.
# <details><summary>More</summary>
#
# `k.repeat_interleave(num_heads // num_kv_heads, dim=1)` turns `(B, G, T, hd)` into
# `(B, H, T, hd)` with each key/value head repeated for its consecutive query heads
# (`repeat` would deal them out in turn instead).
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_grouped_query_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class GroupedQueryAttention(nn.Module):
    """Causal attention with num_heads query heads sharing num_kv_heads key/value heads: query
    head h uses key/value head h // (num_heads // num_kv_heads). W_query (d_in -> d_out), W_key and
    W_value (d_in -> num_kv_heads * head_dim), out_proj (d_out -> d_out), dropout on the weights,
    buffer mask. ValueError unless num_heads divides d_out and num_kv_heads divides num_heads."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 num_kv_heads: int, qkv_bias: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        if d_out % num_heads != 0:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
        self.d_out, self.num_heads, self.num_kv_heads = d_out, num_heads, num_kv_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool),
                                                diagonal=1))
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        b, t, _ = x.shape
        group = self.num_heads // self.num_kv_heads                                       # query heads per kv head
        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)     # (B, H, T, hd)
        k = self.W_key(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)    # (B, G, T, hd)
        v = self.W_value(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, G, T, hd)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)       # (B, H, T, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)                       # (B, H, T, T)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))                             # (B, H, T, T)
        context = (weights @ v).transpose(1, 2).contiguous().view(b, t, self.d_out)       # (B, T, d_out)
        return self.out_proj(context)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_grouped_query_attention_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("GroupedQueryAttention")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.inputs import linear_state
from grader.spec import Case, Exact, Mistake, Spec, build, dropout_seen, run


def gqa_case(g, shape, d_out, num_heads, num_kv_heads, qkv_bias=False, label=""):
    b, t, d_in = shape
    head_dim = d_out // num_heads
    state = (linear_state(g, ("W_query",), d_in, d_out, qkv_bias)
             | linear_state(g, ("W_key", "W_value"), d_in, num_kv_heads * head_dim, qkv_bias)
             | linear_state(g, ("out_proj",), d_out, d_out, True))
    return Case(label or f"x {shape}, d_out={d_out}, {num_heads} query heads, {num_kv_heads} key/value heads, "
                         f"qkv_bias={qkv_bias}",
                x=torch.randn(*shape, generator=g), state=state, num_heads=num_heads, num_kv_heads=num_kv_heads,
                qkv_bias=qkv_bias)


def gqa_examples():
    g = torch.Generator().manual_seed(12)
    return [gqa_case(g, (1, 5, 8), 8, 4, 2, label="x (1, 5, 8), d_out=8, 4 query heads sharing 2 key/value heads"),
            gqa_case(g, (2, 4, 6), 6, 3, 3, label="x (2, 4, 6), d_out=6, 3 query heads and 3 key/value heads "
                                                  "(multi-head attention)")]


def gqa_cases(g):
    return [gqa_case(g, (2, 6, 8), 8, 4, 1, qkv_bias=True),      # multi-query attention
            gqa_case(g, (1, 7, 12), 12, 6, 2),
            gqa_case(g, (3, 3, 5), 16, 8, 4, qkv_bias=True),
            gqa_case(g, (1, 1, 4), 4, 2, 1),
            gqa_case(g, (2, 8, 6), 12, 4, 4)]


def call_gqa(x, state, num_heads, num_kv_heads, qkv_bias):
    d_in, d_out = x.shape[-1], state["W_query.weight"].shape[0]
    module = build(GroupedQueryAttention, state, d_in, d_out, 8, 0.0, num_heads, num_kv_heads, qkv_bias=qkv_bias)
    with torch.no_grad():
        return module(x)


def gqa_reference(x, state, num_heads, num_kv_heads, spread="consecutive", scale_dim=None, causal=True):
    """Grouped-query attention in float64, with switches that reproduce known mistakes."""
    s = {k: v.double() for k, v in state.items()}
    (b, t, _), d_out = x.shape, s["W_query.weight"].shape[0]
    hd, group = d_out // num_heads, num_heads // num_kv_heads

    def lin(name, heads):
        y = F.linear(x.double(), s[name + ".weight"], s.get(name + ".bias"))
        return y.view(b, t, heads, hd).transpose(1, 2)

    q, k, v = lin("W_query", num_heads), lin("W_key", num_kv_heads), lin("W_value", num_kv_heads)
    if spread == "consecutive":
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    else:   # dealt out in turn: query head h gets key/value head h % num_kv_heads
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale_dim or hd)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d_out)
    return F.linear(context, s["out_proj.weight"], s["out_proj.bias"])


def gqa_oracle(x, state, num_heads, num_kv_heads):
    return gqa_reference(x, state, num_heads, num_kv_heads)


def gqa_mistakes(x, state, num_heads, num_kv_heads):
    if 1 < num_kv_heads < num_heads:
        yield Mistake("consecutive query heads must share a key/value head (query head h uses key/value head "
                      "h // (num_heads // num_kv_heads)); you dealt the key/value heads out in turn, as repeat does: "
                      "use repeat_interleave", gqa_reference(x, state, num_heads, num_kv_heads, spread="dealt"))
    yield Mistake("the scores are divided by the square root of d_out; divide by the square root of head_dim",
                  gqa_reference(x, state, num_heads, num_kv_heads, scale_dim=state["W_query.weight"].shape[0]))
    if x.shape[1] > 1:
        yield Mistake("the output depends on future tokens: apply the causal mask to the scores",
                      gqa_reference(x, state, num_heads, num_kv_heads, causal=False))


def gqa_shape_examples():
    return [Case("GroupedQueryAttention(4, 8, 5, 0.0, num_heads=4, num_kv_heads=3)", d_out=8, num_heads=4,
                 num_kv_heads=3),
            Case("the shapes of W_key and W_value for d_in=4, d_out=8, 4 query heads, 2 key/value heads", d_out=8,
                 num_heads=4, num_kv_heads=2)]


def gqa_shape_cases(g):
    return [Case(f"d_in=4, d_out={do}, num_heads={h}, num_kv_heads={kv}", d_out=do, num_heads=h, num_kv_heads=kv)
            for do, h, kv in ((12, 4, 1), (7, 2, 1), (12, 6, 4), (16, 8, 8))]


def call_gqa_shapes(d_out, num_heads, num_kv_heads):
    try:
        module = GroupedQueryAttention(4, d_out, 5, 0.0, num_heads, num_kv_heads)
    except NotImplementedError:
        raise
    except Exception as exc:
        return f"raised {type(exc).__name__}"
    return f"W_key {tuple(module.W_key.weight.shape)}, W_value {tuple(module.W_value.weight.shape)}"


def gqa_shape_oracle(d_out, num_heads, num_kv_heads):
    if d_out % num_heads or num_heads % num_kv_heads:
        return "raised ValueError"
    rows = num_kv_heads * (d_out // num_heads)
    return f"W_key {(rows, 4)}, W_value {(rows, 4)}"


def gqa_shape_mistakes(d_out, num_heads, num_kv_heads):
    if d_out % num_heads == 0 and num_heads % num_kv_heads:
        yield Mistake(f"GroupedQueryAttention(num_heads={num_heads}, num_kv_heads={num_kv_heads}) was built without "
                      "complaint: raise a ValueError when num_heads is not divisible by num_kv_heads",
                      f"W_key {(num_kv_heads * (d_out // num_heads), 4)}, W_value "
                      f"{(num_kv_heads * (d_out // num_heads), 4)}")
    if not (d_out % num_heads or num_heads % num_kv_heads) and num_kv_heads != num_heads:
        yield Mistake("W_key and W_value map to num_kv_heads * head_dim features, not d_out: the saving is that the "
                      "keys and values are fewer", f"W_key {(d_out, 4)}, W_value {(d_out, 4)}")


def gqa_dropout_case(g, shape, d_out, num_heads, num_kv_heads, train):
    fields = dict(gqa_case(g, shape, d_out, num_heads, num_kv_heads).fields)
    del fields["qkv_bias"]
    mode = "train()" if train else "eval()"
    return Case(f"x {shape}, d_out={d_out}, {num_heads} query heads sharing {num_kv_heads} key/value heads, dropout "
                f"0.5 in {mode} mode: what is dropout applied to?", train=train, **fields)


def call_gqa_dropout(x, state, num_heads, num_kv_heads, train):
    """Every value dropout received (sorted), with dropout made the identity."""
    d_in, d_out = x.shape[-1], state["W_query.weight"].shape[0]
    module = build(GroupedQueryAttention, state, d_in, d_out, 8, 0.5, num_heads, num_kv_heads, train=train)
    with dropout_seen() as log, torch.no_grad():
        module(x)
    return log.values()


def gqa_parts(x, state, num_heads, num_kv_heads):
    """The scores, weights, merged context and output of grouped-query attention, in float64."""
    s = {k: v.double() for k, v in state.items()}
    (b, t, _), d_out = x.shape, s["W_query.weight"].shape[0]
    hd, group = d_out // num_heads, num_heads // num_kv_heads

    def lin(name, heads):
        return F.linear(x.double(), s[name + ".weight"], s.get(name + ".bias")).view(b, t, heads, hd).transpose(1, 2)

    q = lin("W_query", num_heads)
    k, v = (lin(name, num_kv_heads).repeat_interleave(group, dim=1) for name in ("W_key", "W_value"))
    scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
    weights = torch.softmax(scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")), dim=-1)
    context = (weights @ v).transpose(1, 2).reshape(b, t, d_out)
    return {"scores": scores, "weights": weights, "context": context,
            "output": F.linear(context, s["out_proj.weight"], s["out_proj.bias"])}


def sorted_values(*tensors):
    return torch.cat([t.flatten() for t in tensors]).sort().values


def gqa_dropout_oracle(x, state, num_heads, num_kv_heads, train):
    return sorted_values(gqa_parts(x, state, num_heads, num_kv_heads)["weights"]) if train else \
        torch.zeros(0, dtype=torch.float64)


def gqa_dropout_mistakes(x, state, num_heads, num_kv_heads, train):
    parts = gqa_parts(x, state, num_heads, num_kv_heads)
    if not train:
        for value in parts.values():
            yield Mistake("in eval() mode your output is random: dropout must act only in training mode "
                          "(self.dropout, an nn.Dropout, knows the mode; a bare F.dropout does not)", sorted_values(value))
        return
    at = {"scores": "the scores, before the softmax", "context": "the merged context, before out_proj",
          "output": "the output of out_proj"}
    for where, text in at.items():
        yield Mistake(f"in training mode you applied dropout to {text}; apply it to the attention weights "
                      "(after the softmax), as MultiHeadAttention does", sorted_values(parts[where]))
    yield Mistake("in training mode you applied dropout twice, to the attention weights and to the output of "
                  "out_proj; apply it to the attention weights only", sorted_values(parts["weights"], parts["output"]))
    yield Mistake("in training mode your output is the same as in eval mode: apply self.dropout to the attention "
                  "weights", torch.zeros(0, dtype=torch.float64))


run(Spec("GroupedQueryAttention", call_gqa, gqa_oracle, examples=gqa_examples, cases=gqa_cases,
         mistakes=gqa_mistakes),
    Spec("GroupedQueryAttention", call_gqa_dropout, gqa_dropout_oracle,
         examples=lambda: [gqa_dropout_case(torch.Generator().manual_seed(16), (1, 5, 8), 8, 4, 2, True)],
         cases=lambda g: [gqa_dropout_case(g, (2, 4, 12), 12, 6, 3, True), gqa_dropout_case(g, (1, 3, 8), 8, 4, 1, True),
                          gqa_dropout_case(g, (1, 4, 8), 8, 4, 2, False)],
         mistakes=gqa_dropout_mistakes),
    Spec("GroupedQueryAttention", call_gqa_shapes, gqa_shape_oracle, examples=gqa_shape_examples,
         cases=gqa_shape_cases, mistakes=gqa_shape_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Check the first promise: with as many key/value heads as query heads it computes what
# `MultiHeadAttention` computes, weight for weight. The cell copies the parameters only, as the
# grader does: each layer keeps the `mask` it built itself.

# %%
torch.manual_seed(3)
mha = MultiHeadAttention(64, 64, 16, 0.0, num_heads=8).eval()
same = GroupedQueryAttention(64, 64, 16, 0.0, num_heads=8, num_kv_heads=8).eval()
with torch.no_grad():
    for name, parameter in mha.named_parameters():                        # parameters, not buffers
        same.get_parameter(name).copy_(parameter)
x_demo = torch.randn(2, 16, 64)                                            # (B, T, d_in)
with torch.no_grad():
    print("num_kv_heads == num_heads gives MultiHeadAttention:", torch.allclose(same(x_demo), mha(x_demo), atol=1e-6))

# %% [markdown]
# Now the second promise, under a cache. A grouped-query layer caches its `num_kv_heads` shared
# heads, `(B, num_kv_heads, T_cached, head_dim)`, and makes each query head's copy only after the
# cache has handed them back, at every step. Caching the copies would store every shared head
# `num_heads // num_kv_heads` times and save nothing. Raschka's `gpt_with_kv_gqa.py` and Hugging
# Face's Llama code (`repeat_kv`, after the cache update) do it this way.
#
# The next cell does it with your `KVCache` and your layer's projections: a prefill of 16 tokens
# for 2 texts, then 4 tokens one at a time. It covers only those two kinds of call (a prefill
# into an empty cache needs the ordinary causal mask, a single token needs none), which is all
# that generation makes. The meter of section 8 measures what the cache holds at the end, next to
# `kv_cache_bytes(..., num_kv_heads=...)` for one layer of 20 tokens.

# %%
def grouped_cached_attention(att, x, cache, num_heads, num_kv_heads):
    """A prefill into an empty cache, or one new token, through a GroupedQueryAttention `att` (only its
    projections are used): the cache holds the num_kv_heads shared heads; each query head's copy is
    made after the cache."""
    b, t, _ = x.shape
    if len(cache) > 0 and t > 1:
        raise ValueError("this sketch takes a prefill into an empty cache or one token at a time")
    d_out = att.W_query.out_features
    head_dim = d_out // num_heads
    q = att.W_query(x).view(b, t, num_heads, head_dim).transpose(1, 2)                # (B, H, t, hd)
    k = att.W_key(x).view(b, t, num_kv_heads, head_dim).transpose(1, 2)               # (B, G, t, hd)
    v = att.W_value(x).view(b, t, num_kv_heads, head_dim).transpose(1, 2)             # (B, G, t, hd)
    keys, values = cache.append(k, v)                                                 # (B, G, P + t, hd) each
    group = num_heads // num_kv_heads
    keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)  # (B, H, P + t, hd)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(head_dim)                         # (B, H, t, P + t)
    if t > 1:                                                                         # the prefill: P = 0
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
    context = (torch.softmax(scores, dim=-1) @ values).transpose(1, 2).reshape(b, t, d_out)
    return att.out_proj(context)


x_demo = torch.randn(2, 20, 64)                                            # 2 texts of 20 tokens
one_layer = GPTConfig(vocab_size=1, context_length=20, emb_dim=64, num_heads=8, num_layers=1)
for kv_heads in (8, 2, 1):
    layer = GroupedQueryAttention(64, 64, 20, 0.0, num_heads=8, num_kv_heads=kv_heads).eval()
    with torch.no_grad():
        full = layer(x_demo)                                               # (2, 20, 64), all at once
        with PeakMemory(x_demo) as meter:
            cache = KVCache()
            pieces = [grouped_cached_attention(layer, part, cache, 8, kv_heads)
                      for part in x_demo.split([16, 1, 1, 1, 1], dim=1)]
            difference = (torch.cat(pieces, dim=1) - full).abs().max().item()
            del pieces
    print(f"num_kv_heads={kv_heads}: cache {meter.live:,} bytes measured, "
          f"{kv_cache_bytes(one_layer, 20, batch_size=2, num_kv_heads=kv_heads):,} by kv_cache_bytes, "
          f"{kv_heads}/8 of multi-head attention's; largest difference from the layer's own pass {difference:.1e}")

# %% [markdown]
# The cache shrinks with the number of key/value heads, and the measured bytes are the formula's.
# Three more things to know about grouped-query attention:
#
# - **`repeat_interleave`, not `repeat`.** `repeat_interleave(2, dim=1)` turns the key/value heads
#   `[a, b]` into `[a, a, b, b]`, so that query heads 0 and 1 share `a` and heads 2 and 3 share
#   `b`; `repeat(1, 2, 1, 1)` gives `[a, b, a, b]`, which gives query head `h` key/value head
#   `h % num_kv_heads`. A new model could be trained either way, but a trained checkpoint fixes
#   one: Llama's code shares among consecutive heads, and Ainslie et al. (2023), who turn a
#   multi-head checkpoint into a grouped-query one, mean-pool the keys and values of each group of
#   consecutive heads. Load such weights with the other convention and every query head meets the
#   wrong keys.
# - **The copies.** `repeat_interleave` makes real copies of the keys and values at every step,
#   as large as a multi-head cache, though only for the step. Fused attention kernels read each
#   shared head for its whole group instead, and so does `F.scaled_dot_product_attention(...,
#   enable_gqa=True)` (PyTorch 2.5 and later), which takes the keys and values with
#   `num_kv_heads` heads as they are.
# - **The price.** Multi-query attention (one key/value head) costs quality; grouped-query
#   attention costs much less. Ainslie et al. found grouped-query attention with 8 key/value heads
#   close to multi-head attention in quality and close to multi-query attention in speed.

# %% [markdown]
# ## 10. Training with blocks (optional)
#
# Section 8 measured the online softmax without gradients. Under autograd, your
# `online_softmax_attention` would keep every block's scores and weights for the backward pass:
# `T_q × T_k` numbers again, more than full attention keeps. FlashAttention keeps the saving in
# training with a backward pass of its own. The forward pass saves only `q`, `k`, `v`, the
# output `O` and, per query, the log-sum-exp of its scores, `L = m + log l` (one number per
# query). The backward pass goes through the key blocks again and recomputes each block's
# weights from it, `P = exp(S − L)` with `S = q kᵀ / √d`, then applies the chain rule of the
# softmax:
#
# | quantity | per block of keys |
# |---|---|
# | `dV` | `Pᵀ dO` |
# | `dP` | `dO Vᵀ` |
# | `dS` | `P ∘ (dP − D)`, with `D = rowsum(dO ∘ O)`, one number per query, computed once |
# | `dQ` | `+= dS K / √d` (summed over the blocks) |
# | `dK` | `dSᵀ Q / √d` |
#
# where `dO` is the gradient that arrives from above. `D_i = Σ_j P_ij dP_ij` is what the
# softmax's normalisation takes away: it is subtracted from every `dP_ij` of row `i`, and the
# difference is scaled by `P_ij`. `rowsum(dO ∘ O)` gives it without any `T_q × T_k` tensor.

# %% [markdown]
# ### Exercise (optional) — `flash_attention(q, k, v, block_size, causal=False)` (about 40 minutes)
#
# **Goal:** the output of `online_softmax_attention`, differentiable with respect to `q`, `k`
# and `v`, through a `torch.autograd.Function` whose forward saves only `q`, `k`, `v`, the output
# and the per-query log-sum-exp, and whose backward recomputes each block as in the table. Its
# gradients equal those of `full_attention` (up to rounding), and nothing of size `T_q × T_k`
# is saved for the backward pass.
#
# <details><summary>Hint</summary>
#
# `class FlashAttentionFunction(torch.autograd.Function)` with two static methods:
# `forward(ctx, q, k, v, block_size, causal)` returns the output and calls
# `ctx.save_for_backward(...)`; `backward(ctx, grad_out)` returns one gradient per input of `forward`, `None` for
# `block_size` and `causal`. Then `flash_attention` calls `FlashAttentionFunction.apply`.
# <details><summary>More</summary>
#
# In the forward loop of `online_softmax_attention`, after the last block, `L = m + torch.log(l)`. In the
# backward loop, mask the block's scores exactly as the forward did, so that `exp(−∞ − L) = 0`;
# `dk[..., start:start + b, :]` and `dv[..., start:start + b, :]` are written block by block,
# `dq` is summed.
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u09_flash_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class FlashAttentionFunction(torch.autograd.Function):
    """Blocked attention whose backward recomputes each block from the saved log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, block_size, causal):
        ### BEGIN SOLUTION
        scale = 1.0 / math.sqrt(q.shape[-1])
        m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)  # (..., T_q, 1)
        l = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)               # (..., T_q, 1)
        acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)   # (..., T_q, d_v)
        rows = torch.arange(q.shape[-2], device=q.device)[:, None]                        # (T_q, 1)
        for start in range(0, k.shape[-2], block_size):
            scores = (q @ k[..., start:start + block_size, :].transpose(-2, -1)) * scale  # (..., T_q, b)
            if causal:
                cols = torch.arange(start, start + scores.shape[-1], device=q.device)[None, :]
                scores = scores.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            p = torch.exp(scores - m_new)
            correction = torch.exp(m - m_new)
            l = l * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ v[..., start:start + block_size, :]
            m = m_new
        out = acc / l                                                                     # (..., T_q, d_v)
        ctx.save_for_backward(q, k, v, out, m + torch.log(l))                             # L: (..., T_q, 1)
        ctx.block_size, ctx.causal = block_size, causal
        return out
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_out):
        ### BEGIN SOLUTION
        q, k, v, out, lse = ctx.saved_tensors
        scale = 1.0 / math.sqrt(q.shape[-1])
        delta = (grad_out * out).sum(dim=-1, keepdim=True)                                # D: (..., T_q, 1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        rows = torch.arange(q.shape[-2], device=q.device)[:, None]
        for start in range(0, k.shape[-2], ctx.block_size):
            block = slice(start, start + ctx.block_size)
            k_block, v_block = k[..., block, :], v[..., block, :]
            scores = (q @ k_block.transpose(-2, -1)) * scale                              # (..., T_q, b)
            if ctx.causal:
                cols = torch.arange(start, start + scores.shape[-1], device=q.device)[None, :]
                scores = scores.masked_fill(cols > rows, float("-inf"))
            p = torch.exp(scores - lse)                                                   # the block's weights
            dv[..., block, :] = p.transpose(-2, -1) @ grad_out
            ds = p * (grad_out @ v_block.transpose(-2, -1) - delta)                       # (..., T_q, b)
            dq += (ds @ k_block) * scale
            dk[..., block, :] = (ds.transpose(-2, -1) @ q) * scale
        return dq, dk, dv, None, None
        ### END SOLUTION


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int,
                    causal: bool = False) -> torch.Tensor:
    """online_softmax_attention(q, k, v, block_size, causal), differentiable: only q, k, v, the
    output and the per-query log-sum-exp are saved for the backward pass."""
    ### BEGIN SOLUTION
    return FlashAttentionFunction.apply(q, k, v, block_size, causal)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u09_flash_attention_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("flash_attention")
### BEGIN HIDDEN TESTS
import math

import torch

from grader.spec import Case, Exact, Mistake, Spec, Tuple, run


def flash_case(g, shape, t_k=None, d_v=None, block_size=8, causal=False, label="", negative=False):
    """Random float64 inputs; with `negative`, every score of queries 0, 2, 4, ... lies far below -745, where
    exp underflows to 0 in float64."""
    *lead, t_q, d = shape
    t_k, d_v = t_k or t_q, d_v or d
    q = torch.randn(*shape, generator=g, dtype=torch.float64)
    k = torch.randn(*lead, t_k, d, generator=g, dtype=torch.float64)
    if negative:
        q[..., ::2, :] -= 300
        k += 4
    return Case(label or f"q {tuple(shape)}, {t_k} keys, d_v={d_v}, blocks of {block_size}, causal={causal}",
                q=q, k=k, v=torch.randn(*lead, t_k, d_v, generator=g, dtype=torch.float64),
                grad=torch.randn(*lead, t_q, d_v, generator=g, dtype=torch.float64),
                block_size=block_size, causal=causal)


def flash_examples():
    g = torch.Generator().manual_seed(21)
    return [flash_case(g, (2, 40, 4), block_size=16, causal=True, label="q, k, v of shape (2, 40, 4), blocks of 16, causal"),
            flash_case(g, (2, 24, 4), t_k=30, block_size=8,
                       label="q of shape (2, 24, 4), k and v of shape (2, 30, 4), blocks of 8, not causal"),
            flash_case(g, (1, 24, 4), block_size=8, negative=True,
                       label="q, k, v of shape (1, 24, 4), blocks of 8, not causal, every score of queries 0, 2, 4, ... "
                             "below -1000")]


def flash_cases(g):
    return [flash_case(g, (1, 2, 48, 4), block_size=8),
            flash_case(g, (3, 33, 2), block_size=10, causal=True),
            flash_case(g, (2, 20, 3), t_k=50, d_v=2, block_size=7),
            flash_case(g, (1, 64, 4), block_size=64, causal=True),
            flash_case(g, (2, 20, 4), t_k=28, block_size=6, negative=True)]


def call_flash_attention(q, k, v, grad, block_size, causal):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    saved = []
    with torch.enable_grad():   # the checks may run with gradients off
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            out = flash_attention(q, k, v, block_size, causal)
        on_ctx, nodes, seen = 0, [out.grad_fn], set()
        while nodes:   # tensors kept as attributes of a Function's ctx escape the hooks: look for them
            node = nodes.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            for value in getattr(node, "__dict__", {}).values():
                for item in value if isinstance(value, (list, tuple)) else (value,):
                    if isinstance(item, torch.Tensor):
                        on_ctx += item.numel()
            nodes.extend(next_node for next_node, _ in node.next_functions)
        out.backward(grad)
    scores = out.shape[:-1].numel() * k.shape[-2]
    kept = 1.0 if sum(saved) + on_ctx < scores else -1.0 if on_ctx >= scores / 2 else 0.0
    return out.detach(), q.grad, k.grad, v.grad, torch.tensor(kept, dtype=torch.float64)


def reference_backward(q, k, v, grad, causal, lse_from_max=False, with_delta=True, scaled=True, backward_mask=None,
                       lse_without_max=False):
    """Full attention's output and gradients in float64, with switches that reproduce mistakes
    (backward_mask: whether the backward pass masks the scores, when it differs from `causal`)."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1])
    blocked = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    with torch.enable_grad():
        scores = q @ k.transpose(-2, -1) * scale
        if causal:
            scores = scores.masked_fill(blocked, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = weights @ v
        out.backward(grad)
    if with_delta and scaled and not lse_from_max and not lse_without_max and backward_mask in (None, causal):
        return out.detach(), q.grad, k.grad, v.grad
    with torch.no_grad():   # the same backward as the reference's, with one part changed
        lse = scores.amax(dim=-1, keepdim=True) if lse_from_max else torch.logsumexp(scores, dim=-1, keepdim=True)
        if lse_without_max:   # log(l) alone, l summed after the maximum was subtracted
            lse = lse - scores.amax(dim=-1, keepdim=True)
        again = q @ k.transpose(-2, -1) * scale
        if causal if backward_mask is None else backward_mask:
            again = again.masked_fill(blocked, float("-inf"))
        p = torch.exp(again - lse)
        dv = p.transpose(-2, -1) @ grad
        delta = (grad * out).sum(dim=-1, keepdim=True) if with_delta else 0.0
        ds = p * (grad @ v.transpose(-2, -1) - delta)
        factor = scale if scaled else 1.0
        return out.detach(), ds @ k * factor, ds.transpose(-2, -1) @ q * factor, dv


def flash_oracle(q, k, v, grad, causal):
    return (*reference_backward(q, k, v, grad, causal), torch.tensor(1.0, dtype=torch.float64))


def flash_mistakes(q, k, v, grad, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    dead = scores.amax(dim=-1) < -746   # rows where exp(s - 0) is 0 for every key, in float64
    if dead.any():
        holed = reference_backward(q, k, v, grad, causal)[0].clone()
        holed[dead] = float("nan")
        yield Mistake("queries whose scores are all very negative get NaN: the running maximum must start at -inf, "
                      "not at 0 or another number, or exp(s - m) underflows to 0 for every key of such a row and "
                      "the sum l stays 0", (holed, None, None, None, None))
    _, dq, dk, _ = reference_backward(q, k, v, grad, causal, with_delta=False)
    yield Mistake("the gradients of q and k leave out D = rowsum(dO * O): the softmax's normalisation takes it from "
                  "every score's gradient, dS = P * (dP - D)", (None, dq, dk, None, None))
    _, dq, dk, _ = reference_backward(q, k, v, grad, causal, scaled=False)
    yield Mistake("the gradients of q and k miss the 1 / sqrt(d) of the scores: dQ = dS K / sqrt(d), "
                  "dK = dS^T Q / sqrt(d)", (None, dq, dk, None, None))
    _, dq, dk, dv = reference_backward(q, k, v, grad, causal, lse_from_max=True)
    yield Mistake("the weights recomputed in the backward pass are not normalised: save L = m + log(l), the "
                  "log-sum-exp, not only the maximum m, and recompute P = exp(S - L)", (None, dq, dk, dv, None))
    _, dq, dk, dv = reference_backward(q, k, v, grad, causal, lse_without_max=True)
    yield Mistake("the log-sum-exp was saved without its maximum: l was summed after m was subtracted, so the "
                  "log-sum-exp is L = m + log(l), not log(l) alone; save L and recompute P = exp(S - L)",
                  (None, dq, dk, dv, None))
    if causal:
        yield Mistake("the backward pass leaves the causal mask out: recompute each block's scores masked exactly as the "
                      "forward pass masked them, so that the weights of future keys are exp(-inf - L) = 0",
                      (None, *reference_backward(q, k, v, grad, causal, backward_mask=False)[1:], None))
    else:
        yield Mistake("the backward pass masks the scores although causal=False: mask them in backward only when the "
                      "forward pass did (keep causal on ctx)",
                      (None, *reference_backward(q, k, v, grad, causal, backward_mask=True)[1:], None))
    yield Mistake("as much as the T_q x T_k scores is kept for the backward pass: write a torch.autograd.Function "
                  "whose forward saves only q, k, v, the output and the log-sum-exp, and recompute each block in "
                  "backward", (None, None, None, None, torch.tensor(0.0, dtype=torch.float64)))
    yield Mistake("the forward pass keeps a T_q x T_k tensor (or a good part of it) as an attribute of ctx (ctx.name = "
                  "...), which autograd keeps alive until the backward pass as surely as save_for_backward: keep only "
                  "small things on ctx (block_size, causal) and recompute the blocks in backward",
                  (None, None, None, None, torch.tensor(-1.0, dtype=torch.float64)))


def flash_dtype_case(g, dtype, shape, block_size, causal):
    return Case(f"q, k, v of shape {shape} in {dtype}, blocks of {block_size}, causal={causal}: the dtype of the output",
                q=torch.randn(*shape, generator=g), k=torch.randn(*shape, generator=g),
                v=torch.randn(*shape, generator=g), block_size=block_size, causal=causal, dtype=dtype)


def call_flash_dtype(q, k, v, block_size, causal, dtype):
    q, k, v = (t.to(getattr(torch, dtype)).requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        out = flash_attention(q, k, v, block_size, causal)
    return str(out.dtype).removeprefix("torch.")


def flash_dtype_mistakes(dtype):
    if dtype != "float32":
        yield Mistake("for inputs in bfloat16 or float64 the output must keep their dtype, and yours is float32: compute "
                      "in the dtype of q (create m, l and acc with dtype=q.dtype, and do not call .float())", "float32")


run(Spec("flash_attention", call_flash_dtype, lambda dtype: dtype,
         examples=lambda: [flash_dtype_case(torch.Generator().manual_seed(22), "bfloat16", (2, 8, 4), 4, True)],
         cases=lambda g: [flash_dtype_case(g, "float64", (1, 6, 4), 4, False),
                          flash_dtype_case(g, "bfloat16", (3, 5, 4), 2, True)],
         mistakes=flash_dtype_mistakes, judge=Exact()),
    Spec("flash_attention", call_flash_attention, flash_oracle, examples=flash_examples, cases=flash_cases,
         mistakes=flash_mistakes,
         judge=Tuple(parts=("the output", "the gradient of q", "the gradient of k", "the gradient of v",
                            "whether less than the T_q x T_k scores was kept for the backward pass"))))
### END HIDDEN TESTS

# %% [markdown]
# Check it as PyTorch checks its own gradients (`torch.autograd.gradcheck`, in float64 against
# finite differences), then measure what each way keeps for the backward pass: the bytes held
# at the end of a forward pass with gradients on, as `T` doubles.

# %%
q64, k64, v64 = (torch.randn((1, 1, 12, 4) if GRADING else (1, 2, 24, 8), dtype=torch.float64, requires_grad=True)
                  for _ in range(3))
print("gradcheck against finite differences:",
      torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, 7, True), (q64, k64, v64)))

kept = {"full attention": [], "your online softmax": [], "flash_attention": []}
for t in ([128, 256] if GRADING else [256, 512, 1024]):
    q, k, v = (torch.randn(1, 4, t, 64, device=device, requires_grad=True) for _ in range(3))
    for name, fn, blocks in (("full attention", full_attention, ()),
                             ("your online softmax", online_softmax_attention, (128,)),
                             ("flash_attention", flash_attention, (128,))):
        with PeakMemory(q, k, v) as meter:
            out = fn(q, k, v, *blocks, causal=True)
        kept[name].append(meter.live / 2**20)                     # MiB still held: what backward will use
        out.sum().backward()
        del out
lengths_kept = [128, 256] if GRADING else [256, 512, 1024]
fig, ax = plt.subplots(figsize=(6, 3.6))
for (name, values), style in zip(kept.items(), ("o-", "s--", "^-.")):
    ax.plot(lengths_kept, values, style, label=name)
ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="MiB kept for the backward pass",
       title="Memory kept for the backward pass (one sequence, 4 heads)")
ax.set_xticks(lengths_kept, [str(t) for t in lengths_kept])
ax.tick_params(axis="x", which="minor", labelbottom=False)
ax.legend()
show()
for name, values in kept.items():
    print(f"{name:>28}: " + ", ".join(f"T={t}: {mib:.1f} MiB" for t, mib in zip(lengths_kept, values)))

# %% [markdown]
# In our run at `T = 1024`: full attention kept 18 MiB for the backward pass, its 16 MiB of
# `T × T` weights, a 1 MiB mask and the 1 MiB output; your loop in `online_softmax_attention` kept 43.5 MiB, every
# block's scores and weights and more; `flash_attention` kept 1 MiB, the output and 16 KiB of
# log-sum-exp, one number per query, and doubling `T` only doubles it. (The meter does not count
# `q`, `k` and `v`: they were made before it started, and every way keeps them.) That is how
# FlashAttention trains long sequences on a GPU, with the loop inside a kernel.

# %% [markdown]
# ## Recap
#
# - Because attention is causal, adding a token changes no earlier key or value: plain generation
#   recomputes them at every step, and its work per token grows with the length of the text.
# - A **KV cache** keeps each layer's keys and values, `(B, H, T_cached, head_dim)`, and each step
#   feeds only the new token, at position `len(cache)`; queries are not cached.
# - Cached attention uses the **last `t` rows** of the causal mask: a prefill needs the ordinary
#   causal mask, a single-token step blocks nothing.
# - With **learned absolute positions** the cache is valid only while the text fits the context:
#   past it every position shifts at every step, and the only exact cache is rebuilt at every step,
#   which costs what plain generation costs. Models trained with sliding windows keep their caches
#   exactly.
# - With **rotary positions** the new tokens are turned by their positions `P ... P + t − 1`
#   (`P = len(cache)`, read before the append): each key can be turned once, when it enters the
#   cache, and the cache then computes what the layer computes at any length. The model still
#   predicts well only at distances it was trained on: RoPE does not extrapolate past them.
# - A cache that **rolls** (forgets its oldest entries) should keep the first few tokens: for our
#   model a rolling cache of 16 entries doubled the loss of a fresh pass over the same characters,
#   and keeping the first four brought it most of the way back. Large models put much of their
#   attention on those tokens (attention sinks); ours does not, but its layer 0 averages over the
#   whole text, and early tokens of any content help it, the earlier the better. StreamingLLM
#   numbers positions within the rolling cache, so it caches keys unturned and turns them at
#   every step.
# - Measured on a CPU: about 6× faster for 256 new tokens after a 64-token prompt, less than the
#   154× fewer positions, because a step's fixed overhead dominates at this size.
# - The **online softmax** keeps a running maximum `m`, a running sum `l` and a running weighted
#   sum of the values, rescales both sums by `exp(m_old − m_new)` whenever the maximum grows, and
#   divides at the end: attention's output (up to rounding), with memory that grows as `T`, not `T²`,
#   in a pass without gradients. FlashAttention runs this loop inside one GPU kernel, and trains
#   with it by recomputing each block in the backward pass from the saved `m` and `l`.
# - The cache costs `2 × layers × kv_heads × head_dim × bytes` per token and per text: 2 KiB for
#   our model, 0.5 MiB for a 7B model in float16, where a few long texts outweigh the weights;
#   fewer key/value heads shrink it by the same factor. **Grouped-query attention** lets
#   consecutive query heads share a key/value head (`repeat_interleave` over the head axis):
#   with as many key/value heads as query heads it is multi-head attention, with one it is
#   multi-query attention. Its cache holds the `num_kv_heads` shared heads; the copies for the
#   query heads are made after the cache, at every step.
# - To train with blocks, save the log-sum-exp `L = m + log l` of each query and recompute each
#   block's weights in the backward pass, `P = exp(S − L)`, with `dS = P ∘ (dP − rowsum(dO ∘ O))`:
#   the memory kept for the backward pass then grows as `T`, not `T²`.
#
# **Next — unit 10 (bonus):** load OpenAI's GPT-2 small into your own code, generate with this
# unit's cache, and look in its heads for the attention sink our small model lacked.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
