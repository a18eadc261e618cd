"""Time seq2d's three Triton kernels over a grid of (BLOCK_B, num_warps, num_stages), per tile.

The H200 table of 2026-11-26 (docs/performance.md, GPU) ran one fixed blocking per tile and dtype
(``_GPU_CONFIGS`` in ``seq2d/sparse/kernels/triton_v1.py``, "not tuned on hardware") and
found the kernels 1.7x (tile 128) to 5.2x (tile 32) their ideal time at density 1. This script
measures each kernel (``dds_t`` forward, ``dds`` dX, ``sdd_t`` dW) alone, one candidate at a
time through ``_GPU_KERNEL_CONFIGS``, checks every candidate's output against the default
blocking's, and writes every time and the best candidate per (kernel, tile) to JSON; the best
ones become ``_GPU_KERNEL_CONFIGS`` entries (with the JSON named there).

    python benchmarks/gpu/triton_configs.py --json benchmarks/results/triton_configs-cuda-DATE.json
    TRITON_INTERPRET=1 python benchmarks/gpu/triton_configs.py --device cpu --quick   # plumbing only

Candidates that do not fit the GPU's shared memory (Triton raises OutOfResources) are recorded
as such. ``--budget-s`` stops the sweep between candidates and writes what was measured.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from seq2d.sparse import layout_from_tile_mask  # noqa: E402
from seq2d.sparse.kernels import triton_v1 as tb  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
KERNELS = ("dds_t", "dds", "sdd_t")


def _time_ms(fn, device: torch.device, repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            out.append(1e3 * (time.perf_counter() - t0))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    ap.add_argument("--N", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--density", type=float, default=0.25)
    ap.add_argument("--tiles", type=int, nargs="+", default=[128, 64, 32])
    ap.add_argument("--block-b", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--stages", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke run under TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    if args.quick:
        args.N, args.batch, args.tiles, args.block_b, args.warps, args.stages = 64, 40, [16], [16, 32], [4], [2]
        args.repeats, args.warmup = 1, 0
    dev, dtype = torch.device(args.device), DTYPES[args.dtype]
    fp32 = dtype == torch.float32
    t_start = time.monotonic()
    record = {"environment": {"command": " ".join(["python", "benchmarks/gpu/triton_configs.py", *(argv or sys.argv[1:])]),
                              "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                              "triton": getattr(tb.triton, "__version__", "?"),
                              "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
                              "default_configs": {f"{t}/{f}": list(v) for (t, f), v in tb._GPU_CONFIGS.items()}},
              "cases": []}
    g = torch.Generator().manual_seed(args.seed)
    stopped = False
    for T in args.tiles:
        nt = args.N // T
        mask = torch.rand(nt, nt, generator=g) < args.density
        layout = layout_from_tile_mask(T, mask).to(dev)
        P = layout.nnz
        x = torch.randn(args.batch, args.N, generator=g).to(dev, dtype)
        dy = torch.randn(args.batch, args.N, generator=g).to(dev, dtype)
        wp = (torch.randn(P, T, T, generator=g) / T ** 0.5).to(dev, dtype)
        calls = {"dds_t": lambda: tb.dds_t(x, wp, layout, torch.empty_like(dy)),
                 "dds": lambda: tb.dds(dy, wp, layout, torch.empty_like(x)),
                 "sdd_t": lambda: tb.sdd_t(dy, x, layout, torch.empty_like(wp))}
        for name in KERNELS:
            ref = calls[name]().float()  # the default blocking
            default = tb._config(T, dtype, dev, name)
            rows = []
            for bb, w, st in itertools.product(args.block_b, args.warps, args.stages):
                if time.monotonic() - t_start > args.budget_s:
                    stopped = True
                    break
                tb._GPU_KERNEL_CONFIGS[(name, T, fp32)] = (bb, w, st)
                row = {"BLOCK_B": bb, "num_warps": w, "num_stages": st,
                       "default": (bb, w, st) == (default["BLOCK_B"], default["num_warps"], default["num_stages"])}
                try:
                    got = calls[name]().float()
                    row["max_rel_err"] = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
                    times = _time_ms(calls[name], dev, args.repeats, args.warmup)
                    row.update(status="ok", median_ms=statistics.median(times), times_ms=times)
                except Exception as e:  # noqa: BLE001 (OutOfResources and compile errors: record, go on)
                    row.update(status=f"{type(e).__name__}: {str(e)[:200]}")
                finally:
                    del tb._GPU_KERNEL_CONFIGS[(name, T, fp32)]
                rows.append(row)
            ok = [r for r in rows if r["status"] == "ok" and r["max_rel_err"] < 1e-2]
            best = min(ok, key=lambda r: r["median_ms"]) if ok else None
            base = next((r for r in ok if r["default"]), None)
            case = {"kernel": name, "tile": T, "density": args.density, "stored_tiles": P, "N": args.N,
                    "batch": args.batch, "dtype": args.dtype, "rows": rows,
                    "best": None if best is None else [best["BLOCK_B"], best["num_warps"], best["num_stages"]],
                    "best_ms": None if best is None else best["median_ms"],
                    "default_ms": None if base is None else base["median_ms"]}
            record["cases"].append(case)
            gain = f"{case['default_ms'] / case['best_ms']:.2f}x" if case["best_ms"] and case["default_ms"] else "n/a"
            print(f"{name:6s} T={T:3d}: best {case['best']} {case['best_ms'] and round(case['best_ms'], 3)} ms, "
                  f"default {case['default_ms'] and round(case['default_ms'], 3)} ms ({gain}); {len(rows)} candidates", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
            if stopped:
                break
        if stopped:
            print(f"budget of {args.budget_s:.0f} s spent: stopped", flush=True)
            break
    record["stopped_by_budget"] = stopped
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
