# %% [markdown]
# # Unit 02 — Softmax, attention weights and context vectors
#
# In unit 01 every token of *"Your journey starts with one step"* compared itself with every
# other token and got a row of dot-product **scores**. Scores are not yet something a model can
# use: they can be any size and any sign. In this unit you turn each row of scores into
# **attention weights** — positive numbers that add up to one — with a softmax, and use those
# weights to mix the token vectors into a **context vector**: a new vector for each token that
# carries information from the tokens it attends to. That is the whole of attention, minus the
# trainable parts that unit 03 adds.
#
# **By the end you will be able to**
# - write a softmax by hand, and explain why a safe softmax subtracts the maximum first;
# - turn a matrix of scores into attention weights whose rows sum to 1, and say why they are
#   no longer symmetric;
# - compute context vectors as weighted mixes of the inputs, and read them that way;
# - sharpen or flatten a distribution with a temperature;
# - average the past three ways — a loop, a lower-triangular matrix product, a masked
#   softmax — and see that they agree.
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
import matplotlib.pyplot as plt
import torch

from grader.figures import show

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# The sentence and its made-up 3-dimensional embeddings from unit 01, and the matrix of all
# pairwise dot products.

# %%
words = ["Your", "journey", "starts", "with", "one", "step"]
inputs = torch.tensor(
    [[0.43, 0.15, 0.89],   # Your     x^(1)
     [0.55, 0.87, 0.66],   # journey  x^(2)
     [0.57, 0.85, 0.64],   # starts   x^(3)
     [0.22, 0.58, 0.33],   # with     x^(4)
     [0.77, 0.25, 0.10],   # one      x^(5)
     [0.05, 0.80, 0.55]]   # step     x^(6)
)
scores = inputs @ inputs.T  # (T, d) @ (d, T) -> (T, T) = (6, 6)
print(scores)

# %% [markdown]
# ## 1. From scores to weights
#
# Take the *journey* row of `scores`. We want to turn it into **weights** that say how much
# *journey* should take from each token. Good weights are
# 1. never negative,
# 2. add up to 1 (so that mixing vectors with them gives an *average*, not something that
#    grows with the length of the sentence), and
# 3. keep the order of the scores: a larger score gets a larger weight.
#
# The first idea is to divide each score by the sum of the row. Here it happens to work,
# because all six scores are positive. But a dot product can be negative (two vectors pointing
# in opposite directions), and then the idea falls apart:

# %%
journey_scores = scores[1]                            # (T,) = (6,)
print(journey_scores / journey_scores.sum())          # fine here: all scores are positive

some_scores = torch.tensor([2.0, -1.0, 0.5])
print(some_scores / some_scores.sum())                # a negative "weight", and others above 1
print(torch.tensor([1.0, -1.0]) / torch.tensor([1.0, -1.0]).sum())  # a sum of 0: division by zero


# %% [markdown]
# The **softmax** fixes all three problems at once. It first sends every score through the
# exponential, which is always positive and grows with its input, and only then divides by
# the sum:
#
# $$\operatorname{softmax}(z)_i = \frac{e^{z_i}}{\sum_{j} e^{z_j}} .$$
#
# Every weight is positive, they add up to 1, and a larger score gives a larger weight. The
# exponential also *exaggerates* differences: a score that is larger by 1 gets $e \approx 2.7$
# times the weight.

# %%
def naive_softmax(z: torch.Tensor) -> torch.Tensor:
    """The textbook formula, for a 1-D tensor. (Section 2 shows why it is not good enough.)"""
    exps = torch.exp(z)        # (n,), all positive
    return exps / exps.sum()   # (n,), sums to 1

print(naive_softmax(some_scores))
print(naive_softmax(journey_scores), naive_softmax(journey_scores).sum())

# %% [markdown]
# ## 2. Why a safe softmax subtracts the maximum
#
# A `float32` number cannot be larger than about $3.4 \times 10^{38}$, and
# $e^{89} \approx 4.5 \times 10^{38}$ is already too large: the exponential **overflows** to
# `inf`. Scores of a few hundred are not unusual in a real model (unit 04 shows why they grow
# with the embedding size). Then the naive formula computes `inf / inf`, which is `NaN`
# ("not a number"), and one `NaN` spreads through every later computation. Very negative
# scores fail too: $e^{-1000}$ **underflows** to 0, and the formula computes $0 / 0$.

# %%
print([f"{v:.3g}" for v in torch.exp(torch.tensor([80.0, 88.0, 89.0, 1000.0])).tolist()])  # e^80, e^88, e^89, e^1000
print(naive_softmax(torch.tensor([1000.0, 1001.0, 1002.0])))     # overflow:  inf / inf
print(naive_softmax(torch.tensor([-1000.0, -1001.0, -1002.0])))  # underflow: 0 / 0

# %% [markdown]
# The fix comes from a property of the formula: subtracting the same number $c$ from every
# score does not change the softmax, because the factor $e^{-c}$ appears above and below the
# fraction bar and cancels:
#
# $$\frac{e^{z_i - c}}{\sum_j e^{z_j - c}} = \frac{e^{-c}\, e^{z_i}}{e^{-c} \sum_j e^{z_j}} = \frac{e^{z_i}}{\sum_j e^{z_j}} .$$
#
# Choose $c = \max_j z_j$. Then the largest shifted score is exactly 0, so every exponential
# lies in $(0, 1]$ and nothing overflows; and the largest one is $e^0 = 1$, so the sum is at
# least 1 and we never divide by zero. The scores $[1000, 1001, 1002]$ become $[-2, -1, 0]$,
# whose softmax is perfectly ordinary:

# %%
big = torch.tensor([1000.0, 1001.0, 1002.0])
print(big - big.max())                 # [-2, -1, 0]
print(naive_softmax(big - big.max()))  # [0.0900, 0.2447, 0.6652], the softmax of [1000, 1001, 1002]


# %% [markdown]
# ### Exercise — `softmax(x, dim=-1)` (about 10 minutes)
#
# **Goal:** write a numerically stable softmax along the dimension `dim` of a tensor of any
# shape. Every slice along `dim` (for a matrix and `dim=-1`: every row) must become positive
# numbers that sum to 1; the result has the shape of `x`. Subtract the maximum *of each slice*
# before taking the exponential, so that inputs like `1000.0` do not give `NaN`. Write it
# yourself: `torch.softmax`, `F.softmax` and `Tensor.softmax` are blocked while your function
# is checked.
#
# <details><summary>Hint</summary>
#
# `x.max(dim=dim, keepdim=True).values` is the maximum of each slice along `dim`, and
# `.sum(dim=dim, keepdim=True)` its sum. `keepdim=True` keeps the reduced dimension with size
# 1, so that broadcasting lines up each slice with its *own* maximum and sum. Without it,
# a `(6, 6)` matrix would be lined up with the wrong rows — and no error would tell you.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u02_softmax", "locked": false, "schema_version": 3, "solution": true, "task": false}
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of `x` along `dim`; any shape, and the result has the shape of `x`.

    Numerically stable: subtracts the maximum of each slice along `dim` before exp, so large
    inputs such as 1000.0 give no inf or NaN. Do not use the library's softmax or
    log-softmax (torch.softmax, F.softmax, Tensor.softmax, torch.special.softmax, and the
    log_softmax of each)."""
    ### BEGIN SOLUTION
    shifted = x - x.max(dim=dim, keepdim=True).values  # same shape as x; each slice's maximum is now 0
    exps = torch.exp(shifted)                           # same shape, every entry in (0, 1]
    return exps / exps.sum(dim=dim, keepdim=True)       # each slice along dim sums to 1
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u02_softmax_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("softmax")
### BEGIN HIDDEN TESTS
import torch

from grader.inputs import JOURNEY
from grader.spec import Case, Mistake, Spec, forbid, run


def softmax_examples():
    return [Case("the journey scores (6, 6), softmax of each row", x=JOURNEY @ JOURNEY.T),
            Case("large scores [[1000, 1001, 1002], [-2, 0, 3]], softmax of each row",
                 x=torch.tensor([[1000.0, 1001.0, 1002.0], [-2.0, 0.0, 3.0]])),
            Case("a (3, 4) tensor with dim=0 (each column sums to 1)",
                 x=torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, -1.0, 2.0, 1.0], [3.0, 0.0, 0.0, 2.0]]), dim=0)]


def softmax_cases(g):
    # Offsets stay at a few hundred where rows are not dominated by one entry: exp already
    # overflows or underflows there, and a correct float32 softmax written with logsumexp (which
    # rounds an intermediate at the size of the inputs) stays within the default tolerance.
    masked = torch.randn(4, 4, generator=g)
    masked[torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)] = float("-inf")
    far_apart = torch.randn(3, 5, generator=g)
    far_apart[0] += 300.0
    return [Case("a vector of length 5", x=torch.randn(5, generator=g)),
            Case("a vector of length 1", x=torch.randn(1, generator=g)),
            Case("a (2, 3, 4) tensor with dim=1 given positionally", x=torch.randn(2, 3, 4, generator=g), dim=1,
                 positional=True),
            Case("a (2, 3, 4) tensor with dim=0", x=torch.randn(2, 3, 4, generator=g), dim=0),
            Case("a (3, 5) tensor with dim=-2", x=torch.randn(3, 5, generator=g) * 3, dim=-2),
            Case("large inputs (about 10,000 in size): exp overflows unless the maximum is subtracted",
                 x=torch.randn(3, 6, generator=g) * 1e4),
            Case("very negative inputs (about -200): exp underflows to 0 unless the maximum is subtracted",
                 x=torch.randn(2, 5, generator=g) * 3 - 200),
            Case("rows on very different scales (one row near 300, the others near 0)", x=far_apart),
            Case("scores with -inf entries above the diagonal (masked), softmax of each row", x=masked)]


def call_softmax(x, dim=None, positional=False):
    with forbid("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax",
                "torch.log_softmax", "torch.nn.functional.log_softmax", "torch.Tensor.log_softmax",
                "torch.special.log_softmax", reason="this exercise asks you to write the softmax yourself"):
        if dim is None:
            return softmax(x)
        return softmax(x, dim) if positional else softmax(x, dim=dim)


def softmax_oracle(x, dim=-1):
    return torch.softmax(x.double(), dim=dim)


def softmax_mistakes(x, dim=-1):
    def shaped(make):
        try:
            value = make()
        except RuntimeError:  # shapes that do not broadcast: the learner's code would raise there
            return None
        return value if value.shape == x.shape else None

    last = dim % x.dim() == x.dim() - 1
    shifted = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    finite = bool(torch.isfinite(x).all())
    ordinary = finite and bool(((torch.exp(x) > 0) & torch.isfinite(torch.exp(x))).all())
    if not last:
        yield Mistake("you ignored the `dim` argument and always took the softmax over the last dimension",
                      torch.softmax(x, dim=-1))
    yield Mistake("you took the softmax over dim 0 instead of over the `dim` you were given", torch.softmax(x, dim=0))
    yield Mistake("you took exp of the raw inputs: large inputs overflow to inf (inf / inf = NaN) and very negative "
                  "ones underflow to 0 (0 / 0 = NaN). Subtract the maximum of each slice along `dim` before exp",
                  torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True))
    yield Mistake("you subtracted the maximum of the whole tensor: a slice far below it underflows to 0 (0 / 0 = "
                  "NaN). Subtract the maximum of each slice along `dim` (keepdim=True)",
                  torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(dim=dim, keepdim=True))
    # Only where these values are distinctive: with -inf entries, or exps that overflow or
    # underflow, they collapse to zeros that other bugs produce as well.
    if ordinary:
        yield Mistake("you divided by the sum of the inputs; divide by the sum of their exponentials",
                      torch.exp(x) / x.sum(dim=dim, keepdim=True))
    if finite:
        yield Mistake("you divided by the sum of the shifted inputs (x - max); divide by the sum of their exponentials",
                      shifted / (x - x.max(dim=dim, keepdim=True).values).sum(dim=dim, keepdim=True))
    yield Mistake("you divided the inputs by their sum without taking exp: negative inputs give negative weights",
                  x / x.sum(dim=dim, keepdim=True))
    yield Mistake("the slices do not sum to 1: divide the exponentials by their sum", shifted)
    yield Mistake("you subtracted the maximum inside the sum but not in the numerator: shift both the same way",
                  torch.exp(x) / shifted.sum(dim=dim, keepdim=True))
    yield Mistake("you divided by the sum of all the entries of the tensor; divide each slice by its own sum along "
                  "`dim`", torch.exp(x - x.max()) / torch.exp(x - x.max()).sum())
    def unkept_max():
        return torch.exp(x - x.max(dim=dim).values)

    for message, value in (
            ("you took the sum without keepdim=True, so broadcasting divided each entry by another slice's sum",
             shaped(lambda: shifted / shifted.sum(dim=dim))),
            ("you took the maximum without keepdim=True, so broadcasting subtracted another slice's maximum",
             shaped(lambda: unkept_max() / unkept_max().sum(dim=dim, keepdim=True))),
            ("you took the maximum and the sum without keepdim=True, so broadcasting lined up the wrong slices",
             shaped(lambda: unkept_max() / unkept_max().sum(dim=dim)))):
        if value is not None:
            yield Mistake(message, value)


run(Spec("softmax", call_softmax, softmax_oracle, examples=softmax_examples, cases=softmax_cases,
         mistakes=softmax_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Your softmax against the scores that broke the naive one, and against PyTorch's:

# %%
print(softmax(torch.tensor([1000.0, 1001.0, 1002.0])))
print(softmax(torch.tensor([-1000.0, -1001.0, -1002.0])))
print(torch.allclose(softmax(scores), torch.softmax(scores, dim=-1)))

# %% [markdown]
# ## 3. The attention weights of the sentence
#
# Apply the softmax to every row of the score matrix and you have the **attention weights**:
# entry `[i, j]` says how much token *i* attends to token *j*. Each row is a probability
# distribution over the six tokens. The row of *journey* is
# `[0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]`: it attends most to itself and to
# *starts*, least to *one*, as its scores said.
#
# A six-token sentence has a **6 × 6** weight matrix. (Some write-ups of this example print a
# 7 × 7 matrix and seven context vectors for these six tokens; the values below are the right
# ones.)

# %%
weights = softmax(scores, dim=-1)  # (T, T) = (6, 6)
print(weights)
print("row sums:", weights.sum(dim=-1))
print("symmetric:", torch.allclose(weights, weights.T))
print(f"Your -> journey: {weights[0, 1]:.4f}   journey -> Your: {weights[1, 0]:.4f}")

# %% [markdown]
# The scores were symmetric, the weights are not. Entry `[i, j]` is $e^{s_{ij}}$ divided by
# the sum of row *i*, entry `[j, i]` the same $e^{s_{ij}}$ divided by the sum of row *j*, and
# the rows have different sums. *Your* gives 0.2006 of its attention to *journey*, but
# *journey* — which has strong scores with several tokens — gives only 0.1385 back to *Your*.
# Attention is a conversation where each token decides for itself whom to listen to.
#
# A heat map shows the whole matrix. Read it by rows: each row is one token's attention, and
# each row adds up to 1.

# %%
fig, ax = plt.subplots(figsize=(5.5, 4.5))
image = ax.imshow(weights.numpy(), cmap="viridis")
for i in range(len(words)):
    for j in range(len(words)):
        ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=8,
                color="white" if weights[i, j] < 0.18 else "black")
ax.set_xticks(range(len(words)), words, rotation=45)
ax.set_yticks(range(len(words)), words)
ax.set_xlabel("attends to (key)")
ax.set_ylabel("token (query)")
ax.set_title("Attention weights: softmax of each row")
fig.colorbar(image)
show()

# %% [markdown]
# ## 4. The context vector: a weighted mix
#
# The weights say how much to take from each token; the **context vector** takes it. For
# token *i* it is the weighted sum of all the token vectors with the weights of row *i*:
#
# $$z^{(i)} = \sum_{j=1}^{T} w_{ij}\, x^{(j)} .$$
#
# Because the weights are positive and sum to 1, this is a *weighted average*: a mix of the
# inputs in which the tokens that *i* attends to most have the largest share.
#
# Two pictures help.
# - **Mixing.** Suppose you want to guess what a child will be like at age ten — height,
#   weight, and so on, as a vector. A reasonable guess mixes the vectors of the relatives at
#   the same age: a large share for each parent, smaller shares for grandparents, a little for
#   aunts and uncles, all shares adding up to one. Who gets which share depends on the question
#   (guessing for a boy or for a girl changes the shares). The shares are the attention weights,
#   the mix is the context vector.
# - **Search.** You type the query *"python tutorial"*. The search engine compares it with the
#   title of every page — *"python tutorial"*, *"python project"*, *"java tutorial"* — and finds
#   them relevant to different degrees. Rather than returning only the best page, attention
#   returns a blend of all the page *contents*, each in proportion to how well its title
#   matched. The query is what you look for, the titles are the **keys** you match it against,
#   the contents are the **values** you mix.
#
# Here is the search picture with made-up numbers: a 2-number query and titles, and 3-number
# page contents.

# %%
query = torch.tensor([1.0, 1.0])                       # "python tutorial"
titles = torch.tensor([[1.0, 1.0],                     # "python tutorial"  (keys)
                       [1.0, 0.0],                     # "python project"
                       [0.0, 1.0]])                    # "java tutorial"
contents = torch.tensor([[1.0, 0.0, 0.0],              # what each page holds (values)
                         [0.0, 1.0, 0.0],
                         [0.0, 0.0, 1.0]])
page_weights = softmax(titles @ query)                 # (3,): how well each title matches
print(page_weights)
print(page_weights @ contents)                         # (3,): the blend of the contents

# %% [markdown]
# In the simple attention of this unit a token plays all three roles with the same vector:
# its embedding is the query, the key and the value. Unit 03 gives each role its own learned
# projection. Here is the context vector of *journey*, computed term by term:

# %%
context_journey = torch.zeros(3)                       # (d,)
for j in range(len(words)):
    context_journey += weights[1, j] * inputs[j]       # weight (scalar) times token vector (d,)
print(context_journey)                                 # [0.4419, 0.6515, 0.5683]


# %% [markdown]
# All context vectors at once are a single matrix product. Row *i* of `weights @ inputs` is
# row *i* of the weights times the matrix of token vectors, which is exactly
# $\sum_j w_{ij} x^{(j)}$: `(T, T) @ (T, d) -> (T, d)`.

# %% [markdown]
# ### Exercise — `simple_self_attention(inputs)` (about 10 minutes)
#
# **Goal:** given token vectors `inputs` of shape `(T, d)`, return the pair
# `(weights, context)`: the `(T, T)` attention weights (the softmax of each row of the
# dot-product scores, with no scaling) and the `(T, d)` context vectors. You may use your
# `softmax` or `torch.softmax`.
#
# Expected for *journey* (row 2): weights `[0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]`,
# context `[0.4419, 0.6515, 0.5683]`.
#
# <details><summary>Hint</summary>
#
# Three lines: the scores of unit 01, a softmax along the right dimension (which way should
# the weights sum to 1?), and one matrix product. Check the order of the two matrices in that
# product against the shapes `(T, T)` and `(T, d)`.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u02_simple_self_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def simple_self_attention(inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention without trainable weights, for token vectors `inputs` (T, d).

    Returns (weights, context): weights (T, T), row i the softmax of token i's dot-product
    scores (each row sums to 1); context (T, d), row i the mix of the rows of `inputs`
    with the weights of row i."""
    ### BEGIN SOLUTION
    scores = inputs @ inputs.T                  # (T, d) @ (d, T) -> (T, T)
    weights = torch.softmax(scores, dim=-1)     # (T, T), each row sums to 1 (your softmax works too)
    context = weights @ inputs                  # (T, T) @ (T, d) -> (T, d)
    return weights, context
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u02_simple_self_attention_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("simple_self_attention")
### BEGIN HIDDEN TESTS
import torch

from grader.inputs import journey
from grader.spec import Case, Mistake, Spec, Tuple, run


def attention_examples():
    return [Case("the six-token sentence", inputs=journey()),
            Case("its first three tokens (T = d = 3)", inputs=journey()[:3]),
            Case("its first three tokens times 10: scores up to 150, where exp overflows unless the maximum is "
                 "subtracted", inputs=journey()[:3] * 10)]


def attention_cases(g):
    return [Case(f"random inputs, T={t}, d={d}", inputs=torch.randn(t, d, generator=g) * s)
            for t, d, s in ((1, 3, 1.0), (4, 4, 1.0), (5, 2, 0.5), (3, 7, 1.0))] + [
        Case("long vectors (scores above 100: exp overflows unless the maximum is subtracted), T=5, d=16",
             inputs=torch.randn(5, 16, generator=g) * 3)]


def call_simple_self_attention(inputs):
    return simple_self_attention(inputs)


def attention_oracle(inputs):
    x = inputs.double()
    weights = torch.softmax(x @ x.T, dim=-1)
    return weights, weights @ x


def attention_mistakes(inputs):
    """Values are (weights, context); None where the mistake says nothing about that part."""
    x = inputs
    scores = x @ x.T
    w = torch.softmax(scores, dim=-1)
    unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    w_cos = torch.softmax(unit @ unit.T, dim=-1)
    w_scaled = torch.softmax(scores / x.shape[-1] ** 0.5, dim=-1)
    yield Mistake("your weights are the raw scores: apply a softmax to each row so that it sums to 1", (scores, None))
    yield Mistake("you mixed the inputs with the raw scores instead of the softmax weights", (None, scores @ x))
    yield Mistake("you took the softmax over the columns (dim=0): each row of the weights must sum to 1", (w.T, None))
    yield Mistake("you computed weights.T @ inputs: row i of the context must mix the inputs with row i of the weights",
                  (None, w.T @ x))
    yield Mistake("you returned (context, weights): return the weights first, then the context", (w @ x, w))
    yield Mistake("you divided the scores by sqrt(d): this unit's attention uses plain dot products (scaling comes in "
                  "unit 04)", (w_scaled, w_scaled @ x))
    yield Mistake("you used cosine similarities as scores: attention uses plain dot products", (w_cos, w_cos @ x))
    yield Mistake("you divided the scores by their row sums without exp: negative scores would give negative weights; "
                  "use a softmax", (scores / scores.sum(dim=-1, keepdim=True), None))
    if x.shape[0] == x.shape[1]:
        yield Mistake("you computed inputs @ weights: the weights go on the left, (T, T) @ (T, d)", (None, x @ w))


run(Spec("simple_self_attention", call_simple_self_attention, attention_oracle, examples=attention_examples,
         cases=attention_cases, mistakes=attention_mistakes, judge=Tuple()))
### END HIDDEN TESTS

# %% [markdown]
# Every context vector is an average of the token vectors, so each of its numbers lies between
# the smallest and the largest value of that column of `inputs`. The picture below takes the
# context vector of *journey* apart: each bar is one of its three numbers, stacked from the
# six contributions $w_{2j} x^{(j)}$.

# %%
weights, context = simple_self_attention(inputs)
print(context)
print("inside the range of the inputs:",
      bool(((context >= inputs.min(dim=0).values) & (context <= inputs.max(dim=0).values)).all()))

contributions = weights[1][:, None] * inputs  # (T, 1) * (T, d) -> (T, d): row j is w_2j * x^(j)
fig, ax = plt.subplots(figsize=(6, 3.5))
bottom = torch.zeros(3)
for j, word in enumerate(words):   # hatched as well as coloured: the stack reads in grey too
    ax.bar(["dim 1", "dim 2", "dim 3"], contributions[j].numpy(), bottom=bottom.numpy(), label=word,
           hatch=["", "//", "..", "xx", "\\\\", "oo"][j], edgecolor="white")
    bottom += contributions[j]
ax.set_ylabel("value")
ax.set_title("Context vector of 'journey' as a mix of the six tokens")
ax.legend(fontsize=8, bbox_to_anchor=(1.02, 1), loc="upper left")
show()

# %% [markdown]
# ## 5. Temperature
#
# The same softmax turns a language model's **logits** — one score per word of the vocabulary
# — into probabilities for the next word. Before sampling, the logits are often divided by a
# **temperature** $\tau > 0$:
#
# $$p_i = \operatorname{softmax}(z / \tau)_i .$$
#
# Dividing by $\tau > 1$ shrinks the differences between logits, so the distribution becomes
# flatter and sampling more adventurous; $\tau < 1$ stretches them, so the most likely words
# take almost everything and the output becomes more predictable. As $\tau \to 0$ all the
# probability goes to the largest logit (that limit is plain argmax; the formula itself cannot
# take $\tau = 0$), and as $\tau \to \infty$ the distribution becomes uniform.
#
# Five candidate next words after *"Your journey starts with one"*, with made-up
# probabilities. The logarithm of a probability is a perfectly good logit (a softmax of
# $\log p$ gives back $p$), so we start from those:

# %%
candidates = ["day", "mile", "idea", "apple", "step"]
logits = torch.log(torch.tensor([0.1001, 0.2297, 0.1732, 0.0311, 0.4659]))  # (V,) = (5,)
print(logits)
print(softmax(logits))  # the probabilities we started from


# %% [markdown]
# ### Exercise — `softmax_with_temperature(logits, temperature)` (about 5 minutes)
#
# **Goal:** return the softmax of `logits / temperature` over the last dimension, for logits
# of shape `(V,)` or `(..., V)`. A temperature of 0 or below makes no sense: raise a
# `ValueError` with a short message for `temperature <= 0`.
#
# Expected: with temperature 5, `[0.1836, 0.2167, 0.2048, 0.1453, 0.2496]`; with
# temperature 0.5, `[0.0323, 0.1698, 0.0965, 0.0031, 0.6984]`.
#
# <details><summary>Hint</summary>
#
# A high temperature should make the distribution *flatter*. Should the logits be made
# smaller or larger for that? Check the temperature before you use it.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u02_softmax_with_temperature", "locked": false, "schema_version": 3, "solution": true, "task": false}
def softmax_with_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax of `logits / temperature` over the last dimension: (..., V) -> (..., V).

    Raises ValueError when temperature <= 0."""
    ### BEGIN SOLUTION
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return torch.softmax(logits / temperature, dim=-1)  # (..., V); your softmax works too
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u02_softmax_with_temperature_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("softmax_with_temperature")
try:
    softmax_with_temperature(torch.tensor([1.0, 2.0, 3.0]), 0.0)
    raised_value_error = False
except ValueError:
    raised_value_error = True
assert raised_value_error, "softmax_with_temperature(logits, 0.0) must raise ValueError: a temperature must be > 0"
### BEGIN HIDDEN TESTS
import torch

from grader.spec import Case, Exact, Mistake, Spec, run

SEED_LOGITS = torch.log(torch.tensor([0.1001, 0.2297, 0.1732, 0.0311, 0.4659]))


def temperature_examples():
    two_rows = torch.stack([SEED_LOGITS, torch.tensor([2.0, 0.0, -1.0, 1.0, 0.5])])
    return [Case("the five candidate words, temperature 5", logits=SEED_LOGITS.clone(), temperature=5.0),
            Case("the five candidate words, temperature 0.5", logits=SEED_LOGITS.clone(), temperature=0.5),
            Case("two rows of logits (2, 5), temperature 2, softmax of each row", logits=two_rows, temperature=2.0)]


def temperature_cases(g):
    return [Case("logits (7,), temperature 1", logits=torch.randn(7, generator=g), temperature=1.0),
            Case("logits (3, 6), temperature 0.7", logits=torch.randn(3, 6, generator=g), temperature=0.7),
            Case("logits (2, 3, 4), temperature 1.5", logits=torch.randn(2, 3, 4, generator=g), temperature=1.5),
            Case("logits (4,), temperature given as the int 3", logits=torch.randn(4, generator=g), temperature=3),
            Case("logits (1,), temperature 10", logits=torch.randn(1, generator=g), temperature=10.0),
            Case("large logits (about 100) with temperature 0.1: inputs of about 1000 reach the softmax",
                 logits=torch.randn(2, 5, generator=g) * 100, temperature=0.1)]


def call_softmax_with_temperature(logits, temperature):
    return softmax_with_temperature(logits, temperature)


def temperature_oracle(logits, temperature):
    return torch.softmax(logits.double() / temperature, dim=-1)


def temperature_mistakes(logits, temperature):
    yield Mistake("you multiplied the logits by the temperature; divide them by it (a high temperature must flatten "
                  "the distribution)", torch.softmax(logits * temperature, dim=-1))
    yield Mistake("the temperature has no effect on your result: divide the logits by it before the softmax",
                  torch.softmax(logits, dim=-1))
    yield Mistake("you divided the probabilities by the temperature after the softmax; divide the logits before it",
                  torch.softmax(logits, dim=-1) / temperature)
    yield Mistake("you raised the probabilities to the power 1/temperature but did not renormalise them to sum to 1",
                  torch.softmax(logits, dim=-1) ** (1 / temperature))
    if logits.dim() > 1:
        yield Mistake("you took the softmax over dim 0; the probabilities are over the last dimension",
                      torch.softmax(logits / temperature, dim=0))


def temperature_error_examples():
    return [Case("temperature 0.0 (must raise ValueError)", logits=torch.tensor([2.0, 1.0, 0.1]), temperature=0.0)]


def temperature_error_cases(g):
    return [Case(f"temperature {t!r} (must raise ValueError)", logits=torch.randn(5, generator=g), temperature=t)
            for t in (0, -1.0, -2.5)]


def call_softmax_with_temperature_error(logits, temperature):
    try:
        softmax_with_temperature(logits, temperature)
    except ValueError:
        return "raised ValueError"
    return "returned without an error"


def temperature_error_oracle():
    return "raised ValueError"


def temperature_error_mistakes():
    yield Mistake("you did not raise ValueError for a temperature <= 0 (check it before dividing)",
                  "returned without an error")


run(Spec("softmax_with_temperature", call_softmax_with_temperature, temperature_oracle,
         examples=temperature_examples, cases=temperature_cases, mistakes=temperature_mistakes),
    Spec("softmax_with_temperature", call_softmax_with_temperature_error, temperature_error_oracle,
         examples=temperature_error_examples, cases=temperature_error_cases, mistakes=temperature_error_mistakes, judge=Exact()))
### END HIDDEN TESTS

# %% [markdown]
# The same five words at three temperatures. At 0.5, *step* takes 70 % of the probability;
# at 5, the five words are almost equally likely.

# %%
temperatures = [0.5, 1.0, 5.0]
fig, ax = plt.subplots(figsize=(6.5, 3.5))
for k, tau in enumerate(temperatures):
    probs = softmax_with_temperature(logits, tau)
    ax.bar([i + (k - 1) * 0.27 for i in range(len(candidates))], probs.numpy(), width=0.27,
           label=f"temperature {tau}", hatch=["", "//", ".."][k], edgecolor="white")
ax.set_xticks(range(len(candidates)), candidates)
ax.set_ylabel("probability")
ax.set_title("Lower temperature: sharper; higher temperature: flatter")
ax.legend()
show()


# %% [markdown]
# ## 6. The average of the past, three ways
#
# A language model reads a text left to right and, at every position, predicts the next token.
# When it works at position *t* it may use tokens $0, \dots, t$, never the ones after *t*
# (unit 05 shows how the future would otherwise leak in). The simplest way to gather
# information from the past is to **average** it: the new vector of token *t* is the mean of
# the vectors of tokens $0, 1, \dots, t$ — the current token included.
#
# It is a crude summary: every earlier token counts the same, whether it matters or not.
# Attention will replace the equal shares by learned, data-dependent weights. But the averaging
# already has attention's shape, and seeing it three ways makes that plain.
#
# From here on the inputs may come in a **batch**: a tensor `(B, T, C)` holds `B` sequences
# of `T` tokens with `C` numbers each, and a single sequence is `(T, C)`. Either way the time
# axis is dim `-2`, the one before last.

# %% [markdown]
# ### Exercise — `prefix_average_loop(x)` (about 10 minutes)
#
# **Goal:** way 1, a loop over the positions. For `x` of shape `(T, C)` or `(B, T, C)`,
# return a tensor of the same shape whose row *t* (along dim `-2`) is the mean of rows
# $0, \dots, t$ of `x`.
#
# <details><summary>Hint</summary>
#
# `x[..., :t + 1, :]` keeps rows $0, \dots, t$ along dim `-2` whatever the leading
# dimensions; a mean over dim `-2` then gives one row. `torch.stack(list_of_rows, dim=-2)`
# puts the rows back together along the time axis.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u02_prefix_average_loop", "locked": false, "schema_version": 3, "solution": true, "task": false}
def prefix_average_loop(x: torch.Tensor) -> torch.Tensor:
    """Row t (along dim -2) of the result is the mean of rows 0..t of `x`.

    x: (T, C) or (B, T, C) -> same shape. Written with a loop over t."""
    ### BEGIN SOLUTION
    rows = []
    for t in range(x.shape[-2]):
        rows.append(x[..., : t + 1, :].mean(dim=-2))  # (..., C): the mean of rows 0..t
    return torch.stack(rows, dim=-2)                  # (..., T, C)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u02_prefix_average_loop_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("prefix_average_loop")
### BEGIN HIDDEN TESTS
import torch

from grader.inputs import journey
from grader.spec import Case, Mistake, Spec, run

SMALL_BATCH = torch.tensor([[[1.0, 2.0], [3.0, 0.0], [-1.0, 4.0], [5.0, -2.0]],
                            [[0.0, 0.0], [2.0, 2.0], [4.0, -4.0], [6.0, 6.0]]])


def prefix_loop_examples():
    return [Case("the six-token sentence (6, 3)", x=journey()),
            Case("a small batch (B, T, C) = (2, 4, 2)", x=SMALL_BATCH.clone())]


def prefix_loop_cases(g):
    return [Case(f"random x of shape {shape}", x=torch.randn(*shape, generator=g) * s + m)
            for shape, s, m in (((1, 3), 1.0, 0.0), ((5, 1), 1.0, 0.0), ((7, 4), 1.0, 0.0),
                                ((3, 6, 5), 1.0, 0.0), ((1, 1, 2), 1.0, 0.0), ((4, 2, 3), 1.0, 0.0),
                                ((2, 5, 3), 100.0, 1000.0))]


def call_prefix_average_loop(x):
    return prefix_average_loop(x)


def prefix_loop_oracle(x):
    T = x.shape[-2]
    counts = torch.arange(1, T + 1, dtype=torch.float64).reshape(T, 1)
    return torch.cumsum(x.double(), dim=-2) / counts


def prefix_loop_mistakes(x):
    T, C = x.shape[-2], x.shape[-1]
    sums = torch.cumsum(x, dim=-2)
    counts = torch.arange(1, T + 1, dtype=x.dtype).reshape(T, 1)
    before = sums - x                                   # sum of rows 0..t-1
    previous_nan = before / (counts - 1)                # row 0: 0 / 0
    previous_first = previous_nan.clone()
    previous_first[..., 0, :] = x[..., 0, :]
    leaves_out = "row t averages rows 0..t-1, leaving out row t itself ({}): include the current row"
    yield Mistake("row t averages the whole sequence, future rows included: row t may only use rows 0..t",
                  x.mean(dim=-2, keepdim=True).expand_as(x))
    if x.dim() == 3:
        yield Mistake("row t averages the whole sequence of every batch element, future rows included: row t of each "
                      "sequence may only use that sequence's rows 0..t", x.mean(dim=(0, -2), keepdim=True).expand_as(x))
    yield Mistake("you took one mean of the whole tensor (every row and every channel): row t averages rows 0..t, "
                  "each channel on its own", x.mean().expand_as(x))
    yield Mistake(leaves_out.format("row 0 became NaN, the mean of no rows"), previous_nan)
    yield Mistake(leaves_out.format("row 0 set to zero"), previous_nan.nan_to_num(0.0))
    yield Mistake(leaves_out.format("row 0 kept as it was"), previous_first)
    yield Mistake("row t averages rows t..T-1, the future: average rows 0..t",
                  torch.flip(torch.cumsum(torch.flip(x, [-2]), dim=-2) / counts, [-2]))
    yield Mistake("you summed rows 0..t but did not divide by the number of rows (t + 1)", sums)
    yield Mistake("you divided every row by T; row t is the mean of its own t + 1 rows", sums / T)
    yield Mistake("you divided row t by t; counting from 0, row t averages t + 1 rows", sums / (counts - 1))
    yield Mistake("you averaged along the last dimension (the channels); time is dim -2",
                  torch.cumsum(x, dim=-1) / torch.arange(1, C + 1, dtype=x.dtype))
    if x.dim() == 3:
        B = x.shape[0]
        yield Mistake("you averaged along the first dimension; for a batch (B, T, C) time is dim -2, not dim 0",
                      torch.cumsum(x, dim=0) / torch.arange(1, B + 1, dtype=x.dtype).reshape(B, 1, 1))


run(Spec("prefix_average_loop", call_prefix_average_loop, prefix_loop_oracle, examples=prefix_loop_examples,
         cases=prefix_loop_cases, mistakes=prefix_loop_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# **Way 2: a matrix product.** Averaging rows is mixing rows with weights, and mixing rows
# with weights is a matrix product, as for the context vectors. The weight matrix has
# $\frac{1}{t+1}$ in row *t* for the columns $0, \dots, t$ and 0 after them: a
# **lower-triangular** matrix whose rows sum to 1. For $T = 4$:
#
# $$\begin{bmatrix} 1 & 0 & 0 & 0 \\ \tfrac12 & \tfrac12 & 0 & 0 \\ \tfrac13 & \tfrac13 & \tfrac13 & 0 \\ \tfrac14 & \tfrac14 & \tfrac14 & \tfrac14 \end{bmatrix}$$
#
# `torch.tril(torch.ones(T, T))` gives the lower triangle of ones; divide each row by its sum
# and you have it. A `(T, T)` matrix times a `(B, T, C)` batch broadcasts: the same matrix is
# applied to every sequence of the batch.
#
# (Some write-ups describe this average as the mean of the tokens *before* the current one,
# $\frac{1}{t}\sum_{s<t} x_s$, and then draw this very matrix, whose diagonal includes the
# current token. The matrix is the one we use: row *t* averages rows $0, \dots, t$.)

# %% [markdown]
# ### Exercise — `prefix_average_matmul(x)` (about 10 minutes)
#
# **Goal:** the same result as `prefix_average_loop`, for `(T, C)` or `(B, T, C)`, with no loop: build
# the `(T, T)` averaging matrix and multiply.
#
# <details><summary>Hint</summary>
#
# Build the matrix on the same `dtype` and `device` as `x` (`torch.ones` accepts both as
# keywords). Which side of `x` does a matrix that mixes *rows* go on?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u02_prefix_average_matmul", "locked": false, "schema_version": 3, "solution": true, "task": false}
def prefix_average_matmul(x: torch.Tensor) -> torch.Tensor:
    """Row t (along dim -2) of the result is the mean of rows 0..t of `x`.

    x: (T, C) or (B, T, C) -> same shape. Written as one matrix product."""
    ### BEGIN SOLUTION
    T = x.shape[-2]
    averaging = torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device))  # (T, T), ones on and below the diagonal
    averaging = averaging / averaging.sum(dim=-1, keepdim=True)               # (T, T), row t: 1/(t+1) on columns 0..t
    return averaging @ x                                                      # (T, T) @ (..., T, C) -> (..., T, C)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u02_prefix_average_matmul_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("prefix_average_matmul")
### BEGIN HIDDEN TESTS
import torch

from grader.inputs import journey
from grader.spec import Case, Mistake, Spec, run

SMALL_BATCH = torch.tensor([[[1.0, 2.0], [3.0, 0.0], [-1.0, 4.0], [5.0, -2.0]],
                            [[0.0, 0.0], [2.0, 2.0], [4.0, -4.0], [6.0, 6.0]]])


def prefix_matmul_examples():
    return [Case("the six-token sentence (6, 3)", x=journey()),
            Case("a small batch (B, T, C) = (2, 4, 2)", x=SMALL_BATCH.clone())]


def prefix_matmul_cases(g):
    return [Case(f"random x of shape {shape}", x=torch.randn(*shape, generator=g) * s + m)
            for shape, s, m in (((1, 3), 1.0, 0.0), ((5, 1), 1.0, 0.0), ((7, 4), 1.0, 0.0),
                                ((3, 6, 5), 1.0, 0.0), ((1, 1, 2), 1.0, 0.0), ((4, 2, 3), 1.0, 0.0),
                                ((2, 5, 3), 100.0, 1000.0))]


def call_prefix_average_matmul(x):
    return prefix_average_matmul(x)


def prefix_matmul_oracle(x):
    T = x.shape[-2]
    counts = torch.arange(1, T + 1, dtype=torch.float64).reshape(T, 1)
    return torch.cumsum(x.double(), dim=-2) / counts


def prefix_matmul_mistakes(x):
    T = x.shape[-2]
    ones = torch.tril(torch.ones(T, T, dtype=x.dtype))
    by_rows = ones / ones.sum(dim=-1, keepdim=True)
    upper = torch.triu(torch.ones(T, T, dtype=x.dtype))
    strict = torch.tril(torch.ones(T, T, dtype=x.dtype), diagonal=-1)
    sums = ones @ x
    counts = torch.arange(1, T + 1, dtype=x.dtype).reshape(T, 1)
    yield Mistake("you multiplied by the lower triangle of ones without dividing each row by its sum: that gives "
                  "sums, not averages", sums)
    yield Mistake("you transposed the averaging matrix (its columns sum to 1, not its rows): row t must mix rows 0..t",
                  by_rows.T @ x)
    yield Mistake("the columns of your averaging matrix sum to 1, not its rows (column sums, or a softmax over dim 0): "
                  "divide each row by its own sum", (ones / ones.sum(dim=0, keepdim=True)) @ x)
    yield Mistake("you divided column s by s + 1; divide row t by t + 1 (the counts need the shape (T, 1))",
                  (ones / torch.arange(1, T + 1, dtype=x.dtype)) @ x)
    yield Mistake("you divided the whole matrix by its total sum; divide each row by its own sum",
                  (ones / ones.sum()) @ x)
    yield Mistake("row t averages rows t..T-1, the future: use the lower triangle (tril), not the upper one",
                  (upper / upper.sum(dim=-1, keepdim=True)) @ x)
    yield Mistake("row t averages the whole sequence, future rows included: the averaging matrix must be "
                  "lower-triangular", x.mean(dim=-2, keepdim=True).expand_as(x))
    yield Mistake("you divided every row by T; row t is the mean of its own t + 1 rows", sums / T)
    yield Mistake("you divided row t by t; counting from 0, row t averages t + 1 rows", sums / (counts - 1))
    yield Mistake("your matrix leaves out the diagonal, so row t misses row t itself: keep the diagonal in the "
                  "triangle", (strict / strict.sum(dim=-1, keepdim=True)) @ x)


run(Spec("prefix_average_matmul", call_prefix_average_matmul, prefix_matmul_oracle, examples=prefix_matmul_examples,
         cases=prefix_matmul_cases, mistakes=prefix_matmul_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# **Way 3: a masked softmax.** Start from a score matrix of zeros — every token likes every
# other token the same. Block the future by setting the scores above the diagonal to $-\infty$.
# Now take the softmax of each row: $e^{0} = 1$ for the allowed positions, $e^{-\infty} = 0$ for
# the blocked ones, and dividing by the row sum gives $\frac{1}{t+1}$ on columns
# $0, \dots, t$ — the averaging matrix again, built with your own softmax.
#
# The three ways agree on a random batch:

# %%
x = torch.randn(2, 5, 3)                                          # (B, T, C)
T = x.shape[-2]
future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # (T, T), True above the diagonal
masked_scores = torch.zeros(T, T).masked_fill(future, float("-inf"))  # (T, T): 0 allowed, -inf blocked
averaging = softmax(masked_scores, dim=-1)                        # (T, T), rows sum to 1
print(averaging)

way1 = prefix_average_loop(x)                                     # (B, T, C)
way2 = prefix_average_matmul(x)                                   # (B, T, C)
way3 = averaging @ x                                              # (T, T) @ (B, T, C) -> (B, T, C)
print("loop == matmul:        ", torch.allclose(way1, way2, atol=1e-6))
print("loop == masked softmax:", torch.allclose(way1, way3, atol=1e-6))

# %% [markdown]
# Way 3 is the one that generalises. Replace the zeros by real scores — the dot products of
# the journey sentence, say — keep the mask, and the equal shares become data-dependent
# weights: each token still looks only at its past, but attends more to the tokens that
# resemble it. That is **causal attention**, the subject of unit 05.

# %%
blocked = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)             # (T, T), True above the diagonal
uniform_past = softmax(torch.zeros(6, 6).masked_fill(blocked, float("-inf")))     # (T, T), equal shares of the past
causal = softmax(scores.masked_fill(blocked, float("-inf")))                      # (T, T), shares set by the scores

fig, axes = plt.subplots(1, 2, figsize=(10.5, 4))
for ax, matrix, title in zip(axes, (uniform_past, causal), ("Average of the past", "Masked softmax of the scores")):
    image = ax.imshow(matrix.numpy(), cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(words)), words, rotation=45)
    ax.set_yticks(range(len(words)), words)
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
show()

# %% [markdown]
# ## Recap
#
# - The softmax $e^{z_i} / \sum_j e^{z_j}$ turns any scores into positive weights that sum to
#   1 and keep the order of the scores.
# - Subtracting the maximum first changes nothing mathematically and avoids overflow
#   (`inf / inf = NaN`) and underflow (`0 / 0`). Do it per slice, with `keepdim=True`.
# - Attention weights are the softmax of each row of the scores: rows sum to 1, and the matrix
#   is no longer symmetric, because each row is divided by its own sum.
# - A context vector is a weighted mix of the inputs, `weights @ inputs`: a query is matched
#   against keys, and the values are blended in proportion.
# - A temperature divides the logits: above 1 flatter, below 1 sharper; it must be positive.
# - Averaging the past is attention with equal scores and a causal mask: a loop, a
#   lower-triangular matrix product and a masked softmax all give it.
#
# **Next — unit 03:** the query, the key and the value each get their own learned projection,
# so a token can ask for something different from what it offers.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
