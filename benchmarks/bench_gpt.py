"""Benchmark of unit 08's TinyGPT: training throughput, where its time goes, and time to approach
the entropy floor.

    python benchmarks/bench_gpt.py                 # all parts (the last may take up to --cap minutes)
    python benchmarks/bench_gpt.py --skip-target   # throughput and profile only

1. Training throughput (tokens per second: forward, backward and an AdamW step) at 4 layers,
   4 heads, width 128, context 64, batch 12, of models of the same size, measured in alternating
   rounds of one run (the order rotating) and given as ratios to the last:
   - the reference TinyGPT as unit 08 teaches it (explicit attention, LayerNorm and GELU by hand);
   - the same with one hand-written part at a time swapped for its built-in twin: the difference
     in step time is what that part costs;
   - its fast path, FastGPT: the same model and parameters run through PyTorch's built-ins (one
     matrix product for queries, keys and values, F.layer_norm, the built-in GELU, SDPA);
   - a minimal GPT written with built-ins only, the shape of the best minimal GPT code.
2. A profile (torch.profiler) of the taught model's training step: the operators it spends its
   time on.
3. Wall time for the fast path to reach a validation loss within 5% of the corpus's entropy floor
   (data/corpus_stats.json), evaluated every --eval-every steps on a fixed set of validation
   windows; it stops at the target or at the time cap and says which.

The taught model below is a copy of the reference solution of solutions/08_tiny_gpt (the given
blocks of unit 07 and the TinyGPT exercise), and the fast path a copy of the notebook's: keep them
in step when either changes (tests/test_benchmark_model.py checks it).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = Path(__file__).resolve().parent.parent / "data"


# --- the reference model (mirrors unit 08's solution notebook) --------------------------------

class LayerNorm(nn.Module):
    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        var = (centred * centred).mean(dim=-1, keepdim=True)
        return self.scale * centred / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class FeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), GELU(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length, dtype=torch.bool),
                                                diagonal=1))

    def forward(self, x):                                                              # (B, T, d_in)
        b, t, _ = x.shape
        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.W_key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)                    # (B, H, T, T)
        weights = torch.softmax(scores.masked_fill(self.mask[:t, :t], float("-inf")), dim=-1)
        context = self.dropout(weights) @ v                                            # (B, H, T, hd)
        return self.out_proj(context.transpose(1, 2).contiguous().view(b, t, self.d_out))


class TransformerBlock(nn.Module):
    def __init__(self, emb_dim, num_heads, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.att = MultiHeadAttention(emb_dim, emb_dim, context_length, dropout, num_heads, qkv_bias)
        self.ff = FeedForward(emb_dim)
        self.norm1 = LayerNorm(emb_dim)
        self.norm2 = LayerNorm(emb_dim)
        self.drop_shortcut = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


@dataclass
class GPTConfig:
    vocab_size: int
    context_length: int
    emb_dim: int
    num_heads: int
    num_layers: int
    dropout: float = 0.0
    qkv_bias: bool = False


class TinyGPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.emb_dim)
        self.drop_emb = nn.Dropout(cfg.dropout)
        self.blocks = nn.Sequential(*[TransformerBlock(cfg.emb_dim, cfg.num_heads, cfg.context_length, cfg.dropout,
                                                       cfg.qkv_bias) for _ in range(cfg.num_layers)])
        self.final_norm = LayerNorm(cfg.emb_dim)
        self.out_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        _, t = idx.shape
        if t > self.cfg.context_length:
            raise ValueError(f"the input has {t} tokens but context_length is {self.cfg.context_length}")
        x = self.drop_emb(self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device)))
        logits = self.out_head(self.final_norm(self.blocks(x)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# --- the fast path (mirrors unit 08's): the same parameters, PyTorch's built-ins --------------------

class FastGPT(nn.Module):
    """A taught TinyGPT run through PyTorch's fused built-ins, on the model's own parameters:
    F.layer_norm, the built-in GELU, F.scaled_dot_product_attention, and one matrix product per
    block for the queries, keys and values (`qkv`, see `joined_linear`). Training this trains
    `model`. Move the model to its device before wrapping it."""

    def __init__(self, model: TinyGPT):
        super().__init__()
        self.model, self.cfg = model, model.cfg
        self.qkv = nn.ModuleList(joined_linear(b.att.W_query, b.att.W_key, b.att.W_value) for b in model.blocks)

    @staticmethod
    def norm(norm: LayerNorm, x):
        return F.layer_norm(x, norm.scale.shape, norm.scale, norm.shift, norm.eps)

    @staticmethod
    def attention(att: MultiHeadAttention, qkv: nn.Linear, x):                         # (B, T, d_in)
        if att.W_query.weight.data_ptr() != qkv.weight.data_ptr():
            raise RuntimeError("the model's W_query no longer lives in FastGPT's joined weight (was the model moved "
                               "with .to() after wrapping?): wrap it again, after moving it")
        b, t, _ = x.shape
        q, k, v = (part.view(b, t, att.num_heads, att.head_dim).transpose(1, 2)
                   for part in qkv(x).split(att.d_out, dim=-1))                         # (B, H, T, hd)
        context = F.scaled_dot_product_attention(q, k, v, dropout_p=att.dropout.p if att.training else 0.0,
                                                 is_causal=True)                        # (B, H, T, hd)
        return att.out_proj(context.transpose(1, 2).reshape(b, t, att.d_out))

    @staticmethod
    def feed_forward(ff: FeedForward, x):
        first, _, second = ff.layers
        return second(F.gelu(first(x), approximate="tanh"))

    def forward(self, idx, targets=None):
        m = self.model
        _, t = idx.shape
        if t > self.cfg.context_length:
            raise ValueError(f"the input has {t} tokens but context_length is {self.cfg.context_length}")
        x = m.drop_emb(m.tok_emb(idx) + m.pos_emb(torch.arange(t, device=idx.device)))  # (B, T, C)
        for block, qkv in zip(m.blocks, self.qkv):
            x = x + block.drop_shortcut(self.attention(block.att, qkv, self.norm(block.norm1, x)))
            x = x + block.drop_shortcut(self.feed_forward(block.ff, self.norm(block.norm2, x)))
        logits = m.out_head(self.norm(m.final_norm, x))                                  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def joined_linear(*parts: nn.Linear) -> nn.Linear:
    """One Linear that computes all of `parts` (Linears of the same input) in one matrix product.
    Its weight holds theirs one under another (and its bias theirs), and theirs become views of
    its rows: the same memory, so whatever trains it trains them, with nothing to copy back."""
    first = parts[0]
    joined = nn.Linear(first.in_features, sum(p.out_features for p in parts), bias=first.bias is not None,
                       device=first.weight.device, dtype=first.weight.dtype)
    for name in ("weight", "bias") if first.bias is not None else ("weight",):
        whole = getattr(joined, name)
        whole.data.copy_(torch.cat([getattr(p, name).data for p in parts]))
        for part, rows in zip(parts, whole.data.split([p.out_features for p in parts])):
            getattr(part, name).data = rows   # now a view of `whole`
    return joined


# --- a minimal GPT of the same size, built-ins only ---------------------------------------------------

class MinimalBlock(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.emb_dim), nn.LayerNorm(cfg.emb_dim)
        self.c_attn = nn.Linear(cfg.emb_dim, 3 * cfg.emb_dim, bias=cfg.qkv_bias)
        self.c_proj = nn.Linear(cfg.emb_dim, cfg.emb_dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.emb_dim, 4 * cfg.emb_dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * cfg.emb_dim, cfg.emb_dim))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.num_heads, -1).transpose(1, 2) for z in (q, k, v))  # (B, H, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln_2(x))


class MinimalGPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.emb_dim), nn.Embedding(cfg.context_length, cfg.emb_dim)
        self.h = nn.Sequential(*[MinimalBlock(cfg) for _ in range(cfg.num_layers)])
        self.ln_f = nn.LayerNorm(cfg.emb_dim)
        self.lm_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        logits = self.lm_head(self.ln_f(self.h(x)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# --- helpers ----------------------------------------------------------------------------------

def get_batch(data, block_size, batch_size, generator=None):
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator).tolist()
    x = torch.stack([data[s:s + block_size] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + block_size] for s in starts])
    return x, y


def learning_rate(step, steps, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def val_windows(data, context_length, min_context, max_windows=None):
    """Windows sliding along `data` so that every scored position (index >= min_context) sees
    at least min_context tokens, and each token is scored once; optionally an even subset."""
    starts = torch.arange(0, len(data) - context_length, context_length - min_context)
    if max_windows is not None and len(starts) > max_windows:
        starts = starts[torch.linspace(0, len(starts) - 1, max_windows).long()]
    x = torch.stack([data[s:s + context_length] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + 1 + context_length] for s in starts.tolist()])
    return x, y


@torch.no_grad()
def evaluate(model, x, y, min_context, device, batch_size=256):
    model.eval()
    total, count = 0.0, 0
    for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
        logits, _ = model(xb.to(device))
        scored = logits[:, min_context:]
        total += F.cross_entropy(scored.reshape(-1, scored.shape[-1]), yb[:, min_context:].reshape(-1).to(device),
                                 reduction="sum").item()
        count += yb[:, min_context:].numel()
    model.train()
    return total / count


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


# --- 1. throughput, 2. profile ----------------------------------------------------------------------

BENCH_CFG = dict(context_length=64, emb_dim=128, num_heads=4, num_layers=4)
BENCH_BATCH = 12


class BuiltinGELU(GELU):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


class BuiltinLayerNorm(LayerNorm):
    def forward(self, x):
        return FastGPT.norm(self, x)


class SDPAttention(MultiHeadAttention):
    def forward(self, x):                                                              # (B, T, d_in)
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                   for w in (self.W_query, self.W_key, self.W_value))                  # (B, H, T, hd)
        context = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout.p if self.training else 0.0,
                                                 is_causal=True)
        return self.out_proj(context.transpose(1, 2).contiguous().view(b, t, self.d_out))


# Each hand-written part of the taught model, and its built-in twin (same parameters, same result).
BUILT_IN = {"GELU": (GELU, BuiltinGELU), "LayerNorm": (LayerNorm, BuiltinLayerNorm),
            "attention": (MultiHeadAttention, SDPAttention)}


def with_built_in(model, part):
    """`model` with every module of one hand-written part running its built-in twin instead."""
    taught, built_in = BUILT_IN[part]
    for module in model.modules():
        if type(module) is taught:
            module.__class__ = built_in
    return model


def training_step(model, optimizer, x, y):
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def throughputs(data, vocab_size, device, rounds=5, steps=20, batch_size=BENCH_BATCH, seed=0):
    """Tokens per second of each model, in `rounds` alternating rounds of `steps` steps, the order
    rotating from round to round: whatever else the machine does slows all of them alike.
    The models: the taught one, the taught one with each hand-written part swapped for its
    built-in (what that part costs), the fast path and the minimal GPT, from the same start
    where the parameters match. Returns {name: [tokens/s per round]}."""
    cfg = GPTConfig(vocab_size=vocab_size, **BENCH_CFG)

    def taught():
        torch.manual_seed(seed)
        return TinyGPT(cfg).to(device)

    models = {"taught": taught(),
              **{f"taught, built-in {part}": with_built_in(taught(), part) for part in BUILT_IN},
              "fast path": FastGPT(taught()),
              "minimal": MinimalGPT(cfg).to(device)}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-3) for name, m in models.items()}
    gen = torch.Generator().manual_seed(seed)
    batches = [tuple(t.to(device) for t in get_batch(data, cfg.context_length, batch_size, gen)) for _ in range(steps)]
    for name, model in models.items():   # warm-up: first calls allocate and pick kernels
        for x, y in batches[:3]:
            training_step(model, optimizers[name], x, y)
    speeds = {name: [] for name in models}
    names = list(models)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync(device)
            start = time.perf_counter()
            for x, y in batches:
                training_step(models[name], optimizers[name], x, y)
            sync(device)
            speeds[name].append(steps * batch_size * cfg.context_length / (time.perf_counter() - start))
    return speeds


def profile(data, vocab_size, device, steps=10, batch_size=BENCH_BATCH, rows=15):
    """The operators the taught model's training step spends its time on."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cfg = GPTConfig(vocab_size=vocab_size, **BENCH_CFG)
    torch.manual_seed(0)
    model = TinyGPT(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    batches = [tuple(t.to(device) for t in get_batch(data, cfg.context_length, batch_size, gen)) for _ in range(steps)]
    training_step(model, optimizer, *batches[0])
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        for x, y in batches:
            training_step(model, optimizer, x, y)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


# --- 2. time to the target ------------------------------------------------------------------------

def time_to_target(train, val, vocab_size, floor, device, args):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab_size, **BENCH_CFG)
    model = FastGPT(TinyGPT(cfg).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(0)
    min_context = 48  # a line has at most 48 characters: every scored character sees its whole line
    vx, vy = val_windows(val, cfg.context_length, min_context, args.eval_windows or None)
    target = (1 + args.margin) * floor
    start, step, reached, evals = time.perf_counter(), 0, False, []
    eval_seconds = 0.0
    while step < args.max_steps:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.schedule_steps, args.lr, 100)
        x, y = get_batch(train, cfg.context_length, args.batch_size, gen)
        _, loss = model(x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % args.eval_every == 0:
            t0 = time.perf_counter()
            val_loss = evaluate(model, vx, vy, min_context, device)
            eval_seconds += time.perf_counter() - t0
            elapsed = time.perf_counter() - start
            evals.append((step, elapsed, val_loss))
            print(f"  step {step:5d}  {elapsed:7.1f} s  val {val_loss:.4f}  "
                  f"({100 * (val_loss / floor - 1):+.1f}% vs floor)", flush=True)
            if val_loss <= target:
                reached = True
                break
            if elapsed > args.cap * 60:
                break
    elapsed = time.perf_counter() - start
    fx, fy = val_windows(val, cfg.context_length, min_context)
    full = evaluate(model, fx, fy, min_context, device)
    return reached, step, elapsed, eval_seconds, full, target, len(vx)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-target", action="store_true", help="measure the throughput and profile only")
    parser.add_argument("--rounds", type=int, default=7, help="alternating throughput rounds")
    parser.add_argument("--round-steps", type=int, default=15, help="training steps per model and round")
    parser.add_argument("--cap", type=float, default=15.0, help="time cap of the second part, in minutes")
    parser.add_argument("--margin", type=float, default=0.05, help="target: floor * (1 + margin)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--schedule-steps", type=int, default=1500,
                        help="length of the warm-up + cosine decay (then the rate stays at a tenth)")
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-windows", type=int, default=0,
                        help="evaluate on this many evenly spaced val windows (0: all, each character once)")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_text = (DATA / "train.txt").read_text(encoding="utf-8")
    val_text = (DATA / "val.txt").read_text(encoding="utf-8")
    floor = json.loads((DATA / "corpus_stats.json").read_text(encoding="utf-8"))["val_entropy_nats_per_char"]
    chars = sorted(set(train_text + val_text))
    stoi = {c: i for i, c in enumerate(chars)}
    train = torch.tensor([stoi[c] for c in train_text])
    val = torch.tensor([stoi[c] for c in val_text])
    print(f"device: {device}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")

    print(f"1. training throughput, 4 layers x 4 heads, width 128, context 64, batch {BENCH_BATCH}, AdamW; "
          f"{args.rounds} alternating rounds of {args.round_steps} steps")
    speeds = throughputs(train, len(chars), device, rounds=args.rounds, steps=args.round_steps)
    tokens_per_step = BENCH_BATCH * BENCH_CFG["context_length"]
    median = {name: statistics.median(per_round) for name, per_round in speeds.items()}
    for name, per_round in speeds.items():
        print(f"   {name:27s} {median[name]:7,.0f} tokens/s {1000 * tokens_per_step / median[name]:5.1f} ms/step "
              f"x{median[name] / median['minimal']:.2f} of minimal "
              f"(rounds {', '.join(f'{v:,.0f}' for v in per_round)})")
    for name in ("taught", "fast path"):
        ratios = [m / b for m, b in zip(speeds[name], speeds["minimal"])]
        print(f"   {name} / minimal per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    step_ms = {name: 1000 * tokens_per_step / v for name, v in median.items()}
    costs = {part: step_ms["taught"] - step_ms[f"taught, built-in {part}"] for part in BUILT_IN}
    print(f"   the taught step is {step_ms['taught'] - step_ms['minimal']:.1f} ms slower than the minimal one; "
          "its hand-written parts cost, beyond their built-ins: "
          + ", ".join(f"{part} {ms:.1f} ms" for part, ms in costs.items()))
    print("2. where the taught model's training step spends its time (torch.profiler, 10 steps)")
    print(profile(train, len(chars), device))
    if args.skip_target:
        return

    print(f"3. time to within {100 * args.margin:.0f}% of the entropy floor ({floor:.4f} nats/char) on val, "
          f"fast path, batch {args.batch_size}, lr {args.lr}, cosine over {args.schedule_steps} steps, "
          f"cap {args.cap:g} min")
    reached, steps, seconds, eval_seconds, full, target, windows = time_to_target(train, val, len(chars), floor,
                                                                                  device, args)
    if reached:
        print(f"   reached the target (loss <= {target:.4f}) on {windows} val windows after {steps} steps, "
              f"{seconds:.0f} s wall time "
              f"({seconds - eval_seconds:.0f} s training, {eval_seconds:.0f} s evaluating)")
    else:
        print(f"   NOT reached: stopped by the {args.cap:g}-minute cap after {steps} steps, {seconds:.0f} s")
    print(f"   whole validation text at that point: {full:.4f} nats/char ({100 * (full / floor - 1):+.1f}% vs floor)")


if __name__ == "__main__":
    main()
