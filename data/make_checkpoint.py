"""Train the small TinyGPT that the course ships as data/tiny_gpt.pt.

    python data/make_checkpoint.py                    # trains on the CPU and rewrites data/tiny_gpt.pt
    python data/make_checkpoint.py --measure-threads  # only times training steps with 1 and 2 threads

Unit 08 loads the file when a learner skips the training, and unit 09 starts from it. The
model is unit 08's reference TinyGPT, read from the solution notebook's own code cells (the
given blocks, GPTConfig, the reference answers, learning_rate and estimate_loss), so the
checkpoint is the notebook's model trained by the notebook's training step, only narrower so
that the file stays small. Everything is seeded, and the run uses a fixed number of CPU threads
(see THREADS) so that it gives the same weights each time on the same machine.

The file holds (torch.save, loadable with torch.load(path, weights_only=True)):
    config      dataclasses.asdict(GPTConfig(...))
    state_dict  model.state_dict() with its floating-point tensors stored as float16 (cast them
                to float32 before load_state_dict); the causal masks stay bool
    chars       the tokenizer's characters in id order, as one string
    val_loss    nats per character on data/val.txt, positions with at least 48 characters of
                context, computed from the float16 weights cast back to float32
    steps, seed the training run
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from grader import course

DATA = Path(__file__).resolve().parent
CHECKPOINT = DATA / "tiny_gpt.pt"

CONFIG = dict(context_length=64, emb_dim=64, num_heads=4, num_layers=4, dropout=0.0, qkv_bias=False)
TRAINING = dict(steps=3000, batch_size=16, lr=3e-3, warmup=100, max_norm=1.0, seed=0)
# One thread: on the 2-core development machine a step took 46 ms with one thread and 43 ms with two
# when idle, but 0.1-0.2 s with one and 1.0-1.4 s with two beside one other busy process (python
# data/make_checkpoint.py --measure-threads); one thread also keeps the weights independent of the core count.
THREADS = 1
MIN_CONTEXT = 48   # a line has at most 48 characters: every scored character sees its whole line

NAMES = ("LayerNorm", "GELU", "FeedForward", "MultiHeadAttention", "TransformerBlock", "GPTConfig", "TinyGPT",
         "CharTokenizer", "get_batch", "train_step", "learning_rate", "estimate_loss")


def reference(device: str = "cpu") -> dict:
    """Unit 08's reference definitions (NAMES), executed from the solution notebook's code cells:
    only those classes and functions, so no cell trains or plots. Returns their namespace."""
    unit = course.solution_definitions("08_tiny_gpt", NAMES, math=math, torch=torch, nn=nn, F=F,
                                       dataclass=dataclasses.dataclass, device=device)
    return vars(unit)


def corpus(ref: dict):
    """(tokenizer, train ids, val ids, entropy floor of val) of the course corpus."""
    train_text = (DATA / "train.txt").read_text(encoding="utf-8")
    val_text = (DATA / "val.txt").read_text(encoding="utf-8")
    floor = json.loads((DATA / "corpus_stats.json").read_text(encoding="utf-8"))["val_entropy_nats_per_char"]
    tokenizer = ref["CharTokenizer"](train_text + val_text)
    train = torch.tensor(tokenizer.encode(train_text), dtype=torch.long)
    val = torch.tensor(tokenizer.encode(val_text), dtype=torch.long)
    return tokenizer, train, val, floor


def load(path: Path = CHECKPOINT, ref: dict | None = None):
    """(model in eval mode with float32 weights, the checkpoint's dict)."""
    ref = ref or reference()
    ckpt = torch.load(path, weights_only=True)
    model = ref["TinyGPT"](ref["GPTConfig"](**ckpt["config"]))
    model.load_state_dict({name: t.float() if t.is_floating_point() else t for name, t in ckpt["state_dict"].items()})
    return model.eval(), ckpt


def train(ref: dict, train_data, vocab_size: int, steps: int, seed: int, log_every: int = 250, val=None):
    """A fresh seeded TinyGPT(CONFIG) trained with the notebook's train_step and schedule."""
    torch.manual_seed(seed)
    model = ref["TinyGPT"](ref["GPTConfig"](vocab_size=vocab_size, **CONFIG))
    optimizer = torch.optim.AdamW(model.parameters(), lr=TRAINING["lr"], betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    start, running = time.perf_counter(), 0.0
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = ref["learning_rate"](step, steps, TRAINING["lr"], TRAINING["warmup"])
        x, y = ref["get_batch"](train_data, CONFIG["context_length"], TRAINING["batch_size"], generator=gen)
        running += ref["train_step"](model, optimizer, x, y, max_norm=TRAINING["max_norm"])
        if (step + 1) % log_every == 0:
            line = f"  step {step + 1:5d}  {time.perf_counter() - start:6.0f} s  train {running / log_every:.4f}"
            if val is not None:
                line += f"  val {ref['estimate_loss'](model, val, min_context=MIN_CONTEXT, max_windows=200):.4f}"
            print(line, flush=True)
            running = 0.0
    return model.eval()


def seconds_per_step(ref: dict, train_data, vocab_size: int, threads: int, steps: int = 20) -> float:
    """Median wall time of a training step with `threads` threads (after 3 warm-up steps)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ref["TinyGPT"](ref["GPTConfig"](vocab_size=vocab_size, **CONFIG))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps + 3):
        x, y = ref["get_batch"](train_data, CONFIG["context_length"], TRAINING["batch_size"], generator=gen)
        start = time.perf_counter()
        ref["train_step"](model, optimizer, x, y, max_norm=1.0)
        times.append(time.perf_counter() - start)
    return sorted(times[3:])[steps // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure-threads", action="store_true", help="time training steps with 1 and 2 threads")
    parser.add_argument("--steps", type=int, default=TRAINING["steps"])
    parser.add_argument("--out", type=Path, default=CHECKPOINT)
    args = parser.parse_args()

    ref = reference()
    tokenizer, train_data, val_data, floor = corpus(ref)
    if args.measure_threads:
        for threads in (1, 2, 1, 2):
            ms = 1000 * seconds_per_step(ref, train_data, tokenizer.vocab_size, threads)
            print(f"{threads} thread{'s' * (threads > 1)}: {ms:.0f} ms per step (median of 20)")
        return

    torch.set_num_threads(THREADS)
    seed = TRAINING["seed"]
    print(f"TinyGPT {CONFIG}, {args.steps} steps of batch {TRAINING['batch_size']}, seed {seed}, {THREADS} thread(s)")
    start = time.perf_counter()
    model = train(ref, train_data, tokenizer.vocab_size, args.steps, seed, val=val_data)
    seconds = time.perf_counter() - start
    state = {name: t.detach().half() if t.is_floating_point() else t.detach()    # the masks stay bool
             for name, t in model.state_dict().items()}
    ckpt = {"config": dataclasses.asdict(model.cfg), "state_dict": state, "chars": "".join(tokenizer.chars),
            "val_loss": 0.0, "steps": args.steps, "seed": seed}
    torch.save(ckpt, args.out)
    model, _ = load(args.out, ref)                                           # score what the file holds
    ckpt["val_loss"] = ref["estimate_loss"](model, val_data, min_context=MIN_CONTEXT)
    torch.save(ckpt, args.out)
    size = args.out.stat().st_size
    count = sum(p.numel() for p in model.parameters())
    print(f"trained in {seconds:.0f} s; {count:,} parameters, {size / 1024:.0f} KiB")
    print(f"validation loss {ckpt['val_loss']:.4f} nats/char, floor {floor:.4f} "
          f"({100 * (ckpt['val_loss'] / floor - 1):+.1f}%) -> {args.out}")


if __name__ == "__main__":
    main()
