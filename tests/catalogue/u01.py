"""Unit 01 — dot-product similarity."""
from . import Alternative, Mistake

UNIT = "01_dot_product"

A = "u01_dot_product"
S = "u01_attention_scores_for"
M = "u01_similarity_matrix"
C = "u01_cosine_similarity_matrix"

MISTAKES = [
    Mistake("dot product normalised into a cosine", A, """
def dot_product(a, b):
    return (a * b).sum() / (a.norm() * b.norm())
""", "cosine similarity"),
    Mistake("products not summed", A, """
def dot_product(a, b):
    return a * b
""", "add them up"),
    Mistake("torch.dot instead of writing it", A, """
def dot_product(a, b):
    return torch.dot(a, b)
""", "torch.dot is not allowed"),
    Mistake("fixed row of inputs as the query", S, """
def attention_scores_for(query, inputs):
    return inputs @ inputs[1]
""", "fixed row of `inputs`"),
    Mistake("cosine scores", S, """
def attention_scores_for(query, inputs):
    return (inputs @ query) / (inputs.norm(dim=-1) * query.norm())
""", "cosine similarities"),
    Mistake("scores scaled by √d, as in scaled dot-product attention", S, """
def attention_scores_for(query, inputs):
    return inputs @ query / inputs.shape[-1] ** 0.5
""", "by √d"),
    Mistake("scores turned into weights by a softmax", S, """
def attention_scores_for(query, inputs):
    return torch.softmax(inputs @ query, dim=0)
""", "you applied a softmax to the scores"),
    Mistake("a softmax over each row of the similarities", M, """
def similarity_matrix(inputs):
    return torch.softmax(inputs @ inputs.T, dim=-1)
""", "you applied a softmax to each row"),
    Mistake("similarities scaled by √d", M, """
def similarity_matrix(inputs):
    return inputs @ inputs.T / inputs.shape[1] ** 0.5
""", "by √d"),
    Mistake("inputs.T @ inputs", M, """
def similarity_matrix(inputs):
    return inputs.T @ inputs
""", "compares the embedding dimensions"),
    Mistake("cosine instead of dot", M, """
def similarity_matrix(inputs):
    unit = inputs / inputs.norm(dim=-1, keepdim=True)
    return unit @ unit.T
""", "cosine similarities"),
    Mistake("no eps: NaN on a zero row", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / inputs.norm(dim=-1, keepdim=True)
    return unit @ unit.T
""", "all-zero row"),
    Mistake("normalised columns", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / inputs.norm(dim=0, keepdim=True).clamp_min(eps)
    return unit @ unit.T
""", "normalised the columns"),
    Mistake("plain dot products", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    return inputs @ inputs.T
""", "plain dot products"),
    Mistake("eps ignored (fixed 1e-8)", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / inputs.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    return unit @ unit.T
""", "eps=0.5"),
    # --- dot_product: arithmetic, shape, type, the inputs
    Mistake("sum of the sum", A, """
def dot_product(a, b):
    return (a + b).sum()
""", "added the two vectors"),
    Mistake("product of the sums", A, """
def dot_product(a, b):
    return a.sum() * b.sum()
""", "multiplied the sum of a by the sum of b"),
    Mistake("mean of the products", A, """
def dot_product(a, b):
    return (a * b).mean()
""", "averaged the products"),
    Mistake("loop that stops one entry early", A, """
def dot_product(a, b):
    total = torch.tensor(0.0)
    for i in range(len(a) - 1):
        total = total + a[i] * b[i]
    return total
""", "leaves out the last entry"),
    Mistake("sum with keepdim", A, """
def dot_product(a, b):
    return (a * b).sum(dim=0, keepdim=True)
""", "shape (1,)"),
    Mistake("list of products from a comprehension", A, """
def dot_product(a, b):
    return [x * y for x, y in zip(a, b)]
""", "returned a Python list"),
    Mistake("products written into a", A, """
def dot_product(a, b):
    a *= b
    return a.sum()
""", "changed its input in place"),
    # --- attention_scores_for
    Mistake("sum over the tokens", S, """
def attention_scores_for(query, inputs):
    return (inputs * query).sum(dim=0)
""", "over the tokens (dim=0)"),
    Mistake("every product summed into one number", S, """
def attention_scores_for(query, inputs):
    return (inputs * query).sum()
""", "every product into one number"),
    Mistake("query @ inputs", S, """
def attention_scores_for(query, inputs):
    return query @ inputs
""", "inputs @ query"),
    Mistake("inputs.T @ query", S, """
def attention_scores_for(query, inputs):
    return inputs.T @ query
""", "inputs @ query"),
    Mistake("scores as a column", S, """
def attention_scores_for(query, inputs):
    return inputs @ query.unsqueeze(-1)
""", "a column of shape (T, 1)"),
    Mistake("loop over the columns of inputs", S, """
def attention_scores_for(query, inputs):
    return torch.stack([dot_product(query, column) for column in inputs.T])
""", "columns of inputs"),
    Mistake("loop that keeps only the last score", S, """
def attention_scores_for(query, inputs):
    for row in inputs:
        score = (row * query).sum()
    return score
""", "the last row's"),
    Mistake("list of scores", S, """
def attention_scores_for(query, inputs):
    return [dot_product(row, query) for row in inputs]
""", "returned a Python list"),
    Mistake("scores computed into inputs", S, """
def attention_scores_for(query, inputs):
    inputs *= query
    return inputs.sum(dim=-1)
""", "changed its input in place"),
    Mistake("float tensor times an integer one", S, """
def attention_scores_for(query, inputs):
    return inputs.float() @ query
""", "different dtypes"),
    # --- similarity_matrix
    Mistake("inputs @ inputs, no transpose", M, """
def similarity_matrix(inputs):
    return inputs @ inputs
""", "inputs.T"),
    Mistake("elementwise square", M, """
def similarity_matrix(inputs):
    return inputs * inputs
""", "entry by entry"),
    Mistake("diagonal only", M, """
def similarity_matrix(inputs):
    return (inputs * inputs).sum(dim=-1)
""", "the diagonal"),
    Mistake("upper triangle only (symmetry used, not filled in)", M, """
def similarity_matrix(inputs):
    T = inputs.shape[0]
    out = torch.zeros(T, T)
    for i in range(T):
        for j in range(i, T):
            out[i, j] = (inputs[i] * inputs[j]).sum()
    return out
""", "only one triangle"),
    Mistake("nested list of dot products", M, """
def similarity_matrix(inputs):
    return [[float((r * s).sum()) for s in inputs] for r in inputs]
""", "returned a Python list"),
    # --- cosine_similarity_matrix
    Mistake("eps added to the length", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / (inputs.norm(dim=-1, keepdim=True) + eps)
    return unit @ unit.T
""", "added eps to each length"),
    Mistake("eps inside the square root", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / torch.sqrt((inputs ** 2).sum(dim=-1, keepdim=True) + eps)
    return unit @ unit.T
""", "inside the square root"),
    Mistake("eps on the product of the lengths", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    n = inputs.norm(dim=-1)
    return (inputs @ inputs.T) / (n[:, None] * n[None, :]).clamp_min(eps)
""", "product of two lengths"),
    Mistake("norm of the whole matrix", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / inputs.norm().clamp_min(eps)
    return unit @ unit.T
""", "norm of the whole matrix"),
    Mistake("lengths without keepdim", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / inputs.norm(dim=-1).clamp_min(eps)
    return unit @ unit.T
""", "keepdim=True"),
    Mistake("Python's max on the tensor of lengths", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = inputs / max(inputs.norm(dim=-1, keepdim=True), eps)
    return unit @ unit.T
""", "clamp_min(eps) or torch.maximum"),
    Mistake("rows divided in place", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    inputs /= inputs.norm(dim=-1, keepdim=True).clamp_min(eps)
    return inputs @ inputs.T
""", "changed `inputs` in place"),
    Mistake("no eps and no floor at all", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    n = (inputs ** 2).sum(dim=-1, keepdim=True).sqrt()
    return (inputs / n) @ (inputs / n).T
""", "all-zero row"),
]

ALTERNATIVES = [
    Alternative("Python loop over entries", A, """
def dot_product(a, b):
    total = torch.tensor(0.0)
    for x, y in zip(a, b):
        total = total + x * y
    return total
"""),
    Alternative("torch.sum and a Python float", A, """
def dot_product(a, b):
    return float(torch.sum(a * b))
"""),
    Alternative("loop with the learner's dot_product", S, """
def attention_scores_for(query, inputs):
    return torch.stack([dot_product(row, query) for row in inputs])
"""),
    Alternative("einsum", S, """
def attention_scores_for(query, inputs):
    return torch.einsum("td,d->t", inputs, query)
"""),
    Alternative("einsum matrix", M, """
def similarity_matrix(inputs):
    return torch.einsum("id,jd->ij", inputs, inputs)
"""),
    Alternative("double loop", M, """
def similarity_matrix(inputs):
    T = inputs.shape[0]
    out = torch.empty(T, T)
    for i in range(T):
        for j in range(T):
            out[i, j] = (inputs[i] * inputs[j]).sum()
    return out
"""),
    Alternative("F.normalize", C, """
import torch.nn.functional as F
def cosine_similarity_matrix(inputs, eps=1e-8):
    unit = F.normalize(inputs, dim=-1, eps=eps)
    return unit @ unit.T
"""),
    Alternative("divide the dot products by an outer product of clamped norms", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    n = torch.sqrt((inputs ** 2).sum(-1)).clamp(min=eps)
    return (inputs @ inputs.T) / (n[:, None] * n[None, :])
"""),
    Alternative("query @ inputs.T", S, """
def attention_scores_for(query, inputs):
    return query @ inputs.T
"""),
    Alternative("torch.mv and a loop into a preallocated tensor", S, """
def attention_scores_for(query, inputs):
    if len(inputs) < 3:
        out = torch.zeros(len(inputs))
        for t in range(len(inputs)):
            out[t] = (inputs[t] * query).sum()
        return out
    return torch.mv(inputs, query)
"""),
    Alternative("torch.mm with .t()", M, """
def similarity_matrix(inputs):
    return torch.mm(inputs, inputs.t())
"""),
    Alternative("list of rows turned into a tensor at the end", M, """
def similarity_matrix(inputs):
    rows = []
    for r in inputs:
        rows.append(torch.stack([(r * s).sum() for s in inputs]))
    return torch.stack(rows)
"""),
    Alternative("the upper triangle computed, then mirrored", M, """
def similarity_matrix(inputs):
    T = inputs.shape[0]
    out = torch.zeros(T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(i, T):
            out[i, j] = out[j, i] = (inputs[i] * inputs[j]).sum()
    return out
"""),
    Alternative("F.cosine_similarity on broadcast rows", C, """
import torch.nn.functional as F
def cosine_similarity_matrix(inputs, eps=1e-8):
    return F.cosine_similarity(inputs[:, None, :], inputs[None, :, :], dim=-1, eps=eps)
"""),
    Alternative("torch.maximum of the length and eps", C, """
def cosine_similarity_matrix(inputs, eps=1e-8):
    length = torch.linalg.vector_norm(inputs, dim=1, keepdim=True)
    unit = inputs / torch.maximum(length, torch.full_like(length, eps))
    return torch.einsum("id,jd->ij", unit, unit)
"""),
    Alternative("einsum with a Python float loop for the lengths", C, """
import math
def cosine_similarity_matrix(inputs, eps=1e-8):
    lengths = torch.tensor([max(math.sqrt(sum(float(v) ** 2 for v in row)), eps) for row in inputs],
                           dtype=inputs.dtype)
    unit = inputs / lengths.unsqueeze(1)
    return unit @ unit.T
"""),
]
