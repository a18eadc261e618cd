"""Tune the v2 block-sparse kernels (``kernel="triton_v2"``, issue 37): prune here, time on a GPU.

Two steps:

1. ``--prune`` (here, no GPU): compile every candidate of the raw grid below for sm_90
   (``sm90_compile.py``) and drop those that spill registers, exceed the shared memory, lack
   TMA or wgmma, or cannot pipeline (fewer than 2 buffers), and those that compile to the same
   binary as a kept one (a ``num_stages`` the pipeliner cannot use, as 6 at tile 128 where three
   buffers fill the shared memory); keep at most ``--keep`` per (op, tile), deepest pipeline and
   largest block first; write the survivors with their
   compile facts to ``triton_v2_grid.json`` (committed: the GPU run reads it).
2. On the GPU: time each survivor alone (``_OVERRIDE``; device time from
   ``do_bench_cudagraph``) at N = 8192, batch 8192, bf16, density 0.25, per op and tile, check
   it against v1's result, then try ``GROUP_B`` 4 and 16 on each gather op's winner. Writes
   every time and the best per (op, tile) (``--json``), and the winners as ``{"op/T": config}``
   (``--best``, for ``kernel_probe.py --configs`` on the same machine). The winners that beat the
   table's first entry become that entry (``_GATHER_CONFIGS`` / ``_SDD_CONFIGS`` in
   seq2d/sparse/kernels/triton_v2.py, naming the JSON).

    python benchmarks/gpu/triton_v2_tune.py --prune                       # here, ~5 min of CPU
    python benchmarks/gpu/triton_v2_tune.py --json out.json --best best.json   # on the GPU
    TRITON_INTERPRET=1 python benchmarks/gpu/triton_v2_tune.py --device cpu --quick   # plumbing only

``--budget-s`` stops between candidates and writes what was measured (tile 128 first).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from seq2d.sparse import layout_from_tile_mask  # noqa: E402
from seq2d.sparse.kernels import triton_v1 as v1  # noqa: E402
from seq2d.sparse.kernels import triton_v2 as v2  # noqa: E402

GRID_FILE = HERE / "triton_v2_grid.json"
OPS = ("dds_t", "dds", "sdd_t")


def raw_grid(T: int, op: str) -> list[tuple]:
    """The candidates before pruning. Gather: (BLOCK_B, BLOCK_K, GROUP_B, warps, stages), stages
    4/5/6 = 2/3/4 buffers; dW: (BLOCK_B, warps, stages), stages = buffers."""
    if op == "sdd_t":
        return [(bb, w, s) for bb in (32, 64, 128) for w in (4, 8) for s in (2, 3, 4)]
    bks = (64, 128) if T == 128 else (32, 64)
    return [(bb, bk, 8, w, s) for bb in (128, 256) for bk in bks for w in (4, 8) for s in (4, 5, 6)]


def prune(tiles, keep: int, out: Path) -> dict:
    from sm90_compile import check_v2

    grid = {"triton": None, "kept": {}, "dropped": []}
    for T in tiles:
        for op in OPS:
            ok, binaries = [], {}
            for cfg in raw_grid(T, op):
                kernel = "sdd" if op == "sdd_t" else "gather"
                try:
                    r = check_v2(kernel, T, cfg, transposed=op == "dds")
                except Exception as e:  # noqa: BLE001 (a candidate that does not compile is dropped)
                    grid["dropped"].append(dict(op=op, tile=T, config=list(cfg), why=f"{type(e).__name__}: {str(e)[:120]}"))
                    continue
                grid["triton"] = r.triton
                why = r.problems(want_buffers=2)
                fact = dict(op=op, tile=T, config=list(cfg), shared=r.shared, registers=r.registers, buffers=r.buffers)
                if not why and r.cubin_sha1 in binaries:
                    why = [f"the same binary as {binaries[r.cubin_sha1]}"]
                if why:
                    grid["dropped"].append({**fact, "why": "; ".join(why)})
                else:
                    binaries[r.cubin_sha1] = list(cfg)
                    ok.append(fact)
                print(f"{op:5s} T={T:3d} {cfg}: {'; '.join(why) or 'kept'} ({r.shared} B, {r.registers} regs, "
                      f"{r.buffers} buffers)", flush=True)
            ok.sort(key=lambda f: (-f["buffers"], -f["config"][0], -f["config"][-2]))
            grid["kept"][f"{op}/{T}"] = ok[:keep]
            grid["dropped"] += [{**f, "why": f"over --keep {keep}"} for f in ok[keep:]]
    out.write_text(json.dumps(grid, indent=1) + "\n")
    n = sum(len(v) for v in grid["kept"].values())
    print(f"kept {n} candidates, dropped {len(grid['dropped'])}; wrote {out}")
    return grid


def sweep(args, grid: dict) -> int:
    from kernel_probe import device_ms

    dev, dtype = torch.device(args.device), torch.bfloat16
    t_start = time.monotonic()
    record = {"environment": {"command": " ".join(["python", "benchmarks/gpu/triton_v2_tune.py", *(args.argv or [])]),
                              "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                              "triton": v2.triton.__version__, "grid_triton": grid.get("triton"),
                              "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None},
              "cases": [], "stopped_by_budget": False}
    best_cfgs = {}

    def save():
        if args.json:
            Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        if args.best:
            Path(args.best).write_text(json.dumps(best_cfgs, indent=1) + "\n")

    g = torch.Generator().manual_seed(args.seed)
    for T in args.tiles:
        nt = args.N // T
        layout = layout_from_tile_mask(T, torch.rand(nt, nt, generator=g) < args.density).to(dev)
        x = torch.randn(args.batch, args.N, generator=g).to(dev, dtype)
        dy = torch.randn(args.batch, args.N, generator=g).to(dev, dtype)
        wp = (torch.randn(layout.nnz, T, T, generator=g) / T ** 0.5).to(dev, dtype)
        calls = {"dds_t": lambda m: m.dds_t(x, wp, layout, torch.empty_like(dy)),
                 "dds": lambda m: m.dds(dy, wp, layout, torch.empty_like(x)),
                 "sdd_t": lambda m: m.sdd_t(dy, x, layout, torch.empty_like(wp))}
        for op in OPS:
            ref = calls[op](v1).float()
            v1_ms = device_ms(lambda: calls[op](v1), dev)
            cands = [tuple(f["config"]) for f in grid["kept"].get(f"{op}/{T}", [])]
            rows = []

            def measure(cfg):
                v2._OVERRIDE[(op, T)] = cfg
                row = {"config": list(cfg)}
                try:
                    got = calls[op](v2).float()
                    row["rel_err_vs_v1"] = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
                    row.update(status="ok", device_ms=device_ms(lambda: calls[op](v2), dev))
                except Exception as e:  # noqa: BLE001 (record, go on)
                    row["status"] = f"{type(e).__name__}: {str(e)[:200]}"
                finally:
                    v2._OVERRIDE.pop((op, T), None)
                rows.append(row)
                return row

            for cfg in cands:
                if time.monotonic() - t_start > args.budget_s:
                    record["stopped_by_budget"] = True
                    break
                measure(cfg)
            ok = [r for r in rows if r["status"] == "ok" and r["rel_err_vs_v1"] < 1e-2]
            best = min(ok, key=lambda r: r["device_ms"]) if ok else None
            if best is not None and op != "sdd_t" and not record["stopped_by_budget"]:
                for gb in (4, 16):  # the L2 band of the winner
                    cfg = tuple(best["config"][:2]) + (gb,) + tuple(best["config"][3:])
                    r = measure(cfg)
                    if r["status"] == "ok" and r["rel_err_vs_v1"] < 1e-2 and r["device_ms"] < best["device_ms"]:
                        best = r
            case = dict(op=op, tile=T, density=args.density, stored_tiles=layout.nnz, N=args.N, batch=args.batch,
                        v1_ms=v1_ms, rows=rows, best=best and best["config"], best_ms=best and best["device_ms"])
            record["cases"].append(case)
            if best is not None:
                best_cfgs[f"{op}/{T}"] = best["config"]
            print(f"{op:5s} T={T:3d}: v1 {v1_ms:.3f} ms, v2 best {case['best']} "
                  f"{case['best_ms'] and round(case['best_ms'], 3)} ms; {len(rows)} candidates", flush=True)
            save()
            if record["stopped_by_budget"]:
                print(f"budget of {args.budget_s:.0f} s spent: stopped", flush=True)
                return 0
    save()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prune", action="store_true", help="compile the raw grid for sm_90 here and write the grid file")
    ap.add_argument("--keep", type=int, default=8, help="candidates kept per (op, tile) by --prune")
    ap.add_argument("--grid", default=str(GRID_FILE))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--N", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--density", type=float, default=0.25)
    ap.add_argument("--tiles", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--best", default=None, help="write the winners as {op/T: config} (kernel_probe.py --configs)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, two candidates (CPU smoke run under TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    if args.prune:
        prune(args.tiles, args.keep, Path(args.grid))
        return 0
    if not args.quick:
        grid = json.loads(Path(args.grid).read_text())
    else:  # the interpreter runs any block shape: two small candidates per op at tile 16
        args.N, args.batch, args.tiles = 64, 40, [16]
        grid = {"triton": None, "kept": {"dds_t/16": [{"config": [16, 16, 2, 4, 5]}, {"config": [32, 16, 8, 4, 5]}],
                                          "dds/16": [{"config": [16, 16, 2, 4, 5]}],
                                          "sdd_t/16": [{"config": [16, 4, 4]}, {"config": [32, 4, 4]}]}}
    return sweep(args, grid)


if __name__ == "__main__":
    raise SystemExit(main())
