"""``store="auto"`` on a model of irregular slots: the store it picks against the others, one training step.

    python benchmarks/store_auto.py                          # the 96-slot model, densities 0.1 0.25 0.5
    python benchmarks/store_auto.py --quick --json /tmp/x.json

The model: ``--slots`` (96) slots of 16, 32, 48 or 64 features each, drawn uniformly with
``--seed`` (so the only tile that pads no slot is 16), and ``benchmarks/model_step.py``'s
random block mask at density d (exactly ``round(d * n * n)`` blocks, row 0 empty: slot 0 is
the held input): ``seq2d.from_mask(sizes, mask, activations="relu", bias=True, seed, steps=1,
store=...)``. One call as in model_step.py (``model.step(state)``, the sum over the computed
slots of ``(out[i] * w_i).sum()``, ``backward()``, batch 256, float32, one thread), timed
side by side with model_step.py's ``run_case`` (rotating order, medians), for:

==============  =================================================================
``auto``        ``store="auto"`` (the store :func:`seq2d.stores.choose_store` picks)
``dense_store`` ``store="dense"``
``tiled``       ``store="dense"``, then ``to_blocksparse(tile=16)``
``dense``       ``nn.Linear(N, N, bias=False)`` on ``(B, N)``, N = sum of the sizes
``loss``        the loss alone (model_step.py's ``loss``)
==============  =================================================================

``ideal`` = the tiled layout's stored-tile density x the ``dense`` median (as model_step.py).
The JSON records the store ``auto`` picked and its tile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import seq2d

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_step import Impl, Meter, _clear, _uptime, block_mask, med, run_case, which_store  # noqa: E402

from seq2d.envinfo import cpu_name  # noqa: E402

CHOICES = (16, 32, 48, 64)


def irregular_sizes(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [CHOICES[i] for i in torch.randint(len(CHOICES), (n,), generator=g).tolist()]


def impls(sizes, mask, batch, seed) -> tuple[dict, dict]:
    kw = dict(activations="relu", bias=True, seed=seed, steps=1)
    models = {"auto": seq2d.from_mask(sizes, mask, **kw, store="auto"),
              "dense_store": seq2d.from_mask(sizes, mask, **kw, store="dense"),
              "tiled": seq2d.from_mask(sizes, mask, **kw, store="dense").to_blocksparse(tile=16)}
    g = torch.Generator().manual_seed(seed + 1)
    n, N = len(sizes), sum(sizes)
    state = [torch.randn(batch, s, generator=g).requires_grad_() for s in sizes]
    reached = [i for i in range(n) if bool(mask[i].any())]
    w = {i: torch.randn(batch, sizes[i], generator=g) for i in reached}

    def model_impl(m):
        params = [p for p in m.parameters() if p.requires_grad]

        def step():
            out = m.step(state)
            torch.stack([(out[i] * w[i]).sum() for i in reached]).sum().backward()

        return Impl(step, _clear(params + state))

    out = {k: model_impl(m) for k, m in models.items()}
    lin = nn.Linear(N, N, bias=False)
    x = torch.randn(batch, N, generator=g).requires_grad_()
    wd = torch.randn(batch, N, generator=g)

    def dense():
        (lin(x) * wd).sum().backward()

    out["dense"] = Impl(dense, _clear([lin.weight, x]))
    leaves = {i: torch.randn(batch, sizes[i], generator=g).requires_grad_() for i in reached}

    def loss():
        torch.stack([(leaves[i] * w[i]).sum() for i in reached]).sum().backward()

    out["loss"] = Impl(loss, _clear(list(leaves.values())))
    auto = models["auto"]
    L = models["tiled"].matrix.layout
    info = {"auto_store": which_store(auto), "auto_tile": getattr(getattr(auto, "matrix", None), "tile", None),
            "tile_density": float(L.density), "stored_tiles": int(L.nnz), "N": N}
    with torch.no_grad():  # the stores compute the same step
        a = models["dense_store"].step(state)
        info["max_abs_diff"] = {k: max(float((models[k].step(state)[i] - a[i]).abs().max()) for i in reached)
                                for k in ("auto", "tiled")}
    return out, info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=96)
    ap.add_argument("--densities", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="CI smoke run: 12 slots, batch 8, 1 repeat")
    ap.add_argument("--json", help="output file (default benchmarks/results/store_auto-cpu-<date>.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.slots, args.batch, args.repeats, args.densities = 12, 8, 1, [0.25]
    torch.set_num_threads(1)
    sizes = irregular_sizes(args.slots, args.seed)
    result = {"environment": {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": " ".join([Path(sys.executable).name, *sys.argv]),
                              "torch": torch.__version__, "cpu": cpu_name(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                              "threads": 1, "uptime_start": _uptime()},
              "config": vars(args), "sizes": sizes, "cases": []}
    path = Path(args.json) if args.json else (Path(tempfile.gettempdir()) / f"store_auto-quick-{os.getpid()}.json" if args.quick
                                              else Path(f"benchmarks/results/store_auto-cpu-{result['environment']['date'][:10]}.json"))
    print(f"# store_auto: {args.slots} slots, N={sum(sizes)}, batch {args.batch}, 1 thread, median of {args.repeats}; "
          f"{result['environment']['uptime_start']}")
    print(f"{'d':>5} {'tiles':>6} {'auto':>12} | {'auto':>8} {'dense_st':>8} {'tiled':>8} {'dense':>8} {'loss':>7} | "
          f"{'auto/idl':>8} {'dstore/idl':>10} {'tiled/idl':>9}")
    meter = Meter(None)
    for d in args.densities:
        mask = block_mask(args.slots, d, args.seed)
        cases, info = impls(sizes, mask, args.batch, args.seed)
        rows, _ = run_case(cases, modes=["quiet"], repeats=args.repeats, warmup=1, budget_s=60.0, max_others=1.0,
                           max_wait=0.0, max_case_s=120.0, meter=meter, contender=None)
        rows = rows["quiet"]
        ideal = info["tile_density"] * med(rows, "dense")
        ratios = {f"{k}/ideal": med(rows, k) / ideal for k in ("auto", "dense_store", "tiled")}
        result["cases"].append({"density": d, **info, "rows": rows, "ideal_ms": ideal, "ratios": ratios})
        print(f"{d:>5g} {info['tile_density']:>6.3f} {info['auto_store'] + '/' + str(info['auto_tile']):>12} | "
              + "".join(f"{med(rows, k):>9.2f}" for k in ("auto", "dense_store", "tiled", "dense"))
              + f"{med(rows, 'loss'):>8.2f} | {ratios['auto/ideal']:>8.2f} {ratios['dense_store/ideal']:>10.2f} "
              f"{ratios['tiled/ideal']:>9.2f}", flush=True)
        path.write_text(json.dumps(result, indent=1))
    result["environment"]["uptime_end"] = _uptime()
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
