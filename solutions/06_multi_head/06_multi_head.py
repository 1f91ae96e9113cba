# %% [markdown]
# # Unit 06 — Multi-head attention
#
# One attention head asks one question of the past: *which earlier tokens matter to me?* But
# a token usually has several questions at once — which word is my subject, what came just
# before me, which name should I copy. **Multi-head attention** runs several heads side by
# side, each with its own queries, keys and values, so each can look from its own angle, and
# then combines what they found.
#
# **By the end you will be able to**
# - explain why several heads, each with its own projections, can attend to different things,
#   and show with a small training run a task that one head cannot solve and two heads can;
# - build multi-head attention by stacking causal heads, then efficiently by splitting one
#   big projection into heads;
# - reshape `(B, T, D)` into `(B, H, T, D/H)` and back with `view` and `transpose`, and say
#   why `view` alone mixes the heads up;
# - add the output projection, scale each head by $\sqrt{\text{head\_dim}}$, and count the
#   parameters;
# - map your module onto PyTorch's `nn.MultiheadAttention`, explain its packed weight
#   layout, and prove that both compute the same thing.
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
torch.set_num_threads(1)  # the networks in this unit are tiny: one CPU thread runs them faster than several
device = "cuda" if torch.cuda.is_available() else "cpu"
QUICK = bool(os.environ.get("NBGRADER_EXECUTION"))  # under grading, the training run is shortened

# %% [markdown]
# ## 1. Several angles on one question
#
# Picture a search engine again. You type the query *"python tutorial"*. A single search ranks
# every page by one notion of relevance. Now imagine three searches at once, each from its own
# **angle**, each with its own page titles (keys), its own page contents (values) and so its
# own weights:
#
# | angle | keys: page titles | weights | values: what the angle returns |
# |---|---|---|---|
# | syntax | python syntax, python basics, advanced python | 0.7, 0.2, 0.1 | syntax guide, beginner course, advanced notes |
# | projects | python projects, python hands-on, python case studies | 0.3, 0.5, 0.2 | snake game, data analysis, web app |
# | jobs | python jobs, python interviews, python salaries | 0.2, 0.3, 0.5 | career guide, interview tips, salary survey |
#
# Each angle mixes *its own* values with *its own* weights, exactly as one attention head
# does. The answer to the query is the three results **side by side**: concatenated, not
# averaged, so no angle's finding is washed out by the others.
#
# Below, each value is a made-up 2-number vector, so each angle returns 2 numbers and the
# concatenation has 3 × 2 = 6.

# %%
angles = ["syntax", "projects", "jobs"]
angle_weights = torch.tensor([[0.7, 0.2, 0.1],    # syntax: one weight per page
                              [0.3, 0.5, 0.2],    # projects
                              [0.2, 0.3, 0.5]])   # jobs             (3 angles, 3 pages)
angle_values = torch.tensor([[[1.0, 0.0], [0.8, 0.2], [0.6, 0.4]],    # syntax pages
                             [[0.1, 0.9], [0.3, 0.7], [0.2, 1.0]],    # project pages
                             [[0.5, 0.5], [0.9, 0.1], [0.4, 0.8]]])   # job pages  (3 angles, 3 pages, 2)

per_angle = (angle_weights[:, :, None] * angle_values).sum(dim=1)  # (3 angles, 2): one weighted mix per angle
combined = per_angle.reshape(-1)                                    # (6,): the three results side by side
for angle, result in zip(angles, per_angle):
    print(f"{angle:>8}: {result}")
print("combined:", combined)


# %% [markdown]
# In a transformer the "angles" are not designed by hand: each head gets its own learned
# projections $W_q^{(h)}, W_k^{(h)}, W_v^{(h)}$, and training decides what each head looks for.
#
# ## 2. What you bring from unit 05
#
# The cell below holds unit 05's `causal_mask` and `CausalAttention`, written out so this
# unit runs on its own. Read it once: a multi-head module is made of exactly these steps.
# It is read-only.

# %% nbgrader={"grade": false, "grade_id": "u06_given_causal", "locked": true, "schema_version": 3, "solution": false, "task": false}
def causal_mask(num_tokens: int, device=None) -> torch.Tensor:
    """Boolean (T, T) mask, True above the diagonal: True = blocked (a future token)."""
    return torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device), diagonal=1)


class CausalAttention(nn.Module):
    """One causal self-attention head: (B, T, d_in) -> (B, T, d_out), for any T <= context_length."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))  # (context_length, context_length)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        num_tokens = x.shape[1]
        queries = self.W_query(x)                                          # (B, T, d_out)
        keys = self.W_key(x)                                               # (B, T, d_out)
        values = self.W_value(x)                                           # (B, T, d_out)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(self.d_out)  # (B, T, T)
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))              # (B, T, T), rows sum to 1
        return weights @ values                                            # (B, T, d_out)


# %% [markdown]
# Our running example is the six-token sentence *"Your journey starts with one step"* with
# its 3-number embeddings, stacked twice into a batch of two. The context length (the longest
# input the modules accept) is 8, longer than the sentence, so the mask gets cut to 6 × 6.

# %%
words = ["Your", "journey", "starts", "with", "one", "step"]
inputs = torch.tensor(
    [[0.43, 0.15, 0.89],   # Your
     [0.55, 0.87, 0.66],   # journey
     [0.57, 0.85, 0.64],   # starts
     [0.22, 0.58, 0.33],   # with
     [0.77, 0.25, 0.10],   # one
     [0.05, 0.80, 0.55]]   # step
)
batch = torch.stack([inputs, inputs])  # (B, T, d_in) = (2, 6, 3)
context_length = 8

torch.manual_seed(123)
one_head = CausalAttention(d_in=3, d_out=2, context_length=context_length, dropout=0.0)
print(one_head(batch).shape)  # (2, 6, 2)


# %% [markdown]
# ## 3. The simplest multi-head attention: a stack of heads
#
# The most direct way to get several heads is to build several `CausalAttention` modules,
# run each on the same input, and concatenate their outputs along the feature (last) axis.
# With `num_heads` heads of width `d_out` each, a `(B, T, d_in)` input becomes
# `(B, T, num_heads * d_out)`.
#
# Keep the heads in an `nn.ModuleList`, not a plain Python list: only then does PyTorch see
# their parameters (for the optimiser, for `.to(device)`, for `state_dict`), named
# `heads.0.W_query.weight`, `heads.1.W_query.weight`, ...

# %% [markdown]
# ### Exercise — `MultiHeadAttentionWrapper` (about 10 minutes)
#
# **Goal:** a module with an `nn.ModuleList` called `heads` holding `num_heads` independent
# `CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)` heads; `forward(x)` runs
# every head on `x` and concatenates their outputs **in order** (head 0 first) along the last
# dimension: `(B, T, d_in)` → `(B, T, num_heads * d_out)`.
#
# <details><summary>Hint</summary>
#
# A list comprehension builds the heads; `nn.ModuleList(...)` registers them. In `forward`,
# `torch.cat` takes a list of tensors and a `dim`: which axis holds the features?
# Each head needs its *own* module, so that each has its own weights.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u06_multi_head_attention_wrapper", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MultiHeadAttentionWrapper(nn.Module):
    """`num_heads` independent causal heads whose outputs are concatenated.

    Attributes: heads (nn.ModuleList of CausalAttention, each d_in -> d_out).
    forward: x (B, T, d_in) -> (B, T, num_heads * d_out), head 0's features first."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (B, T, num_heads * d_out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u06_multi_head_attention_wrapper_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("MultiHeadAttentionWrapper")
### BEGIN HIDDEN TESTS
import math

import torch

from grader.inputs import JOURNEY, QKV, linear_state
from grader.spec import Case, Mistake, Spec, build, dropout_seen, run


def wrapper_case(g, x, d_out, num_heads, dropout=0.0, qkv_bias=False, context_length=8, train=False, label=""):
    if isinstance(x, tuple):  # a shape (B, T, d_in): random inputs
        x = torch.randn(*x, generator=g)
    d_in = x.shape[-1]
    state = linear_state(g, tuple(f"heads.{h}.{n}" for h in range(num_heads) for n in QKV), d_in, d_out, qkv_bias)
    return Case(label or f"x {tuple(x.shape)}, d_out={d_out}, {num_heads} heads, context_length={context_length}, "
                         f"qkv_bias={qkv_bias}, dropout={dropout} in {'train()' if train else 'eval()'} mode",
                x=x, d_in=d_in, d_out=d_out, context_length=context_length, dropout=dropout, num_heads=num_heads,
                qkv_bias=qkv_bias, state=state, train=train)


def wrapper_examples():
    g = torch.Generator().manual_seed(6)
    return [wrapper_case(g, torch.stack([JOURNEY, JOURNEY]), d_out=2, num_heads=2,
                         label="the journey batch (2, 6, 3), 2 heads of width 2, context_length 8"),
            wrapper_case(g, torch.stack([JOURNEY, JOURNEY]), d_out=2, num_heads=3, qkv_bias=True,
                         label="the journey batch, 3 heads of width 2, qkv_bias=True")]


def wrapper_cases(g):
    return [wrapper_case(g, (1, 1, 4), d_out=3, num_heads=2, dropout=0.3, context_length=5),
            wrapper_case(g, (3, 5, 4), d_out=3, num_heads=3, dropout=0.3, qkv_bias=True, context_length=7),
            wrapper_case(g, (2, 6, 5), d_out=2, num_heads=4, context_length=6),
            wrapper_case(g, (1, 4, 2), d_out=5, num_heads=2, dropout=0.1, qkv_bias=True, context_length=9)]


def call_multi_head_attention_wrapper(x, d_in, d_out, context_length, dropout, num_heads, qkv_bias, state):
    module = build(MultiHeadAttentionWrapper, state, d_in, d_out, context_length, dropout, num_heads, qkv_bias=qkv_bias)
    with dropout_seen(), torch.no_grad():  # dropout is judged apart, below
        return module(x)


def wrapper_heads(x, state, num_heads):
    """Each head's (weights (B, T, T), output (B, T, d_out)), by reference code in float64."""
    T = x.shape[1]
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    heads = []
    for h in range(num_heads):
        q, k, v = (x.double() @ state[f"heads.{h}.{n}.weight"].double().T
                   + state.get(f"heads.{h}.{n}.bias", torch.zeros(1)).double() for n in QKV)
        weights = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])).masked_fill(blocked, float("-inf")),
                                dim=-1)
        heads.append((weights, weights @ v))
    return heads


def wrapper_oracle(x, state, num_heads):
    return torch.cat([out for _, out in wrapper_heads(x, state, num_heads)], dim=-1)


def wrapper_mistakes(x, state, num_heads):
    outs = [out for _, out in wrapper_heads(x, state, num_heads)]
    yield Mistake("you concatenated the heads along the token axis (dim 1); the heads' features go side by side "
                  "in the last axis", torch.cat(outs, dim=1))
    yield Mistake("you concatenated the heads along the batch axis (dim 0); the heads' features go side by side "
                  "in the last axis", torch.cat(outs, dim=0))
    yield Mistake("you stacked the heads into a new axis; concatenate them along an existing one so the result is "
                  "(B, T, num_heads * d_out)", torch.stack(outs, dim=0))
    yield Mistake("you stacked the heads into a new axis (B, T, num_heads, d_out); concatenate them instead so the "
                  "result is (B, T, num_heads * d_out)", torch.stack(outs, dim=-2))
    yield Mistake("you added the heads' outputs together; concatenate them so each head keeps its own features",
                  sum(outs))
    yield Mistake("you returned a single head's output; run every head and concatenate the results", outs[-1])
    yield Mistake("you returned only the first head's output; run every head and concatenate the results", outs[0])
    yield Mistake("the heads are concatenated in reverse order; head 0's features come first",
                  torch.cat(outs[::-1], dim=-1))


def wrapper_dropout_examples():
    g = torch.Generator().manual_seed(6)
    return [wrapper_case(g, torch.stack([JOURNEY, JOURNEY]), d_out=2, num_heads=2, dropout=0.5, train=True,
                         label="the journey batch (2, 6, 3), 2 heads of width 2, dropout 0.5 in train() mode: what is "
                               "dropout applied to?")]


def wrapper_dropout_cases(g):
    return [wrapper_case(g, (2, 5, 3), d_out=4, num_heads=2, dropout=0.5, context_length=6, train=True),
            wrapper_case(g, (1, 4, 4), d_out=3, num_heads=3, dropout=0.5)]


def call_multi_head_attention_wrapper_dropout(x, d_in, d_out, context_length, dropout, num_heads, qkv_bias, state,
                                              train):
    """Every value dropout received (sorted), with dropout made the identity."""
    module = build(MultiHeadAttentionWrapper, state, d_in, d_out, context_length, dropout, num_heads, qkv_bias=qkv_bias,
                   train=train)
    with dropout_seen() as log, torch.no_grad():
        module(x)
    return log.values()


def wrapper_dropout_oracle(x, state, num_heads, train):
    if not train:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([weights.flatten() for weights, _ in wrapper_heads(x, state, num_heads)]).sort().values


def wrapper_dropout_mistakes(train):
    if train:
        yield Mistake("in training mode your output is the same as in eval mode: pass the `dropout` rate on to "
                      "each head", torch.zeros(0, dtype=torch.float64))


run(Spec("MultiHeadAttentionWrapper", call_multi_head_attention_wrapper, wrapper_oracle,
         examples=wrapper_examples, cases=wrapper_cases, mistakes=wrapper_mistakes),
    Spec("MultiHeadAttentionWrapper", call_multi_head_attention_wrapper_dropout, wrapper_dropout_oracle,
         examples=wrapper_dropout_examples, cases=wrapper_dropout_cases, mistakes=wrapper_dropout_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Two heads of width 2 on our batch give 4 features per token. The first two columns are
# exactly what head 0 computes on its own, the last two what head 1 computes:

# %%
torch.manual_seed(123)
wrapper = MultiHeadAttentionWrapper(d_in=3, d_out=2, context_length=context_length, dropout=0.0, num_heads=2)
wrapper_out = wrapper(batch)
print(wrapper_out.shape)  # (2, 6, 4) = (B, T, num_heads * d_out)
print(wrapper_out[0])
print("columns 0-1 are head 0:", torch.allclose(wrapper_out[..., :2], wrapper.heads[0](batch)))
print("columns 2-3 are head 1:", torch.allclose(wrapper_out[..., 2:], wrapper.heads[1](batch)))

# %% [markdown]
# ## 4. One projection for all heads: splitting with `view` and `transpose`
#
# The wrapper runs its heads one after the other: `num_heads` small matrix products for the
# queries, as many for the keys, the values, the scores... GPUs prefer a few large products.
# The trick: the `num_heads` query projections of width `head_dim` are just the row blocks of
# **one** big projection of width `d_out = num_heads * head_dim`. So compute
# `W_query(x)` once, with shape `(B, T, d_out)`, and read features
# `h * head_dim ... (h + 1) * head_dim - 1` as head `h`'s query.
#
# To compute all heads' scores in one batched product, we need the heads as a *batch-like*
# axis in front of the tokens: `(B, T, d_out)` → `(B, H, T, head_dim)`. Two steps:
#
# 1. `x.view(B, T, H, head_dim)` cuts each token's `d_out` features into `H` blocks;
# 2. `.transpose(1, 2)` swaps the token and head axes: `(B, H, T, head_dim)`.
#
# Here are the sizes of the step-by-step example of one of our source articles: one sentence
# of 3 tokens, a model width of 12 and 2 heads, so 6 features per head.

# %%
B, T, d_model, H = 1, 3, 12, 2
head_dim = d_model // H                              # 6
q = torch.randn(B, T, d_model)                       # (1, 3, 12)
print("projection:", tuple(q.shape))
print("view:      ", tuple(q.view(B, T, H, head_dim).shape))                  # (1, 3, 2, 6)
print("transpose: ", tuple(q.view(B, T, H, head_dim).transpose(1, 2).shape))  # (1, 2, 3, 6)

# %% [markdown]
# ### Why `view` straight to `(B, H, T, head_dim)` is wrong
#
# It is tempting to skip the transpose and write `q.view(B, H, T, head_dim)`: the shape comes
# out right, and nothing complains. But `view` never moves numbers, it only re-reads the same
# memory in a new shape. The memory holds token 1's features, then token 2's, then token 3's.
# Cutting that into `H` chunks of `T * head_dim` numbers gives "head 0" the first chunk: all of
# token 1 and part of token 2 — tokens and heads mixed.
#
# Label every number to see it: **hundreds = token, tens = head, units = feature within the
# head**. So `213` is token 2, head 1, feature 3 (3 tokens, 2 heads, 3 features per head).

# %%
labels = torch.tensor([[[100 * t + 10 * h + j for h in (1, 2) for j in (1, 2, 3)] for t in (1, 2, 3)]],
                      dtype=torch.float32)  # (B, T, d_out) = (1, 3, 6)
print(labels[0])
right = labels.view(1, 3, 2, 3).transpose(1, 2)  # (B, H, T, head_dim) = (1, 2, 3, 3)
wrong = labels.view(1, 2, 3, 3)                  # same shape, wrong content
print("view + transpose, head 0:\n", right[0, 0])  # tens digit 1 everywhere, tokens 1, 2, 3 in order
print("view only, head 0:\n", wrong[0, 0])         # mixes head 1 and head 2, and stops at token 2

# %% [markdown]
# With `view` + `transpose`, head 0 holds only numbers with tens digit 1 (its own features),
# one row per token. With `view` alone, "head 0" holds token 1's features of *both* heads and
# half of token 2: its scores would compare the wrong things. No error warns you; only the
# values are wrong.
#
# ### Going back: transpose, then make the memory contiguous
#
# After attention each head gives `(B, H, T, head_dim)`, and we need the heads side by side
# again: `(B, T, H * head_dim)`. Transpose back to `(B, T, H, head_dim)`, then flatten the last
# two axes. One catch: `transpose` does not move numbers either, it only changes the
# *strides* (how far to jump in memory for each axis). The result is not **contiguous** — its
# rows are not laid out one after the other in memory — and `view` refuses such a tensor:

# %%
heads_out = right.contiguous()   # (B, H, T, head_dim), laid out in memory as `weights @ values` returns it
back = heads_out.transpose(1, 2)  # (B, T, H, head_dim): the same memory, read with swapped strides
print("contiguous?", back.is_contiguous())
try:
    back.view(1, 3, 6)
except RuntimeError as error:
    print("view failed:", str(error).split(".")[0])
print(back.contiguous().view(1, 3, 6)[0])  # .contiguous() copies into the new order: the labels again


# %% [markdown]
# `reshape` does the same as `.contiguous().view(...)`: it copies only when it must.
#
# ### Exercise — `split_heads(x, num_heads)` and `merge_heads(x)` (about 15 minutes)
#
# **Goal:**
# - `split_heads(x, num_heads)`: `(B, T, D)` → `(B, H, T, D / H)`, head `h` holding features
#   `h * D/H` to `(h + 1) * D/H - 1` of every token;
# - `merge_heads(x)`: the inverse, `(B, H, T, head_dim)` → `(B, T, H * head_dim)`, which must
#   also work when `x` is not contiguous (for instance the output of `split_heads`).
#
# `merge_heads(split_heads(x, H))` must give back `x`.
#
# <details><summary>Hint</summary>
#
# Read the sizes from `x.shape` first. In `split_heads`, cut the last axis into two axes, then
# swap two axes. In `merge_heads`, undo the two steps in the opposite order, and remember what
# `view` needs from its input.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u06_split_heads", "locked": false, "schema_version": 3, "solution": true, "task": false}
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, num_heads, T, D // num_heads); head h gets features h*hd ... (h+1)*hd - 1."""
    ### BEGIN SOLUTION
    B, T, D = x.shape
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)  # (B, H, T, hd)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "u06_merge_heads", "locked": false, "schema_version": 3, "solution": true, "task": false}
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, head_dim) -> (B, T, H * head_dim), the heads side by side; x may be non-contiguous."""
    ### BEGIN SOLUTION
    B, H, T, hd = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * hd)  # (B, T, H, hd) -> (B, T, H * hd)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u06_split_merge_heads_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("split_heads")
check("merge_heads")
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Mistake, Spec, run

HEADS_LABELS = torch.tensor([[[100 * t + 10 * h + j for h in (1, 2) for j in (1, 2, 3)] for t in (1, 2, 3)]],
                            dtype=torch.float32)
HEADS_SHAPES = [(1, 4, 6, 2), (3, 5, 6, 3), (2, 1, 8, 4), (3, 7, 4, 2), (1, 3, 12, 2), (2, 2, 9, 3)]  # (B, T, D, H)


def split_examples():
    return [Case("the labelled (1, 3, 6) tensor, 2 heads", x=HEADS_LABELS.clone(), num_heads=2),
            Case("entries numbered 0 to 23 in a (2, 2, 6) batch, 3 heads", x=torch.arange(24.0).view(2, 2, 6),
                 num_heads=3)]


def split_cases(g):
    return [Case(f"B={b}, T={t}, D={d}, {h} heads", x=torch.randn(b, t, d, generator=g), num_heads=h)
            for b, t, d, h in HEADS_SHAPES]


def call_split_heads(x, num_heads):
    return split_heads(x, num_heads)


def split_oracle(x, num_heads):
    B, T, D = x.shape
    return x.double().unflatten(-1, (num_heads, D // num_heads)).permute(0, 2, 1, 3)


def split_mistakes(x, num_heads):
    B, T, D = x.shape
    hd = D // num_heads
    yield Mistake("you reshaped straight to (B, num_heads, T, head_dim): view only re-reads the memory, so tokens "
                  "and heads get mixed; cut the feature axis into heads first, then swap two axes",
                  x.reshape(B, num_heads, T, hd))
    yield Mistake("you stopped at (B, T, num_heads, head_dim): the head axis must come before the token axis",
                  x.reshape(B, T, num_heads, hd))
    yield Mistake("you cut the features as (head_dim, num_heads), which deals them out to the heads like cards; head "
                  "h must own a block of consecutive features", x.reshape(B, T, hd, num_heads).permute(0, 3, 1, 2))
    yield Mistake("you swapped num_heads and head_dim: the result must have num_heads in axis 1 and head_dim last",
                  x.reshape(B, T, hd, num_heads).transpose(1, 2))


def merge_examples():
    heads = HEADS_LABELS.view(1, 3, 2, 3).transpose(1, 2).contiguous()  # (1, 2, 3, 3): the labelled example split
    return [Case("the labelled example after split_heads (not contiguous)", heads=heads, layout="split"),
            Case("the labelled example as attention returns it, (1, 2, 3, 3) contiguous", heads=heads.clone(),
                 layout="contiguous")]


def merge_cases(g):
    cases = []
    for k, (b, t, d, h) in enumerate(HEADS_SHAPES):
        layout = ("contiguous", "split", "strided")[k % 3]
        cases.append(Case(f"B={b}, {h} heads, T={t}, head_dim={d // h}, {layout} input",
                          heads=torch.randn(b, h, t, d // h, generator=g), layout=layout))
    return cases


def call_merge_heads(heads, layout):
    """`heads` (B, H, T, hd) handed over in one of three memory layouts: contiguous, as after
    split_heads (a transposed (B, T, H, hd)), or a transposed (B, H, hd, T)."""
    if layout == "split":
        heads = heads.transpose(1, 2).contiguous().transpose(1, 2)
    elif layout == "strided":
        heads = heads.transpose(-2, -1).contiguous().transpose(-2, -1)
    try:
        return merge_heads(heads)
    except RuntimeError as exc:
        if "view size is not compatible" in str(exc):
            raise RuntimeError("merge_heads called .view() on a tensor that is not contiguous (after a "
                               "transpose the memory is still in the old order); view needs contiguous "
                               "memory") from None
        raise


def merge_oracle(heads):
    return torch.cat(heads.double().unbind(1), dim=-1)  # head 0's features first


def merge_mistakes(heads):
    B, H, T, hd = heads.shape
    yield Mistake("you flattened (B, H, T, head_dim) straight into (B, T, H * head_dim) without moving the head axis "
                  "back next to head_dim first: tokens and heads get mixed", heads.reshape(B, T, H * hd))
    yield Mistake("you flattened the last axes in the order (head_dim, H): each head's features must stay together, "
                  "head 0's first", heads.permute(0, 2, 3, 1).reshape(B, T, H * hd))
    yield Mistake("you moved the head axis back but did not flatten it with head_dim: the result must be "
                  "(B, T, H * head_dim)", heads.transpose(1, 2))


run(Spec("split_heads", call_split_heads, split_oracle,
         examples=split_examples, cases=split_cases, mistakes=split_mistakes),
    Spec("merge_heads", call_merge_heads, merge_oracle,
         examples=merge_examples, cases=merge_cases, mistakes=merge_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# A round trip gives back the input exactly, and the labelled example splits as in the picture:

# %%
x_demo = torch.randn(2, 5, 12)
print(torch.equal(merge_heads(split_heads(x_demo, 3)), x_demo))
print(split_heads(labels, 2)[0, 1])  # head 1: tens digit 2 everywhere, tokens 1, 2, 3


# %% [markdown]
# ## 5. The efficient multi-head attention
#
# Now the whole module, in the order the data flows:
#
# 1. three projections `W_query`, `W_key`, `W_value`, each `d_in → d_out` — one product each
#    for all heads;
# 2. split each into heads: `(B, H, T, head_dim)` with `head_dim = d_out // num_heads`;
# 3. scores `q @ kᵀ`, shape `(B, H, T, T)`: one `T × T` score matrix per head, all computed
#    in one batched product;
# 4. scale by $\sqrt{\text{head\_dim}}$: each head's dot product sums `head_dim` terms, not
#    `d_out`, so its variance grows with `head_dim` (unit 04);
# 5. causal mask, cut to the `T` tokens of the batch; softmax over the keys; dropout on the
#    weights;
# 6. weights `@` values: `(B, H, T, head_dim)`; merge the heads: `(B, T, d_out)`;
# 7. an **output projection** `out_proj`, `d_out → d_out` with a bias. Concatenation only puts
#    the heads side by side; `out_proj` lets every output feature combine what all heads
#    found. (The stacked wrapper had no such layer.)
#
# Note the change of meaning of `d_out`: in the wrapper it is the width of *one* head, here
# it is the width of *all* heads together, so `d_out` must be divisible by `num_heads`.
#
# One of our source articles writes a module that returns `(output, attention_weights)` and
# masks with `mask == 0` and `-1e9`. Our contract is different: `forward` returns the
# context tensor only, and you are free to pick your mask convention as long as the future
# is blocked.

# %% [markdown]
# ### Exercise — `MultiHeadAttention` (about 25 minutes)
#
# **Goal:** `MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)`
# with exactly these attributes:
# - `num_heads`, `head_dim` (an `int`), `d_out`;
# - `W_query`, `W_key`, `W_value`: `nn.Linear(d_in, d_out, bias=qkv_bias)`;
# - `out_proj`: `nn.Linear(d_out, d_out)` (always with a bias);
# - `dropout`: `nn.Dropout(dropout)`, applied to the attention weights;
# - a buffer `mask` (`register_buffer`) for `context_length` tokens.
#
# Raise a `ValueError` that says what is wrong when `d_out` is not divisible by `num_heads`.
# `forward(x)`: `(B, T, d_in)` → `(B, T, d_out)` for any `T ≤ context_length`.
#
# <details><summary>Hint</summary>
#
# Your `split_heads` and `merge_heads` do steps 2 and 6. `k.transpose(-2, -1)` swaps the last
# two axes of a 4-D tensor, so `q @ k.transpose(-2, -1)` works head by head. The mask buffer is
# `context_length × context_length`: which part of it applies to a batch of `T` tokens?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u06_multi_head_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention with one projection per role, split into heads.

    Attributes: num_heads, head_dim (= d_out // num_heads), d_out, W_query, W_key, W_value
    (d_in -> d_out), out_proj (d_out -> d_out, with bias), dropout (on the weights), buffer mask.
    forward: x (B, T, d_in) -> context (B, T, d_out), T <= context_length; each head's scores
    are scaled by 1/sqrt(head_dim), the width of that head's keys.
    Raises ValueError when d_out is not divisible by num_heads."""

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        if d_out % num_heads != 0:
            raise ValueError(f"d_out ({d_out}) must be divisible by num_heads ({num_heads})")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))  # (context_length, context_length)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, d_in) -> q, k, v (B, H, T, head_dim) -> scores (B, H, T, T) -> mask, softmax, dropout
        # -> weights @ v (B, H, T, head_dim) -> merge (B, T, d_out) -> out_proj (B, T, d_out)
        ### BEGIN SOLUTION
        num_tokens = x.shape[1]
        queries = split_heads(self.W_query(x), self.num_heads)                   # (B, H, T, hd)
        keys = split_heads(self.W_key(x), self.num_heads)                        # (B, H, T, hd)
        values = split_heads(self.W_value(x), self.num_heads)                    # (B, H, T, hd)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(self.head_dim)     # (B, H, T, T)
        scores = scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))                    # (B, H, T, T)
        context = merge_heads(weights @ values)                                  # (B, T, d_out)
        return self.out_proj(context)                                            # (B, T, d_out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u06_multi_head_attention_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("MultiHeadAttention")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.inputs import JOURNEY, QKV, linear_state
from grader.spec import Case, Exact, Mistake, Spec, build, dropout_seen, run


def mha_case(g, x, d_out, num_heads, dropout=0.0, qkv_bias=False, context_length=8, train=False, scale=1.0, label=""):
    if isinstance(x, tuple):  # a shape (B, T, d_in): random inputs
        x = scale * torch.randn(*x, generator=g)
    d_in = x.shape[-1]
    state = {**linear_state(g, QKV, d_in, d_out, qkv_bias), **linear_state(g, ("out_proj",), d_out, d_out, True)}
    mode = "train()" if train else "eval()"
    return Case(label or f"x {tuple(x.shape)}, d_out={d_out}, {num_heads} heads, qkv_bias={qkv_bias}, "
                         f"dropout={dropout} in {mode} mode" + (f", inputs of size about {scale}" if scale != 1 else ""),
                x=x, d_in=d_in, d_out=d_out, context_length=context_length, dropout=dropout, num_heads=num_heads,
                qkv_bias=qkv_bias, state=state, train=train)


def mha_examples():
    g = torch.Generator().manual_seed(6)
    return [mha_case(g, torch.stack([JOURNEY, JOURNEY]), d_out=4, num_heads=2,
                     label="the journey batch (2, 6, 3), d_out=4, 2 heads, context_length 8"),
            mha_case(g, torch.stack([JOURNEY, JOURNEY]), d_out=6, num_heads=2,
                     label="the journey batch, d_out=6, 2 heads of 3 features (num_heads ≠ head_dim)")]


def mha_cases(g):
    return [mha_case(g, (1, 1, 5), d_out=6, num_heads=3, dropout=0.2, qkv_bias=True),
            mha_case(g, (3, 5, 4), d_out=6, num_heads=2, dropout=0.3),
            mha_case(g, (2, 7, 6), d_out=8, num_heads=4, dropout=0.1, qkv_bias=True),
            mha_case(g, (1, 4, 3), d_out=12, num_heads=2, scale=3.0),
            mha_case(g, (3, 3, 3), d_out=4, num_heads=4, dropout=0.5, qkv_bias=True)]


def call_multi_head_attention(x, d_in, d_out, context_length, dropout, num_heads, qkv_bias, state):
    module = build(MultiHeadAttention, state, d_in, d_out, context_length, dropout, num_heads, qkv_bias=qkv_bias)
    try:
        with dropout_seen(), torch.no_grad():  # dropout is judged apart, below
            out = module(x)
    except RuntimeError as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        if "view size is not compatible" in text:
            raise RuntimeError("forward called .view() on a tensor that is not contiguous (after a transpose "
                               "the memory is still in the old order); view needs contiguous memory") from None
        if "must match the size" in text and x.shape[1] < context_length:
            raise RuntimeError(f"{text} (the batch has T={x.shape[1]} tokens but the mask covers "
                               f"context_length={context_length}: is the mask cut to the batch's length?)") from None
        raise
    if isinstance(out, (tuple, list)):
        raise TypeError("forward returned a tuple (the context and the weights?); return the context tensor only")
    return out


def mha_parts(x, state, num_heads, scale_dim=None, split="right", merge="right", mask="before", softmax_dim=-1,
              projections=QKV):
    """Reference multi-head attention in float64, with switches that reproduce known mistakes:
    the scores, masked scores, weights, merged context and output."""
    p = {k: v.double() for k, v in state.items()}
    B, T, _ = x.shape
    d_out = p["W_query.weight"].shape[0]
    hd = d_out // num_heads

    def to_heads(y):                                                   # (B, T, d_out) -> (B, H, T, hd)
        if split == "view":
            return y.reshape(B, num_heads, T, hd)
        if split == "interleaved":
            return y.reshape(B, T, hd, num_heads).permute(0, 3, 1, 2)
        return y.reshape(B, T, num_heads, hd).transpose(1, 2)

    q, k, v = (to_heads(x.double() @ p[f"{n}.weight"].T + p.get(f"{n}.bias", 0.0)) for n in projections)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale_dim or hd)      # (B, H, T, T)
    blocked = {"before": future, "inverted": ~future, "past": future.T,
               "diagonal": future | torch.eye(T, dtype=torch.bool)}.get(mask)
    masked = scores if blocked is None else scores.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(masked, dim=softmax_dim)
    if mask == "after":
        weights = weights.masked_fill(future, 0.0)
    ctx = weights @ v                                                  # (B, H, T, hd)
    if split == "interleaved":
        ctx = ctx.permute(0, 2, 3, 1).reshape(B, T, d_out)
    else:
        ctx = (ctx.transpose(1, 2) if merge == "right" else ctx).reshape(B, T, d_out)
    out = ctx @ p["out_proj.weight"].T + p["out_proj.bias"]
    return {"scores": scores, "masked scores": masked, "weights": weights, "context": ctx, "output": out}


def sorted_values(t):
    return t.flatten().sort().values


def mha_oracle(x, d_out, num_heads, state):
    # PyTorch's own kernel for the attention, all in float64
    s = {k: v.double() for k, v in state.items()}
    B, T, _ = x.shape
    heads = [(x.double() @ s[f"{n}.weight"].T + s.get(f"{n}.bias", 0.0)).unflatten(-1, (num_heads, -1)).transpose(1, 2)
             for n in QKV]
    ctx = F.scaled_dot_product_attention(*heads, is_causal=True)       # (B, H, T, hd)
    return ctx.transpose(1, 2).reshape(B, T, d_out) @ s["out_proj.weight"].T + s["out_proj.bias"]


def mha_mistakes(x, d_out, num_heads, state):
    def output(**switches):
        return mha_parts(x, state, num_heads, **switches)["output"]

    yield Mistake("you scaled the scores by √d_out; each head's dot product sums only head_dim terms, so scale by "
                  "√head_dim", output(scale_dim=d_out))
    head_dim = d_out // num_heads
    if head_dim != num_heads:   # split into head_dim heads of num_heads features each
        yield Mistake("you split the features into head_dim heads of num_heads features each: split_heads (and the "
                      "view) take num_heads, the number of heads; each head gets head_dim features",
                      mha_parts(x, state, head_dim, scale_dim=head_dim)["output"])
    yield Mistake("out_proj is not applied: the merged heads must go through the output projection",
                  mha_parts(x, state, num_heads)["context"])
    yield Mistake("the keys were made with W_query: the keys come from W_key (and the values from W_value)",
                  output(projections=("W_query", "W_query", "W_value")))
    yield Mistake("the values were made with W_key: the values come from W_value",
                  output(projections=("W_query", "W_key", "W_key")))
    view = ("you reshaped the projections straight to (B, num_heads, T, head_dim) without a transpose{}: view only "
            "re-reads the memory, so tokens and heads get mixed")
    yield Mistake(view.format(""), output(split="view"))
    yield Mistake(view.format(" (and back the same way)"), output(split="view", merge="flat"))
    yield Mistake("you merged the heads without moving the head axis back next to head_dim before flattening: tokens "
                  "and heads get mixed", output(merge="flat"))
    yield Mistake("you cut the features into (head_dim, num_heads), which deals them out to the heads like cards; "
                  "head h must own a block of consecutive features", output(split="interleaved"))
    yield Mistake("the output depends on future tokens: apply the causal mask to the scores", output(mask="none"))
    yield Mistake("you masked the weights after the softmax, so the rows no longer sum to 1; mask the scores before "
                  "the softmax", output(mask="after"))
    yield Mistake("the softmax runs over the wrong axis: each query's weights over the keys (the last axis) must sum "
                  "to 1", output(softmax_dim=-2))
    yield Mistake("your mask blocks the past and lets the future through: masked_fill blocks where the mask is True, "
                  "so check which convention your mask uses", output(mask="inverted"))
    yield Mistake("your mask also blocks each token's own position (the diagonal), so the first token sees nothing: "
                  "only keys after the query are blocked", output(mask="diagonal"))
    yield Mistake("your mask is the mirror image of the causal one: it blocks the past (below the diagonal) and lets "
                  "the future through. The blocked part lies above the diagonal: torch.triu(..., diagonal=1)",
                  output(mask="past"))


def mha_dropout_examples():
    g = torch.Generator().manual_seed(6)
    return [mha_case(g, torch.stack([JOURNEY, JOURNEY]), d_out=4, num_heads=2, dropout=0.5, train=mode == "train()",
                     label=f"the journey batch (2, 6, 3), d_out=4, 2 heads, dropout 0.5 in {mode} mode: what is "
                           "dropout applied to?")
            for mode in ("train()", "eval()")]


def call_multi_head_attention_dropout(x, d_in, d_out, context_length, dropout, num_heads, qkv_bias, state, train):
    """Every value dropout received (sorted), with dropout made the identity."""
    module = build(MultiHeadAttention, state, d_in, d_out, context_length, dropout, num_heads, qkv_bias=qkv_bias,
                   train=train)
    with dropout_seen() as log, torch.no_grad():
        module(x)
    return log.values()


def mha_dropout_oracle(x, num_heads, state, train):
    return sorted_values(mha_parts(x, state, num_heads)["weights"]) if train else torch.zeros(0, dtype=torch.float64)


def mha_dropout_mistakes(x, num_heads, state, train):
    parts = {name: sorted_values(value) for name, value in mha_parts(x, state, num_heads).items()}
    if not train:
        for value in parts.values():
            yield Mistake("in eval() mode your output is random: dropout must act only in training mode "
                          "(self.dropout, an nn.Dropout, knows the mode; a bare F.dropout does not)", value)
        return
    at = {"scores": "the scores, before the softmax",
          "masked scores": "the masked scores, before the softmax (a dropped -inf turns into NaN)",
          "context": "the merged context, before out_proj", "output": "the output of out_proj"}
    for where, text in at.items():
        yield Mistake(f"in training mode you applied dropout to {text}; apply it to the attention weights "
                      "(after the softmax)", parts[where])
    raw = mha_parts(x, state, num_heads)
    for where, text in (("output", "the output of out_proj"), ("context", "the merged context")):
        both = sorted_values(torch.cat([raw["weights"].flatten(), raw[where].flatten()]))
        yield Mistake(f"in training mode you applied dropout twice, to the attention weights and to {text} "
                      "(nanoGPT's residual dropout, which belongs to the transformer block, not here); in "
                      "MultiHeadAttention apply it to the attention weights only", both)
    yield Mistake("in training mode your output is the same as in eval mode: apply self.dropout to the attention "
                  "weights", torch.zeros(0, dtype=torch.float64))


def mha_dropout_cases(g):
    return [mha_case(g, (2, 5, 4), d_out=6, num_heads=3, dropout=0.5, qkv_bias=True, context_length=6, train=True),
            mha_case(g, (1, 7, 5), d_out=8, num_heads=4, dropout=0.1, train=True),
            mha_case(g, (3, 3, 3), d_out=4, num_heads=4, dropout=0.5)]


def mha_attribute_examples():
    return [Case(f"num_heads, head_dim and d_out of MultiHeadAttention(3, {do}, 5, 0.0, num_heads={h})", d_in=3,
                 d_out=do, context_length=5, num_heads=h) for do, h in ((6, 2), (7, 2))]


def mha_attribute_cases(g):
    return [Case(f"d_in={di}, d_out={do}, num_heads={h}", d_in=di, d_out=do, context_length=5, num_heads=h)
            for di, do, h in ((4, 8, 8), (5, 12, 3), (4, 6, 4), (3, 4, 3))]


def call_multi_head_attention_attributes(d_in, d_out, context_length, num_heads):
    try:
        module = MultiHeadAttention(d_in, d_out, context_length, 0.0, num_heads)
    except NotImplementedError:
        raise
    except Exception as exc:
        return f"raised {type(exc).__name__}"
    return f"num_heads={module.num_heads!r}, head_dim={module.head_dim!r}, d_out={module.d_out!r}"


def mha_attribute_oracle(d_out, num_heads):
    if d_out % num_heads:
        return "raised ValueError"
    return f"num_heads={num_heads!r}, head_dim={d_out // num_heads!r}, d_out={d_out!r}"


def mha_attribute_mistakes(d_out, num_heads):
    float_head_dim = f"num_heads={num_heads!r}, head_dim={d_out / num_heads!r}, d_out={d_out!r}"
    if d_out % num_heads:
        built = (f"MultiHeadAttention(d_out={d_out}, num_heads={num_heads}) was built without complaint: raise a "
                 "ValueError when d_out is not divisible by num_heads")
        yield Mistake(built, f"num_heads={num_heads!r}, head_dim={d_out // num_heads!r}, d_out={d_out!r}")
        yield Mistake(built, float_head_dim)
        yield Mistake("you raised an AssertionError (an assert); raise a ValueError with a message instead",
                      "raised AssertionError")
    else:
        yield Mistake("head_dim must be an int: use integer division", float_head_dim)


run(Spec("MultiHeadAttention", call_multi_head_attention, mha_oracle, examples=mha_examples, cases=mha_cases,
         mistakes=mha_mistakes),
    Spec("MultiHeadAttention", call_multi_head_attention_dropout, mha_dropout_oracle, examples=mha_dropout_examples,
         cases=mha_dropout_cases, mistakes=mha_dropout_mistakes),
    Spec("MultiHeadAttention", call_multi_head_attention_attributes, mha_attribute_oracle,
         examples=mha_attribute_examples, cases=mha_attribute_cases, mistakes=mha_attribute_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Our batch through a module with 2 heads of width 2 (so `d_out = 4`):

# %%
torch.manual_seed(123)
mha = MultiHeadAttention(d_in=3, d_out=4, context_length=context_length, dropout=0.0, num_heads=2)
mha_out = mha(batch)
print(mha_out.shape)  # (2, 6, 4)
print(mha_out[0])
try:
    MultiHeadAttention(d_in=3, d_out=5, context_length=context_length, dropout=0.0, num_heads=2)
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ### The wrapper and the efficient module compute the same thing
#
# Claim: the efficient module *is* the stack of heads, with the heads' weight matrices stacked
# as row blocks of one projection, plus `out_proj`. Test it: copy the wrapper's two heads
# (width 2 each) into the row blocks of a `d_out = 4` module and make `out_proj` the identity.

# %%
with torch.no_grad():
    for name in ("W_query", "W_key", "W_value"):
        stacked = torch.cat([getattr(head, name).weight for head in wrapper.heads], dim=0)  # (H * hd, d_in)
        getattr(mha, name).weight.copy_(stacked)
    mha.out_proj.weight.copy_(torch.eye(4))
    mha.out_proj.bias.zero_()
    print("same output as the wrapper:", torch.allclose(mha(batch), wrapper(batch), atol=1e-6))


# %% [markdown]
# This only works because each head's scores are scaled by $\sqrt{\text{head\_dim}}$ — the
# width of one head, which is what each `CausalAttention` head of the wrapper uses. Scaling by
# $\sqrt{d_{out}}$ would make every head's softmax flatter than a single head of the same width.
#
# ### A heat map per head
#
# Each head has its own `T × T` attention weights. `forward` returns only the context, so we
# recompute the weights from the module's projections with your `split_heads`. Below, a fresh
# module with 4 heads of width 2 looks at the journey sentence. The default initialisation
# draws small weights, which give almost uniform attention; to let each head's own
# preferences show without any training, we redraw its query and key weights with a larger
# spread. Each head now attends differently — one mostly to *Your*, another to *journey* and
# *starts*. This is only a first picture: random weights show that heads *can* look at
# different things, not that a model *needs* them to. Section 6 measures that.

# %%
def head_weights(module: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """The attention weights of every head, (B, H, T, T), in eval mode (no dropout)."""
    num_tokens = x.shape[1]
    with torch.no_grad():
        queries = split_heads(module.W_query(x), module.num_heads)              # (B, H, T, hd)
        keys = split_heads(module.W_key(x), module.num_heads)                   # (B, H, T, hd)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(module.head_dim)  # (B, H, T, T)
        scores = scores.masked_fill(causal_mask(num_tokens, device=x.device), float("-inf"))
        return torch.softmax(scores, dim=-1)


torch.manual_seed(1)
four_heads = MultiHeadAttention(d_in=3, d_out=8, context_length=context_length, dropout=0.0, num_heads=4)
with torch.no_grad():
    for layer in (four_heads.W_query, four_heads.W_key):
        layer.weight.normal_(mean=0.0, std=2.0)  # (8, 3), a larger spread than the default initialisation
weights = head_weights(four_heads, batch)[0]  # (H, T, T) for the first sentence of the batch

fig, axes = plt.subplots(1, 4, figsize=(14, 3.6))
for h, ax in enumerate(axes):
    ax.imshow(weights[h].numpy(), cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(words)), words, rotation=60)
    ax.set_yticks(range(len(words)), words if h == 0 else [])
    ax.set_title(f"head {h}")
fig.suptitle("Attention weights of each head (rows: queries, columns: keys)")
fig.tight_layout()
show()

# %% [markdown]
# ## 6. Why several heads? A task that needs two
#
# Can one wide head not do the work of two narrow ones? Not always, and a small training run
# shows why. Here is a task built so that every answer needs two tokens at once:
#
# - a sequence has 10 tokens, and each token is a vector of 4 random numbers (an embedding
#   drawn at random: no two sequences are alike, so there is nothing to memorise);
# - one of the first four tokens is **marked**: a learned "mark" vector is added to its
#   embedding;
# - at every position from 5 to 9 the model must output 8 numbers: the 4 numbers of the token
#   **just before** it and the 4 numbers of the **marked** token.
#
# The answers start at position 5 so that the token just before is never the marked one. The
# model is as small as it gets: an embedding (the token's numbers through a linear layer, plus
# a learned vector per position, plus the mark), your `MultiHeadAttention`, and a linear
# layer that reads the 8 answers off each position's output. The loss is the mean squared
# error: answering all zeros scores 1, since the random numbers have variance 1.
#
# We train it with **one head of width 16** and with **two heads of width 8**: the same total
# width and the same number of parameters (the count does not depend on the number of heads,
# as section 8 shows). Three seeds each, 400 steps of Adam on batches of 64 sequences: a few
# seconds on one CPU thread.

# %%
NUM_TOKENS, VEC_DIM, WIDTH = 10, 4, 16  # tokens per sequence, numbers per token, model width (all heads)
MARKABLE, FIRST_SCORED = 4, 5           # the mark falls on one of tokens 0-3; answers at positions 5-9


def lookup_batch(batch_size: int, generator: torch.Generator):
    """Random sequences for the task: vectors (B, T, 4), marks (B, T) (1.0 on the marked token),
    the marked positions (B,), and the targets (B, T - FIRST_SCORED, 8): at each answer position,
    the numbers of the token just before it, then those of the marked token."""
    vectors = torch.randn(batch_size, NUM_TOKENS, VEC_DIM, generator=generator)       # (B, T, 4)
    marked = torch.randint(0, MARKABLE, (batch_size,), generator=generator)           # (B,)
    marks = F.one_hot(marked, NUM_TOKENS).float()                                      # (B, T)
    before = vectors[:, FIRST_SCORED - 1:-1]                                           # (B, 5, 4): tokens 4-8
    chosen = vectors[torch.arange(batch_size), marked][:, None].expand_as(before)      # (B, 5, 4)
    targets = torch.cat([before, chosen], dim=-1)                                      # (B, 5, 8)
    return vectors.to(device), marks.to(device), marked.to(device), targets.to(device)


class LookupModel(nn.Module):
    """Embedding -> MultiHeadAttention (width 16, num_heads heads) -> linear readout of 8 numbers."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.vec_emb = nn.Linear(VEC_DIM, WIDTH)            # a token's 4 numbers -> WIDTH
        self.pos_emb = nn.Embedding(NUM_TOKENS, WIDTH)      # one learned vector per position
        self.mark_emb = nn.Parameter(torch.randn(WIDTH))    # added to the marked token only
        self.att = MultiHeadAttention(WIDTH, WIDTH, NUM_TOKENS, 0.0, num_heads)
        self.readout = nn.Linear(WIDTH, 2 * VEC_DIM)

    def embed(self, vectors: torch.Tensor, marks: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(vectors.shape[1], device=vectors.device)
        return self.vec_emb(vectors) + self.pos_emb(positions) + marks[..., None] * self.mark_emb  # (B, T, WIDTH)

    def forward(self, vectors: torch.Tensor, marks: torch.Tensor) -> torch.Tensor:
        return self.readout(self.att(self.embed(vectors, marks)))[:, FIRST_SCORED:]         # (B, 5, 8)


def train_lookup(num_heads: int, seed: int, steps: int):
    """A fresh LookupModel trained with Adam; returns the model and the loss of every step."""
    torch.manual_seed(seed)
    model = LookupModel(num_heads).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        vectors, marks, _, targets = lookup_batch(64, generator)
        loss = F.mse_loss(model(vectors, marks), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


def test_errors(model: LookupModel) -> tuple[float, float, float]:
    """Mean squared error on the test sequences: all 8 numbers, the token before, the marked token."""
    with torch.no_grad():
        error = ((model(test_vectors, test_marks) - test_targets) ** 2).mean(dim=(0, 1))  # (8,)
    return error.mean().item(), error[:VEC_DIM].mean().item(), error[VEC_DIM:].mean().item()


test_vectors, test_marks, test_marked, test_targets = lookup_batch(1000, torch.Generator().manual_seed(1000))

# %%
steps = 150 if QUICK else 400
seeds = (1,) if QUICK else (0, 1, 2)  # under grading: one seed whose two heads find their jobs early
runs = {(num_heads, seed): train_lookup(num_heads, seed, steps) for num_heads in (1, 2) for seed in seeds}

fig, ax = plt.subplots(figsize=(7, 3.5))
for (num_heads, seed), (_model, losses) in runs.items():
    label = f"{num_heads} head{'s' if num_heads > 1 else ''} of width {WIDTH // num_heads}" if seed == seeds[0] else None
    ax.plot(losses, "-" if num_heads == 1 else "--", color="tab:red" if num_heads == 1 else "tab:blue", alpha=0.7,
            label=label)
ax.axhline(0.5, color="gray", linestyle=":", label="one fixed weighted average (see below)")
ax.set(xlabel="training step", ylabel="mean squared error", ylim=(0, 1.2),
       title=f"The token before and the marked token, {len(seeds)} seed(s) each")
ax.grid(alpha=0.3)
ax.legend()
show()

for num_heads in (1, 2):
    print(f"{num_heads} head(s): {sum(p.numel() for p in runs[num_heads, seeds[0]][0].parameters())} parameters")
finals = {}
for (num_heads, seed), (model, _) in runs.items():
    finals[num_heads, seed], before_error, marked_error = test_errors(model)
    print(f"{num_heads} head(s), seed {seed}: test loss {finals[num_heads, seed]:.4f} "
          f"(token before {before_error:.3f}, marked token {marked_error:.3f})")
print(f"two heads: largest test loss {max(v for (h, _), v in finals.items() if h == 2):.4f}; "
      f"one head: smallest {min(v for (h, _), v in finals.items() if h == 1):.4f}")

# %% [markdown]
# Two heads bring the loss down to almost exactly 0 in every run (some only after a plateau
# near 0.5, while both heads still look at the same token). One head stalls around 0.4 to 0.5,
# about half of where it started; training it longer lets some runs creep a little lower,
# never anywhere near 0. Look at how the one head's error splits: most runs answer one of the
# two tokens almost perfectly and the other not at all.
#
# Why? A head's output at a position is **one** weighted average of the values of the tokens
# it looks at. Say the single head puts weight $w$ on the token just before (numbers $a$) and
# $1 - w$ on the marked token (numbers $b$). The value projection is linear and the
# embedding is a sum (token + position + mark), so the part of the output that depends on the
# two tokens is a linear function of $w\,a + (1 - w)\,b$: a mix of the two vectors, and
# only the mix. With $w = 1$ the readout gets $a$ perfectly and $b$ not at all; with
# $w = \tfrac12$ it gets their average, from which neither comes back whole. The cell below
# measures the best possible guess of $a$ and $b$ from the mix, for several $w$ (for random
# numbers like these the best guess is a linear one, so a least-squares fit finds it).

# %%
generator = torch.Generator().manual_seed(0)
a, b = torch.randn(2, 100_000, generator=generator, dtype=torch.float64)  # the two tokens' numbers
both = torch.stack([a, b], dim=1)                                          # (N, 2): what must come back
for w in (1.0, 0.9, 0.7, 0.5):
    mix = (w * a + (1 - w) * b)[:, None]                                   # (N, 1): all one head passes on
    guess = mix @ torch.linalg.lstsq(mix, both).solution                   # (N, 2): the best linear guess
    error = ((guess - both) ** 2).mean(dim=0)
    print(f"w = {w:.1f}: error on a {error[0]:.2f}, on b {error[1]:.2f}, mean {error.mean():.2f}")

# %% [markdown]
# Whatever the split, half of the variance is lost: 0.5 is the floor of a head that always
# divides its attention the same way, the dotted line of the plot. Runs that end a little
# below it found the one way around: the scores also depend on the tokens' own numbers, so a
# head can tilt its split from one sequence to the next. That buys a little, never anything
# near 0. Two heads need no trick: each takes its own weighted average, one with its weight on
# the token before and the other on the marked token, and the concatenation keeps both
# vectors whole for `out_proj` and the readout.
#
# The attention maps of the trained models (the first seed) show it. Each row is an answer
# position, each column a key; the marked key is starred.

# %%
example = int((test_marked == 2).nonzero()[0])  # the first test sequence whose mark is on token 2
fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
panels = [(1, 0), (2, 0), (2, 1)]  # (number of heads, head)
for ax, (num_heads, h) in zip(axes, panels):
    model = runs[num_heads, seeds[0]][0]
    weights = head_weights(model.att, model.embed(test_vectors, test_marks))[:, :, FIRST_SCORED:]  # (N, H, 5, T)
    marked = test_marked[example].item()
    ax.imshow(weights[example, h].cpu().numpy(), cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(NUM_TOKENS), [f"{j}*" if j == marked else str(j) for j in range(NUM_TOKENS)])
    ax.set_yticks(range(NUM_TOKENS - FIRST_SCORED), [str(t) for t in range(FIRST_SCORED, NUM_TOKENS)])
    ax.set(xlabel="key position (* = marked)", ylabel="answer position",
           title=f"1 head of width {WIDTH}" if num_heads == 1 else f"2 heads of width {WIDTH // 2}: head {h}")
fig.suptitle("Learned attention weights on one test sequence")
fig.tight_layout()
show()

answer_rows = torch.arange(FIRST_SCORED, NUM_TOKENS, device=device)
for num_heads in (1, 2):
    model = runs[num_heads, seeds[0]][0]
    weights = head_weights(model.att, model.embed(test_vectors, test_marks))[:, :, FIRST_SCORED:]  # (N, H, 5, T)
    on_before = weights[:, :, answer_rows - FIRST_SCORED, answer_rows - 1].mean(dim=(0, 2))      # (H,)
    marked_keys = test_marked.view(-1, 1, 1, 1).expand(*weights.shape[:3], 1)                   # (N, H, 5, 1)
    on_marked = weights.gather(-1, marked_keys).mean(dim=(0, 2, 3))                             # (H,)
    for h in range(num_heads):
        print(f"{num_heads} head(s), head {h}: weight on the token before {on_before[h]:.3f}, "
              f"on the marked token {on_marked[h]:.3f} (mean over {len(test_marked)} test sequences)")

# %% [markdown]
# In the two-head model one head's map is a diagonal (each answer position $t$ looks at key
# $t - 1$, the token before it) and the other head's map is a single bright column, the marked
# token; which head takes which job depends on the seed. The single head has to choose: it
# commits to one of the two, or divides its weight between them, and either way half of the
# answer is missing. This is what "several heads look from several angles" means in practice:
# not extra width — both models have the same — but several separate weighted averages.

# %% [markdown]
# ## 7. PyTorch's own `nn.MultiheadAttention`
#
# PyTorch ships the same computation as `nn.MultiheadAttention(embed_dim, num_heads, ...)`.
# Its query input must have `embed_dim` features, so it corresponds to our module with
# `d_in == d_out == embed_dim`. Its parameters are laid out differently:

# %%
torch_mha_demo = nn.MultiheadAttention(embed_dim=6, num_heads=3, bias=True, batch_first=True)
for name, param in torch_mha_demo.named_parameters():
    print(f"{name:18} {tuple(param.shape)}")


# %% [markdown]
# - **`in_proj_weight`, shape `(3E, E)`**: the query, key and value weights *packed* into one
#   matrix, stacked along the rows in the order **query, key, value**: rows `0 … E-1` are
#   $W_q$, rows `E … 2E-1` are $W_k$, rows `2E … 3E-1` are $W_v$. Each block is stored as
#   `nn.Linear` stores its weight, `(out_features, in_features)`, and applied as
#   $x W^\top$ — so our `W_query.weight` goes in as it is, without a transpose. PyTorch
#   computes all three projections with one product and cuts the result into thirds.
# - **`in_proj_bias`, shape `(3E,)`**: the three biases, same order. With `bias=True` it
#   always exists; where our module has no q/k/v biases (`qkv_bias=False`) we put zeros.
# - **`out_proj`**: an `nn.Linear(E, E)` with a bias, like ours.
#
# Three more things to know before calling it:
# - `batch_first=True` makes it read `(B, T, E)`; the default is `(T, B, E)`.
# - `forward(query, key, value, ...)` takes the three inputs separately; for self-attention
#   pass `x` three times. It returns `(output, weights)`; `need_weights=False` skips the weights.
# - A **boolean** `attn_mask` means **True = not allowed**, the same convention as our
#   `causal_mask` — and the *opposite* of `F.scaled_dot_product_attention`, where True means
#   "may attend" (unit 05). Its `dropout` acts on the attention weights in training mode, as ours.
#
# ### Exercise — `to_torch_mha(mha)` (about 20 minutes)
#
# **Goal:** given your `MultiHeadAttention` with `d_in == d_out`, return an
# `nn.MultiheadAttention(embed_dim=mha.d_out, num_heads=mha.num_heads, bias=True, batch_first=True)`
# with dropout 0, in `eval()` mode, on the same device and dtype as `mha`, holding the same
# weights, so that `torch_mha(x, x, x, attn_mask=causal_mask(T), need_weights=False)[0]` equals
# `mha(x)` (with `mha` in eval mode). Missing q/k/v biases become zeros.
#
# <details><summary>Hint</summary>
#
# Parameters are changed in place inside `with torch.no_grad():`, for example with `.copy_(...)`.
# `torch.cat` along dim 0 stacks matrices on top of each other; mind the order. A bias that
# does not exist is `None`: `torch.zeros(...)` stands in for it. What does `.eval()` return?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u06_to_torch_mha", "locked": false, "schema_version": 3, "solution": true, "task": false}
def to_torch_mha(mha: nn.Module) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention equal to `mha` (a MultiHeadAttention with d_in == d_out).

    embed_dim=mha.d_out, num_heads=mha.num_heads, bias=True, batch_first=True, dropout 0,
    eval() mode, same device and dtype. Absent q/k/v biases become zeros."""
    ### BEGIN SOLUTION
    E = mha.d_out
    if mha.W_query.in_features != E:
        raise ValueError(f"nn.MultiheadAttention needs d_in == d_out; got d_in={mha.W_query.in_features}, d_out={E}")
    ref = mha.out_proj.weight
    torch_mha = nn.MultiheadAttention(E, mha.num_heads, dropout=0.0, bias=True, batch_first=True,
                                      device=ref.device, dtype=ref.dtype)
    projections = (mha.W_query, mha.W_key, mha.W_value)  # PyTorch's order: query, key, value
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([p.weight for p in projections], dim=0))  # (3E, E)
        torch_mha.in_proj_bias.copy_(torch.cat([p.bias if p.bias is not None else torch.zeros_like(ref[0])
                                                for p in projections]))                   # (3E,)
        torch_mha.out_proj.weight.copy_(mha.out_proj.weight)                               # (E, E)
        torch_mha.out_proj.bias.copy_(mha.out_proj.bias)                                   # (E,)
    return torch_mha.eval()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u06_to_torch_mha_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("to_torch_mha")
### BEGIN HIDDEN TESTS
import itertools
import math

import torch
import torch.nn as nn

from grader.inputs import QKV, linear_state
from grader.spec import Case, Mistake, NotAsAsked, Spec, Tuple, attempt, build, run

TOMHA_DROPOUT = 0.2  # the dropout of the module handed to to_torch_mha; the copy must use 0
TOMHA_PARTS = "; part 0: (batch_first, training, dropout), part 1: torch_mha(x, x, x, attn_mask=causal_mask(T))[0]"


def tomha_state(g, E, qkv_bias):
    return {**linear_state(g, QKV, E, E, qkv_bias), **linear_state(g, ("out_proj",), E, E, True)}


def tomha_examples():
    g = torch.Generator().manual_seed(6)
    return [Case("x (2, 5, 6), embed_dim 6, 3 heads, qkv_bias=True, context_length 8" + TOMHA_PARTS,
                 x=torch.randn(2, 5, 6, generator=g), context_length=8, num_heads=3, qkv_bias=True,
                 state=tomha_state(g, 6, True), dropout=TOMHA_DROPOUT),
            tomha_case(g, (1, 3, 4), num_heads=2, context_length=4, dtype="float64")]


def tomha_case(g, shape, num_heads, context_length, qkv_bias=False, dtype="float32"):
    return Case(f"x {shape}, embed_dim {shape[-1]}, {num_heads} heads, context_length={context_length}, "
                f"qkv_bias={qkv_bias}" + ("" if dtype == "float32" else f", the module in {dtype}") + TOMHA_PARTS,
                x=torch.randn(*shape, generator=g), context_length=context_length, num_heads=num_heads,
                qkv_bias=qkv_bias, state=tomha_state(g, shape[-1], qkv_bias), dropout=TOMHA_DROPOUT, dtype=dtype)


def tomha_cases(g):
    return [tomha_case(g, (1, 1, 4), num_heads=2, context_length=3),
            tomha_case(g, (3, 5, 6), num_heads=2, context_length=7),
            tomha_case(g, (2, 6, 8), num_heads=4, context_length=6, qkv_bias=True),
            tomha_case(g, (1, 4, 6), num_heads=3, context_length=9),
            tomha_case(g, (2, 3, 4), num_heads=2, context_length=5, qkv_bias=True, dtype="float64")]


def call_to_torch_mha(x, context_length, num_heads, qkv_bias, state, dropout, dtype="float32"):
    mha = build(MultiHeadAttention, state, x.shape[-1], x.shape[-1], context_length, dropout, num_heads,
                qkv_bias=qkv_bias, train=True)  # the copy must come out in eval() mode all the same
    mha, x = mha.to(getattr(torch, dtype)), x.to(getattr(torch, dtype))
    try:
        torch_mha = to_torch_mha(mha)
    except TypeError as exc:
        if "NoneType" in str(exc):
            raise TypeError(f"{str(exc).splitlines()[0]} (with qkv_bias=False your module's q/k/v biases are "
                            "None: put zeros in their place)") from None
        raise
    if not isinstance(torch_mha, nn.MultiheadAttention):
        raise TypeError(f"to_torch_mha returned {type(torch_mha).__name__}, not an nn.MultiheadAttention")
    if torch_mha.in_proj_weight.dtype != x.dtype:
        raise NotAsAsked(f"the nn.MultiheadAttention you return is in {torch_mha.in_proj_weight.dtype}, your module in "
                         f"{x.dtype}: build it with the module's dtype and device (dtype=, device= from "
                         "mha.out_proj.weight)")
    copied, ours = torch_mha.out_proj.weight.detach(), mha.out_proj.weight.detach()
    if copied.shape == ours.shape and not (torch.allclose(copied, ours) or torch.allclose(copied, ours.T)):
        raise NotAsAsked("the output projection was not copied: torch_mha.out_proj still has the weights "
                         "nn.MultiheadAttention was built with; copy your module's out_proj.weight and out_proj.bias "
                         "into it")
    flags = torch.tensor([float(torch_mha.batch_first), float(torch_mha.training), float(torch_mha.dropout)])
    T = x.shape[1]
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    torch.manual_seed(0)
    with torch.no_grad():  # an error here is judged as part 1, after the flags
        out = attempt(lambda: torch_mha(x, x, x, attn_mask=blocked, need_weights=False)[0])
    return flags, out


def tomha_reference(x, state, num_heads, order=(0, 1, 2), bias_order=(0, 1, 2), transpose_in=False,
                    transpose_out=False, qkv_bias_zero=False, out_bias_zero=False):
    """What an nn.MultiheadAttention computes from the weights packed in `order`, in float64."""
    s = {k: v.double() for k, v in state.items()}
    x = x.double()
    B, T, E = x.shape
    out = []
    for role in range(3):
        name, bias_name = QKV[order[role]], QKV[bias_order[role]]
        w = s[f"{name}.weight"].T if transpose_in else s[f"{name}.weight"]
        b = 0.0 if qkv_bias_zero else s.get(f"{bias_name}.bias", 0.0)
        out.append((x @ w.T + b).reshape(B, T, num_heads, E // num_heads).transpose(1, 2))  # (B, H, T, hd)
    q, k, v = out
    scores = q @ k.transpose(-2, -1) / math.sqrt(E // num_heads)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    ctx = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, E)
    w_out = s["out_proj.weight"].T if transpose_out else s["out_proj.weight"]
    return ctx @ w_out.T + (0.0 if out_bias_zero else s["out_proj.bias"])


def tomha_oracle(x, num_heads, state):
    return torch.tensor([1.0, 0.0, 0.0]), tomha_reference(x, state, num_heads)


def tomha_mistakes(x, num_heads, qkv_bias, state, dropout):
    """Values are (flags, output); None where the mistake says nothing about that part."""
    for batch_first, training, kept_dropout in itertools.product((1.0, 0.0), (0.0, 1.0), (0.0, dropout)):
        problems = []
        if not batch_first:
            problems.append("was built without batch_first=True (it reads (T, B, E), not (B, T, E))")
        if training:
            problems.append("is still in training mode (call .eval() on it)")
        if kept_dropout:
            problems.append(f"has your module's dropout {dropout} (give it dropout 0)")
        if problems:
            yield Mistake("the nn.MultiheadAttention you return " + " and ".join(problems),
                          (torch.tensor([batch_first, training, kept_dropout]), None))
    roles = ("query", "key", "value")
    for order in itertools.permutations(range(3)):
        if order != (0, 1, 2) and x.shape[1] > 1:  # with one token only the value block matters
            packed = ", ".join(roles[i] for i in order)
            yield Mistake(f"you packed the blocks of in_proj_weight and in_proj_bias as ({packed}): that is not the "
                          "order in which nn.MultiheadAttention reads them",
                          (None, tomha_reference(x, state, num_heads, order=order, bias_order=order)))
            yield Mistake(f"you packed the blocks of in_proj_weight as ({packed}): that is not the order in which "
                          "nn.MultiheadAttention reads them", (None, tomha_reference(x, state, num_heads, order=order)))
    transposed = ("you transposed the weights: in_proj_weight and out_proj.weight are stored like an nn.Linear "
                  "weight, (out_features, in_features)")
    for switches in ({"transpose_in": True}, {"transpose_out": True}, {"transpose_in": True, "transpose_out": True}):
        yield Mistake(transposed, (None, tomha_reference(x, state, num_heads, **switches)))
    if qkv_bias:
        yield Mistake("in_proj_bias is zero although your module has query, key and value biases: copy them in",
                      (None, tomha_reference(x, state, num_heads, qkv_bias_zero=True)))
    yield Mistake("out_proj.bias was not copied (it is still zero)",
                  (None, tomha_reference(x, state, num_heads, out_bias_zero=True)))
    for heads in (1, x.shape[-1]):
        if heads != num_heads:
            yield Mistake(f"the nn.MultiheadAttention has {heads} head{'s' if heads > 1 else ''} instead of "
                          f"{num_heads}: use mha.num_heads", (None, tomha_reference(x, state, heads)))


run(Spec("to_torch_mha", call_to_torch_mha, tomha_oracle, examples=tomha_examples, cases=tomha_cases,
         mistakes=tomha_mistakes, judge=Tuple()))
### END HIDDEN TESTS

# %% [markdown]
# The proof: a module with biases everywhere, a batch of 5 tokens, and the same causal mask
# for both. The largest difference is at the level of float32 rounding.

# %%
torch.manual_seed(42)
ours = MultiHeadAttention(d_in=6, d_out=6, context_length=context_length, dropout=0.1, num_heads=3, qkv_bias=True)
ours.eval()  # no dropout in eval mode
theirs = to_torch_mha(ours)
x_check = torch.randn(2, 5, 6)
with torch.no_grad():
    ours_out = ours(x_check)
    theirs_out = theirs(x_check, x_check, x_check, attn_mask=causal_mask(5), need_weights=False)[0]
print("same output:", torch.allclose(ours_out, theirs_out, atol=1e-6))
print("largest difference:", (ours_out - theirs_out).abs().max().item())
print("rows 0-5 of in_proj_weight are W_query:", torch.equal(theirs.in_proj_weight[:6], ours.W_query.weight))

# %% [markdown]
# Flip the mask convention and the equality breaks: with `~causal_mask(5)` PyTorch blocks the
# past and the token itself instead of the future.

# %%
with torch.no_grad():
    flipped = theirs(x_check, x_check, x_check, attn_mask=~causal_mask(5), need_weights=False)[0]
print("equal with the flipped mask:", torch.allclose(ours_out[:, :-1], flipped[:, :-1], atol=1e-6))
print("last token's output:", flipped[0, -1])
print("out_proj.bias:      ", theirs.out_proj.bias.detach())


# %% [markdown]
# (The last token is left out of that comparison: with the flipped mask it may attend to
# nothing, the fully-masked-row pitfall of unit 05. What PyTorch returns for such a row depends
# on the code path: either the attention gives zeros, which `out_proj` turns into its bias —
# compare the two rows printed above — or it gives NaN (with `need_weights=True`, for one).
# Either way the row means nothing.)
#
# ## 8. Counting parameters
#
# Where do the parameters of a multi-head attention layer sit? Three projections `d_in → d_out`
# (plus `d_out` biases each when `qkv_bias=True`) and the output projection `d_out → d_out`
# with its bias. The number of heads does not appear: the heads *share out* one projection
# of width `d_out`, they do not each get their own.
#
# ### Exercise — `mha_param_count(d_in, d_out, num_heads, qkv_bias=False)` (about 5 minutes)
#
# **Goal:** return, as a Python `int`, the number of parameters of
# `MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias)`, computed from
# the sizes (the mask is a buffer, not a parameter). Raise a `ValueError` when `d_out` is not
# divisible by `num_heads`, as the module does.
#
# <details><summary>Hint</summary>
#
# An `nn.Linear(n_in, n_out)` has `n_in * n_out` weights and, with a bias, `n_out` more. List
# the four linear layers and which of them have a bias.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u06_mha_param_count", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mha_param_count(d_in: int, d_out: int, num_heads: int, qkv_bias: bool = False) -> int:
    """Number of parameters of MultiHeadAttention(d_in, d_out, ..., num_heads, qkv_bias)."""
    ### BEGIN SOLUTION
    if d_out % num_heads != 0:
        raise ValueError(f"d_out ({d_out}) must be divisible by num_heads ({num_heads})")
    qkv = 3 * (d_in * d_out + (d_out if qkv_bias else 0))  # W_query, W_key, W_value
    out = d_out * d_out + d_out                            # out_proj, always with a bias
    return qkv + out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u06_mha_param_count_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("mha_param_count")
### BEGIN HIDDEN TESTS
from grader.spec import Case, Exact, Mistake, Spec, run


def count_examples():
    return [Case("d_in=3, d_out=6, 2 heads", d_in=3, d_out=6, num_heads=2),
            Case("GPT-2 small: 768, 768, 12 heads, qkv_bias=True", d_in=768, d_out=768, num_heads=12, qkv_bias=True),
            Case("d_in=3, d_out=5, 2 heads (5 is not divisible by 2)", d_in=3, d_out=5, num_heads=2)]


def count_cases(g):
    return [Case(f"d_in={di}, d_out={do}, {h} heads, qkv_bias={qb}", d_in=di, d_out=do, num_heads=h, qkv_bias=qb)
            for di, do, h, qb in ((5, 9, 3, False), (5, 9, 3, True), (8, 4, 4, True), (3, 12, 2, False),
                                  (4, 6, 4, False), (4, 7, 2, True))]


def call_mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    try:
        return mha_param_count(d_in, d_out, num_heads, qkv_bias=qkv_bias)
    except NotImplementedError:
        raise
    except Exception as exc:
        return f"raised {type(exc).__name__}"


def count_formula(d_in, d_out, qkv_bias):
    return 3 * d_in * d_out + (3 * d_out if qkv_bias else 0) + d_out * d_out + d_out


def count_oracle(d_in, d_out, num_heads, qkv_bias=False):
    return "raised ValueError" if d_out % num_heads else count_formula(d_in, d_out, qkv_bias)


def count_mistakes(d_in, d_out, num_heads, qkv_bias=False):
    full = count_formula(d_in, d_out, qkv_bias)
    if d_out % num_heads:
        yield Mistake(f"you returned a count although d_out={d_out} is not divisible by num_heads={num_heads}: raise "
                      "a ValueError, as the module does", full)
        yield Mistake("you raised an AssertionError (an assert); raise a ValueError instead", "raised AssertionError")
        return
    yield Mistake("you left out out_proj's bias: out_proj always has one", full - d_out)
    yield Mistake("you left out the output projection out_proj (d_out × d_out weights and a bias)",
                  full - d_out * d_out - d_out)
    yield Mistake("the count does not depend on num_heads: the heads share out one projection of width d_out, they "
                  "do not each get their own", full + (num_heads - 1) * 3 * d_in * d_out)
    yield Mistake("out_proj maps d_out features to d_out features, not d_in to d_out", full - d_out * d_out + d_in * d_out)
    if qkv_bias:
        yield Mistake("with qkv_bias=True the query, key and value projections each have a bias of d_out numbers",
                      full - 3 * d_out)
    else:
        yield Mistake("you counted query, key and value biases although qkv_bias=False", full + 3 * d_out)
        yield Mistake("you counted query, key and value biases although qkv_bias=False, and left out out_proj's bias",
                      full + 2 * d_out)


run(Spec("mha_param_count", call_mha_param_count, count_oracle, examples=count_examples, cases=count_cases,
         mistakes=count_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Check the formula against the modules themselves: `sum(p.numel() for p in module.parameters())`
# counts every parameter PyTorch knows about. The mask is a buffer, so it is not counted.

# %%
for d_in, d_out, num_heads, qkv_bias in [(3, 6, 2, False), (6, 6, 3, True), (768, 768, 12, True), (768, 768, 1, True)]:
    module = MultiHeadAttention(d_in, d_out, context_length, 0.0, num_heads, qkv_bias=qkv_bias)
    counted = sum(p.numel() for p in module.parameters())
    formula = mha_param_count(d_in, d_out, num_heads, qkv_bias=qkv_bias)
    assert counted == formula, f"formula {formula} but the module has {counted} parameters"
    print(f"d_in={d_in:4} d_out={d_out:4} heads={num_heads:2} qkv_bias={qkv_bias!s:5}: {counted:>9,} parameters")

stack = MultiHeadAttentionWrapper(768, 64, context_length, 0.0, num_heads=12)
print(f"wrapper with 12 heads of width 64: {sum(p.numel() for p in stack.parameters()):,} parameters (no out_proj)")

# %% [markdown]
# GPT-2 small uses 12 heads of width 64 on 768 features, with q/k/v biases: 2,362,368
# parameters per attention layer, whether split into 12 heads or 1. The wrapper with 12 heads
# of width 64 holds exactly the 3 × 768 × 768 = 1,769,472 query/key/value weights of the fused
# module, just cut into 36 small matrices, and lacks the output projection.
#
# ## Recap
#
# - Multi-head attention runs several heads on the same input, each with its own query, key
#   and value projections, so each can attend from its own angle; their outputs are
#   concatenated along the feature axis, then mixed by an output projection `out_proj`.
# - One head returns one weighted average of the values, so it cannot bring back two tokens
#   whole: on a task that needs the token before and a marked token, two heads of width 8
#   reach a loss near 0 while one head of width 16, with as many parameters, stalls around
#   0.4 to 0.5.
# - The efficient form computes one projection of width `d_out = num_heads × head_dim` per
#   role and splits it: `view(B, T, H, head_dim)` then `transpose(1, 2)`. A `view` straight to
#   `(B, H, T, head_dim)` has the right shape and the wrong content.
# - Going back needs a transpose and contiguous memory (`.contiguous().view(...)` or `reshape`).
# - Each head is scaled by $\sqrt{\text{head\_dim}}$; the mask is cut to the batch's length.
# - `nn.MultiheadAttention` packs $W_q, W_k, W_v$ as row blocks of `in_proj_weight` (3E, E),
#   in that order; a boolean `attn_mask` is True where attention is *not* allowed.
# - Parameters: $3\,(d_{in} d_{out} + [\text{qkv\_bias}]\, d_{out}) + d_{out}^2 + d_{out}$, whatever the number of heads.
#
# **Next — unit 07:** wrap your `MultiHeadAttention` with layer normalisation, a feed-forward
# network and residual connections into a transformer block.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
