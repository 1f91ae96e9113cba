"""Unit 09 — fast inference: a key/value cache and the online softmax."""
from reference import answers

from . import Alternative, Mistake

UNIT = "09_fast_inference"

KV = "u09_kv_cache"
KB = "u09_kv_cache_bytes"
GQ = "u09_grouped_query_attention"
FA = "u09_flash_attention"
ATT = "u09_cached_attention"
ROT = "u09_rotary_cached_attention"
FWD = "u09_forward_cached"
GEN = "u09_generate_cached"
ONL = "u09_online_softmax_attention"

# The reference GroupedQueryAttention with one part changed.
_GQA = """
import math
class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError("d_out must be divisible by num_heads")
        CHECK_GROUPS
        self.d_out, self.num_heads, self.num_kv_heads = d_out, num_heads, num_kv_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), 1))

    def forward(self, x):
        b, t, _ = x.shape
        group = self.num_heads // self.num_kv_heads
        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_key(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        k, v = SPREAD
        scores = q @ k.transpose(-2, -1) / SCALE
        MASK
        weights = self.dropout(torch.softmax(scores, dim=-1))
        return self.out_proj((weights @ v).transpose(1, 2).contiguous().view(b, t, self.d_out))
"""


def gqa(check="if num_heads % num_kv_heads != 0:\n            raise ValueError(\"num_kv_heads must divide num_heads\")",
        spread="k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)",
        scale="math.sqrt(self.head_dim)", mask="scores = scores.masked_fill(self.mask[:t, :t], float(\"-inf\"))"):
    return (_GQA.replace("CHECK_GROUPS", check).replace("SPREAD", spread).replace("SCALE", scale)
            .replace("MASK", mask))


# The reference FlashAttentionFunction and flash_attention (the solution's answer cell), for
# entries that change one line.
_FLASH = answers(UNIT)[FA]


def flash(old: str = "", new: str = "") -> str:
    assert old in _FLASH, old
    return _FLASH.replace(old, new)


# The reference kv_cache_bytes with one part changed.
_KB = """
def kv_cache_bytes(cfg, num_tokens, batch_size=1, dtype=torch.float32, num_kv_heads=None):
    heads = HEADS
    return KEYS_AND_VALUES * LAYERS * BATCH * num_tokens * heads * HEAD_DIM * BYTES
"""


def cache_bytes(heads="cfg.num_heads if num_kv_heads is None else num_kv_heads", kv="2", layers="cfg.num_layers",
                batch="batch_size", head_dim="(cfg.emb_dim // cfg.num_heads)", size="dtype.itemsize"):
    return (_KB.replace("HEADS", heads).replace("KEYS_AND_VALUES", kv).replace("LAYERS", layers)
            .replace("BATCH", batch).replace("HEAD_DIM", head_dim).replace("BYTES", size))

# The reference KVCache with one part changed.
_KV = '''
class KVCache:
    def __init__(self):
        self.keys = None
        self.values = None

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat((self.keys, k), dim=DIM)
            self.values = torch.cat((self.values, v), dim=DIM)
        return RETURN

    def __len__(self):
        return LEN

    def reset(self):
        RESET
'''


def kv_cache(dim="-2", ret="self.keys, self.values", length="0 if self.keys is None else self.keys.shape[-2]",
             reset="self.keys = self.values = None"):
    return _KV.replace("DIM", dim).replace("RETURN", ret).replace("LEN", length).replace("RESET", reset)


# The reference cached attention with one part changed.
_ATT = '''
def cached_attention(att, x, cache):
    b, t, _ = x.shape
    past = len(cache)
    q = att.W_query(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    k = att.W_key(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    v = att.W_value(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    keys, values = cache.append(k, v)
    KEYS
    scores = q @ keys.transpose(-2, -1) / SCALE
    blocked = BLOCKED
    weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    context = (weights @ values).transpose(1, 2).reshape(b, t, att.d_out)
    return OUT
'''


def attention(keys="pass", scale="math.sqrt(att.head_dim)",
              blocked="torch.ones(t, past + t, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)",
              out="att.out_proj(context)"):
    return (_ATT.replace("KEYS", keys).replace("SCALE", scale).replace("BLOCKED", blocked)
            .replace("OUT", out))


# The reference rotary cached attention with one part changed.
_ROT = '''
def rotary_cached_attention(att, x, cache):
    b, t, _ = x.shape
    past = len(cache)
    q = att.W_query(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    k = att.W_key(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    v = att.W_value(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    positions = POSITIONS
    TURN
    keys, values = cache.append(k, v)
    READ
    scores = q @ keys.transpose(-2, -1) / math.sqrt(att.head_dim)
    blocked = torch.ones(t, past + t, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)
    weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    context = (weights @ values).transpose(1, 2).reshape(b, t, att.d_out)
    return att.out_proj(context)
'''


def rotary(positions="torch.arange(past, past + t, device=x.device)",
           turn="q, k = rope(q, positions, att.base), rope(k, positions, att.base)", read="pass"):
    return _ROT.replace("POSITIONS", positions).replace("TURN", turn).replace("READ", read)


# The reference forward_cached with one part changed.
_FWD = '''
def forward_cached(model, idx, caches):
    past, t = len(caches[0]), idx.shape[1]
    CHECK
    positions = POSITIONS
    x = model.tok_emb(idx) + model.pos_emb(positions)
    for block, cache in zip(model.blocks, caches):
        x = x + cached_attention(block.att, block.norm1(x), cache)
        x = x + block.ff(block.norm2(x))
    return model.out_head(model.final_norm(x))
'''
_CHECK = ('if past + t > model.cfg.context_length:\n'
          '        raise ValueError(f"past the context length {model.cfg.context_length}")')


def forward(check=_CHECK, positions="torch.arange(past, past + t, device=idx.device)"):
    return _FWD.replace("CHECK", check).replace("POSITIONS", positions)


# The reference generate_cached with one part changed.
_GEN = '''
def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    was_training = model.training
    EVAL
    C = model.cfg.context_length
    CACHES
    try:
        with GRAD:
            for _ in range(max_new_tokens):
                FEED
                logits = forward_cached(model, new, caches)
                next_id = sample_next_token(logits[:, -1, :], SAMPLING)
                idx = torch.cat((idx, next_id), dim=1)
    finally:
        RESTORE
    return RETURN
'''
_FEED = '''if len(caches[0]) in (0, C):
                    for cache in caches:
                        cache.reset()
                    new = idx[:, -C:]
                else:
                    new = idx[:, -1:]'''


def generator_code(eval_="model.eval()", caches="caches = [KVCache() for _ in model.blocks]", grad="torch.no_grad()",
                   feed=_FEED, sampling="temperature, top_k, top_p, generator", restore="model.train(was_training)",
                   ret="idx"):
    return (_GEN.replace("EVAL", eval_).replace("CACHES", caches).replace("GRAD", grad).replace("FEED", feed)
            .replace("SAMPLING", sampling).replace("RESTORE", restore).replace("RETURN", ret))


# The reference online softmax with one part changed.
_ONL = '''
def online_softmax_attention(q, k, v, block_size, causal=False):
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    scale = SCALE
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    rows = torch.arange(num_queries, device=q.device)[:, None]
    for start in STARTS:
        k_block = k[..., start:start + block_size, :]
        v_block = v[..., start:start + block_size, :]
        scores = (q @ k_block.transpose(-2, -1)) * scale
        if CAUSAL:
            cols = COLS
            scores = scores.masked_fill(cols > rows, float("-inf"))
        UPDATE
    return acc / l
'''
_UPDATE = '''m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        p = torch.exp(scores - m_new)
        correction = torch.exp(m - m_new)
        l = l * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ v_block
        m = m_new'''


def online(scale="1.0 / math.sqrt(q.shape[-1])", starts="range(0, num_keys, block_size)", causal="causal",
           cols="torch.arange(start, start + k_block.shape[-2], device=q.device)", update=_UPDATE):
    return (_ONL.replace("SCALE", scale).replace("STARTS", starts).replace("CAUSAL", causal)
            .replace("COLS", cols).replace("UPDATE", update))


MISTAKES = [
    # --- KVCache
    Mistake("keys joined along the heads", KV, kv_cache(dim="1"), "along the positions, dimension -2"),
    Mistake("keys joined along the features", KV, kv_cache(dim="-1"), "along the positions, dimension -2"),
    Mistake("append returns only the new keys", KV, kv_cache(ret="k, v"), "return all of them"),
    Mistake("len counts the calls of append", KV, """
class KVCache:
    def __init__(self):
        self.keys = self.values = None
        self.calls = 0

    def append(self, k, v):
        self.calls += 1
        self.keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)
        self.values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        return self.keys, self.values

    def __len__(self):
        return self.calls

    def reset(self):
        self.keys = self.values = None
        self.calls = 0
""", "counts the calls of append"),
    Mistake("len is the batch size", KV, kv_cache(length="0 if self.keys is None else self.keys.shape[0]"),
            "the size of the batch (dimension 0)"),
    Mistake("reset does nothing", KV, kv_cache(reset="pass"), "reset() does not empty the cache"),
    # --- cached_attention
    Mistake("no causal mask: the prefill sees the future", ATT,
            attention(blocked="torch.zeros(t, past + t, dtype=torch.bool, device=x.device)"),
            "the causal mask is missing"),
    Mistake("the mask cut from the top-left corner", ATT, attention(blocked="att.mask[:t, :past + t]"),
            "top-left corner"),
    Mistake("the mask's offset read after the append", ATT,
            attention(keys="past = len(cache)",
                      blocked="torch.ones(t, past, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)"),
            "its offset was read after the new keys were appended"),
    Mistake("F.scaled_dot_product_attention with is_causal=True on the cached keys", ATT, """
import torch.nn.functional as F
def cached_attention(att, x, cache):
    b, t, _ = x.shape
    q, k, v = (lin(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
               for lin in (att.W_query, att.W_key, att.W_value))
    keys, values = cache.append(k, v)
    context = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
    return att.out_proj(context.transpose(1, 2).reshape(b, t, att.d_out))
""", "F.scaled_dot_product_attention(..., is_causal=True)"),
    Mistake("attends to the new keys only", ATT,
            attention(keys="keys, values = k, v", blocked="att.mask[:t, :t]"), "look only at the new keys"),
    Mistake("scaled by the square root of d_out", ATT, attention(scale="math.sqrt(att.d_out)"),
            "square root of d_out"),
    Mistake("no output projection", ATT, attention(out="context"), "out_proj is not applied"),
    # --- rotary_cached_attention
    Mistake("rotary positions restart at 0 for every call", ROT, rotary(positions="torch.arange(t, device=x.device)"),
            "as if they stood at positions 0 ... t-1"),
    Mistake("rotary positions read after the append", ROT, """
import math
def rotary_cached_attention(att, x, cache):
    b, t, _ = x.shape
    q = att.W_query(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    k = att.W_key(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    v = att.W_value(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    keys, values = cache.append(k, v)
    past = len(cache)
    positions = torch.arange(past, past + t)
    q = rope(q, positions, att.base)
    keys = torch.cat((keys[:, :, :-t], rope(k, positions, att.base)), dim=-2)
    cache.keys = keys
    blocked = torch.ones(t, past, dtype=torch.bool).triu(diagonal=past - t + 1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(att.head_dim)
    weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    return att.out_proj((weights @ values).transpose(1, 2).reshape(b, t, att.d_out))
""", "read P = len(cache) before cache.append"),
    Mistake("cached keys turned again when read back", ROT,
            rotary(read="keys = rope(keys, torch.arange(past + t, device=x.device), att.base)"), "turned twice"),
    Mistake("only the queries turned", ROT, rotary(turn="q = rope(q, positions, att.base)"),
            "only the queries were turned"),
    Mistake("rope on whole rows of width d_out", ROT, """
import math
def rotary_cached_attention(att, x, cache):
    b, t, _ = x.shape
    past = len(cache)
    positions = torch.arange(past, past + t, device=x.device)
    q = rope(att.W_query(x), positions, att.base).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    k = rope(att.W_key(x), positions, att.base).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    v = att.W_value(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    keys, values = cache.append(k, v)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(att.head_dim)
    blocked = torch.ones(t, past + t, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)
    weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    return att.out_proj((weights @ values).transpose(1, 2).reshape(b, t, att.d_out))
""", "whole rows of width d_out"),
    Mistake("the values turned too", ROT,
            rotary(turn="q, k, v = (rope(z, positions, att.base) for z in (q, k, v))"), "the values were turned too"),
    Mistake("rope's default base, not the layer's", ROT, rotary(turn="q, k = rope(q, positions), rope(k, positions)"),
            "instead of the layer's att.base"),
    # --- forward_cached
    Mistake("positions restart at 0 for every call", FWD,
            forward(positions="torch.arange(t, device=idx.device)"), "positions 0, 1, ... again"),
    Mistake("no check of the context length", FWD, forward(check="pass"), "raised an IndexError"),
    Mistake("the offset is the number of layers, len(caches)", FWD,
            forward(positions="torch.arange(len(caches), len(caches) + t, device=idx.device)"),
            "start at len(caches), the number of layers"),
    Mistake("the offset is the number of new tokens", FWD,
            forward(positions="torch.arange(t, 2 * t, device=idx.device)"),
            "start at idx.shape[1], the number of new tokens"),
    # --- generate_cached
    Mistake("a sliding cache: the oldest entry dropped, the rest kept", GEN,
            generator_code(feed='''if len(caches[0]) == 0:
                    new = idx[:, -C:]
                else:
                    if len(caches[0]) == C:
                        for cache in caches:
                            cache.keys, cache.values = cache.keys[:, :, 1:], cache.values[:, :, 1:]
                    new = idx[:, -1:]'''), "dropped the oldest keys and values"),
    Mistake("the cache never cropped", GEN, generator_code(feed='''if len(caches[0]) == 0:
                    new = idx[:, -C:]
                else:
                    new = idx[:, -1:]'''), "this happened past context_length"),
    Mistake("caches kept on the model between calls", GEN, generator_code(caches='''if not hasattr(model, "kv_caches"):
        model.kv_caches = [KVCache() for _ in model.blocks]
    caches = model.kv_caches'''), "caches were kept from the previous call"),
    Mistake("only the new tokens returned", GEN, generator_code(ret="idx[:, -max_new_tokens:]"),
            "returned only the new tokens"),
    Mistake("no cache at all: generate called", GEN, """
def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    return generate(model, idx, max_new_tokens, temperature, top_k, top_p, generator)
""", "the whole text goes through the model at every step"),
    Mistake("the whole window fed at every step through the cache", GEN, generator_code(feed='''for cache in caches:
                    cache.reset()
                new = idx[:, -C:]'''), "the whole text goes through the model at every step"),
    Mistake("model left in train mode", GEN, generator_code(eval_="pass", restore="pass"),
            "train mode while sampling"),
    Mistake("model left in eval mode", GEN, generator_code(restore="pass"), "leaves the model in eval mode"),
    Mistake("gradients tracked", GEN, generator_code(grad="torch.enable_grad()"), "tracks gradients"),
    Mistake("top_p not passed on", GEN, generator_code(sampling="temperature, top_k, None, generator"),
            "top_p is not passed on"),
    # --- online_softmax_attention
    Mistake("running sum not rescaled", ONL, online(update=_UPDATE.replace("l = l * correction", "l = l")),
            "running sum is not rescaled"),
    Mistake("running output not rescaled", ONL, online(update=_UPDATE.replace("acc = acc * correction", "acc = acc")),
            "weighted sum of the values is not rescaled"),
    Mistake("exponentiated before the max was updated", ONL, online(update='''p = torch.exp(scores - m)
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        correction = torch.exp(m - m_new)
        l = l * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ v_block
        m = m_new'''), "exponentiated before the running maximum was updated"),
    Mistake("no maximum subtracted at all", ONL, online(update='''p = torch.exp(scores)
        l = l + p.sum(dim=-1, keepdim=True)
        acc = acc + p @ v_block'''), "exp overflows for large scores"),
    Mistake("causal mask with the index inside the block", ONL,
            online(cols="torch.arange(k_block.shape[-2], device=q.device)"), "index inside the block"),
    Mistake("the last, shorter block left out", ONL, online(starts="range(0, num_keys - block_size + 1, block_size)"),
            "last, shorter block"),
    Mistake("a block all in a query's future gives NaN", ONL, """
def online_softmax_attention(q, k, v, block_size, causal=False):
    lse = torch.full(q.shape[:-1], float("-inf"))
    out = torch.zeros(*q.shape[:-1], v.shape[-1])
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            cols = torch.arange(start, start + s.shape[-1])
            s = s.masked_fill(cols > torch.arange(q.shape[-2])[:, None], float("-inf"))
        block_lse = torch.logsumexp(s, dim=-1)
        block_out = torch.softmax(s, dim=-1) @ v[..., start:start + block_size, :]
        new_lse = torch.logaddexp(lse, block_lse)
        out = out * torch.exp(lse - new_lse)[..., None] + block_out * torch.exp(block_lse - new_lse)[..., None]
        lse = new_lse
    return out
""", "all lie in its future"),
    Mistake("the blocks' own softmaxes averaged", ONL, """
def online_softmax_attention(q, k, v, block_size, causal=False):
    scale = 1.0 / math.sqrt(q.shape[-1])
    rows = torch.arange(q.shape[-2])[:, None]
    total, blocks = 0, 0
    for start in range(0, k.shape[-2], block_size):
        scores = (q @ k[..., start:start + block_size, :].transpose(-2, -1)) * scale
        if causal:
            cols = torch.arange(start, start + scores.shape[-1])
            scores = scores.masked_fill(cols > rows, float("-inf"))
        total = total + torch.softmax(scores, dim=-1).nan_to_num() @ v[..., start:start + block_size, :]
        blocks += 1
    return total / blocks
""", "each block's softmax was taken on its own"),
    Mistake("causal ignored", ONL, online(causal="False"), "the causal mask is ignored"),
    Mistake("scores not scaled", ONL, online(scale="1.0"), "not scaled"),
    Mistake("full attention, block_size ignored", ONL, """
def online_softmax_attention(q, k, v, block_size, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
""", "as much memory as the full"),
    Mistake("blocks of weights kept until the end", ONL, """
def online_softmax_attention(q, k, v, block_size, causal=False):
    blocks = []
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            cols = torch.arange(start, start + s.shape[-1])
            s = s.masked_fill(cols > torch.arange(q.shape[-2])[:, None], float("-inf"))
        blocks.append(s)
    return torch.softmax(torch.cat(blocks, dim=-1), dim=-1) @ v
""", "as much memory as the full"),
    # --- kv_cache_bytes
    Mistake("keys only", KB, cache_bytes(kv="1"), "you counted the keys only"),
    Mistake("one layer", KB, cache_bytes(layers="1"), "you counted one layer"),
    Mistake("the batch left out", KB, cache_bytes(batch="1"), "the batch is missing"),
    Mistake("4 bytes whatever the dtype", KB, cache_bytes(size="4"), "4 bytes per number whatever the dtype"),
    Mistake("num_kv_heads ignored", KB, cache_bytes(heads="cfg.num_heads"), "not num_heads"),
    Mistake("emb_dim per head", KB, cache_bytes(head_dim="cfg.emb_dim"), "not emb_dim"),
    # --- GroupedQueryAttention
    Mistake("key/value heads dealt out in turn (repeat)", GQ,
            gqa(spread="k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)"), "use repeat_interleave"),
    Mistake("scaled by the square root of d_out", GQ, gqa(scale="math.sqrt(self.d_out)"), "square root of d_out"),
    Mistake("no causal mask", GQ, gqa(mask="pass"), "apply the causal mask"),
    Mistake("no check that num_kv_heads divides num_heads", GQ, gqa(check="pass"),
            "not divisible by num_kv_heads"),
    # --- flash_attention
    Mistake("D left out of the backward", FA,
            flash("delta = (grad_out * out).sum(dim=-1, keepdim=True)", "delta = 0.0"),
            "leave out D = rowsum(dO * O)"),
    Mistake("gradients of q and k not scaled", FA,
            flash("dq += (ds @ k_block) * scale", "dq += ds @ k_block").replace(
                "dk[..., block, :] = (ds.transpose(-2, -1) @ q) * scale",
                "dk[..., block, :] = ds.transpose(-2, -1) @ q"),
            "miss the 1 / sqrt(d)"),
    Mistake("only the maximum saved, not the log-sum-exp", FA,
            flash("ctx.save_for_backward(q, k, v, out, m + torch.log(l))", "ctx.save_for_backward(q, k, v, out, m)"),
            "not only the maximum m"),
    Mistake("the log-sum-exp saved without its maximum", FA,
            flash("ctx.save_for_backward(q, k, v, out, m + torch.log(l))",
                  "ctx.save_for_backward(q, k, v, out, torch.log(l))"),
            "saved without its maximum"),
    Mistake("the plain loop of exercise 5 under autograd", FA, """
def flash_attention(q, k, v, block_size, causal=False):
    return online_softmax_attention(q, k, v, block_size, causal)
""", "as much as the T_q x T_k scores is kept"),
    # --- unit 09's last slips: len counting appends, dropout in inference, masks, ctx, dtypes
    Mistake("len counts the calls of append and reset() keeps the count", KV, """
class KVCache:
    def __init__(self):
        self.keys = self.values = None
        self.n = 0

    def append(self, k, v):
        self.n += 1
        self.keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)
        self.values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        return self.keys, self.values

    def __len__(self):
        return self.n

    def reset(self):
        self.keys = self.values = None
""", "counts the calls of append"),
    Mistake("cached attention applies the layer's dropout", ATT, attention().replace(
        'weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)',
        'weights = att.dropout(torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1))'),
        "applied its dropout"),
    Mistake("rotary cached attention applies the layer's dropout", ROT, rotary().replace(
        'weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)',
        'weights = att.dropout(torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1))'),
        "applied its dropout"),
    Mistake("rotary: the mask cut from the top-left corner of att.mask", ROT, rotary().replace(
        "blocked = torch.ones(t, past + t, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)",
        "blocked = att.mask[:t, :past + t]"), "top-left corner"),
    Mistake("rotary: the right rows of att.mask, which ends at context_length", ROT, rotary().replace(
        "blocked = torch.ones(t, past + t, dtype=torch.bool, device=x.device).triu(diagonal=past + 1)",
        "blocked = att.mask[past:past + t, :past + t]"), "instead of cutting it from att.mask"),
    Mistake("forward_cached keeps the model's dropout layers", FWD, """
def forward_cached(model, idx, caches):
    start, n = len(caches[-1]), idx.size(1)
    if start + n > model.cfg.context_length:
        raise ValueError(f"only {model.cfg.context_length} positions, asked for {start + n}")
    h = model.drop_emb(model.tok_emb.weight[idx] + model.pos_emb.weight[start:start + n])
    for i in range(len(model.blocks)):
        block = model.blocks[i]
        h = h + block.drop_shortcut(cached_attention(block.att, block.norm1(h), caches[i]))
        h = h + block.drop_shortcut(block.ff(block.norm2(h)))
    return model.out_head(model.final_norm(h))
""", "leave out the dropout layers"),
    Mistake("grouped-query dropout on the output instead of the weights", GQ, gqa().replace(
        "weights = self.dropout(torch.softmax(scores, dim=-1))", "weights = torch.softmax(scores, dim=-1)").replace(
        "return self.out_proj((weights @ v).transpose(1, 2).contiguous().view(b, t, self.d_out))",
        "return self.dropout(self.out_proj((weights @ v).transpose(1, 2).contiguous().view(b, t, self.d_out)))"),
        "applied dropout to the output of out_proj"),
    Mistake("grouped-query dropout left out", GQ, gqa().replace(
        "weights = self.dropout(torch.softmax(scores, dim=-1))", "weights = torch.softmax(scores, dim=-1)"),
        "the same as in eval mode"),
    Mistake("online softmax whose running maximum starts at 0", ONL, online().replace(
        'm = torch.full((*q.shape[:-1], 1), float("-inf")', "m = torch.full((*q.shape[:-1], 1), 0.0"),
        "the running maximum must start at -inf"),
    Mistake("online softmax computed in float32 whatever the input", ONL, online().replace(
        "num_queries, num_keys = q.shape[-2], k.shape[-2]",
        "q, k, v = q.float(), k.float(), v.float()\n    num_queries, num_keys = q.shape[-2], k.shape[-2]"),
        "must keep their dtype"),
    Mistake("flash backward masks whatever causal says", FA, flash("if ctx.causal:", "if True:"),
            "masks the scores although causal=False"),
    Mistake("flash backward leaves the mask out", FA, flash("if ctx.causal:", "if False:"),
            "leaves the causal mask out"),
    Mistake("KVCache buffer allocated in float32 whatever the keys' dtype", KV, """
class KVCache:
    def __init__(self):
        self.k_buf = self.v_buf = None
        self.length = 0

    def append(self, k, v):
        t = k.shape[-2]
        if self.k_buf is None or self.length + t > self.k_buf.shape[-2]:
            capacity = max(2 * (self.length + t), 8)
            k_new = torch.zeros(*k.shape[:-2], capacity, k.shape[-1], device=k.device)
            v_new = torch.zeros(*v.shape[:-2], capacity, v.shape[-1], device=v.device)
            if self.length:
                k_new[..., :self.length, :] = self.k_buf[..., :self.length, :]
                v_new[..., :self.length, :] = self.v_buf[..., :self.length, :]
            self.k_buf, self.v_buf = k_new, v_new
        self.k_buf[..., self.length:self.length + t, :] = k
        self.v_buf[..., self.length:self.length + t, :] = v
        self.length += t
        return self.k_buf[..., :self.length, :], self.v_buf[..., :self.length, :]

    def __len__(self):
        return self.length

    def reset(self):
        self.length = 0
""", "a buffer made by torch.zeros or torch.empty is float32"),
    Mistake("flash forward computed in float32 whatever the input", FA, flash(
        "scale = 1.0 / math.sqrt(q.shape[-1])\n        m = torch.full",
        "q, k, v = q.float(), k.float(), v.float()\n"
        "        scale = 1.0 / math.sqrt(q.shape[-1])\n        m = torch.full"),
        "the output must keep their dtype"),
    Mistake("flash forward whose running maximum starts at 0", FA, flash(
        'm = torch.full((*q.shape[:-1], 1), float("-inf")', "m = torch.full((*q.shape[:-1], 1), 0.0"),
        "the running maximum must start at -inf"),
    Mistake("flash forward keeps the scores on ctx", FA, flash(
        "ctx.block_size, ctx.causal = block_size, causal",
        "ctx.block_size, ctx.causal = block_size, causal\n        ctx.scores = q @ k.transpose(-2, -1)"),
        "as an attribute of ctx"),
]

ALTERNATIVES = [
    Alternative("KVCache in a preallocated buffer that doubles, with a length pointer", KV, """
class KVCache:
    def __init__(self):
        self.k_buf = self.v_buf = None
        self.length = 0

    def append(self, k, v):
        t = k.shape[-2]
        if self.k_buf is None or self.length + t > self.k_buf.shape[-2]:
            capacity = max(2 * (self.length + t), 8)
            k_new = k.new_empty(*k.shape[:-2], capacity, k.shape[-1])
            v_new = v.new_empty(*v.shape[:-2], capacity, v.shape[-1])
            if self.length:
                k_new[..., :self.length, :] = self.k_buf[..., :self.length, :]
                v_new[..., :self.length, :] = self.v_buf[..., :self.length, :]
            self.k_buf, self.v_buf = k_new, v_new
        self.k_buf[..., self.length:self.length + t, :] = k
        self.v_buf[..., self.length:self.length + t, :] = v
        self.length += t
        return self.k_buf[..., :self.length, :], self.v_buf[..., :self.length, :]

    def __len__(self):
        return self.length

    def reset(self):
        self.length = 0          # the buffer is kept and overwritten
"""),
    Alternative("KVCache as lists of chunks joined on demand", KV, """
class KVCache:
    def __init__(self):
        self.k_parts, self.v_parts = [], []

    def append(self, k, v):
        self.k_parts.append(k)
        self.v_parts.append(v)
        return torch.cat(self.k_parts, dim=2), torch.cat(self.v_parts, dim=2)

    def __len__(self):
        return sum(part.shape[2] for part in self.k_parts)

    def reset(self):
        self.k_parts.clear()
        self.v_parts.clear()
"""),
    Alternative("cached attention with the module's mask buffer and einsum", ATT, """
def cached_attention(att, x, cache):
    B, T, _ = x.shape
    P = len(cache)
    split = lambda y: y.reshape(B, T, att.num_heads, att.head_dim).permute(0, 2, 1, 3)
    keys, values = cache.append(split(att.W_key(x)), split(att.W_value(x)))
    q = split(att.W_query(x))
    scores = torch.einsum("bhqd,bhkd->bhqk", q, keys) / att.head_dim ** 0.5
    scores = torch.where(att.mask[P:P + T, :P + T], torch.tensor(-1e9, device=x.device), scores)
    out = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(dim=-1), values)
    return att.out_proj(out.permute(0, 2, 1, 3).reshape(B, T, -1))
"""),
    Alternative("cached attention with F.scaled_dot_product_attention", ATT, """
def cached_attention(att, x, cache):
    b, t, _ = x.shape
    past = len(cache)
    q, k, v = (layer(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
               for layer in (att.W_query, att.W_key, att.W_value))
    keys, values = cache.append(k, v)
    allowed = torch.arange(past + t, device=x.device)[None, :] <= torch.arange(past, past + t, device=x.device)[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=allowed)
    return att.out_proj(out.transpose(1, 2).reshape(b, t, att.d_out))
"""),
    Alternative("rotary cache holding unturned keys, all turned again at every step", ROT, """
import math
def rotary_cached_attention(att, x, cache):
    b, t, _ = x.shape
    heads = lambda z: z.view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
    q, k, v = heads(att.W_query(x)), heads(att.W_key(x)), heads(att.W_value(x))
    keys, values = cache.append(k, v)
    total = keys.shape[-2]
    q = rope(q, torch.arange(total - t, total, device=x.device), att.base)
    keys = rope(keys, torch.arange(total, device=x.device), att.base)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(att.head_dim)
    allowed = torch.arange(total, device=x.device)[None, :] <= torch.arange(total - t, total, device=x.device)[:, None]
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return att.out_proj((weights @ values).transpose(1, 2).reshape(b, t, att.d_out))
"""),
    Alternative("rotary cached attention with complex numbers (Llama's way) and SDPA", ROT, """
import torch.nn.functional as F
def rotary_cached_attention(att, x, cache):
    b, t, _ = x.shape
    start = len(cache)
    q, k, v = (lin(x).view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
               for lin in (att.W_query, att.W_key, att.W_value))
    freqs = att.base ** (-torch.arange(0, att.head_dim, 2, dtype=torch.float64) / att.head_dim)
    angles = torch.outer(torch.arange(start, start + t, dtype=torch.float64), freqs)
    turn = torch.polar(torch.ones_like(angles), angles)
    def rotate(z):
        pairs = torch.view_as_complex(z.double().reshape(*z.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * turn).flatten(-2).to(z.dtype)
    keys, values = cache.append(rotate(k), v)
    mask = torch.ones(t, start + t, dtype=torch.bool).tril(diagonal=start)
    out = F.scaled_dot_product_attention(rotate(q), keys, values, attn_mask=mask)
    return att.out_proj(out.transpose(1, 2).reshape(b, t, att.d_out))
"""),
    Alternative("forward_cached with the last cache, pos_emb.weight slices and an index loop", FWD, """
def forward_cached(model, idx, caches):
    start, n = len(caches[-1]), idx.size(1)
    if start + n > model.cfg.context_length:
        raise ValueError(f"only {model.cfg.context_length} positions, asked for {start + n}")
    h = model.tok_emb.weight[idx] + model.pos_emb.weight[start:start + n]
    for i in range(len(model.blocks)):
        block = model.blocks[i]
        h = h + cached_attention(block.att, block.norm1(h), caches[i])
        h = h + block.ff(block.norm2(h))
    return model.out_head(model.final_norm(h))
"""),
    Alternative("generate_cached: prefill before the loop, one wasted step at the end", GEN, """
@torch.no_grad()
def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    mode = model.training
    model.eval()
    C = model.cfg.context_length
    caches = [KVCache() for _ in range(len(model.blocks))]
    out = [idx]
    try:
        if max_new_tokens > 0:
            logits = forward_cached(model, idx[:, -C:], caches)
        for step in range(max_new_tokens):
            token = sample_next_token(logits[:, -1], temperature=temperature, top_k=top_k, top_p=top_p,
                                      generator=generator)
            out.append(token)
            if len(caches[0]) < C:
                logits = forward_cached(model, token, caches)
            else:
                text = torch.cat(out, dim=1)
                caches = [KVCache() for _ in range(len(model.blocks))]
                logits = forward_cached(model, text[:, -C:], caches)
    finally:
        model.train(mode)
    return torch.cat(out, dim=1)
"""),
    Alternative("generate_cached counting the positions it fed, inference_mode", GEN, """
def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    was_training = model.training
    model.eval()
    limit = model.cfg.context_length
    caches = None
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            if caches is None or len(caches[0]) >= limit:
                caches = [KVCache() for _ in model.blocks]
                logits = forward_cached(model, idx[:, -limit:], caches)
            else:
                logits = forward_cached(model, idx[:, -1:], caches)
            idx = torch.cat([idx, sample_next_token(logits[:, -1, :], temperature, top_k, top_p, generator)], 1)
    model.train(was_training)
    return idx
"""),
    Alternative("online softmax that keeps a normalised output and a log-sum-exp", ONL, """
def online_softmax_attention(q, k, v, block_size, causal=False):
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)       # (..., T_q)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)        # normalised so far
    i = torch.arange(q.shape[-2], device=q.device)
    for start in range(0, k.shape[-2], block_size):
        s = torch.einsum("...qd,...kd->...qk", q, k[..., start:start + block_size, :]) / math.sqrt(q.shape[-1])
        if causal:
            j = torch.arange(start, start + s.shape[-1], device=q.device)
            s = torch.where(j[None, :] <= i[:, None], s, torch.full_like(s, float("-inf")))
        block_lse = torch.logsumexp(s, dim=-1)                                           # (..., T_q)
        weights = torch.exp(s - block_lse[..., None].clamp_min(-1e30))                   # 0 for a row all in the future
        block_out = weights @ v[..., start:start + block_size, :]
        new_lse = torch.logaddexp(lse, block_lse)
        out = out * torch.exp(lse - new_lse)[..., None] + block_out * torch.exp(block_lse - new_lse)[..., None]
        lse = new_lse
    return out
"""),
    Alternative("online softmax with -1e9 masking, a while loop and divisions at the end", ONL, """
def online_softmax_attention(q, k, v, block_size, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    m = q.new_full(q.shape[:-1] + (1,), -float("inf"))
    l = q.new_zeros(q.shape[:-1] + (1,))
    acc = q.new_zeros(q.shape[:-1] + (v.shape[-1],))
    start = 0
    while start < T_k:
        stop = min(start + block_size, T_k)
        s = q @ k[..., start:stop, :].mT / q.shape[-1] ** 0.5
        if causal:
            future = torch.arange(start, stop, device=q.device) > torch.arange(T_q, device=q.device).unsqueeze(-1)
            s = s.masked_fill(future, -1e9)
        new_m = torch.max(m, s.max(dim=-1, keepdim=True).values)
        scale_old = (m - new_m).exp()
        p = (s - new_m).exp()
        l = scale_old * l + p.sum(-1, keepdim=True)
        acc = scale_old * acc + p @ v[..., start:stop, :]
        m = new_m
        start = stop
    return acc / l
"""),
    # --- kv_cache_bytes
    Alternative("kv_cache_bytes from an empty tensor's element size", KB, """
def kv_cache_bytes(cfg, num_tokens, batch_size=1, dtype=torch.float32, num_kv_heads=None):
    kv_heads = num_kv_heads or cfg.num_heads
    one = torch.empty((), dtype=dtype).element_size()
    per_layer = 2 * batch_size * kv_heads * num_tokens * (cfg.emb_dim // cfg.num_heads) * one
    return int(per_layer * cfg.num_layers)
"""),
    Alternative("kv_cache_bytes from the size of a cache's keys", KB, """
def kv_cache_bytes(cfg, num_tokens, batch_size=1, dtype=torch.float32, num_kv_heads=None):
    heads = cfg.num_heads if num_kv_heads is None else num_kv_heads
    keys = torch.empty(batch_size, heads, num_tokens, cfg.emb_dim // cfg.num_heads, dtype=dtype, device="meta")
    return 2 * cfg.num_layers * keys.numel() * keys.element_size()
"""),
    # --- GroupedQueryAttention
    Alternative("GroupedQueryAttention with expand instead of repeat_interleave", GQ, gqa(
        spread="(k[:, :, None].expand(b, self.num_kv_heads, group, t, self.head_dim).reshape(b, self.num_heads, t, "
               "self.head_dim), v[:, :, None].expand(b, self.num_kv_heads, group, t, self.head_dim).reshape(b, "
               "self.num_heads, t, self.head_dim))")),
    Alternative("GroupedQueryAttention with the query heads grouped, no copies of keys", GQ, """
import math
class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"cannot split d_out={d_out} into {num_heads} heads sharing {num_kv_heads}")
        self.d_out, self.num_heads, self.num_kv_heads = d_out, num_heads, num_kv_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length).triu(1).bool())

    def forward(self, x):
        b, t, _ = x.shape
        g, r, hd = self.num_kv_heads, self.num_heads // self.num_kv_heads, self.head_dim
        q = self.W_query(x).view(b, t, g, r, hd).permute(0, 2, 3, 1, 4)        # (B, G, R, T, hd)
        k = self.W_key(x).view(b, t, g, 1, hd).permute(0, 2, 3, 1, 4)          # (B, G, 1, T, hd)
        v = self.W_value(x).view(b, t, g, 1, hd).permute(0, 2, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)                     # (B, G, R, T, T)
        weights = self.dropout(scores.masked_fill(self.mask[:t, :t], float("-inf")).softmax(-1))
        context = (weights @ v).permute(0, 3, 1, 2, 4).reshape(b, t, self.d_out)
        return self.out_proj(context)
"""),
    # --- flash_attention
    Alternative("flash_attention with D summed block by block in a first backward pass", FA, flash(
        "delta = (grad_out * out).sum(dim=-1, keepdim=True)",
        "delta = sum(((torch.exp(((q @ k[..., s:s + ctx.block_size, :].transpose(-2, -1)) * scale).masked_fill("
        "(torch.arange(s, s + k[..., s:s + ctx.block_size, :].shape[-2], device=q.device)[None, :] > "
        "torch.arange(q.shape[-2], device=q.device)[:, None]) & ctx.causal, float('-inf')) - lse)) * "
        "(grad_out @ v[..., s:s + ctx.block_size, :].transpose(-2, -1))).sum(dim=-1, keepdim=True) "
        "for s in range(0, k.shape[-2], ctx.block_size))")),
    Alternative("flash_attention whose log-sum-exp is built with torch.logsumexp per block", FA, flash(
        "ctx.save_for_backward(q, k, v, out, m + torch.log(l))", """lse = torch.full_like(m, float("-inf"))
        for start in range(0, k.shape[-2], block_size):
            scores = (q @ k[..., start:start + block_size, :].transpose(-2, -1)) * scale
            if causal:
                cols = torch.arange(start, start + scores.shape[-1], device=q.device)[None, :]
                scores = scores.masked_fill(cols > rows, float("-inf"))
            lse = torch.logaddexp(lse, torch.logsumexp(scores, dim=-1, keepdim=True))
        ctx.save_for_backward(q, k, v, out, lse)""")),
]
