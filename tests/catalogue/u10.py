"""Unit 10 — your GPT runs GPT-2: loading its checkpoint, induction heads, the attention sink."""
from reference import answers

from . import Alternative, Mistake

UNIT = "10_gpt2"

LOAD = "u10_load_gpt2"
IND = "u10_induction_scores"
SINK = "u10_first_token_share"

# The reference load_gpt2 (the solution's answer cell), for entries that change one part.
_LOAD = answers(UNIT)[LOAD]


def load(old: str, new: str) -> str:
    assert old in _LOAD, old
    return _LOAD.replace(old, new)


_QKV = "zip((block.att.W_query, block.att.W_key, block.att.W_value),"
_SPLIT = "weight.split(E, dim=0), bias.split(E)):"
_NORM = """        norm.scale.copy_(fetch(name + ".weight", norm.scale.shape))
        norm.shift.copy_(fetch(name + ".bias", norm.shift.shape))"""
_TRANSPOSED = 'linear.weight.copy_(fetch(name + ".weight", linear.weight.shape[::-1]).T)'
_TIE = "    model.out_head.weight = model.tok_emb.weight                                     # tied: one matrix\n"
_UNPLACED = '''    if unplaced:
        raise ValueError(f"this model has no place for {unplaced[0]!r}: is the checkpoint deeper or bigger?")
'''
_MISSING = '''        if name not in stored:
            raise ValueError(f"the state dict has no {name!r} (nor 'transformer.{name}')")'''

MISTAKES = [
    Mistake("load_gpt2 transposes a Conv1D weight only where the shapes need it (not the square attn.c_proj)",
            LOAD, load(_TRANSPOSED, 'stored_w = stored[name + ".weight"]\n'
                                    '        used.add(name + ".weight")\n'
                                    '        linear.weight.copy_(stored_w if stored_w.shape == linear.weight.shape '
                                    'else stored_w.T)'),
            "a Conv1D weight went in as stored"),
    Mistake("load_gpt2 splits c_attn without transposing it, each (E, E) block used as stored",
            LOAD, load("weight = fetch(h + \"attn.c_attn.weight\", (E, 3 * E)).T",
                       "weight = fetch(h + \"attn.c_attn.weight\", (E, 3 * E))")
            .replace(_SPLIT, "weight.split(E, dim=1), bias.split(E)):"),
            "a Conv1D weight went in as stored"),
    Mistake("load_gpt2 takes keys, queries, values from c_attn in that order",
            LOAD, load(_QKV, "zip((block.att.W_key, block.att.W_query, block.att.W_value),"),
            "in the wrong order"),
    Mistake("load_gpt2 reads c_attn as a (q, k, v) triple per head",
            LOAD, load(_SPLIT, "weight.view(model.cfg.num_heads, 3, -1, E).transpose(0, 1).reshape(3, E, E), "
                               "bias.view(model.cfg.num_heads, 3, -1).transpose(0, 1).reshape(3, E)):"),
            "split along the wrong axis or interleaved"),
    Mistake("load_gpt2 reshapes c_attn to (3E, E) instead of transposing it",
            LOAD, load('weight = fetch(h + "attn.c_attn.weight", (E, 3 * E)).T',
                       'weight = fetch(h + "attn.c_attn.weight", (E, 3 * E)).reshape(3 * E, E)'),
            "split along its input dimension"),
    Mistake("load_gpt2 leaves the output head as it was built",
            LOAD, load(_TIE, ""), "the output head was not tied"),
    Mistake("load_gpt2 copies the token embedding's values into the output head instead of tying it",
            LOAD, load(_TIE, "    with torch.no_grad():\n        model.out_head.weight.copy_(model.tok_emb.weight)\n"),
            "not a copy of its values"),
    # A loader that checks for names left over reports a forgotten tensor by its own ValueError, naming it; the
    # three loaders that forget one below are written without that check.
    Mistake("load_gpt2 forgets the final LayerNorm",
            LOAD, load('        copy_norm(model.final_norm, "ln_f")\n', "").replace(_UNPLACED, ""),
            "the final LayerNorm was not loaded"),
    Mistake("load_gpt2 forgets the position embeddings",
            LOAD, load('        model.pos_emb.weight.copy_(fetch("wpe.weight", model.pos_emb.weight.shape))\n', "")
            .replace(_UNPLACED, ""), "the position embeddings were not loaded"),
    Mistake("load_gpt2 puts the LayerNorms' weight into shift and bias into scale",
            LOAD, load(_NORM, """        norm.scale.copy_(fetch(name + ".bias", norm.scale.shape))
        norm.shift.copy_(fetch(name + ".weight", norm.shift.shape))"""),
            "the LayerNorms' weight and bias were swapped"),
    Mistake("load_gpt2 copies the query, key and value weights but not their biases",
            LOAD, load("                linear.bias.copy_(b)\n", ""), "biases were not copied"),
    Mistake("load_gpt2 copies no bias of any linear layer",
            LOAD, load("                linear.bias.copy_(b)\n", "")
            .replace('        linear.bias.copy_(fetch(name + ".bias", linear.bias.shape))\n', "")
            .replace(_UNPLACED, ""),
            "biases were not copied"),
    Mistake("load_gpt2 copies the stored attn.bias into the model's mask",
            LOAD, load('            copy_norm(block.norm1, h + "ln_1")\n',
                       '            copy_norm(block.norm1, h + "ln_1")\n'
                       '            block.att.mask.copy_(stored[h + "attn.bias"][0, 0].bool())\n'),
            "the stored attn.bias went into the model"),
    Mistake("load_gpt2 skips what is missing without a word",
            LOAD, load(_MISSING + "\n        if tuple(stored[name].shape) != tuple(shape):",
                       "        if name not in stored:\n            return torch.zeros(shape)\n"
                       "        if tuple(stored[name].shape) != tuple(shape):"),
            "went on without a valid"),
    Mistake("load_gpt2's ValueError does not say which tensor",
            LOAD, load(_MISSING, '        if name not in stored:\n            raise ValueError("a tensor is missing")'),
            "does not name the tensor"),
    Mistake("load_gpt2 loads a deeper checkpoint without a word",
            LOAD, load(_UNPLACED, ""), "names the model has no place for"),
    Mistake("load_gpt2 counts the names left over, as nanoGPT does, and does not say which",
            LOAD, load(_UNPLACED, '    if len(unplaced) > 0:\n'
                                  '        raise ValueError(f"{len(unplaced)} tensors left over")\n'),
            "does not name the first name the model has no place for"),

    Mistake("induction_scores looks at t - period, the earlier copy of the same token",
            IND, """
def induction_scores(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    return weights[..., queries, queries - period].mean(dim=-1)
""", "earlier copy of the same token"),
    Mistake("induction_scores starts at query period - 1",
            IND, """
def induction_scores(weights, period):
    return torch.diagonal(weights, offset=-(period - 1), dim1=-2, dim2=-1).mean(dim=-1)
""", "you included queries before position period"),
    Mistake("induction_scores sums over the queries",
            IND, """
def induction_scores(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    return weights[..., queries, queries - period + 1].sum(dim=-1)
""", "you added the weights up over the queries"),
    Mistake("induction_scores reads weights[..., key, query]",
            IND, """
def induction_scores(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    return weights[..., queries - period + 1, queries].mean(dim=-1)
""", "the query is the second-to-last dimension"),
    Mistake("induction_scores divides the second copy's weights by T, as TransformerLens's detector does",
            IND, """
def induction_scores(weights, period):
    T = weights.shape[-1]
    pattern = torch.zeros(T, T)
    pattern[torch.arange(period, T), torch.arange(1, T - period + 1)] = 1
    return (weights * pattern).sum(dim=(-2, -1)) / weights.sum(dim=(-2, -1))
""", "you averaged over every position"),
    Mistake("induction_scores normalises as TransformerLens's detector with exclude_bos",
            IND, """
def induction_scores(weights, period):
    T = weights.shape[-1]
    pattern = torch.zeros(T, T)
    pattern[torch.arange(period, T), torch.arange(1, T - period + 1)] = 1
    rest = weights.clone()
    rest[..., 0] = 0
    return (rest * pattern).sum(dim=(-2, -1)) / rest.sum(dim=(-2, -1))
""", "exclude_bos"),
    Mistake("induction_scores takes the mean of the whole diagonal, from query period - 1",
            IND, """
def induction_scores(weights, period):
    return weights.diagonal(offset=1 - period, dim1=-2, dim2=-1).mean(dim=-1)
""", "you included queries before position period"),
    Mistake("induction_scores averages over the layers instead of the queries",
            IND, """
def induction_scores(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    return weights[..., queries, queries - period + 1].mean(dim=0)
""", "you averaged over the layers"),

    Mistake("first_token_share averages over every query",
            SINK, "def first_token_share(weights):\n    return weights[..., 0].mean(dim=-1)\n",
            "you included the first queries"),
    Mistake("first_token_share starts at query 5",
            SINK, "def first_token_share(weights):\n    return weights[..., 5:, 0].mean(dim=-1)\n",
            "you started at query 5"),
    Mistake("first_token_share takes the last key",
            SINK, "def first_token_share(weights):\n    return weights[..., 4:, -1].mean(dim=-1)\n",
            "the last key"),
    Mistake("first_token_share sums over the queries",
            SINK, "def first_token_share(weights):\n    return weights[..., 4:, 0].sum(dim=-1)\n",
            "you added the weights up over the queries"),
    Mistake("first_token_share counts the first four keys",
            SINK, "def first_token_share(weights):\n    return weights[..., 4:, :4].sum(dim=-1).mean(dim=-1)\n",
            "the first four keys together"),
    Mistake("first_token_share averages over the layers instead of the queries",
            SINK, "def first_token_share(weights):\n    return weights[..., 4:, 0].mean(dim=0)\n",
            "you averaged over the layers"),
]

ALTERNATIVES = [
    Alternative("load_gpt2 with an assign(left, right) helper that makes new parameters", LOAD, """
def load_gpt2(model, state_dict):
    params = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in state_dict.items()}

    seen = set()

    def get(name):
        if name not in params:
            raise ValueError(f"missing key: {name}")
        seen.add(name)
        return params[name]

    def assign(left, right, name):
        if left.shape != right.shape:
            raise ValueError(f"shape mismatch for {name}: left {tuple(left.shape)}, right {tuple(right.shape)}")
        return torch.nn.Parameter(right.clone().detach().to(left.dtype))

    model.tok_emb.weight = assign(model.tok_emb.weight, get("wte.weight"), "wte.weight")
    model.pos_emb.weight = assign(model.pos_emb.weight, get("wpe.weight"), "wpe.weight")
    for b, block in enumerate(model.blocks):
        p = f"h.{b}."
        block.norm1.scale = assign(block.norm1.scale, get(p + "ln_1.weight"), p + "ln_1.weight")
        block.norm1.shift = assign(block.norm1.shift, get(p + "ln_1.bias"), p + "ln_1.bias")
        w = get(p + "attn.c_attn.weight")
        bias = get(p + "attn.c_attn.bias")
        if w.shape != (model.cfg.emb_dim, 3 * model.cfg.emb_dim):
            raise ValueError(f"shape mismatch for {p}attn.c_attn.weight: {tuple(w.shape)}")
        q_w, k_w, v_w = torch.split(w, w.shape[-1] // 3, dim=-1)
        q_b, k_b, v_b = torch.split(bias, bias.shape[-1] // 3, dim=-1)
        att = block.att
        att.W_query.weight = assign(att.W_query.weight, q_w.T, p + "attn.c_attn.weight")
        att.W_key.weight = assign(att.W_key.weight, k_w.T, p + "attn.c_attn.weight")
        att.W_value.weight = assign(att.W_value.weight, v_w.T, p + "attn.c_attn.weight")
        att.W_query.bias = assign(att.W_query.bias, q_b, p + "attn.c_attn.bias")
        att.W_key.bias = assign(att.W_key.bias, k_b, p + "attn.c_attn.bias")
        att.W_value.bias = assign(att.W_value.bias, v_b, p + "attn.c_attn.bias")
        for linear, name in ((att.out_proj, "attn.c_proj"), (block.ff.layers[0], "mlp.c_fc"),
                             (block.ff.layers[2], "mlp.c_proj")):
            linear.weight = assign(linear.weight, get(p + name + ".weight").T, p + name + ".weight")
            linear.bias = assign(linear.bias, get(p + name + ".bias"), p + name + ".bias")
        block.norm2.scale = assign(block.norm2.scale, get(p + "ln_2.weight"), p + "ln_2.weight")
        block.norm2.shift = assign(block.norm2.shift, get(p + "ln_2.bias"), p + "ln_2.bias")
    model.final_norm.scale = assign(model.final_norm.scale, get("ln_f.weight"), "ln_f.weight")
    model.final_norm.shift = assign(model.final_norm.shift, get("ln_f.bias"), "ln_f.bias")
    for name in params:
        if name not in seen and name != "lm_head.weight" and not name.endswith(("attn.bias", "attn.masked_bias")):
            raise ValueError(f"unexpected key: {name}")
    model.out_head.weight = model.tok_emb.weight
    return model
"""),
    Alternative("load_gpt2 as a loop over a name map, then load_state_dict", LOAD, """
def load_gpt2(model, state_dict):
    sd = {}
    for key, value in state_dict.items():
        key = key.removeprefix("transformer.")
        if key == "lm_head.weight" or key.endswith(".attn.bias") or key.endswith(".attn.masked_bias"):
            continue
        sd[key] = value
    names = {"wte.weight": ("tok_emb.weight", False), "wpe.weight": ("pos_emb.weight", False),
             "ln_f.weight": ("final_norm.scale", False), "ln_f.bias": ("final_norm.shift", False)}
    for i in range(model.cfg.num_layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        names |= {theirs + "ln_1.weight": (ours + "norm1.scale", False),
                  theirs + "ln_1.bias": (ours + "norm1.shift", False),
                  theirs + "ln_2.weight": (ours + "norm2.scale", False),
                  theirs + "ln_2.bias": (ours + "norm2.shift", False),
                  theirs + "attn.c_proj.weight": (ours + "att.out_proj.weight", True),
                  theirs + "attn.c_proj.bias": (ours + "att.out_proj.bias", False),
                  theirs + "mlp.c_fc.weight": (ours + "ff.layers.0.weight", True),
                  theirs + "mlp.c_fc.bias": (ours + "ff.layers.0.bias", False),
                  theirs + "mlp.c_proj.weight": (ours + "ff.layers.2.weight", True),
                  theirs + "mlp.c_proj.bias": (ours + "ff.layers.2.bias", False),
                  theirs + "attn.c_attn.weight": (None, True), theirs + "attn.c_attn.bias": (None, False)}
    extra = [key for key in sd if key not in names]
    if extra:
        raise ValueError(f"keys the model cannot take: {', '.join(extra)}")
    current = model.state_dict()
    new = {}
    for theirs, (ours, transpose) in names.items():
        if theirs not in sd:
            raise ValueError(f"{theirs} not found in the state dict")
        tensor = sd[theirs].t() if transpose else sd[theirs]
        if ours is None:
            i = theirs.split(".")[1]
            kind = theirs.rsplit(".", 1)[1]
            if tensor.shape[0] != 3 * model.cfg.emb_dim:
                raise ValueError(f"{theirs} has the wrong shape {tuple(sd[theirs].shape)}")
            for part, name in zip(tensor.chunk(3, dim=0), ("W_query", "W_key", "W_value")):
                new[f"blocks.{i}.att.{name}.{kind}"] = part
            continue
        if tensor.shape != current[ours].shape:
            raise ValueError(f"{theirs}: shape {tuple(sd[theirs].shape)} does not fit {ours}")
        new[ours] = tensor
    new["out_head.weight"] = new["tok_emb.weight"]
    model.load_state_dict(new, strict=False)
    model.out_head.weight = model.tok_emb.weight
    return model
"""),
    Alternative("induction_scores with a loop over the queries", IND, """
def induction_scores(weights, period):
    total = torch.zeros(weights.shape[:2], dtype=weights.dtype)
    T = weights.shape[-1]
    for t in range(period, T):
        total += weights[:, :, t, t - period + 1]
    return total / (T - period)
"""),
    Alternative("induction_scores with torch.diagonal", IND, """
def induction_scores(weights, period):
    diagonal = torch.diagonal(weights, offset=-(period - 1), dim1=-2, dim2=-1)   # queries period - 1 ... T - 1
    return diagonal[..., 1:].mean(dim=-1)
"""),
    Alternative("first_token_share as a sum divided by the number of queries", SINK, """
def first_token_share(weights):
    T = weights.shape[-1]
    return weights[:, :, 4:T, 0].sum(dim=2) / (T - 4)
"""),
    Alternative("first_token_share with a loop over layers and heads", SINK, """
def first_token_share(weights):
    L, H = weights.shape[0], weights.shape[1]
    out = torch.empty(L, H, dtype=weights.dtype)
    for l in range(L):
        for h in range(H):
            out[l, h] = weights[l, h, 4:, 0].mean()
    return out
"""),
]
