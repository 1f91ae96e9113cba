"""Unit 05 — causal masking."""
from . import Alternative, Mistake

UNIT = "05_causal_masking"

M = "u05_causal_mask"
W = "u05_causal_attention_weights"
R = "u05_renormalize_after_mask"
C = "u05_causal_attention"
IC = "u05_is_causal"
P = "u05_padding_mask"
Q = "u05_is_permutation_equivariant"
RO = "u05_rope"

# The reference rope with one part changed.
_ROPE = """
def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    omega = BASE ** (-torch.arange(0, d, 2, dtype=torch.float64) / EXPONENT)
    angle = POSITIONS.double()[:, None] * omega
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    first, second = FIRST, SECOND
    turned = (first * cos - second * sin, first * sin + second * cos)
    return BACK
"""


_TURNED = "first * cos - second * sin, first * sin + second * cos"


def _rope(base="base", exponent="d", positions="positions", first="x[..., 0::2]", second="x[..., 1::2]",
          back="torch.stack(turned, dim=-1).flatten(-2)", sign=""):
    code = (_ROPE.replace("BASE", base).replace("EXPONENT", exponent).replace("POSITIONS", positions)
            .replace("FIRST", first).replace("SECOND", second).replace("BACK", back))
    return code.replace(_TURNED, "first * cos + second * sin, -first * sin + second * cos") if sign else code

# A CausalAttention written from parts, with one line changed by each mistake below.
_CA = """
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        {mask_line}

    def forward(self, x):
        b, num_tokens, _ = x.shape
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = q @ k.transpose(1, 2){scale}
        {drop_scores}scores = scores.masked_fill({mask_use}, {fill})
        weights = {weights}
        out = weights @ v
        return {out}
"""


def _ca(mask_line="self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1))",
        mask_use="self.mask.bool()[:num_tokens, :num_tokens]", fill='float("-inf")',
        scale=" / k.shape[-1] ** 0.5", drop_scores="", weights="self.dropout(torch.softmax(scores, dim=-1))",
        out="out"):
    return _CA.format(mask_line=mask_line, mask_use=mask_use, fill=fill, scale=scale, drop_scores=drop_scores,
                      weights=weights, out=out)


# An is_causal written from parts: the correct probe, with one part changed by each mistake below.
_IC = """
def is_causal(module, num_tokens, d_in, trials=3):
    was_training = module.training
    {to_eval}
    verdict = True
    with torch.no_grad():
        for _ in range(trials):
            x = torch.randn(2, num_tokens, d_in)
            base = module(x)
            for t in {positions}:
                changed = x.clone()
                changed[:, {changed}] = torch.randn_like(changed[:, {changed}])
                if not {compare}:
                    verdict = False
    {restore}
    return verdict
"""


def _ic(to_eval="module.eval()", positions="range(num_tokens - 1)", changed="t + 1:",
        compare="torch.allclose(module(changed)[:, :t + 1], base[:, :t + 1], rtol=1e-5, atol=1e-5)",
        restore="module.train(was_training)"):
    return _IC.format(to_eval=to_eval, positions=positions, changed=changed, compare=compare, restore=restore)


# An is_permutation_equivariant written from parts: the correct probe, with one part changed by
# each mistake below.
_PE = """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    {before}
    for _ in range(trials):
        x = torch.randn(3, num_tokens, d)
        perm = {perm}
        {guard}
        if not {compare}:
            return False
    return True
"""
_GUARD = """while num_tokens > 1 and torch.equal(perm, torch.arange(num_tokens)):
            perm = torch.randperm(num_tokens)"""


def _pe(before="pass", perm="torch.randperm(num_tokens)", guard=_GUARD,
        compare="torch.allclose(fn(x[:, perm]), fn(x)[:, perm], rtol=1e-5, atol=1e-5)"):
    return _PE.format(before=before, perm=perm, guard=guard or "pass", compare=compare)


MISTAKES = [
    # --- causal_mask
    Mistake("mask inverted (tril as blocked)", M, """
def causal_mask(num_tokens, device=None):
    return torch.tril(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device))
""", "your mask is inverted"),
    Mistake("diagonal masked (triu with diagonal=0)", M, """
def causal_mask(num_tokens, device=None):
    return torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device))
""", "also blocked the diagonal"),
    Mistake("past masked (tril with diagonal=-1)", M, """
def causal_mask(num_tokens, device=None):
    return torch.tril(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device), diagonal=-1)
""", "blocked the past"),
    Mistake("float mask instead of bool", M, """
def causal_mask(num_tokens, device=None):
    return torch.triu(torch.ones(num_tokens, num_tokens, device=device), diagonal=1)
""", "return a boolean tensor"),
    Mistake("causal_mask that ignores device", M, """
def causal_mask(num_tokens, device=None):
    return torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
""", "ignores `device`"),
    # --- causal_attention_weights
    Mistake("softmax without any mask", W, """
def causal_attention_weights(scores):
    return torch.softmax(scores, dim=-1)
""", "without the causal mask"),
    Mistake("mask inverted (tril as blocked)", W, """
def causal_attention_weights(scores):
    T = scores.shape[-1]
    return torch.softmax(scores.masked_fill(torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf")), dim=-1)
""", "your mask is inverted"),
    Mistake("diagonal masked (triu with diagonal=0)", W, """
def causal_attention_weights(scores):
    T = scores.shape[-1]
    return torch.softmax(scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool)), float("-inf")), dim=-1)
""", "also blocked the diagonal"),
    Mistake("0 instead of -inf (masked_fill(mask, 0))", W, """
def causal_attention_weights(scores):
    return torch.softmax(scores.masked_fill(causal_mask(scores.shape[-1]), 0), dim=-1)
""", "filled the blocked scores with 0"),
    Mistake("fill value -1e4, too small for large scores", W, """
def causal_attention_weights(scores):
    return torch.softmax(scores.masked_fill(causal_mask(scores.shape[-1]), -1e4), dim=-1)
""", "not negative enough"),
    Mistake("masking after the softmax without renormalising", W, """
def causal_attention_weights(scores):
    return torch.softmax(scores, dim=-1).masked_fill(causal_mask(scores.shape[-1]), 0.0)
""", "without renormalising"),
    Mistake("softmax over the wrong dimension", W, """
def causal_attention_weights(scores):
    return torch.softmax(scores.masked_fill(causal_mask(scores.shape[-1]), float("-inf")), dim=-2)
""", "wrong dimension"),
    Mistake("a softmax written by hand without subtracting the maximum", W, """
def causal_attention_weights(scores):
    e = torch.exp(scores.masked_fill(causal_mask(scores.shape[-1]), float("-inf")))
    return e / e.sum(dim=-1, keepdim=True)
""", "takes exp of the scores as they are"),
    Mistake("scores scaled a second time", W, """
def causal_attention_weights(scores):
    T = scores.shape[-1]
    return torch.softmax((scores / T ** 0.5).masked_fill(causal_mask(T), float("-inf")), dim=-1)
""", "scaled the scores again"),
    # --- renormalize_after_mask
    Mistake("masked but not renormalised", R, """
def renormalize_after_mask(weights):
    return weights.masked_fill(causal_mask(weights.shape[-1]), 0.0)
""", "did not renormalise"),
    Mistake("softmax applied again instead of dividing by the row sum", R, """
def renormalize_after_mask(weights):
    return torch.softmax(weights.masked_fill(causal_mask(weights.shape[-1]), float("-inf")), dim=-1)
""", "applied a softmax again"),
    Mistake("renormalised by the column sums", R, """
def renormalize_after_mask(weights):
    kept = weights.masked_fill(causal_mask(weights.shape[-1]), 0.0)
    return kept / kept.sum(dim=-2, keepdim=True)
""", "column sums"),
    Mistake("row sums without keepdim=True", R, """
def renormalize_after_mask(weights):
    kept = weights.masked_fill(causal_mask(weights.shape[-1]), 0.0)
    return kept / kept.sum(dim=-1)
""", "without keepdim=True"),
    Mistake("renormalised without masking", R, """
def renormalize_after_mask(weights):
    return weights / weights.sum(dim=-1, keepdim=True)
""", "returned the weights unchanged"),
    Mistake("mask inverted (tril zeroed)", R, """
def renormalize_after_mask(weights):
    kept = torch.triu(weights, diagonal=1)
    return kept / kept.sum(dim=-1, keepdim=True)
""", "your mask is inverted"),
    # --- CausalAttention
    Mistake("no mask at all", C, _ca(mask_use="torch.zeros_like(scores, dtype=torch.bool)"),
            "did not mask the future"),
    Mistake("mask inverted (tril as blocked)", C,
            _ca(mask_line="self.register_buffer('mask', torch.tril(torch.ones(context_length, context_length)))"),
            "your mask is inverted"),
    Mistake("diagonal masked (triu with diagonal=0)", C,
            _ca(mask_line="self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length)))"),
            "also blocked the diagonal"),
    Mistake("0 instead of -inf (masked_fill(mask, 0))", C, _ca(fill="0.0"), "filled the blocked scores with 0"),
    Mistake("mask not sliced to the batch length", C, _ca(mask_use="self.mask.bool()"),
            "slice the mask to the number of tokens"),
    Mistake("dropout applied before softmax", C,
            _ca(drop_scores="scores = self.dropout(scores)\n        ", weights="torch.softmax(scores, dim=-1)"),
            "before the softmax"),
    Mistake("dropout applied to the masked scores", C,
            _ca(weights="torch.softmax(self.dropout(scores), dim=-1)"), "before the softmax"),
    Mistake("dropout on the output instead of the weights", C,
            _ca(weights="torch.softmax(scores, dim=-1)", out="self.dropout(out)"), "dropout to the output"),
    Mistake("dropout on the values", C, _ca(weights="torch.softmax(scores, dim=-1)").replace(
        "out = weights @ v", "out = weights @ self.dropout(v)"), "dropout to the values"),
    Mistake("softmax over the queries (dim=1)", C, _ca(weights="self.dropout(torch.softmax(scores, dim=1))"),
            "softmax over the queries"),
    Mistake("dropout never applied", C, _ca(weights="torch.softmax(scores, dim=-1)"), "no dropout was applied"),
    Mistake("F.dropout still active in eval()", C,
            _ca(weights="F.dropout(torch.softmax(scores, dim=-1), self.dropout.p)"), "still active in eval()"),
    Mistake("mask registered as nn.Parameter", C,
            _ca(mask_line="self.mask = nn.Parameter(torch.triu(torch.ones(context_length, context_length), "
                          "diagonal=1), requires_grad=False)"), "register_buffer"),
    Mistake("scores not scaled", C, _ca(scale=""), "did not scale"),
    Mistake("scaled by sqrt(d_in)", C, _ca(scale=" / x.shape[-1] ** 0.5"), "square root of d_in"),
    Mistake("mask applied after the softmax without renormalising", C,
            _ca(fill="0.0", weights="self.dropout(torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, "
                                    "dim=-1).masked_fill(self.mask.bool()[:num_tokens, :num_tokens], 0.0))"),
            "without renormalising"),
    # --- is_causal
    Mistake("is_causal that never fails (always True)", IC, """
def is_causal(module, num_tokens, d_in, trials=3):
    return True
""", "no mask at all"),
    Mistake("is_causal that always fails", IC, """
def is_causal(module, num_tokens, d_in, trials=3):
    return False
""", "said False for a causal attention module"),
    Mistake("is_causal that compares all outputs, not only the earlier ones", IC,
            _ic(compare="torch.allclose(module(changed), base, rtol=1e-5, atol=1e-5)"),
            "said False for a causal attention module"),
    Mistake("is_causal with exact equality", IC,
            _ic(compare="torch.equal(module(changed)[:, :t + 1], base[:, :t + 1])"),
            "causal up to float32 rounding"),
    Mistake("is_causal with a loose tolerance (atol=1e-2)", IC,
            _ic(compare="torch.allclose(module(changed)[:, :t + 1], base[:, :t + 1], atol=1e-2)"), "small leak"),
    Mistake("is_causal with a single split in the middle", IC, _ic(positions="[num_tokens // 2 - 1]"),
            "leak from the last token"),
    Mistake("is_causal that only changes the last token", IC, _ic(changed="-1:"), "leak from the second token"),
    Mistake("is_causal that changes the current token too", IC, _ic(changed="t:"), "sees its own, changed token"),
    Mistake("is_causal that compares the output of the first changed token too", IC,
            _ic(compare="torch.allclose(module(changed)[:, :t + 2], base[:, :t + 2], rtol=1e-5, atol=1e-5)"),
            "sees its own, changed token"),
    Mistake("is_causal whose loop never runs", IC, _ic(positions="range(num_tokens - 1, 0)"),
            "Does its loop over t run"),
    Mistake("is_causal that changes x itself (no clone)", IC, _ic().replace("changed = x.clone()", "changed = x"),
            "x.clone()"),
    Mistake("is_causal without eval() (dropout on)", IC, _ic(to_eval="pass"), "probe it in eval() mode"),
    Mistake("is_causal in train mode not restored", IC, _ic(restore="pass"), "left the module in eval() mode"),
    Mistake("is_causal that always ends with module.train()", IC, _ic(restore="module.train()"),
            "switched a module that was in eval() mode to train()"),
    # --- is_permutation_equivariant
    Mistake("is_permutation_equivariant that never fails (always True)", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    return True
""", "said True for attention with a position vector added"),
    Mistake("is_permutation_equivariant that always fails", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    return False
""", "said False for self-attention without positions"),
    Mistake("invariance instead of equivariance (output not permuted)", Q,
            _pe(compare="torch.allclose(fn(x[:, perm]), fn(x), rtol=1e-5, atol=1e-5)"),
            "said False for self-attention without positions"),
    Mistake("output permuted by the inverse permutation", Q,
            _pe(compare="torch.allclose(fn(x[:, perm]), fn(x)[:, perm.argsort()], rtol=1e-5, atol=1e-5)"),
            "said False for self-attention without positions"),
    Mistake("features permuted instead of tokens", Q,
            _pe(perm="torch.randperm(d)",
                compare="torch.allclose(fn(x[..., perm]), fn(x)[..., perm], rtol=1e-5, atol=1e-5)"),
            "said False for self-attention without positions"),
    Mistake("exact equality", Q, _pe(compare="torch.equal(fn(x[:, perm]), fn(x)[:, perm])"),
            "equivariant up to float32 rounding"),
    Mistake("a loose tolerance (atol=1e-2)", Q,
            _pe(compare="torch.allclose(fn(x[:, perm]), fn(x)[:, perm], atol=1e-2)"),
            "missed a small dependence on the order"),
    Mistake("only the sums over the tokens compared", Q,
            _pe(compare="torch.allclose(fn(x[:, perm]).sum(1), fn(x).sum(1), rtol=1e-5, atol=1e-5)"),
            "missed a small dependence on the order"),
    Mistake("always the reversed order", Q, _pe(perm="torch.arange(num_tokens - 1, -1, -1)"),
            "draw a fresh random permutation"),
    Mistake("always a shift by one place", Q, _pe(perm="torch.roll(torch.arange(num_tokens), 1)"),
            "draw a fresh random permutation"),
    Mistake("fn switched to eval() (a plain function has no eval)", Q, _pe(before="fn.eval()"),
            "has no attribute 'eval'"),
    Mistake("always the identity permutation", Q, _pe(perm="torch.arange(num_tokens)", guard=""),
            "the identity permutation proves nothing"),
    Mistake("a random permutation that may be the identity", Q, _pe(guard=""),
            "draws the identity half the time"),
    Mistake("a single trial, whatever trials asks", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    x = torch.randn(2, num_tokens, d)
    perm = torch.randperm(num_tokens)
    while num_tokens > 1 and torch.equal(perm, torch.arange(num_tokens)):
        perm = torch.randperm(num_tokens)
    return bool(torch.allclose(fn(x[:, perm]), fn(x)[:, perm], atol=1e-5))
""", "run a single trial"),
    Mistake("one permutation drawn for all the trials", Q, _pe(before="""perm = torch.randperm(num_tokens)
    while num_tokens > 1 and torch.equal(perm, torch.arange(num_tokens)):
        perm = torch.randperm(num_tokens)""", perm="perm", guard=""), "draw one permutation for all the trials"),
    Mistake("the verdict of the last trial only", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    same = True
    for _ in range(trials):
        x = torch.randn(2, num_tokens, d)
        perm = torch.randperm(num_tokens)
        while num_tokens > 1 and torch.equal(perm, torch.arange(num_tokens)):
            perm = torch.randperm(num_tokens)
        same = torch.allclose(fn(x[:, perm]), fn(x)[:, perm], rtol=1e-5, atol=1e-5)
    return same
""", "keep only the verdict of the last trial"),
    Mistake("input without a batch dimension", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    for _ in range(trials):
        x = torch.randn(num_tokens, d)
        perm = torch.randperm(num_tokens)
        while num_tokens > 1 and torch.equal(perm, torch.arange(num_tokens)):
            perm = torch.randperm(num_tokens)
        if not torch.allclose(fn(x[perm]), fn(x)[perm], rtol=1e-5, atol=1e-5):
            return False
    return True
""", "not a batch of shape (B, num_tokens, d)"),
    # --- padding_mask
    Mistake("padding mask inverted", P, """
def padding_mask(lengths, num_tokens):
    return torch.arange(num_tokens)[None, :] < torch.as_tensor(lengths)[:, None]
""", "your mask is inverted"),
    Mistake("padding mask off by one", P, """
def padding_mask(lengths, num_tokens):
    return torch.arange(num_tokens)[None, :] > torch.as_tensor(lengths)[:, None]
""", "off by one"),
    Mistake("padding mask as 0/1 floats", P, """
def padding_mask(lengths, num_tokens):
    return (torch.arange(num_tokens)[None, :] >= torch.as_tensor(lengths)[:, None]).float()
""", "return a boolean tensor"),
    Mistake("padding mask of shape (num_tokens, B)", P, """
def padding_mask(lengths, num_tokens):
    return torch.arange(num_tokens)[:, None] >= torch.as_tensor(lengths)[None, :]
""", "one row per position"),
    Mistake("padding on the left", P, """
def padding_mask(lengths, num_tokens):
    lengths = torch.as_tensor(lengths)
    return torch.arange(num_tokens)[None, :] < (num_tokens - lengths)[:, None]
""", "padded on the left"),
    # --- is_permutation_equivariant
    Mistake("a detector that returns a tensor", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    same = torch.tensor(True)
    with torch.no_grad():
        for _ in range(trials):
            x = torch.randn(2, num_tokens, d)
            perm = torch.randperm(num_tokens)
            same = same & torch.isclose(fn(x[:, perm]), fn(x)[:, perm], rtol=1e-5, atol=1e-5).all()
    return same
""", "not a Python bool"),
    # --- rope
    Mistake("rotated by arange(T) instead of positions", RO, _rope(positions="torch.arange(x.shape[-2])"),
            "not by positions[t]"),
    Mistake("turned clockwise", RO, _rope(sign="-"), "clockwise"),
    Mistake("only the first entry of each pair turned", RO,
            _rope().replace(_TURNED, "first * cos - second * sin, second"), "only one entry of each pair"),
    Mistake("only the second entry of each pair turned", RO,
            _rope().replace(_TURNED, "first, first * sin + second * cos"), "only one entry of each pair"),
    Mistake("both entries scaled by cos, no sin terms", RO, _rope().replace(_TURNED, "first * cos, second * cos"),
            "left out the sin θ terms"),
    Mistake("pairs (i, i + d/2) instead of neighbours", RO,
            _rope(first="x[..., :d // 2]", second="x[..., d // 2:]", back="torch.cat(turned, dim=-1)"),
            "entry i with entry i + d/2"),
    Mistake("speeds base ** (-i / d)", RO, _rope(exponent="(2 * d)"), "base ** (-2i / d)"),
    Mistake("turned pairs returned as two halves", RO, _rope(back="torch.cat(turned, dim=-1)"),
            "all first entries, then all second entries"),
    Mistake("base ignored", RO, _rope(base="10000.0"), "instead of the base"),
    Mistake("speeds that grow with the pair (base ** (+2i / d))", RO, _rope(base="1 / base"),
            "your speeds grow with the pair"),
    Mistake("float32 tables on a half-precision x", RO,
            _rope().replace("torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)",
                            "torch.cos(angle).float(), torch.sin(angle).float()"),
            "cos and sin tables of float32 promote"),
    Mistake("float64 tables never converted", RO,
            _rope().replace("torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)",
                            "torch.cos(angle), torch.sin(angle)"),
            "cos and sin tables of float64 promote"),
    Mistake("x turned into float32", RO,
            _rope().replace("    d = x.shape[-1]", "    x = x.float()\n    d = x.shape[-1]"),
            "something turned x or the result into float32"),
    Mistake("the result made with torch.zeros (float32)", RO, """
def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    out = torch.zeros(x.shape)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
""", "a tensor made with torch.zeros or torch.empty"),
]

ALTERNATIVES = [
    Alternative("~tril", M, """
def causal_mask(num_tokens, device=None):
    return ~torch.tril(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device))
"""),
    Alternative("arange comparison", M, """
def causal_mask(num_tokens, device=None):
    i = torch.arange(num_tokens, device=device)
    return i.unsqueeze(0) > i.unsqueeze(1)
"""),
    Alternative("torch.where with -inf", W, """
def causal_attention_weights(scores):
    T = scores.shape[-1]
    keep = torch.tril(torch.ones(T, T, dtype=torch.bool, device=scores.device))
    return torch.softmax(torch.where(keep, scores, torch.tensor(float("-inf"))), dim=-1)
"""),
    Alternative("fill with -1e9", W, """
def causal_attention_weights(scores):
    return torch.softmax(scores.masked_fill(causal_mask(scores.shape[-1], scores.device), -1e9), dim=-1)
"""),
    Alternative("fill with torch.finfo(dtype).min", W, """
def causal_attention_weights(scores):
    mask = causal_mask(scores.shape[-1], scores.device)
    return torch.softmax(scores.masked_fill(mask, torch.finfo(scores.dtype).min), dim=-1)
"""),
    Alternative("additive float mask", W, """
def causal_attention_weights(scores):
    T = scores.shape[-1]
    additive = torch.full((T, T), float("-inf")).triu(1)
    return F.softmax(scores + additive, dim=-1)
"""),
    Alternative("softmax, then the keep-mask, then renormalise", W, """
def causal_attention_weights(scores):
    T = scores.shape[-1]
    keep = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()
    weights = torch.softmax(scores, dim=-1) * keep
    return weights / weights.sum(dim=-1, keepdim=True)
"""),
    Alternative("tril of the weights, then divide", R, """
def renormalize_after_mask(weights):
    kept = torch.tril(weights)
    return kept / kept.sum(-1, keepdim=True)
"""),
    Alternative("multiply by a 0/1 keep matrix", R, """
def renormalize_after_mask(weights):
    keep = (~causal_mask(weights.shape[-1])).to(weights.dtype)
    kept = weights * keep
    return kept / torch.sum(kept, dim=-1, keepdim=True)
"""),
    Alternative("tril buffer with the `mask == 0` convention and -1e9", C,
                _ca(mask_line="self.register_buffer('mask', torch.tril(torch.ones(context_length, context_length)))",
                    mask_use="self.mask[:num_tokens, :num_tokens] == 0", fill="-1e9")),
    Alternative("additive float mask buffer", C, """
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.full((context_length, context_length), float("-inf")).triu(1))

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(k.shape[-1])
        weights = self.dropout(F.softmax(scores + self.mask[:T, :T], dim=-1))
        return torch.einsum("bts,bsd->btd", weights, v)
"""),
    Alternative("F.scaled_dot_product_attention with dropout_p and is_causal=True", C, """
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

    def forward(self, x):
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x),
                                              dropout_p=p, is_causal=True)
"""),
    Alternative("torch.where with finfo.min and an in-forward sliced buffer", C, """
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        pos = torch.arange(context_length)
        self.register_buffer("mask", pos[None, :] <= pos[:, None], persistent=False)  # True = attend

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = q @ k.mT * k.shape[-1] ** -0.5
        scores = torch.where(self.mask[:T, :T], scores, torch.finfo(scores.dtype).min)
        return self.dropout(scores.softmax(-1)) @ v
"""),
    Alternative("perturb each future position separately", IC, """
def is_causal(module, num_tokens, d_in, trials=3):
    mode = module.training
    module.eval()
    ok = True
    with torch.no_grad():
        for _ in range(trials):
            x = torch.randn(1, num_tokens, d_in)
            y = module(x)
            for s in range(1, num_tokens):
                x2 = x.clone()
                x2[0, s] = torch.randn(d_in)
                y2 = module(x2)
                if (y2[0, :s] - y[0, :s]).abs().max() > 1e-5 * (1 + y.abs().max()):
                    ok = False
    module.train(mode)
    return ok
"""),
    Alternative("try/finally, batched trials, relative tolerance via isclose", IC, """
def is_causal(module, num_tokens, d_in, trials=3):
    previous = module.training
    try:
        module.eval()
        x = torch.randn(trials, num_tokens, d_in)
        with torch.no_grad():
            reference = module(x)
            for t in range(num_tokens):
                x_new = torch.cat([x[:, :t + 1], torch.randn(trials, num_tokens - t - 1, d_in)], dim=1)
                if not torch.isclose(module(x_new)[:, :t + 1], reference[:, :t + 1], rtol=1e-4, atol=1e-6).all():
                    return False
        return True
    finally:
        module.train(previous)
"""),
    Alternative("autograd's Jacobian: no output may depend on a later input", IC, """
def is_causal(module, num_tokens, d_in, trials=3):
    was_training = module.training
    module.eval()
    try:
        for _ in range(trials):
            x = torch.randn(1, num_tokens, d_in)
            jac = torch.autograd.functional.jacobian(module, x)    # (1, T, d_out, 1, T, d_in)
            dependence = jac[0, :, :, 0].abs().sum(dim=(1, 3))     # (T, T): output t on input s
            if (dependence.triu(1) > 1e-6).any():
                return False
        return True
    finally:
        module.train(was_training)
"""),
    Alternative("un-permute the output with the inverse permutation, relative tolerance", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    with torch.no_grad():
        for _ in range(trials):
            x = torch.randn(4, num_tokens, d)
            order = torch.argsort(torch.rand(num_tokens))
            if num_tokens > 1 and bool((order == torch.arange(num_tokens)).all()):
                order = order.roll(1)   # the identity proves nothing: move every token one place
            back = torch.empty_like(order)
            back[order] = torch.arange(num_tokens)
            restored = fn(x[:, order])[:, back]
            if not torch.isclose(restored, fn(x), rtol=1e-4, atol=1e-6).all():
                return False
    return True
"""),
    Alternative("all trials in one batch, a different permutation per sequence (gather)", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    x = torch.randn(trials, num_tokens, d)
    perms = torch.stack([torch.randperm(num_tokens) for _ in range(trials)])      # (trials, T)
    if num_tokens > 1:  # swap the first two tokens of any permutation that moves none
        unmoved = (perms == torch.arange(num_tokens)).all(dim=1)
        perms[unmoved, :2] = torch.tensor([1, 0])
    shuffled = torch.gather(x, 1, perms[:, :, None].expand(-1, -1, d))
    out = fn(x)
    expected = torch.gather(out, 1, perms[:, :, None].expand(-1, -1, out.shape[-1]))
    return bool(((fn(shuffled) - expected).abs().max() <= 1e-5 * (1 + expected.abs().max())).item())
"""),
    Alternative("index_select, and a permutation redrawn until it moves a token", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    ok = True
    for _ in range(trials):
        x = torch.randn(2, num_tokens, d)
        perm = torch.randperm(num_tokens)
        while num_tokens > 1 and torch.equal(perm, torch.arange(num_tokens)):
            perm = torch.randperm(num_tokens)
        a = fn(x.index_select(1, perm)).detach()
        b = fn(x).detach().index_select(1, perm)
        ok = ok and torch.allclose(a, b, atol=1e-5)
    return ok
"""),
    Alternative("one sequence per trial (B=1), verdicts gathered with all()", Q, """
def is_permutation_equivariant(fn, num_tokens, d, trials=3):
    verdicts = []
    for _ in range(trials):
        x = torch.randn(1, num_tokens, d)
        while True:
            perm = torch.randperm(num_tokens)
            if num_tokens < 2 or (perm != torch.arange(num_tokens)).any():
                break
        with torch.no_grad():
            verdicts.append(torch.allclose(fn(x)[:, perm], fn(x[:, perm]), atol=1e-5, rtol=1e-4))
    return all(verdicts)
"""),
    Alternative("loop over sequences", P, """
def padding_mask(lengths, num_tokens):
    device = lengths.device if isinstance(lengths, torch.Tensor) else "cpu"
    mask = torch.zeros(len(lengths), num_tokens, dtype=torch.bool, device=device)
    for i, n in enumerate(lengths):
        mask[i, int(n):] = True
    return mask
"""),
    Alternative("expand and compare with unsqueeze", P, """
def padding_mask(lengths, num_tokens):
    lengths = torch.as_tensor(lengths)
    B = lengths.shape[0]
    positions = torch.arange(num_tokens, device=lengths.device).expand(B, num_tokens)
    return positions >= lengths.unsqueeze(1)
"""),
    # --- rope
    Alternative("rope with complex numbers", RO, """
def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions[:, None] * omega)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)
"""),
    Alternative("rope with the rotate-half trick on interleaved pairs", RO, """
def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = (positions.float()[:, None] * omega).repeat_interleave(2, dim=-1)
    swapped = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return (x * torch.cos(angle) + swapped * torch.sin(angle)).to(x.dtype)
"""),
    Alternative("rope in float32 throughout, cast back to x's dtype at the end", RO, """
def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    xf = x.float()
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
    angle = torch.outer(positions.float(), inv_freq)
    out = torch.empty_like(xf)
    out[..., 0::2] = xf[..., 0::2] * angle.cos() - xf[..., 1::2] * angle.sin()
    out[..., 1::2] = xf[..., 0::2] * angle.sin() + xf[..., 1::2] * angle.cos()
    return out.type_as(x)
"""),
    Alternative("rope with tables made in x's own dtype", RO, """
def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = (positions.double()[:, None] * omega).to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), dim=-1).flatten(-2)
"""),
    Alternative("rope as a loop over the pairs", RO, """
import math
def rope(x, positions, base=10000.0):
    out = x.clone()
    d = x.shape[-1]
    for i in range(d // 2):
        theta = positions.to(x.dtype) * base ** (-2 * i / d)
        a, b = x[..., 2 * i], x[..., 2 * i + 1]
        out[..., 2 * i] = a * torch.cos(theta) - b * torch.sin(theta)
        out[..., 2 * i + 1] = a * torch.sin(theta) + b * torch.cos(theta)
    return out
"""),
]
