# %% [markdown]
# # Unit 03 — Self-attention with trainable weights
#
# In unit 02 every token scored every other token with a plain dot product of their
# embeddings, turned the scores into weights with a softmax and mixed the embeddings with
# those weights. Nothing in that recipe can be *learned*: the embeddings decide everything.
# Real attention gives each token three learned views of itself — a **query**, a **key** and a
# **value** — made by three weight matrices the network trains. In this unit you follow a
# small worked example by hand in NumPy, fix a mistake in the article it comes from, and then
# write the same thing as a PyTorch module that works on whole batches.
#
# **By the end you will be able to**
# - explain what queries, keys and values are and where they come from;
# - compute scaled dot-product attention step by step with NumPy and `scipy.special.softmax`;
# - say what $d_k$ in $\sqrt{d_k}$ is (the width of the keys — not the number of words) and why it is not rounded;
# - write a `SelfAttention` module with `nn.Linear` projections that accepts inputs with and without a batch dimension;
# - tell self-attention from cross-attention and write a `CrossAttention` module.
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
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy.special import softmax

from grader.figures import show

np.set_printoptions(precision=4, suppress=True)
torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## 1. Three roles for every token
#
# Picture a parent wondering what their child will be like at ten. One way to guess: take
# what each relative was like at ten — father, mother, grandparents, aunts, uncles — and mix
# those descriptions, giving close relatives a larger share than distant ones. Three things
# are at work in that guess:
#
# - the **query**: whom we are predicting for (a boy? a girl?), which changes how the shares are handed out;
# - the **keys**: what we compare the query with to decide each relative's share;
# - the **values**: what we actually mix, each relative's description, weighted by those shares.
#
# Attention does the same for tokens. Every token asks a question (its query), offers a label
# to be matched against other tokens' questions (its key), and hands over some content when
# it is chosen (its value). The three are made from the token's embedding $x$ by three
# matrices the network learns:
#
# $$q = x\,W_q, \qquad k = x\,W_k, \qquad v = x\,W_v .$$
#
# Then, exactly as in unit 02 but with queries and keys in place of the raw embeddings,
#
# $$\text{weights} = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right), \qquad \text{output} = \text{weights}\; V,$$
#
# where the softmax runs along each row (one row per query) and $d_k$ is the **width of a
# key vector** — the number of columns of $W_k$. Queries and keys are dotted with each other,
# so $W_q$ and $W_k$ must have the same number of columns; $W_v$ may have any.

# %% [markdown]
# ## 2. A worked example, step by step
#
# **Step 1 — the sentence.** Three words, each a vector of four numbers (the numbers are made
# up; only the mechanics matter). Row $i$ is word $i$.

# %%
words = ["word 1", "word 2", "word 3"]
x = np.array([[1.0, 0.0, 1.0, 0.0],
              [0.0, 2.0, 0.0, 2.0],
              [1.0, 1.0, 1.0, 1.0]])
print(x.shape)  # (T, d_in) = (3 words, 4 numbers each)

# %% [markdown]
# **Step 2 — the three weight matrices.** Each maps a 4-number embedding to a 3-number vector,
# so each is $4 \times 3$. In a real model they start random and are trained; here they are
# small integers so you can follow the arithmetic.

# %%
w_query = np.array([[1, 0, 1],
                    [1, 0, 0],
                    [0, 0, 1],
                    [0, 1, 1]])  # (d_in, d_k) = (4, 3)
w_key = np.array([[0, 0, 1],
                  [1, 1, 0],
                  [0, 1, 0],
                  [1, 1, 0]])    # (d_in, d_k) = (4, 3)
w_value = np.array([[0, 2, 0],
                    [0, 3, 0],
                    [1, 0, 3],
                    [1, 1, 0]])  # (d_in, d_v) = (4, 3)

# %% [markdown]
# **Step 3 — queries, keys and values.** Every word plays all three roles, so every row of
# `x` is multiplied by all three matrices. One matrix product per role does all words at once.

# %%
Q = x @ w_query  # (T, d_k) = (3, 3): row i is the query of word i
K = x @ w_key    # (T, d_k) = (3, 3): row j is the key of word j
V = x @ w_value  # (T, d_v) = (3, 3): row j is the value of word j
print("queries\n", Q, "\nkeys\n", K, "\nvalues\n", V)

# %% [markdown]
# **Step 4 — scores.** Entry `[i, j]` of `Q @ K.T` is the dot product of query $i$ with key $j$:
# how well word $j$ answers word $i$'s question. Row $i$ belongs to word $i$ as the asker.

# %%
scores = Q @ K.T  # (T, T) = (3, 3)
print(scores)

# %% [markdown]
# **Step 5, as the article did it.** The article this example comes from scales the scores by
# $\sqrt{d_k}$, but takes $d_k$ to be *the number of words* (3), writes $\sqrt{3} \approx 1.75$
# and rounds that to 1 — so in effect it does not scale at all. It then applies the softmax
# to each row in turn.

# %%
article_divisor = 1  # "d_k = 3 words, sqrt(3) = 1.75, rounded to 1"
article_weights = np.zeros_like(scores)
for i in range(len(scores)):                      # one softmax per row, as the article does
    article_weights[i] = softmax(scores[i] / article_divisor)
article_output = article_weights @ V              # (T, d_v)
print("weights\n", article_weights, "\noutput\n", article_output)

# %% [markdown]
# **Step 5, done right.** Two things are off in that step:
#
# 1. $d_k$ is the **key dimension**, the number of numbers in each key vector: `K.shape[1]`,
#    the number of columns of $W_k$. It has nothing to do with how many words the sentence
#    has. Here both happen to be 3, which hides the confusion; add a fourth word and the
#    article's rule would divide by $\sqrt{4} = 2$ although the keys still have 3 numbers.
# 2. $\sqrt{3} = 1.7320\ldots$ (not 1.75), and it is **not rounded**. Rounding to 1 removes the
#    scaling altogether.
#
# Why divide at all? A dot product of two $d_k$-number vectors adds up $d_k$ products, so its
# typical size grows with $d_k$. Large scores push the softmax towards a one-hot row: one word
# takes nearly all the weight and the gradients through the others vanish. Dividing by
# $\sqrt{d_k}$ keeps the scores' spread the same whatever the key width. Unit 04 measures this.
#
# A last detail: `scipy.special.softmax` normalises over **all** entries of an array unless
# you pass `axis`. The article dodged that by looping over rows; `axis=-1` does every row at once.

# %%
d_k = K.shape[1]                 # the width of a key: 3
print("sqrt(d_k) =", np.sqrt(d_k))
weights = softmax(scores / np.sqrt(d_k), axis=-1)  # (T, T), each row sums to 1
output = weights @ V                               # (T, d_v)
print("weights\n", weights, "\nrow sums", weights.sum(axis=-1), "\noutput\n", output)
print("change in the weights\n", weights - article_weights)

# %% [markdown]
# Scaling makes every row less peaked: word 2 gave 98.2 % of its attention to itself without
# scaling and 90.9 % with it. The numbers differ in the first or second decimal — enough to
# change what a network learns.
#
# **Step 6 — mixing the values.** The output row of a word is its weights times the value
# rows, added up. For word 1, term by term:

# %%
for j in range(3):
    print(f"{weights[0, j]:.4f} x value of word {j + 1} = {weights[0, j] * V[j]}")
print("sum                        =", (weights[0, :, None] * V).sum(axis=0))
print("row 0 of weights @ V       =", output[0])

# %% [markdown]
# Side by side, the weights as the article computed them and as they should be. Each row is
# one word asking; each column one word answering.

# %%
fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8), sharey=True)
for ax, matrix, title in zip(axes, (article_weights, weights),
                             ("article: divided by 1", "correct: divided by sqrt(3)")):
    image = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(3), words)
    ax.set_yticks(range(3), words)
    ax.set_xlabel("key (word answering)")
    ax.set_title(title)
    for i in range(3):
        for j in range(3):
            ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", color="white" if matrix[i, j] < 0.5 else "black")
axes[0].set_ylabel("query (word asking)")
fig.colorbar(image, ax=axes)
show()

# %% [markdown]
# **A coincidence worth noticing.** Look at `scores` again: it is symmetric. In unit 01 the
# similarity matrix `x @ x.T` was always symmetric, but `Q @ K.T` in general is not: entry
# `[i, j]` is $x_i W_q W_k^\top x_j^\top$, and $W_q W_k^\top$ is not a symmetric matrix. These
# three words just happen to give a symmetric result. Add a fourth word and the symmetry is
# gone — asking and answering are different roles.

# %%
x4 = np.vstack([x, [[2.0, 0.0, 0.0, 1.0]]])  # (4, d_in): the sentence with a fourth word
scores4 = (x4 @ w_query) @ (x4 @ w_key).T    # (4, 4)
print(scores4)
print("symmetric with 3 words:", np.allclose(scores, scores.T), "| with 4 words:", np.allclose(scores4, scores4.T))


# %% [markdown]
# ### Exercise — `attention_numpy(x, w_query, w_key, w_value)` (about 10 minutes)
#
# **Goal:** put steps 3 to 6 in one NumPy function. Given the inputs `x` of shape
# `(T, d_in)` and the three weight matrices (`w_query` and `w_key` of shape `(d_in, d_k)`,
# `w_value` of shape `(d_in, d_v)`), return the tuple `(weights, output)` as NumPy arrays of
# shapes `(T, T)` and `(T, d_v)`. Scale the scores by $1/\sqrt{d_k}$ with $d_k$ the width of
# the keys, unrounded, and use `scipy.special.softmax` (imported above as `softmax`).
#
# <details><summary>Hint</summary>
#
# Which array's shape tells you $d_k$: `x`, `Q` or `K`? Does it still work if `w_value` has a
# different number of columns from `w_key`, or if the sentence has 7 words? And which `axis`
# of the scores holds one query's row?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u03_attention_numpy", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_numpy(x: np.ndarray, w_query: np.ndarray, w_key: np.ndarray, w_value: np.ndarray):
    """Scaled dot-product self-attention in NumPy.

    x: (T, d_in); w_query, w_key: (d_in, d_k); w_value: (d_in, d_v).
    Returns (weights, output): NumPy arrays of shapes (T, T) and (T, d_v), where
    weights = softmax(Q K^T / sqrt(d_k)) row by row and d_k is the width of the keys (not rounded)."""
    ### BEGIN SOLUTION
    queries = x @ w_query  # (T, d_k)
    keys = x @ w_key       # (T, d_k)
    values = x @ w_value   # (T, d_v)
    scores = queries @ keys.T / np.sqrt(keys.shape[-1])  # (T, T)
    weights = softmax(scores, axis=-1)                   # (T, T), rows sum to 1
    return weights, weights @ values                     # (T, T), (T, d_v)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u03_attention_numpy_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("attention_numpy")
### BEGIN HIDDEN TESTS
import math

import torch

from grader.spec import Case, Mistake, Numpy, Spec, raised, run

SEED_X = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
SEED_X4 = torch.cat([SEED_X, torch.tensor([[2.0, 0.0, 0.0, 1.0]], dtype=torch.float64)])
SEED_WQ = torch.tensor([[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]])
SEED_WK = torch.tensor([[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]])
SEED_WV = torch.tensor([[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]])


def numpy_attention_examples():
    weights = {"w_query": SEED_WQ.clone(), "w_key": SEED_WK.clone(), "w_value": SEED_WV.clone()}
    wider_values = torch.cat([SEED_WV, torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0]])], dim=1)   # d_v = 5
    return [Case("the worked example: 3 words, d_in=4, d_k=d_v=3", x=SEED_X.clone(), **weights),
            Case("the worked example with a fourth word", x=SEED_X4.clone(), **weights),
            Case("its first two words, values of width 5: T=2, d_in=4, d_k=3, d_v=5", x=SEED_X[:2].clone(),
                 w_query=SEED_WQ.clone(), w_key=SEED_WK.clone(), w_value=wider_values),
            Case("the worked example times 30: scores in the hundreds, where exp overflows unless the maximum is "
                 "subtracted", x=SEED_X.clone() * 30, **weights),
            numpy_attention_case(torch.Generator().manual_seed(7), 2, 9, 5, 3, scale=0.3)]   # every width differs


def numpy_attention_case(g, t, d_in, d_k, d_v, scale=1.0):
    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return Case(f"random inputs, T={t}, d_in={d_in}, d_k={d_k}, d_v={d_v}"
                + (" with large scores (thousands)" if scale > 1 else ""),
                x=r(t, d_in) * scale, w_query=r(d_in, d_k), w_key=r(d_in, d_k), w_value=r(d_in, d_v))


def numpy_attention_cases(g):
    return [numpy_attention_case(g, t=5, d_in=6, d_k=2, d_v=3), numpy_attention_case(g, t=1, d_in=3, d_k=4, d_v=4),
            numpy_attention_case(g, t=4, d_in=2, d_k=7, d_v=5), numpy_attention_case(g, t=7, d_in=5, d_k=9, d_v=2),
            numpy_attention_case(g, t=6, d_in=8, d_k=8, d_v=8, scale=10.0)]


def call_attention_numpy(x, w_query, w_key, w_value):
    return attention_numpy(x.numpy(), w_query.numpy(), w_key.numpy(), w_value.numpy())


def numpy_attention_oracle(x, w_query, w_key, w_value):
    q, k, v = (x.double() @ w.double() for w in (w_query, w_key, w_value))
    weights = torch.softmax(q @ k.T / math.sqrt(k.shape[-1]), dim=-1)
    return weights.numpy(), (weights @ v).numpy()


def numpy_attention_wrong_scales(d_k, d_in, t, d_v):
    """(message, divisor) for divisors a learner may use instead of sqrt(d_k)."""
    right = math.sqrt(d_k)
    candidates = [(1.0, "no scale at all"), (float(d_k), "d_k instead of √d_k"),
                  (math.sqrt(d_in), "√d_in (the width of the inputs)"), (math.sqrt(t), "√T (the number of tokens)"),
                  (math.sqrt(d_v), "√d_v (the width of the values)"),
                  (float(math.floor(right)), "√d_k rounded to a whole number"),
                  (float(round(right)), "√d_k rounded to a whole number"),
                  (1 / right, "√d_k as a factor instead of a divisor")]
    # One message per wrong divisor: where two give the same value on a case, the check names
    # both, and a self-check example whose sizes differ names the one used.
    return list(dict.fromkeys((f"the scale of the scores is wrong: you seem to have used {label}. The scores are "
                               "divided by the square root of d_k, the width of the keys, without rounding", divisor)
                              for divisor, label in candidates if abs(divisor - right) > 1e-9))


def numpy_attention_mistakes(x, w_query, w_key, w_value):
    """Values are (weights, output) as NumPy arrays; None where the mistake says nothing about that part."""
    q, k, v = (x.double() @ w.double() for w in (w_query, w_key, w_value))
    t, d_in, d_k, d_v = x.shape[0], x.shape[1], k.shape[1], v.shape[1]
    scores = q @ k.T
    root = math.sqrt(d_k)
    weights = torch.softmax(scores / root, dim=-1)

    def both(w):
        return w.numpy(), (w @ v).numpy()

    for message, divisor in numpy_attention_wrong_scales(d_k, d_in, t, d_v):
        yield Mistake(message, both(torch.softmax(scores / divisor, dim=-1)))
    yield Mistake("the softmax normalised the whole matrix at once (scipy's softmax does that without an `axis`): "
                  "each row, one per query, must sum to 1",
                  both(torch.softmax((scores / root).flatten(), dim=0).reshape(scores.shape)))
    yield Mistake("the softmax went over the wrong dimension: the columns sum to 1, but each row (one per query) "
                  "must", both(torch.softmax(scores / root, dim=0)))
    yield Mistake("you computed keys @ queries.T: row i of the scores must hold query i dotted with every key, "
                  "so the queries go on the left", both(torch.softmax(k @ q.T / root, dim=-1)))
    yield Mistake("you divided by √d_k after the softmax: scale the scores before it, so that each row of weights "
                  "still sums to 1", both(torch.softmax(scores, dim=-1) / root))
    yield Mistake("the weights are right but the output mixes the inputs x: mix the values (x @ w_value) "
                  "instead", (None, (weights @ x.double()).numpy()))
    yield Mistake("you returned (output, weights): the order is (weights, output)",
                  ((weights @ v).numpy(), weights.numpy()))
    if t == d_k:   # Q @ K fits only then; anywhere else it raises NumPy's "matmul" error
        yield Mistake("the keys are not transposed: the scores are Q @ K.T, one row per query and one column per key",
                      both(torch.softmax(q @ k / root, dim=-1)))
    # The weights used transposed: x @ w.T fits only square weights, w @ x only d_k = d_v = T
    # (the worked example); anywhere else the product raises NumPy's "matmul" error.
    transposed = ("the weights are used transposed: x holds one row per word, of width d_in, and each weight "
                  "matrix is (d_in, d_k), so the queries are x @ w_query, of shape (T, d_k); neither "
                  "x @ w_query.T nor w_query @ x")
    for fits, product in ((d_in == d_k == d_v, lambda w: x.double() @ w.double().T),
                          (d_k == t == d_v, lambda w: w.double() @ x.double())):
        if fits:
            qt, kt, vt = (product(w) for w in (w_query, w_key, w_value))
            wt = torch.softmax(qt @ kt.T / math.sqrt(kt.shape[-1]), dim=-1)
            yield Mistake(transposed, (wt.numpy(), (wt @ vt).numpy()))
    yield Mistake("the shapes of a matrix product do not fit. x is (T, d_in) and each weight matrix (d_in, d_k): "
                  "the queries are x @ w_query, of shape (T, d_k), the scores Q @ K.T, of shape (T, T), and the "
                  "output weights @ V. Were the weights used transposed (w_query @ x, x @ w_query.T), or the keys "
                  "left without .T?", raised("ValueError: matmul"))


run(Spec("attention_numpy", call_attention_numpy, numpy_attention_oracle, examples=numpy_attention_examples,
         cases=numpy_attention_cases, mistakes=numpy_attention_mistakes, judge=Numpy()))
### END HIDDEN TESTS

# %% [markdown]
# Your function on the worked example and on the four-word sentence (the self-check tried
# both):

# %%
weights_np, output_np = attention_numpy(x, w_query, w_key, w_value)
print(weights_np, "\n", output_np)
print("same as step by step:", np.allclose(weights_np, weights) and np.allclose(output_np, output))
print(attention_numpy(x4, w_query, w_key, w_value)[0])

# %% [markdown]
# ## 3. The same thing in PyTorch, as a module
#
# A model keeps its trainable matrices inside an `nn.Module`. For a projection
# $x \mapsto x W$ the natural building block is `nn.Linear(d_in, d_out, bias=False)`:
#
# - it stores its matrix as `weight` with shape `(d_out, d_in)` — transposed compared with the
#   NumPy `w_query` above — and computes `x @ weight.T` (plus `bias` when there is one);
# - it starts from a sensible random initialisation, which trains better than `torch.rand`;
# - it offers an optional bias: many models (GPT-2 among them) add one to the query, key and
#   value projections, so our modules take a `qkv_bias` flag;
# - its parameters get readable names such as `W_query.weight`, which is how you (and the
#   grader) load given weights into a module.
#
# To reproduce the NumPy queries with an `nn.Linear`, copy `w_query.T` into its weight:

# %%
layer = nn.Linear(4, 3, bias=False)
print(layer.weight.shape)  # (d_out, d_in) = (3, 4)
with torch.no_grad():
    layer.weight.copy_(torch.tensor(w_query.T, dtype=torch.float32))
print(layer(torch.tensor(x, dtype=torch.float32)))  # (3, 3), the same as Q
print(Q)

# %% [markdown]
# **Batches.** A model processes many sequences at once, so its inputs have shape
# `(B, T, d_in)`. `nn.Linear` and `torch.softmax(..., dim=-1)` handle any number of leading
# dimensions, and `@` multiplies the last two dimensions batch by batch. The one trap is the
# transpose of the keys: `.T` reverses **all** dimensions of a 3-D tensor, so the batch
# dimension ends up last. Swap only the last two, counting from the end, and the same code
# works with and without a batch dimension.

# %%
keys = torch.randn(2, 3, 5)                        # (B, T, d_k)
print("keys.T would have shape", keys.permute(2, 1, 0).shape, "(all dimensions reversed)")
print("keys.transpose(-2, -1):", keys.transpose(-2, -1).shape)  # (B, d_k, T)
print("keys.mT:               ", keys.mT.shape)                 # (B, d_k, T), the same thing
print("keys[0].transpose(-2, -1):", keys[0].transpose(-2, -1).shape, "(no batch: still right)")


# %% [markdown]
# ### Exercise — `SelfAttention(d_in, d_out, qkv_bias=False)` (about 15 minutes)
#
# **Goal:** a module with three projections `W_query`, `W_key`, `W_value`, each an
# `nn.Linear(d_in, d_out, bias=qkv_bias)` with exactly these names, whose `forward(x)` takes
# `x` of shape `(T, d_in)` or `(B, T, d_in)` and returns the context vectors, shape `(T, d_out)`
# or `(B, T, d_out)` — the context tensor only, not the weights. The keys have width `d_out`,
# so that is the $d_k$ of the scale.
#
# <details><summary>Hint</summary>
#
# Follow the NumPy steps with `self.W_query(x)` and friends in place of `x @ w_query`. For
# the transpose and the softmax, name the dimensions counting from the end, so that the code
# does not care whether a batch dimension is there.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u03_self_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class SelfAttention(nn.Module):
    """Self-attention with trainable query, key and value projections.

    W_query, W_key, W_value: nn.Linear(d_in, d_out, bias=qkv_bias).
    forward(x): x of shape (T, d_in) or (B, T, d_in) -> context of shape (T, d_out) or (B, T, d_out),
    with scores scaled by 1/sqrt(d_out) (d_out is the width of the keys)."""

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        queries = self.W_query(x)  # (..., T, d_out)
        keys = self.W_key(x)       # (..., T, d_out)
        values = self.W_value(x)   # (..., T, d_out)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5  # (..., T, T)
        weights = torch.softmax(scores, dim=-1)                           # (..., T, T)
        return weights @ values                                           # (..., T, d_out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u03_self_attention_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("SelfAttention")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.inputs import QKV, linear_state
from grader.spec import Case, Mistake, Spec, build, run

SA_X = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
SA_BATCH = torch.tensor([[[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 0.0, 1.0]],
                         [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [2.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 2.0]]])
SA_STATE = {"W_query.weight": torch.tensor([[1.0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]]).T.contiguous(),  # w_query.T
            "W_key.weight": torch.tensor([[0.0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]]).T.contiguous(),
            "W_value.weight": torch.tensor([[0.0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]]).T.contiguous()}
SA_BIAS = {"W_query.bias": torch.tensor([1.0, 0.0, -1.0]), "W_key.bias": torch.tensor([0.0, 1.0, 0.0]),
           "W_value.bias": torch.tensor([0.5, -0.5, 1.0])}


def self_attention_examples():
    state = {k: v.clone() for k, v in SA_STATE.items()}
    return [Case("the worked example without a batch: x of shape (3, 4), d_out=3",
                 state=state, x=SA_X.clone(), d_in=4, d_out=3, qkv_bias=False),
            Case("a batch of two 4-word sentences: x of shape (2, 4, 4), d_out=3",
                 state=state, x=SA_BATCH.clone(), d_in=4, d_out=3, qkv_bias=False),
            Case("the worked example with qkv_bias=True",
                 state={**state, **SA_BIAS}, x=SA_X.clone(), d_in=4, d_out=3, qkv_bias=True),
            self_attention_case(torch.Generator().manual_seed(7), (2, 9), 5)]   # every width differs


def self_attention_case(g, shape, d_out, qkv_bias=False, scale=1.0):
    return Case(f"x of shape {shape}, d_out={d_out}, qkv_bias={qkv_bias}", x=torch.randn(*shape, generator=g) * scale,
                state=linear_state(g, QKV, shape[-1], d_out, qkv_bias, bias_size=0.5), d_in=shape[-1], d_out=d_out,
                qkv_bias=qkv_bias)


def self_attention_cases(g):
    return [self_attention_case(g, (5, 6), d_out=4), self_attention_case(g, (3, 1, 6), d_out=2, qkv_bias=True),
            self_attention_case(g, (2, 7, 3), d_out=8, qkv_bias=True),
            self_attention_case(g, (4, 8), d_out=8, scale=3.0),
            self_attention_case(g, (1, 6, 5), d_out=3, qkv_bias=True), self_attention_case(g, (2, 5, 4), d_out=6)]


def call_self_attention(state, x, d_in, d_out, qkv_bias):
    module = build(SelfAttention, state, d_in, d_out, qkv_bias=qkv_bias)
    with torch.no_grad():
        try:
            return module(x)
        except (RuntimeError, IndexError, ValueError) as exc:
            raise RuntimeError(f"forward failed on an input of shape {tuple(x.shape)}: code that assumes a fixed "
                               "number of dimensions (.T, transpose(1, 2), dim=2, B, T, d = x.shape) breaks when "
                               "the batch dimension is added or removed; count axes from the end. PyTorch said: "
                               + (str(exc).splitlines() or [""])[0]) from None


def self_attention_projections(state, x):
    def project(name):
        bias = state.get(f"{name}.bias")
        return F.linear(x.double(), state[f"{name}.weight"].double(), None if bias is None else bias.double())
    return project("W_query"), project("W_key"), project("W_value")


def self_attention_oracle(state, x):
    return F.scaled_dot_product_attention(*self_attention_projections(state, x))


def self_attention_wrong_scales(d_k, d_in, t):
    """(message, divisor) for divisors a learner may use instead of sqrt(d_k)."""
    right = math.sqrt(d_k)
    candidates = [(1.0, "no scale at all"), (float(d_k), "d_out instead of √d_out"),
                  (math.sqrt(d_in), "√d_in (the width of the inputs)"), (math.sqrt(t), "√T (the number of tokens)"),
                  (float(math.floor(right)), "√d_out rounded to a whole number"),
                  (float(round(right)), "√d_out rounded to a whole number"),
                  (1 / right, "√d_out as a factor instead of a divisor")]
    # One message per wrong divisor: where two give the same value on a case, the check names
    # both, and a self-check example whose sizes differ names the one used.
    return list(dict.fromkeys((f"the scale of the scores is wrong: you seem to have used {label}. The scores are "
                               "divided by the square root of the key width (d_out here), without rounding", divisor)
                              for divisor, label in candidates if abs(divisor - right) > 1e-9))


def self_attention_mistakes(state, x, d_in, d_out):
    q, k, v = self_attention_projections(state, x)
    scores = q @ k.transpose(-2, -1)
    root = math.sqrt(d_out)
    for message, divisor in self_attention_wrong_scales(d_out, d_in, x.shape[-2]):
        yield Mistake(message, torch.softmax(scores / divisor, dim=-1) @ v)
    yield Mistake("the softmax went over the wrong dimension: each row of weights (one query against all keys, "
                  "the last dimension) must sum to 1", torch.softmax(scores / root, dim=-2) @ v)
    if x.dim() == 3:
        yield Mistake("the softmax went over the wrong dimension (dim=0, the batch): each row of weights (one query "
                      "against all keys, the last dimension) must sum to 1", torch.softmax(scores / root, dim=0) @ v)
    yield Mistake("you computed keys @ queries^T: row i of the scores must hold query i dotted with every key, "
                  "so the queries go on the left", torch.softmax(k @ q.transpose(-2, -1) / root, dim=-1) @ v)
    yield Mistake("you divided by the scale after the softmax: scale the scores before it, so that each row of "
                  "weights still sums to 1", torch.softmax(scores, dim=-1) / root @ v)
    yield Mistake("the output mixes the inputs x instead of the values: apply W_value and mix its output",
                  torch.softmax(scores / root, dim=-1) @ x.double())
    yield Mistake("the keys were made with W_query: the keys come from W_key (and the values from W_value)",
                  torch.softmax(q @ q.transpose(-2, -1) / root, dim=-1) @ v)


run(Spec("SelfAttention", call_self_attention, self_attention_oracle, examples=self_attention_examples,
         cases=self_attention_cases, mistakes=self_attention_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Load the worked example's matrices into your module (transposed, as `nn.Linear` wants
# them) and it must give the NumPy output. Then feed it a batch of two four-word sentences:
# each sentence's result must be what the module gives for that sentence alone.

# %%
def load_example_weights(module, w_query, w_key, w_value):
    """Copy the NumPy matrices (d_in, d_out) of the worked example into the module's nn.Linear layers."""
    with torch.no_grad():
        for layer, matrix in ((module.W_query, w_query), (module.W_key, w_key), (module.W_value, w_value)):
            layer.weight.copy_(torch.tensor(matrix.T, dtype=torch.float32))  # (d_out, d_in)


self_attention = SelfAttention(d_in=4, d_out=3)
load_example_weights(self_attention, w_query, w_key, w_value)
x_t = torch.tensor(x, dtype=torch.float32)  # (T, d_in) = (3, 4)
with torch.no_grad():
    context = self_attention(x_t)           # (3, 3)
print(context)
print("matches NumPy:", np.allclose(context.numpy(), output, atol=1e-5))

# %%
batch = torch.tensor(np.stack([x4, [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [2.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 2.0]]]),
                     dtype=torch.float32)   # (B, T, d_in) = (2, 4, 4)
with torch.no_grad():
    batch_context = self_attention(batch)   # (2, 4, 3)
    one_by_one = torch.stack([self_attention(sentence) for sentence in batch])
print(batch_context.shape)
print("batched = one sentence at a time:", torch.allclose(batch_context, one_by_one, atol=1e-6))

# %% [markdown]
# PyTorch ships the whole "scores, scale, softmax, mix" recipe as
# `F.scaled_dot_product_attention(q, k, v)`. Its default scale is $1/\sqrt{E}$ with $E$ the
# last dimension of the queries and keys — the key width, as it should be. It is a handy
# check of your module (and the fast path that real models use):

# %%
with torch.no_grad():
    q, k, v = self_attention.W_query(batch), self_attention.W_key(batch), self_attention.W_value(batch)
    built_in = F.scaled_dot_product_attention(q, k, v)  # (2, 4, 3)
print("same as F.scaled_dot_product_attention:", torch.allclose(batch_context, built_in, atol=1e-5))


# %% [markdown]
# ## 4. Self-attention and cross-attention
#
# The keys and the values always come from the same set of tokens: a token is found by its
# key and then hands over its value. What makes attention *self*-attention is that the
# **queries** come from that same sequence too: a sentence looks at itself. In
# **cross-attention** the queries come from one sequence and the keys and values from
# another. In the original Transformer, which translates, the words of the translation being
# written (queries) look up the words of the source sentence (keys and values); a model that
# describes an image lets its words look up patches of the image.
#
# | what | self-attention | cross-attention |
# |---|---|---|
# | queries from | `x` | `x_q` (e.g. the translation being written) |
# | keys and values from | the same `x` | another sequence `x_kv` (e.g. the source sentence) |
# | input widths | one, `d_in` | may differ: `d_q` for `x_q`, `d_kv` for `x_kv` |
# | weights | square, `(T, T)` | rectangular, `(T_q, T_kv)` |
# | output | one row per token of `x` | one row per token of `x_q` |
# | where | every layer of GPT | the decoder of the original Transformer, text-to-image models |
#
# Since each side has its own input width, `W_query` maps `d_q` numbers to `d_out`, while
# `W_key` and `W_value` map `d_kv` numbers to `d_out`. Self-attention is the special case
# `x_q = x_kv = x`.

# %% [markdown]
# ### Exercise — `CrossAttention(d_q, d_kv, d_out, qkv_bias=False)` (about 10 minutes)
#
# **Goal:** a module with `W_query = nn.Linear(d_q, d_out, bias=qkv_bias)` and
# `W_key`, `W_value = nn.Linear(d_kv, d_out, bias=qkv_bias)`, whose `forward(x_q, x_kv)` takes
# `x_q` of shape `(T_q, d_q)` or `(B, T_q, d_q)` and `x_kv` of shape `(T_kv, d_kv)` or
# `(B, T_kv, d_kv)`, and returns the context, shape `(T_q, d_out)` or `(B, T_q, d_out)`.
# Scale by $1/\sqrt{d_{out}}$, the key width, as before.
#
# <details><summary>Hint</summary>
#
# It is your `SelfAttention` with two inputs. Ask yourself, for each of the three
# projections, which input it reads. How many rows must the output have?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u03_cross_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class CrossAttention(nn.Module):
    """Cross-attention: queries from x_q, keys and values from x_kv.

    W_query: nn.Linear(d_q, d_out, bias=qkv_bias); W_key, W_value: nn.Linear(d_kv, d_out, bias=qkv_bias).
    forward(x_q, x_kv): x_q of shape (T_q, d_q) or (B, T_q, d_q), x_kv of shape (T_kv, d_kv) or (B, T_kv, d_kv)
    -> context of shape (T_q, d_out) or (B, T_q, d_out), scores scaled by 1/sqrt(d_out)."""

    def __init__(self, d_q: int, d_kv: int, d_out: int, qkv_bias: bool = False):
        super().__init__()
        ### BEGIN SOLUTION
        self.W_query = nn.Linear(d_q, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_kv, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_kv, d_out, bias=qkv_bias)
        ### END SOLUTION

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        queries = self.W_query(x_q)  # (..., T_q, d_out)
        keys = self.W_key(x_kv)      # (..., T_kv, d_out)
        values = self.W_value(x_kv)  # (..., T_kv, d_out)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5  # (..., T_q, T_kv)
        weights = torch.softmax(scores, dim=-1)                           # (..., T_q, T_kv)
        return weights @ values                                           # (..., T_q, d_out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u03_cross_attention_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("CrossAttention")
### BEGIN HIDDEN TESTS
import math

import torch
import torch.nn.functional as F

from grader.inputs import linear_state
from grader.spec import Case, Mistake, Spec, build, run

CA_X_Q = torch.tensor([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 1.0]])
CA_X_KV = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
CA_STATE = {"W_query.weight": torch.tensor([[1.0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]]).T.contiguous(),  # w_query.T
            "W_key.weight": torch.tensor([[0.0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]]).T.contiguous(),
            "W_value.weight": torch.tensor([[0.0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]]).T.contiguous()}


def cross_attention_state(g, d_q, d_kv, d_out, bias):
    return {**linear_state(g, ("W_query",), d_q, d_out, bias, bias_size=0.5),
            **linear_state(g, ("W_key", "W_value"), d_kv, d_out, bias, bias_size=0.5)}


def cross_attention_examples():
    g = torch.Generator().manual_seed(3)
    state = cross_attention_state(g, 5, 4, 3, True)
    x_q, x_kv = torch.randn(2, 3, 5, generator=g), torch.randn(2, 5, 4, generator=g)
    return [Case("two query tokens looking at the 3-word sentence: x_q (2, 4), x_kv (3, 4), d_out=3",
                 state={k: v.clone() for k, v in CA_STATE.items()}, x_q=CA_X_Q.clone(), x_kv=CA_X_KV.clone(),
                 d_q=4, d_kv=4, d_out=3, qkv_bias=False),
            Case("the two query tokens and the sentence's first word, looking at the sentence: x_q (3, 4), x_kv (3, 4), "
                 "d_out=3", state={k: v.clone() for k, v in CA_STATE.items()}, x_q=torch.cat([CA_X_Q, CA_X_KV[:1]]),
                 x_kv=CA_X_KV.clone(),
                 d_q=4, d_kv=4, d_out=3, qkv_bias=False),
            Case("a batch with d_q=5, d_kv=4: x_q (2, 3, 5), x_kv (2, 5, 4), d_out=3, qkv_bias=True",
                 state=state, x_q=x_q, x_kv=x_kv, d_q=5, d_kv=4, d_out=3, qkv_bias=True),
            cross_attention_case(torch.Generator().manual_seed(7), (2, 9), (3, 16), 5)]   # every width differs


def cross_attention_case(g, q_shape, kv_shape, d_out, qkv_bias=False, scale=1.0):
    return Case(f"x_q {q_shape}, x_kv {kv_shape}, d_out={d_out}, qkv_bias={qkv_bias}",
                x_q=torch.randn(*q_shape, generator=g) * scale, x_kv=torch.randn(*kv_shape, generator=g) * scale,
                state=cross_attention_state(g, q_shape[-1], kv_shape[-1], d_out, qkv_bias), d_q=q_shape[-1],
                d_kv=kv_shape[-1], d_out=d_out, qkv_bias=qkv_bias)


def cross_attention_cases(g):
    return [cross_attention_case(g, (3, 6), (5, 4), d_out=2),
            cross_attention_case(g, (2, 1, 3), (2, 4, 5), d_out=4, qkv_bias=True),
            cross_attention_case(g, (3, 4, 5), (3, 4, 5), d_out=3, qkv_bias=True),
            cross_attention_case(g, (2, 3), (1, 3), d_out=6),
            cross_attention_case(g, (2, 5, 4), (2, 3, 4), d_out=4, scale=3.0),
            cross_attention_case(g, (4, 3), (4, 3), d_out=5, qkv_bias=True)]


def call_cross_attention(state, x_q, x_kv, d_q, d_kv, d_out, qkv_bias):
    module = build(CrossAttention, state, d_q, d_kv, d_out, qkv_bias=qkv_bias)
    with torch.no_grad():
        try:
            return module(x_q, x_kv)
        except (RuntimeError, IndexError, ValueError) as exc:
            raise RuntimeError(f"forward failed on x_q {tuple(x_q.shape)}, x_kv {tuple(x_kv.shape)}: check which "
                               "input each projection reads, and that nothing assumes a fixed number of dimensions "
                               "(.T, transpose(1, 2), dim=2): count axes from the end. PyTorch said: "
                               + (str(exc).splitlines() or [""])[0]) from None


def cross_attention_project(state, name, x):
    bias = state.get(f"{name}.bias")
    return F.linear(x.double(), state[f"{name}.weight"].double(), None if bias is None else bias.double())


def cross_attention_oracle(state, x_q, x_kv):
    return F.scaled_dot_product_attention(cross_attention_project(state, "W_query", x_q),
                                          cross_attention_project(state, "W_key", x_kv),
                                          cross_attention_project(state, "W_value", x_kv))


def cross_attention_wrong_scales(d_k, d_q, d_kv, t_q, t_kv):
    """(message, divisor) for divisors a learner may use instead of sqrt(d_k)."""
    right = math.sqrt(d_k)
    candidates = [(1.0, "no scale at all"), (float(d_k), "d_out instead of √d_out"),
                  (math.sqrt(d_q), "√d_q (the width of x_q)"), (math.sqrt(d_kv), "√d_kv (the width of x_kv)"),
                  (math.sqrt(t_q), "√T_q (the number of query tokens)"),
                  (math.sqrt(t_kv), "√T_kv (the number of key tokens)"),
                  (float(math.floor(right)), "√d_out rounded to a whole number"),
                  (float(round(right)), "√d_out rounded to a whole number"),
                  (1 / right, "√d_out as a factor instead of a divisor")]
    # One message per wrong divisor: where two give the same value on a case, the check names
    # both, and a self-check example whose sizes differ names the one used.
    return list(dict.fromkeys((f"the scale of the scores is wrong: you seem to have used {label}. The scores are "
                               "divided by the square root of the key width (d_out here), without rounding", divisor)
                              for divisor, label in candidates if abs(divisor - right) > 1e-9))


def cross_attention_mistakes(state, x_q, x_kv, d_q, d_kv, d_out):
    def attend(q, k, v, divisor=math.sqrt(d_out), dim=-1):
        return torch.softmax(q @ k.transpose(-2, -1) / divisor, dim=dim) @ v

    def proj(name, x):
        return cross_attention_project(state, name, x)

    q, k, v = proj("W_query", x_q), proj("W_key", x_kv), proj("W_value", x_kv)
    for message, divisor in cross_attention_wrong_scales(d_out, d_q, d_kv, x_q.shape[-2], x_kv.shape[-2]):
        yield Mistake(message, attend(q, k, v, divisor))
    yield Mistake("the softmax went over the wrong dimension: each row of weights (one query against all keys, "
                  "the last dimension) must sum to 1", attend(q, k, v, dim=-2))
    yield Mistake("the output mixes the inputs x_kv instead of the values: apply W_value and mix its output",
                  attend(q, k, x_kv.double()))
    if d_q == d_kv:
        yield Mistake("your queries come from x_kv: in cross-attention the queries are made from x_q, the keys and "
                      "values from x_kv", attend(proj("W_query", x_kv), k, v))
        yield Mistake("you swapped the roles of x_q and x_kv: the queries are made from x_q, the keys and values "
                      "from x_kv", attend(proj("W_query", x_kv), proj("W_key", x_q), proj("W_value", x_q)))
        if x_q.shape[-2] == x_kv.shape[-2]:
            yield Mistake("your keys come from x_q: the keys and the values are both made from x_kv",
                          attend(q, proj("W_key", x_q), v))
            yield Mistake("your values come from x_q: the keys and the values are both made from x_kv",
                          attend(q, k, proj("W_value", x_q)))


run(Spec("CrossAttention", call_cross_attention, cross_attention_oracle, examples=cross_attention_examples,
         cases=cross_attention_cases, mistakes=cross_attention_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Two tokens of another sequence look at our three-word sentence. The weights are no longer
# square: one row per query token, one column per word of the sentence. (The module returns
# only the context, so the weights are recomputed here from its projections.)

# %%
x_q = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                    [1.0, 0.0, 1.0, 1.0]])  # (T_q, d_q) = (2, 4)
cross_attention = CrossAttention(d_q=4, d_kv=4, d_out=3)
load_example_weights(cross_attention, w_query, w_key, w_value)
with torch.no_grad():
    cross_context = cross_attention(x_q, x_t)                 # (T_q, d_out) = (2, 3)
    q, k = cross_attention.W_query(x_q), cross_attention.W_key(x_t)
    cross_weights = torch.softmax(q @ k.mT / k.shape[-1] ** 0.5, dim=-1)  # (T_q, T_kv) = (2, 3)
print(cross_context)

fig, ax = plt.subplots(figsize=(4.5, 2.6))
image = ax.imshow(cross_weights.numpy(), cmap="viridis", vmin=0, vmax=1)
ax.set_xticks(range(3), words)
ax.set_yticks(range(2), ["query token 1", "query token 2"])
ax.set_xlabel("keys and values from x_kv")
ax.set_title("Cross-attention weights (2 x 3)")
for i in range(2):
    for j in range(3):
        value = cross_weights[i, j].item()
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.5 else "black")
fig.colorbar(image)
show()

# %% [markdown]
# And self-attention really is cross-attention with both inputs the same sequence:

# %%
with torch.no_grad():
    print(torch.allclose(cross_attention(x_t, x_t), self_attention(x_t), atol=1e-6))

# %% [markdown]
# ## Recap
#
# - Each token gets three learned vectors: a query $xW_q$, a key $xW_k$ and a value $xW_v$.
#   Queries meet keys in the scores `Q @ K.T`; the weights mix the values.
# - The scores are divided by $\sqrt{d_k}$, where $d_k$ is the **width of the keys**, not the
#   number of words, and the square root is not rounded ($\sqrt{3} \approx 1.732$).
# - The softmax runs over the last dimension: each query's row of weights sums to 1.
#   `scipy.special.softmax` needs `axis=-1` for that.
# - `nn.Linear(d_in, d_out)` stores its weight as `(d_out, d_in)`. Counting dimensions from the
#   end (`transpose(-2, -1)`, `dim=-1`) makes one module work with and without a batch dimension;
#   `.T` does not.
# - Self-attention takes queries, keys and values from one sequence; cross-attention takes the
#   queries from one and the keys and values from another, so its weights are `(T_q, T_kv)`.
#
# **Next — unit 04:** why $\sqrt{d_k}$ and not $d_k$ or nothing at all: the variance of a dot
# product, a saturated softmax and vanishing gradients, measured.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
