# %% [markdown]
# # Unit 01 — Dot-product similarity
#
# Attention, the mechanism at the heart of every GPT, starts with a question a token asks of
# every other token: *how much are you like me?* The answer is a number, and the number is a
# **dot product**. In this unit you compute it by hand, then for a whole sentence at once,
# and you meet its cousin, the cosine similarity, which is *not* the same thing.
#
# **By the end you will be able to**
# - picture word embeddings as arrows in space;
# - compute a dot product with elementwise products and a sum, then for many vectors at once with `@`;
# - build the similarity matrix of a sentence and explain why it is symmetric;
# - say when a dot product and a cosine similarity disagree, and compute both.
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
# ## 1. Words as vectors
#
# A language model never sees letters or words. A tokenizer turns the text into token ids, and
# an embedding layer turns each id into a vector of numbers, its **embedding**. Tokens used in
# similar ways end up with similar vectors. Real models use hundreds or thousands of numbers
# per token; we use three, so we can draw them.
#
# Here is the six-token sentence *"Your journey starts with one step"*, each token with a
# made-up 3-dimensional embedding. Row *i* is the vector $x^{(i)}$ of token *i*.

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
print(inputs.shape)  # (T, d) = (6 tokens, 3 numbers each)

# %% [markdown]
# Each embedding is an arrow from the origin. Arrows that point the same way belong to tokens
# the model treats alike. Look at *journey* and *starts*: almost the same arrow. *one* points
# somewhere else entirely.

# %%
fig = plt.figure(figsize=(6, 6))
ax = fig.add_subplot(projection="3d")
colors = ["tab:red", "tab:green", "tab:blue", "tab:cyan", "tab:purple", "tab:orange"]
for (x, y, z), word, color in zip(inputs.tolist(), words, colors):
    ax.quiver(0, 0, 0, x, y, z, color=color, arrow_length_ratio=0.08)
    ax.text(x, y, z, word, color=color, fontsize=11)
ax.set(xlim=(0, 1), ylim=(0, 1), zlim=(0, 1), title="The sentence as six arrows in 3-D")
ax.set_xlabel("dim 1", labelpad=8)
ax.set_ylabel("dim 2", labelpad=8)
ax.set_zlabel("dim 3", labelpad=8)
show()


# %% [markdown]
# ## 2. The dot product, by hand
#
# The dot product of two vectors of the same length multiplies them entry by entry and adds
# up the products:
#
# $$a \cdot b = \sum_{i=1}^{d} a_i\, b_i .$$
#
# For *Your* and *journey*: $0.43 \cdot 0.55 + 0.15 \cdot 0.87 + 0.89 \cdot 0.66 = 0.2365 + 0.1305 + 0.5874 = 0.9544$.
#
# It is large when the two vectors are long *and* point the same way, zero when they are
# perpendicular, negative when they point in opposite directions.

# %% [markdown]
# ### Exercise — `dot_product(a, b)` (about 5 minutes)
#
# **Goal:** return the dot product of two 1-D tensors of the same length as a 0-d tensor,
# written with elementwise multiplication and a sum — *not* with `torch.dot` or `@` (you will
# use those soon, once you know what they do).
#
# <details><summary>Hint</summary>
#
# `a * b` multiplies two tensors entry by entry. Which tensor method adds up all the entries
# of a tensor?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u01_dot_product", "locked": false, "schema_version": 3, "solution": true, "task": false}
def dot_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Dot product of two 1-D tensors of equal length, as a 0-d tensor.

    Write it with elementwise products and a sum: torch.dot, torch.inner, torch.matmul,
    torch.mv, torch.vdot, Tensor.dot, Tensor.matmul and `@` are not allowed here."""
    ### BEGIN SOLUTION
    return (a * b).sum()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u01_dot_product_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("dot_product")
### BEGIN HIDDEN TESTS
import torch

from grader.inputs import JOURNEY
from grader.spec import Case, Mistake, NotAsAsked, Number, Spec, forbid, run


def dot_product_examples():
    return [Case("Your · journey", a=JOURNEY[0].clone(), b=JOURNEY[1].clone())]


def dot_product_cases(g):
    cases = [Case(f"random vectors of length {n}", a=torch.randn(n, generator=g) * s, b=torch.randn(n, generator=g))
             for n, s in ((1, 1.0), (2, 3.0), (5, 1.0), (64, 0.1))]
    return cases + [Case("integer vectors of length 6 (dtype int64)", a=torch.randint(-5, 6, (6,), generator=g),
                         b=torch.randint(-5, 6, (6,), generator=g)),
                    Case("float64 vectors of length 7", a=torch.randn(7, generator=g, dtype=torch.float64),
                         b=torch.randn(7, generator=g, dtype=torch.float64))]


def call_dot_product(a, b):
    a_before, b_before = a.clone(), b.clone()
    with forbid("torch.dot", "torch.inner", "torch.matmul", "torch.mv", "torch.vdot", "torch.Tensor.__matmul__",
                "torch.Tensor.dot", "torch.Tensor.matmul"):
        out = dot_product(a, b)
    if isinstance(out, (list, tuple)):
        raise NotAsAsked(f"dot_product returned a Python {type(out).__name__}: return one number, the sum of the "
                         "products")
    if not (torch.equal(a, a_before) and torch.equal(b, b_before)):
        raise NotAsAsked("dot_product changed its input in place (with *=, += or a method ending in _): compute the "
                         "products in a new tensor, a * b, and leave a and b as they were")
    return out


def dot_product_oracle(a, b):
    return (a.double() * b.double()).sum()


def dot_product_mistakes(a, b):
    a, b = a.double(), b.double()
    yield Mistake("you computed the cosine similarity (divided by the lengths); the dot product is not normalised",
                  (a * b).sum() / (a.norm() * b.norm()))
    yield Mistake("you returned the elementwise products: add them up to get one number", a * b)
    yield Mistake("you added the two vectors: multiply them entry by entry (a * b), then add up the products",
                  (a + b).sum())
    yield Mistake("you multiplied the sum of a by the sum of b; the dot product adds up the products of matching "
                  "entries, a[i] * b[i]", a.sum() * b.sum())
    yield Mistake("you averaged the products (mean); the dot product adds them up (sum)", (a * b).mean())
    if len(a) > 1:
        yield Mistake("your loop leaves out the last entry: go over every index, range(len(a))",
                      (a[:-1] * b[:-1]).sum())
    yield Mistake("you returned a tensor of shape (1,), not a single number: sum over every entry without keepdim, so "
                  "that the result is a 0-d tensor", (a * b).sum().reshape(1))


DOT_PRODUCT = Spec("dot_product", call_dot_product, dot_product_oracle, examples=dot_product_examples,
                   cases=dot_product_cases, mistakes=dot_product_mistakes, judge=Number())
run(DOT_PRODUCT)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. One query against the whole sentence
#
# In attention, each token in turn plays the **query**: it compares itself with every token
# of the sequence (itself included) and gets one score per token. Take *journey* as the query.
# Its scores are the dot products of $x^{(2)}$ with every row of `inputs`.
#
# Multiplying the `(T, d)` matrix `inputs` by the `(d,)` vector `query` with `@` computes all
# those row-by-vector dot products at once — the vectorised form of your function.

# %% [markdown]
# ### Exercise — `attention_scores_for(query, inputs)` (about 5 minutes)
#
# **Goal:** given a query vector of shape `(d,)` and the inputs of shape `(T, d)`, return the
# `T` dot products as one tensor of shape `(T,)`. A loop over rows with your `dot_product` is
# fine (gather the scores into a tensor, e.g. with `torch.stack`); so is `@`. Leave `query` and
# `inputs` as they are: the cells below use them again. Whole-number (integer) tensors must work
# too, so compute with the dtype they come in.
#
# Expected for *journey*: `[0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]`.
#
# <details><summary>Hint</summary>
#
# For a matrix `M` of shape `(T, d)` and a vector `v` of shape `(d,)`, `M @ v` has shape `(T,)`.
# Use the `query` argument, not a fixed row of `inputs`.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u01_attention_scores_for", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_scores_for(query: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Dot products of `query` (d,) with each row of `inputs` (T, d) -> (T,)."""
    ### BEGIN SOLUTION
    return inputs @ query  # (T, d) @ (d,) -> (T,)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u01_attention_scores_for_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("attention_scores_for")
### BEGIN HIDDEN TESTS
import torch

from grader.inputs import journey
from grader.spec import Case, Mistake, NotAsAsked, Spec, run


def scores_examples():
    return [Case("query 'journey' on the six-token sentence", query=journey()[1], inputs=journey()),
            Case("query 'one' on the first three tokens (T = d = 3)", query=journey()[4], inputs=journey()[:3]),
            Case("whole numbers (dtype int64): query [1, 0, 2] on two rows", query=torch.tensor([1, 0, 2]),
                 inputs=torch.tensor([[1, 2, 3], [0, 1, -1]]))]


def scores_cases(g):
    cases = [Case(f"random query against T={t} inputs of width d={d}",
                  query=torch.randn(d, generator=g), inputs=torch.randn(t, d, generator=g))
             for t, d in ((1, 3), (4, 1), (7, 5), (16, 32), (5, 5))]
    return cases + [Case("integer query and inputs (dtype int64), T=6, d=4", query=torch.randint(-3, 4, (4,), generator=g),
                         inputs=torch.randint(-3, 4, (6, 4), generator=g)),
                    Case("float64 query and inputs, T=8, d=3", query=torch.randn(3, generator=g, dtype=torch.float64),
                         inputs=torch.randn(8, 3, generator=g, dtype=torch.float64))]


def call_attention_scores_for(query, inputs):
    query_before, inputs_before = query.clone(), inputs.clone()
    try:
        out = attention_scores_for(query, inputs)
    except RuntimeError as exc:                        # add a hint to PyTorch's message, keep where it came from
        text = str(exc).splitlines()[0] if str(exc) else ""
        if "cannot be multiplied" in text or "size mismatch" in text:
            exc.args = (text + " (a matrix product pairs each row of the left factor with the columns of the right "
                        "one: inputs @ query, (T, d) @ (d,), gives one score per row of inputs)",)
        elif "dtype" in text:
            exc.args = (text + " (the two tensors have different dtypes, e.g. an integer and a float one: use the "
                        "inputs as they come, or convert both to the same dtype)",)
        elif "must match the size" in text:
            exc.args = (text + " (the query has d entries, as each row of inputs has: pair it with the rows of "
                        "inputs, not with the columns of inputs)",)
        raise
    if isinstance(out, (list, tuple)):
        raise NotAsAsked(f"attention_scores_for returned a Python {type(out).__name__}: return one tensor of shape "
                         "(T,); torch.stack turns a list of 0-d tensors into one")
    if not (torch.equal(query, query_before) and torch.equal(inputs, inputs_before)):
        raise NotAsAsked("attention_scores_for changed its input in place (with *=, += or a method ending in _): "
                         "leave query and inputs as they were and compute the scores in a new tensor")
    return out


def scores_oracle(query, inputs):
    return inputs.double() @ query.double()


def scores_mistakes(query, inputs):
    query, inputs = query.double(), inputs.double()
    yield Mistake("you computed cosine similarities (divided by the lengths); attention scores are plain dot products",
                  (inputs @ query) / (inputs.norm(dim=-1) * query.norm()))
    yield Mistake("you divided the scores by √d: that scale is unit 04's subject; here the scores are the plain dot "
                  "products", (inputs @ query) / inputs.shape[-1] ** 0.5)
    yield Mistake("you applied a softmax to the scores: this exercise asks for the plain dot products; turning them "
                  "into weights that add up to 1 is unit 02's step", torch.softmax(inputs @ query, dim=-1))
    if inputs.shape[0] > 1:
        yield Mistake("you used a fixed row of `inputs` as the query instead of the `query` argument", inputs @ inputs[1])
        yield Mistake("you returned one score, the last row's: keep the score of every row (collect them, then "
                      "torch.stack)", inputs[-1] @ query)
    yield Mistake("you added up the products over the tokens (dim=0); add up each row's products over its d features "
                  "(dim=-1), one score per token", (inputs * query).sum(dim=0))
    yield Mistake("you added every product into one number: add up each row's products separately (dim=-1), one "
                  "score per token", (inputs * query).sum())
    yield Mistake("you returned the scores as a column of shape (T, 1); return a 1-D tensor of shape (T,): multiply by "
                  "the vector query itself, not by a (d, 1) column", (inputs @ query)[:, None])
    if inputs.shape[0] == inputs.shape[1]:
        yield Mistake("you multiplied the query by the columns of inputs (query @ inputs, or inputs.T @ query): put "
                      "inputs first, inputs @ query, so that each score is the query dotted with one row",
                      query @ inputs)


run(Spec("attention_scores_for", call_attention_scores_for, scores_oracle,
         examples=scores_examples, cases=scores_cases, mistakes=scores_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# *journey* scores highest with itself (1.4950) and with *starts* (1.4754) and lowest with
# *one* (0.7070). Some write-ups print 0.7074 for that last score; recompute it by hand and you
# get $0.55 \cdot 0.77 + 0.87 \cdot 0.25 + 0.66 \cdot 0.10 = 0.4235 + 0.2175 + 0.0660 = 0.7070$.

# %% [markdown]
# ## 4. Every token against every token: the similarity matrix
#
# Stack the scores of every query and you get a `(T, T)` matrix whose entry `[i, j]` is
# $x^{(i)} \cdot x^{(j)}$. One matrix product computes it: `inputs @ inputs.T`, because
# `inputs.T` has the vectors as *columns*, and entry `[i, j]` of a matrix product is
# row *i* of the left matrix dotted with column *j* of the right one.
#
# Since $x^{(i)} \cdot x^{(j)} = x^{(j)} \cdot x^{(i)}$, the matrix is **symmetric**. Keep
# that in mind: in the next unit the scores go through a softmax, row by row, and the
# symmetry is lost.

# %% [markdown]
# ### Exercise — `similarity_matrix(inputs)` (about 5 minutes)
#
# **Goal:** return the `(T, T)` matrix of dot products between all pairs of rows of `inputs` `(T, d)`.
#
# <details><summary>Hint</summary>
#
# Which of `inputs @ inputs.T` and `inputs.T @ inputs` has shape `(T, T)`?
# </details>

# %% nbgrader={"grade": false, "grade_id": "u01_similarity_matrix", "locked": false, "schema_version": 3, "solution": true, "task": false}
def similarity_matrix(inputs: torch.Tensor) -> torch.Tensor:
    """All pairwise dot products of the rows of `inputs` (T, d) -> (T, T)."""
    ### BEGIN SOLUTION
    return inputs @ inputs.T  # (T, d) @ (d, T) -> (T, T)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u01_similarity_matrix_check", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("similarity_matrix")
### BEGIN HIDDEN TESTS
import torch

from grader.inputs import journey
from grader.spec import Case, Mistake, NotAsAsked, Spec, run


def similarity_examples():
    return [Case("the six-token sentence", inputs=journey()),
            Case("the first three tokens (T = d = 3)", inputs=journey()[:3])]


def similarity_cases(g):
    cases = [Case(f"random inputs, T={t}, d={d}", inputs=torch.randn(t, d, generator=g))
             for t, d in ((1, 4), (2, 2), (5, 8), (9, 3), (4, 4))]
    return cases + [Case("integer inputs (dtype int64), T=5, d=3", inputs=torch.randint(-3, 4, (5, 3), generator=g)),
                    Case("float64 inputs, T=6, d=2", inputs=torch.randn(6, 2, generator=g, dtype=torch.float64))]


def call_similarity_matrix(inputs):
    inputs_before = inputs.clone()
    try:
        out = similarity_matrix(inputs)
    except RuntimeError as exc:                        # add a hint to PyTorch's message, keep where it came from
        text = str(exc).splitlines()[0] if str(exc) else ""
        if "cannot be multiplied" in text:
            exc.args = (text + " (entry [i, j] pairs row i with row j: the right factor must hold the rows as its "
                        "columns, inputs.T)",)
        raise
    if isinstance(out, (list, tuple)):
        raise NotAsAsked(f"similarity_matrix returned a Python {type(out).__name__}: return one tensor of shape "
                         "(T, T); torch.stack (or torch.tensor) turns the rows into one")
    if not torch.equal(inputs, inputs_before):
        raise NotAsAsked("similarity_matrix changed `inputs` in place (with *=, /= or a method ending in _): leave it "
                         "as it was and compute the matrix in a new tensor")
    return out


def similarity_oracle(inputs):
    return inputs.double() @ inputs.double().T


def similarity_mistakes(inputs):
    inputs = inputs.double()
    unit = inputs / inputs.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    full = inputs @ inputs.T
    yield Mistake("you computed inputs.T @ inputs, which compares the embedding dimensions (d, d), not the tokens "
                  "(T, T)", inputs.T @ inputs)
    yield Mistake("you computed cosine similarities; this exercise asks for plain dot products", unit @ unit.T)
    yield Mistake("you applied a softmax to each row: this exercise asks for the plain dot products, not attention "
                  "weights (the softmax is unit 02's step)", torch.softmax(full, dim=-1))
    yield Mistake("you applied a softmax down each column: this exercise asks for the plain dot products, not "
                  "attention weights (the softmax is unit 02's step)", torch.softmax(full, dim=0))
    yield Mistake("you divided the similarities by √d: that scale is unit 04's subject; here they are the plain dot "
                  "products", full / inputs.shape[-1] ** 0.5)
    if inputs.shape[0] == inputs.shape[1]:
        yield Mistake("you computed inputs @ inputs, without the transpose: entry [i, j] is row i dotted with row j, "
                      "so the right factor is inputs.T", inputs @ inputs)
    yield Mistake("you multiplied entry by entry (inputs * inputs); the matrix product inputs @ inputs.T takes the dot "
                  "product of every pair of rows", inputs * inputs)
    yield Mistake("you computed only each row's dot product with itself (the diagonal); the result holds every pair "
                  "of rows, (T, T)", (inputs * inputs).sum(dim=-1))
    if inputs.shape[0] > 1:
        message = ("you filled only one triangle of the matrix: it is symmetric, so fill the entries on the other side "
                   "of the diagonal too (or compute every pair)")
        yield Mistake(message, full.triu())
        yield Mistake(message, full.tril())


run(Spec("similarity_matrix", call_similarity_matrix, similarity_oracle,
         examples=similarity_examples, cases=similarity_cases, mistakes=similarity_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# A picture makes the structure visible. Check the symmetry across the diagonal, and that
# the *journey* row is the one you computed with `attention_scores_for`.

# %%
scores = similarity_matrix(inputs)
print(scores)
print("symmetric:", torch.allclose(scores, scores.T))

fig, ax = plt.subplots(figsize=(5, 4))
image = ax.imshow(scores.numpy(), cmap="viridis")
ax.set_xticks(range(len(words)), words, rotation=45)
ax.set_yticks(range(len(words)), words)
ax.set_title("Dot products x(i) · x(j)")
fig.colorbar(image)
show()

# %% [markdown]
# ## 5. Dot product is not cosine similarity
#
# The **cosine similarity** divides the dot product by both lengths:
#
# $$\cos(a, b) = \frac{a \cdot b}{\lVert a \rVert\, \lVert b \rVert},$$
#
# so it only measures the *angle* between the arrows: it is always between −1 and 1, and
# every vector has cosine 1 with itself. The dot product also grows with the *lengths*.
# Some introductions call the attention score a cosine similarity; it is not — attention
# uses the raw dot product, and a longer query or key gives a larger score.
#
# A quick experiment: make *one* twice as long. Its angle to every other token is unchanged,
# so its cosine similarities stay put, but its dot products double.

# %%
query = inputs[1]
longer = inputs.clone()
longer[4] *= 2  # the token "one", twice as long, same direction

dot_before, dot_after = (inputs @ query)[4], (longer @ query)[4]
cos_before = torch.nn.functional.cosine_similarity(inputs[4], query, dim=0)
cos_after = torch.nn.functional.cosine_similarity(longer[4], query, dim=0)
print(f"journey · one:      {dot_before:.4f} -> {dot_after:.4f}")
print(f"cos(journey, one):  {cos_before:.4f} -> {cos_after:.4f}")


# %% [markdown]
# ### Exercise — `cosine_similarity_matrix(inputs, eps=1e-8)` (about 10 minutes)
#
# **Goal:** return the `(T, T)` matrix of cosine similarities between all pairs of rows.
# Divide each row by `max(‖row‖, eps)` before taking the dot products, as
# `torch.nn.functional.normalize` does, so that an all-zero row gives similarities of 0
# rather than NaN (0 / 0).
#
# <details><summary>Hint</summary>
#
# `inputs.norm(dim=-1, keepdim=True)` gives each row's length with shape `(T, 1)`, ready to
# divide `(T, d)` by. `clamp_min` keeps a number from falling below a floor. Then reuse
# `similarity_matrix`.
# </details>

# %% nbgrader={"grade": false, "grade_id": "u01_cosine_similarity_matrix", "locked": false, "schema_version": 3, "solution": true, "task": false}
def cosine_similarity_matrix(inputs: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine similarities of all pairs of rows of `inputs` (T, d) -> (T, T).

    Each row is divided by max(its length, eps), so an all-zero row gives 0, not NaN."""
    ### BEGIN SOLUTION
    unit = inputs / inputs.norm(dim=-1, keepdim=True).clamp_min(eps)  # (T, d), rows of length 1
    return unit @ unit.T  # (T, T)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "u01_cosine_similarity_matrix_check", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.selfcheck import check

check("cosine_similarity_matrix")
### BEGIN HIDDEN TESTS
import torch
import torch.nn.functional as F

from grader.inputs import journey
from grader.spec import Case, Mistake, NotAsAsked, Spec, run


def cosine_examples():
    first_three = journey()[:3]
    first_three[1] = 0
    return [Case("the six-token sentence", inputs=journey()),
            Case("the first three tokens (T = d = 3) with 'journey' set to zeros (that row gives 0, not NaN)",
                 inputs=first_three),
            Case("the six-token sentence times 0.6, eps=0.5 ('with' and 'one' are then shorter than eps, so they are "
                 "divided by eps)", inputs=journey() * 0.6, eps=0.5)]


def cosine_cases(g):
    cases = [Case(f"random inputs, T={t}, d={d}", inputs=torch.randn(t, d, generator=g) * s)
             for t, d, s in ((1, 3, 1.0), (4, 2, 10.0), (7, 16, 0.01))]
    with_zero = torch.randn(5, 4, generator=g)
    with_zero[2] = 0
    cases.append(Case("inputs with an all-zero row (divide by max(length, eps), so it gives 0, not NaN)",
                      inputs=with_zero))
    cases.append(Case("eps=0.5 given as a keyword (rows shorter than eps are divided by eps)",
                      inputs=torch.randn(4, 3, generator=g) * 0.2, eps=0.5))
    cases.append(Case("random inputs, T=d=4", inputs=torch.randn(4, 4, generator=g)))
    cases.append(Case("float64 inputs, T=5, d=3", inputs=torch.randn(5, 3, generator=g, dtype=torch.float64)))
    return cases


def call_cosine_similarity_matrix(inputs, eps=None):
    inputs_before = inputs.clone()
    try:
        out = cosine_similarity_matrix(inputs) if eps is None else cosine_similarity_matrix(inputs, eps=eps)
    except RuntimeError as exc:                        # add a hint to PyTorch's message, keep where it came from
        text = str(exc).splitlines()[0] if str(exc) else ""
        if "must match the size" in text:
            exc.args = (text + " (the lengths have shape (T,): keep the dimension, keepdim=True, shape (T, 1), so "
                        "that each row is divided by its own length)",)
        elif "ambiguous" in text:
            exc.args = (text + " (Python's max compares two numbers, not a tensor of lengths with a number: use "
                        "clamp_min(eps) or torch.maximum)",)
        raise
    if isinstance(out, (list, tuple)):
        raise NotAsAsked(f"cosine_similarity_matrix returned a Python {type(out).__name__}: return one tensor of "
                         "shape (T, T)")
    if not torch.equal(inputs, inputs_before):
        raise NotAsAsked("cosine_similarity_matrix changed `inputs` in place (inputs /= ... or a method ending in _): "
                         "divide into a new tensor, unit = inputs / ..., and leave inputs as it was")
    return out


def cosine_oracle(inputs, eps=1e-8):
    unit = F.normalize(inputs.double(), dim=-1, eps=eps)
    return unit @ unit.T


def cosine_mistakes(inputs, eps=1e-8):
    inputs = inputs.double()
    dots = inputs @ inputs.T
    by_column = F.normalize(inputs, dim=0, eps=eps)
    squared = (inputs * inputs).sum(-1)
    length = squared.sqrt()
    yield Mistake("you returned plain dot products: divide each row by its length first", dots)
    yield Mistake("you normalised the columns (dim=0) instead of the rows (dim=-1)", by_column @ by_column.T)
    yield Mistake("you divided by the squared lengths: use the length (the square root of the sum of squares)",
                  dots / (squared.clamp_min(eps)[:, None] * squared.clamp_min(eps)))
    yield Mistake("you normalised only one side of the product: normalise the rows on both sides",
                  F.normalize(inputs, dim=-1, eps=eps) @ inputs.T)
    if bool((length == 0).any()):
        no_floor = inputs / length[:, None]
        yield Mistake("an all-zero row gave NaN (0 / 0): divide each row by max(its length, eps), e.g. with "
                      "clamp_min(eps), so that it gives 0", no_floor @ no_floor.T)
    if eps != 1e-8:
        fixed = F.normalize(inputs, dim=-1, eps=1e-8)
        yield Mistake("you did not use the eps argument: rows shorter than eps must be divided by eps; use the eps the "
                      "function is given, not a number of your own", fixed @ fixed.T)
    added = inputs / (length[:, None] + eps)
    yield Mistake("you added eps to each length; divide by max(length, eps) instead (clamp_min(eps)), so that a row "
                  "longer than eps is divided by its exact length", added @ added.T)
    inside = inputs / (squared[:, None] + eps).sqrt()
    yield Mistake("you put eps inside the square root; divide by max(length, eps) instead (clamp_min(eps) on the "
                  "length)", inside @ inside.T)
    yield Mistake("you applied eps to the product of two lengths; apply it to each row's length, max(length, eps), "
                  "before you multiply", dots / (length[:, None] * length[None, :]).clamp_min(eps))
    yield Mistake("you divided by the norm of the whole matrix (norm() without dim): divide each row by its own "
                  "length (dim=-1)", dots / (inputs.norm() ** 2).clamp_min(eps))
    if inputs.shape[0] == inputs.shape[1]:
        wrong_way = inputs / length.clamp_min(eps)[None, :]
        yield Mistake("the lengths have shape (T,) and divided the columns, not the rows: keep the dimension "
                      "(keepdim=True, shape (T, 1)) so that each row is divided by its own length",
                      wrong_way @ wrong_way.T)


run(Spec("cosine_similarity_matrix", call_cosine_similarity_matrix, cosine_oracle,
         examples=cosine_examples, cases=cosine_cases, mistakes=cosine_mistakes))
### END HIDDEN TESTS

# %% [markdown]
# Side by side: the dot products (left) reward long vectors, the cosines (right) only look at
# directions, so the diagonal is all ones. Compare the *one* row in both pictures.

# %%
cosines = cosine_similarity_matrix(inputs)
print(torch.allclose(cosines, torch.nn.functional.cosine_similarity(inputs[:, None], inputs[None], dim=-1), atol=1e-6))

fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for ax, matrix, title in zip(axes, (scores, cosines), ("dot product", "cosine similarity")):
    image = ax.imshow(matrix.numpy(), cmap="viridis")
    ax.set_xticks(range(len(words)), words, rotation=45)
    ax.set_yticks(range(len(words)), words)
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
show()

# %% [markdown]
# ## Recap
#
# - An embedding is a vector; a token's vector is an arrow in space.
# - The dot product $a \cdot b = \sum_i a_i b_i$ is large for long arrows pointing the same way.
#   `inputs @ query` scores one query against every token; `inputs @ inputs.T` scores all pairs.
# - The dot-product similarity matrix is symmetric.
# - Cosine similarity divides by the lengths and keeps only the angle; attention scores are
#   plain dot products, so length matters.
#
# **Next — unit 02:** turn a row of scores into weights that sum to one with a softmax, and
# mix the token vectors with those weights into a *context vector*.


# %% [markdown]
# ## Your progress
#
# Which exercises of the whole course pass (✓), which you tried and are not right yet (✗, with
# the mistake the self-check last named), and which wait (·). Each self-check keeps its outcome
# in `attention-course-progress.json` in your working folder; nothing is sent anywhere.

# %%
from grader.progress import progress

progress()
