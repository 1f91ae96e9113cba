"""Unit 03 — self-attention with trainable weights."""
from . import Alternative, Mistake

UNIT = "03_self_attention"

N = "u03_attention_numpy"
S = "u03_self_attention"
C = "u03_cross_attention"

# The reference modules' bodies, reused by entries that change one line.
SELF_INIT = """
class SelfAttention(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
"""


def self_forward(body: str) -> str:
    """A SelfAttention whose forward is `body` (indented 8 spaces), with q, k, v computed first."""
    return SELF_INIT + """
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
""" + body


CROSS_INIT = """
class CrossAttention(nn.Module):
    def __init__(self, d_q, d_kv, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_q, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_kv, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_kv, d_out, bias=qkv_bias)
"""


def cross_forward(body: str) -> str:
    return CROSS_INIT + """
    def forward(self, x_q, x_kv):
""" + body


MISTAKES = [
    # --- attention_numpy -------------------------------------------------------------------
    Mistake("the article's scale: d_k = number of words, sqrt rounded down", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / int(np.sqrt(x.shape[0])), axis=-1)
    return weights, weights @ V
""", "no scale at all"),
    Mistake("no scale", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T, axis=-1)
    return weights, weights @ V
""", "no scale at all"),
    Mistake("scaled by d_k, not its square root", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / K.shape[1], axis=-1)
    return weights, weights @ V
""", "d_k instead of √d_k"),
    Mistake("scaled by sqrt(d_in)", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / np.sqrt(x.shape[1]), axis=-1)
    return weights, weights @ V
""", "the width of the inputs"),
    Mistake("scaled by sqrt(number of tokens)", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / np.sqrt(len(x)), axis=-1)
    return weights, weights @ V
""", "the number of tokens"),
    Mistake("scaled by sqrt(d_v)", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / np.sqrt(V.shape[1]), axis=-1)
    return weights, weights @ V
""", "the width of the values"),
    Mistake("sqrt(d_k) rounded to the nearest integer", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / round(np.sqrt(K.shape[1])), axis=-1)
    return weights, weights @ V
""", "rounded to a whole number"),
    Mistake("multiplied by sqrt(d_k)", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T * np.sqrt(K.shape[1]), axis=-1)
    return weights, weights @ V
""", "as a factor instead of a divisor"),
    Mistake("scipy softmax without axis", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]))
    return weights, weights @ V
""", "whole matrix"),
    Mistake("softmax over axis 0", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]), axis=0)
    return weights, weights @ V
""", "wrong dimension"),
    Mistake("keys @ queries.T", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(K @ Q.T / np.sqrt(K.shape[1]), axis=-1)
    return weights, weights @ V
""", "keys @ queries.T"),
    Mistake("mixes x instead of the values", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K = x @ w_query, x @ w_key
    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]), axis=-1)
    return weights, weights @ x
""", "mixes the inputs x"),
    Mistake("scaled after the softmax", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T, axis=-1) / np.sqrt(K.shape[1])
    return weights, weights @ V
""", "after the softmax"),
    Mistake("returns (output, weights)", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]), axis=-1)
    return weights @ V, weights
""", "the order is (weights, output)"),
    Mistake("returns torch tensors", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = (torch.from_numpy(x @ w).double() for w in (w_query, w_key, w_value))
    weights = torch.softmax(Q @ K.T / K.shape[1] ** 0.5, dim=-1)
    return weights, weights @ V
""", "expected a NumPy array"),
    Mistake("hand-written softmax without subtracting the maximum", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    e = np.exp(Q @ K.T / np.sqrt(K.shape[1]))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights, weights @ V
""", "contains NaN"),

    Mistake("the weights used transposed (x @ w.T): NumPy's matmul raises", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query.T, x @ w_key.T, x @ w_value.T
    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]), axis=-1)
    return weights, weights @ V
""", "the shapes of a matrix product do not fit"),
    Mistake("the weights used transposed (w @ x): fits the worked example, raises elsewhere", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = w_query @ x, w_key @ x, w_value @ x
    weights = softmax(Q @ K.T / np.sqrt(K.shape[-1]), axis=-1)
    return weights, weights @ V
""", "the weights are used transposed"),
    Mistake("the keys not transposed (Q @ K): fits the worked example, raises elsewhere", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K / np.sqrt(K.shape[1]), axis=-1)
    return weights, weights @ V
""", "the keys are not transposed"),
    # --- SelfAttention ---------------------------------------------------------------------
    Mistake("keys made with the query projection", S, SELF_INIT + """
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_query(x), self.W_value(x)
        w = torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1)
        return w @ v
""", "the keys were made with W_query"),
    Mistake("no scale", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
"""), "no scale at all"),
    Mistake("scaled by d_out, not its square root", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1], dim=-1) @ v
"""), "d_out instead of √d_out"),
    Mistake("scaled by sqrt(d_in)", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1) / x.shape[-1] ** 0.5, dim=-1) @ v
"""), "the width of the inputs"),
    Mistake("scaled by sqrt(number of tokens)", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1) / x.shape[-2] ** 0.5, dim=-1) @ v
"""), "the number of tokens"),
    Mistake("softmax over dim 0", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=0) @ v
"""), "wrong dimension"),
    Mistake("softmax over dim 1 (right only without a batch)", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=1) @ v
"""), "wrong dimension"),
    Mistake("softmax over dim 2 (fails without a batch)", S, self_forward("""
        return torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, dim=2) @ v
"""), "count axes from the end"),
    Mistake(".T on a batched tensor", S, self_forward("""
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v
"""), "count axes from the end"),
    Mistake("B, T, d = x.shape (fails without a batch)", S, self_forward("""
        B, T, d = x.shape
        return torch.softmax(torch.bmm(q, k.transpose(1, 2)) / k.shape[-1] ** 0.5, dim=-1) @ v
"""), "count axes from the end"),
    Mistake("keys @ queries^T", S, self_forward("""
        return torch.softmax(k @ q.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
"""), "keys @ queries^T"),
    Mistake("mixes x instead of the values", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ x
"""), "mixes the inputs x"),
    Mistake("scaled after the softmax", S, self_forward("""
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) / k.shape[-1] ** 0.5 @ v
"""), "after the softmax"),
    Mistake("returns (context, weights)", S, self_forward("""
        w = torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1)
        return w @ v, w
"""), "expected a tensor"),
    Mistake("qkv_bias ignored: never a bias", S, """
class SelfAttention(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
""", "missing: W_key.bias"),
    Mistake("qkv_bias ignored: always a bias (nn.Linear's default)", S, """
class SelfAttention(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out)
        self.W_key = nn.Linear(d_in, d_out)
        self.W_value = nn.Linear(d_in, d_out)

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
""", "unexpected: W_key.bias"),
    Mistake("nn.Parameter matrices instead of nn.Linear", S, """
class SelfAttention(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
""", "missing: W_key.weight (3, 4)"),
    Mistake("other attribute names", S, """
class SelfAttention(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
""", "missing: W_key.weight"),

    # --- CrossAttention --------------------------------------------------------------------
    Mistake("queries from x_kv", C, cross_forward("""
        q, k, v = self.W_query(x_kv), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
"""), "your queries come from x_kv"),
    Mistake("x_q and x_kv swapped", C, cross_forward("""
        q, k, v = self.W_query(x_kv), self.W_key(x_q), self.W_value(x_q)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
"""), "swapped the roles"),
    Mistake("keys from x_q", C, cross_forward("""
        q, k, v = self.W_query(x_q), self.W_key(x_q), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
"""), "your keys come from x_q"),
    Mistake("W_key and W_value sized for x_q", C, """
class CrossAttention(nn.Module):
    def __init__(self, d_q, d_kv, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_q, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_q, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_q, d_out, bias=qkv_bias)

    def forward(self, x_q, x_kv):
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
""", "wrong shape: W_key.weight"),
    Mistake("no scale", C, cross_forward("""
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
"""), "no scale at all"),
    Mistake("scaled by sqrt(d_kv)", C, cross_forward("""
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / x_kv.shape[-1] ** 0.5, dim=-1) @ v
"""), "the width of x_kv"),
    Mistake("scaled by sqrt(number of key tokens)", C, cross_forward("""
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / x_kv.shape[-2] ** 0.5, dim=-1) @ v
"""), "the number of key tokens"),
    Mistake("softmax over the queries (dim -2)", C, cross_forward("""
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-2) @ v
"""), "wrong dimension"),
    Mistake(".T on a batched tensor", C, cross_forward("""
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v
"""), "count axes from the end"),
    Mistake("mixes x_kv instead of the values", C, cross_forward("""
        q, k = self.W_query(x_q), self.W_key(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ x_kv
"""), "mixes the inputs x_kv"),
    Mistake("qkv_bias ignored", C, """
class CrossAttention(nn.Module):
    def __init__(self, d_q, d_kv, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_q, d_out, bias=False)
        self.W_key = nn.Linear(d_kv, d_out, bias=False)
        self.W_value = nn.Linear(d_kv, d_out, bias=False)

    def forward(self, x_q, x_kv):
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
""", "missing: W_key.bias"),
]

ALTERNATIVES = [
    # --- attention_numpy -------------------------------------------------------------------
    Alternative("row-by-row softmax as the article, with the right scale (math.sqrt)", N, """
import math
def attention_numpy(x, w_query, w_key, w_value):
    Q, K, V = np.matmul(x, w_query), np.matmul(x, w_key), np.matmul(x, w_value)
    scores = Q @ K.transpose() / math.sqrt(w_key.shape[1])
    weights = np.zeros_like(scores, dtype=float)
    for i in range(len(scores)):
        weights[i] = softmax(scores[i])
    return weights, weights @ V
"""),
    Alternative("np.einsum and a hand-written stable softmax with ** 0.5", N, """
def attention_numpy(x, w_query, w_key, w_value):
    Q = np.einsum("ti,ik->tk", x, w_query)
    K = np.einsum("ti,ik->tk", x, w_key)
    V = np.einsum("ti,iv->tv", x, w_value)
    s = np.einsum("qk,tk->qt", Q, K) / K.shape[-1] ** 0.5
    e = np.exp(s - s.max(axis=1, keepdims=True))
    weights = e / e.sum(axis=1, keepdims=True)
    return weights, np.einsum("qt,tv->qv", weights, V)
"""),
    Alternative("torch inside, NumPy arrays out, returned as a list", N, """
def attention_numpy(x, w_query, w_key, w_value):
    xt = torch.from_numpy(np.asarray(x, dtype=np.float64))
    q, k, v = (xt @ torch.from_numpy(np.asarray(w, dtype=np.float64)) for w in (w_query, w_key, w_value))
    w = torch.softmax(q @ k.mT / k.shape[-1] ** 0.5, dim=-1)
    return [w.numpy(), (w @ v).numpy()]
"""),
    Alternative("float32 arrays", N, """
def attention_numpy(x, w_query, w_key, w_value):
    x, w_query, w_key, w_value = (np.asarray(a, dtype=np.float32) for a in (x, w_query, w_key, w_value))
    Q, K, V = x @ w_query, x @ w_key, x @ w_value
    weights = softmax(Q @ K.T / np.float32(np.sqrt(K.shape[1])), axis=1)
    return weights, weights @ V
"""),

    # --- SelfAttention ---------------------------------------------------------------------
    Alternative("einsum with ... and math.sqrt", S, "import math\n" + self_forward("""
        s = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(k.size(-1))
        return torch.einsum("...qk,...kd->...qd", torch.softmax(s, dim=-1), v)
""")),
    Alternative("torch.matmul with .mT and F.softmax", S, "import torch.nn.functional as F\n" + self_forward("""
        return torch.matmul(F.softmax(torch.matmul(q, k.mT) * k.shape[-1] ** -0.5, dim=-1), v)
""")),
    Alternative("F.scaled_dot_product_attention inside the module", S,
                "import torch.nn.functional as F\n" + self_forward("""
        return F.scaled_dot_product_attention(q, k, v)
""")),
    Alternative("unsqueeze to a batch, bmm, squeeze back; a scale buffer", S, """
class SelfAttention(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.register_buffer("scale", torch.tensor(float(d_out)).rsqrt())

    def forward(self, x):
        unbatched = x.dim() == 2
        if unbatched:
            x = x.unsqueeze(0)
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        out = torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) * self.scale, dim=2), v)
        return out.squeeze(0) if unbatched else out
"""),
    Alternative("loop over the queries", S, self_forward("""
        rows = []
        for i in range(q.shape[-2]):
            s = (q[..., i:i + 1, :] * k).sum(-1) / k.shape[-1] ** 0.5
            rows.append((torch.softmax(s, dim=-1).unsqueeze(-1) * v).sum(-2))
        return torch.stack(rows, dim=-2)
""")),

    # --- CrossAttention --------------------------------------------------------------------
    Alternative("F.scaled_dot_product_attention", C, "import torch.nn.functional as F\n" + cross_forward("""
        return F.scaled_dot_product_attention(self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv))
""")),
    Alternative("einsum and math.sqrt", C, "import math\n" + cross_forward("""
        q, k, v = self.W_query(x_q), self.W_key(x_kv), self.W_value(x_kv)
        w = torch.softmax(torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1]), dim=-1)
        return torch.einsum("...qk,...kd->...qd", w, v)
""")),
    Alternative("a shared attention helper, keys and values computed first", C, """
def _attend(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / k.shape[-1] ** 0.5, dim=-1) @ v

class CrossAttention(nn.Module):
    def __init__(self, d_q, d_kv, d_out, qkv_bias=False):
        super().__init__()
        self.W_key = nn.Linear(d_kv, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_kv, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_q, d_out, bias=qkv_bias)

    def forward(self, x_q, x_kv):
        k, v = self.W_key(x_kv), self.W_value(x_kv)
        return _attend(self.W_query(x_q), k, v)
"""),
]
