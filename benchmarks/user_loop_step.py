"""Train-step time of the MNIST sparsity models in the loop a PyTorch user writes by hand.

    python benchmarks/user_loop_step.py [--models mlp,random_element,random_tile] [--json FILE]

The models are those of ``seq2d mnist --full`` (the ``ours`` protocol's config, built as
benchmarks/mnist_protocol.py builds them: MLP [2500, 500, 200, 100, 10] and the randomized
models with its exact parameter count). One step is what every PyTorch tutorial writes::

    opt = torch.optim.Adam(model.parameters())        # torch's default Adam (foreach)
    opt.zero_grad(); F.cross_entropy(model(x), y).backward(); opt.step()

on a random batch of MNIST shape (64 x 2500, 10 classes), one torch thread. Steps are
interleaved over the models (A, B, C, A, B, C, ...) and the median of each is reported with
its ratio to the MLP's, and so is ``sum(p.numel() for p in model.parameters())`` (the count
that idiom gives) beside ``num_parameters()``. To time another checkout of the library (the
code before a change), run the script with ``PYTHONPATH`` set to it: the JSON records which
``seq2d`` it imported.

``--sweep 0.5,0.9,0.99`` adds what the layout of a masked box costs per step at those mask
densities, for a box of the random_element model's shape (810 x 3310): the masked dense box
(``W * mask`` forward, ``grad * mask`` backward, Adam over the box) against the compact one
(the trained entries placed into the box, their gradient gathered back, Adam over them),
interleaved, medians; the GEMMs, equal in both, are left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import seq2d
from seq2d.lab.mnist_comparison import configs_for, protocol_config
from seq2d.train import build_model
from seq2d.train.config import TrainConfig


def _commit(path: Path) -> str | None:
    """The commit of the checkout at ``path``, ``+dirty`` when its library (seq2d/) has edits."""
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no", "--", "seq2d"],
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else None
    except OSError:
        return None


def build(models, sizes, image_size, seed=0) -> dict:
    base = dataclasses.replace(TrainConfig(**protocol_config("ours", "full")), data="synthetic", image_size=image_size,
                               sizes=list(sizes), num_threads=1, quiet=True, device="cpu", seed=seed)
    return {name: build_model(cfg) for name, cfg in configs_for(base, models).items()}


def measure(models: dict, *, batch: int, repeats: int, warmup: int, seed: int = 0) -> dict:
    first = next(iter(models.values()))
    n_in = first.in_features if hasattr(first, "in_features") else None
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n_in, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    opts = {name: torch.optim.Adam(m.parameters()) for name, m in models.items()}
    times = {name: [] for name in models}
    names = list(models)
    for r in range(warmup + repeats):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate: no model always first
        for name in order:
            model, opt = models[name], opts[name]
            t = time.perf_counter()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            dt = time.perf_counter() - t
            if r >= warmup:
                times[name].append(dt)
    return times


def sweep(densities, *, repeats: int, shape=(810, 3310), seed: int = 0) -> dict:
    """Per-step cost of a masked box's layout (see the module docstring), ms, by density."""
    from seq2d.stores.compact import compact_index, place

    R, C = shape
    out = {}
    for d in densities:
        g = torch.Generator().manual_seed(seed)
        mask = torch.rand(R, C, generator=g) < d
        idx = compact_index(mask)
        fm = mask.float()
        dense = torch.nn.Parameter(torch.randn(R, C, generator=g) * fm)
        compact = torch.nn.Parameter(dense.detach().reshape(-1)[idx].clone())
        grad = torch.randn(R, C, generator=g)
        paths = {"masked": (torch.optim.Adam([dense]), lambda: dense * fm),
                 "compact": (torch.optim.Adam([compact]), lambda: place(compact, idx, shape))}
        times = {k: [] for k in paths}
        for r in range(repeats + 3):
            for name in (("masked", "compact") if r % 2 == 0 else ("compact", "masked")):
                opt, weight = paths[name]
                t = time.perf_counter()
                opt.zero_grad()
                weight().backward(grad)
                opt.step()
                if r >= 3:
                    times[name].append(time.perf_counter() - t)
        out[str(d)] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        out[str(d)]["trained"] = int(idx.numel())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,random_element,random_tile")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="CI smoke run (tiny sizes, 3 steps)")
    ap.add_argument("--sweep", default="", help="mask densities for the layout sweep (e.g. 0.5,0.9,0.99)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    sizes, image_size = [2500, 500, 200, 100, 10], 50
    if args.quick:
        sizes, image_size, args.batch, args.repeats, args.warmup = [64, 32, 16, 10], 8, 8, 3, 1
    torch.set_num_threads(1)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    models = build(names, sizes, image_size)
    times = measure(models, batch=args.batch, repeats=args.repeats, warmup=args.warmup)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = med.get("mlp")
    from seq2d.envinfo import cpu_name

    lib = Path(seq2d.__file__).resolve().parents[1]
    counts = {k: {"parameters_numel": sum(p.numel() for p in m.parameters()), "num_parameters": m.num_parameters(),
                  "parameter_tensors": len(list(m.parameters()))} for k, m in models.items()}
    print(f"# {cpu_name()}, capability {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, "
          f"seq2d from {lib} ({_commit(lib)}), 1 thread, batch {args.batch}, median of {args.repeats} interleaved steps")
    print(f"{'model':<16} {'ms/step':>9} {'x MLP':>7} {'sum(numel)':>12} {'num_parameters':>15}")
    for k in names:
        r = med[k] / ref if ref else float("nan")
        print(f"{k:<16} {med[k] * 1e3:9.2f} {r:7.2f} {counts[k]['parameters_numel']:12,d} {counts[k]['num_parameters']:15,d}")
    layout = sweep([float(d) for d in args.sweep.split(",")], repeats=max(args.repeats // 2, 3)) if args.sweep else {}
    if layout:
        print("layout of an 810 x 3310 masked box, per step (place + gather + Adam, no GEMM):")
        print(f"{'density':>8} {'masked ms':>10} {'compact ms':>11}")
        for d, v in layout.items():
            print(f"{d:>8} {v['masked']:10.2f} {v['compact']:11.2f}")
    if args.json:
        cmd = ["python", "benchmarks/user_loop_step.py", *(argv if argv is not None else sys.argv[1:])]
        rec = {"command": " ".join(cmd), "cpu": cpu_name(), "capability": torch.backends.cpu.get_cpu_capability(),
               "torch": torch.__version__, "seq2d": str(lib), "commit": _commit(lib), "threads": 1,
               "batch": args.batch, "repeats": args.repeats, "sizes": sizes, "models": names,
               "median_ms": {k: v * 1e3 for k, v in med.items()},
               "ratio_to_mlp": {k: (med[k] / ref if ref else None) for k in names}, "counts": counts,
               "times_ms": {k: [t * 1e3 for t in v] for k, v in times.items()}, "layout_sweep_ms": layout,
               "load": os.getloadavg()[0], "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        Path(args.json).write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
