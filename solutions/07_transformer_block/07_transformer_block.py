# %% [markdown]
# # Unit 07 — The transformer block
#
# Attention lets every token look at the tokens before it. On its own that is not a model yet:
# a GPT wraps each attention layer in a **transformer block** with three more ingredients —
# a normalisation that keeps the numbers in a healthy range, a small neural network applied to
# every token (the *feed-forward* layer, with a GELU inside), and *shortcut* connections that
# add each sub-layer's output to its input. GPT-2 stacks 12 of these blocks; unit 08 stacks a
# few of yours into a model that writes text.
#
# **By the end you will be able to**
# - write layer normalisation from its formula, say which of its numbers are computed and which
#   are learned, and match `nn.LayerNorm` to float32 precision;
# - write the GELU activation (tanh approximation) and say how it differs from ReLU;
# - build the position-wise feed-forward network with its 4× expansion;
# - explain, with a measured plot, why shortcut connections let gradients reach the first
#   layers of a deep stack (and how much of the vanishing comes from the initial weights), and
#   why GPTs put the normalisation *before* each sub-layer;
# - assemble a pre-norm `TransformerBlock` and count its parameters.
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
QUICK = bool(os.environ.get("NBGRADER_EXECUTION"))  # under grading, the experiments run a shorter version


# %% [markdown]
# ## 1. The block at a glance
#
# Here is one GPT-2 block, read from left to right. The input `x` has shape `(B, T, emb_dim)`:
# `B` sequences of `T` tokens, each token a vector of `emb_dim` numbers. The output has the
# same shape, so blocks can be stacked as deep as we like.
#
# ```
#  x ──┬──> LayerNorm ──> masked multi-head attention ──> dropout ──(+)──┬──> LayerNorm ──> feed-forward ──> dropout ──(+)──> out
#      │                                                              ▲  │                                                ▲
#      └─────────────────────────── shortcut ─────────────────────────┘  └─────────────────── shortcut ───────────────────┘
# ```
#
# Two sub-layers, each wrapped the same way: normalise, transform, drop out a few numbers
# during training, and **add the result back** to what came in. Attention is the only place
# where tokens exchange information; the feed-forward network then works on each token on its
# own.
#
# The multi-head attention is the one you built in unit 06. It is given below, read-only,
# with the same names (`W_query`, `W_key`, `W_value`, `out_proj`, `dropout`, buffer `mask`).

# %% nbgrader={"grade": false, "grade_id": "u07_given_mha", "locked": true, "schema_version": 3, "solution": false, "task": false}
class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention (unit 06's reference).

    forward: x (B, T, d_in) -> (B, T, d_out), for any T <= context_length. Dropout acts on the
    attention weights. Raises ValueError when d_out is not divisible by num_heads."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
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
        blocked = torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", blocked)  # (context_length, context_length), True = future token

    def forward(self, x):
        b, t, _ = x.shape                                                              # x: (B, T, d_in)
        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.W_key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)    # (B, H, T, hd)
        v = self.W_value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)                    # (B, H, T, T)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))                          # (B, H, T, T)
        context = (weights @ v).transpose(1, 2).reshape(b, t, self.d_out)              # (B, T, d_out)
        return self.out_proj(context)                                                  # (B, T, d_out)


# %% [markdown]
# ## 2. Layer normalisation
#
# As a vector passes through layer after layer, its numbers can drift: their average creeps
# away from zero and their spread grows or shrinks. Training is much easier when every layer
# receives numbers of a predictable size. **Layer normalisation** rescales each token's vector
# on its own, so that its `d` numbers have mean 0 and variance 1:
#
# $$\mu = \frac{1}{d}\sum_{i=1}^{d} v_i, \qquad
#   \sigma^2 = \frac{1}{d}\sum_{i=1}^{d} (v_i - \mu)^2, \qquad
#   \mathrm{LayerNorm}(v)_i = \gamma_i\,\frac{v_i - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta_i .$$
#
# - $\mu$ and $\sigma^2$ are **computed** afresh from every input vector. They are not
#   parameters and nothing about them is learned.
# - $\gamma$ (**scale**, starts at 1) and $\beta$ (**shift**, starts at 0) are the only
#   **learned** numbers: one of each per feature, `2·d` in all. They let the network undo the
#   normalisation where that helps.
# - $\varepsilon$ (`eps`, 1e-5) is a small constant *inside* the square root, so a vector whose
#   numbers are all equal ($\sigma^2 = 0$) gives $0 / \sqrt{\varepsilon} = 0$ instead of $0/0$.
# - The variance divides by $d$ (the *biased* variance), not by $d - 1$.
# - "Layer" means the statistics are taken over the features of one token (the last
#   dimension), never over the batch or over time. Each token is normalised independently,
#   so the result does not depend on which other sequences share the batch, and a batch of
#   one works just as well.
#
# **A formula to be careful with.** Some introductions write the denominator as
# $\sqrt{\sum_i (v_i-\mu)^2}$, without the $\frac{1}{d}$ and without $\varepsilon$, and call
# $\mu$ and $\sigma$ trainable. Without $\frac{1}{d}$ this is not the standard deviation: the
# result is $\sqrt{d}$ times too small (about 22 times for $d = 512$), so the output does *not*
# have variance 1. And, as above, $\mu$ and $\sigma$ are computed from the input; only
# $\gamma$ and $\beta$ are trained.
#
# **By hand.** Take $v = (2, 4, 6, 8)$, so $d = 4$. Then $\mu = 5$, the squared deviations are
# $9, 1, 1, 9$ and $\sigma^2 = 20 / 4 = 5$. With $\gamma = 1$, $\beta = 0$:
# $\mathrm{LayerNorm}(v) \approx (-3, -1, 1, 3) / \sqrt{5} = (-1.3416, -0.4472, 0.4472, 1.3416)$.
# The formula without $\frac{1}{d}$ divides by $\sqrt{20}$ instead and gives half of that.
# Dividing by $d - 1$ (the *unbiased* variance, $20 / 3$) gives $(-1.1619, -0.3873, 0.3873, 1.1619)$:
# close, but not LayerNorm. Watch out: `torch.var` and `Tensor.var` divide by $d - 1$ unless
# you pass `unbiased=False` (or `correction=0`). For $d = 768$ the two differ by 0.07 %, for
# $d = 4$ by 15 %.
#
# Here is the input of the self-check: two sequences of three tokens, four numbers per token.
# The first token is the vector above.

# %%
x_example = torch.tensor([[[2.0, 4.0, 6.0, 8.0], [1.0, 1.0, 1.0, 5.0], [0.5, -1.5, 2.5, 0.0]],
                          [[10.0, 0.0, -10.0, 4.0], [3.0, 3.5, 2.0, 2.5], [-1.0, -2.0, -3.0, -4.0]]])
print(x_example.shape)  # (B, T, emb_dim) = (2, 3, 4)


# %% [markdown]
# ### Exercise — `LayerNorm(emb_dim, eps=1e-5)` (about 15 minutes)
#
# **Goal:** a module with two learned parameters, `scale` (ones) and `shift` (zeros), each of
# shape `(emb_dim,)` and made with `nn.Parameter`, whose `forward` normalises every vector
# along the **last** dimension as in the formula above, for inputs of any number of leading
# dimensions (`(emb_dim,)`, `(T, emb_dim)`, `(B, T, emb_dim)`). Keep `eps` for `forward`.
#
# <details><summary>Hint</summary>
#
# `x.mean(dim=-1, keepdim=True)` has shape `(..., 1)` and broadcasts against `x`. Compute the
# variance the same way, as the mean of the squared deviations (or with `x.var`, but check its
# `unbiased` argument). Where does `eps` go: inside or outside the square root? The names of
# the two parameters matter: the grader copies its own values into `scale` and `shift`.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u07_layer_norm", "locked": false, "schema_version": 3, "solution": true, "task": false}
class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension.

    Parameters: scale (emb_dim,) initialised to ones, shift (emb_dim,) initialised to zeros.
    forward: x (..., emb_dim) -> same shape. Each vector along the last dim gets mean 0 and
    variance 1 (biased variance: divide by emb_dim; eps inside the square root), then
    scale * normalised + shift."""

    def __init__(self, emb_dim: int, eps: float = 1e-5):
        super().__init__()
        ### BEGIN SOLUTION
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(emb_dim))   # (emb_dim,) gamma, learned
        self.shift = nn.Parameter(torch.zeros(emb_dim))  # (emb_dim,) beta, learned
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        centred = x - x.mean(dim=-1, keepdim=True)                # (..., emb_dim), computed: mean 0 along the last dim
        var = (centred * centred).mean(dim=-1, keepdim=True)      # (..., 1), computed: divides by emb_dim
        normalised = centred / torch.sqrt(var + self.eps)         # (..., emb_dim)
        return self.scale * normalised + self.shift               # (..., emb_dim)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u07_layer_norm_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("LayerNorm")
### BEGIN HIDDEN TESTS
import torch
import torch.nn.functional as F

from grader.spec import Case, Mistake, Spec, build, run

LN_EXAMPLE = torch.tensor([[[2.0, 4.0, 6.0, 8.0], [1.0, 1.0, 1.0, 5.0], [0.5, -1.5, 2.5, 0.0]],
                           [[10.0, 0.0, -10.0, 4.0], [3.0, 3.5, 2.0, 2.5], [-1.0, -2.0, -3.0, -4.0]]])


def ln_state(g, d):
    return {"scale": 1.0 + 0.5 * torch.randn(d, generator=g), "shift": torch.randn(d, generator=g)}


def layer_norm_examples():
    g = torch.Generator().manual_seed(7)
    flat = 0.003 * torch.randn(3, 8, generator=g)
    flat[1] = 5.0  # a constant row: variance exactly 0
    offset = 1000.0 + 10.0 * torch.randn(2, 4, 16, generator=g)
    return [Case("the 2x3x4 example above, scale = 1 and shift = 0", x=LN_EXAMPLE.clone(),
                 state={"scale": torch.ones(4), "shift": torch.zeros(4)}),
            Case("the same input with other values of scale and shift", x=LN_EXAMPLE.clone(), state=ln_state(g, 4)),
            Case("rows whose variance is about eps, and one constant row (eps matters here)", x=flat,
                 state=ln_state(g, 8)),
            Case("rows around 1000 with a spread of 10 (in float32, mean(x**2) - mean(x)**2 loses the variance "
                 "here: subtract the mean first)", x=offset, state=ln_state(g, 16)),
            Case("eps=0.01 given as a keyword, rows with a small spread", state=ln_state(g, 8),
                 x=0.1 * torch.randn(2, 3, 8, generator=g), eps=0.01)]


def layer_norm_cases(g):
    cases = [Case(f"random input of shape {shape}", state=ln_state(g, shape[-1]),
                  x=torch.randn(*shape, generator=g) * spread + mean)
             for shape, spread, mean in (((8,), 1.0, 0.0), ((1, 6), 2.0, 1.0), ((1, 5, 8), 1.0, 0.0),
                                         ((3, 7, 32), 5.0, 2.0), ((2, 768), 0.5, -3.0))]
    cases.append(Case("eps=0.01 given as a keyword, rows with a small spread", state=ln_state(g, 8),
                      x=0.1 * torch.randn(2, 3, 8, generator=g), eps=0.01))
    return cases


def call_layer_norm(x, state, **options):  # options: eps, when the case gives it
    norm = build(LayerNorm, state, x.shape[-1], **options)
    with torch.no_grad():
        return norm(x)


def layer_norm_oracle(x, state, eps=1e-5):
    return F.layer_norm(x.double(), x.shape[-1:], state["scale"].double(), state["shift"].double(), eps)


def layer_norm_mistakes(x, state, eps=1e-5):
    x, scale, shift = x.double(), state["scale"].double(), state["shift"].double()
    centred, var = x - x.mean(-1, keepdim=True), x.var(-1, keepdim=True, correction=0)

    def norm(dims=-1, correction=0, eps_in=eps, eps_out=0.0, affine=True):
        std = torch.sqrt(x.var(dims, keepdim=True, correction=correction) + eps_in) + eps_out
        out = (x - x.mean(dims, keepdim=True)) / std
        return scale * out + shift if affine else out

    yield Mistake("you used the unbiased variance (dividing by emb_dim - 1, which is what torch.var does by default); "
                  "LayerNorm divides by emb_dim", norm(correction=1))
    yield Mistake("you added eps to the standard deviation; eps belongs inside the square root, added to the "
                  "variance", norm(eps_in=0.0, eps_out=eps))
    yield Mistake("you did not add eps: a row with zero variance divides 0 by 0; add eps to the variance",
                  norm(eps_in=0.0))
    yield Mistake("you divided by the square root of the *sum* of squared deviations; the variance is their *mean* "
                  "(divide the sum by emb_dim)",
                  scale * centred / torch.sqrt((centred ** 2).sum(-1, keepdim=True) + eps) + shift)
    yield Mistake("you did not apply `scale` and `shift` after normalising", norm(affine=False))
    yield Mistake("you did not subtract the mean: centre each vector before dividing by its standard deviation",
                  scale * x / torch.sqrt(var + eps) + shift)
    yield Mistake("you divided by the variance; divide by its square root (the standard deviation, with eps inside)",
                  scale * centred / (var + eps) + shift)
    yield Mistake("you swapped the roles of `scale` and `shift`: multiply by scale, then add shift",
                  shift * norm(affine=False) + scale)
    yield Mistake("you normalised over all the numbers of the input at once; each vector along the last dimension "
                  "gets its own mean and variance", norm(tuple(range(x.dim()))))
    for dim, least, name in ((-2, 2, "time dimension (dim -2)"), (0, 3, "batch dimension (dim 0)")):
        if x.dim() >= least:
            yield Mistake(f"you normalised over the {name}; normalise each token's vector over the last dimension "
                          "(the features)", norm(dim))
    if eps != 1e-5:
        yield Mistake("you ignored the `eps` argument (the result matches eps=1e-5); store it and use it in forward",
                      F.layer_norm(x, x.shape[-1:], scale, shift, 1e-5))


run(Spec("LayerNorm", call_layer_norm, layer_norm_oracle, examples=layer_norm_examples, cases=layer_norm_cases,
         mistakes=layer_norm_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Your module against PyTorch's own `nn.LayerNorm` (which calls its parameters `weight` and
# `bias`), with the same scale and shift, and against the two wrong formulas from the text.

# %%
norm = LayerNorm(4)
with torch.no_grad():
    norm.scale.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
    norm.shift.copy_(torch.tensor([0.0, 0.1, -0.2, 0.3]))
torch_norm = nn.LayerNorm(4, eps=1e-5)
torch_norm.load_state_dict({"weight": norm.scale.detach(), "bias": norm.shift.detach()})

with torch.no_grad():
    ours, theirs = norm(x_example), torch_norm(x_example)
print("largest difference from nn.LayerNorm:", (ours - theirs).abs().max().item())

v = x_example[0, 0]                                           # (4,) = [2, 4, 6, 8]
with torch.no_grad():
    print("LayerNorm, scale 1, shift 0:", LayerNorm(4)(v))
print("unbiased variance (d - 1):  ", (v - v.mean()) / torch.sqrt(v.var() + 1e-5))
print("no 1/d, no eps:             ", (v - v.mean()) / torch.sqrt(((v - v.mean()) ** 2).sum()))

with torch.no_grad():
    normed = LayerNorm(4)(x_example)                          # (2, 3, 4)
print("means of the normalised tokens:    ", normed.mean(dim=-1))
print("variances of the normalised tokens:", normed.var(dim=-1, unbiased=False))


# %% [markdown]
# Every token now has mean 0 and variance 1 (up to `eps`: the token $(1, 1, 1, 5)$ and all
# others have a variance far above 1e-5, so `eps` hardly shows). Two learned vectors of four
# numbers each are all the module trains: `sum(p.numel() for p in norm.parameters())` is 8.
#
# A word on float32. Another way to write the variance, $\overline{v^2} - \mu^2$, is correct
# on paper but subtracts two large, nearly equal numbers when the values sit far from zero
# (say around 1000 with a spread of 10): float32 keeps about 7 significant digits and the
# variance disappears in the rounding. Subtracting the mean *first*, as in the formula above,
# avoids that; the grader tests such an input.

# %% [markdown]
# ## 3. The GELU activation
#
# Between its two linear layers the feed-forward network needs a non-linearity. The original
# Transformer used ReLU, $\max(0, x)$, which cuts every negative number to zero. GPT-2 uses the
# **GELU** (Gaussian error linear unit), $x\,\Phi(x)$, where $\Phi$ is the cumulative
# distribution function of the standard normal distribution: a smooth curve that, like ReLU,
# is close to $x$ for large positive $x$ and close to 0 for large negative $x$, but bends
# gently around 0 and lets small negative values through (its minimum is about −0.17 near
# $x \approx -0.75$). Its gradient is non-zero for negative inputs, so a neuron whose input
# went negative can still learn.
#
# $\Phi$ needs the error function `erf`. GPT-2 was trained with a cheaper approximation, and
# that is the one we use:
#
# $$\mathrm{GELU}(x) \approx 0.5\,x\left(1 + \tanh\!\left(\sqrt{2/\pi}\,\left(x + 0.044715\,x^3\right)\right)\right).$$
#
# The two versions differ by less than 5·10⁻⁴, small but far more than float32 rounding, so
# the grader can tell them apart.

# %% [markdown]
# ### Exercise — `GELU()` (about 10 minutes)
#
# **Goal:** an `nn.Module` with no parameters whose `forward(x)` applies the tanh
# approximation above to every entry of a tensor of any shape.
#
# <details><summary>Hint</summary>
#
# `torch.tanh` works entry by entry, and `math.sqrt(2.0 / math.pi)` is a plain Python number.
# Check your formula at $x = 1$: the result should be about 0.8412.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u07_gelu", "locked": false, "schema_version": 3, "solution": true, "task": false}
class GELU(nn.Module):
    """GELU activation, tanh approximation (as in GPT-2). forward: any shape -> same shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + torch.tanh(inner))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u07_gelu_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("GELU")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.spec import Case, Mistake, Spec, run


def gelu_examples():
    return [Case("x from -3 to 3 in steps of 0.5", x=torch.linspace(-3.0, 3.0, 13)),
            Case("large inputs: x = -100, -10, 10, 100 (tanh saturates; exp-based formulas overflow)",
                 x=torch.tensor([-100.0, -10.0, 10.0, 100.0]))]


def gelu_cases(g):
    return [Case("a single number (0-d tensor)", x=torch.tensor(0.7)),
            Case("random input of shape (5,)", x=2.0 * torch.randn(5, generator=g)),
            Case("random input of shape (2, 3, 4)", x=1.5 * torch.randn(2, 3, 4, generator=g)),
            Case("large inputs (up to +-100): tanh saturates, exp-based formulas overflow",
                 x=torch.tensor([-100.0, -30.0, -10.0, -4.0, 4.0, 10.0, 30.0, 100.0]))]


def call_gelu(x):
    torch.manual_seed(0)
    with torch.no_grad():
        return GELU()(x)


def gelu_tanh_form(x, factor=math.sqrt(2.0 / math.pi), cubic=0.044715, half=0.5, power=3):
    return half * x * (1.0 + torch.tanh(factor * (x + cubic * x ** power)))


def gelu_mistakes(x):
    x = x.double()
    yield Mistake("you used the exact GELU (with erf, F.gelu's default); this exercise asks for the tanh "
                  "approximation", F.gelu(x))
    yield Mistake("you used ReLU; GELU is smooth and lets small negative values through", torch.relu(x))
    yield Mistake("the cubic term 0.044715 * x**3 is missing inside the tanh", gelu_tanh_form(x, cubic=0.0))
    yield Mistake("the term inside the tanh is 0.044715 * x**3, a cube; yours squares x (x**2)",
                  gelu_tanh_form(x, power=2))
    yield Mistake("the factor 0.5 in front is missing", gelu_tanh_form(x, half=1.0))
    yield Mistake("you used the sigmoid approximation x * sigmoid(1.702 * x); this exercise asks for the tanh formula",
                  x * torch.sigmoid(1.702 * x))
    for wrong, text in ((2.0 / math.pi, "2/pi"), (math.sqrt(2.0 * math.pi), "sqrt(2*pi)"),
                        (math.sqrt(math.pi / 2.0), "sqrt(pi/2)"), (1.0 / math.sqrt(2.0 * math.pi), "1/sqrt(2*pi)"),
                        (math.sqrt(2.0) / math.pi, "sqrt(2)/pi"), (1.0, "1")):
        yield Mistake(f"the factor in front of (x + 0.044715 * x**3) should be sqrt(2/pi), about 0.7979; yours looks "
                      f"like {text}", gelu_tanh_form(x, factor=wrong))


run(Spec("GELU", call_gelu, lambda x: F.gelu(x.double(), approximate="tanh"), examples=gelu_examples,
         cases=gelu_cases, mistakes=gelu_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Your GELU, PyTorch's `F.gelu(approximate="tanh")` and ReLU in one picture (left), and the
# gap between the tanh approximation and the exact erf version (right).

# %%
xs = torch.linspace(-4, 4, 201)
with torch.no_grad():
    yours = GELU()(xs)

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
left.plot(xs.numpy(), torch.relu(xs).numpy(), label="ReLU", color="tab:gray")
left.plot(xs.numpy(), yours.numpy(), "-.", label="your GELU", linewidth=3, alpha=0.6)
left.plot(xs.numpy(), F.gelu(xs, approximate="tanh").numpy(), "--", label="F.gelu(approximate='tanh')", color="black")
left.set(xlabel="x", ylabel="activation", title="GELU vs ReLU")
left.grid(alpha=0.3)
left.legend()
right.plot(xs.numpy(), (F.gelu(xs.double(), approximate="tanh") - F.gelu(xs.double())).numpy())
right.set(xlabel="x", ylabel="difference", title="tanh approximation minus exact GELU")
right.grid(alpha=0.3)
plt.tight_layout()
show()
print("your GELU vs PyTorch's:", (yours - F.gelu(xs, approximate="tanh")).abs().max().item())


# %% [markdown]
# ## 4. The feed-forward network
#
# After attention has mixed information between tokens, each token goes on its own through a
# small two-layer network: widen, apply the non-linearity, narrow back. The same weights are
# used at every position, which is why it is also called the *position-wise* feed-forward
# network.
#
# The original Transformer used vectors of 512 numbers, a hidden layer of 2048 and ReLU:
# $\mathrm{FFN}(x) = \max(0,\, xW_1 + b_1)\,W_2 + b_2$, so 512 → 2048 → 512. GPT-2 keeps the
# same shape, a hidden layer **4 times** as wide as the embedding (768 → 3072 → 768 in its
# smallest version), and swaps ReLU for GELU.

# %% [markdown]
# ### Exercise — `FeedForward(emb_dim)` (about 10 minutes)
#
# **Goal:** a module with one attribute `layers`, an `nn.Sequential` of
# `nn.Linear(emb_dim, 4 * emb_dim)`, your `GELU()` and `nn.Linear(4 * emb_dim, emb_dim)`, in
# that order (both linear layers with a bias), and a `forward` that applies it. Input and
# output shapes are `(..., emb_dim)`.
#
# <details><summary>Hint</summary>
#
# `nn.Sequential(a, b, c)` calls `a`, `b`, `c` in turn; its parameters are named by position
# (`layers.0.weight`, ...). The grader copies its weights in by those names and shapes, so
# keep exactly three entries in that order.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u07_feed_forward", "locked": false, "schema_version": 3, "solution": true, "task": false}
class FeedForward(nn.Module):
    """Position-wise feed-forward network: Linear(emb_dim, 4*emb_dim) -> GELU -> Linear(4*emb_dim, emb_dim).

    Attribute: layers (nn.Sequential). forward: x (..., emb_dim) -> (..., emb_dim)."""

    def __init__(self, emb_dim: int):
        super().__init__()
        ### BEGIN SOLUTION
        self.layers = nn.Sequential(
            nn.Linear(emb_dim, 4 * emb_dim),   # widen:  (..., emb_dim) -> (..., 4*emb_dim)
            GELU(),
            nn.Linear(4 * emb_dim, emb_dim),   # narrow: (..., 4*emb_dim) -> (..., emb_dim)
        )
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        return self.layers(x)  # (..., emb_dim)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u07_feed_forward_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("FeedForward")
### BEGIN HIDDEN TESTS
import torch
import torch.nn.functional as F

from grader.inputs import linear_state
from grader.spec import Case, Mistake, NotAsAsked, Spec, build, run


def ff_state(g, d):
    return {**linear_state(g, ("layers.0",), d, 4 * d, True, bias_size=0.5),
            **linear_state(g, ("layers.2",), 4 * d, d, True, bias_size=0.1)}


def feed_forward_examples():
    g = torch.Generator().manual_seed(11)
    return [Case("emb_dim 4, input of shape (2, 3, 4)", state=ff_state(g, 4), x=torch.randn(2, 3, 4, generator=g))]


def feed_forward_cases(g):
    return [Case(f"emb_dim {shape[-1]}, input of shape {shape}", state=ff_state(g, shape[-1]),
                 x=torch.randn(*shape, generator=g)) for shape in ((1, 1, 8), (5, 6), (2, 7, 16), (3, 4, 32))]


def call_feed_forward(state, x):
    ff = build(FeedForward, state, x.shape[-1])
    if any(isinstance(module, torch.nn.Dropout) for module in ff.modules()):   # it does nothing in eval()
        raise NotAsAsked("your FeedForward holds a Dropout: self.layers must hold exactly Linear, GELU and Linear, in "
                         "that order; the transformer block applies the dropout")
    with torch.no_grad():
        return ff(x)


def feed_forward_oracle(state, x, activation=lambda h: F.gelu(h, approximate="tanh")):
    s = {k: v.double() for k, v in state.items()}
    hidden = activation(x.double() @ s["layers.0.weight"].T + s["layers.0.bias"])  # (..., 4*emb_dim)
    return hidden @ s["layers.2.weight"].T + s["layers.2.bias"]                    # (..., emb_dim)


def feed_forward_mistakes(state, x):
    yield Mistake("you used ReLU between the two layers; GPT's feed-forward network uses GELU",
                  feed_forward_oracle(state, x, torch.relu))
    yield Mistake("the activation is the exact GELU (with erf); use the tanh approximation (your GELU)", feed_forward_oracle(state, x, F.gelu))
    yield Mistake("there is no activation between the two linear layers", feed_forward_oracle(state, x, lambda h: h))
    yield Mistake("you applied GELU after the second linear layer too: the feed-forward network ends with that layer, "
                  "and GELU goes only between the two", F.gelu(feed_forward_oracle(state, x), approximate="tanh"))
    yield Mistake("GELU comes after the second linear layer instead of between the two: put it between them",
                  F.gelu(feed_forward_oracle(state, x, lambda h: h), approximate="tanh"))


run(Spec("FeedForward", call_feed_forward, feed_forward_oracle, examples=feed_forward_examples,
         cases=feed_forward_cases, mistakes=feed_forward_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# The feed-forward network holds most of a block's parameters. For the original Transformer's
# sizes: $512 \cdot 2048 + 2048$ in the first layer and $2048 \cdot 512 + 512$ in the second.

# %%
def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


for emb_dim in (512, 768):
    formula = emb_dim * 4 * emb_dim + 4 * emb_dim + 4 * emb_dim * emb_dim + emb_dim
    print(f"FeedForward({emb_dim}): {count_parameters(FeedForward(emb_dim)):,} parameters (formula: {formula:,})")

with torch.no_grad():
    print(FeedForward(4)(x_example).shape)  # (2, 3, 4): same shape in and out


# %% [markdown]
# ## 5. Shortcut connections: the "Add" in "Add & Norm"
#
# Diagrams of the original Transformer label each sub-layer with "Add & Norm". The "Add" is
# the **shortcut** (or *residual*) connection: the sub-layer's output is added to its input,
# `x + sublayer(x)`, instead of replacing it. A common first explanation is that this keeps
# the information of the input from getting lost in the sub-layer. True, and there is a
# second, more important reason: **gradients**. Training adjusts the first layers using a
# gradient that flows back through every layer above them. Without shortcuts that gradient is
# multiplied by each layer's derivative in turn, and a product of many factors below 1
# shrinks towards zero: the first layers barely learn (the *vanishing gradient*). With
# `x + f(x)`, the derivative of a layer is `1 + f'(x)`: the gradient always has a direct path
# back.
#
# The experiment: 24 layers, each a `Linear(16, 16)` followed by your GELU, with and without
# shortcuts. One backward pass from the mean of the output; then the size (norm) of the
# gradient of each layer's weight matrix, on a logarithmic scale.

# %%
def gradient_norms(use_shortcut: bool, num_layers: int = 24, width: int = 16, init_gain: float | None = None,
                   init_seed: int = 321) -> tuple[list[float], float]:
    """Norm of the gradient of each layer's weight after one backward pass through a deep stack,
    and the spread (std) of the signal at the top. With init_gain=None the layers keep PyTorch's
    default initialisation; otherwise their weights are redrawn from N(0, init_gain² / width)
    and their biases set to 0."""
    torch.manual_seed(123)
    layers = nn.ModuleList([nn.Sequential(nn.Linear(width, width), GELU()) for _ in range(num_layers)]).to(device)
    if init_gain is not None:  # a generator of its own, so the input h below is the same in every run
        generator = torch.Generator().manual_seed(init_seed)
        with torch.no_grad():
            for layer in layers:
                layer[0].weight.copy_(torch.randn(width, width, generator=generator) * init_gain / math.sqrt(width))
                layer[0].bias.zero_()
    h = torch.randn(8, width, device=device)          # (batch, width)
    for layer in layers:
        out = layer(h)                                # (batch, width)
        h = h + out if use_shortcut else out
    h.mean().backward()
    return [layer[0].weight.grad.norm().item() for layer in layers], h.std().item()


(plain, _), (shortcut, _) = gradient_norms(False), gradient_norms(True)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.semilogy(range(1, 25), plain, "o-", color="tab:blue", label="without shortcuts")
ax.semilogy(range(1, 25), shortcut, "s--", color="tab:orange", label="with shortcuts")
ax.set(xlabel="layer (1 = first, next to the input)", ylabel="gradient norm (log scale)",
       title="Gradient reaching each layer of a 24-layer stack")
ax.grid(alpha=0.3)
ax.legend()
show()
print(f"without shortcuts: first layer {plain[0]:.1e}, last layer {plain[-1]:.1e}")
print(f"with shortcuts:    first layer {shortcut[0]:.1e}, last layer {shortcut[-1]:.1e}")
print(f"last layer / first layer without shortcuts: {plain[-1] / plain[0]:.1e}")

# %% [markdown]
# Without shortcuts the gradient shrinks by a roughly constant factor per layer: the first
# layer receives about a million million ($10^{12}$) times less than the last one, so with
# any sensible learning rate it does not learn at all. With shortcuts every
# layer gets a gradient of the same order. (The absolute values with shortcuts are large
# because, without any normalisation, the sum `h + out` keeps growing through the stack;
# the LayerNorms of the block take care of that.)
#
# How much of that $10^{12}$ is depth, and how much the starting weights? A good part is
# PyTorch's default initialisation. `nn.Linear(d_in, d_out)` draws its weights uniformly
# between $-1/\sqrt{d_{in}}$ and $1/\sqrt{d_{in}}$, a variance of $1/(3\,d_{in})$, so a layer
# multiplies the size of a signal by about $1/\sqrt 3 \approx 0.58$, forwards and backwards
# alike. GELU adds a factor of its own: near 0 its slope is ½. On its way down the gradient
# thus loses a factor of about $0.58 \times 0.5 \approx 0.3$ at every layer, and
# $0.3^{23} \approx 10^{-12}$. (Going forwards, the biases keep the signal from fading
# completely; nothing does that for the gradient.)
#
# A **variance-preserving** initialisation picks the spread of the weights so that a signal
# keeps its size: weights drawn from a normal distribution with variance $g^2/d_{in}$, biases
# 0, and a gain $g$ such that a standard-normal signal $z$ keeps variance 1 through the
# activation and the next `Linear`: $g = 1/\sqrt{\mathbb{E}[\mathrm{GELU}(z)^2]}$. For ReLU, which zeroes half of
# its input, $g = \sqrt 2$ (He's initialisation); for GELU the cell below measures it with
# your `GELU`, then redraws the plain stack with it (dashed line).

# %%
z = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    gelu_gain = 1 / GELU()(z).pow(2).mean().sqrt().item()  # W ~ N(0, gain² / d_in): Var(W GELU(z)) = 1
print(f"gain for GELU: {gelu_gain:.3f}")

preserved, _ = gradient_norms(False, init_gain=gelu_gain)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.semilogy(range(1, 25), plain, "o-", color="tab:blue", alpha=0.5, label="without shortcuts, default init")
ax.semilogy(range(1, 25), preserved, "s--", color="tab:green", label="without shortcuts, variance-preserving init")
ax.semilogy(range(1, 25), shortcut, "^:", color="tab:orange", alpha=0.5, label="with shortcuts, default init")
ax.set(xlabel="layer (1 = first, next to the input)", ylabel="gradient norm (log scale)",
       title="The same 24-layer stack, two initialisations")
ax.grid(alpha=0.3)
ax.legend()
show()


def spread(norms: list[float]) -> float:
    return max(norms) / min(norms)


print(f"largest / smallest gradient over the 24 layers: default init {spread(plain):.1e}, "
      f"variance-preserving init {spread(preserved):.1e}, with shortcuts {spread(shortcut):.1e}")
tops = [gradient_norms(False, init_gain=gelu_gain, init_seed=seed)[1] for seed in range(5)]
print("variance-preserving init, five random draws: std of the signal after 24 layers",
      ", ".join(f"{top:.1e}" for top in tops), f"(largest / smallest {max(tops) / min(tops):.0f})")


# %% [markdown]
# With weights of the right spread the first layer of the plain stack gets a gradient within
# a factor of about 100 of the last one instead of $10^{12}$: most of the vanishing in the
# first plot was the initialisation. Shortcuts are still what makes a deep stack safe to
# train. The balance above is a knife edge: it holds for one exact gain, for this activation,
# and only at the start of training. Each layer multiplies the signal by a random factor near
# 1, and 24 of them drift far: the size of the signal at the top changes by orders of
# magnitude from one random draw of the weights to the next (printed above), and training
# soon moves the weights away from their initial spread. A shortcut gives the gradient a path
# that does not depend on the weights at all.
#
# ## 6. Where the normalisation goes: post-norm and pre-norm
#
# The original Transformer, the one the "Add & Norm" diagrams show, normalises **after**
# adding: `x = LayerNorm(x + sublayer(x))` (*post-norm*). Every path from the output back to
# the input then passes through one LayerNorm per sub-layer, so even the shortcut path is
# rescaled at every step. Such models train, but they need a learning-rate *warm-up*
# (starting with a tiny learning rate and raising it over thousands of steps) and become hard
# to train as they get deeper.
#
# GPT-2 and nearly every large language model since normalise **before** the sub-layer:
# `x = x + sublayer(LayerNorm(x))` (*pre-norm*). The shortcut path is now a clean sum from the
# embeddings to the last block, untouched by any normalisation, so the gradient reaches every
# block directly. Because the sum itself is never normalised, a pre-norm GPT adds one final
# LayerNorm after the last block (you will see it in unit 08).
#
# A small experiment: two stacks of 12 feed-forward sub-layers (your `FeedForward` and
# `LayerNorm`), one post-norm and one pre-norm, trained with Adam on a made-up task (512
# random points in 16 dimensions, each labelled 0 to 9 by a small random network) with the
# same, fairly large learning rate and no warm-up.

# %%
class SubLayerStack(nn.Module):
    """num_layers feed-forward sub-layers with shortcuts, normalised before (pre) or after (post)."""

    def __init__(self, width: int, num_layers: int, num_classes: int, pre_norm: bool):
        super().__init__()
        self.pre_norm = pre_norm
        self.ffs = nn.ModuleList([FeedForward(width) for _ in range(num_layers)])
        self.norms = nn.ModuleList([LayerNorm(width) for _ in range(num_layers)])
        self.final_norm = LayerNorm(width) if pre_norm else nn.Identity()
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):                              # (batch, width)
        for ff, norm in zip(self.ffs, self.norms):
            x = x + ff(norm(x)) if self.pre_norm else norm(x + ff(x))
        return self.head(self.final_norm(x))           # (batch, num_classes)


def make_task(width: int = 16, num_points: int = 512, num_classes: int = 10):
    """Random points labelled by a small random network: a made-up classification task."""
    torch.manual_seed(0)
    points = torch.randn(num_points, width)                                 # (512, width)
    teacher = nn.Sequential(nn.Linear(width, 64), nn.Tanh(), nn.Linear(64, num_classes))
    with torch.no_grad():
        labels = teacher(points).argmax(dim=-1)                             # (512,)
    return points.to(device), labels.to(device)


def train_stack(pre_norm: bool, steps: int, lr: float = 3e-2, width: int = 16, num_layers: int = 12) -> list[float]:
    points, labels = make_task(width)
    model = SubLayerStack(width, num_layers, 10, pre_norm).to(device)     # same initial weights for both kinds
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(points), (64,), device=device)          # a random batch of 64 points
        loss = F.cross_entropy(model(points[idx]), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


steps = 20 if QUICK else 100
post_losses, pre_losses = train_stack(False, steps), train_stack(True, steps)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(post_losses, label="post-norm: norm(x + f(x))", alpha=0.8)
ax.plot(pre_losses, "--", label="pre-norm: x + f(norm(x))", alpha=0.8)
frequencies = torch.bincount(make_task()[1], minlength=10).float() / 512
floor = -(frequencies[frequencies > 0] * frequencies[frequencies > 0].log()).sum().item()
ax.axhline(floor, color="gray", linestyle=":", label="knowing only how often each label occurs")
ax.set(xlabel="training step", ylabel="cross-entropy loss", title="12 sub-layers, learning rate 0.03, no warm-up")
ax.grid(alpha=0.3)
ax.legend()
show()
print(f"mean loss over the last 10 steps: post-norm {sum(post_losses[-10:]) / 10:.3f}, "
      f"pre-norm {sum(pre_losses[-10:]) / 10:.3f}")


# %% [markdown]
# At this learning rate the post-norm stack stays stuck around the loss of a model that
# knows only how often each label occurs (the dotted line) and ignores the input, while the
# pre-norm stack learns. With a smaller learning
# rate, or a warm-up, both learn; pre-norm is simply more forgiving, and the more layers, the
# larger the gap. This is one small run on a toy task, not a proof, but it is the behaviour
# reported for real Transformers (Xiong et al., 2020, "On Layer Normalization in the
# Transformer Architecture").
#
# ## 7. The transformer block
#
# Time to put the pieces together. In the block, `dropout` is used twice: inside the
# attention (on the attention weights, already done by the given `MultiHeadAttention`) and on
# the output of each sub-layer **before** it is added to the shortcut (`drop_shortcut`). The
# shortcut itself is never dropped out. In `eval()` mode dropout does nothing.

# %% [markdown]
# ### Exercise — `TransformerBlock(emb_dim, num_heads, context_length, dropout, qkv_bias=False)` (about 20 minutes)
#
# **Goal:** a pre-norm block with the attributes
# - `att`: the given `MultiHeadAttention` from `emb_dim` to `emb_dim`, with `num_heads` heads,
#   `context_length`, `dropout` and `qkv_bias`;
# - `ff`: your `FeedForward(emb_dim)`;
# - `norm1`, `norm2`: two separate `LayerNorm(emb_dim)`, the first before the attention, the
#   second before the feed-forward network;
# - `drop_shortcut`: `nn.Dropout(dropout)`, applied to each sub-layer's output;
#
# and a `forward(x)` for `x` of shape `(B, T, emb_dim)` with `T <= context_length` that returns
# the same shape: first the attention sub-layer with its shortcut, then the feed-forward
# sub-layer with its shortcut, as in the diagram of section 1.
#
# <details><summary>Hint</summary>
#
# Each sub-layer is one line: the new `x` is the old `x` plus the dropped-out output of the
# sub-layer applied to the *normalised* `x`. Be careful not to overwrite `x` with its
# normalised version: the shortcut carries the un-normalised `x`. Check the order of the
# arguments of `MultiHeadAttention`.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u07_transformer_block", "locked": false, "schema_version": 3, "solution": true, "task": false}
class TransformerBlock(nn.Module):
    """Pre-norm transformer block.

    Attributes: att (MultiHeadAttention emb_dim -> emb_dim), ff (FeedForward), norm1, norm2
    (LayerNorm), drop_shortcut (nn.Dropout).
    forward: x (B, T, emb_dim) -> (B, T, emb_dim), T <= context_length. Pre-norm: each sub-layer
    (attention, then feed-forward) reads a normalised copy of x; its output, after drop_shortcut,
    is added to x."""

    def __init__(self, emb_dim: int, num_heads: int, context_length: int, dropout: float, qkv_bias: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.att = MultiHeadAttention(d_in=emb_dim, d_out=emb_dim, context_length=context_length,
                                      dropout=dropout, num_heads=num_heads, qkv_bias=qkv_bias)
        self.ff = FeedForward(emb_dim)
        self.norm1 = LayerNorm(emb_dim)
        self.norm2 = LayerNorm(emb_dim)
        self.drop_shortcut = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        x = x + self.drop_shortcut(self.att(self.norm1(x)))  # (B, T, emb_dim): attention sub-layer
        x = x + self.drop_shortcut(self.ff(self.norm2(x)))   # (B, T, emb_dim): feed-forward sub-layer
        return x
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u07_transformer_block_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("TransformerBlock")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.inputs import QKV, linear_state
from grader.spec import Case, DropoutLog, Mistake, Spec, build, dropout_seen, run


def block_case(g, shape, num_heads, context_length, dropout=0.0, qkv_bias=False, train=False, scale=1.0):
    b, t, d = shape
    state = {**linear_state(g, tuple(f"att.{name}" for name in QKV), d, d, qkv_bias),
             **linear_state(g, ("att.out_proj",), d, d, True, bias_size=0.1),
             **linear_state(g, ("ff.layers.0",), d, 4 * d, True, bias_size=0.5),
             **linear_state(g, ("ff.layers.2",), 4 * d, d, True, bias_size=0.1)}
    for name in ("norm1", "norm2"):
        state[f"{name}.scale"] = 1.0 + 0.4 * torch.randn(d, generator=g)
        state[f"{name}.shift"] = 0.4 * torch.randn(d, generator=g)
    mode = ("train() mode: what is dropout applied to?" if train
            else "eval() mode (dropout must do nothing)" if dropout else "eval() mode")
    return Case(f"B={b}, T={t}, emb_dim {d}, {num_heads} heads, context_length {context_length}"
                f"{', qkv_bias=True' if qkv_bias else ''}, dropout {dropout} in {mode}",
                x=scale * torch.randn(b, t, d, generator=g), num_heads=num_heads, context_length=context_length,
                dropout=dropout, qkv_bias=qkv_bias, state=state, train=train)


def transformer_block_examples():
    g = torch.Generator().manual_seed(5)
    return [block_case(g, (2, 4, 8), 2, 6)]


def transformer_block_cases(g):
    return [block_case(g, (1, 1, 8), 2, 4),                               # a single token
            block_case(g, (3, 5, 16), 4, 8, qkv_bias=True),              # T < context_length
            block_case(g, (2, 6, 12), 3, 6, dropout=0.5, scale=3.0),     # T = context_length, larger inputs
            block_case(g, (1, 7, 16), 2, 10, dropout=0.1, qkv_bias=True)]


def call_transformer_block(x, num_heads, context_length, dropout, qkv_bias, state):
    block = build(TransformerBlock, state, x.shape[-1], num_heads, context_length, dropout, qkv_bias=qkv_bias)
    with dropout_seen(), torch.no_grad():  # dropout is judged apart, below
        return block(x)


def block_dropout_examples():
    g = torch.Generator().manual_seed(6)
    return [block_case(g, (2, 4, 8), 2, 6, dropout=0.25, qkv_bias=True, train=True),
            block_case(g, (2, 4, 8), 2, 6, dropout=0.25, qkv_bias=True)]


def block_dropout_cases(g):
    return [block_case(g, (1, 7, 16), 2, 10, dropout=0.1, train=True),
            block_case(g, (2, 3, 12), 3, 5, dropout=0.5, qkv_bias=True, train=True),
            block_case(g, (2, 6, 12), 3, 6, dropout=0.5, scale=3.0)]


def call_transformer_block_dropout(x, num_heads, context_length, dropout, qkv_bias, state, train):
    """Every value dropout received (sorted), with dropout made the identity."""
    block = build(TransformerBlock, state, x.shape[-1], num_heads, context_length, dropout, qkv_bias=qkv_bias,
                  train=train)
    with dropout_seen() as log, torch.no_grad():
        block(x)
    return log.values()


SUBLAYER = {  # how a sub-layer f with its LayerNorm n is wired; drop() marks what dropout is applied to
    "pre": lambda x, f, n, drop: x + drop(f(n(x))),       # the contract
    "post": lambda x, f, n, drop: n(x + drop(f(x))),
    "normed": lambda x, f, n, drop: n(x) + drop(f(n(x))),
    "bare": lambda x, f, n, drop: drop(f(n(x))),
    "stream": lambda x, f, n, drop: drop(x + f(n(x))),
    "undropped": lambda x, f, n, drop: x + f(n(x)),
    "input": lambda x, f, n, drop: x + f(drop(n(x))),
}


def block_reference(x, state, num_heads, wiring=("pre", "pre"), layers=("att", "ff"), norms=("norm1", "norm2"),
                    activation=lambda h: F.gelu(h, approximate="tanh"), correction=0):
    """In float64 from the copied parameters: the output of a block whose sub-layers are wired as `wiring` says
    (see SUBLAYER), the attention weights, and the tensors the sub-layers' dropout acts on."""
    s = {k: v.double() for k, v in state.items()}
    weights, dropped = [], []

    def linear(h, name):
        return h @ s[f"{name}.weight"].T + s.get(f"{name}.bias", 0.0)

    def att(h):
        b, t, d = h.shape
        q, k, v = (linear(h, f"att.{name}").unflatten(-1, (num_heads, -1)).transpose(1, 2) for name in QKV)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // num_heads)                       # (B, H, T, T)
        weights.append(torch.softmax(scores.masked_fill(torch.ones(t, t).triu(1) > 0, float("-inf")), dim=-1))
        return linear((weights[-1] @ v).transpose(1, 2).reshape(b, t, d), "att.out_proj")

    def ff(h):
        return linear(activation(linear(h, "ff.layers.0")), "ff.layers.2")

    def norm(name):
        def apply(h):
            var = h.var(-1, keepdim=True, correction=correction)
            return s[f"{name}.scale"] * (h - h.mean(-1, keepdim=True)) / torch.sqrt(var + 1e-5) + s[f"{name}.shift"]
        return apply

    def drop(h):
        dropped.append(h)
        return h

    x = x.double()
    for how, layer, name in zip(wiring, layers, norms):
        x = SUBLAYER[how](x, att if layer == "att" else ff, norm(name), drop)
    return x, weights, dropped


BLOCK_MISTAKES = {  # message: how block_reference computes what the mistaken block gives
    "you normalised after adding (post-norm, x = norm(x + sublayer(x)), as in the original Transformer); GPT "
    "normalises the input of each sub-layer and adds the result to the un-normalised x (pre-norm)":
        {"wiring": ("post", "post")},
    "the shortcut carries the normalised x: keep the un-normalised x for the addition and feed only the sub-layer "
    "with norm(x)": {"wiring": ("normed", "normed")},
    "the attention sub-layer has no shortcut: add its output to its input": {"wiring": ("bare", "pre")},
    "the feed-forward sub-layer has no shortcut: add its output to its input": {"wiring": ("pre", "bare")},
    "neither sub-layer has a shortcut: add each sub-layer's output to its input": {"wiring": ("bare", "bare")},
    "you used norm1 before both sub-layers; norm2 goes before the feed-forward network": {"norms": ("norm1", "norm1")},
    "you used norm2 before both sub-layers; norm1 goes before the attention": {"norms": ("norm2", "norm2")},
    "norm1 and norm2 are swapped: norm1 goes before the attention, norm2 before the feed-forward":
        {"norms": ("norm2", "norm1")},
    "the feed-forward sub-layer comes before the attention; attention comes first":
        {"layers": ("ff", "att"), "norms": ("norm2", "norm1")},
    "the feed-forward network inside the block uses the exact GELU (with erf): fix your GELU first":
        {"activation": F.gelu},
    "the feed-forward network inside the block uses ReLU: fix your FeedForward first":
        {"activation": torch.relu},
    "the LayerNorms inside the block use the unbiased variance (dividing by emb_dim - 1): fix your LayerNorm first": {"correction": 1},
}


def transformer_block_oracle(x, num_heads, state):
    return block_reference(x, state, num_heads)[0]


def transformer_block_mistakes(x, num_heads, state):
    for message, options in BLOCK_MISTAKES.items():
        yield Mistake(message, block_reference(x, state, num_heads, **options)[0])


def block_dropout_oracle(x, num_heads, state, train):
    _, weights, dropped = block_reference(x, state, num_heads)
    return DropoutLog(weights + dropped if train else []).values()   # the attention weights, each sub-layer's output


def block_dropout_mistakes(x, num_heads, state, train):
    def seen(attention=True, **options):
        _, weights, dropped = block_reference(x, state, num_heads, **options)
        return DropoutLog((weights if attention else []) + dropped).values()

    if not train:
        for value in (seen(attention=False), seen()):
            yield Mistake("dropout is active in eval() mode: it must act only in training mode (self.drop_shortcut, "
                          "an nn.Dropout, knows the mode; F.dropout needs training=self.training)", value)
        return
    yield Mistake("you applied drop_shortcut to the sum (the residual stream); drop out the sub-layer's output "
                  "before adding it to the shortcut", seen(wiring=("stream", "stream")))
    yield Mistake("drop_shortcut is never applied (visible in train mode): drop out each sub-layer's output "
                  "before adding it to the shortcut", seen(wiring=("undropped", "undropped")))
    for wiring in (("pre", "undropped"), ("undropped", "pre")):
        yield Mistake("drop_shortcut is applied in one sub-layer only: drop out each sub-layer's output before "
                      "adding it to the shortcut", seen(wiring=wiring))
    yield Mistake("you applied drop_shortcut to the sub-layer's input (its normalised x); drop out its output",
                  seen(wiring=("input", "input")))
    yield Mistake("the attention inside the block has no dropout: pass `dropout` on to MultiHeadAttention",
                  seen(attention=False))
    for message, options in BLOCK_MISTAKES.items():  # a block that computes wrong values drops out wrong values
        yield Mistake(message, seen(**options))


run(Spec("TransformerBlock", call_transformer_block, transformer_block_oracle, examples=transformer_block_examples,
         cases=transformer_block_cases, mistakes=transformer_block_mistakes),
    Spec("TransformerBlock", call_transformer_block_dropout, block_dropout_oracle, examples=block_dropout_examples,
         cases=block_dropout_cases, mistakes=block_dropout_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# The block keeps the shape of its input, so blocks can be chained. It is also still causal:
# changing the last token changes only the last output.

# %%
torch.manual_seed(123)
block = TransformerBlock(emb_dim=64, num_heads=4, context_length=8, dropout=0.1).to(device)
block.eval()
x = torch.rand(2, 8, 64, device=device)        # (B, T, emb_dim)
with torch.no_grad():
    out = block(x)                              # (B, T, emb_dim)
    x_changed = x.clone()
    x_changed[:, -1] = torch.rand(2, 64, device=device)
    out_changed = block(x_changed)
print("input:", tuple(x.shape), " output:", tuple(out.shape))
print("earlier positions unchanged:", torch.allclose(out[:, :-1], out_changed[:, :-1]),
      "| last position changed:", not torch.allclose(out[:, -1], out_changed[:, -1]))

# %% [markdown]
# ## 8. How many parameters in a block?
#
# With `d = emb_dim` and no query/key/value biases:
# - attention: three `d × d` projections plus the output projection with its bias: $4d^2 + d$;
# - feed-forward: $d \cdot 4d + 4d$ and $4d \cdot d + d$, that is $8d^2 + 5d$;
# - two LayerNorms: $2 \cdot 2d = 4d$.
#
# In all $12d^2 + 10d$. For GPT-2 small ($d = 768$, 12 heads) that is 7,085,568, and two
# thirds of it sit in the feed-forward network. GPT-2 itself has query/key/value biases
# (`qkv_bias=True`), which adds $3d$. With $d = 512$, 8 heads and all biases, the count equals
# that of one layer of the original Transformer's encoder (its post-norm and ReLU change no
# parameter count).

# %%
for emb_dim, num_heads, qkv_bias in ((768, 12, False), (768, 12, True), (512, 8, True)):
    gpt_block = TransformerBlock(emb_dim, num_heads, context_length=16, dropout=0.1, qkv_bias=qkv_bias)
    parts = {name: count_parameters(getattr(gpt_block, name)) for name in ("att", "ff", "norm1", "norm2")}
    formula = 12 * emb_dim ** 2 + 10 * emb_dim + (3 * emb_dim if qkv_bias else 0)
    print(f"emb_dim={emb_dim}, qkv_bias={qkv_bias}: {count_parameters(gpt_block):,} parameters "
          f"(formula {formula:,}); " + ", ".join(f"{k} {v:,}" for k, v in parts.items()))

# %% [markdown]
# ## Recap
#
# - **LayerNorm** normalises each token's vector over its features: subtract the mean, divide
#   by $\sqrt{\sigma^2 + \varepsilon}$ with the *biased* variance (divide by $d$), then
#   multiply by `scale` and add `shift`. The mean and variance are computed; only `scale`
#   ($\gamma$) and `shift` ($\beta$) are learned.
# - **GELU** is a smooth ReLU; GPT-2 uses its tanh approximation.
# - The **feed-forward network** widens each token 4×, applies GELU, and narrows it back; it
#   holds two thirds of a block's parameters.
# - **Shortcuts** (`x + f(x)`) give the gradient a direct path through deep stacks; without
#   them it vanishes layer by layer. PyTorch's default initialisation makes that much worse;
#   a variance-preserving one balances a plain stack, but only on a knife edge.
# - **Pre-norm** (`x + f(norm(x))`) keeps that path free of normalisations and trains more
#   easily than the original post-norm (`norm(x + f(x))`); it needs a final LayerNorm at the
#   end of the stack.
# - A **transformer block** is attention and feed-forward, each pre-normalised, dropped out
#   and added back: $12d^2 + 10d$ parameters without query/key/value biases.
#
# **Next — unit 08:** embed characters and positions, stack a few of your blocks, add a final
# LayerNorm and an output layer, and train a tiny GPT that writes text.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
