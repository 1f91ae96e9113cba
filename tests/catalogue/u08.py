"""Unit 08 — a tiny GPT."""
from . import Alternative, Mistake

UNIT = "08_tiny_gpt"

TOK = "u08_char_tokenizer"
BATCH = "u08_get_batch"
GPT = "u08_tinygpt"
STEP = "u08_train_step"
SAMPLE = "u08_sample_next_token"
GEN = "u08_generate"
COUNT = "u08_gpt_param_count"

# The reference TinyGPT with one line changed, for the model's mistakes.
_GPT = '''
class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.emb_dim)
        self.drop_emb = nn.Dropout(cfg.dropout)
        self.blocks = nn.Sequential(*[TransformerBlock(cfg.emb_dim, cfg.num_heads, cfg.context_length,
                                                       cfg.dropout, cfg.qkv_bias) for _ in range(cfg.num_layers)])
        self.final_norm = LayerNorm(cfg.emb_dim)
        self.out_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        CHECK
        x = EMBED
        x = self.drop_emb(x)
        x = self.blocks(x)
        logits = self.out_head(self.final_norm(x))
        if targets is None:
            return logits, None
        LOSS
        return logits, loss
'''
_CHECK = ('if T > self.cfg.context_length:\n'
          '            raise ValueError(f"T={T} is longer than context_length={self.cfg.context_length}")')
_EMBED = "self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))"
_LOSS = "loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))"


def gpt(check=_CHECK, embed=_EMBED, loss=_LOSS):
    return _GPT.replace("CHECK", check).replace("EMBED", embed).replace("LOSS", loss)


# The reference sampler with one part changed.
_SAMPLER = '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    TEMPERATURE
    if top_k is not None:
        TOPK
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cum = sorted_probs.cumsum(dim=-1)
        TOPP
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, 1, generator=generator)
'''
_TEMPERATURE = "logits = logits / temperature"
_TOPK = ("kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]\n"
         "        logits = logits.masked_fill(logits < kth, float('-inf'))")
_TOPP = "keep_sorted = cum - sorted_probs < top_p"


def sampler(temperature=_TEMPERATURE, topk=_TOPK, topp=_TOPP):
    return _SAMPLER.replace("TEMPERATURE", temperature).replace("TOPK", topk).replace("TOPP", topp)


# The reference generate with one part changed.
_GENERATE = '''
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    was_training = model.training
    EVAL
    with GRAD:
        for _ in range(max_new_tokens):
            logits, _ = model(CROP)
            nxt = sample_next_token(logits[:, -1, :], SAMPLING)
            idx = torch.cat((idx, nxt), dim=1)
    RESTORE
    return idx
'''


def generator_code(eval_="model.eval()", grad="torch.no_grad()", crop="idx[:, -model.cfg.context_length:]",
                   sampling="temperature, top_k, top_p, generator", restore="model.train(was_training)"):
    return (_GENERATE.replace("EVAL", eval_).replace("GRAD", grad).replace("CROP", crop)
            .replace("SAMPLING", sampling).replace("RESTORE", restore))


# The reference parameter count with one part changed.
_COUNT = '''
def gpt_param_count(cfg, tied=False):
    V, C, E = cfg.vocab_size, cfg.context_length, cfg.emb_dim
    att = ATT
    ff = FF
    norms = NORMS
    blocks = BLOCKS
    head = HEAD
    counts = {"tok_emb": V * E, "pos_emb": POS, "att": att, "ff": ff, "norms": norms, "blocks": blocks,
              "final_norm": 2 * E, "out_head": head}
    counts["total"] = TOTAL
    return counts
'''


def counter(att="4 * E * E + (3 * E if cfg.qkv_bias else 0) + E", ff="8 * E * E + 5 * E", norms="4 * E",
            blocks="cfg.num_layers * (att + ff + norms)", head="0 if tied else V * E", pos="C * E",
            total="V * E + C * E + blocks + 2 * E + head"):
    return (_COUNT.replace("ATT", att).replace("FF", ff).replace("NORMS", norms).replace("BLOCKS", blocks)
            .replace("HEAD", head).replace("POS", pos).replace("TOTAL", total))


MISTAKES = [
    Mistake("a broken sample_next_token, seen from generate", SAMPLE, """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    probs = torch.softmax(logits / temperature, dim=-1) - 0.5
    return torch.multinomial(probs, 1, generator=generator)
""", "in sample_next_token", graded_at=GEN),
    # --- tokenizer
    Mistake("ids in order of first appearance", TOK, """
class CharTokenizer:
    def __init__(self, text):
        self.chars = list(dict.fromkeys(text))
        self.vocab_size = len(self.chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}
    def encode(self, s):
        for c in s:
            if c not in self.stoi:
                raise ValueError(f"unknown character {c!r}")
        return [self.stoi[c] for c in s]
    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)
""", "sorted order"),
    Mistake("ids from an unsorted set", TOK, """
class CharTokenizer:
    def __init__(self, text):
        self.chars = list(set(text))
        self.vocab_size = len(self.chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}
    def encode(self, s):
        for c in s:
            if c not in self.stoi:
                raise ValueError(f"unknown character {c!r}")
        return [self.stoi[c] for c in s]
    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)
""", "expected list"),
    Mistake("unknown character raises KeyError", TOK, """
class CharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}
    def encode(self, s):
        return [self.stoi[c] for c in s]
    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)
""", "raised KeyError"),
    Mistake("unknown character silently skipped", TOK, """
class CharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}
    def encode(self, s):
        return [self.stoi[c] for c in s if c in self.stoi]
    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)
""", "accepted without an error"),
    Mistake("ValueError that does not name the character", TOK, """
class CharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}
    def encode(self, s):
        if any(c not in self.stoi for c in s):
            raise ValueError("unknown character in the input")
        return [self.stoi[c] for c in s]
    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)
""", "does not name the character"),
    Mistake("dict decode fails on a tensor", TOK, """
class CharTokenizer:
    def __init__(self, text):
        chars = sorted(set(text))
        self.vocab_size = len(chars)
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.itos = {i: c for i, c in enumerate(chars)}
    def encode(self, s):
        for c in s:
            if c not in self.stoi:
                raise ValueError(f"unknown character {c!r}")
        return [self.stoi[c] for c in s]
    def decode(self, ids):
        return "".join(self.itos[i] for i in ids)
""", "1-D tensor of ids"),
    # --- batches
    Mistake("targets not shifted (y = x)", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts])
    return x, x.clone()
""", "not x shifted by one"),
    Mistake("last start never drawn (randint bound off by one)", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts])
    y = torch.stack([data[s + 1:s + block_size + 1] for s in starts])
    return x, y
""", "last valid start"),
    Mistake("starts up to len(data) - block_size (one too far)", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size + 1, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts])
    y = torch.stack([data[s + 1:s + block_size + 1] for s in starts])
    return x, y
""", "ran past the end of data"),
    Mistake("start 0 never drawn", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(1, len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts])
    y = torch.stack([data[s + 1:s + block_size + 1] for s in starts])
    return x, y
""", "start 0 is never drawn"),
    Mistake("generator ignored", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size, (batch_size,))
    x = torch.stack([data[s:s + block_size] for s in starts])
    y = torch.stack([data[s + 1:s + block_size + 1] for s in starts])
    return x, y
""", "pass `generator`"),
    Mistake("float tensors returned", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts]).float()
    y = torch.stack([data[s + 1:s + block_size + 1] for s in starts]).float()
    return x, y
""", "must be a long tensor"),
    Mistake("targets from starts of their own", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + 1 + block_size] for s in offsets.tolist()])
    return x.long(), y.long()
""", "y is not x shifted by one"),
    # --- the model
    Mistake("pos_emb(idx) instead of the positions", GPT,
            gpt(embed="self.tok_emb(idx) + self.pos_emb(idx)"), "pos_emb(idx)"),
    Mistake("no position embedding", GPT, gpt(embed="self.tok_emb(idx)"), "position embedding is missing"),
    Mistake("token embeddings scaled by sqrt(emb_dim)", GPT,
            gpt(embed="self.tok_emb(idx) * self.cfg.emb_dim ** 0.5 + self.pos_emb(torch.arange(T, device=idx.device))"),
            "by √emb_dim"),
    Mistake("final_norm skipped", GPT, gpt().replace("self.out_head(self.final_norm(x))", "self.out_head(x)"),
            "final_norm is not applied"),
    Mistake("no clear error when T > context_length", GPT, gpt(check="pass"), "raised IndexError"),
    Mistake("loss averaged over the batch axis only", GPT,
            gpt(loss="loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction='none').mean(0)"),
            "averaged over the batch only"),
    Mistake("loss summed", GPT, gpt(loss="loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T), "
                                         "reduction='sum')"), "sum over positions"),
    Mistake("logits and targets flattened in different orders", GPT,
            gpt(loss="loss = F.cross_entropy(logits.reshape(B * T, -1), targets.T.reshape(-1))"),
            "flattened in different orders"),
    Mistake("softmax before cross_entropy", GPT,
            gpt(loss="loss = F.cross_entropy(torch.softmax(logits, -1).view(B * T, -1), targets.view(B * T))"),
            "softmax before F.cross_entropy"),
    Mistake("targets shifted again inside forward", GPT,
            gpt(loss="loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), "
                     "targets[:, 1:].reshape(-1))"),
            "shifted the targets inside forward"),
    Mistake("out_head with a bias", GPT, gpt().replace("cfg.vocab_size, bias=False)", "cfg.vocab_size)"),
            "unexpected: out_head.bias"),
    Mistake("weights tied between tok_emb and out_head", GPT,
            gpt().replace("cfg.vocab_size, bias=False)", "cfg.vocab_size, bias=False)\n"
                                                          "        self.out_head.weight = self.tok_emb.weight"),
            "missing: out_head.weight"),
    Mistake("blocks in a plain Python list", GPT,
            gpt().replace("self.blocks = nn.Sequential(*[", "self.block_list = ([")
                 .replace("x = self.blocks(x)", "for block in self.block_list:\n            x = block(x)"),
            "hold its modules in an nn.ModuleList"),
    Mistake("no loss None without targets", GPT,
            gpt().replace("return logits, None", "return logits"), "without targets must return (logits, None)"),
    Mistake("config not kept as cfg", GPT,
            gpt().replace("self.cfg = cfg", "self.config = cfg").replace("self.cfg.context_length",
                                                                          "self.config.context_length"),
            "keep its configuration as self.cfg"),
    Mistake("drop_emb never applied", GPT, gpt().replace("x = self.drop_emb(x)", "pass"),
            "drop_emb is never applied"),
    Mistake("dropout on token embeddings only", GPT,
            gpt(embed="self.drop_emb(self.tok_emb(idx)) + self.pos_emb(torch.arange(T, device=idx.device))")
            .replace("x = self.drop_emb(x)", "pass"), "token embeddings only"),
    Mistake("drop_emb with nn.Dropout's default rate", GPT, gpt().replace("nn.Dropout(cfg.dropout)", "nn.Dropout()"),
            "not cfg.dropout"),
    Mistake("dropout on the embeddings still active in eval()", GPT,
            gpt().replace("x = self.drop_emb(x)", "x = F.dropout(x, self.cfg.dropout, training=True)"),
            "in eval() mode your model still applies dropout"),
    # --- one training step
    # --- parameter count
    Mistake("out_proj's bias forgotten", COUNT, counter(att="4 * E * E + (3 * E if cfg.qkv_bias else 0)"),
            "out_proj's bias"),
    Mistake("the tied matrix counted twice in the total", COUNT,
            counter(total="V * E + C * E + blocks + 2 * E + V * E"), "counted twice"),
    Mistake("the tied head counted as the head's own", COUNT,
            counter(head="V * E", total="V * E + C * E + blocks + 2 * E + (0 if tied else V * E)"),
            "adds no parameters of its own"),
    Mistake("position embedding left out of the total", COUNT, counter(total="V * E + blocks + 2 * E + head"),
            "leaves out the position embedding"),
    Mistake("position embedding with vocab_size rows", COUNT, counter(pos="V * E"), "one row per position"),
    Mistake("one block counted", COUNT, counter(blocks="att + ff + norms"), "counted one block"),
    Mistake("every head with its own projections", COUNT,
            counter(att="cfg.num_heads * (3 * E * E + (3 * E if cfg.qkv_bias else 0)) + E * E + E"),
            "does not depend on num_heads"),
    Mistake("qkv_bias ignored", COUNT, counter(att="4 * E * E + E"), "with qkv_bias=True"),
    Mistake("feed-forward biases forgotten", COUNT, counter(ff="8 * E * E"), "biases of the feed-forward"),
    Mistake("one LayerNorm per block", COUNT, counter(norms="2 * E"), "two LayerNorms"),
    Mistake("out_head with a bias", COUNT, counter(head="0 if tied else V * E + V"), "out_head has no bias"),
    Mistake("total adds att, ff and norms again", COUNT, counter(total="sum(counts.values())"),
            "blocks already holds them"),
    Mistake("only the total returned", COUNT, counter().replace("    return counts", "    return counts['total']"),
            "must return a dict"),
    Mistake("a summed loss in train_step", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    logits, _ = model(x, y)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")
    loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""", "the sum over the positions"),
    Mistake("gradients never cleared", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    _, loss = model(x, y)
    loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
""", "gradients are never cleared"),
    Mistake("gradients cleared between backward and step", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    _, loss = model(x, y)
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
    return loss.item()
""", "parameters never change"),
    Mistake("step before backward", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    optimizer.step()
    _, loss = model(x, y)
    loss.backward()
    return loss.item()
""", "parameters never change"),
    Mistake("max_norm ignored", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    optimizer.step()
    return loss.item()
""", "not clipped"),
    Mistake("clipping after the step", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    optimizer.step()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.item()
""", "not clipped"),
    Mistake("loss returned as a tensor", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss
""", "Python float"),
    # --- sampling
    Mistake("temperature multiplied", SAMPLE, sampler(temperature="logits = logits * temperature"),
            "multiplied the logits by the temperature"),
    Mistake("temperature ignored", SAMPLE, sampler(temperature="pass"), "temperature is ignored"),
    Mistake("top-k keeps k + 1", SAMPLE,
            sampler(topk="kth = torch.topk(logits, min(top_k + 1, logits.shape[-1])).values[:, -1:]\n"
                         "        logits = logits.masked_fill(logits < kth, float('-inf'))"), "kept k + 1 tokens"),
    Mistake("top-k keeps k - 1 (strict comparison)", SAMPLE,
            sampler(topk="kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]\n"
                         "        logits = logits.masked_fill(logits <= kth, float('-inf'))"), "kept k - 1 tokens"),
    Mistake("top-k filtered to 0 instead of -inf", SAMPLE,
            sampler(topk="kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]\n"
                         "        logits = logits.masked_fill(logits < kth, 0.0)"), "logit of 0"),
    Mistake("top-k not clamped to V", SAMPLE,
            sampler(topk="kth = torch.topk(logits, top_k).values[:, -1:]\n"
                         "        logits = logits.masked_fill(logits < kth, float('-inf'))"),
            "larger than the vocabulary"),
    Mistake("nucleus summed in the tokens' own order", SAMPLE, sampler(
        topp="keep_sorted = probs.cumsum(dim=-1) - probs < top_p\n"
             "        order = torch.arange(probs.shape[-1]).expand_as(probs)"), "in the tokens' own order"),
    Mistake("nucleus summed from the least likely token up", SAMPLE, sampler(
        topp="sorted_probs, order = probs.sort(dim=-1)\n"
             "        keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p"),
            "from the least likely token up"),
    Mistake("nucleus mask applied in sorted order", SAMPLE, sampler().replace(
        "keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)", "keep = keep_sorted"),
            "scatter it back"),
    Mistake("top-p drops the tokens below p (seed 001's description)", SAMPLE,
            sampler(topp="keep_sorted = sorted_probs >= top_p"), "dropped the tokens whose probability is below p"),
    Mistake("nucleus without the token that crosses p", SAMPLE,
            sampler(topp="keep_sorted = cum <= top_p"), "leaves out the token that makes the running sum reach p",
            ),
    Mistake("nucleus without the crossing token, at least one kept", SAMPLE,
            sampler(topp="keep_sorted = cum <= top_p\n        keep_sorted[:, 0] = True"),
            "leaves out the token that makes the running sum reach p"),
    Mistake("temperature 0 divides by zero", SAMPLE, sampler().replace(
        "    if temperature == 0:\n        return logits.argmax(dim=-1, keepdim=True)\n", ""),
        "temperature 0 means argmax"),
    Mistake("generator ignored in sampling", SAMPLE,
            sampler().replace("torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)"),
            "pass `generator`"),
    Mistake("returns shape (B,)", SAMPLE,
            sampler().replace("torch.multinomial(probs, 1, generator=generator)",
                              "torch.multinomial(probs, 1, generator=generator)[:, 0]"), "shape (B, 1)"),
    # --- generate
    Mistake("context not cropped", GEN, generator_code(crop="idx"), "crop the input"),
    Mistake("each token from the first position's logits", GEN,
            generator_code().replace("logits[:, -1, :]", "logits[:, 0, :]"),
            "the first position's logits"),
    Mistake("context cropped to context_length - 1", GEN,
            generator_code(crop="idx[:, -(model.cfg.context_length - 1):]"), "context_length - 1"),
    Mistake("dropout active while sampling (no eval)", GEN, generator_code(eval_="pass", restore="pass"),
            "dropout was active"),
    Mistake("mode not restored", GEN, generator_code(restore="pass"), "leaves the model in eval mode"),
    Mistake("always back to train mode", GEN, generator_code(restore="model.train()"),
            "switches the model to train mode"),
    Mistake("gradients tracked", GEN, generator_code(grad="torch.enable_grad()"), "torch.no_grad()"),
    Mistake("only the new tokens returned", GEN, generator_code().replace(
        "    return idx\n", "    return idx[:, -max_new_tokens:]\n"), "only the new tokens"),
    Mistake("top_k not passed on", GEN, generator_code(sampling="temperature, None, top_p, generator"),
            "top_k is not passed on"),
    Mistake("generator not passed on", GEN, generator_code(sampling="temperature, top_k, top_p"),
            "`generator` is not passed on"),
    Mistake("no sampling option passed on", GEN, generator_code(sampling=""), "drops the sampling options"),
    # --- categories a learner's code may meet: gradients held before the call, forward without targets,
    # --- probabilities where logits are expected, the dtype of token ids, layers left in train mode
    Mistake("gradients cleared after the step only", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    loss = model(x, y)[1]
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach().item()
""", "already held when train_step was called"),
    Mistake("loss of a second forward pass after the step", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    with torch.no_grad():
        return model(x, y)[1].item()
""", "loss after the step"),
    Mistake("forward called without the targets", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    _, loss = model(x)
    loss.backward()
    optimizer.step()
    return loss.item()
""", "without the targets"),
    Mistake("logits of the last position only without targets (nanoGPT's inference shortcut)", GPT,
            gpt().replace("        logits = self.out_head(self.final_norm(x))\n        if targets is None:\n"
                          "            return logits, None\n",
                          "        if targets is None:\n"
                          "            return self.out_head(self.final_norm(x[:, [-1], :])), None\n"
                          "        logits = self.out_head(self.final_norm(x))\n"),
            "the logits of the last position only"),
    Mistake("probabilities returned as the logits", GPT,
            gpt().replace("logits = self.out_head(self.final_norm(x))",
                          "logits = torch.softmax(self.out_head(self.final_norm(x)), dim=-1)"),
            "your forward returns probabilities"),
    Mistake("logits returned flattened (B*T, V)", GPT,
            gpt(loss="logits = logits.view(B * T, -1)\n        loss = F.cross_entropy(logits, targets.view(B * T))"),
            "flattened to (B*T, V)"),
    Mistake("loss computed even without targets", GPT,
            gpt().replace("        if targets is None:\n            return logits, None\n", ""),
            "called without targets"),
    Mistake("softmax applied twice before drawing", SAMPLE,
            sampler().replace("return torch.multinomial(probs, 1, generator=generator)",
                              "return torch.multinomial(torch.softmax(probs, dim=-1), 1, generator=generator)"),
            "softmax twice"),
    Mistake("top-k on probabilities, then a second softmax", SAMPLE, sampler(topk="pass").replace(
        "    probs = torch.softmax(logits, dim=-1)\n",
        "    probs = torch.softmax(logits, dim=-1)\n"
        "    if top_k is not None:\n"
        "        kth = torch.topk(probs, min(top_k, probs.shape[-1])).values[:, -1:]\n"
        "        probs = torch.softmax(probs.masked_fill(probs < kth, float('-inf')), dim=-1)\n"), "softmax twice",
        ),   # on the self-check's top-k example it moves the distribution by a total variation of
    # 0.10, less than the 0.12 by which the sampling judge tells a named mistake from a right answer
    Mistake("token ids as int32", SAMPLE,
            sampler().replace("torch.multinomial(probs, 1, generator=generator)",
                              "torch.multinomial(probs, 1, generator=generator).int()"), "dtype torch.long"),
    Mistake("windows keep the dtype of data", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts])
    y = torch.stack([data[s + 1:s + block_size + 1] for s in starts])
    return x, y
""", "kept the dtype of data"),
    Mistake("probabilities passed to sample_next_token", GEN,
            generator_code().replace("sample_next_token(logits[:, -1, :], ",
                                     "sample_next_token(torch.softmax(logits[:, -1, :], dim=-1), "),
            "the softmax was applied twice"),
    Mistake("tempered probabilities passed to sample_next_token", GEN,
            generator_code(sampling="1.0 if temperature else 0.0, top_k, top_p, generator").replace(
                "sample_next_token(logits[:, -1, :], ",
                "sample_next_token(torch.softmax(logits[:, -1, :] / (temperature or 1.0), dim=-1), "),
            "the softmax was applied twice"),
    Mistake("temperature applied in generate and again in the sampler", GEN,
            generator_code().replace("sample_next_token(logits[:, -1, :], ",
                                     "sample_next_token(logits[:, -1, :] / (temperature or 1.0), "),
            "divides them again"),
    Mistake("model.training = False instead of model.eval()", GEN,
            generator_code(eval_="model.training = False", restore="model.training = was_training"),
            "changes the flag of the model alone"),
    Mistake("mode restored by setting model.training", GEN, generator_code(restore="model.training = was_training"),
            "restored the mode by setting model.training"),
    Mistake("model(context) not unpacked", GEN, generator_code().replace("logits, _ = model(", "logits = model("),
            "returns the pair (logits, None)"),
]

ALTERNATIVES = [
    Alternative("tokenizer with list.index and a dict of ids to characters", TOK, """
class CharTokenizer:
    def __init__(self, text):
        self.vocab = sorted(set(text))
        self.vocab_size = len(self.vocab)
        self.itos = dict(enumerate(self.vocab))
    def encode(self, s):
        out = []
        for ch in s:
            if ch not in self.vocab:
                raise ValueError("Unknown character: " + ch)
            out.append(self.vocab.index(ch))
        return out
    def decode(self, ids):
        if torch.is_tensor(ids):
            ids = ids.tolist()
        return "".join(self.itos[int(i)] for i in ids)
"""),
    Alternative("tokenizer returning a tensor from encode, property vocab_size", TOK, """
class CharTokenizer:
    def __init__(self, text):
        self.chars = "".join(sorted(set(text)))
    @property
    def vocab_size(self):
        return len(self.chars)
    def encode(self, s):
        bad = [c for c in s if c not in self.chars]
        if bad:
            raise ValueError(f"not in vocabulary: {bad[0]}")
        return torch.tensor([self.chars.find(c) for c in s])
    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)
"""),
    Alternative("get_batch with unfold and index_select", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    windows = data.unfold(0, block_size + 1, 1)          # (N - T, T + 1)
    rows = torch.randint(len(windows), (batch_size,), generator=generator)
    chosen = windows.index_select(0, rows)
    return chosen[:, :-1].long(), chosen[:, 1:].long()
"""),
    Alternative("get_batch with torch.multinomial over uniform weights and gather", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    n = len(data) - block_size
    starts = torch.multinomial(torch.ones(n), batch_size, replacement=True, generator=generator)
    offsets = torch.arange(block_size)
    x = data[starts[:, None] + offsets]
    y = data[starts[:, None] + offsets + 1]
    return x.long(), y.long()
"""),
    Alternative("TinyGPT with a ModuleList loop, F.cross_entropy with a transpose", GPT, """
class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.emb_dim)
        self.drop_emb = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(TransformerBlock(cfg.emb_dim, cfg.num_heads, cfg.context_length,
                                                     cfg.dropout, qkv_bias=cfg.qkv_bias)
                                    for _ in range(cfg.num_layers))
        self.final_norm = LayerNorm(cfg.emb_dim)
        self.out_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        n = idx.size(1)
        assert idx.dim() == 2
        if n > self.cfg.context_length:
            raise ValueError(f"Cannot forward sequence of length {n}, block size is only {self.cfg.context_length}")
        pos = self.pos_emb.weight[:n]
        h = self.drop_emb(self.tok_emb(idx) + pos.unsqueeze(0))
        for block in self.blocks:
            h = block(h)
        logits = self.out_head(self.final_norm(h))
        loss = None if targets is None else F.cross_entropy(logits.transpose(1, 2), targets)
        return logits, loss
"""),
    Alternative("TinyGPT with a hand-written log-softmax loss", GPT, _GPT.replace("CHECK", _CHECK)
                .replace("EMBED", "self.tok_emb(idx) + self.pos_emb.weight[torch.arange(T)]")
                .replace("LOSS", "logp = torch.log_softmax(logits, dim=-1)\n"
                                 "        loss = -logp.gather(-1, targets.unsqueeze(-1)).mean()")),
    Alternative("TinyGPT applying dropout with F.dropout and the module's mode", GPT,
                gpt().replace("x = self.drop_emb(x)", "x = F.dropout(x, self.drop_emb.p, self.training)")),
    Alternative("parameter count of TinyGPT built on the meta device", COUNT, """
def gpt_param_count(cfg, tied=False):
    with torch.device("meta"):                  # shapes only: no memory, fast even for GPT-2
        model = TinyGPT(cfg)
    if tied:
        model.out_head.weight = model.tok_emb.weight

    def n(*modules):
        return sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values())

    block = model.blocks[0]
    return {"tok_emb": n(model.tok_emb), "pos_emb": n(model.pos_emb), "att": n(block.att), "ff": n(block.ff),
            "norms": n(block.norm1, block.norm2), "blocks": n(model.blocks), "final_norm": n(model.final_norm),
            "out_head": 0 if tied else n(model.out_head), "total": n(model)}
"""),
    Alternative("parameter count with a helper per layer type and numpy ints", COUNT, """
import numpy as np

def gpt_param_count(cfg, tied=False):
    def linear(n_in, n_out, bias=True):
        return n_in * n_out + (n_out if bias else 0)
    def layer_norm(e):
        return 2 * e
    E = cfg.emb_dim
    att = sum(linear(E, E, cfg.qkv_bias) for _ in "qkv") + linear(E, E)
    ff = linear(E, 4 * E) + linear(4 * E, E)
    norms = 2 * layer_norm(E)
    parts = {"tok_emb": np.int64(cfg.vocab_size * E), "pos_emb": cfg.context_length * E, "att": att, "ff": ff,
             "norms": norms, "blocks": cfg.num_layers * (att + ff + norms), "final_norm": layer_norm(E),
             "out_head": 0 if tied else linear(E, cfg.vocab_size, bias=False)}
    parts["total"] = sum(v for k, v in parts.items() if k not in ("att", "ff", "norms"))
    return parts
"""),
    Alternative("train_step with model.zero_grad, hand-written clipping and float()", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    model.zero_grad(set_to_none=False)
    logits, loss = model(x, targets=y)
    loss.backward()
    if max_norm:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        if norm > max_norm:
            for g in grads:
                g.mul_(max_norm / norm)
    optimizer.step()
    return float(loss)
"""),
    Alternative("train_step clearing the gradients both before and after the step", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    optimizer.zero_grad()
    loss = model(x, y)[1]
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach().item()
"""),
    Alternative("train_step calling forward without targets and computing the loss itself", STEP, """
def train_step(model, optimizer, x, y, max_norm=None):
    for p in model.parameters():
        p.grad = None
    logits, _ = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
"""),
    Alternative("get_batch with index arithmetic and .to(torch.long)", BATCH, """
def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(len(data) - block_size, (batch_size, 1), generator=generator)
    index = starts + torch.arange(block_size + 1)
    window = data[index].to(torch.long)
    return window[:, :-1], window[:, 1:]
"""),
    Alternative("TinyGPT with nanoGPT's layout, logits of every position also without targets", GPT, """
class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.emb_dim)
        self.drop_emb = nn.Dropout(cfg.dropout)
        self.blocks = nn.Sequential(*(TransformerBlock(cfg.emb_dim, cfg.num_heads, cfg.context_length, cfg.dropout,
                                                       cfg.qkv_bias) for _ in range(cfg.num_layers)))
        self.final_norm = LayerNorm(cfg.emb_dim)
        self.out_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        if t > self.cfg.context_length:
            raise ValueError(f"sequence of length {t} is longer than the context ({self.cfg.context_length})")
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop_emb(self.tok_emb(idx) + self.pos_emb(pos))
        x = self.final_norm(self.blocks(x))
        logits = self.out_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss
"""),
    Alternative("sampler with top-k through log-probabilities", SAMPLE, """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    if top_k is not None:
        k = min(top_k, logp.size(-1))
        v, _ = torch.topk(logp, k)
        logp = torch.where(logp < v[:, [-1]], torch.tensor(float("-inf")), logp)
    if top_p is not None:
        probs = torch.softmax(logp, -1)
        sp, si = torch.sort(probs, descending=True)
        drop = (sp.cumsum(-1) - sp) >= top_p
        logp = logp.scatter(-1, si, torch.where(drop, torch.tensor(float("-inf")), sp.log()))
    return torch.multinomial(torch.softmax(logp, -1), 1, generator=generator)
"""),
    Alternative("generate passing log-probabilities, which are logits too", GEN,
                generator_code().replace("sample_next_token(logits[:, -1, :], ",
                                         "sample_next_token(torch.log_softmax(logits[:, -1, :], dim=-1), ")),
    Alternative("generate applying the temperature itself and passing temperature 1", GEN, """
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(idx[:, -model.cfg.context_length:])[0][:, -1, :]
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                nxt = sample_next_token(logits / temperature, 1.0, top_k, top_p, generator)
            idx = torch.cat([idx, nxt], dim=1)
    model.train(was_training)
    return idx
"""),
    Alternative("sampler with torch.sort for top-k and inverse-CDF draws", SAMPLE, """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return torch.argmax(logits, dim=-1).unsqueeze(-1)
    z = logits / temperature
    if top_k is not None:
        values, _ = torch.sort(z, dim=-1, descending=True)
        cutoff = values[:, min(top_k, z.shape[-1]) - 1].unsqueeze(-1)
        z = torch.where(z < cutoff, torch.full_like(z, -float("inf")), z)
    if top_p is not None:
        p = F.softmax(z, dim=-1)
        sp, si = torch.sort(p, dim=-1, descending=True)
        remove = sp.cumsum(-1) > top_p
        remove[:, 1:] = remove[:, :-1].clone()
        remove[:, 0] = False
        z = z.scatter(-1, si, sp.log().masked_fill(remove, -float("inf")))
    p = F.softmax(z, dim=-1)
    u = torch.rand(p.shape[0], 1, generator=generator, dtype=p.dtype)
    cdf = p.cumsum(-1)
    return (cdf < u).sum(-1, keepdim=True).clamp(max=p.shape[-1] - 1)
"""),
    Alternative("sampler with a per-row Python loop", SAMPLE, """
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    rows = []
    for row in logits:
        if temperature == 0:
            rows.append(int(row.argmax()))
            continue
        z = row / temperature
        if top_k is not None and top_k < len(z):
            idx = torch.topk(z, top_k).indices
            kept = torch.full_like(z, float("-inf"))
            kept[idx] = z[idx]
            z = kept
        p = torch.softmax(z, 0)
        if top_p is not None:
            order = torch.argsort(p, descending=True)
            total, chosen = 0.0, []
            for i in order.tolist():
                chosen.append(i)
                total += float(p[i])
                if total >= top_p:
                    break
            q = torch.zeros_like(p)
            q[chosen] = p[chosen]
            p = q / q.sum()
        rows.append(int(torch.multinomial(p, 1, generator=generator)))
    return torch.tensor(rows).view(-1, 1)
"""),
    Alternative("generate with a decorator and argmax written in", GEN, """
@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    mode = model.training
    model.eval()
    limit = model.cfg.context_length
    for _ in range(max_new_tokens):
        cond = idx if idx.size(1) <= limit else idx[:, idx.size(1) - limit:]
        logits = model(cond)[0][:, -1, :]
        if temperature == 0:
            nxt = torch.argmax(logits, dim=-1, keepdim=True)
        else:
            nxt = sample_next_token(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        idx = torch.cat([idx, nxt], dim=-1)
    if mode:
        model.train()
    return idx
"""),
    Alternative("generate reading the context length from the position embedding's rows", GEN,
                generator_code(crop="idx[:, -model.pos_emb.num_embeddings:]")),
    Alternative("generate reading the context length from pos_emb.weight's shape", GEN,
                generator_code(crop="idx[:, -model.pos_emb.weight.shape[0]:]")),
    Alternative("generate collecting tokens in a list, inference_mode", GEN, """
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    previous = model.training
    model.train(False)
    out = [idx]
    seq = idx
    try:
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                logits, _ = model(seq[:, -model.cfg.context_length:])
                nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
                out.append(nxt)
                seq = torch.cat(out, dim=1)
    finally:
        model.train(previous)
    return seq
"""),
]
