"""Train-step time of an MLP in Sequential2D form vs the same nn.Sequential (CPU).

    python benchmarks/mlp_step.py [--sizes 2500,500,200,100,10] [--batch 64] [--repeats 200]

One train step = forward, cross-entropy, backward, Adam step. Both models hold the same
weights; steps are interleaved (A, B, A, B, ...) and the median of each is reported, with
the ratio seq2d / torch. The Sequential2D runs through its execution plan (acyclic, so each
slot is evaluated once); `--no-plan` times plain Jacobi iteration (L steps, every block L
times) for contrast.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
from torch import nn

import seq2d


def build(sizes, seed):
    torch.manual_seed(seed)
    ours = seq2d.mlp(sizes)
    mods = []
    for l in range(len(sizes) - 1):
        lin = nn.Linear(sizes[l], sizes[l + 1])
        with torch.no_grad():
            lin.weight.copy_(ours.block(l + 1, l).weight)
            lin.bias.copy_(ours.bias(l + 1))
        mods += [lin, nn.ReLU()] if l < len(sizes) - 2 else [lin]
    return ours, nn.Sequential(*mods)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2500,500,200,100,10")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-plan", action="store_true", help="time plain Jacobi iteration instead of the plan")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="CI smoke run (tiny sizes)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.repeats, args.warmup = "64,32,10", 8, 5, 1
    torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    ours, ref = build(sizes, args.seed)
    ours.use_plan = not args.no_plan
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.batch, sizes[0], generator=g)
    y = torch.randint(0, sizes[-1], (args.batch,), generator=g)
    loss_fn = nn.CrossEntropyLoss()
    opts = {"seq2d": torch.optim.Adam(ours.parameters(), lr=1e-3), "torch": torch.optim.Adam(ref.parameters(), lr=1e-3)}
    models = {"seq2d": ours, "torch": ref}

    def step(name):
        opt, model = opts[name], models[name]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return time.perf_counter() - t, loss.item()

    times = {"seq2d": [], "torch": []}
    losses = {}
    for r in range(args.warmup + args.repeats):
        order = ("seq2d", "torch") if r % 2 == 0 else ("torch", "seq2d")
        for name in order:
            dt, losses[name] = step(name)
            if r >= args.warmup:
                times[name].append(dt)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["seq2d"] / med["torch"]
    print(f"MLP {sizes}, batch {args.batch}, {args.threads} threads, {'plan' if ours.use_plan else 'Jacobi iteration'}, "
          f"median of {args.repeats} interleaved train steps (fwd + CE + bwd + Adam)")
    print(f"  torch nn.Sequential : {med['torch'] * 1e3:8.3f} ms")
    print(f"  seq2d Sequential2D  : {med['seq2d'] * 1e3:8.3f} ms")
    print(f"  ratio seq2d / torch : {ratio:8.3f}")
    print(f"  final losses (same weights, same data): seq2d {losses['seq2d']:.6f}, torch {losses['torch']:.6f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "batch": args.batch, "threads": args.threads, "plan": ours.use_plan,
                       "repeats": args.repeats, "median_ms": {k: v * 1e3 for k, v in med.items()}, "ratio": ratio,
                       "torch": torch.__version__, "machine": platform.processor() or platform.machine()}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
