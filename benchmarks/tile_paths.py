"""The ``cpu`` block-sparse kernel's paths side by side: one GEMM per run (batch-major or feature-major), per tile-row over gathered tiles, or over feature-major panels.

    python benchmarks/tile_paths.py [--repeats 15] [--rounds 3] [--json FILE]
    python benchmarks/tile_paths.py --cases grid --repeats 5 --rounds 2   # the panels rule's grid

The ``cpu`` kernel (``seq2d/sparse/kernels/cpu.py``) runs a layout of short runs row by row
over gathered tiles when the gathered copies are small (``ROWS_MAX_TILES_PER_RUN``,
``ROWS_MAX_VALUES``), and otherwise by feature-major panels or feature-major runs
(``seq2d/sparse/kernels/cpu_fm.py``) or the batch-major runs, by tile and run length
(``PANELS_*``, ``FMRUNS_*``). This times the paths, forced, on the layouts those rules were set from
(``--cases``): ``mnist``, the two products of the random_tile MNIST model's step (its
held-input tiles and the rest, at batch 64, built by ``seq2d.train.build_model`` as ``seq2d
mnist --full`` builds it), tile 64; ``random``, random tile masks at N = 4096, batch 256
(``benchmarks/blocksparse.py``'s target point) plus one layout of long runs, tile 64; ``grid``,
the layouts of ``benchmarks/model_step.py`` (N = 4096, ``block_mask`` of slots of ``S``
features at density d, tile T): T in 16, 32, 64, 128, S in {T, 64, 256, 512} (S >= T; S = T:
random tiles), d in 0.1, 0.25, batch 64 and 256. One case = forward + backward (dX and dW,
or dW alone where the trainer needs no dX); rounds interleave the paths; medians. One
thread, float32. ``runs`` and ``fmruns`` are left out where they are known to lose by far
(tile 16 random tiles: thousands of one-tile GEMMs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from seq2d.envinfo import cpu_name
from seq2d.sparse import layout_from_tile_mask
from seq2d.sparse.kernels import cpu, cpu_fm, get_kernel


def mnist_layouts(sizes, image_size) -> list:
    """(name, layout, batch, need_dx) of the random_tile MNIST model's held and rest products."""
    from seq2d.core import core_of
    from seq2d.lab.mnist_comparison import configs_for, protocol_config
    from seq2d.train import build_model
    from seq2d.train.config import TrainConfig

    base = dataclasses.replace(TrainConfig(**protocol_config("ours", "full")), data="synthetic", sizes=list(sizes),
                               image_size=image_size, device="cpu")
    model = build_model(configs_for(base, ["random_tile"])["random_tile"])
    store = core_of(model, "the benchmark expects").store
    key = store.rows
    split = store._held_split(key, frozenset(range(len(store.sizes))) - frozenset(key))
    (held, _, _), (rest, _, _), _ = split
    return [("mnist held (dW only)", held, 64, False), ("mnist rest", rest, 64, True)]


def random_layouts(N, batch, densities, seed=0) -> list:
    T = 64
    g = torch.Generator().manual_seed(seed)
    out = [(f"N={N} d={d}", layout_from_tile_mask(T, torch.rand(N // T, N // T, generator=g) < d), batch, True)
           for d in densities]
    n = N // T
    m = torch.zeros(n, n, dtype=torch.bool)  # blocks of 8 x 8 tiles: runs of 8
    for k in range(0, n - 7, 8):
        m[k:k + 8, k:k + 8] = True
        m[k:k + 8, (k + 16) % n:(k + 16) % n + 8] = True
    out.append((f"N={N} 8-tile runs", layout_from_tile_mask(T, m), batch, True))
    return out


def grid_layouts(N, tiles, densities, batches, seed=0) -> list:
    """model_step.py's layouts: a block mask of N/S slots of S features, tiled by T."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from model_step import block_mask

    out = []
    for T in tiles:
        for S in sorted({T, 64, 256, 512}):
            if S < T or N % S or N // S < 4:
                continue
            k = S // T
            for d in densities:
                m = block_mask(N // S, d, seed).repeat_interleave(k, 0).repeat_interleave(k, 1)
                L = layout_from_tile_mask(T, m)
                out += [(f"T={T} S={S} d={d}", L, B, True) for B in batches]
    return out


def time_case(L, batch, need_dx, repeats, rounds) -> dict:
    kernel = get_kernel("cpu")
    T = L.tile
    x = torch.randn(batch, L.Kt * T)
    wp = torch.randn(L.nnz, T, T)
    dy = torch.randn(batch, L.Mt * T)
    paths = {
        "runs": lambda: (kernel._dds_t_runs(x, wp, L), kernel._backward_runs(dy, x, wp, L, need_dx, True)),
        "rows": lambda: (cpu._dds_t_rows(x, wp, L), cpu._backward_rows(dy, x, wp, L, need_dx, True)),
        "panels": lambda: (cpu_fm.panels_dds_t(x, wp, L, cpu._rows(L), cpu._plan(L)["zero_rows"], cpu._scratch),
                           cpu_fm.panels_backward(dy, x, wp, L, need_dx, True, cpu._scratch)),
        "fmruns": lambda: (cpu_fm.fmruns_dds_t(x, wp, L, cpu._plan(L), cpu._scratch),
                           cpu_fm.fmruns_backward(dy, x, wp, L, need_dx, True, cpu._plan(L), cpu._scratch)),
    }
    plan = cpu._plan(L)
    if T == 16 and L.nnz <= 1.5 * len(plan["runs"]):  # one-tile GEMMs of 16: several times slower than the rest
        del paths["runs"], paths["fmruns"]
    times = {p: [] for p in paths}
    for _ in range(rounds):
        for path, one in paths.items():
            one()
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                one()
                ts.append(time.perf_counter() - t0)
            times[path].append(statistics.median(ts))
    med = {p: statistics.median(v) for p, v in times.items()}
    out = {"tile": T, "tiles": L.nnz, "runs": len(plan["runs"]), "tiles_per_run": L.nnz / len(plan["runs"]),
           "gathered_values": batch * L.nnz * T, "picked": kernel._path(L, batch), "fastest": min(med, key=med.get)}
    for p in ("runs", "rows", "panels", "fmruns"):
        out[f"{p}_ms"] = 1e3 * med[p] if p in med else None
    out["rows_over_runs"] = med["rows"] / med["runs"] if "runs" in med else None
    out["picked_over_fastest"] = med[out["picked"]] / med[out["fastest"]] if out["picked"] in med else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", nargs="+", choices=["mnist", "random", "grid"], default=["mnist", "random"],
                    help="which layouts (default mnist random; see the docstring)")
    ap.add_argument("--quick", action="store_true", help="CI smoke run (small model and N, 2 repeats, 1 round)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.quick:
        cases = mnist_layouts([64, 32, 16, 10], 8) + random_layouts(512, 16, [0.25]) + grid_layouts(512, [16], [0.25], [8])
        args.repeats, args.rounds = 2, 1
    else:
        cases = []
        if "mnist" in args.cases:
            cases += mnist_layouts([2500, 500, 200, 100, 10], 50)
        if "random" in args.cases:
            cases += random_layouts(4096, 256, [0.1, 0.25, 0.5])
        if "grid" in args.cases:
            cases += grid_layouts(4096, [16, 32, 64, 128], [0.1, 0.25], [64, 256])
    print(f"# capability {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, 1 thread, "
          f"load {os.getloadavg()[0]:.2f}")
    print("| layout | batch | tiles | tiles/run | gathered values | runs ms | rows ms | panels ms | fmruns ms | picked | picked / fastest |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    results = []
    for name, L, batch, need_dx in cases:
        if L.nnz == 0:
            continue
        r = {"layout": name, "batch": batch, **time_case(L, batch, need_dx, args.repeats, args.rounds)}
        results.append(r)
        ms = " | ".join("-" if r[f"{p}_ms"] is None else f"{r[f'{p}_ms']:.2f}" for p in ("runs", "rows", "panels", "fmruns"))
        print(f"| {name} | {batch} | {r['tiles']} | {r['tiles_per_run']:.2f} | {r['gathered_values'] / 1e6:.1f}M | "
              f"{ms} | {r['picked']} | {r['picked_over_fastest']:.2f} |", flush=True)
    print(f"# load {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                       "cpu": cpu_name(), "loadavg_end": os.getloadavg(), "argv": sys.argv[1:], "results": results, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
