# %% [markdown]
# # Unit 04 — Why scale by √d_k
#
# In unit 03 you computed attention as $\mathrm{softmax}\!\left(QK^\top / \sqrt{d_k}\right)V$ and
# took the division by $\sqrt{d_k}$ on trust. This unit earns it. You will measure how the dot
# product of two random vectors grows with their length, watch what large scores do to a
# softmax, and follow the gradient as it fades away when the scale is missing. Then you write
# the attention function that every later unit reuses, and prove it equal to PyTorch's own.
#
# **By the end you will be able to**
# - say what $d_k$ is (the width of the keys, not the number of words) and compute $\sqrt{d_k}$ without rounding;
# - show with an experiment that the variance of $q \cdot k$ grows linearly with $d_k$, that dividing by $\sqrt{d_k}$ brings it back to 1, and that dividing by $d_k$ overshoots;
# - measure how peaked an attention row is with its entropy, and see the softmax saturate without the scale;
# - explain, with autograd, why a saturated softmax starves the queries and keys of gradient;
# - write `scaled_dot_product_attention` with a mask for any batch shape and check it against `torch.nn.functional.scaled_dot_product_attention`, converting between the two mask conventions.
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

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from grader.figures import show

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## 1. What $d_k$ is
#
# Scaled dot-product attention is
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V ,$$
#
# where $d_k$ is the **key dimension**: the number of entries in each query and each key
# vector, the last dimension of `K` (queries and keys must have the same width, or their dot
# products would not exist). It has nothing to do with the number of tokens.
#
# Let us return to the three-token example of unit 03: three 4-dimensional inputs projected by
# integer matrices into queries, keys and values of width 3. Some write-ups of this example
# take $d_k$ to be the number of words, write $\sqrt{3} \approx 1.75$ and then round it to 1,
# which means not scaling at all. Three corrections: $d_k$ is the width of the keys (here it
# happens to be 3 as well, which hides the mix-up; a four-word sentence would still have
# $d_k = 3$); $\sqrt{3} \approx 1.732$; and the scale is a real number, never rounded.

# %%
x = torch.tensor([[1.0, 0.0, 1.0, 0.0],
                  [0.0, 2.0, 0.0, 2.0],
                  [1.0, 1.0, 1.0, 1.0]])              # (T, d_in) = (3, 4)
w_query = torch.tensor([[1.0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]])  # (d_in, d_k) = (4, 3)
w_key = torch.tensor([[0.0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]])    # (4, 3)
w_value = torch.tensor([[0.0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]])  # (d_in, d_v) = (4, 3)

Q, K, V = x @ w_query, x @ w_key, x @ w_value      # (3, 3) each
d_k = K.shape[-1]                                  # the width of the keys
print("Q =", Q, "K =", K, "V =", V, sep="\n")
print(f"d_k = {d_k}, sqrt(d_k) = {math.sqrt(d_k):.4f}")

scores = Q @ K.T                                   # (T_q, T_k) = (3, 3)
print("weights with the scale rounded to 1:\n", torch.softmax(scores / 1.0, dim=-1))
print("weights with sqrt(3):\n", torch.softmax(scores / math.sqrt(d_k), dim=-1))

# %% [markdown]
# The rounding is not harmless: with the divisor 1 the second query puts 98% of its weight on
# the second key and the third query 88%; with $\sqrt{3}$ these fall to 91% and 75%. The rest
# of the unit shows that the gap widens quickly as $d_k$ grows, and why that matters.

# %% [markdown]
# ## 2. Dot products of random vectors grow with $d$
#
# Take a query $q$ and a key $k$ whose $d$ entries are independent standard normal numbers
# (mean 0, variance 1). This is a model, chosen because it makes the arithmetic clean; a freshly
# initialised network gives smaller entries (we measure them at the end of this section), but
# the argument does not depend on the exact size. The dot product
# $q \cdot k = \sum_{i=1}^{d} q_i k_i$ is a sum of $d$ independent terms, each with
#
# $$\mathbb{E}[q_i k_i] = \mathbb{E}[q_i]\,\mathbb{E}[k_i] = 0, \qquad
# \mathrm{Var}(q_i k_i) = \mathbb{E}[q_i^2]\,\mathbb{E}[k_i^2] = 1 \cdot 1 = 1 .$$
#
# Variances of independent terms add up, so
#
# $$\mathbb{E}[q \cdot k] = 0, \qquad \mathrm{Var}(q \cdot k) = d, \qquad \text{standard deviation} = \sqrt{d}.$$
#
# The typical score is about $\sqrt{d}$ in size: 8 for $d = 64$, 32 for $d = 1024$. Dividing
# by $\sqrt{d}$ divides the variance by $d$ and brings it back to 1, whatever the width.
# Check the claim by simulation before believing it.
#
# **How big are the entries of a fresh network?** PyTorch's `nn.Linear` starts with weights
# drawn uniformly between $-1/\sqrt{d_\text{in}}$ and $+1/\sqrt{d_\text{in}}$. A uniform number
# on $[-a, a]$ has variance $a^2/3$, so each weight has variance $1/(3 d_\text{in})$, and an
# output, a sum of $d_\text{in}$ products with unit-variance inputs, has variance
# $d_\text{in} \cdot 1/(3 d_\text{in}) = 1/3$, not 1. The same argument as above then gives
# $\mathrm{Var}(q \cdot k) = d \cdot \tfrac13 \cdot \tfrac13 = d/9$: smaller by a constant factor,
# and still proportional to $d$, which is all that matters here. (Training moves the weights
# away from their initial values, so no fixed variance holds for long; the growth with $d$ is
# what the scale removes.) Measured on two fresh projections of width 64 (one draw of the
# weights, so expect a few percent of scatter around 1/3 and 64/9):

# %%
torch.manual_seed(0)
d_model = 64
proj_query = torch.nn.Linear(d_model, d_model, bias=False)  # PyTorch's default initialisation
proj_key = torch.nn.Linear(d_model, d_model, bias=False)
with torch.no_grad():
    q_fresh = proj_query(torch.randn(20_000, d_model))     # (N, d) queries of unit-variance inputs
    k_fresh = proj_key(torch.randn(20_000, d_model))       # (N, d) keys of other inputs
print(f"largest |weight|: {proj_query.weight.abs().max().item():.4f}   1/sqrt(64) = {1 / math.sqrt(d_model):.4f}")
print(f"variance of the weights: {proj_query.weight.var().item():.5f}   1/(3*64) = {1 / (3 * d_model):.5f}")
print(f"variance of the query entries: {q_fresh.var().item():.3f}   (1/3 = {1 / 3:.3f})")
print(f"variance of q·k: {(q_fresh * k_fresh).sum(dim=-1).var().item():.2f}   (64/9 = {d_model / 9:.2f})")


# %% [markdown]
# ### Exercise — `dot_product_variance(d, num_samples=10_000, generator=None)` (about 10 minutes)
#
# **Goal:** draw `num_samples` pairs of vectors $q, k \sim \mathcal{N}(0, I_d)$, compute the
# dot product of each pair, and return the (empirical) **variance** of those dot products as a
# Python `float`. Pass `generator` to every random draw so that a seeded generator makes the
# result reproducible.
#
# For `d = 64` you should get a number close to 64 (within a few percent: it is a random estimate).
#
# <details><summary>Hint</summary>
#
# `torch.randn(n, d, generator=generator)` draws `n` vectors at once. You need one dot product
# per pair, so reduce over the vector entries only, leaving `num_samples` numbers. Tensors have
# a method for the variance; a 0-d tensor becomes a Python number with `.item()`. Make sure you
# return the variance, not the standard deviation or the mean.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u04_dot_product_variance", "locked": false, "schema_version": 3, "solution": true, "task": false}
def dot_product_variance(d: int, num_samples: int = 10_000, generator: torch.Generator | None = None) -> float:
    """Empirical variance of q·k over `num_samples` pairs q, k ~ N(0, I_d), as a Python float.

    All random numbers are drawn with `generator` (None: PyTorch's global generator)."""
    ### BEGIN SOLUTION
    q = torch.randn(num_samples, d, generator=generator)  # (N, d)
    k = torch.randn(num_samples, d, generator=generator)  # (N, d)
    dots = (q * k).sum(dim=-1)                            # (N,) one dot product per pair
    return dots.var().item()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u04_dot_product_variance_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("dot_product_variance")
### BEGIN HIDDEN TESTS
import math

import torch

from grader.spec import Case, Exact, Float, Mistake, Spec, run


def variance_examples():
    return [Case("d=64, the default 10 000 samples, generator seeded with 0", d=64, seed=0),
            Case("d=4, 20 000 samples, generator seeded with 1", d=4, num_samples=20_000, seed=1)]


def variance_cases(g):
    # The relative spread of a variance estimated from n samples is about sqrt((2 + 6/d) / n):
    # at most 1.7% here, so the 10% tolerance below is at least 6 standard deviations away.
    return [Case("d=1, 50 000 samples", d=1, num_samples=50_000, seed=2),
            Case("d=3, 30 000 samples", d=3, num_samples=30_000, seed=3),
            Case("d=16, 20 000 samples, no generator (the global one, seeded)", d=16, num_samples=20_000),
            Case("d=128, 20 000 samples", d=128, num_samples=20_000, seed=4)]


def variance_magnitude_examples():
    # At d=4 a returned mean is near 0 (within 4 standard deviations, 0.08) and no other known
    # mistake is: the "close to 0" message names only that one.
    return [Case("d=4, 10 000 samples, generator seeded with 0: the order of size", d=4, num_samples=10_000, seed=0)]


def variance_magnitude_cases(g):
    return [Case(f"d={d}, 20 000 samples", d=d, num_samples=20_000, seed=10 + d) for d in (1, 4, 16)]


def variance_reproducible_examples():
    return [Case("d=8, 2 000 samples: twice with generators seeded 5, once seeded 6", d=8, num_samples=2000)]


def call_dot_product_variance(d, num_samples=None, seed=None):
    kwargs = {} if num_samples is None else {"num_samples": num_samples}
    if seed is None:
        torch.manual_seed(0)
    else:
        kwargs["generator"] = torch.Generator().manual_seed(seed)
    return dot_product_variance(d, **kwargs)


def call_dot_product_variance_magnitude(d, num_samples, seed):
    value = dot_product_variance(d, num_samples=num_samples, generator=torch.Generator().manual_seed(seed))
    return abs(value) if isinstance(value, (int, float)) else value


def call_dot_product_variance_reproducible(d, num_samples):
    first = dot_product_variance(d, num_samples=num_samples, generator=torch.Generator().manual_seed(5))
    again = dot_product_variance(d, num_samples=num_samples, generator=torch.Generator().manual_seed(5))
    other = dot_product_variance(d, num_samples=num_samples, generator=torch.Generator().manual_seed(6))
    return [bool(first == again), bool(first != other)]


def variance_oracle(d):
    return float(d)  # q·k sums d products of variance 1


def variance_reproducible_oracle():
    return [True, True]


def variance_mistakes(d):
    yield Mistake("your result is about √d: that is the standard deviation of q·k; the variance is its square",
                  math.sqrt(d))
    yield Mistake("your result is about 1: that is the variance of one product q_i·k_i, or of the scaled score "
                  "q·k/√d. The exercise asks for the variance of the plain dot product, summed over all d entries", 1.0)
    yield Mistake("your result is about 2d: that is the variance of q·q, a vector with itself; draw q and k "
                  "independently", 2.0 * d)
    uniform = ("your result is about {}: that is what entries drawn uniformly from [0, 1) give (torch.rand); the "
               "exercise draws them from a standard normal distribution (torch.randn)")
    yield Mistake(uniform.format("7d/144 ≈ 0.05·d"), 7 * d / 144)   # each product: E[(qk)²] - E[qk]² = 1/9 - 1/16
    yield Mistake(uniform.format("d/3 (q or k uniform, the other normal)"), d / 3)


def variance_magnitude_mistakes(d):
    # The mean of q·k is 0, so a returned mean lands anywhere near 0; with the judge's tolerance
    # of 0.99 this value catches results between 0.0001·d and 0.02·d.
    yield Mistake("your result is close to 0: that is the mean of q·k (random vectors point with and against "
                  "each other equally often). The variance averages the squared distances from the mean", 0.0099 * d)


def variance_reproducible_mistakes():
    yield Mistake("two generators seeded alike gave different results: draw every random number with "
                  "generator=generator, so that a seeded generator makes the result reproducible", [False, True])
    yield Mistake("your result does not change when the random draws change: estimate the variance from the "
                  "samples you draw instead of returning a formula", [True, False])


# First a coarse check (the right order of size at all?), then the precise one: 10% of the
# true variance d, far above the sampling error (see variance_cases); last, the generator:
# the same seed must give the same estimate, another seed another one.
run(Spec("dot_product_variance", call_dot_product_variance_magnitude, variance_oracle,
         examples=variance_magnitude_examples, cases=variance_magnitude_cases, mistakes=variance_magnitude_mistakes, judge=Float(rel=0.99)),
    Spec("dot_product_variance", call_dot_product_variance, variance_oracle,
         examples=variance_examples, cases=variance_cases, mistakes=variance_mistakes, judge=Float(rel=0.1)),
    Spec("dot_product_variance", call_dot_product_variance_reproducible, variance_reproducible_oracle,
         examples=variance_reproducible_examples, mistakes=variance_reproducible_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# Now the experiment: the variance for widths from 1 to 512, with and without dividing the
# dot product by $\sqrt{d}$, and, to see why the square root, dividing by $d$ itself. Both axes
# are logarithmic, so a line of slope 1 means "proportional to $d$", and slope −1 "proportional to $1/d$".

# %%
generator = torch.Generator().manual_seed(0)
dims = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
raw_variance = [dot_product_variance(d, generator=generator) for d in dims]
scaled_variance, over_d_variance = [], []
for d in dims:
    q = torch.randn(10_000, d, generator=generator)            # (N, d)
    k = torch.randn(10_000, d, generator=generator)            # (N, d)
    dots = (q * k).sum(dim=-1)                                 # (N,) unscaled scores
    scaled_variance.append((dots / math.sqrt(d)).var().item())
    over_d_variance.append((dots / d).var().item())            # divided by d instead of sqrt(d)

for d, raw, sc, od in zip(dims, raw_variance, scaled_variance, over_d_variance):
    print(f"d = {d:3d}   Var(q·k) = {raw:7.2f}   Var(q·k / sqrt(d)) = {sc:.3f}   Var(q·k / d) = {od:.5f}")

fig, ax = plt.subplots(figsize=(5, 3.5))
ax.loglog(dims, raw_variance, "o-", label="q·k")
ax.loglog(dims, scaled_variance, "s-", label="q·k / sqrt(d)")
ax.loglog(dims, over_d_variance, "^-", label="q·k / d")
ax.loglog(dims, dims, "k:", label="y = d")
ax.loglog(dims, [1 / d for d in dims], "k--", linewidth=0.8, label="y = 1/d")
ax.set(xlabel="dimension d", ylabel="variance", title="Variance of the dot product")
ax.legend()
show()

# %% [markdown]
# The unscaled variance sits on the line $y = d$; the scaled one stays at 1 for every width.
# Dividing by $d$ overshoots: the variance becomes $d / d^2 = 1/d$ and shrinks as the heads
# get wider, so at $d = 512$ the scores of a row differ by a few hundredths. That is the whole
# reason for the $\sqrt{d_k}$, exactly: it is the one divisor that keeps the scores at the same
# size however wide the heads are. Next: why the size of the scores matters at all.

# %% [markdown]
# ## 3. Large scores saturate the softmax
#
# The softmax only cares about *differences* between scores. If the scores of one row are
# spread by 1 or 2, the weights are spread too. If they are spread by 30, the largest score is
# typically many units above the next, and $e^{30}$ dwarfs everything: the softmax puts almost
# all the weight on one key. The row becomes (nearly) one-hot — the softmax is **saturated**.
#
# To measure how spread out a row of weights $w_1, \dots, w_T$ is, use its **entropy**
#
# $$H(w) = -\sum_{j=1}^{T} w_j \ln w_j \quad \text{(in nats, with the natural logarithm)} .$$
#
# It is 0 for a one-hot row (all the attention on one key) and $\ln T$, its maximum, for the
# uniform row $w_j = 1/T$. A weight of exactly 0 contributes 0: $w \ln w \to 0$ as $w \to 0$,
# so we set $0 \cdot \ln 0 = 0$. Exact zeros are common in attention, since masked keys get a
# weight of exactly 0, and the computer does not know the convention: `0 * log(0)` is
# `0 * -inf = nan`.

# %% [markdown]
# ### Exercise — `attention_entropy(weights)` (about 10 minutes)
#
# **Goal:** given attention weights of shape `(..., T)` (each row along the last dimension is a
# probability distribution), return the entropy of every row in nats, shape `(...,)` — the
# last dimension is summed away. A weight of exactly 0 must contribute 0, not NaN.
#
# Expected for the example below: `[0.0000, 1.3863, 0.6931, 0.8018]` (the second is $\ln 4$, the third $\ln 2$).
#
# <details><summary>Hint</summary>
#
# The formula is a minus sign, a sum over the last dimension, and $w \ln w$. The trouble is
# only the zeros: either make sure the logarithm never sees an exact 0 where the weight is 0,
# or pick a function from `torch.special` that computes $x \ln y$ (or $-x \ln x$) with the
# convention $0 \ln 0 = 0$ built in. `torch.log` is the natural logarithm; `torch.log2` is not.
# </details>

# %%
example_weights = torch.tensor([[1.0, 0.0, 0.0, 0.0],      # one-hot: entropy 0
                                [0.25, 0.25, 0.25, 0.25],  # uniform over 4 keys: ln 4
                                [0.5, 0.5, 0.0, 0.0],      # uniform over 2 keys: ln 2
                                [0.7, 0.2, 0.1, 0.0]])     # (4, 4), each row sums to 1


# %% nbgrader={"grade": false, "grade_id": "u04_attention_entropy", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row of `weights` (..., T) -> (...,), with 0 · ln 0 = 0."""
    ### BEGIN SOLUTION
    surprise = torch.where(weights > 0, -weights.log(), 0.0)  # (..., T) -ln w, set to 0 where w = 0
    return (weights * surprise).sum(dim=-1)                   # (...,)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u04_attention_entropy_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("attention_entropy")
### BEGIN HIDDEN TESTS
import math

import torch

from grader.spec import Case, Mistake, Spec, run


def entropy_examples():
    return [Case("the four example rows (one-hot, uniform over 4, uniform over 2, [0.7, 0.2, 0.1, 0])",
                 weights=torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25],
                                       [0.5, 0.5, 0.0, 0.0], [0.7, 0.2, 0.1, 0.0]]))]


def entropy_cases(g):
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    masked = torch.softmax(torch.randn(2, 5, 5, generator=g).masked_fill(causal, float("-inf")), dim=-1)
    one_hot = torch.nn.functional.one_hot(torch.randint(0, 7, (4,), generator=g), 7).float()
    return [Case("softmax weights of random scores, shape (2, 3, 6, 6)",
                 weights=torch.softmax(torch.randn(2, 3, 6, 6, generator=g), -1)),
            Case("causally masked weights with exact zeros, shape (2, 5, 5)", weights=masked),
            Case("one-hot rows (entropy 0), shape (4, 7)", weights=one_hot),
            Case("uniform rows (entropy ln 9), shape (3, 9)", weights=torch.full((3, 9), 1 / 9)),
            Case("a single row of shape (8,): the result is 0-d", weights=torch.softmax(torch.randn(8, generator=g), -1)),
            Case("T=1: rows holding a single weight 1, shape (3, 1)", weights=torch.ones(3, 1)),
            Case("peaked rows from large scores (tiny and zero weights), shape (4, 8)",
                 weights=torch.softmax(30 * torch.randn(4, 8, generator=g), -1)),
            Case("non-square weights, shape (3, 4, 10)", weights=torch.softmax(torch.randn(3, 4, 10, generator=g), -1))]


def call_attention_entropy(weights):
    return attention_entropy(weights)


def entropy_oracle(weights):
    return torch.special.entr(weights.double()).sum(dim=-1)


def entropy_mistakes(weights):
    w_log_w = torch.special.xlogy(weights, weights)  # (..., T), 0 where a weight is 0
    yield Mistake("you used the logarithm in base 2 (bits); the entropy here is in nats: use the natural logarithm",
                  -w_log_w.sum(-1) / math.log(2))
    yield Mistake("you used the logarithm in base 10; the entropy here is in nats: use the natural logarithm",
                  -w_log_w.sum(-1) / math.log(10))
    yield Mistake("you gave NaN for rows with a weight of exactly 0: 0 · log 0 is 0 · (-inf) = NaN in floating point, "
                  "but its value in the entropy is 0 (the limit of w log w). Make a zero weight contribute 0",
                  -(weights * weights.log()).sum(-1))
    yield Mistake("your entropies are negative: the formula has a minus sign in front of the sum", w_log_w.sum(-1))
    yield Mistake("you averaged w log w over each row: the entropy is the sum, not the mean", -w_log_w.mean(-1))
    yield Mistake("you returned -w log w for every entry: add them up over each row (the last dimension)", -w_log_w)
    if weights.dim() >= 2:
        yield Mistake("you summed down the columns (dim -2); each row along the last dimension is one distribution",
                      -w_log_w.sum(-2))
        yield Mistake("you summed over all entries: return one entropy per row, shape (...,)", -w_log_w.sum())


run(Spec("attention_entropy", call_attention_entropy, entropy_oracle,
         examples=entropy_examples, cases=entropy_cases, mistakes=entropy_mistakes))
### END HIDDEN TESTS

# %%
print(attention_entropy(example_weights))
print(f"ln 4 = {math.log(4):.4f}, ln 2 = {math.log(2):.4f}")

# %% [markdown]
# Now the experiment. For each width $d$, draw 500 queries, each with its own 16 random keys,
# compute the weights with and without the $\sqrt{d}$ (and with $d$ as the divisor), and
# average the entropy of the rows. The dotted line is $\ln 16$, the entropy of a uniform row.

# %%
num_queries, num_keys = 500, 16
generator = torch.Generator().manual_seed(1)
entropy_raw, entropy_scaled, entropy_over_d = [], [], []
for d in dims:
    q = torch.randn(num_queries, 1, d, generator=generator)          # (N, 1, d) one query per row
    k = torch.randn(num_queries, num_keys, d, generator=generator)   # (N, T, d) its keys
    dots = (q @ k.transpose(-2, -1)).squeeze(-2)                     # (N, T)
    entropy_raw.append(attention_entropy(torch.softmax(dots, dim=-1)).mean().item())
    entropy_scaled.append(attention_entropy(torch.softmax(dots / math.sqrt(d), dim=-1)).mean().item())
    entropy_over_d.append(attention_entropy(torch.softmax(dots / d, dim=-1)).mean().item())

fig, ax = plt.subplots(figsize=(5, 3.5))
ax.semilogx(dims, entropy_raw, "o-", label="softmax(q·k)")
ax.semilogx(dims, entropy_scaled, "s-", label="softmax(q·k / sqrt(d))")
ax.semilogx(dims, entropy_over_d, "^-", label="softmax(q·k / d)")
ax.axhline(math.log(num_keys), color="k", linestyle=":", label="ln 16 (uniform)")
ax.set(xlabel="dimension d", ylabel="mean entropy (nats)", ylim=(0, 3), title="How spread out the attention rows are")
ax.legend()
show()

# %% [markdown]
# Without the scale the entropy falls towards 0 as $d$ grows: the rows become one-hot. With the
# scale the entropy does not depend on $d$ at all. Divided by $d$, the rows go the other way
# and climb to $\ln 16$: nearly uniform, every key weighted about $1/16$ whatever it holds, an
# attention that no longer picks anything out. Here is one row at $d = 512$ three ways:

# %%
print("without the scale:", torch.softmax(dots[0], dim=-1))
print("with the scale:   ", torch.softmax(dots[0] / math.sqrt(dims[-1]), dim=-1))
print("divided by d:     ", torch.softmax(dots[0] / dims[-1], dim=-1))

# %% [markdown]
# ## 4. A saturated softmax passes almost no gradient
#
# The softmax $w = \mathrm{softmax}(s)$ has the derivative
#
# $$\frac{\partial w_i}{\partial s_j} = w_i\,(\delta_{ij} - w_j).$$
#
# For a one-hot row every entry of this matrix is 0: whatever the loss asks for, nothing flows
# back to the scores, and so nothing reaches the queries and keys that produced them. Training
# stalls. Let autograd show it: for each width, take a stand-in loss $L = \sum_j w_j u_j$ with
# random $u$ (any loss that depends on the weights will do) and measure the size of the gradient
# at the softmax input $s$ and at the query $q$. We report the median over the 500 rows.

# %%
generator = torch.Generator().manual_seed(2)
settings = ("without scale", "with scale", "divided by d")
grad_scores, grad_query = {name: [] for name in settings}, {name: [] for name in settings}
for d in dims:
    q = torch.randn(num_queries, 1, d, generator=generator)          # (N, 1, d)
    k = torch.randn(num_queries, num_keys, d, generator=generator)   # (N, T, d)
    u = torch.randn(num_queries, num_keys, generator=generator)      # (N, T) what the loss wants
    for name, divisor in zip(settings, (1.0, math.sqrt(d), float(d))):
        q_leaf = q.clone().requires_grad_(True)
        s = (q_leaf @ k.transpose(-2, -1)).squeeze(-2) / divisor     # (N, T) softmax input
        s.retain_grad()                                              # keep the gradient of a non-leaf
        loss = (torch.softmax(s, dim=-1) * u).sum()
        loss.backward()
        grad_scores[name].append(s.grad.norm(dim=-1).median().item())
        grad_query[name].append(q_leaf.grad.norm(dim=-1).median().item())

fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for ax, grads, title in zip(axes, (grad_scores, grad_query), ("gradient at the softmax input", "gradient at the query q")):
    for (name, values), marker in zip(grads.items(), ("o-", "s-", "^-")):
        ax.loglog(dims, values, marker, label=name)
    ax.set(xlabel="dimension d", ylabel="median gradient norm", title=title)
    ax.legend()
show()
for name in grad_scores:
    print(f"{name}: gradient at the softmax input {grad_scores[name][0]:.4f} at d=1, {grad_scores[name][-1]:.4f} at d=512")

# %% [markdown]
# With the scale, both gradients stay about the same size at every width. Without it, the
# gradient at the softmax input shrinks about a thousandfold between $d = 1$ and $d = 512$.
# The gradient at the query first grows (longer keys make bigger steps) and then collapses as
# the rows saturate. Real heads have $d_k$ = 64 or 128, right where the unscaled curves fall off.
#
# Dividing by $d$ fails more quietly. The rows are nearly uniform, a place where the softmax
# passes gradient well, so the gradient at its input stays put. But every score is divided by
# $d$, and so is its gradient on the way back to the query: that gradient falls like
# $1/\sqrt{d}$, eight times smaller at $d = 512$ than at $d = 8$. Only $\sqrt{d}$ keeps both steady.

# %% [markdown]
# ## 5. Scaled dot-product attention
#
# Time to write the function the next units are built on. It takes queries `(..., T_q, d_k)`,
# keys `(..., T_k, d_k)` and values `(..., T_k, d_v)` with any leading dimensions (none, a batch,
# a batch and heads), and returns the output `(..., T_q, d_v)` and the weights `(..., T_q, T_k)`.
# Queries and keys may come in different numbers (`T_q` need not equal `T_k`), and values may
# have a different width from keys (`d_v` need not equal `d_k`).
#
# **The mask.** An optional boolean `mask`, broadcastable to `(..., T_q, T_k)`: **True means
# blocked** — that query may not look at that key. Blocked scores become $-\infty$ *before* the
# softmax, so they get a weight of exactly 0 and the other weights of the row still sum to 1.
# (What happens when a whole row is blocked is left open here; unit 05 deals with it.)
#
# The three-token example again, first without a mask, then pretending that the third token is
# padding that no query may look at:

# %%
pad_mask = torch.tensor([False, False, True])  # (T_k,) broadcasts to (T_q, T_k): key 2 is blocked

# A batched example with different sizes everywhere: B=2 sequences, H=2 heads, T_q=3 queries,
# T_k=5 keys, d_k=8, d_v=4. Sequence 0 has one padding key at the end, sequence 1 has two.
generator = torch.Generator().manual_seed(4)
q_batch = torch.randn(2, 2, 3, 8, generator=generator)   # (B, H, T_q, d_k)
k_batch = torch.randn(2, 2, 5, 8, generator=generator)   # (B, H, T_k, d_k)
v_batch = torch.randn(2, 2, 5, 4, generator=generator)   # (B, H, T_k, d_v)
mask_batch = torch.tensor([[False, False, False, False, True],
                           [False, False, False, True, True]]).view(2, 1, 1, 5)  # (B, 1, 1, T_k)


# %% [markdown]
# ### Exercise — `scaled_dot_product_attention(q, k, v, mask=None)` (about 20 minutes)
#
# **Goal:** return `(output, weights)` — in that order — where
# `weights = softmax(q kᵀ / √d_k)` over the keys, with the blocked positions set to $-\infty$
# before the softmax, and `output = weights @ v`.
#
# Expected for the three-token example without a mask: the first row of the weights is
# `[0.1361, 0.4319, 0.4319]` and the first row of the output is `[1.8639, 6.3194, 1.7042]`.
#
# <details><summary>Hint</summary>
#
# `.T` reverses *all* dimensions of a tensor, so on a batch it would swap the batch dimensions
# too; you want to swap only the last two (look up `transpose` with negative dimensions, or
# `.mT`). $d_k$ is the last dimension of the queries (or keys). `masked_fill` writes a value
# wherever a boolean mask is True. Which dimension indexes the keys, the one each row of weights
# must sum over?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u04_scaled_dot_product_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of queries q (..., T_q, d_k) over keys k (..., T_k, d_k) and values v (..., T_k, d_v).

    mask: optional bool tensor broadcastable to (..., T_q, T_k); True = blocked.
    Returns (output (..., T_q, d_v), weights (..., T_q, T_k))."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))       # blocked keys get weight 0
    weights = torch.softmax(scores, dim=-1)                     # (..., T_q, T_k), rows sum to 1
    output = weights @ v                                        # (..., T_q, d_v)
    return output, weights
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u04_scaled_dot_product_attention_check", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("scaled_dot_product_attention")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.spec import Case, Mistake, Spec, Tuple, run

SDPA_Q = torch.tensor([[1.0, 0.0, 2.0], [2.0, 2.0, 2.0], [2.0, 1.0, 3.0]])
SDPA_K = torch.tensor([[0.0, 1.0, 1.0], [4.0, 4.0, 0.0], [2.0, 3.0, 1.0]])
SDPA_V = torch.tensor([[1.0, 2.0, 3.0], [2.0, 8.0, 0.0], [2.0, 6.0, 3.0]])


def sdpa_examples():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 2, 3, 8, generator=g)
    k = torch.randn(2, 2, 5, 8, generator=g)
    v = torch.randn(2, 2, 5, 4, generator=g)
    mask = torch.tensor([[False, False, False, False, True], [False, False, False, True, True]]).view(2, 1, 1, 5)
    example = {"q": SDPA_Q.clone(), "k": SDPA_K.clone(), "v": SDPA_V.clone()}
    return [Case("the three-token example, no mask", **example),
            Case("the three-token example, key 2 blocked by mask [False, False, True]", **example,
                 mask=torch.tensor([False, False, True])),
            Case("the batched example: q (2, 2, 3, 8), k (2, 2, 5, 8), v (2, 2, 5, 4), padding mask (2, 1, 1, 5)",
                 q=q, k=k, v=v, mask=mask),
            Case("the three-token example with q times 100: scores in the hundreds, where exp overflows unless the "
                 "maximum is subtracted", q=SDPA_Q.clone() * 100, k=SDPA_K.clone(), v=SDPA_V.clone())]


def sdpa_shifted_causal(t_q, t_k):
    # Query i may see keys 0 .. i + (t_k - t_q): every row keeps at least one key.
    return torch.ones(t_q, t_k, dtype=torch.bool).triu(1 + t_k - t_q)


def sdpa_cases(g):
    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    big_q, big_k = r(2, 3, 7, 16, scale=10.0), r(2, 3, 9, 16, scale=10.0)
    random_mask = torch.rand(2, 3, 7, 9, generator=g) < 0.4
    # Each query keeps its highest-scoring key, so a softmax over all keys followed by the mask and
    # a renormalisation (also correct) is not left with only underflowed weights.
    random_mask.scatter_(-1, (big_q @ big_k.transpose(-2, -1)).argmax(-1, keepdim=True), False)
    return [Case("no batch: q, k, v of shape (6, 8), no mask", q=r(6, 8), k=r(6, 8), v=r(6, 8)),
            Case("a batch of 3, T_q=4, T_k=7, d_k=5, d_v=2, a (4, 7) mask shared by the batch",
                 q=r(3, 4, 5), k=r(3, 7, 5), v=r(3, 7, 2), mask=sdpa_shifted_causal(4, 7)),
            Case("batch and heads (2, 4, 5, 16), d_v=8, a causal (5, 5) mask",
                 q=r(2, 4, 5, 16), k=r(2, 4, 5, 16), v=r(2, 4, 5, 8), mask=sdpa_shifted_causal(5, 5)),
            Case("T=1: one query and one key per sequence, shape (2, 1, 4)", q=r(2, 1, 4), k=r(2, 1, 4), v=r(2, 1, 3)),
            Case("one query against 10 keys, a (1, 10) mask", q=r(1, 6), k=r(10, 6), v=r(10, 3),
                 mask=torch.tensor([[False] * 7 + [True] * 3])),
            # Scores of a few hundred: exp() overflows in float32 unless the softmax subtracts the
            # row maximum. float32 rounding of such scores costs up to about 50 steps here.
            Case("large inputs (entries about 10 times larger), (2, 3, 7, 16) and 9 keys, a random (2, 3, 7, 9) mask",
                 q=big_q, k=big_k, v=r(2, 3, 9, 5), mask=random_mask)]


def call_scaled_dot_product_attention(q, k, v, mask=None):
    # `.T` on a tensor with more than two dimensions reverses all of them (and is deprecated);
    # while the learner's code runs, it raises a message that says so.
    plain_T = torch._C.TensorBase.T
    saved = torch.Tensor.__dict__.get("T")

    def reversing_T(self):
        if self.dim() > 2:
            raise RuntimeError("`.T` reverses every dimension of a batched tensor, batch and heads included: "
                               "swap only the last two with .transpose(-2, -1) or .mT")
        return plain_T.__get__(self, type(self))

    torch.Tensor.T = property(reversing_T)
    try:
        if mask is None:
            return scaled_dot_product_attention(q, k, v)
        return scaled_dot_product_attention(q, k, v, mask=mask)
    finally:
        if saved is None:
            del torch.Tensor.T
        else:
            torch.Tensor.T = saved


def sdpa_oracle(q, k, v, mask=None):
    # Both parts from PyTorch's own attention: the weights are the output for v = identity.
    q, k, v = q.double(), k.double(), v.double()
    attend = None if mask is None else ~mask  # F.scaled_dot_product_attention: True = may attend
    eye = torch.eye(k.shape[-2], dtype=torch.float64).expand(*k.shape[:-2], k.shape[-2], k.shape[-2])
    return (F.scaled_dot_product_attention(q, k, v, attn_mask=attend),
            F.scaled_dot_product_attention(q, k, eye, attn_mask=attend))


def sdpa_attend(q, k, v, mask, divisor, fill=float("-inf"), dim=-1, mask_after=False):
    scores = q @ k.transpose(-2, -1) / divisor
    if mask is not None and not mask_after:
        scores = scores.masked_fill(mask, fill)
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and mask_after:
        weights = weights.masked_fill(mask, 0.0)
    return weights @ v, weights


def sdpa_mistakes(q, k, v, mask=None):
    d_k, d_v, t_q, t_k = q.shape[-1], v.shape[-1], q.shape[-2], k.shape[-2]
    right = sdpa_attend(q, k, v, mask, math.sqrt(d_k))
    yield Mistake("you did not divide the scores by √d_k: the scale is what keeps the softmax from saturating",
                  sdpa_attend(q, k, v, mask, 1.0))
    yield Mistake("you divided the scores by d_k instead of its square root √d_k", sdpa_attend(q, k, v, mask, d_k))
    yield Mistake("you multiplied the scores by √d_k: divide by it instead",
                  sdpa_attend(q, k, v, mask, 1 / math.sqrt(d_k)))
    yield Mistake("you divided by √d_v, the width of the values: the scale uses d_k, the width of the queries and keys",
                  sdpa_attend(q, k, v, mask, math.sqrt(d_v)))
    yield Mistake("you divided by the square root of the number of tokens (keys): d_k is the width of the keys, "
                  "their last dimension, not how many there are", sdpa_attend(q, k, v, mask, math.sqrt(t_k)))
    yield Mistake("you divided by the square root of the number of tokens (queries): d_k is the width of the keys, "
                  "their last dimension, not how many queries there are", sdpa_attend(q, k, v, mask, math.sqrt(t_q)))
    yield Mistake("you returned (weights, output): the exercise asks for (output, weights), in that order",
                  (right[1], right[0]))
    yield Mistake("you divided the weights by √d_k after the softmax: scale the scores before it",
                  tuple(part / math.sqrt(d_k) for part in sdpa_attend(q, k, v, mask, 1.0)))
    for dim in range(q.dim() - 1):  # every dimension of the scores but the last (the keys)
        yield Mistake(f"you applied the softmax over the wrong dimension (dim={dim} of scores shaped (..., T_q, T_k)): "
                      "each query's weights over the keys, the last dimension, must sum to 1",
                      sdpa_attend(q, k, v, mask, math.sqrt(d_k), dim=dim))
    if mask is not None:
        yield Mistake("the blocked keys still get weight: the mask was not applied (masked_fill returns a new "
                      "tensor; did you keep its result?)", sdpa_attend(q, k, v, None, math.sqrt(d_k)))
        yield Mistake("your mask is inverted: you blocked the keys where mask is False. Here True means blocked "
                      "(PyTorch's F.scaled_dot_product_attention uses the opposite convention)",
                      sdpa_attend(q, k, v, ~mask, math.sqrt(d_k)))
        yield Mistake("you filled the blocked scores with 0: a score of 0 still gets weight after the softmax "
                      "(e^0 = 1). Fill them with -inf so that their weight is exactly 0",
                      sdpa_attend(q, k, v, mask, math.sqrt(d_k), fill=0.0))
        yield Mistake("you zeroed the blocked weights after the softmax, so the rows no longer sum to 1: "
                      "mask the scores before the softmax", sdpa_attend(q, k, v, mask, math.sqrt(d_k), mask_after=True))


run(Spec("scaled_dot_product_attention", call_scaled_dot_product_attention, sdpa_oracle,
         examples=sdpa_examples, cases=sdpa_cases, mistakes=sdpa_mistakes, judge=Tuple()))
### END HIDDEN TESTS

# %%
output, weights = scaled_dot_product_attention(Q, K, V)
print("weights:", weights, "output:", output, sep="\n")
output, weights = scaled_dot_product_attention(Q, K, V, mask=pad_mask)
print("weights with key 2 blocked:", weights, sep="\n")

output, weights = scaled_dot_product_attention(q_batch, k_batch, v_batch, mask=mask_batch)
print("batched:", tuple(output.shape), tuple(weights.shape))  # (B, H, T_q, d_v), (B, H, T_q, T_k)
print("blocked weights are exactly 0:", bool((weights.masked_select(mask_batch.expand_as(weights)) == 0).all()))

# %% [markdown]
# ## 6. The same thing, by PyTorch
#
# PyTorch ships this computation as `torch.nn.functional.scaled_dot_product_attention`, with
# fused, faster kernels on GPUs. It returns the output only, and it divides by
# $\sqrt{\text{q.shape[-1]}} = \sqrt{d_k}$ by default. One trap: its boolean `attn_mask` uses
# the **opposite convention** — True means the query *may attend* to the key. So our mask
# (True = blocked) must be inverted with `~` before it is passed in. Passing it unchanged
# raises no error; it silently attends to exactly the wrong keys.
#
# A float `attn_mask` is a third convention: it is *added* to the scores, 0 where allowed and
# $-\infty$ where blocked.

# %%
ours, _ = scaled_dot_product_attention(q_batch, k_batch, v_batch, mask=mask_batch)
theirs = F.scaled_dot_product_attention(q_batch, k_batch, v_batch, attn_mask=~mask_batch)
wrong = F.scaled_dot_product_attention(q_batch, k_batch, v_batch, attn_mask=mask_batch)
additive = torch.zeros(mask_batch.shape).masked_fill(mask_batch, float("-inf"))  # (B, 1, 1, T_k) float
theirs_additive = F.scaled_dot_product_attention(q_batch, k_batch, v_batch, attn_mask=additive)

print(f"with ~mask:           max difference {(ours - theirs).abs().max().item():.2e}")
print(f"with an additive mask: max difference {(ours - theirs_additive).abs().max().item():.2e}")
print(f"with mask unchanged:  max difference {(ours - wrong).abs().max().item():.2e}  <- the wrong convention")
print("same as PyTorch:", torch.allclose(ours, theirs, atol=1e-6))

# %% [markdown]
# ## Recap
#
# - $d_k$ is the width of the queries and keys; the scale is $\sqrt{d_k}$ exactly ($\sqrt{3} \approx 1.732$), never rounded, never the number of words.
# - For random vectors, $\mathrm{Var}(q \cdot k) = d_k$: the scores grow like $\sqrt{d_k}$. Dividing by $\sqrt{d_k}$ keeps their variance at 1 for every width; dividing by $d_k$ overshoots (variance $1/d_k$, nearly uniform rows, a gradient at the query that shrinks like $1/\sqrt{d_k}$).
# - A fresh `nn.Linear` gives entries of variance about 1/3 for unit-variance inputs, so $\mathrm{Var}(q \cdot k) \approx d_k/9$: a different constant, the same growth with $d_k$.
# - Large scores saturate the softmax: the rows become one-hot and their entropy $-\sum_j w_j \ln w_j$ drops to 0 (with $0 \ln 0 = 0$).
# - A saturated softmax has a Jacobian of almost 0, so little gradient reaches the queries and keys.
# - `scaled_dot_product_attention(q, k, v, mask)` works for any leading dimensions; here True in the mask means blocked, while `F.scaled_dot_product_attention` wants True = attend, so pass it `~mask`.
#
# **Next — unit 05:** the causal mask, which keeps every token from looking at the tokens after
# it, and what to do with a row where every key is blocked.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
