"""Unit 04 — why scale by √d_k."""
from . import Alternative, Mistake

UNIT = "04_scaling"

V = "u04_dot_product_variance"
E = "u04_attention_entropy"
S = "u04_scaled_dot_product_attention"

MISTAKES = [
    # --- dot_product_variance ---------------------------------------------------------------
    Mistake("returns the standard deviation", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    k = torch.randn(num_samples, d, generator=generator)
    return (q * k).sum(-1).std().item()
""", "standard deviation"),
    Mistake("entries drawn uniformly (torch.rand)", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.rand(num_samples, d, generator=generator)
    k = torch.rand(num_samples, d, generator=generator)
    return (q * k).sum(-1).var().item()
""", "drawn uniformly from [0, 1)"),
    Mistake("returns the mean", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    k = torch.randn(num_samples, d, generator=generator)
    return (q * k).sum(-1).mean().item()
""", "that is the mean of q·k"),
    Mistake("variance of the scaled product (divided by d)", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    k = torch.randn(num_samples, d, generator=generator)
    return ((q * k).sum(-1) / math.sqrt(d)).var().item()
""", "your result is about 1"),
    Mistake("products not summed: variance of single entries", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    k = torch.randn(num_samples, d, generator=generator)
    return (q * k).var().item()
""", "your result is about 1"),
    Mistake("ignores the generator", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d)
    k = torch.randn(num_samples, d)
    return (q * k).sum(-1).var().item()
""", "seeded alike gave different results"),
    Mistake("returns the formula instead of an estimate", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    return float(d)
""", "does not change when the random draws change"),
    Mistake("the same vector for q and k", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    return (q * q).sum(-1).var().item()
""", "about 2d"),
    Mistake("returns a tensor, not a float", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    k = torch.randn(num_samples, d, generator=generator)
    return (q * k).sum(-1).var()
""", "use .item()"),

    # --- attention_entropy ------------------------------------------------------------------
    Mistake("log base 2", E, """
def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(-1) / math.log(2)
""", "base 2"),
    Mistake("log2 with a where", E, """
def attention_entropy(weights):
    return -(weights * torch.where(weights > 0, weights.log2(), 0.0)).sum(-1)
""", "base 2"),
    Mistake("log base 10", E, """
def attention_entropy(weights):
    return -(weights * torch.where(weights > 0, weights.log10(), 0.0)).sum(-1)
""", "base 10"),
    Mistake("0 · log 0 gives NaN", E, """
def attention_entropy(weights):
    return -(weights * torch.log(weights)).sum(dim=-1)
""", "gave NaN"),
    Mistake("sum over the wrong dim", E, """
def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-2)
""", "summed down the columns"),
    Mistake("sum over dim 0", E, """
def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=0)
""", "summed down the columns"),
    Mistake("missing minus sign", E, """
def attention_entropy(weights):
    return torch.special.xlogy(weights, weights).sum(-1)
""", "minus sign"),
    Mistake("mean instead of sum", E, """
def attention_entropy(weights):
    return -torch.special.xlogy(weights, weights).mean(-1)
""", "averaged"),
    Mistake("entries not summed", E, """
def attention_entropy(weights):
    return torch.special.entr(weights)
""", "every entry"),
    Mistake("one number for the whole tensor", E, """
def attention_entropy(weights):
    return torch.special.entr(weights).sum()
""", "summed over all entries"),

    # --- scaled_dot_product_attention -------------------------------------------------------
    Mistake("missing scale", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "did not divide the scores"),
    Mistake("scaled by d_k, not its square root", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "instead of its square root"),
    Mistake("multiplied by √d_k", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "multiplied the scores"),
    Mistake("scaled by √d_v", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "√d_v"),
    Mistake("scaled by √T (number of keys, as in seed 003)", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "number of tokens"),
    Mistake("scaled by √T (number of queries)", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-2))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "number of tokens"),
    Mistake("mask inverted (True treated as attend)", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "mask is inverted"),
    Mistake("seed 004's convention: masked_fill(mask == 0, -1e9)", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights
""", "mask is inverted"),
    Mistake("masked with 0 instead of -inf", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, 0)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "filled the blocked scores with 0"),
    Mistake("mask applied after the softmax", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights.masked_fill(mask, 0.0)
    return weights @ v, weights
""", "after the softmax"),
    Mistake("softmax over the wrong dim", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2)
    return weights @ v, weights
""", "softmax over the wrong dimension"),
    Mistake("softmax over dim 1", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=1)
    return weights @ v, weights
""", "softmax over the wrong dimension"),
    Mistake(".T on batched input", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", ".transpose(-2, -1) or .mT"),
    Mistake("returned (weights, output)", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights, weights @ v
""", "in that order"),
    Mistake("scaled the weights after the softmax", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1) / math.sqrt(q.shape[-1])
    return weights @ v, weights
""", "after the softmax: scale the scores before it"),
    Mistake("masked_fill result not kept", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""", "the mask was not applied"),
    Mistake("mask ignored", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights
""", "the mask was not applied"),
    Mistake("softmax without subtracting the maximum overflows on large scores", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    e = scores.exp()
    weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights
""", "NaN"),
]

ALTERNATIVES = [
    # --- dot_product_variance ---------------------------------------------------------------
    Alternative("biased variance written by hand, float()", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    k = torch.randn(num_samples, d, generator=generator)
    dots = torch.einsum("nd,nd->n", q, k)
    return float(((dots - dots.mean()) ** 2).mean())
"""),
    Alternative("mean of squares (the true mean 0 is known), one draw of shape (2, N, d)", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q, k = torch.randn(2, num_samples, d, generator=generator)
    return (q * k).sum(-1).pow(2).mean().item()
"""),
    Alternative("torch.var with correction=0", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator)
    k = torch.randn(num_samples, d, generator=generator)
    return torch.var((q * k).sum(dim=1), correction=0).item()
"""),
    Alternative("Python loop over samples with the seeded generator", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    dots = []
    for _ in range(num_samples):
        q = torch.randn(d, generator=generator)
        k = torch.randn(d, generator=generator)
        dots.append(torch.dot(q, k).item())
    mean = sum(dots) / len(dots)
    return sum((x - mean) ** 2 for x in dots) / (len(dots) - 1)
"""),
    Alternative("float64 samples", V, """
def dot_product_variance(d, num_samples=10_000, generator=None):
    q = torch.randn(num_samples, d, generator=generator, dtype=torch.float64)
    k = torch.randn(num_samples, d, generator=generator, dtype=torch.float64)
    return (q * k).sum(-1).var().item()
"""),

    # --- attention_entropy ------------------------------------------------------------------
    Alternative("torch.special.entr", E, """
def attention_entropy(weights):
    return torch.special.entr(weights).sum(dim=-1)
"""),
    Alternative("torch.xlogy", E, """
def attention_entropy(weights):
    return -torch.xlogy(weights, weights).sum(-1)
"""),
    Alternative("clamped logarithm", E, """
def attention_entropy(weights):
    return -(weights * weights.clamp_min(1e-30).log()).sum(-1)
"""),
    Alternative("nan_to_num after 0 · log 0", E, """
def attention_entropy(weights):
    return -torch.nan_to_num(weights * weights.log(), nan=0.0).sum(-1)
"""),
    Alternative("log with a tiny epsilon added", E, """
def attention_entropy(weights):
    return -(weights * torch.log(weights + 1e-12)).sum(dim=-1)
"""),
    Alternative("Categorical distribution", E, """
def attention_entropy(weights):
    return torch.distributions.Categorical(probs=weights, validate_args=False).entropy()
"""),

    # --- scaled_dot_product_attention -------------------------------------------------------
    Alternative("softmax over all keys, then the keep-mask, then renormalise", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights * (~mask)
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ v, weights
"""),
    Alternative("einsum, q scaled first, -1e9", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q / q.shape[-1] ** 0.5, k)
    if mask is not None:
        scores = scores.masked_fill(mask, -1e9)
    weights = scores.softmax(-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
"""),
    Alternative("torch.where with finfo.min and .mT", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = (q @ k.mT) / math.sqrt(k.size(-1))
    if mask is not None:
        scores = torch.where(mask, torch.finfo(scores.dtype).min, scores)
    weights = F.softmax(scores, dim=-1)
    return weights @ v, weights
"""),
    Alternative("additive float mask", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(mask, float("-inf"))
        scores = scores + bias
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
"""),
    Alternative("own stable softmax, mask == True", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / torch.tensor(q.shape[-1], dtype=q.dtype).sqrt()
    if mask is not None:
        scores = scores.masked_fill(mask == True, float("-inf"))
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = scores.exp()
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ v, weights
"""),
    Alternative("PyTorch's own attention for the output, ~mask", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    attend = None if mask is None else ~mask
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return output, torch.softmax(scores, dim=-1)
"""),
    Alternative(".T for 2-D inputs, transpose otherwise", S, """
def scaled_dot_product_attention(q, k, v, mask=None):
    kt = k.T if k.dim() == 2 else k.transpose(-2, -1)
    scores = q @ kt / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
"""),
]
