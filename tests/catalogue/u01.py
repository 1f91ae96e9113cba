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
""", "fixed row of `inputs`", selfcheck=False),
    Mistake("cosine scores", S, """
def attention_scores_for(query, inputs):
    return (inputs @ query) / (inputs.norm(dim=-1) * query.norm())
""", "cosine similarities"),
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
""", "all-zero row", selfcheck=False),
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
""", "eps=0.5", selfcheck=False),
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
]
