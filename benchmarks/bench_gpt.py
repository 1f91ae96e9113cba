"""Benchmark of unit 08's TinyGPT: training throughput and time to approach the entropy floor.

    python benchmarks/bench_gpt.py                 # both parts (the second may take up to --cap minutes)
    python benchmarks/bench_gpt.py --skip-target   # throughput only

1. Training throughput (tokens per second: forward, backward and an AdamW step) of the
   reference TinyGPT at 4 layers, 4 heads, width 128, context 64, batch 12, once with the
   explicit attention of the notebook and once with F.scaled_dot_product_attention swapped in.
2. Wall time for the reference model to reach a validation loss within 5% of the corpus's
   entropy floor (data/corpus_stats.json), evaluated every --eval-every steps on a fixed set of
   validation windows; it stops at the target or at the time cap and says which.

The model below is a copy of the reference solution of solutions/08_tiny_gpt (the given blocks
of unit 07 and the TinyGPT exercise): keep the two in step when either changes.
"""
from __future__ import annotations

import argparse
import json
import math
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
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


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
    use_sdpa = False  # class switch: True uses F.scaled_dot_product_attention

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
        if self.use_sdpa:
            context = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout.p if self.training else 0.0,
                                                     is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)                # (B, H, T, T)
            weights = torch.softmax(scores.masked_fill(self.mask[:t, :t], float("-inf")), dim=-1)
            context = self.dropout(weights) @ v                                        # (B, H, T, hd)
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


# --- 1. throughput ------------------------------------------------------------------------------

def throughput(use_sdpa, data, vocab_size, device, batch_size=12, steps=60, warmup=5, seed=0):
    MultiHeadAttention.use_sdpa = use_sdpa
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=vocab_size, context_length=64, emb_dim=128, num_heads=4, num_layers=4)
    model = TinyGPT(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    batches = [get_batch(data, cfg.context_length, batch_size, gen) for _ in range(warmup + steps)]
    for i, (x, y) in enumerate(batches):
        if i == warmup:
            sync(device)
            start = time.perf_counter()
        _, loss = model(x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    sync(device)
    seconds = time.perf_counter() - start
    return steps * batch_size * cfg.context_length / seconds


# --- 2. time to the target ------------------------------------------------------------------------

def time_to_target(train, val, vocab_size, floor, device, use_sdpa, args):
    MultiHeadAttention.use_sdpa = use_sdpa
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab_size, context_length=64, emb_dim=128, num_heads=4, num_layers=4)
    model = TinyGPT(cfg).to(device)
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
            print(f"  step {step:5d}  {elapsed:7.1f} s  val {val_loss:.4f}  ({100 * (val_loss / floor - 1):+.1f}% vs floor)",
                  flush=True)
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
    parser.add_argument("--skip-target", action="store_true", help="measure the throughput only")
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

    print("1. training throughput, TinyGPT 4 layers x 4 heads, width 128, context 64, batch 12")
    explicit = throughput(False, train, len(chars), device)
    fused = throughput(True, train, len(chars), device)
    print(f"   explicit attention:             {explicit:10,.0f} tokens/s")
    print(f"   F.scaled_dot_product_attention: {fused:10,.0f} tokens/s")
    print(f"   ratio (fused / explicit):       {fused / explicit:10.2f}")
    if args.skip_target:
        return

    use_sdpa = fused > explicit
    print(f"2. time to within {100 * args.margin:.0f}% of the entropy floor ({floor:.4f} nats/char) on val, "
          f"batch {args.batch_size}, lr {args.lr}, cosine over {args.schedule_steps} steps, "
          f"{'fused' if use_sdpa else 'explicit'} attention, cap {args.cap:g} min")
    reached, steps, seconds, eval_seconds, full, target, windows = time_to_target(train, val, len(chars), floor,
                                                                                  device, use_sdpa, args)
    if reached:
        print(f"   reached the target (loss <= {target:.4f}) on {windows} val windows after {steps} steps, "
              f"{seconds:.0f} s wall time "
              f"({seconds - eval_seconds:.0f} s training, {eval_seconds:.0f} s evaluating)")
    else:
        print(f"   NOT reached: stopped by the {args.cap:g}-minute cap after {steps} steps, {seconds:.0f} s")
    print(f"   whole validation text at that point: {full:.4f} nats/char ({100 * (full / floor - 1):+.1f}% vs floor)")


if __name__ == "__main__":
    main()
