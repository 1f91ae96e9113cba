# %% [markdown]
# # Unit 05 — Causal masking
#
# A GPT writes text one token at a time: it reads the tokens so far and predicts the next one.
# Training it that way one prediction at a time would be slow, so every training window holds
# many predictions at once, one per position. That only works if position *t* cannot peek at
# the tokens after it — the very tokens it is asked to predict. The **causal mask** is the
# small piece of code that enforces this, and it is easy to get subtly wrong.
#
# **By the end you will be able to**
# - explain why an unmasked model "cheats" on next-token prediction, and show it;
# - build a causal mask and apply it to attention scores with `-inf` before the softmax;
# - say why `-1e4` is not negative enough, and when `-inf` itself causes trouble;
# - convert between the three mask conventions you will meet in other people's code;
# - write a `CausalAttention` module with a mask buffer and dropout on the attention weights;
# - test any module for leaks from the future with your own detector;
# - build padding masks, and avoid the NaN of a row where every key is blocked;
# - show that attention without positions cannot tell the order of its tokens, that the causal
#   mask can, and say what learned, sinusoidal and rotary position encodings add;
# - write rotary position encoding (RoPE) for tokens at any positions.
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

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

from grader.figures import show

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)
torch.set_num_threads(1)  # every tensor here is tiny: one CPU thread is faster than several
device = "cuda" if torch.cuda.is_available() else "cpu"
QUICK = bool(os.environ.get("NBGRADER_EXECUTION"))  # a shorter training run under grading

# %% [markdown]
# ## 1. One window, four predictions — and a leak
#
# Take a text that the tokenizer turned into the tokens `a b c d e`, and a window of 4 tokens.
# The training pair is the window and the same window shifted one step to the right:
#
# | position | 0 | 1 | 2 | 3 |
# |---|---|---|---|---|
# | input `x` | a | b | c | d |
# | target `y` | b | c | d | e |
#
# This one pair holds **four** predictions, one per position:

# %%
tokens = ["a", "b", "c", "d", "e"]
x_window, y_window = tokens[:4], tokens[1:]
for t in range(4):
    print(f"position {t}: reads {' '.join(x_window[:t + 1]):<8} -> must predict {y_window[t]}")


# %% [markdown]
# Self-attention as you built it so far lets every position look at *every* token of the
# window. So when position 0 has to predict `b`, the `b` is right there in the input, at
# position 1: the model can simply copy it. The target has leaked into the input.
#
# Let us watch a model find this shortcut. The data below are sequences of **random** tokens
# from a vocabulary of 8, so no model can honestly predict the next token better than chance:
# the best possible loss is $\ln 8 \approx 2.08$. The model is as small as it gets: token and
# position embeddings, one attention layer *without a mask*, and a linear output layer.

# %%
class PeekingAttention(nn.Module):
    """Scaled dot-product self-attention with no mask (unit 03): every position sees every token."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):                                      # x: (B, T, d_in)
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (B, T, d_out)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5        # (B, T, T)
        return torch.softmax(scores, dim=-1) @ values                           # (B, T, d_out)


class TinyAttentionLM(nn.Module):
    """Embeddings, one attention layer, an output layer: token ids (B, T) -> logits (B, T, V)."""

    def __init__(self, attention, vocab_size, context_length, emb_dim):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, emb_dim)
        self.pos_emb = nn.Embedding(context_length, emb_dim)
        self.attention = attention                              # any module (B, T, emb) -> (B, T, emb)
        self.out_head = nn.Linear(emb_dim, vocab_size)

    def forward(self, idx):                                    # idx: (B, T)
        positions = torch.arange(idx.shape[1], device=idx.device)
        h = self.tok_emb(idx) + self.pos_emb(positions)        # (B, T, emb)
        return self.out_head(self.attention(h))                # (B, T, V)


VOCAB, WINDOW, EMB = 8, 8, 32


def train_on_random_tokens(model, steps, seed=0):
    """Train next-token prediction on random sequences; return the loss curve and the final
    loss at each position of the window (measured on fresh sequences)."""
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    curve = []
    for _ in range(steps):
        seq = torch.randint(0, VOCAB, (64, WINDOW + 1), generator=gen).to(device)  # (B, T+1)
        x, y = seq[:, :-1], seq[:, 1:]                                            # (B, T) each: shifted by one
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    with torch.no_grad():
        seq = torch.randint(0, VOCAB, (1024, WINDOW + 1), generator=gen).to(device)
        logits = model(seq[:, :-1])                                               # (B, T, V)
        per_position = F.cross_entropy(logits.transpose(1, 2), seq[:, 1:], reduction="none").mean(0)  # (T,)
    return curve, per_position.cpu()


STEPS = 40 if QUICK else 150
torch.manual_seed(0)
peeking_lm = TinyAttentionLM(PeekingAttention(EMB, EMB), VOCAB, WINDOW, EMB).to(device)
peek_curve, peek_per_position = train_on_random_tokens(peeking_lm, STEPS)
print("loss per position without a mask:", peek_per_position)
print(f"honest best: ln {VOCAB} = {math.log(VOCAB):.4f}")

# %%
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(peek_curve, label="no mask")
ax.axhline(math.log(VOCAB), color="gray", linestyle="--", label="ln 8: the best honest loss")
ax.set(xlabel="training step", ylabel="cross-entropy", title="Predicting random tokens")
ax.legend()
show()


# %% [markdown]
# The loss falls far below $\ln 8$ on data that is pure noise, which is impossible without
# cheating. The loss per position tells the whole story: near 0 at positions 0–6, whose target
# sits in the window, and about $\ln 8$ (or worse) at position 7, the only one whose target
# (`e` in the picture above) lies outside the window. The model learned to attend to the next
# position and copy. At generation time there is no next token to copy, and the model is useless.
#
# The cure is to block, in the attention scores, every key that comes *after* the query.

# %% [markdown]
# ## 2. The causal mask
#
# Attention scores form a `(T, T)` matrix: row *i* is the query at position *i*, column *j* the
# key at position *j*. Position *i* may look at positions $j \le i$ (itself and the past); the
# future is $j > i$, the part of the matrix **strictly above the diagonal**.
#
# We describe the blocked entries with a boolean matrix: `True` where the attention is blocked.
# For the window `a b c d`:
#
# | query | a | b | c | d |
# |---|---|---|---|---|
# | **a** | · | ✗ | ✗ | ✗ |
# | **b** | · | · | ✗ | ✗ |
# | **c** | · | · | · | ✗ |
# | **d** | · | · | · | · |
#
# The diagonal is *not* blocked: a token may look at itself (it is already known; only the
# next one is not).

# %% [markdown]
# ### Exercise — `causal_mask(num_tokens, device=None)` (about 5 minutes)
#
# **Goal:** return a boolean tensor of shape `(num_tokens, num_tokens)` that is `True` strictly
# above the diagonal (the blocked future) and `False` elsewhere, created on `device`.
#
# <details><summary>Hint</summary>
#
# `torch.triu` keeps the upper triangle of a matrix; look at its `diagonal` argument to decide
# whether the diagonal itself is kept. Alternatively, compare a column of positions with a row of
# positions (`torch.arange`) — which comparison says "the key comes after the query"?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_causal_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def causal_mask(num_tokens: int, device=None) -> torch.Tensor:
    """Boolean (num_tokens, num_tokens) mask, True strictly above the diagonal (key after query),
    created on `device`."""
    ### BEGIN SOLUTION
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device)  # (T, T)
    return torch.triu(ones, diagonal=1)  # (T, T), True where key index > query index
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_causal_mask_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("causal_mask")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Exact, Mistake, Spec, run


def causal_mask_examples():
    return [Case("T=4 (the window a, b, c, d)", num_tokens=4),
            Case("T=3 on device='meta' (a device without data: the result's device is compared)", num_tokens=3,
                 device="meta")]


def causal_mask_cases(g):
    return ([Case(f"T={t}", num_tokens=t) for t in (1, 2, 7)]
            + [Case("T=5 with device='cpu' given as a keyword", num_tokens=5, device="cpu"),
               Case("T=6 on device='meta' (the result's device is compared)", num_tokens=6, device="meta")])


def call_causal_mask(num_tokens, device=None):
    if device is None:
        return causal_mask(num_tokens)
    mask = causal_mask(num_tokens, device=device)
    return f"a tensor on device {mask.device.type!r}" if device == "meta" else mask


def causal_mask_oracle(num_tokens, device=None):
    if device == "meta":
        return "a tensor on device 'meta'"
    positions = torch.arange(num_tokens)
    return positions[None, :] > positions[:, None]  # key index > query index


def causal_mask_mistakes(num_tokens, device=None):
    if device == "meta":
        yield Mistake("your mask ignores `device`: make it on the device asked for (torch.ones(..., device=device), "
                      "or .to(device))", "a tensor on device 'cpu'")
        return
    blocked = causal_mask_oracle(num_tokens)
    yield Mistake("your mask is inverted: True must mark the blocked future (above the diagonal), "
                  "not the positions a token may see", ~blocked)
    yield Mistake("you also blocked the diagonal: a token may attend to itself, so the blocked part starts "
                  "one step above the diagonal", blocked | torch.eye(num_tokens, dtype=torch.bool))
    yield Mistake("you blocked the past (below the diagonal): the future is above it, where the key comes "
                  "after the query", blocked.T)
    yield Mistake("your mask holds the numbers 0. and 1.: return a boolean tensor (dtype torch.bool)", blocked.float())
    yield Mistake("your mask holds the integers 0 and 1: return a boolean tensor (dtype torch.bool)", blocked.long())


run(Spec("causal_mask", call_causal_mask, causal_mask_oracle, examples=causal_mask_examples,
         cases=causal_mask_cases, mistakes=causal_mask_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %%
print(causal_mask(4))


# %% [markdown]
# ## 3. Masking the scores
#
# The mask is applied to the **scores**, before the softmax: every blocked score is replaced by
# $-\infty$. The softmax turns $e^{-\infty}$ into exactly 0, so the blocked keys get weight 0,
# and the remaining weights of each row still sum to 1.
#
# `scores.masked_fill(mask, value)` returns a copy of `scores` with `value` wherever `mask` is
# `True`. A `(T, T)` mask broadcasts over any leading dimensions, such as a batch: `(B, T, T)`.
#
# Here is a three-token example, "I love coding", with made-up scores (larger means more
# related):
#
# | query  | I  | love | coding |
# |--------|----|------|--------|
# | **I**      | 10 | 8  | 5  |
# | **love**   | 7  | 12 | 9  |
# | **coding** | 6  | 8  | 15 |
#
# Without a mask, "I" (the first token) would take information from "love" and "coding", which
# a model generating text has not written yet.

# %% [markdown]
# ### Exercise — `causal_attention_weights(scores)` (about 5 minutes)
#
# **Goal:** given attention scores of shape `(..., T, T)` (any number of leading dimensions,
# already scaled by $\sqrt{d_k}$), block the future with $-\infty$ and apply the softmax over
# each row. Return the weights, same shape. Use your `causal_mask`.
#
# <details><summary>Hint</summary>
#
# Build the mask from the size of the last dimension of `scores`, on the same device. Which row
# of the result must be `[1, 0, 0]`, whatever the scores?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_causal_attention_weights", "locked": false, "schema_version": 3, "solution": true, "task": false}
def causal_attention_weights(scores: torch.Tensor) -> torch.Tensor:
    """Attention weights (..., T, T) from already-scaled scores (..., T, T): the future is
    blocked with -inf, then a softmax over the last dimension."""
    ### BEGIN SOLUTION
    blocked = causal_mask(scores.shape[-1], device=scores.device)  # (T, T)
    masked = scores.masked_fill(blocked, float("-inf"))             # (..., T, T)
    return torch.softmax(masked, dim=-1)                            # (..., T, T)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_causal_attention_weights_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("causal_attention_weights")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Mistake, Spec, run

LOVE_SCORES = torch.tensor([[10.0, 8.0, 5.0], [7.0, 12.0, 9.0], [6.0, 8.0, 15.0]])
# Scores far below -1e4, as a trained model can produce: a fill of -1e3 or -1e4 is not "minus
# infinity" next to them. Each row's largest score is one the query may see, so masking after the
# softmax and renormalising (also correct) does not divide 0 by 0.
HUGE_SCORES = torch.tensor([[-15000.0, -15003.0, -15001.0, -15004.0],
                            [-15002.0, -15000.0, -15001.0, -15003.0],
                            [-15004.0, -15001.0, -15000.0, -15002.0],
                            [-15000.0, -15003.0, -15002.0, -15001.0]])


def weights_examples():
    return [Case("the I / love / coding scores", scores=LOVE_SCORES.clone()),
            Case("scores around -15000, as a trained model can produce", scores=HUGE_SCORES.clone())]


def weights_cases(g):
    return [Case("T=1", scores=torch.randn(1, 1, generator=g)),
            Case("leading dimensions (2, 3), T=5", scores=torch.randn(2, 3, 5, 5, generator=g)),
            Case("T=7, scores of size 3", scores=3 * torch.randn(7, 7, generator=g)),
            Case("a batch of 4, T=6, scores around -1.5e4", scores=3 * torch.randn(4, 6, 6, generator=g) - 1.5e4),
            Case("a batch of 4, T=6, scores around -1.5e5", scores=3 * torch.randn(4, 6, 6, generator=g) - 1.5e5)]


def call_causal_attention_weights(scores):
    return causal_attention_weights(scores)


def weights_oracle(scores):
    t = scores.shape[-1]
    blocked = torch.ones(t, t, dtype=torch.bool).triu(1)
    return torch.softmax(scores.double().masked_fill(blocked, float("-inf")), dim=-1)


def weights_mistakes(scores):
    t = scores.shape[-1]
    blocked = torch.ones(t, t, dtype=torch.bool).triu(1)
    eye = torch.eye(t, dtype=torch.bool)

    def masked_softmax(mask, fill, dim=-1):
        return torch.softmax(scores.masked_fill(mask, fill), dim=dim)

    plain = torch.softmax(scores, dim=-1)
    # First: on scores far below 0, a fill of 0 gives the same weights as these.
    for fill in (-1e3, -1e4, -1e5):
        yield Mistake(f"your blocking value ({fill:g}) is not negative enough: scores of size 1e4 fall below it, so "
                      "the blocked future gets the weight; use -inf (or torch.finfo(dtype).min)",
                      masked_softmax(blocked, fill))
    yield Mistake("you applied the softmax without the causal mask: every token still sees the future", plain)
    yield Mistake("your mask is inverted: it blocks the positions a token may see and lets it see the future",
                  masked_softmax(~blocked, float("-inf")))
    yield Mistake("you blocked the past (below the diagonal) instead of the future (above it)",
                  masked_softmax(blocked.T, float("-inf")))
    yield Mistake("you also blocked the diagonal: a token may attend to itself (and the first row, with nothing "
                  "left, becomes NaN)", masked_softmax(blocked | eye, float("-inf")))
    yield Mistake("you filled the blocked scores with 0: the softmax gives a score of 0 a positive weight; "
                  "fill them with -inf", masked_softmax(blocked, 0.0))
    yield Mistake("you set the future weights to 0 after the softmax without renormalising: each row must sum "
                  "to 1 again (or mask the scores before the softmax)", plain.masked_fill(blocked, 0.0))
    yield Mistake("you scaled the scores again: they arrive already scaled; only mask them and apply the softmax",
                  masked_softmax(blocked, float("-inf")) if t == 1 else
                  torch.softmax((scores / t ** 0.5).masked_fill(blocked, float("-inf")), dim=-1))
    yield Mistake("you applied the softmax over the wrong dimension: each row (the last dimension) must sum to 1",
                  masked_softmax(blocked, float("-inf"), dim=-2))
    naive = scores.masked_fill(blocked, float("-inf")).exp()
    yield Mistake("your softmax takes exp of the scores as they are: e^(-15000) is 0 in float32 (and e^(100) is inf), "
                  "so a row becomes 0/0 = NaN. Subtract each row's largest score before exp, or use torch.softmax",
                  naive / naive.sum(dim=-1, keepdim=True))


run(Spec("causal_attention_weights", call_causal_attention_weights, weights_oracle, examples=weights_examples,
         cases=weights_cases, mistakes=weights_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Here is the I / love / coding table through your function:

# %%
words = ["I", "love", "coding"]
love_scores = torch.tensor([[10.0, 8.0, 5.0],
                            [7.0, 12.0, 9.0],
                            [6.0, 8.0, 15.0]])        # (T, T)
love_weights = causal_attention_weights(love_scores)  # (T, T)

print(f"{'':>8}" + "".join(f"{w:>9}" for w in words))
for word, row in zip(words, love_weights.tolist()):
    print(f"{word:>8}" + "".join(f"{v:9.4f}" for v in row))

# %% [markdown]
# "I" puts all its weight on itself; "love" gives "I" a weight of $1/(1 + e^{5}) \approx 0.0067$
# and the rest to itself; "coding" keeps $0.9990$ for itself (which rounds to 1.00, not 0.99, at
# two decimals). The future columns are exactly 0, and each row sums to 1.

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
for ax, matrix, title in zip(axes, (torch.softmax(love_scores, dim=-1), love_weights),
                             ("softmax without a mask", "with the causal mask")):
    image = ax.imshow(matrix.numpy(), cmap="viridis", vmin=0, vmax=1)
    for i in range(3):
        for j in range(3):
            value = matrix[i, j].item()
            ax.text(j, i, f"{value:.4f}", ha="center", va="center", color="black" if value > 0.5 else "white")
    ax.set_xticks(range(3), words)
    ax.set_yticks(range(3), words if ax is axes[0] else [])
    ax.set(xlabel="key (looked at)", title=title)
axes[0].set_ylabel("query (looking)")
fig.colorbar(image, ax=axes)
show()

# %% [markdown]
# ## 4. How negative is negative enough?
#
# Many implementations fill with a large finite number such as `-1e9` instead of `-inf`. With
# ordinary scores the result is the same: $e^{-10^9}$ is 0 in float32.
#
# A fill value that is merely *large*, like `-1e4`, is another matter. The mask does not say
# "weight 0"; it says "score −10⁴". If every allowed score in a row is even lower, the blocked
# future has the *highest* scores and takes the weight. Scores of that size are not exotic: two
# 64-dimensional vectors with entries around 12 already have a dot product of about 10⁴, and a
# model trained to lower its loss will happily learn them if it pays. Here are such scores for a
# window of 4 tokens; look at the first row:

# %%
huge_scores = torch.tensor([[-15000.0, 5000.0, 4000.0, 6000.0],
                            [-14000.0, -16000.0, 7000.0, 3000.0],
                            [-13000.0, -12000.0, -11000.0, 8000.0],
                            [-12000.0, -15000.0, -14000.0, -13000.0]])  # (T, T)
blocked4 = causal_mask(4)
for fill in (float("-inf"), -1e9, torch.finfo(torch.float32).min, -1e4):
    weights = torch.softmax(huge_scores.masked_fill(blocked4, fill), dim=-1)  # (T, T)
    leaked = weights.masked_fill(~blocked4, 0).sum(-1)                        # (T,) weight on the future
    print(f"fill {fill:>12.4g}: weight on the future per row = {leaked.tolist()}")

# %% [markdown]
# With `-1e4`, position 0 spends all its attention on the three future tokens — the leak is
# back. `-1e9` and `torch.finfo(dtype).min` (the most negative finite number of the dtype) are
# safe; so is `-inf`.
#
# Two more reasons to prefer `-inf` or `torch.finfo(dtype).min` over a hard-coded constant:
# `-1e9` does not even fit in float16 (its most negative number is −65504), and `masked_fill`
# refuses the overflow:

# %%
half_scores = torch.zeros(2, 2, dtype=torch.float16)
try:
    half_scores.masked_fill(causal_mask(2), -1e9)
except RuntimeError as error:
    print("float16 and -1e9:", str(error).splitlines()[0])
print("float16 and finfo.min:", half_scores.masked_fill(causal_mask(2), torch.finfo(torch.float16).min))

# %% [markdown]
# And one reason `-inf` needs care: if a row has **every** key blocked, its softmax is
# $0/0$ = NaN. A causal mask alone never does that (the diagonal stays open), but combined with a
# padding mask it can. Section 9 shows it and its fix.

# %% [markdown]
# ## 5. Three mask conventions
#
# Code you will read uses masks that look alike but mean opposite things. Keep them apart:
#
# | convention | where you meet it | `True` / `1` means | causal mask for T=4 |
# |---|---|---|---|
# | boolean, **True = blocked** | `scores.masked_fill(mask, -inf)` (this course) | blocked | `causal_mask(4)` |
# | numbers, **1 = keep**, tested with `mask == 0` | many tutorials: `scores.masked_fill(mask == 0, -1e9)` with `mask = torch.tril(torch.ones(T, T))` | may attend | `torch.tril(torch.ones(4, 4))` |
# | boolean, **True = attend** | `F.scaled_dot_product_attention(q, k, v, attn_mask=...)` | may attend | `~causal_mask(4)` |
#
# A fourth form is **additive**: a float matrix of 0 (keep) and $-\infty$ (block) that is added
# to the scores, e.g. `torch.full((T, T), float("-inf")).triu(1)`. `F.scaled_dot_product_attention`
# also accepts a float `attn_mask` and adds it. Beware: `nn.MultiheadAttention` takes a boolean
# `attn_mask` where True means *blocked* — the opposite of `F.scaled_dot_product_attention`.
#
# The conversions are one-liners. All four give the same attention output:

# %%
torch.manual_seed(1)
T4, d4 = 4, 8
q, k, v = torch.randn(3, 1, T4, d4).unbind(0)            # each (B, T, d)
scores = q @ k.transpose(-2, -1) / d4 ** 0.5             # (B, T, T)

blocked = causal_mask(T4)                                # True = blocked
keep = torch.tril(torch.ones(T4, T4))                    # 1. = keep   (the `mask == 0` style)
attend = ~blocked                                        # True = attend (F.scaled_dot_product_attention)
additive = torch.zeros(T4, T4).masked_fill(blocked, float("-inf"))  # 0 or -inf, added to the scores

print("keep == 0 is the blocked mask:      ", torch.equal(keep == 0, blocked))
print("~attend is the blocked mask:        ", torch.equal(~attend, blocked))
print("additive == -inf is the blocked mask:", torch.equal(additive == float("-inf"), blocked))

outputs = {
    "masked_fill(blocked, -inf)": torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1) @ v,
    "masked_fill(keep == 0, -1e9)": torch.softmax(scores.masked_fill(keep == 0, -1e9), dim=-1) @ v,
    "scores + additive": torch.softmax(scores + additive, dim=-1) @ v,
    "SDPA, attn_mask=attend": F.scaled_dot_product_attention(q, k, v, attn_mask=attend),
    "SDPA, is_causal=True": F.scaled_dot_product_attention(q, k, v, is_causal=True),
}
reference = outputs["masked_fill(blocked, -inf)"]
for name, out in outputs.items():
    print(f"{name:<30} same output: {torch.allclose(out, reference, atol=1e-6)}")

wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=blocked)  # the True=blocked mask, handed to SDPA
print("SDPA given the True=blocked mask by mistake, same output:", torch.allclose(wrong, reference, atol=1e-6))


# %% [markdown]
# Handing a True-means-blocked mask to `F.scaled_dot_product_attention` inverts it without any
# error: the last row then has nothing to attend to. Whenever you pass a mask to someone else's
# function, check which convention it expects.
#
# `is_causal=True` is more than a shorter way to write the mask. Fused kernels such as
# FlashAttention, which `F.scaled_dot_product_attention` can use on a GPU, go through the keys in
# blocks, and under a causal mask they skip every block that lies wholly above the diagonal:
# with 4,096 tokens in blocks of 128, that is 496 of the 1,024 blocks, about half of the work. A
# mask handed over as a tensor does not tell them which blocks they may skip. Masking the way this
# unit does it computes every score, the future included, and only then throws the blocked ones away.

# %% [markdown]
# ## 6. Masking after the softmax
#
# A natural first attempt is to apply the softmax to the unmasked scores and zero out the future
# weights afterwards. The rows then no longer sum to 1 — but dividing each row by its new sum
# fixes that, and the result is *exactly* the masked softmax. Why? The softmax of row *i* is
# $e^{s_{ij}} / Z_i$; zeroing the future and dividing by the sum of what is left cancels $Z_i$ and
# leaves $e^{s_{ij}} / \sum_{j' \le i} e^{s_{ij'}}$, which is the softmax over the allowed keys.
#
# It works, but it computes the softmax over the future only to throw it away — masking the scores
# first is simpler and cheaper.

# %% [markdown]
# ### Exercise — `renormalize_after_mask(weights)` (about 5 minutes)
#
# **Goal:** `weights` are the softmax of *unmasked* scores, shape `(..., T, T)`. Set the weights
# of the future to 0 and divide each row by its new sum. Return a tensor of the same shape.
#
# <details><summary>Hint</summary>
#
# `masked_fill` works on weights too; what value does a blocked *weight* need (it is no longer a
# score)? `sum(dim=-1, keepdim=True)` keeps the shape you need to divide by.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_renormalize_after_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def renormalize_after_mask(weights: torch.Tensor) -> torch.Tensor:
    """Weights (..., T, T) of an unmasked softmax -> the future set to 0 and each row divided by
    its new sum, same shape."""
    ### BEGIN SOLUTION
    blocked = causal_mask(weights.shape[-1], device=weights.device)  # (T, T)
    kept = weights.masked_fill(blocked, 0.0)                          # (..., T, T)
    return kept / kept.sum(dim=-1, keepdim=True)                      # (..., T, T), rows sum to 1
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_renormalize_after_mask_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("renormalize_after_mask")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Mistake, Spec, run

LOVE_SCORES = torch.tensor([[10.0, 8.0, 5.0], [7.0, 12.0, 9.0], [6.0, 8.0, 15.0]])


def renorm_examples():
    return [Case("softmax of the I / love / coding scores", weights=torch.softmax(LOVE_SCORES, dim=-1))]


def renorm_cases(g):
    return [Case("T=1", weights=torch.ones(1, 1)),
            Case("leading dimensions (2, 3), T=5",
                 weights=torch.softmax(torch.randn(2, 3, 5, 5, generator=g), dim=-1)),
            Case("T=6, scores of size 2", weights=torch.softmax(2 * torch.randn(6, 6, generator=g), dim=-1)),
            Case("a batch of 3, T=4", weights=torch.softmax(torch.randn(3, 4, 4, generator=g), dim=-1))]


def call_renormalize_after_mask(weights):
    return renormalize_after_mask(weights)


def renorm_oracle(weights):
    t = weights.shape[-1]
    kept = weights.double().masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def renorm_mistakes(weights):
    t = weights.shape[-1]
    blocked = torch.ones(t, t, dtype=torch.bool).triu(1)
    eye = torch.eye(t, dtype=torch.bool)
    kept = weights.masked_fill(blocked, 0.0)

    def renorm(mask):
        part = weights.masked_fill(mask, 0.0)
        return part / part.sum(dim=-1, keepdim=True)

    yield Mistake("you set the future weights to 0 but did not renormalise: divide each row by its new sum", kept)
    yield Mistake("you returned the weights unchanged: first set the weights of the future to 0", weights)
    yield Mistake("you applied a softmax again: the weights are already probabilities; after zeroing the future, "
                  "divide each row by its sum", torch.softmax(weights.masked_fill(blocked, float("-inf")), dim=-1))
    yield Mistake("you applied a softmax to the zeroed weights: a weight of 0 is not a score of -inf; divide each "
                  "row by its sum instead", torch.softmax(kept, dim=-1))
    yield Mistake("you divided by the column sums (dim=-2): divide each row by its own sum (dim=-1)",
                  kept / kept.sum(dim=-2, keepdim=True))
    yield Mistake("you divided by the sum of all the weights: divide each row by its own sum", kept / kept.sum())
    if weights.dim() == 2:
        yield Mistake("you divided by the row sums without keepdim=True: a vector of T sums divides the columns, not "
                      "the rows; keep the summed dimension, sum(dim=-1, keepdim=True)",
                      kept / kept.sum(dim=-1)[None, :])
    yield Mistake("your mask is inverted: you kept the future and zeroed what a token may see", renorm(~blocked))
    yield Mistake("you zeroed the past (below the diagonal) instead of the future (above it)", renorm(blocked.T))
    yield Mistake("you also zeroed the diagonal: a token may attend to itself (and the first row, with nothing "
                  "left, becomes 0/0 = NaN)", renorm(blocked | eye))


run(Spec("renormalize_after_mask", call_renormalize_after_mask, renorm_oracle, examples=renorm_examples,
         cases=renorm_cases, mistakes=renorm_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# The proof, on random scores with a batch dimension: both routes give the same weights, up to
# float32 rounding.

# %%
torch.manual_seed(2)
random_scores = torch.randn(2, 5, 5)                                       # (B, T, T)
before = causal_attention_weights(random_scores)                            # mask, then softmax
after = renormalize_after_mask(torch.softmax(random_scores, dim=-1))        # softmax, mask, renormalise
print("largest difference:", (before - after).abs().max().item())
print("masked softmax == renormalised:", torch.allclose(before, after, atol=1e-6))

# %% [markdown]
# ## 7. A causal attention module
#
# Now package the whole thing as a layer, as GPT uses it. Three details matter.
#
# **Dropout on the attention weights.** During training, `nn.Dropout(p)` zeroes each attention
# weight with probability *p* and multiplies the survivors by $1/(1-p)$, so a position cannot
# rely on one single other token. It goes on the **weights, after the softmax** (not on the
# scores, not on the output). In `eval()` mode it does nothing:

# %%
torch.manual_seed(3)
dropout = nn.Dropout(0.5)
weights6 = causal_attention_weights(torch.randn(6, 6))  # (T, T)
dropout.train()
print("train(): dropped and rescaled weights\n", dropout(weights6))
dropout.eval()
print("eval(): unchanged:", torch.equal(dropout(weights6), weights6))

# %% [markdown]
# In train mode the rows no longer sum to exactly 1 (only on average); that is expected.
#
# **The mask as a buffer.** The mask is not learned, but it belongs to the module: it should
# move with `module.to(device)`, and it should not appear among the parameters the optimizer
# updates. `self.register_buffer("mask", tensor)` does exactly that. (A plain attribute
# `self.mask = tensor` would stay behind on the CPU when the module moves to a GPU, and an
# `nn.Parameter` would be handed to the optimizer as if it were a weight.)
#
# **Slicing.** The module is built once for the longest window, `context_length`, so the buffer
# is `(context_length, context_length)`. A batch may be shorter, `T ≤ context_length`; then only
# the top-left `(T, T)` corner of the mask applies. A `(6, 6)` mask does not fit `(B, 4, 4)`
# scores:

# %%
full_mask = causal_mask(6)                    # built for context_length = 6
short_scores = torch.randn(2, 4, 4)           # a batch of 2 windows of only 4 tokens
try:
    short_scores.masked_fill(full_mask, float("-inf"))
except RuntimeError as error:
    print("unsliced:", str(error).splitlines()[0])
print("sliced to the batch's length:", short_scores.masked_fill(full_mask[:4, :4], float("-inf")).shape)


# %% [markdown]
# ### Exercise — `CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=False)` (about 20 minutes)
#
# **Goal:** a single-head causal self-attention layer. It has
# - `W_query`, `W_key`, `W_value`: `nn.Linear(d_in, d_out, bias=qkv_bias)`;
# - `dropout`: an `nn.Dropout(dropout)`;
# - a buffer named `mask`, built for `context_length` tokens (any convention you like).
#
# `forward(x)` takes `x` of shape `(B, T, d_in)` with any `T ≤ context_length` and returns the
# context vectors `(B, T, d_out)`: scores scaled by $\sqrt{d_k}$ (the key dimension, `d_out`),
# the future blocked, softmax, dropout on the weights, then the weighted sum of the values.
#
# The grader copies its own weights into your `W_query`, `W_key`, `W_value` by name (not your
# mask: yours is tested), so keep these names, and no other parameters.
#
# <details><summary>Hint</summary>
#
# Start from the `PeekingAttention` of section 1. Build the buffer in `__init__` from
# `causal_mask`; in `forward`, read `T` from `x.shape` and use only the part of the buffer that
# fits. Where exactly does section 7 say the dropout goes?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_causal_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class CausalAttention(nn.Module):
    """Single-head causal self-attention: (B, T, d_in) -> (B, T, d_out), for any T <= context_length.
    Scores are scaled by 1/sqrt(d_out), the width of the keys, before the mask and the softmax.

    Attributes: W_query, W_key, W_value (nn.Linear(d_in, d_out, bias=qkv_bias)), dropout
    (nn.Dropout(dropout), applied to the attention weights after the softmax) and the buffer mask."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))  # (context_length, context_length)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        num_tokens = x.shape[1]
        queries = self.W_query(x)                                                # (B, T, d_out)
        keys = self.W_key(x)                                                     # (B, T, d_out)
        values = self.W_value(x)                                                 # (B, T, d_out)
        scores = queries @ keys.transpose(1, 2) / keys.shape[-1] ** 0.5          # (B, T, T)
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))                    # (B, T, T)
        return weights @ values                                                  # (B, T, d_out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_causal_attention_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("CausalAttention")
### BEGIN HIDDEN TESTS
import torch
import torch.nn.functional as F

from grader.inputs import JOURNEY, QKV, linear_state
from grader.spec import Case, Mistake, Spec, build, dropout_seen, run


def ca_case(g, label, b, t, context_length, d_in, d_out, dropout, qkv_bias=False, train=False, scale=1.0,
            negative_self_scores=False, x=None):
    state = linear_state(g, QKV, d_in, d_out, qkv_bias)
    if negative_self_scores:  # W_key = -W_query: each token's score with itself is -|q|^2 / sqrt(d_out)
        state["W_key.weight"] = -state["W_query.weight"]
    x = scale * torch.randn(b, t, d_in, generator=g) if x is None else x
    return Case(label, x=x, state=state, context_length=context_length, dropout=dropout, qkv_bias=qkv_bias,
                train=train)


def ca_examples():
    g = torch.Generator().manual_seed(5)
    batch = torch.stack((JOURNEY, JOURNEY))  # (2, 6, 3)
    return [ca_case(g, "the journey sentence, batch of 2, d_in=3, d_out=2, context_length=6", 2, 6, 6, 3, 2, 0.0,
                    x=batch),
            ca_case(g, "its first 4 tokens (T=4 < context_length=6), dropout=0.5 in eval() mode", 1, 4, 6, 3, 2, 0.5,
                    x=JOURNEY[None, :4].clone())]


def ca_cases(g):
    return [ca_case(g, "batch 3, T=5 < context_length=8, d_in=4, d_out=6, qkv_bias=True, dropout=0.1 in eval()",
                    3, 5, 8, 4, 6, 0.1, qkv_bias=True),
            ca_case(g, "batch 1, T=1, context_length=4, d_in=5, d_out=3", 1, 1, 4, 5, 3, 0.0),
            ca_case(g, "batch 2, T=7, d_in=8, d_out=4, large inputs (scores of size -1e4 and below)", 2, 7, 7, 8, 4,
                    0.0, scale=200.0, negative_self_scores=True)]


def call_causal_attention(x, state, context_length, dropout, qkv_bias):
    module = build(CausalAttention, state, x.shape[-1], state["W_query.weight"].shape[0], context_length, dropout,
                   qkv_bias=qkv_bias)
    with dropout_seen(), torch.no_grad():  # dropout is judged apart, below
        try:
            return module(x)
        except Exception:
            if x.shape[1] < context_length:
                try:
                    module(torch.zeros(x.shape[0], context_length, x.shape[2]))
                except Exception:
                    pass
                else:
                    raise RuntimeError(f"forward works for T=context_length={context_length} tokens but fails "
                                       f"for T={x.shape[1]}: slice the mask to the number of tokens") from None
            raise


def ca_parts(x, state, *, mask="future", fill=float("-inf"), scale="d_out", after_softmax=False, dim=-1):
    """Causal attention in float64, with the options that known mistakes change: the values, the
    scaled scores, the masked scores, the weights and the output."""
    q, k, v = (x.double() @ state[f"{n}.weight"].double().T + state.get(f"{n}.bias", torch.zeros(1)).double()
               for n in QKV)                                              # (B, T, d_out)
    t = q.shape[1]
    scores = q @ k.transpose(-2, -1) / {"d_out": q.shape[-1], "d_in": x.shape[-1], "none": 1}[scale] ** 0.5
    pos = torch.arange(t)
    blocked = {"future": pos[None] > pos[:, None], "none": torch.zeros(t, t, dtype=torch.bool),
               "inverted": pos[None] <= pos[:, None], "past": pos[None] < pos[:, None],
               "diagonal": pos[None] >= pos[:, None]}[mask]
    masked = scores.masked_fill(blocked, fill)
    weights = torch.softmax(scores, -1).masked_fill(blocked, 0.0) if after_softmax else torch.softmax(masked, dim)
    return {"values": v, "scores": scores, "masked scores": masked, "weights": weights, "output": weights @ v}


def ca_oracle(x, state):
    return F.scaled_dot_product_attention(*(x.double() @ state[f"{n}.weight"].double().T
                                            + state.get(f"{n}.bias", torch.zeros(1)).double() for n in QKV),
                                          is_causal=True)


def ca_mistakes(x, state):
    def output(**options):
        return ca_parts(x, state, **options)["output"]

    yield Mistake("you did not mask the future: every position still attends to later tokens", output(mask="none"))
    yield Mistake("your mask is inverted: it blocks the positions a token may see and lets it see the future",
                  output(mask="inverted"))
    yield Mistake("you blocked the past (below the diagonal) instead of the future (above it)", output(mask="past"))
    yield Mistake("you also blocked the diagonal: a token may attend to itself (and the first row, with nothing left, "
                  "becomes NaN)", output(mask="diagonal"))
    yield Mistake("your blocking value (-1e4 or so) is not negative enough: large scores fall below it and the future "
                  "gets the weight; use -inf (or torch.finfo(dtype).min)", output(fill=-1e4))
    yield Mistake("you filled the blocked scores with 0: the softmax gives a score of 0 a positive weight; fill them "
                  "with -inf", output(fill=0.0))
    yield Mistake("you set the future weights to 0 after the softmax without renormalising: mask the scores before "
                  "the softmax", output(after_softmax=True))
    yield Mistake("you did not scale the scores: divide them by the square root of the key dimension (d_out)",
                  output(scale="none"))
    yield Mistake("you scaled by the square root of d_in: the key dimension is d_out", output(scale="d_in"))
    yield Mistake("you applied the softmax over the queries (dim=1): each row of weights, one query over its keys, must "
                  "sum to 1, so apply it over the last dimension", output(dim=-2))


def ca_dropout_examples():
    g = torch.Generator().manual_seed(5)
    return [ca_case(g, f"the journey sentence's first 4 tokens, dropout=0.5 in {mode} mode: what is dropout applied to?",
                    1, 4, 6, 3, 2, 0.5, train=mode == "train()", x=JOURNEY[None, :4].clone())
            for mode in ("train()", "eval()")]


def ca_dropout_cases(g):
    return [ca_case(g, "train() mode, dropout=0.3, qkv_bias=True, batch 3, T=5 < context_length=8", 3, 5, 8, 3, 4,
                    0.3, qkv_bias=True, train=True),
            ca_case(g, "eval() mode, dropout=0.1, batch 2, T=6", 2, 6, 6, 4, 3, 0.1)]


def call_causal_attention_dropout(x, state, context_length, dropout, qkv_bias, train):
    """Every value dropout received (sorted), with dropout made the identity."""
    module = build(CausalAttention, state, x.shape[-1], state["W_query.weight"].shape[0], context_length, dropout,
                   qkv_bias=qkv_bias, train=train)
    with dropout_seen() as log, torch.no_grad():
        module(x)
    return log.values()


def ca_dropout_oracle(x, state, train):
    return ca_parts(x, state)["weights"].flatten().sort().values if train else torch.zeros(0, dtype=torch.float64)


def ca_dropout_mistakes(x, state, train):
    parts = {name: value.flatten().sort().values for name, value in ca_parts(x, state).items()}
    if not train:
        for value in parts.values():
            yield Mistake("dropout is still active in eval() mode: use the module's nn.Dropout, which switches off in "
                          "eval()", value)
        return
    yield Mistake("you applied dropout to the attention scores, before the softmax: apply it to the attention "
                  "weights, after the softmax", parts["scores"])
    yield Mistake("you applied dropout to the masked scores, before the softmax: apply it to the attention weights, "
                  "after the softmax", parts["masked scores"])
    yield Mistake("you applied dropout to the output (the context vectors): apply it to the attention weights, after "
                  "the softmax", parts["output"])
    yield Mistake("you applied dropout to the values: apply it to the attention weights, after the softmax",
                  parts["values"])
    yield Mistake("in train() mode no dropout was applied: apply self.dropout to the attention weights after the "
                  "softmax", torch.zeros(0, dtype=torch.float64))


run(Spec("CausalAttention", call_causal_attention, ca_oracle, examples=ca_examples, cases=ca_cases,
         mistakes=ca_mistakes),
    Spec("CausalAttention", call_causal_attention_dropout, ca_dropout_oracle, examples=ca_dropout_examples,
         cases=ca_dropout_cases, mistakes=ca_dropout_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# The sentence of unit 01 as a batch of two identical windows: the module maps each of the 6
# tokens from 3 to, say, 2 dimensions. The mask is a buffer: it is in the `state_dict` but not
# among the parameters.

# %%
words6 = ["Your", "journey", "starts", "with", "one", "step"]
inputs = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                       [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])  # (T, d_in)
batch = torch.stack((inputs, inputs))                                                # (B, T, d_in)

torch.manual_seed(123)
ca = CausalAttention(d_in=3, d_out=2, context_length=6, dropout=0.0)
print("output shape:", ca(batch).shape)               # (2, 6, 2)
print("first 4 tokens only:", ca(batch[:, :4]).shape)  # (2, 4, 2): the mask is sliced
print("parameters:", [name for name, _ in ca.named_parameters()])
print("buffers:   ", [name for name, _ in ca.named_buffers()])
print("state_dict:", list(ca.state_dict()))
print("first 4 outputs unchanged by the last 2 tokens:", torch.allclose(ca(batch)[:, :4], ca(batch[:, :4])))

# %% [markdown]
# The last line is causality at work: the outputs for the first four tokens of the full window
# equal the outputs for a window of just those four tokens, because no position looks ahead.
# Now plug the module into the tiny model of section 1 and
# train it on the same random tokens:

# %%
torch.manual_seed(0)
causal_lm = TinyAttentionLM(CausalAttention(EMB, EMB, WINDOW, dropout=0.0), VOCAB, WINDOW, EMB).to(device)
causal_curve, causal_per_position = train_on_random_tokens(causal_lm, STEPS)
print("loss per position with the mask:", causal_per_position)

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(peek_curve, label="no mask")
ax.plot(causal_curve, "-.", label="causal mask")
ax.axhline(math.log(VOCAB), color="gray", linestyle="--", label="ln 8: the best honest loss")
ax.set(xlabel="training step", ylabel="cross-entropy", title="Predicting random tokens")
ax.legend()
show()


# %% [markdown]
# With the mask the loss stays at $\ln 8$ at every position: on random tokens there is nothing
# honest to learn, and nothing to copy any more.

# %% [markdown]
# ## 8. A leak detector
#
# A loss curve cannot prove that a mask is right, and a wrong mask crashes nothing. What
# *defines* causality is a property you can test directly: **the outputs at positions
# $0, \dots, t$ must not change when the tokens after $t$ change.** Change the future, keep the
# past, and watch whether any earlier output moves.
#
# Three practical points:
# - compare with a tolerance, not exact equality: a causal module may still wobble by float32
#   rounding (about $10^{-7}$ of the values) when other parts of the batch change; a tolerance
#   around $10^{-5}$ absorbs that, while $10^{-2}$ would hide real, small leaks;
# - test **every** position: a leak may sit at one place only, e.g. just before the last token;
# - dropout changes the outputs between two calls even for a causal module, so probe in `eval()`
#   mode — and put the module back in the mode it was in, since the caller may be training it.

# %% [markdown]
# ### Exercise — `is_causal(module, num_tokens, d_in, trials=3)` (about 15 minutes)
#
# **Goal:** return `True` when `module` (which maps `(B, num_tokens, d_in)` to
# `(B, num_tokens, d_out)`) is causal and `False` when some output depends on a later token.
# Use random inputs; for each position, change the tokens after it (`trials` times, with fresh
# random values) and compare the outputs up to it, within float32 rounding error. Probe in
# `eval()` mode and restore the module's previous mode before returning.
#
# <details><summary>Hint</summary>
#
# `module.training` tells you the current mode, and `module.train(mode)` sets it. `x.clone()`
# copies an input so you can overwrite a slice `[:, t + 1:]` of the copy. `torch.allclose` takes
# `atol` and `rtol`. Return a Python `bool`.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_is_causal", "locked": false, "schema_version": 3, "solution": true, "task": false}
def is_causal(module: nn.Module, num_tokens: int, d_in: int, trials: int = 3) -> bool:
    """True when the outputs of `module` at positions 0..t never move (beyond float32 rounding)
    when the tokens after t change. Probes in eval() mode and restores the previous mode."""
    ### BEGIN SOLUTION
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            for _ in range(trials):
                x = torch.randn(2, num_tokens, d_in)                  # (B, T, d_in)
                base = module(x)                                      # (B, T, d_out)
                for t in range(num_tokens - 1):
                    changed = x.clone()
                    changed[:, t + 1:] = torch.randn(2, num_tokens - t - 1, d_in)  # a new future after t
                    if not torch.allclose(module(changed)[:, :t + 1], base[:, :t + 1], rtol=1e-5, atol=1e-5):
                        return False
        return True
    finally:
        module.train(was_training)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_is_causal_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("is_causal")
### BEGIN HIDDEN TESTS
import torch
import torch.nn as nn

from grader.spec import Case, Exact, Mistake, Spec, run

IS_CAUSAL_SCENARIOS = {
    "causal": "a causal attention module (expected True)",
    "unmasked": "an attention module with no mask (expected False)",
    "rounding": "a causal module whose earlier outputs wobble by float32 rounding when the future changes "
                "(expected True)",
    "little": "a module whose earlier outputs move by about 1e-3 when the future changes (expected False)",
    "last": "a module whose output at position T-2 sees the last token (expected False)",
    "first": "a module whose first output sees the second token (expected False)",
    "train": "a causal module with dropout, given in train() mode (expected (True, still in train mode))",
    "eval": "a causal module with dropout, given in eval() mode (expected (True, still in eval mode))",
}


def is_causal_examples():
    return [Case(f"{label}, T=6, d_in=3", scenario=name, num_tokens=6, d_in=3)
            for name, label in IS_CAUSAL_SCENARIOS.items()]


def is_causal_cases(g):
    return [Case(f"{label}, T={t}, d_in={d}", scenario=name, num_tokens=t, d_in=d)
            for t, d in ((4, 5), (9, 2)) for name, label in IS_CAUSAL_SCENARIOS.items()]


def call_is_causal(scenario, num_tokens, d_in):
    class ProbeModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.W_query = nn.Linear(d_in, 4, bias=False)
            self.W_key = nn.Linear(d_in, 4, bias=False)
            self.W_value = nn.Linear(d_in, 4, bias=False)
            self.dropout = nn.Dropout(0.5 if scenario in ("train", "eval") else 0.0)

        def forward(self, x):
            single = x.dim() == 2
            if single:
                x = x.unsqueeze(0)
            t = x.shape[-2]
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)        # (B, T, 4)
            scores = q @ k.transpose(-2, -1) / 2.0                           # (B, T, T)
            if scenario != "unmasked":
                future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            out = self.dropout(torch.softmax(scores, dim=-1)) @ v             # (B, T, 4)
            later = v.flip(-2).cumsum(-2).flip(-2) - v                        # (B, T, 4): sum of the values after t
            leak = torch.zeros_like(out)
            if scenario == "rounding":
                # rounding noise: it moves the values, not the gradients (a detector may use either)
                out = out * (1 + 1e-7 * torch.sin(1000 * later.sum(-1, keepdim=True))).detach()
            elif scenario == "little":
                leak = 1e-3 * later
            elif scenario == "last" and t >= 2:
                leak[:, t - 2] = v[:, t - 1]
            elif scenario == "first" and t >= 2:
                leak[:, 0] = v[:, 1]
            out = out + leak
            return out[0] if single else out

    torch.manual_seed(0)
    module = ProbeModule()
    module.train(scenario == "train")
    result = bool(is_causal(module, num_tokens, d_in))
    if scenario in ("train", "eval"):
        return (result, module.training)
    return result


def is_causal_oracle(scenario):
    return {"train": (True, True), "eval": (True, False)}.get(scenario, scenario in ("causal", "rounding"))


def is_causal_mistakes(scenario):
    found = {
        "causal": [("your detector said False for a causal attention module. Change only the tokens after "
                    "position t (changed[:, t + 1:]), on a fresh copy of x for each t (x.clone(): changes made to x "
                    "itself pile up from one t to the next), and compare only the outputs at positions 0..t (the "
                    "output at t + 1 sees its own, changed token)", False)],
        "unmasked": [("your detector said True for an attention module with no mask at all: it must return False "
                      "as soon as an earlier output moves when a later token changes. Does its loop over t run "
                      "(range(num_tokens - 1) has num_tokens - 1 steps), and does it compare with a small "
                      "tolerance?", True)],
        "rounding": [("your detector said False for a module that is causal up to float32 rounding: compare with a "
                      "small tolerance (e.g. torch.allclose with atol around 1e-5), not exact equality", False)],
        "little": [("your detector missed a small leak (earlier outputs moved by about 1e-3): your tolerance is "
                    "too loose; float32 rounding is far smaller than that", True)],
        "last": [("your detector missed a leak from the last token into the output just before it: check every "
                  "position t, not a single split of the sequence", True)],
        "first": [("your detector missed a leak from the second token into the first output: for every position "
                   "t, change all the tokens after t, not only the last one", True)],
        "train": [("your detector said False for a causal module with dropout: probe it in eval() mode, where "
                   "dropout is off", (False, True)),
                  ("your detector left the module in eval() mode: restore the mode it had before (train)", (True, False)),
                  ("probe the module in eval() mode (dropout off), then restore the mode it had before (train)",
                   (False, False))],
        "eval": [("your detector switched a module that was in eval() mode to train(): restore the mode it had "
                  "before, not always train()", (True, True))],
    }
    for message, value in found[scenario]:
        yield Mistake(message, value)


run(Spec("is_causal", call_is_causal, is_causal_oracle, examples=is_causal_examples, cases=is_causal_cases,
         mistakes=is_causal_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Your detector on the two attention layers of this unit, and on the attention inside the two
# trained models of sections 1 and 7:

# %%
torch.manual_seed(4)
print("CausalAttention:          ", is_causal(CausalAttention(3, 2, context_length=6, dropout=0.5), 6, 3))
print("PeekingAttention:         ", is_causal(PeekingAttention(3, 2), 6, 3))
print("trained model, no mask:   ", is_causal(peeking_lm.attention.cpu(), WINDOW, EMB))
print("trained model, with mask: ", is_causal(causal_lm.attention.cpu(), WINDOW, EMB))


# %% [markdown]
# ## 9. Padding masks, and the NaN of a fully blocked row
#
# Sentences in a batch rarely have the same length. The short ones are filled up with a
# **padding** token to the length of the longest, and attention must ignore those positions as
# keys. A **padding mask** marks them: for lengths `[4, 2]` and 4 tokens,
#
# | position | 0 | 1 | 2 | 3 |
# |---|---|---|---|---|
# | sentence 1 (4 real tokens) | · | · | · | · |
# | sentence 2 (2 real tokens) | · | · | pad | pad |

# %% [markdown]
# ### Exercise — `padding_mask(lengths, num_tokens)` (about 5 minutes)
#
# **Goal:** return a boolean tensor of shape `(B, num_tokens)`, `True` at the padding positions
# (position ≥ the sentence's length) and `False` at the real tokens. `lengths` is a list of ints
# or a 1-D integer tensor; the result lives on the same device as `lengths` (the CPU for a list).
#
# <details><summary>Hint</summary>
#
# `torch.as_tensor` turns a list into a tensor and leaves a tensor as it is. Compare a row of
# positions `(1, T)` with a column of lengths `(B, 1)`: broadcasting makes the `(B, T)` table.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_padding_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def padding_mask(lengths, num_tokens: int) -> torch.Tensor:
    """Boolean (B, num_tokens) mask, True at the padding positions (position >= length) of each
    sequence. `lengths`: a list of ints or a 1-D tensor; the result is on the lengths' device."""
    ### BEGIN SOLUTION
    lengths = torch.as_tensor(lengths)                              # (B,), on the lengths' device
    positions = torch.arange(num_tokens, device=lengths.device)     # (T,)
    return positions[None, :] >= lengths[:, None]                   # (B, T)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_padding_mask_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("padding_mask")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Exact, Mistake, Spec, run


def padding_examples():
    return [Case("lengths [4, 2] as a list, T=4", lengths=[4, 2], num_tokens=4),
            Case("lengths tensor([3, 5, 1]), T=5", lengths=torch.tensor([3, 5, 1]), num_tokens=5)]


def padding_cases(g):
    return [Case("lengths [1], T=1", lengths=[1], num_tokens=1),
            Case("lengths [0, 2] as a list (an empty sequence), T=3", lengths=[0, 2], num_tokens=3),
            Case("lengths tensor([4]), T=4 (no padding)", lengths=torch.tensor([4]), num_tokens=4),
            Case("lengths tensor([1, 7, 3, 6]), T=7", lengths=torch.tensor([1, 7, 3, 6]), num_tokens=7),
            Case("lengths [2, 5] as a list, T=8", lengths=[2, 5], num_tokens=8)]


def call_padding_mask(lengths, num_tokens):
    return padding_mask(lengths, num_tokens)


def padding_oracle(lengths, num_tokens):
    return torch.arange(num_tokens)[None, :] >= torch.as_tensor(lengths)[:, None]


def padding_mistakes(lengths, num_tokens):
    lengths = torch.as_tensor(lengths)
    positions = torch.arange(num_tokens)[None, :]
    want = positions >= lengths[:, None]
    yield Mistake("your mask is inverted: True must mark the padding, not the real tokens", ~want)
    yield Mistake("off by one: with length L the real tokens are at positions 0..L-1, so padding starts at position L",
                  positions > lengths[:, None])
    yield Mistake("off by one: the token at position L-1 is still a real token; padding starts at position L",
                  positions >= lengths[:, None] - 1)
    yield Mistake("you padded on the left: here the padding comes after the real tokens, at the end",
                  positions < (num_tokens - lengths)[:, None])
    yield Mistake("your mask has one row per position, (num_tokens, B): it must have one row per sequence, "
                  "(B, num_tokens)", want.T)
    yield Mistake("your mask holds the numbers 0. and 1.: return a boolean tensor (dtype torch.bool)", want.float())
    yield Mistake("your mask holds the integers 0 and 1: return a boolean tensor (dtype torch.bool)", want.long())


run(Spec("padding_mask", call_padding_mask, padding_oracle, examples=padding_examples, cases=padding_cases,
         mistakes=padding_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# A padding mask blocks **keys**, so for attention it becomes a `(B, 1, T)` tensor that
# broadcasts over the queries, and it combines with the causal mask by "or": a key is blocked
# if it is in the future *or* it is padding.

# %%
lengths = [4, 2]
pad = padding_mask(lengths, 4)                        # (B, T)
combined = causal_mask(4) | pad[:, None, :]           # (B, T, T): (T, T) | (B, 1, T)
print(combined.int())

# %% [markdown]
# With the padding at the end, every row keeps at least its first key, and the outputs at the
# padding positions are simply ignored later (the loss skips them). Now pad the short sentence
# on the **left** instead, as some tools do for generation: its first query is a padding token
# whose only visible key (itself) is padding. Every key of that row is blocked, and the softmax
# of a row of $-\infty$ is $0/0$:

# %%
left_pad = torch.tensor([[False, False, False, False],
                         [True, True, False, False]])     # (B, T): True = padding, at the start
blocked_left = causal_mask(4) | left_pad[:, None, :]       # (B, T, T)
torch.manual_seed(5)
scores_left = torch.randn(2, 4, 4)                         # (B, T, T)
weights_left = torch.softmax(scores_left.masked_fill(blocked_left, float("-inf")), dim=-1)
print(weights_left[1])
print("rows fully blocked:", blocked_left.all(dim=-1)[1].tolist())

# %% [markdown]
# One NaN is enough to ruin a model: it spreads through the weighted sum into the next layer,
# into the loss, and into every gradient. Two common fixes:
#
# 1. fill with a finite number such as `torch.finfo(dtype).min`: every score of a fully blocked
#    row is then the same number, so the row gets uniform weights over **all** its keys, the
#    padding and the future included. Finite, but meaningless, and no longer causal: the output
#    of that row must be ignored (the loss skips padding positions);
# 2. keep `-inf`, and set the weights of fully blocked rows to 0 after the softmax.

# %%
finite = torch.softmax(scores_left.masked_fill(blocked_left, torch.finfo(scores_left.dtype).min), dim=-1)
print("fix 1, finite fill value:\n", finite[1])

fully_blocked = blocked_left.all(dim=-1, keepdim=True)     # (B, T, 1)
zeroed = weights_left.masked_fill(fully_blocked, 0.0)      # NaN rows -> 0
print("fix 2, zero the fully blocked rows:\n", zeroed[1])
print("any NaN left:", torch.isnan(finite).any().item(), torch.isnan(zeroed).any().item())


# %% [markdown]
# The rows of real tokens are the same under both fixes; only the padding rows differ. Look at
# the first two rows of fix 1: a weight of 0.25 on each of the four keys, keys in the future
# included (three of them for the first row, two for the second). Those rows look ahead, which
# your `is_causal` would catch, and they are harmless only because nothing reads them. Fix 2
# sets them to 0 instead.

# %% [markdown]
# ## 10. Does attention know the order?
#
# Look at attention without a mask once more. Each query is compared with every key, and its
# output is a weighted sum of the values. Nothing in the computation asks *where* a token
# stands. Shuffle the tokens of the input: each query still meets the same keys with the same
# scores, only listed in another order, and neither the softmax nor the weighted sum cares about
# the order of its terms. Every token gets exactly the output it had before; the outputs are
# merely shuffled along with their tokens.
#
# A function with this property is called **permutation-equivariant**. With a permutation
# `perm` of the positions `0, ..., T-1` (for instance `perm = torch.randperm(T)`),
#
# $$f(x[:, \mathrm{perm}]) = f(x)[:, \mathrm{perm}] :$$
#
# permute the input tokens, and the outputs come out permuted the same way, and nothing else
# changes. For a language model that is a serious defect: in "dog bites man" and "man bites
# dog", each word would get the same vector in both sentences. This is why the models of
# sections 1 and 7 add a position embedding (`pos_emb`) to their tokens. It is also why the
# cheating model of section 1 needed it: to copy "the token after me", a position must know
# which token comes after it.
#
# The causal mask is another matter. Rather than take anyone's word for it, build a detector,
# as you did for leaks from the future.

# %% [markdown]
# ### Exercise — `is_permutation_equivariant(fn, num_tokens, d, trials=3)` (about 10 minutes)
#
# **Goal:** return `True` when `fn` is permutation-equivariant and `False` when the order of the
# tokens changes what it computes. `fn` is any function (or a module in `eval()` mode) that maps
# a batch `(B, num_tokens, d)` to `(B, num_tokens, d_out)`: give it a batch, since a module such
# as your `CausalAttention` needs one. In each of `trials` trials, draw a fresh random input and a
# fresh random permutation of the token positions, and compare `fn(x[:, perm])` with
# `fn(x)[:, perm]` within float32 rounding error: the same computation done in another order
# may differ in its last digits. Return `False` as soon as one trial differs, and in any case a
# Python `bool`.
#
# Two things make a trial miss. A permutation that moves no token, the identity, proves nothing:
# `fn(x[:, perm])` is then `fn(x)`, whatever `fn` does. Among many tokens `torch.randperm` seldom
# draws it, but among two it draws it half the time, so draw again until the permutation moves a
# token (a single token has no other order, and nothing to test). And some dependences on the
# order show only under some permutations: a function that notices whether its tokens stand in an
# even or an odd order is fooled by every even permutation, half of them. That is why each trial
# draws its own permutation, and why one trial that differs decides.
#
# <details><summary>Hint</summary>
#
# `torch.randperm(n)` draws a random order of `0, ..., n-1`; indexing with it along dimension 1
# reorders the tokens of every sequence in the batch, and `torch.equal` tells you whether it is
# `torch.arange(n)`, the identity. A permutation fixed in advance, such as reversing the tokens
# or moving each one place along, can miss a dependence on the order that it happens to respect.
# The tolerance of your `is_causal` fits here too.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_is_permutation_equivariant", "locked": false, "schema_version": 3, "solution": true, "task": false}
def is_permutation_equivariant(fn, num_tokens: int, d: int, trials: int = 3) -> bool:
    """True when permuting the tokens of the input permutes the outputs of `fn` the same way:
    fn(x[:, perm]) equals fn(x)[:, perm] within float32 rounding for `trials` random inputs x of
    shape (B, num_tokens, d) and random permutations perm; False as soon as one trial differs."""
    ### BEGIN SOLUTION
    identity = torch.arange(num_tokens)
    with torch.no_grad():
        for _ in range(trials):
            x = torch.randn(2, num_tokens, d)            # (B, T, d): a batch, as fn expects
            perm = torch.randperm(num_tokens)            # (T,) a random order of the positions
            while num_tokens > 1 and torch.equal(perm, identity):
                perm = torch.randperm(num_tokens)        # the identity moves nothing: draw again
            shuffle_first = fn(x[:, perm])               # (B, T, d_out): shuffle, then fn
            shuffle_after = fn(x)[:, perm]               # (B, T, d_out): fn, then shuffle
            if not torch.allclose(shuffle_first, shuffle_after, rtol=1e-5, atol=1e-5):
                return False
    return True
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_is_permutation_equivariant_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("is_permutation_equivariant")
### BEGIN HIDDEN TESTS
import math

import torch

from grader.spec import Case, Exact, Mistake, Spec, run

EQUIVARIANCE_SCENARIOS = {
    "attention": "self-attention with no mask and no positions (expected True)",
    "tokenwise": "a plain function that transforms each token on its own (expected True)",
    "rounding": "self-attention whose outputs move by float32 rounding when the order changes (expected True)",
    "positions": "self-attention with a position vector added to each token (expected False)",
    "causal": "causal self-attention with no positions (expected False)",
    "little": "self-attention plus a shift of about 1e-3 that grows with the position (expected False)",
    "circular": "self-attention whose scores depend on how far apart two positions are around a circle, which "
                "reversing the order or moving every token one place along leaves unchanged (expected False)",
}
# Dependences on the order that a trial can miss: scenario -> (label, trials, (T, d) of the
# examples, (T, d) of the other cases). Given 20 trials, a detector that draws a fresh permutation
# in each misses "parity" with a chance of 2 ** -20; one that tries a single permutation misses it
# half the time, so its eight cases leave it a chance of 1/256. A detector that may draw the
# identity misses "two" half the time: eight cases again.
MISSABLE = {
    "parity": ("self-attention plus a shift whose sign tells whether the tokens stand in an even or an odd order, "
               "which only the odd permutations, half of them, reveal", 20,
               ((6, 3), (5, 4)), ((7, 5), (9, 2), (4, 6), (8, 3), (6, 2), (5, 5))),
    "two": ("self-attention with a position vector added to each token, where torch.randperm(2) draws the "
            "identity half the time", 1,
            ((2, 3), (2, 4)), ((2, 1), (2, 2), (2, 5), (2, 6), (2, 7), (2, 8))),
}


def equivariance_examples():
    return ([Case(f"{label}, T=6, d=3", scenario=name, num_tokens=6, d=3)
             for name, label in EQUIVARIANCE_SCENARIOS.items()]
            + [Case(f"{label}, T={t}, d={d}, trials={trials} (expected False)", scenario=name, num_tokens=t, d=d,
                    trials=trials) for name, (label, trials, shapes, _) in MISSABLE.items() for t, d in shapes])


def equivariance_cases(g):
    # T >= 6: a random permutation that respects the circle (a rotation or a reflection of it)
    # has a chance of 2T / T! <= 1/60 per trial.
    return ([Case(f"{label}, T={t}, d={d}", scenario=name, num_tokens=t, d=d)
             for t, d in ((7, 5), (9, 2)) for name, label in EQUIVARIANCE_SCENARIOS.items()]
            + [Case(f"{label}, T={t}, d={d}, trials={trials} (expected False)", scenario=name, num_tokens=t, d=d,
                    trials=trials) for name, (label, trials, _, shapes) in MISSABLE.items() for t, d in shapes])


def call_is_permutation_equivariant(scenario, num_tokens, d, trials=None):
    torch.manual_seed(0)
    w_query, w_key, w_value = (torch.randn(d, d, dtype=torch.float64) / math.sqrt(d) for _ in range(3))
    not_a_batch = []   # the shapes of inputs fn was given that are not (B, num_tokens, d)

    def fn(x):
        if x.dim() != 3 or x.shape[1] != num_tokens:
            not_a_batch.append(tuple(x.shape))
            raise ValueError(f"fn takes a batch of shape (B, {num_tokens}, {d}), got {tuple(x.shape)}")
        # Computed in float64 and rounded to float32, so that the equivariant scenarios are
        # equivariant to the last bit and only "rounding" moves by float32 rounding.
        dtype, x = x.dtype, x.double()
        t = x.shape[-2]
        pos = torch.arange(t, dtype=torch.float64, device=x.device)           # (T,)
        if scenario == "tokenwise":
            return torch.tanh(x @ w_value).to(dtype)
        if scenario in ("positions", "two"):
            x = x + torch.cos(0.9 * pos[:, None] * torch.arange(1, d + 1, dtype=torch.float64) + 0.3)
        q, k, v = x @ w_query, x @ w_key, x @ w_value                          # (B, T, d)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)                        # (B, T, T)
        if scenario == "circular":
            scores = scores + 2.0 * torch.cos(2 * math.pi * (pos[:, None] - pos[None, :]) / t)
        if scenario == "causal":
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v                                # (B, T, d)
        if scenario == "little":
            out = out + 1e-3 * (pos / t)[:, None]
        if scenario == "parity":  # +0.5 when the tokens' first features stand in an even order, -0.5 when odd
            first = x[..., 0]                                                  # (B, T)
            later = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            inversions = ((first[:, :, None] > first[:, None, :]) & later).sum(dim=(-2, -1))  # (B,)
            out = out + 0.5 - (inversions % 2)[:, None, None].double()
        out = out.to(dtype)
        if scenario == "rounding":
            out = out * (1 + 5e-7 * torch.cos(pos)[:, None]).to(dtype)
        return out

    try:
        result = (is_permutation_equivariant(fn, num_tokens, d) if trials is None
                  else is_permutation_equivariant(fn, num_tokens, d, trials))
    except Exception:
        if not_a_batch:
            return "fn called on input that is not (B, num_tokens, d)"
        raise
    if not_a_batch:
        return "fn called on input that is not (B, num_tokens, d)"
    return result if result is None or isinstance(result, bool) else f"a {type(result).__name__}"


def equivariance_oracle(scenario):
    return scenario in ("attention", "tokenwise", "rounding")


def equivariance_mistakes(scenario):
    found = {
        "attention": ("your detector said False for self-attention without positions, which is permutation-"
                      "equivariant: compare fn(x[:, perm]) with the output permuted by the same perm, fn(x)[:, perm] "
                      "(not with fn(x) itself, nor with the inverse permutation), and permute the tokens, dimension 1",
                      False),
        "tokenwise": ("your detector said False for a function that transforms each token on its own, the simplest "
                      "equivariant function: permute the tokens (dimension 1) and compare with fn(x)[:, perm]", False),
        "rounding": ("your detector said False for a function that is equivariant up to float32 rounding: compare "
                     "with a small tolerance (e.g. torch.allclose with atol around 1e-5), not exact equality", False),
        "positions": ("your detector said True for attention with a position vector added to each token, whose "
                      "outputs depend on the order: compare fn(x[:, perm]), the tokens (dimension 1) reordered by a "
                      "permutation that moves them (the identity permutation proves nothing), with fn(x)[:, perm], "
                      "and return False when they differ", True),
        "causal": ("your detector said True for causal attention: under the mask, position t sees only the first "
                   "t + 1 tokens, so shuffling the tokens changes what each one sees. Compare every output of "
                   "fn(x[:, perm]) with fn(x)[:, perm]", True),
        "little": ("your detector missed a small dependence on the order (outputs moved by about 1e-3): your "
                   "tolerance is too loose, or you compared something the order cannot change (a sum or mean over "
                   "the tokens). Compare every output, within float32 rounding", True),
        "circular": ("your detector missed a dependence on the order that reversing the tokens or moving each one "
                     "place along cannot see: draw a fresh random permutation (torch.randperm) in every trial", True),
        "parity": ("your detector said True for a function whose dependence on the order only the odd "
                   "permutations reveal, half of them: each trial must draw its own random permutation, and one "
                   "trial that differs must make the answer False. Did you draw one permutation for all the "
                   "trials, run a single trial, or keep only the verdict of the last trial?", True),
        "two": ("your detector said True with 2 tokens and 1 trial: torch.randperm(2) draws the identity half the "
                "time, and a permutation that moves no token proves nothing. Draw again until the permutation "
                "moves a token", True),
    }
    yield Mistake(*found[scenario])
    yield Mistake("your detector gave fn an input that is not a batch of shape (B, num_tokens, d): fn takes a batch of "
                  "sequences, as a module such as your CausalAttention does, so draw x = torch.randn(B, num_tokens, d) "
                  "and permute its dimension 1, the tokens", "fn called on input that is not (B, num_tokens, d)")
    for kind in ("Tensor", "bool_"):
        yield Mistake(f"your detector returned a {kind}, not a Python bool: return True or False, e.g. "
                      "bool(torch.allclose(...)) or .item() of a one-element tensor", f"a {kind}")


run(Spec("is_permutation_equivariant", call_is_permutation_equivariant, equivariance_oracle,
         examples=equivariance_examples, cases=equivariance_cases, mistakes=equivariance_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Your detector on three attention layers: the unmasked attention of section 1, the same with a
# position vector added to each token (random vectors here, standing in for a learned
# `pos_emb`), and your `CausalAttention` with no positions at all:

# %%
torch.manual_seed(6)
T6, d6 = 6, 8
plain = PeekingAttention(d6, d6)                          # no mask, no positions
position_table = torch.randn(T6, d6)                      # (T, d) one vector per position
causal = CausalAttention(d6, d6, context_length=T6, dropout=0.0).eval()
print("attention, no positions:       ", is_permutation_equivariant(plain, T6, d6))
print("attention, positions added:    ", is_permutation_equivariant(lambda x: plain(x + position_table), T6, d6))
print("causal attention, no positions:", is_permutation_equivariant(causal, T6, d6))

# %% [markdown]
# The first line is the symmetry, and the second shows that position vectors break it, which is
# their job. The third is the sharp answer to this section's question: the causal mask breaks it
# too, with no position vector anywhere. Under the mask, position $t$ mixes exactly $t + 1$
# tokens, so a model can tell where it stands by *how many* tokens it sees.
#
# The simplest case: give the first token a feature that no other token has (many models begin
# every text with a special start token), and let the attention spread evenly, with all its scores
# equal. The output at position $t$ is the average of that feature over $t + 1$ tokens,
# $1/(t+1)$: the position, read off exactly. Without the mask every position gets $1/T$, and no
# trace of where it stands.

# %%
marker = torch.zeros(T6, 1)
marker[0] = 1.0                                                  # (T, 1): 1 on the first token only
even_causal = causal_attention_weights(torch.zeros(T6, T6))      # (T, T): row t is 1/(t+1) on keys 0..t
even_plain = torch.softmax(torch.zeros(T6, T6), dim=-1)          # (T, T): every row is 1/T
print("with the mask:   ", (even_causal @ marker).squeeze(-1))
print("without the mask:", (even_plain @ marker).squeeze(-1))
print("1 / (t + 1):     ", 1 / torch.arange(1, T6 + 1))


# %% [markdown]
# This is not only a toy: language models trained with a causal mask and no position
# information at all still learn where their tokens are (Haviv et al., 2022, "Transformer
# language models without positional encodings still learn positional information"). Even so,
# almost every model is given positions explicitly, in one of three ways.
#
# **Learned absolute positions** (GPT-2, and the `pos_emb` of sections 1 and 7 and of unit 08).
# A table `nn.Embedding(context_length, d)` holds one trained vector per position, added to the
# token embedding at that position. Simple and flexible, but there is no vector for position
# `context_length` or beyond, and positions that training rarely reaches get poorly trained vectors.
#
# **Sinusoidal positions** ("Attention is all you need", 2017). A fixed table, not learned. The
# $d$ entries of position $t$ come in pairs $i = 0, 1, \dots, d/2 - 1$:
#
# $$PE(t, 2i) = \sin(t\,\omega_i), \qquad PE(t, 2i+1) = \cos(t\,\omega_i), \qquad \omega_i = 10000^{-2i/d} .$$
#
# Each pair is a clock hand turning at its own speed: the first pair goes round once every
# $2\pi \approx 6.3$ positions, the last one $10000^{(d-2)/d}$ times more slowly (about 5,600
# times for the $d = 32$ of the plot below; close to 10,000 only for wide models). Fast pairs
# tell neighbours apart, slow ones the beginning of a text from its far end. The table is
# defined for every position, and moving $k$ positions along turns pair $i$ by the angle
# $k\,\omega_i$, wherever it starts, so the dot product $PE(m) \cdot PE(n) = \sum_i \cos\big((m - n)\,\omega_i\big)$
# depends on the offset $m - n$ only.
#
# **Rotary positions, RoPE** (Su et al., 2021; Llama and most open models since). Nothing is
# added to the tokens. Instead, in every attention layer, each pair of entries of a query or key
# at position $t$ is *rotated* by the angle $t\,\omega_i$, with the frequencies above; the values
# are left alone. A rotation keeps lengths, and turning $q$ by $m\,\omega_i$ and $k$ by
# $n\,\omega_i$ changes their dot product only through the difference $(n - m)\,\omega_i$: the
# score of a query at $m$ with a key at $n$ depends on the two vectors, and on the positions only
# through their offset $n - m$. (Libraries pair the entries differently: neighbours
# $(0, 1), (2, 3), \dots$ as here, or entry $i$ with entry $i + d/2$. The effect is the same,
# but trained weights are not interchangeable: moving a checkpoint from one convention to the
# other reorders the output features of $W_q$ and $W_k$, as Hugging Face's conversion of Llama
# does. An `nn.Linear` stores its weight as (out, in), so these are the rows of
# `W_query.weight`; written as $x W$, with $W$ of shape (in, out), they are the columns of $W$.)

# %%
def sinusoidal_positions(num_tokens, d):
    """The fixed (num_tokens, d) table of "Attention is all you need": sin in the even columns,
    cos in the odd ones, pair i turning at the speed 10000 ** (-2i / d)."""
    t = torch.arange(num_tokens, dtype=torch.float32)[:, None]             # (T, 1)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)   # (d/2,) one speed per pair
    table = torch.zeros(num_tokens, d)
    table[:, 0::2] = torch.sin(t * omega)                                  # (T, d/2)
    table[:, 1::2] = torch.cos(t * omega)                                  # (T, d/2)
    return table


# %% [markdown]
# ### Exercise — `rope(x, positions, base=10000.0)` (about 15 minutes)
#
# **Goal:** apply RoPE to queries or keys `x` of shape `(..., T, d)`, with `d` even. Pair `i` is
# the entries `(2i, 2i+1)` of each row; the row of token `t` turns pair `i` counter-clockwise by
# the angle $\theta = \text{positions}[t] \cdot \omega_i$, with $\omega_i = \text{base}^{-2i/d}$:
#
# $$(a, b) \;\to\; (a\cos\theta - b\sin\theta,\; a\sin\theta + b\cos\theta) .$$
#
# `positions` is a 1-D integer tensor of length `T`, the position of each row. It need not be
# `0, 1, ..., T-1`: a model that writes text may feed only its newest tokens, which stand at
# positions `P, P+1, ...` after the `P` tokens before them. Return a tensor of the same shape and
# dtype as `x`, each pair in its place. A float16 or bfloat16 `x` gives a result of its own dtype,
# even if you compute the angles in float32 or float64: multiplying `x` by tables of another
# dtype promotes the product to theirs, so turn the tables, or the result, into `x.dtype`.
#
# **Precision.** Angles computed in float32 are accepted, and so are float64 ones: the checks use
# positions below 200, where the two agree within the checks' tolerance. Further along a text
# they drift apart; the cell after the exercise measures by how much.
#
# By hand first. With `d = 2` there is one pair and $\omega_0 = \text{base}^0 = 1$, so the row
# `(1, 0)` at position 1 turns by 1 radian: `(cos 1, sin 1) = (0.5403, 0.8415)`. With `d = 4`,
# `base = 100` and the row `(1, 0, 1, 0)` at position 2, pair 0 turns by 2 and pair 1 by
# $2 \cdot 100^{-2/4} = 0.2$: `(-0.4161, 0.9093, 0.9801, 0.1987)`.
#
# <details><summary>Hint</summary>
#
# Work on all pairs at once: `x[..., 0::2]` and `x[..., 1::2]` are the first and second entries
# of every pair, `(..., T, d/2)` each. The angles form a `(T, d/2)` table, positions times speeds,
# which broadcasts over the leading dimensions.
# <details><summary>More</summary>
#
# `omega = base ** (-torch.arange(0, d, 2) / d)` and `angle = positions[:, None] * omega`. Stack
# the two rotated halves on a new last axis, `(..., T, d/2, 2)`, and `flatten(-2)` puts each pair
# back in its place. The cosines and sines need `.to(x.dtype)` before they meet `x`.
# </details>
# </details>

# %% nbgrader={"grade": false, "grade_id": "u05_rope", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary positions: turn each pair of entries (2i, 2i+1) of x (..., T, d), d even, counter-
    clockwise by the angle positions[t] * base ** (-2i / d). positions: 1-D integers, length T.
    Returns a tensor of the same shape and dtype as x (a float16 x gives a float16 result)."""
    ### BEGIN SOLUTION
    d = x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)     # (d/2,)
    angle = positions.to(device=x.device, dtype=torch.float64)[:, None] * omega            # (T, d/2)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]                                             # (..., T, d/2)
    turned = torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1)  # (..., T, d/2, 2)
    return turned.flatten(-2)                                                              # (..., T, d)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u05_rope_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("rope")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Exact, Mistake, Spec, run


def rope_examples():
    g = torch.Generator().manual_seed(8)
    return [Case("the row (1, 0) at position 1, d=2", x=torch.tensor([[1.0, 0.0]]), positions=torch.tensor([1]),
                 base=10000.0),
            Case("the row (1, 0, 1, 0) at position 2, d=4, base=100", x=torch.tensor([[1.0, 0.0, 1.0, 0.0]]),
                 positions=torch.tensor([2]), base=100.0),
            Case("x of shape (2, 3, 6) at positions [5, 6, 7]: tokens that follow 5 earlier ones",
                 x=torch.randn(2, 3, 6, generator=g), positions=torch.tensor([5, 6, 7]), base=10000.0)]


def rope_cases(g):
    return [Case("x of shape (4, 8) at positions 0 ... 3", x=torch.randn(4, 8, generator=g),
                 positions=torch.arange(4), base=10000.0),
            Case("x of shape (2, 3, 5, 4) (two leading dimensions) at positions 10 ... 14",
                 x=torch.randn(2, 3, 5, 4, generator=g), positions=torch.arange(10, 15), base=10000.0),
            Case("x of shape (3, 10) at positions [3, 9, 4], base=500", x=torch.randn(3, 10, generator=g),
                 positions=torch.tensor([3, 9, 4]), base=500.0),
            Case("x of shape (1, 6, 12), float64, at positions 100 ... 105",
                 x=torch.randn(1, 6, 12, generator=g, dtype=torch.float64), positions=torch.arange(100, 106),
                 base=10000.0),
            Case("x of shape (2, 2) at positions [0, 7], base=2", x=torch.randn(2, 2, generator=g),
                 positions=torch.tensor([0, 7]), base=2.0)]


def call_rope(x, positions, base):
    return rope(x, positions, base)


def rope_reference(x, positions, base, sign=1.0, pairs="neighbours", exponent=2.0, back="interleaved",
                   turned_entries="both"):
    """RoPE in float64, with switches that reproduce known mistakes (turned_entries: "first" or
    "second" turns one entry of each pair only, "cos" scales both by cos without the sin terms)."""
    x, d = x.double(), x.shape[-1]
    omega = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)       # (d/2,)
    angle = positions.double()[:, None] * omega                                       # (T, d/2)
    cos, sin = torch.cos(angle), sign * torch.sin(angle)
    a, b = (x[..., 0::2], x[..., 1::2]) if pairs == "neighbours" else (x[..., :d // 2], x[..., d // 2:])
    turned = {"both": (a * cos - b * sin, a * sin + b * cos), "first": (a * cos - b * sin, b),
              "second": (a, a * sin + b * cos), "cos": (a * cos, b * cos)}[turned_entries]
    if pairs != "neighbours" or back == "halves":
        return torch.cat(turned, dim=-1)
    return torch.stack(turned, dim=-1).flatten(-2)


def rope_oracle(x, positions, base):
    return rope_reference(x, positions, base)


def rope_mistakes(x, positions, base):
    in_order = torch.arange(x.shape[-2])
    if not torch.equal(positions, in_order):
        yield Mistake("you turned row t by its place in x (0, 1, ..., T-1), not by positions[t]: tokens that "
                      "follow P earlier ones stand at positions P, P+1, ...", rope_reference(x, in_order, base))
    yield Mistake("you turned the pairs clockwise; counter-clockwise, as asked, (a, b) becomes "
                  "(a cos θ - b sin θ, a sin θ + b cos θ)",
                  rope_reference(x, positions, base, sign=-1.0))
    for one in ("first", "second"):
        yield Mistake("you turned only one entry of each pair: the pair (a, b) turns as a whole, to "
                      "(a cos θ - b sin θ, a sin θ + b cos θ), and both new entries mix a and b",
                      rope_reference(x, positions, base, turned_entries=one))
    yield Mistake("you multiplied both entries by cos θ and left out the sin θ terms: the pair (a, b) turns to "
                  "(a cos θ - b sin θ, a sin θ + b cos θ)", rope_reference(x, positions, base, turned_entries="cos"))
    if x.shape[-1] > 2:
        yield Mistake("you paired entry i with entry i + d/2 (a convention some libraries use); here each pair is "
                      "two neighbours, (2i, 2i+1)", rope_reference(x, positions, base, pairs="halves"))
        yield Mistake("pair i turns at base ** (-2i / d), where i counts pairs: you used base ** (-i / d)",
                      rope_reference(x, positions, base, exponent=1.0))
        yield Mistake("your speeds grow with the pair: pair i turns at base ** (-2i / d), a minus sign in the "
                      "exponent, so that the first pair is the fastest", rope_reference(x, positions, base,
                                                                                       exponent=-2.0))
        yield Mistake("the turned pairs come back as all first entries, then all second entries: put each pair back "
                      "in its place (2i, 2i+1), e.g. stack them on a new last axis and flatten",
                      rope_reference(x, positions, base, back="halves"))
    if base != 10000.0:
        yield Mistake("you used 10000 instead of the base you were given", rope_reference(x, positions, 10000.0))


def rope_dtype_examples():
    return [Case("the row (1, 0) at position 1 in float64: the dtype of the result is compared",
                 x=torch.tensor([[1.0, 0.0]], dtype=torch.float64), positions=torch.tensor([1]), base=10000.0),
            Case("the row (1, 0) at position 1 in float16: the dtype of the result is compared",
                 x=torch.tensor([[1.0, 0.0]], dtype=torch.float16), positions=torch.tensor([1]), base=10000.0)]


def rope_dtype_cases(g):
    return [Case("x of shape (2, 3, 5, 4) in bfloat16 at positions 10 ... 14: the dtype of the result is compared",
                 x=torch.randn(2, 3, 5, 4, generator=g).to(torch.bfloat16), positions=torch.arange(10, 15),
                 base=10000.0),
            Case("x of shape (3, 8) in float16 at positions [3, 9, 4], base=500: the dtype of the result is compared",
                 x=torch.randn(3, 8, generator=g).half(), positions=torch.tensor([3, 9, 4]), base=500.0),
            Case("x of shape (1, 4, 6) in float64 at positions 100 ... 103: the dtype of the result is compared",
                 x=torch.randn(1, 4, 6, generator=g, dtype=torch.float64), positions=torch.arange(100, 104),
                 base=10000.0),
            Case("x of shape (4, 2) in float32 at positions 0 ... 3: the dtype of the result is compared",
                 x=torch.randn(4, 2, generator=g), positions=torch.arange(4), base=10000.0)]


def call_rope_dtype(x, positions, base):
    out = rope(x, positions, base)
    return str(out.dtype).replace("torch.", "") if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"


def rope_dtype_oracle(x):
    return str(x.dtype).replace("torch.", "")


def rope_dtype_mistakes(x):
    want = str(x.dtype).replace("torch.", "")
    for got in ("float32", "float64"):
        if got == want:
            continue
        if x.dtype in (torch.float16, torch.bfloat16):
            yield Mistake(f"your rope returned {got} for a {want} x: cos and sin tables of {got} promote the "
                          "product to their dtype. Turn the tables into x.dtype before they meet x (cos.to(x.dtype)), "
                          "or the result back into x.dtype", got)
        else:
            yield Mistake(f"your rope returned {got} for a {want} x: something turned x or the result into {got} "
                          "(x.float(), or a tensor made with torch.zeros or torch.empty, which are float32 unless "
                          "told otherwise). Keep x's dtype: torch.empty_like(x), or .to(x.dtype) at the end", got)


run(Spec("rope", call_rope, rope_oracle, examples=rope_examples, cases=rope_cases, mistakes=rope_mistakes),
    Spec("rope", call_rope_dtype, rope_dtype_oracle, examples=rope_dtype_examples, cases=rope_dtype_cases,
         mistakes=rope_dtype_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# How precise are angles computed in float32? For queries and keys of 64 entries, here is the
# largest difference from float64 angles over their 32 pairs, at three positions:

# %%
d64 = 64
for far in (100, 5_000, 100_000):
    angle32 = far * 10000.0 ** (-torch.arange(0, d64, 2, dtype=torch.float32) / d64)   # (d/2,) in float32
    angle64 = far * 10000.0 ** (-torch.arange(0, d64, 2, dtype=torch.float64) / d64)   # (d/2,) in float64
    print(f"position {far:>7,}: float32 angles differ by up to {(angle32.double() - angle64).abs().max().item():.1e}")

# %% [markdown]
# A float32 number near 5,000 is stored in steps of about 0.0005, and the speeds themselves are
# rounded, so the angles drift as the position grows: by up to about 1.5e-4 radians at position
# 5,000 and 2e-3 at 100,000, and each turned entry moves by up to that fraction of its pair's
# length. At the positions of this course, a few hundred at most, float32 angles are plenty.
#
# With `rope` written, place one query and one key at every position and look at their scores,
# next to the sinusoidal table and its dot products.

# %%
T64, d32 = 64, 32
table = sinusoidal_positions(T64, d32)                   # (T, d)
torch.manual_seed(7)
q_one, k_one = torch.randn(d32), torch.randn(d32)        # one query and one key ...
steps = torch.arange(T64)
q_at = rope(q_one.expand(T64, d32), steps)               # (T, d) ... placed at every position
k_at = rope(k_one.expand(T64, d32), steps)               # (T, d)
rope_scores = q_at @ k_at.T                              # (T, T): row m = query at m, column n = key at n

fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), layout="constrained")
image = axes[0].imshow(table.T.numpy(), cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
axes[0].set(xlabel="position t", ylabel="entry of the position vector", title="The sinusoidal table")
fig.colorbar(image, ax=axes[0])
image = axes[1].imshow((table @ table.T).numpy(), cmap="viridis")
axes[1].set(xlabel="position n", ylabel="position m", title="Sinusoidal: PE(m) · PE(n)")
fig.colorbar(image, ax=axes[1])
image = axes[2].imshow(rope_scores.numpy(), cmap="viridis")
axes[2].set(xlabel="key position n", ylabel="query position m", title="RoPE: score of one q and one k")
fig.colorbar(image, ax=axes[2])
show()

print(f"sinusoidal, offset 7: PE(3)·PE(10) = {(table[3] @ table[10]).item():.4f}, "
      f"PE(40)·PE(47) = {(table[40] @ table[47]).item():.4f}")
print(f"RoPE, offset 3: score(2, 5) = {rope_scores[2, 5].item():.4f}, score(30, 33) = {rope_scores[30, 33].item():.4f}")
print("rotation keeps lengths:", torch.allclose(q_at.norm(dim=-1), q_one.norm().expand(T64)))
speeds = 10000.0 ** (-torch.arange(0, d32, 2, dtype=torch.float64) / d32)                     # (d/2,)
for offset in (0, 4, 16, 64):
    partial_sums = torch.polar(torch.ones(d32 // 2, dtype=torch.float64), offset * speeds).cumsum(0)  # (d/2,)
    print(f"RoFormer's bound at offset {offset:>2}: {partial_sums.abs().mean().item():.2f}")


# %% [markdown]
# In the table (left), the top rows (the fast pairs) flicker from one position to the next
# while the bottom rows barely change over 64 positions. In the middle and on the right, every
# diagonal has a single colour: the similarity of two positions, and the RoPE score of a query
# and a key, depend on the positions only through how far apart they are. (With RoPE the score
# also depends on the vectors themselves, which a trained model learns to use.)
#
# The last four lines are what Su et al. (RoFormer) call RoPE's *long-term decay*. The score of a
# query and a key at offset $r$ is at most a number set by the two vectors times
# $\sum_j |S_j|$, where $S_j = \sum_{i<j} e^{\mathrm{i}\, r\,\omega_i}$ adds up the turns of
# the first $j$ pairs. The mean of the $|S_j|$, printed above, shrinks, on the whole, as $r$
# grows: from 8.50 at offset 0 to 3.44 at offset 64. It bounds what a score can reach; a trained
# model can still attend far back when its vectors make that pay.
#
# The base is a choice, which is why `rope` takes it as an argument. The slowest pair goes round
# once every $2\pi\,\text{base}^{(d-2)/d}$ positions, so a larger base keeps positions far apart
# distinct in the slow pairs: Llama 2 uses 10,000, with texts of up to 4,096 tokens, and Llama 3
# raised it to 500,000 to serve longer texts.
#
# Added to the tokens or turning the queries and keys, both encodings break the symmetry, as
# they should:

# %%
class RotaryAttention(PeekingAttention):
    """The unmasked attention of section 1 with RoPE applied to its queries and keys."""

    def forward(self, x):                                                     # x: (B, T, d_in)
        positions = torch.arange(x.shape[1])
        queries = rope(self.W_query(x), positions)                            # (B, T, d_out)
        keys = rope(self.W_key(x), positions)                                 # (B, T, d_out)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5     # (B, T, T)
        return torch.softmax(scores, dim=-1) @ self.W_value(x)                # (B, T, d_out)


torch.manual_seed(6)
rotary = RotaryAttention(d6, d6)
sinusoids = sinusoidal_positions(T6, d6)                                      # (T, d)
print("attention, sinusoidal positions added:", is_permutation_equivariant(lambda x: plain(x + sinusoids), T6, d6))
print("attention with RoPE:                  ", is_permutation_equivariant(rotary, T6, d6))

# %% [markdown]
# ## Recap
#
# - One training window of *T* tokens holds *T* next-token predictions; without a mask the
#   attention can read each answer from the input, and the model learns to copy (the loss falls
#   below what honest prediction allows).
# - The causal mask is `True` strictly above the diagonal: query *i* may see keys $j \le i$.
#   It is applied to the **scores**, with $-\infty$, before the softmax.
# - `-1e9` and `torch.finfo(dtype).min` work as well as `-inf`; `-1e4` does not: large scores go
#   below it and the future wins. `-inf` gives NaN on a fully blocked row.
# - `masked_fill(mask, -inf)` wants True = blocked; the `mask == 0` style keeps 1s;
#   `F.scaled_dot_product_attention` wants True = attend. Convert with `==0` and `~`.
# - Masking after the softmax works only with renormalisation, and then equals masking before.
# - `CausalAttention` keeps its mask as a buffer, slices it to the batch's length, and applies
#   dropout to the attention weights (off in `eval()`).
# - Causality is testable: change the future, and no earlier output may move beyond rounding.
# - Padding masks block keys; combined with a causal mask they can block a whole row, so guard
#   against the NaN (a finite fill value gives that row uniform weights, the future included).
# - Without a mask and without positions, attention is permutation-equivariant: shuffle the
#   tokens and the outputs are shuffled the same way, nothing more. Position vectors break the
#   symmetry, and so does the causal mask: position *t* sees exactly *t* + 1 tokens.
# - Learned absolute positions add a trained vector per position (up to `context_length`);
#   sinusoidal positions add a fixed table of sines and cosines; RoPE rotates the queries and
#   keys so that each score depends on the two positions only through their offset.
#   `rope` turns pair `(2i, 2i+1)` of the row at `positions[t]` by `positions[t] · base^(−2i/d)`,
#   takes the positions it is given, which need not start at 0, and returns the dtype of `x`.
#
# **Next — unit 06:** several attention heads side by side, each with its own causal mask —
# multi-head attention.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
