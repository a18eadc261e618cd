"""Peak GPU memory of a huge, very sparse layer: N = 131,072 at tile density 0.01 (issue 13).

Two measurements, each reported with ``torch.cuda.max_memory_allocated`` (reset before) and
the median wall time of ``--repeats`` synchronized calls:

``kernel``  ``y = seq2d.sparse.bsmm(x, wp, layout, "triton")`` and ``y.backward(dy)`` for a
            random tile mask (``torch.rand(Mt, Kt) < density``), ``x`` ``(B, N)``; a few
            tile-rows of ``y`` and tile-columns of ``dX`` are checked against an fp32 product
            of the stored tiles (no N x N reference can exist at this size).
``model``   a Sequential2D of 32 slots of N/32 features whose linear part is
            ``seq2d.models.random.random_tile_matrix`` at the same density (rows 1..31), tanh,
            ``steps`` Jacobi steps, one Adam step on the sum of its outputs.

Next to them the bytes a dense ``N x N`` weight would need in the same dtype (the weight
alone, then weight + gradient + Adam's two moments): what the block-sparse storage avoids.

    python benchmarks/gpu/memory.py --json /tmp/memory.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import seq2d
from seq2d.stores import TiledBlock
from seq2d.models.random import random_tile_matrix
from seq2d.sparse import bsmm, layout_from_tile_mask

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
GiB = 2 ** 30
DEV = "cuda"  # --device cpu (with TRITON_INTERPRET=1 and a small --N) only smoke-tests this script


def _cuda() -> bool:
    return torch.device(DEV).type == "cuda"


def _sync() -> None:
    if _cuda():
        torch.cuda.synchronize()


def _allocated() -> float | None:
    return torch.cuda.memory_allocated() / GiB if _cuda() else None


def peak_and_time(fn, repeats: int) -> tuple[float | None, float]:
    _sync()
    if _cuda():
        torch.cuda.reset_peak_memory_stats()
    fn()  # warm-up (compiles), and the peak
    _sync()
    peak = torch.cuda.max_memory_allocated() / GiB if _cuda() else None
    ts = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    return peak, statistics.median(ts)


def kernel_case(N, tile, density, B, dtype, repeats, seed) -> dict:
    g = torch.Generator().manual_seed(seed)
    L = layout_from_tile_mask(tile, torch.rand(N // tile, N // tile, generator=g) < density).to(DEV)
    dg = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(B, N, device=DEV, generator=dg).to(dtype).requires_grad_()
    dy = torch.randn(B, N, device=DEV, generator=dg).to(dtype)
    wp = (torch.randn(L.nnz, tile, tile, device=DEV, generator=dg) * (L.Mt / max(L.nnz, 1) / tile) ** 0.5).to(dtype)
    wp.requires_grad_()
    _sync()
    base = _allocated()
    out = {}

    def step():
        x.grad = wp.grad = None
        y = bsmm(x, wp, L, "triton")
        y.backward(dy)
        out["y"] = y.detach()

    peak, ms = peak_and_time(step, repeats)
    # spot checks: tile-rows of y and tile-columns of dX from the stored tiles, in fp32
    worst = 0.0
    row_ptr, col_ptr = L.row_ptr.tolist(), L.col_ptr.tolist()
    for r in sorted({0, L.Mt // 2, L.Mt - 1}):
        ref = torch.zeros(B, tile, device=DEV)
        for p in range(row_ptr[r], row_ptr[r + 1]):
            c = int(L.col[p])
            ref += x.detach()[:, c * tile:(c + 1) * tile].float() @ wp.detach()[p].float()
        got = out["y"][:, r * tile:(r + 1) * tile].float()
        worst = max(worst, float((got - ref).norm() / ref.norm().clamp_min(1e-30)))
    for c in sorted({0, L.Kt // 2, L.Kt - 1}):
        ref = torch.zeros(B, tile, device=DEV)
        for q in range(col_ptr[c], col_ptr[c + 1]):
            p = int(L.t_pos[q])
            r = int(L.row[p])
            ref += dy[:, r * tile:(r + 1) * tile].float() @ wp.detach()[p].float().T
        got = x.grad[:, c * tile:(c + 1) * tile].float()
        worst = max(worst, float((got - ref).norm() / ref.norm().clamp_min(1e-30)))
    es = torch.finfo(dtype).bits // 8
    P = L.nnz
    flops = 3 * 2 * B * P * tile * tile
    return dict(N=N, tile=tile, density=density, density_actual=L.density, stored_tiles=P, batch=B,
                inputs_gib=base, peak_gib=peak, median_ms=ms, tflops=flops / (ms * 1e-3) / 1e12,
                tiles_gib=P * tile * tile * es / GiB, spot_check_rel_err=worst,
                dense_weight_gib=N * N * es / GiB, dense_weight_grad_adam_gib=N * N * es * 4 / GiB)


def model_case(N, n, tile, density, B, dtype, steps, repeats, seed) -> dict:
    S = N // n
    sizes = [S] * n
    eng = random_tile_matrix(sizes, tile, density, generator=torch.Generator().manual_seed(seed), kernel="triton",
                             device=DEV, dtype=dtype)
    m = seq2d.Sequential2D(sizes, {(i, j): TiledBlock(eng, g) for i, j, g in eng.placements},
                           bias=True, activations="tanh", inputs=[0], steps=steps).to(DEV, dtype)
    opt = torch.optim.Adam(m.parameters(), lr=1e-4)
    x = torch.randn(B, S, device=DEV).to(dtype)
    _sync()
    params = sum(p.numel() for p in m.parameters())
    base = _allocated()
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        out = m([x] + [None] * (n - 1))
        loss = sum(t.float().sum() for t in out[1:] if t is not None)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))

    peak, ms = peak_and_time(step, repeats)
    return dict(N=N, slots=n, tile=tile, density=density, stored_tiles=int(eng.nnz_tiles), batch=B, steps=steps,
                parameters=params, params_gib=base, peak_gib=peak, median_ms=ms,
                finite=all(map(lambda v: v == v and abs(v) != float("inf"), losses)))


def _gib(v) -> str:
    return "n/a" if v is None else f"{v:.2f} GiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, default=131072)
    ap.add_argument("--tile", type=int, default=128)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    ap.add_argument("--slots", type=int, default=32, help="slots of the model case (N / slots features each)")
    ap.add_argument("--steps", type=int, default=2, help="Jacobi steps of the model case")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu only to smoke-test this script")
    ap.add_argument("--json", default=None, help="output (default benchmarks/results/memory-cuda-<date>.json)")
    args = ap.parse_args(argv)
    global DEV
    DEV = args.device
    if _cuda() and not torch.cuda.is_available():
        ap.error("no CUDA device is available")
    dtype = DTYPES[args.dtype]
    env = {"date": time.strftime("%Y-%m-%d"), "device": DEV, "gpu": torch.cuda.get_device_name() if _cuda() else None,
           "torch": torch.__version__, "cuda": torch.version.cuda, "dtype": args.dtype, "command": " ".join(sys.argv),
           "gpu_total_gib": torch.cuda.get_device_properties(0).total_memory / GiB if _cuda() else None}
    path = Path(args.json or f"benchmarks/results/memory-{torch.device(DEV).type}-{env['date']}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"environment": env}
    result["kernel"] = k = kernel_case(args.N, args.tile, args.density, args.batch, dtype, args.repeats, args.seed)
    path.write_text(json.dumps(result, indent=1))
    print(f"kernel N={k['N']} tile={k['tile']} density={k['density_actual']:.4f} tiles={k['stored_tiles']} "
          f"B={k['batch']}: peak {_gib(k['peak_gib'])} (inputs+tiles {_gib(k['inputs_gib'])}), "
          f"{k['median_ms']:.2f} ms fwd+bwd, {k['tflops']:.0f} TFLOP/s useful, spot-check rel err "
          f"{k['spot_check_rel_err']:.1e}; a dense N x N weight alone: {k['dense_weight_gib']:.0f} GiB "
          f"(+grad+Adam: {k['dense_weight_grad_adam_gib']:.0f} GiB)", flush=True)
    if _cuda():
        torch.cuda.empty_cache()
    if not args.skip_model:
        result["model"] = m = model_case(args.N, args.slots, args.tile, args.density, args.batch, dtype, args.steps,
                                         args.repeats, args.seed)
        print(f"model {m['slots']} slots x {m['N'] // m['slots']}, {m['stored_tiles']} tiles, {m['parameters']:,} "
              f"parameters, B={m['batch']}, {m['steps']} steps + Adam: peak {_gib(m['peak_gib'])}, "
              f"{m['median_ms']:.2f} ms/step, finite={m['finite']}")
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
