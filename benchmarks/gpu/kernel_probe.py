"""Where the block-sparse kernels' time goes on one GPU: v1 (``kernel="triton"``) against v2
(``kernel="triton_v2"``, issue 37), pass by pass, against the memory system's limits.

Sections of the JSON (one file):

=================  =============================================================================
``ceilings``       device-to-device copy bandwidth (read + write); cuBLAS per pass on the dense
                   N x N matrix (forward ``x @ W.T``, dX ``dy @ W``, dW ``dy.T @ x``)
``passes``         per tile, density, kernel and pass: device time (``do_bench_cudagraph``:
                   CUDA-graph replays, no host time), wall time (one synchronised call, host
                   included), the pass's memory-traffic floor (the bytes it must move / the copy
                   bandwidth), ideal (stored density x cuBLAS), useful TFLOP/s, error against v1
``profile``        ``torch.profiler`` table of one forward + dX + dW per kernel at the
                   ``--profile-densities``: every launched kernel, its count, device and host time
``model_step``     the ``--slots``-slot model of ``model_step_cuda.py`` (N = ``--step-N``): the
                   step (forward + backward) eager, ``torch.compile``-d and replayed from a
                   captured CUDA graph, per kernel, and ``bsmm`` alone replayed the same way;
                   ``flat_graph``: the tiled model's ``step_flat`` with one loss term, replayed
                   (the list state and the 64 per-slot loss terms are most of the step's
                   launches: ``step_ops.py``)
=================  =============================================================================

Each section checks ``--budget-s`` before it starts, and the JSON is rewritten after each, so
a cut-off run brings back what finished. ``--configs FILE`` (what ``triton_v2_tune.py --best``
wrote on the same machine) pins v2's blocking to the tuned one instead of autotuning.

    python benchmarks/gpu/kernel_probe.py --json /tmp/kernel_probe.json
    TRITON_INTERPRET=1 python benchmarks/gpu/kernel_probe.py --device cpu --quick   # plumbing only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from seq2d.sparse import bsmm, layout_from_tile_mask  # noqa: E402
from seq2d.sparse.kernels import triton_v1 as v1  # noqa: E402
from seq2d.sparse.kernels import triton_v2 as v2  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
KERNELS = {"triton": v1, "triton_v2": v2}
PASSES = ("dds_t", "dds", "sdd_t")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def device_ms(fn, dev: torch.device, rep_ms: int = 40) -> float:
    """Device time of ``fn`` in ms: the median of CUDA-graph replays on a GPU (no host time);
    on the CPU (smoke runs) the median wall time of a few calls."""
    fn()
    if dev.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))
    ts = []
    for _ in range(2):
        t0 = time.perf_counter()
        fn()
        ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts)


def wall_ms(fn, dev: torch.device, reps: int = 10) -> float:
    """Median wall time of one call with a synchronisation before and after (host time included)."""
    reps = reps if dev.type == "cuda" else 2  # the CPU runs are smoke runs
    ts = []
    for _ in range(reps):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts)


def copy_bandwidth(dev: torch.device, nbytes: int) -> float:
    """Bytes per second a device-to-device copy moves (read + write)."""
    src = torch.empty(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    return 2 * nbytes / (device_ms(lambda: dst.copy_(src), dev) * 1e-3)


def pass_bytes(layout, B: int, itemsize: int) -> dict:
    """Bytes each pass must move: the stored tiles, the input columns/rows some tile reads, the output."""
    T, P = layout.tile, layout.nnz
    cols = int((layout.col_ptr[1:] > layout.col_ptr[:-1]).sum())  # tile-columns with a stored tile
    rows = int((layout.row_ptr[1:] > layout.row_ptr[:-1]).sum())
    w = P * T * T * itemsize
    return {"dds_t": (B * cols * T + B * layout.Mt * T) * itemsize + w,
            "dds": (B * rows * T + B * layout.Kt * T) * itemsize + w,
            "sdd_t": (B * cols * T + B * rows * T) * itemsize + w}


def _calls(mod, x, dy, wp, layout):
    return {"dds_t": lambda: mod.dds_t(x, wp, layout, torch.empty_like(dy)),
            "dds": lambda: mod.dds(dy, wp, layout, torch.empty_like(x)),
            "sdd_t": lambda: mod.sdd_t(dy, x, layout, torch.empty_like(wp))}


def probe_passes(args, dev, dtype, record, save) -> None:
    g = torch.Generator().manual_seed(args.seed)
    N, B = args.N, args.batch
    x = torch.randn(B, N, generator=g).to(dev, dtype)
    dy = torch.randn(B, N, generator=g).to(dev, dtype)
    W = (torch.randn(N, N, generator=g) / N ** 0.5).to(dev, dtype)
    dense = {"dds_t": lambda: x @ W.T, "dds": lambda: dy @ W, "sdd_t": lambda: dy.T @ x}
    record["ceilings"]["dense_ms"] = {p: device_ms(f, dev) for p, f in dense.items()}
    del W
    bw = record["ceilings"]["copy_Bps"]
    for T in args.tiles:
        for d in args.densities:
            nt = N // T
            layout = layout_from_tile_mask(T, torch.rand(nt, nt, generator=g) < d).to(dev)
            wp = (torch.randn(layout.nnz, T, T, generator=g) / T ** 0.5).to(dev, dtype)
            nbytes = pass_bytes(layout, B, x.element_size())
            ref = {p: f().float() for p, f in _calls(v1, x, dy, wp, layout).items()}
            for name, mod in KERNELS.items():
                for p, f in _calls(mod, x, dy, wp, layout).items():
                    err = float((f().float() - ref[p]).norm() / ref[p].norm().clamp_min(1e-30))
                    dms, wms = device_ms(f, dev), wall_ms(f, dev)
                    flops = 2 * B * layout.nnz * T * T
                    row = dict(tile=T, density=d, stored_density=layout.density, stored_tiles=layout.nnz,
                               kernel=name, op=p, device_ms=dms, wall_ms=wms, bytes=nbytes[p],
                               floor_ms=1e3 * nbytes[p] / bw, ideal_ms=layout.density * record["ceilings"]["dense_ms"][p],
                               useful_tflops=flops / (dms * 1e-3) / 1e12, rel_err_vs_v1=err)
                    record["passes"].append(row)
                    print(f"T={T:3d} d={d:<5} {name:9s} {p:5s}: device {dms:8.3f} ms, wall {wms:8.3f} ms, "
                          f"floor {row['floor_ms']:7.3f}, ideal {row['ideal_ms']:7.3f}, "
                          f"{row['useful_tflops']:6.1f} TFLOP/s, err {err:.1e}", flush=True)
            save()


def probe_profile(args, dev, dtype, record, save) -> None:
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator().manual_seed(args.seed + 1)
    N, B, T = args.N, args.batch, args.tiles[0]
    x = torch.randn(B, N, generator=g).to(dev, dtype)
    dy = torch.randn(B, N, generator=g).to(dev, dtype)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    for d in args.profile_densities:
        layout = layout_from_tile_mask(T, torch.rand(N // T, N // T, generator=g) < d).to(dev)
        wp = (torch.randn(layout.nnz, T, T, generator=g) / T ** 0.5).to(dev, dtype)
        for name, mod in KERNELS.items():
            calls = _calls(mod, x, dy, wp, layout)
            for f in calls.values():
                f()
            _sync(dev)
            with profile(activities=acts) as prof:
                for p in PASSES:
                    calls[p]()
                _sync(dev)
            rows = [dict(name=e.key, count=e.count, device_us=getattr(e, "device_time_total", 0.0),
                         host_us=e.cpu_time_total) for e in prof.key_averages()]
            rows.sort(key=lambda r: -r["device_us"])
            record["profile"].append(dict(tile=T, density=d, kernel=name, rows=rows[:25]))
            top = ", ".join(f"{r['name'][:40]} x{r['count']} {r['device_us']:.0f} us" for r in rows[:4])
            print(f"profile T={T} d={d} {name}: {top}", flush=True)
        save()


def probe_model_step(args, dev, dtype, record, save) -> None:
    from model_step_cuda import Setting

    for kernel in KERNELS:
        s = Setting(args.step_N, args.step_batch, args.slots, args.step_density, args.seed, dtype, dev, args.step_tile)
        s.matrix.kernel = kernel  # the tiled model's matrix: resolved at every call
        step, params = s.impl("tiled")
        kstep, kparams = s.impl("kernel")
        fstep, fparams = s.impl("tiled_flat")  # one loss over a flat state, as the kernel's: step_ops.py says why
        row = dict(kernel=kernel, slots=args.slots, N=args.step_N, batch=args.step_batch, density=args.step_density,
                   tile=s.layout.tile, stored_tiles=s.layout.nnz)

        def run(f, ps):
            def go():
                for p in ps:
                    p.grad = None
                f()
            return go

        # a failed capture can leave the device unusable for later captures: the capture goes last
        for mode in ("eager", "kernel_graph", "flat_graph", "compiled", "graph"):
            try:
                if mode == "eager":
                    row[mode + "_ms"] = wall_ms(run(step, params), dev)
                elif mode == "compiled":
                    if dev.type != "cuda":
                        raise RuntimeError("not on the CPU smoke run")
                    cstep = torch.compile(step)
                    t0 = time.perf_counter()
                    run(cstep, params)()
                    row["compile_s"] = time.perf_counter() - t0
                    row[mode + "_ms"] = wall_ms(run(cstep, params), dev)
                else:  # a captured forward + backward, replayed: device time only
                    f, ps = {"graph": (step, params), "flat_graph": (fstep, fparams)}.get(mode, (kstep, kparams))
                    row[mode + "_ms"] = device_ms(run(f, ps), dev)
            except Exception as e:  # noqa: BLE001 (a mode that fails is a finding: record it, go on)
                row[mode + "_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        record["model_step"].append(row)
        print("model step " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
              flush=True)
        save()
        del s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    ap.add_argument("--N", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--tiles", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--densities", type=float, nargs="+", default=[0.01, 0.25, 1.0])
    ap.add_argument("--profile-densities", type=float, nargs="+", default=[0.01, 0.25])
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--step-N", type=int, default=4096)
    ap.add_argument("--step-batch", type=int, default=4096)
    ap.add_argument("--step-density", type=float, default=0.25)
    ap.add_argument("--step-tile", type=int, default=64)
    ap.add_argument("--sections", nargs="+", default=["passes", "profile", "model_step"])
    ap.add_argument("--configs", default=None, help="JSON of tuned v2 configs (triton_v2_tune.py --best)")
    ap.add_argument("--budget-s", type=float, default=330.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke run under TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    if args.quick:
        args.N, args.batch, args.tiles, args.densities, args.profile_densities = 64, 20, [16], [0.5], [0.5]
        args.slots, args.step_N, args.step_batch, args.step_tile = 4, 64, 8, 16
    dev, dtype = torch.device(args.device), DTYPES[args.dtype]
    if args.configs and Path(args.configs).exists():
        for key, cfg in json.loads(Path(args.configs).read_text()).items():
            op, T = key.split("/")
            v2._OVERRIDE[(op, int(T))] = tuple(cfg)
    import triton

    record = {"environment": {"command": " ".join(["python", "benchmarks/gpu/kernel_probe.py", *(argv or sys.argv[1:])]),
                              "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "triton": triton.__version__,
                              "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
                              "v2_override": {f"{k[0]}/{k[1]}": list(v) for k, v in v2._OVERRIDE.items()}},
              "ceilings": {"copy_Bps": copy_bandwidth(dev, 2 ** 30 if dev.type == "cuda" else 2 ** 22)},
              "passes": [], "profile": [], "model_step": [], "stopped_by_budget": None}

    def save():
        if args.json:
            Path(args.json).write_text(json.dumps(record, indent=1) + "\n")

    t0 = time.monotonic()
    sections = {"passes": probe_passes, "profile": probe_profile, "model_step": probe_model_step}
    for name in args.sections:
        if time.monotonic() - t0 > args.budget_s:
            record["stopped_by_budget"] = name
            print(f"budget of {args.budget_s:.0f} s spent: {name} and later sections not run", flush=True)
            break
        sections[name](args, dev, dtype, record, save)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    save()
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
