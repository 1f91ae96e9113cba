"""Unit 07 — the transformer block."""
from . import Alternative, Mistake

UNIT = "07_transformer_block"

L = "u07_layer_norm"
G = "u07_gelu"
F = "u07_feed_forward"
B = "u07_transformer_block"

_LN_INIT = """
    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))
"""

_BLOCK_INIT = """
    def __init__(self, emb_dim, num_heads, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.att = MultiHeadAttention(emb_dim, emb_dim, context_length, dropout, num_heads, qkv_bias)
        self.ff = FeedForward(emb_dim)
        self.norm1 = LayerNorm(emb_dim)
        self.norm2 = LayerNorm(emb_dim)
        self.drop_shortcut = nn.Dropout(dropout)
"""


def _ln(forward: str, init: str = _LN_INIT) -> str:
    return "class LayerNorm(nn.Module):" + init + forward


def _block(forward: str, init: str = _BLOCK_INIT) -> str:
    return "class TransformerBlock(nn.Module):" + init + forward


MISTAKES = [
    # --- LayerNorm ------------------------------------------------------------------------
    Mistake("unbiased variance with Tensor.var's default", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift
"""), "unbiased variance"),
    Mistake("unbiased variance with torch.var_mean's default", L, _ln("""
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift
"""), "unbiased variance"),
    Mistake("eps added to the standard deviation", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        std = x.std(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / (std + self.eps) + self.shift
"""), "added eps to the standard deviation"),
    Mistake("no eps", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.scale * (x - mean) / torch.sqrt(var) + self.shift
"""), "did not add eps"),
    Mistake("normalised over the batch dimension", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=0, keepdim=True)
        var = x.var(dim=0, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift
"""), "batch dimension"),
    Mistake("normalised over the time dimension", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-2, keepdim=True)
        var = x.var(dim=-2, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift
"""), "time dimension"),
    Mistake("normalised over the whole tensor", L, _ln("""
    def forward(self, x):
        return self.scale * (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + self.eps) + self.shift
"""), "all the numbers of the input at once"),
    Mistake("parameters named gamma and beta", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta
""", init="""
    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(emb_dim))
        self.beta = nn.Parameter(torch.zeros(emb_dim))
"""), "missing: scale"),
    Mistake("scale and shift as plain tensors, not parameters", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift
""", init="""
    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.scale = torch.ones(emb_dim)
        self.shift = torch.zeros(emb_dim)
"""), "is a plain tensor: make it an nn.Parameter"),
    Mistake("the formula without 1/d (square root of the sum of squared deviations)", L, _ln("""
    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        sigma = torch.sqrt((centred ** 2).sum(dim=-1, keepdim=True))
        return self.scale * centred / sigma + self.shift
"""), "*sum* of squared deviations"),
    Mistake("scale and shift never applied", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps)
"""), "did not apply `scale` and `shift`"),
    Mistake("mean not subtracted", L, _ln("""
    def forward(self, x):
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * x / torch.sqrt(var + self.eps) + self.shift
"""), "did not subtract the mean"),
    Mistake("divided by the variance, no square root", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / (var + self.eps) + self.shift
"""), "divided by the variance"),
    Mistake("scale and shift swapped", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.shift * (x - mean) / torch.sqrt(var + self.eps) + self.scale
"""), "swapped the roles"),
    Mistake("eps argument ignored (1e-5 hard-coded)", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + 1e-5) + self.shift
"""), "ignored the `eps` argument"),
    Mistake("one-pass variance mean(x**2) - mean(x)**2 (loses precision in float32)", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift
"""), "mean(x**2) - mean(x)**2 loses the variance"),
    Mistake("unbiased variance, seen from the transformer block", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift
"""), "fix your LayerNorm first", graded_at=B),
    # --- GELU -----------------------------------------------------------------------------
    Mistake("exact erf GELU, seen from the transformer block", G, """
class GELU(nn.Module):
    def forward(self, x):
        return F.gelu(x)
""", "fix your GELU first", graded_at=B),
    Mistake("exact erf GELU with F.gelu's default", G, """
class GELU(nn.Module):
    def forward(self, x):
        return F.gelu(x)
""", "exact GELU"),
    Mistake("exact erf GELU written by hand", G, """
class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))
""", "exact GELU"),
    Mistake("ReLU", G, """
class GELU(nn.Module):
    def forward(self, x):
        return torch.relu(x)
""", "you used ReLU"),
    Mistake("no 0.044715 x^3 term", G, """
class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * x))
""", "cubic term 0.044715"),
    Mistake("x squared inside the tanh instead of cubed", G, """
class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 2)))
""", "yours squares x"),
    Mistake("2/pi without the square root", G, """
class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(2 / math.pi * (x + 0.044715 * x ** 3)))
""", "should be sqrt(2/pi)"),
    Mistake("sqrt(2*pi) instead of sqrt(2/pi)", G, """
class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x ** 3)))
""", "should be sqrt(2/pi)"),
    Mistake("sigmoid approximation", G, """
class GELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)
""", "sigmoid approximation"),
    Mistake("factor 0.5 missing", G, """
class GELU(nn.Module):
    def forward(self, x):
        return x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
""", "factor 0.5"),
    Mistake("tanh written with exp (overflows for large inputs)", G, """
class GELU(nn.Module):
    def forward(self, x):
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        tanh = (torch.exp(2 * u) - 1) / (torch.exp(2 * u) + 1)
        return 0.5 * x * (1 + tanh)
""", "large inputs"),
    # --- FeedForward ----------------------------------------------------------------------
    Mistake("GELU after the second linear layer too", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), GELU(), nn.Linear(4 * emb_dim, emb_dim), GELU())

    def forward(self, x):
        return self.layers(x)
""", "after the second linear layer too"),
    Mistake("a fourth item, a Dropout, in the feed-forward network", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), GELU(), nn.Linear(4 * emb_dim, emb_dim),
                                    nn.Dropout(0.1))

    def forward(self, x):
        return self.layers(x)
""", "your FeedForward holds a Dropout"),
    Mistake("GELU after the second linear layer instead of between the two", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), GELU(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers[1](self.layers[2](self.layers[0](x)))
""", "instead of between the two"),
    Mistake("ReLU in the feed-forward network", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), nn.ReLU(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)
""", "you used ReLU"),
    Mistake("exact GELU in the feed-forward network (nn.GELU's default)", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), nn.GELU(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)
""", "exact GELU"),
    Mistake("no 4x expansion", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, emb_dim), GELU(), nn.Linear(emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)
""", "wrong shape: layers.0.bias"),
    Mistake("no activation (identity in the middle)", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), nn.Identity(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)
""", "no activation"),
    Mistake("two linear layers only (the activation left out of layers)", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)
""", "missing: layers.2.bias"),
    # --- TransformerBlock -----------------------------------------------------------------
    Mistake("post-norm block", B, _block("""
    def forward(self, x):
        x = self.norm1(x + self.drop_shortcut(self.att(x)))
        x = self.norm2(x + self.drop_shortcut(self.ff(x)))
        return x
"""), "post-norm"),
    Mistake("residual added before the norm, with temporaries", B, _block("""
    def forward(self, x):
        shortcut = x
        x = self.att(x)
        x = self.drop_shortcut(x)
        x = self.norm1(x + shortcut)
        shortcut = x
        x = self.ff(x)
        x = self.drop_shortcut(x)
        x = self.norm2(x + shortcut)
        return x
"""), "post-norm"),
    Mistake("no residual at all", B, _block("""
    def forward(self, x):
        x = self.drop_shortcut(self.att(self.norm1(x)))
        x = self.drop_shortcut(self.ff(self.norm2(x)))
        return x
"""), "neither sub-layer has a shortcut"),
    Mistake("no residual around the feed-forward network", B, _block("""
    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return self.drop_shortcut(self.ff(self.norm2(x)))
"""), "feed-forward sub-layer has no shortcut"),
    Mistake("x overwritten with its normalised version before the add", B, _block("""
    def forward(self, x):
        x = self.norm1(x)
        x = x + self.drop_shortcut(self.att(x))
        x = self.norm2(x)
        x = x + self.drop_shortcut(self.ff(x))
        return x
"""), "shortcut carries the normalised x"),
    Mistake("one shared LayerNorm for both sub-layers (norm1 twice)", B, _block("""
    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        x = x + self.drop_shortcut(self.ff(self.norm1(x)))
        return x
"""), "norm1 before both"),
    Mistake("one LayerNorm module named norm instead of norm1 and norm2", B, _block("""
    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm(x)))
        x = x + self.drop_shortcut(self.ff(self.norm(x)))
        return x
""", init="""
    def __init__(self, emb_dim, num_heads, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.att = MultiHeadAttention(emb_dim, emb_dim, context_length, dropout, num_heads, qkv_bias)
        self.ff = FeedForward(emb_dim)
        self.norm = LayerNorm(emb_dim)
        self.drop_shortcut = nn.Dropout(dropout)
"""), "missing: norm1.scale"),
    Mistake("norm1 and norm2 swapped", B, _block("""
    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm2(x)))
        x = x + self.drop_shortcut(self.ff(self.norm1(x)))
        return x
"""), "swapped"),
    Mistake("feed-forward before attention", B, _block("""
    def forward(self, x):
        x = x + self.drop_shortcut(self.ff(self.norm2(x)))
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x
"""), "comes before the attention"),
    Mistake("dropout on the residual stream instead of the branch", B, _block("""
    def forward(self, x):
        x = self.drop_shortcut(x + self.att(self.norm1(x)))
        x = self.drop_shortcut(x + self.ff(self.norm2(x)))
        return x
"""), "applied drop_shortcut to the sum"),
    Mistake("drop_shortcut defined but never used", B, _block("""
    def forward(self, x):
        x = x + self.att(self.norm1(x))
        x = x + self.ff(self.norm2(x))
        return x
"""), "drop_shortcut is never applied"),
    Mistake("functional dropout that stays on in eval()", B, _block("""
    def forward(self, x):
        x = x + F.dropout(self.att(self.norm1(x)), self.drop_shortcut.p)
        x = x + F.dropout(self.ff(self.norm2(x)), self.drop_shortcut.p)
        return x
"""), "dropout must do nothing"),
    Mistake("drop_shortcut as F.dropout(training=True), active in eval() mode too", B, _block("""
    def forward(self, x):
        p = self.drop_shortcut.p
        x = x + F.dropout(self.att(self.norm1(x)), p, training=True)
        x = x + F.dropout(self.ff(self.norm2(x)), p, training=True)
        return x
"""), "dropout is active in eval() mode"),
    Mistake("drop_shortcut applied after the attention only", B, _block("""
    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.ff(self.norm2(x))
"""), "drop_shortcut is applied in one sub-layer only"),
    Mistake("drop_shortcut applied to each sub-layer's normalised input", B, _block("""
    def forward(self, x):
        x = x + self.att(self.drop_shortcut(self.norm1(x)))
        return x + self.ff(self.drop_shortcut(self.norm2(x)))
"""), "applied drop_shortcut to the sub-layer's input"),
    Mistake("the attention built without dropout", B, _block("""
    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))
""", init=_BLOCK_INIT.replace("context_length, dropout, num_heads", "context_length, 0.0, num_heads")),
        "the attention inside the block has no dropout"),
]

ALTERNATIVES = [
    # --- LayerNorm ------------------------------------------------------------------------
    Alternative("hand-written mean and mean of squared deviations", L, _ln("""
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.scale * ((x - mean) / torch.sqrt(var + self.eps)) + self.shift
""")),
    Alternative("torch.var_mean with correction=0 and rsqrt", L, _ln("""
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.scale + self.shift
""")),
    Alternative("x.var(unbiased=False) with sum / shape and register_parameter", L, """
class LayerNorm(nn.Module):
    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.register_parameter("shift", nn.Parameter(torch.zeros(emb_dim)))
        self.register_parameter("scale", nn.Parameter(torch.ones(emb_dim)))

    def forward(self, x):
        d = x.shape[-1]
        mean = x.sum(dim=-1, keepdim=True) / d
        centred = x - mean
        var = centred.var(dim=-1, keepdim=True, unbiased=False)
        return torch.addcmul(self.shift, self.scale, centred / (var + self.eps).sqrt())
"""),
    # --- GELU -----------------------------------------------------------------------------
    Alternative("F.gelu with approximate='tanh'", G, """
class GELU(nn.Module):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")
"""),
    Alternative("nn.GELU(approximate='tanh') as a sub-module", G, """
class GELU(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.act(x)
"""),
    Alternative("sigmoid form of the same tanh formula, torch.pow and a tensor constant", G, """
class GELU(nn.Module):
    def forward(self, x):
        c = torch.sqrt(torch.tensor(2.0) / torch.pi)
        return x * torch.sigmoid(2 * c * (x + 0.044715 * torch.pow(x, 3)))
"""),
    # --- FeedForward ----------------------------------------------------------------------
    Alternative("nn.GELU(approximate='tanh') inside layers", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        hidden = 4 * emb_dim
        self.layers = nn.Sequential(nn.Linear(emb_dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, emb_dim))

    def forward(self, x):
        return self.layers(x)
"""),
    Alternative("layers applied one by one in forward", F, """
class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(emb_dim, 4 * emb_dim), GELU(), nn.Linear(4 * emb_dim, emb_dim)])

    def forward(self, x):
        widen, act, narrow = self.layers
        return narrow(act(widen(x)))
"""),
    # --- TransformerBlock -----------------------------------------------------------------
    Alternative("block written with explicit temporaries", B, _block("""
    def forward(self, x):
        shortcut = x
        x = self.norm1(x)
        x = self.att(x)
        x = self.drop_shortcut(x)
        x = x + shortcut
        shortcut = x
        x = self.norm2(x)
        x = self.ff(x)
        x = self.drop_shortcut(x)
        x = x + shortcut
        return x
""")),
    Alternative("keyword construction, modules defined in another order, functional dropout with self.training", B, """
class TransformerBlock(nn.Module):
    def __init__(self, emb_dim, num_heads, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.norm1 = LayerNorm(emb_dim)
        self.norm2 = LayerNorm(emb_dim)
        self.drop_shortcut = nn.Dropout(p=dropout)
        self.ff = FeedForward(emb_dim=emb_dim)
        self.att = MultiHeadAttention(d_in=emb_dim, d_out=emb_dim, context_length=context_length,
                                      dropout=dropout, num_heads=num_heads, qkv_bias=qkv_bias)

    def forward(self, x):
        p = self.drop_shortcut.p
        attended = F.dropout(self.att(self.norm1(x)), p, training=self.training)
        x = torch.add(x, attended)
        return x + F.dropout(self.ff(self.norm2(x)), p, training=self.training)
"""),
    Alternative("F.dropout with the mode as a positional argument; the feed-forward output dropped out one sequence "
                "at a time, the last first (other calls, other random draws)", B, _block("""
    def forward(self, x):
        x = x + F.dropout(self.att(self.norm1(x)), self.drop_shortcut.p, self.training)
        rows = self.ff(self.norm2(x)).split(1)
        dropped = [self.drop_shortcut(row) for row in reversed(rows)]
        return x + torch.cat(dropped[::-1])
""")),
]
