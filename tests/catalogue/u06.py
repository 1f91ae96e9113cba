"""Unit 06 — multi-head attention."""
from . import Alternative, Mistake

UNIT = "06_multi_head"

W = "u06_multi_head_attention_wrapper"
S = "u06_split_heads"
G = "u06_merge_heads"
M = "u06_multi_head_attention"
T = "u06_to_torch_mha"
P = "u06_mha_param_count"

# A correct wrapper __init__, reused by the wrapper entries that only change forward.
_WRAPPER_INIT = """
class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])
"""

# A correct MultiHeadAttention __init__; the entries below write their own forward.
_MHA_INIT = """
import math
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError("d_out must be divisible by num_heads")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())
"""


def _mha(forward: str, init: str = _MHA_INIT) -> str:
    return init + forward


# The forward pass of the reference, written out so that single lines can be broken.
_FORWARD = """
    def forward(self, x):
        B, T, _ = x.shape
        q = self.W_query(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_key(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))
        w = self.dropout(torch.softmax(scores, dim=-1))
        ctx = (w @ v).transpose(1, 2).contiguous().view(B, T, self.d_out)
        return self.out_proj(ctx)
"""


def _forward(old: str, new: str) -> str:
    assert old in _FORWARD, old
    return _mha(_FORWARD.replace(old, new))


# A correct to_torch_mha body with pieces that entries replace.
_TO_TORCH = """
def to_torch_mha(mha):
    E = mha.d_out
    w = mha.out_proj.weight
    t = nn.MultiheadAttention(E, mha.num_heads, dropout=0.0, bias=True, batch_first=True, device=w.device,
                              dtype=w.dtype)
    zeros = torch.zeros(E, dtype=w.dtype)
    with torch.no_grad():
        t.in_proj_weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]))
        t.in_proj_bias.copy_(torch.cat([l.bias if l.bias is not None else zeros
                                        for l in (mha.W_query, mha.W_key, mha.W_value)]))
        t.out_proj.weight.copy_(mha.out_proj.weight)
        t.out_proj.bias.copy_(mha.out_proj.bias)
    t.eval()
    return t
"""


def _to_torch(old: str, new: str) -> str:
    assert old in _TO_TORCH, old
    return _TO_TORCH.replace(old, new)


MISTAKES = [
    # --- the wrapper ------------------------------------------------------------
    Mistake("wrapper concatenates on the token axis", W, _WRAPPER_INIT + """
    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=1)
""", "along the token axis"),
    Mistake("wrapper uses torch.hstack (dim 1 for 3-D tensors)", W, _WRAPPER_INIT + """
    def forward(self, x):
        return torch.hstack([h(x) for h in self.heads])
""", "along the token axis"),
    Mistake("wrapper concatenates on the batch axis", W, _WRAPPER_INIT + """
    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=0)
""", "along the batch axis"),
    Mistake("wrapper stacks the heads", W, _WRAPPER_INIT + """
    def forward(self, x):
        return torch.stack([h(x) for h in self.heads], dim=2)
""", "stacked the heads"),
    Mistake("wrapper adds the heads", W, _WRAPPER_INIT + """
    def forward(self, x):
        return sum(h(x) for h in self.heads)
""", "added the heads"),
    Mistake("wrapper returns inside the loop", W, _WRAPPER_INIT + """
    def forward(self, x):
        for h in self.heads:
            out = h(x)
        return out
""", "a single head's output"),
    Mistake("wrapper heads in reverse order", W, _WRAPPER_INIT + """
    def forward(self, x):
        return torch.cat([h(x) for h in reversed(self.heads)], dim=-1)
""", "reverse order"),
    Mistake("one module repeated as every head", W, """
class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList([CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)] * num_heads)
    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)
""", "holds the same module more than once"),
    Mistake("heads in a plain Python list", W, """
class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)
""", "hold its modules in an nn.ModuleList"),
    Mistake("wrapper ignores qkv_bias", W, """
class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList([CausalAttention(d_in, d_out, context_length, dropout) for _ in range(num_heads)])
    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)
""", "missing: heads.0.W_"),
    Mistake("wrapper hard-codes dropout 0", W, """
class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList([CausalAttention(d_in, d_out, context_length, 0.0, qkv_bias)
                                    for _ in range(num_heads)])
    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)
""", "pass the `dropout` rate on"),

    # --- split and merge -----------------------------------------------------------
    Mistake("split_heads: view straight to (B, H, T, hd)", S, """
def split_heads(x, num_heads):
    B, T, D = x.shape
    return x.view(B, num_heads, T, D // num_heads)
""", "reshaped straight to (B, num_heads, T, head_dim)"),
    Mistake("split_heads: no transpose", S, """
def split_heads(x, num_heads):
    B, T, D = x.shape
    return x.view(B, T, num_heads, D // num_heads)
""", "stopped at (B, T, num_heads, head_dim)"),
    Mistake("split_heads: features cut as (head_dim, num_heads)", S, """
def split_heads(x, num_heads):
    B, T, D = x.shape
    return x.view(B, T, D // num_heads, num_heads).permute(0, 3, 1, 2)
""", "like cards"),
    Mistake("split_heads: num_heads and head_dim swapped", S, """
def split_heads(x, num_heads):
    B, T, D = x.shape
    return x.view(B, T, -1, num_heads).transpose(1, 2)
""", "swapped num_heads and head_dim"),
    Mistake("merge_heads: view without contiguous", G, """
def merge_heads(x):
    B, H, T, hd = x.shape
    return x.transpose(1, 2).view(B, T, H * hd)
""", "not contiguous"),
    Mistake("merge_heads: no transpose back", G, """
def merge_heads(x):
    B, H, T, hd = x.shape
    return x.reshape(B, T, H * hd)
""", "without moving the head axis back"),
    Mistake("merge_heads: contiguous view without transpose back", G, """
def merge_heads(x):
    B, H, T, hd = x.shape
    return x.contiguous().view(B, T, -1)
""", "without moving the head axis back"),
    Mistake("merge_heads: flattened as (head_dim, H)", G, """
def merge_heads(x):
    B, H, T, hd = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * hd)
""", "order (head_dim, H)"),
    Mistake("merge_heads: not flattened", G, """
def merge_heads(x):
    return x.transpose(1, 2)
""", "did not flatten"),

    # --- MultiHeadAttention -------------------------------------------------------
    Mistake("split into head_dim heads of num_heads features", M, _forward(
        "view(B, T, self.num_heads, self.head_dim)", "view(B, T, self.head_dim, self.num_heads)"),
        "split the features into head_dim heads of num_heads features each"),
    Mistake("scaled by sqrt(d_out)", M, _forward("math.sqrt(self.head_dim)", "math.sqrt(self.d_out)"),
            "scale by √head_dim"),
    Mistake("keys made with the query projection", M, _forward(
        "k = self.W_key(x).view", "k = self.W_query(x).view"), "the keys were made with W_query"),
    Mistake("out_proj defined but not applied", M, _forward("return self.out_proj(ctx)", "return ctx"),
            "out_proj is not applied"),
    Mistake("no out_proj at all", M, _mha(_FORWARD.replace("return self.out_proj(ctx)", "return ctx"),
                                          _MHA_INIT.replace("self.out_proj = nn.Linear(d_out, d_out)", "")),
            "missing: out_proj"),
    Mistake("out_proj without a bias", M, _mha(_FORWARD, _MHA_INIT.replace(
        "self.out_proj = nn.Linear(d_out, d_out)", "self.out_proj = nn.Linear(d_out, d_out, bias=False)")),
            "missing: out_proj.bias"),
    Mistake("no ValueError for an indivisible d_out", M, _mha(_FORWARD, _MHA_INIT.replace(
        'raise ValueError("d_out must be divisible by num_heads")', "pass")),
            "was built without complaint"),
    Mistake("assert instead of ValueError", M, _mha(_FORWARD, _MHA_INIT.replace(
        'if d_out % num_heads != 0:\n            raise ValueError("d_out must be divisible by num_heads")',
        'assert d_out % num_heads == 0, "d_out must be divisible by num_heads"')),
            "AssertionError"),
    Mistake("head_dim as a float", M, _mha(_FORWARD.replace("self.head_dim)", "int(self.head_dim))"),
                                           _MHA_INIT.replace("d_out // num_heads", "d_out / num_heads")),
            "head_dim must be an int"),
    Mistake("mask not cut to the batch length", M, _forward("self.mask[:T, :T]", "self.mask"),
            "is the mask cut to the batch's length"),
    Mistake("view straight to (B, H, T, hd), merged back with a transpose", M, _mha(
        _FORWARD.replace("view(B, T, self.num_heads, self.head_dim).transpose(1, 2)",
                         "view(B, self.num_heads, T, self.head_dim)")),
            "without a transpose"),
    Mistake("view straight to (B, H, T, hd) and back", M, _mha(
        _FORWARD.replace("view(B, T, self.num_heads, self.head_dim).transpose(1, 2)",
                         "view(B, self.num_heads, T, self.head_dim)")
        .replace("(w @ v).transpose(1, 2).contiguous()", "(w @ v)")),
            "without a transpose"),
    Mistake("merged without transposing back", M, _forward("(w @ v).transpose(1, 2).contiguous()", "(w @ v)"),
            "without moving the head axis back"),
    Mistake("merged with view on a non-contiguous tensor", M, _forward(".contiguous()", ""),
            "not contiguous"),
    Mistake("no causal mask", M, _forward('scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))', ""),
            "depends on future tokens"),
    Mistake("mask convention inverted (blocks the past)", M, _forward("self.mask[:T, :T]", "~self.mask[:T, :T]"),
            "blocks the past"),
    Mistake("mirrored mask: the past blocked (tril with diagonal=-1)", M, _mha(_FORWARD, _MHA_INIT.replace(
        "torch.triu(torch.ones(context_length, context_length), diagonal=1)",
        "torch.tril(torch.ones(context_length, context_length), diagonal=-1)")),
            "mirror image of the causal one"),
    Mistake("mask blocks the diagonal too", M, _mha(_FORWARD,
                                                    _MHA_INIT.replace("diagonal=1", "diagonal=0")),
            "own position"),
    Mistake("softmax over the queries", M, _forward("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=2)"),
            "wrong axis"),
    Mistake("returns (context, weights) like the seed article", M, _forward(
        "return self.out_proj(ctx)", "return self.out_proj(ctx), w"), "return the context tensor only"),
    Mistake("dropout on the context instead of the weights", M, _forward(
        "w = self.dropout(torch.softmax(scores, dim=-1))\n"
        "        ctx = (w @ v).transpose(1, 2).contiguous().view(B, T, self.d_out)",
        "w = torch.softmax(scores, dim=-1)\n"
        "        ctx = self.dropout((w @ v).transpose(1, 2).contiguous().view(B, T, self.d_out))"),
            "dropout to the merged context"),
    Mistake("dropout on the output", M, _forward(
        "w = self.dropout(torch.softmax(scores, dim=-1))", "w = torch.softmax(scores, dim=-1)").replace(
        "return self.out_proj(ctx)", "return self.dropout(self.out_proj(ctx))"),
            "dropout to the output of out_proj"),
    Mistake("dropout on the weights and again on the output (nanoGPT's residual dropout)", M, _forward(
        "return self.out_proj(ctx)", "return self.dropout(self.out_proj(ctx))"),
            "dropout twice, to the attention weights and to the output of out_proj"),
    Mistake("dropout on the scores before the softmax", M, _forward(
        "w = self.dropout(torch.softmax(scores, dim=-1))", "w = torch.softmax(self.dropout(scores), dim=-1)"),
            "dropped -inf"),
    Mistake("dropout on the scores before the mask", M, _forward(
        'scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))',
        'scores = self.dropout(scores).masked_fill(self.mask[:T, :T], float("-inf"))').replace(
        "w = self.dropout(torch.softmax(scores, dim=-1))", "w = torch.softmax(scores, dim=-1)"),
            "dropout to the scores, before the softmax"),
    Mistake("no dropout at all", M, _forward("w = self.dropout(torch.softmax(scores, dim=-1))",
                                             "w = torch.softmax(scores, dim=-1)"),
            "same as in eval mode"),
    Mistake("F.dropout that is also on in eval()", M, "import torch.nn.functional as F\n" + _forward(
        "w = self.dropout(torch.softmax(scores, dim=-1))",
        "w = F.dropout(torch.softmax(scores, dim=-1), self.dropout.p)"),
            "in eval() mode your output is random"),

    # --- to_torch_mha --------------------------------------------------------------
    Mistake("device and dtype ignored", T, _to_torch(", device=w.device,\n" + " " * 30 + "dtype=w.dtype)", ")"),
            "build it with the module's dtype and device"),
    Mistake("in_proj packed as key, query, value", T, _to_torch(
        "[mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]",
        "[mha.W_key.weight, mha.W_query.weight, mha.W_value.weight]").replace(
        "(mha.W_query, mha.W_key, mha.W_value)", "(mha.W_key, mha.W_query, mha.W_value)"),
        "in_proj_weight and in_proj_bias as (key, query, value)"),
    Mistake("in_proj packed as value, key, query (weights only)", T, _to_torch(
        "[mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]",
        "[mha.W_value.weight, mha.W_key.weight, mha.W_query.weight]"), "in_proj_weight as (value, key, query)"),
    Mistake("weights transposed", T, _to_torch(
        "[mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]",
        "[mha.W_query.weight.T, mha.W_key.weight.T, mha.W_value.weight.T]"), "you transposed the weights"),
    Mistake("all weights transposed", T, _to_torch(
        "[mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]",
        "[mha.W_query.weight.T, mha.W_key.weight.T, mha.W_value.weight.T]").replace(
        "copy_(mha.out_proj.weight)", "copy_(mha.out_proj.weight.T)"), "you transposed the weights"),
    Mistake("left in training mode with the module's dropout", T, _to_torch(
        "dropout=0.0", "dropout=mha.dropout.p").replace("    t.eval()\n", ""), "still in training mode"),
    Mistake("left in training mode", T, _to_torch("    t.eval()\n", ""), "still in training mode"),
    Mistake("dropout copied from the module (eval)", T, _to_torch("dropout=0.0", "dropout=mha.dropout.p"),
            "give it dropout 0"),
    Mistake("batch_first forgotten", T, _to_torch("batch_first=True", "batch_first=False"),
            "without batch_first=True"),
    Mistake("q/k/v biases not copied", T, _to_torch(
        "l.bias if l.bias is not None else zeros", "zeros"), "in_proj_bias is zero"),
    Mistake("None biases not replaced", T, _to_torch(
        "l.bias if l.bias is not None else zeros", "l.bias"), "put zeros in their place"),
    Mistake("out_proj left as nn.MultiheadAttention built it", T, _to_torch(
        "        t.out_proj.weight.copy_(mha.out_proj.weight)\n        t.out_proj.bias.copy_(mha.out_proj.bias)\n", ""),
            "the output projection was not copied"),
    Mistake("out_proj bias not copied", T, _to_torch("        t.out_proj.bias.copy_(mha.out_proj.bias)\n", ""),
            "out_proj.bias was not copied"),
    Mistake("a single head", T, _to_torch("nn.MultiheadAttention(E, mha.num_heads,", "nn.MultiheadAttention(E, 1,"),
            "1 head instead of"),
    Mistake("returns the module itself", T, """
def to_torch_mha(mha):
    return mha.eval()
""", "not an nn.MultiheadAttention"),

    # --- parameter count -----------------------------------------------------------
    Mistake("count without out_proj's bias", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    if d_out % num_heads:
        raise ValueError("indivisible")
    return 3 * (d_in * d_out + (d_out if qkv_bias else 0)) + d_out * d_out
""", "out_proj's bias"),
    Mistake("q/k/v biases counted when qkv_bias=False", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    if d_out % num_heads:
        raise ValueError("indivisible")
    return 3 * (d_in * d_out + d_out) + d_out * d_out + d_out
""", "although qkv_bias=False"),
    Mistake("count without out_proj", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    if d_out % num_heads:
        raise ValueError("indivisible")
    return 3 * (d_in * d_out + (d_out if qkv_bias else 0))
""", "left out the output projection"),
    Mistake("count multiplied by num_heads", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    if d_out % num_heads:
        raise ValueError("indivisible")
    return num_heads * 3 * d_in * d_out + (3 * d_out if qkv_bias else 0) + d_out * d_out + d_out
""", "does not depend on num_heads"),
    Mistake("qkv_bias ignored", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    if d_out % num_heads:
        raise ValueError("indivisible")
    return 3 * d_in * d_out + d_out * d_out + d_out
""", "each have a bias"),
    Mistake("no ValueError in the count", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    return 3 * (d_in * d_out + (d_out if qkv_bias else 0)) + d_out * d_out + d_out
""", "raise a ValueError, as the module does"),
    Mistake("out_proj counted as d_in x d_out", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    if d_out % num_heads:
        raise ValueError("indivisible")
    return 3 * (d_in * d_out + (d_out if qkv_bias else 0)) + d_in * d_out + d_out
""", "not d_in to d_out"),
]

ALTERNATIVES = [
    Alternative("MultiHeadAttention as a Python loop over heads, dropout per head", M, _mha("""
    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)          # (B, T, d_out)
        heads = []
        for h in range(self.num_heads):
            cols = slice(h * self.head_dim, (h + 1) * self.head_dim)
            scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(self.head_dim)
            scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))  # (B, T, T)
            heads.append(self.dropout(torch.softmax(scores, dim=-1)) @ v[..., cols])
        return self.out_proj(torch.cat(heads, dim=-1))
""")),
    Alternative("wrapper built with a loop and torch.concat", W, """
class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList()
        for _ in range(num_heads):
            self.heads.append(CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=qkv_bias))
    def forward(self, x):
        outs = []
        for head in self.heads:
            outs.append(head(x))
        return torch.concat(outs, dim=2)
"""),
    Alternative("split_heads with reshape + permute", S, """
def split_heads(x, num_heads):
    B, T, D = x.shape
    return x.reshape(B, T, num_heads, -1).permute(0, 2, 1, 3)
"""),
    Alternative("split_heads with unflatten + transpose", S, """
def split_heads(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)
"""),
    Alternative("split_heads by chunking the features", S, """
def split_heads(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)
"""),
    Alternative("merge_heads with permute + reshape", G, """
def merge_heads(x):
    B, H, T, hd = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, T, H * hd)
"""),
    Alternative("merge_heads with transpose + flatten", G, """
def merge_heads(x):
    return x.transpose(1, 2).flatten(start_dim=2)
"""),
    Alternative("merge_heads by concatenating the heads", G, """
def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)
"""),
    Alternative("einsum attention", M, _mha("""
    def forward(self, x):
        B, T, _ = x.shape
        q = split_heads(self.W_query(x), self.num_heads)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / self.head_dim ** 0.5
        scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))
        w = self.dropout(scores.softmax(dim=-1))
        return self.out_proj(merge_heads(torch.einsum("bhqk,bhkd->bhqd", w, v)))
""")),
    Alternative("F.scaled_dot_product_attention, is_causal, dropout only in training", M,
                "import torch.nn.functional as F\n" + _mha("""
    def forward(self, x):
        B, T, _ = x.shape
        q = self.W_query(x).reshape(B, T, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
        k = self.W_key(x).reshape(B, T, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
        v = self.W_value(x).reshape(B, T, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
        ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout.p if self.training else 0.0,
                                             is_causal=True)
        return self.out_proj(ctx.permute(0, 2, 1, 3).reshape(B, T, self.d_out))
""")),
    Alternative("tril mask with the mask == 0 convention and -1e9 (seed 004 style)", M, """
import math
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"{d_out} is not divisible by {num_heads}")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=True)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(1, 1, context_length, context_length)))
    def forward(self, x):
        B, T, _ = x.shape
        q = self.W_query(x).unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.W_key(x).unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
        v = self.W_value(x).unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.mask[:, :, :T, :T] == 0, -1e9)
        w = self.dropout(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(w, v).transpose(1, 2).flatten(2)
        return self.out_proj(ctx)
"""),
    Alternative("torch.where with finfo.min and a float additive mask", M, _mha("""
    def forward(self, x):
        T = x.shape[1]
        q = split_heads(self.W_query(x), self.num_heads)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        scores = q @ k.mT * self.head_dim ** -0.5
        scores = torch.where(self.mask[:T, :T], torch.finfo(scores.dtype).min, scores)
        w = self.dropout(torch.softmax(scores, dim=-1))
        return self.out_proj(merge_heads(w @ v))
""")),
    Alternative("additive -inf mask buffer", M, _mha("""
    def forward(self, x):
        T = x.shape[1]
        q = split_heads(self.W_query(x), self.num_heads)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim) + self.mask[:T, :T]
        w = self.dropout(torch.softmax(scores, dim=-1))
        return self.out_proj(merge_heads(w @ v))
""", _MHA_INIT.replace(
        'torch.triu(torch.ones(context_length, context_length), diagonal=1).bool()',
        'torch.full((context_length, context_length), float("-inf")).triu(1)'))),
    Alternative("to_torch_mha with load_state_dict", T, """
def to_torch_mha(mha):
    E = mha.d_out
    t = nn.MultiheadAttention(embed_dim=E, num_heads=mha.num_heads, bias=True, batch_first=True)
    t = t.to(mha.out_proj.weight)   # the module's device and dtype
    def bias(lin):
        return lin.bias.detach() if lin.bias is not None else torch.zeros(E)
    t.load_state_dict({
        "in_proj_weight": torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]).detach(),
        "in_proj_bias": torch.cat([bias(mha.W_query), bias(mha.W_key), bias(mha.W_value)]),
        "out_proj.weight": mha.out_proj.weight.detach(),
        "out_proj.bias": mha.out_proj.bias.detach(),
    })
    return t.eval()
"""),
    Alternative("to_torch_mha filling slices", T, """
def to_torch_mha(mha):
    E = mha.d_out
    ref = mha.out_proj.weight
    t = nn.MultiheadAttention(E, mha.num_heads, dropout=0.0, batch_first=True, device=ref.device,
                              dtype=ref.dtype).eval()
    with torch.no_grad():
        t.in_proj_bias.zero_()
        for i, lin in enumerate((mha.W_query, mha.W_key, mha.W_value)):
            t.in_proj_weight[i * E:(i + 1) * E] = lin.weight
            if lin.bias is not None:
                t.in_proj_bias[i * E:(i + 1) * E] = lin.bias
        t.out_proj.weight[:] = mha.out_proj.weight
        t.out_proj.bias[:] = mha.out_proj.bias
    return t
"""),
    Alternative("count by building the module", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    module = MultiHeadAttention(d_in, d_out, 1, 0.0, num_heads, qkv_bias=qkv_bias)
    return sum(p.numel() for p in module.parameters())
"""),
    Alternative("count layer by layer", P, """
def mha_param_count(d_in, d_out, num_heads, qkv_bias=False):
    if d_out % num_heads != 0:
        raise ValueError(f"d_out={d_out} is not a multiple of num_heads={num_heads}")
    linear = lambda n_in, n_out, bias: n_in * n_out + (n_out if bias else 0)
    return 3 * linear(d_in, d_out, qkv_bias) + linear(d_out, d_out, True)
"""),
]
