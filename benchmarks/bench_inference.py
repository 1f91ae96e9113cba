"""Benchmark of unit 09: the key/value cache's speed-up, and the memory of the online softmax.

    python benchmarks/bench_inference.py                    # both parts, default settings
    python benchmarks/bench_inference.py --rounds 9 --threads 2 --max-len 2048

1. KV cache. A TinyGPT of the shipped checkpoint's shape (data/tiny_gpt.pt: 4 layers, 4 heads,
   width 64), untrained and seeded, with a context long enough for the prompt and every new token
   (learned absolute positions: past the context the cache must be rebuilt at every step). It
   writes --new tokens greedily after a random prompt of --prompt tokens, with `generate` and with
   `generate_cached`, in alternating rounds of one run (the order flips every round); the speed-up
   is the ratio of the median times. Both must give the same tokens. Then the trained checkpoint
   itself (context 64), whose generation runs past its context, where the cache is rebuilt at
   every step: the same ratio and the number of token positions each way feeds the model.
2. Online softmax. The peak memory held by the tensors that attention creates (unit 09's
   PeakMemory meter, a dispatch mode that adds up the bytes of every tensor an operation
   creates while it lives) for full attention, the online softmax in blocks of --block keys and
   PyTorch's F.scaled_dot_product_attention, for one sequence of 4 heads of 64 features, causal,
   as T doubles up to --max-len; with the time of each (median of 3) and the largest difference
   of the online softmax from full attention.
3. The cache's own memory: the bytes that the KV caches of the checkpoint's shape hold after a
   prefill of T tokens (measured with PeakMemory: the tensors created in the block and still
   alive), against kv_cache_bytes, per token and in all; then the formula for GPT-2 small and a
   7B model in float16, with 32 and with 8 key/value heads.
4. Training with blocks: the bytes each way keeps for the backward pass (held at the end of a
   forward pass with gradients on, PeakMemory) and the time of a forward and backward pass, for
   full attention, the online softmax loop under autograd and flash_attention, as T doubles.
5. Attention sinks: the trained checkpoint's loss on the last 16 characters of --sink-texts
   windows of 64 characters of data/val.txt, with its whole context, with a fresh pass over the
   last W + 1 characters, and fed one character at a time through rolling caches that keep the
   last W entries, with and without the first 4 (unit 09's RollingKVCache and rolling_logits).
   Then, at W = 16, what the kept early tokens must be: the first 4 with their content replaced
   (random characters, newlines), 4 kept tokens at later positions (8-11, 20-23, 0/10/20/30),
   one and two kept tokens, and the cache rolling in layer 0 only and in the other layers only.

The code measured is unit 09's own: the given model and sampling code, the reference answers
(KVCache, cached_attention, forward_cached, generate_cached, online_softmax_attention, ...), the
notebook's full_attention, PeakMemory and rolling caches, read from solutions/09_fast_inference's notebook.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import statistics
import time
import types
import weakref
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from grader import course

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT = ROOT / "data" / "tiny_gpt.pt"
NAMES = ("GPTConfig", "LayerNorm", "GELU", "FeedForward", "MultiHeadAttention", "TransformerBlock", "TinyGPT",
         "sample_next_token", "generate", "KVCache", "cached_attention", "forward_cached", "generate_cached",
         "online_softmax_attention", "full_attention", "PeakMemory", "kv_cache_bytes", "FlashAttentionFunction",
         "flash_attention", "RollingKVCache", "rolling_logits", "fresh_logits", "loss_of")


def unit09() -> types.ModuleType:
    """Unit 09's definitions (NAMES), executed from the solution notebook's code cells: only the
    top-level classes and functions of those names, so nothing is trained, timed or plotted."""
    return course.solution_definitions("09_fast_inference", NAMES, math=math, torch=torch, nn=nn, F=F,
                                       dataclass=dataclasses.dataclass, weakref=weakref,
                                       TorchDispatchMode=TorchDispatchMode, tree_flatten=tree_flatten)


def shape_of_checkpoint() -> dict:
    """The checkpoint's configuration, or the course's when the file is missing."""
    if CHECKPOINT.is_file():
        return torch.load(CHECKPOINT, weights_only=True)["config"]
    return dict(vocab_size=29, context_length=64, emb_dim=64, num_heads=4, num_layers=4, dropout=0.0, qkv_bias=False)


def trained(u) -> tuple[nn.Module, dict]:
    """The shipped checkpoint as unit 09's TinyGPT in eval mode (float32 weights), and its dict."""
    ckpt = torch.load(CHECKPOINT, weights_only=True)
    model = u.TinyGPT(u.GPTConfig(**ckpt["config"]))
    model.load_state_dict({k: t.float() if t.is_floating_point() else t for k, t in ckpt["state_dict"].items()})
    return model.eval(), ckpt


def timed(fn, *args, **kwargs) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def positions_fed(model, fn, *args, **kwargs) -> int:
    """Token positions that go into `model` (counted at its token embedding) while fn runs."""
    count = [0]
    def add(module, inputs, out):
        count[0] += inputs[0].numel()

    hook = model.tok_emb.register_forward_hook(add)
    try:
        fn(*args, **kwargs)
    finally:
        hook.remove()
    return count[0]


def compare_generation(u, model, prompt, new_tokens: int, rounds: int) -> dict:
    """Alternating rounds of generate and generate_cached (the order flips each round): times and tokens."""
    times = {"generate": [], "generate_cached": []}
    outputs = {}
    for r in range(rounds):
        order = ("generate", "generate_cached") if r % 2 == 0 else ("generate_cached", "generate")
        for name in order:
            outputs[name], seconds = timed(getattr(u, name), model, prompt, new_tokens, temperature=0.0)
            times[name].append(seconds)
    same = torch.equal(outputs["generate"], outputs["generate_cached"])
    fed = {name: positions_fed(model, getattr(u, name), model, prompt, new_tokens, temperature=0.0) for name in times}
    return {"times": times, "same": same, "fed": fed}


def report_generation(title: str, result: dict) -> None:
    plain, cached = (statistics.median(result["times"][n]) for n in ("generate", "generate_cached"))
    print(title)
    for name in ("generate", "generate_cached"):
        rounds = ", ".join(f"{t:.3f}" for t in result["times"][name])
        print(f"  {name:>15}: median {statistics.median(result['times'][name]):.3f} s  (rounds: {rounds}); "
              f"{result['fed'][name]:,} token positions fed to the model")
    print(f"  same tokens: {result['same']}   speed-up of the cache: x{plain / cached:.2f}")


def kv_cache_part(u, args) -> None:
    shape = shape_of_checkpoint()
    cfg = u.GPTConfig(**dict(shape, context_length=args.prompt + args.new))
    torch.manual_seed(0)
    model = u.TinyGPT(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    print(f"KV cache: TinyGPT {shape['num_layers']} layers, {shape['num_heads']} heads, width {shape['emb_dim']}, "
          f"context {cfg.context_length} (untrained, seeded); {args.rounds} alternating rounds, "
          f"{torch.get_num_threads()} thread(s)")
    report_generation(f" {args.new} new tokens after a prompt of {args.prompt}, all within the context:",
                      compare_generation(u, model, prompt, args.new, args.rounds))
    if CHECKPOINT.is_file():
        model, ckpt = trained(u)
        start = torch.tensor([[ckpt["chars"].index("\n")]])
        report_generation(f" the trained checkpoint (context {ckpt['config']['context_length']}): 200 new tokens after "
                          "a newline, past the context, where the cache is rebuilt at every step:",
                          compare_generation(u, model, start, 200, args.rounds))


def peak_bytes(u, fn, *inputs, **kwargs) -> int:
    with u.PeakMemory(*inputs) as meter:
        out = fn(*inputs, **kwargs)
        del out
    return meter.peak


def median_seconds(fn, repeats: int = 3) -> float:
    fn()   # warm-up
    return statistics.median(timed(fn)[1] for _ in range(repeats))


def memory_part(u, args) -> None:
    print(f"\nOnline softmax: one sequence, 4 heads of 64 features, causal, blocks of {args.block} keys; peak MiB held "
          "by the tensors created (PeakMemory), time in ms (median of 3)")
    print(f"  {'T':>5} | {'scores (1,4,T,T)':>16} | {'full attention':>23} | {'online softmax':>23} | "
          f"{'F.sdpa':>23} | online vs full")
    length = 256
    with torch.no_grad():
        while length <= args.max_len:
            q, k, v = (torch.randn(1, 4, length, 64, generator=torch.Generator().manual_seed(i)) for i in range(3))
            runs = {"full": (u.full_attention, dict(causal=True)),
                    "online": (u.online_softmax_attention, dict(block_size=args.block, causal=True)),
                    "sdpa": (F.scaled_dot_product_attention, dict(is_causal=True))}
            cells = []
            for fn, kwargs in runs.values():
                mib = peak_bytes(u, fn, q, k, v, **kwargs) / 2 ** 20
                ms = 1000 * median_seconds(functools.partial(fn, q, k, v, **kwargs))
                cells.append(f"{mib:8.2f} MiB {ms:7.1f} ms")
            difference = (u.online_softmax_attention(q, k, v, args.block, causal=True)
                          - u.full_attention(q, k, v, causal=True)).abs().max().item()
            scores = 4 * length * length * 4 / 2 ** 20
            print(f"  {length:5d} | {scores:12.2f} MiB | {cells[0]:>23} | {cells[1]:>23} | {cells[2]:>23} | "
                  f"max |diff| {difference:.1e}")
            length *= 2


def cache_memory_part(u, args) -> None:
    shape = shape_of_checkpoint()
    print(f"\nThe cache's memory: TinyGPT {shape['num_layers']} layers, {shape['num_heads']} heads, width "
          f"{shape['emb_dim']}, float32; measured after a prefill (PeakMemory) against kv_cache_bytes")
    for length in (16, 64, 256):
        cfg = u.GPTConfig(**dict(shape, context_length=length))
        model = u.TinyGPT(cfg).eval()
        prompt = torch.zeros(1, length, dtype=torch.long)
        with torch.no_grad(), u.PeakMemory() as meter:
            caches = [u.KVCache() for _ in model.blocks]
            logits = u.forward_cached(model, prompt, caches)
            del logits
        formula = u.kv_cache_bytes(cfg, length)
        print(f"  T = {length:4d}: measured {meter.live:>9,} bytes, formula {formula:>9,} bytes "
              f"({meter.live / length:,.0f} bytes per token, ratio {meter.live / formula:.3f})")
    gpt2 = u.GPTConfig(vocab_size=50257, context_length=1024, emb_dim=768, num_heads=12, num_layers=12)
    big = u.GPTConfig(vocab_size=32000, context_length=4096, emb_dim=4096, num_heads=32, num_layers=32)
    for name, cfg, kv_heads in (("GPT-2 small", gpt2, None), ("7B, 32 key/value heads", big, None),
                                ("7B, 8 key/value heads (grouped-query)", big, 8)):
        per_token = u.kv_cache_bytes(cfg, 1, dtype=torch.float16, num_kv_heads=kv_heads)
        text = u.kv_cache_bytes(cfg, cfg.context_length, dtype=torch.float16, num_kv_heads=kv_heads)
        print(f"  {name}: {per_token / 2 ** 10:,.0f} KiB per token in float16, {text / 2 ** 30:.2f} GiB per text of "
              f"{cfg.context_length} tokens")


def _forward_backward(fn, inputs) -> None:
    fn(*inputs, causal=True).sum().backward()


def autograd_part(u, args) -> None:
    print(f"\nTraining with blocks: MiB kept for the backward pass (PeakMemory at the end of the forward pass) and "
          f"forward + backward time in ms (median of 3); one sequence, 4 heads of 64 features, causal, blocks of "
          f"{args.block}")
    print(f"  {'T':>5} | {'full attention':>21} | {'online softmax loop':>21} | {'flash_attention':>21}")
    for length in (256, 512, 1024, 2048):
        q, k, v = (torch.randn(1, 4, length, 64, generator=torch.Generator().manual_seed(i)).requires_grad_()
                   for i in range(3))
        cells = []
        for fn, blocks in ((u.full_attention, ()), (u.online_softmax_attention, (args.block,)),
                           (u.flash_attention, (args.block,))):
            with u.PeakMemory(q, k, v) as meter:
                out = fn(q, k, v, *blocks, causal=True)
            kept = meter.live / 2 ** 20
            out.sum().backward()
            del out
            ms = 1000 * median_seconds(functools.partial(_forward_backward, fn, (q, k, v, *blocks)))
            cells.append(f"{kept:7.2f} MiB {ms:7.1f} ms")
        print(f"  {length:5d} | {cells[0]:>21} | {cells[1]:>21} | {cells[2]:>21}")


def sinks_part(u, args) -> None:
    if not CHECKPOINT.is_file():
        print(f"\nAttention sinks: skipped, {CHECKPOINT} is missing")
        return
    model, ckpt = trained(u)
    text = (ROOT / "data" / "val.txt").read_text(encoding="utf-8")
    ids = torch.tensor([ckpt["chars"].index(ch) for ch in text])
    length, scored = 64, 16
    first = length - scored
    starts = torch.randint(0, len(ids) - length - 1, (args.sink_texts,), generator=torch.Generator().manual_seed(1))
    texts = torch.stack([ids[s:s + length + 1] for s in starts.tolist()])
    inputs, targets = texts[:, :-1], texts[:, first + 1:]
    with torch.no_grad():
        whole = u.loss_of(model(inputs)[0][:, first:], targets)
    print(f"\nAttention sinks: the trained checkpoint, loss (nats/char) on the last {scored} characters of "
          f"{args.sink_texts} windows of {length} characters of val.txt; whole context: {whole:.4f}")
    print(f"  {'W':>3} | {'fresh pass':>10} | {'rolling':>8} | {'rolling + first 4':>17} | {'rolling, W + 4':>14}")
    for w in (4, 8, 16, 24, 32, 48):
        fresh = u.loss_of(u.fresh_logits(model, inputs, w, first), targets)
        rolling = u.loss_of(u.rolling_logits(model, inputs, w)[:, first:], targets)
        sinks = u.loss_of(u.rolling_logits(model, inputs, w, keep=range(4))[:, first:], targets)
        wider = u.loss_of(u.rolling_logits(model, inputs, w + 4)[:, first:], targets)
        print(f"  {w:3d} | {fresh:10.4f} | {rolling:8.4f} | {sinks:17.4f} | {wider:14.4f}")
    w = 16
    scrambled = inputs.clone()
    scrambled[:, :4] = torch.randint(0, len(ckpt["chars"]), (args.sink_texts, 4),
                                     generator=torch.Generator().manual_seed(2))
    newlines = inputs.clone()
    newlines[:, :4] = ckpt["chars"].index("\n")
    variants = [("the first 4", inputs, range(4), None),
                ("the first 4, replaced by random characters", scrambled, range(4), None),
                ("the first 4, replaced by newlines", newlines, range(4), None),
                ("positions 8-11", inputs, range(8, 12), None), ("positions 20-23", inputs, range(20, 24), None),
                ("positions 0, 10, 20, 30", inputs, (0, 10, 20, 30), None),
                ("position 0 alone", inputs, (0,), None), ("positions 0 and 1", inputs, (0, 1), None),
                ("nothing, the cache rolling in layer 0 only", inputs, (), {0}),
                ("nothing, the cache rolling in layers 1-3 only", inputs, (), set(range(1, len(model.blocks))))]
    print(f"  W = {w}, the rolling cache keeping besides its window:")
    for name, ids_kept, kept, layers in variants:
        loss = u.loss_of(u.rolling_logits(model, ids_kept, w, keep=kept, rolling=layers)[:, first:], targets)
        print(f"    {name:>46}: {loss:.4f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    parser.add_argument("--new", type=int, default=256, help="new tokens (default 256)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds, at least 5 (default 7)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads, as in the notebook (default 1)")
    parser.add_argument("--block", type=int, default=128, help="keys per block of the online softmax (default 128)")
    parser.add_argument("--max-len", type=int, default=4096, help="longest sequence of the memory part (default 4096)")
    parser.add_argument("--sink-texts", type=int, default=1024,
                        help="windows of val.txt in the attention-sinks part (default 1024)")
    parser.add_argument("--skip-memory", action="store_true", help="only the KV-cache part")
    args = parser.parse_args(argv)
    if args.rounds < 5:
        parser.error("--rounds must be at least 5: the speed-up is a ratio of medians")
    torch.set_num_threads(args.threads)
    u = unit09()
    kv_cache_part(u, args)
    if not args.skip_memory:
        memory_part(u, args)
    cache_memory_part(u, args)
    if not args.skip_memory:
        autograd_part(u, args)
    sinks_part(u, args)


if __name__ == "__main__":
    main()
