"""What StoreView's autograd routing (seq2d/store_view.py, its ``__torch_function__``) costs (CPU).

    python benchmarks/store_view.py [--repeats 7] [--threads 1]

A/B in one process: StoreView with its ``__torch_function__`` ("routed") against torch's disabled
one ("plain", the class attribute before the routing: no autograd.grad through a handle). The
variants alternate in every repetition and the best time of each is printed for: a training step
(forward, backward, SGD step) of ``mlp([64, 64, 64, 10])`` on a batch of 32 and of a 2-layer
``rnn(8, 16)`` on 10 x 4 steps (neither touches a handle), ``SpectralClip.project`` on that rnn
(reads and writes ``blk.weight`` per block) and ``blk.weight.sum()`` (one handle read, one op).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import seq2d
from seq2d.stability import SpectralClip
from seq2d.store_view import StoreView


def per_call_us(f, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="CI smoke run (one repetition, few calls)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    scale = 0.02 if args.quick else 1.0
    repeats = 1 if args.quick else args.repeats
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    mlp = seq2d.mlp([64, 64, 64, 10])
    opt = torch.optim.SGD(mlp.parameters(), 0.01)
    x = torch.randn(32, 64)
    rnn = seq2d.rnn(8, 16, num_layers=2)
    opt_r = torch.optim.SGD(rnn.parameters(), 0.01)
    xr = torch.randn(10, 4, 8)
    clip = SpectralClip(rnn, 0.99)
    blk = mlp.blocks["1_0"]

    def mlp_step():
        opt.zero_grad()
        mlp(x).square().mean().backward()
        opt.step()

    def rnn_step():
        opt_r.zero_grad()
        rnn(xr)[0].square().mean().backward()
        opt_r.step()

    cases = {"mlp train step": (mlp_step, 200), "rnn train step": (rnn_step, 100),
             "SpectralClip.project": (clip.project, 100), "blk.weight.sum()": (lambda: blk.weight.sum(), 2000)}
    variants = {"routed": StoreView.__dict__["__torch_function__"], "plain": torch._C._disabled_torch_function_impl}
    times = {v: {k: [] for k in cases} for v in variants}
    try:
        for _ in range(repeats):
            for v, fn in variants.items():
                StoreView.__torch_function__ = fn
                for k, (f, n) in cases.items():
                    times[v][k].append(per_call_us(f, max(1, int(n * scale))))
    finally:
        StoreView.__torch_function__ = variants["routed"]
    best = {v: {k: min(t) for k, t in times[v].items()} for v in variants}
    for k in cases:
        print(f"{k:22s} routed {best['routed'][k]:8.1f} us   plain {best['plain'][k]:8.1f} us")
    result = {"best_us": best, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "repeats": repeats, "quick": args.quick}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
