"""One training step (forward + backward) of random block-sparse Sequential2Ds on CUDA.

The GPU counterpart of ``benchmarks/model_step.py`` (which times CPU threads only): the same
setting (``n`` slots of ``S = N / n`` features, a random block mask with exactly
``round(d * n * n)`` blocks in rows 1 .. n-1, ``seq2d.from_mask(..., steps=1)``, the
same loss), the same implementations, timed on one GPU:

================  ===============================================================
``default``       the model as ``from_mask`` builds it, ``model.step(state)`` + loss, backward
``tiled``         ``to_blocksparse(tile=min(--tile, S))`` of the same model (``kernel="auto"``:
                  the Triton kernels below the CUDA dense crossover)
``kernel``        ``seq2d.sparse.bsmm`` alone on the tiled layout
``dense``         ``nn.Linear(N, N)`` on ``(B, N)``
``masked_dense``  ``F.linear(x, W * M)``, ``M`` the element mask of the block mask
``loss``          the per-slot loss terms alone (the model paths pay it, the kernels do not)
================  ===============================================================

``--compile`` (issue 35) adds ``default_compiled`` and ``tiled_compiled``: the model call and
the loss as ``torch.compile(f, mode="reduce-overhead", fullgraph=True)`` (CUDA graphs of the
forward and of AOTAutograd's backward), ``torch.compiler.cudagraph_mark_step_begin()`` before
each call; their first call (``first_ms``: trace, code generation, CUDA-graph warm-up, with a
fresh ``TORCHINDUCTOR_CACHE_DIR`` per setting and ``torch._dynamo.reset()``) is outside the
budget check, and at least two more untimed calls (recording, then a replay) precede the timing.
The CPU counterpart with inductor: ``benchmarks/model_step.py --compile``.

Timing: wall clock with ``torch.cuda.synchronize()`` before and after each call (so Python
launch overhead counts, as it does in training); ``--warmup`` untimed calls, then
``--repeats`` rounds running every implementation once in a rotating order; the median is
reported. An implementation whose first call takes longer than ``--budget-s`` is dropped
from that setting. Ratios: tiled/kernel, tiled/ideal, kernel/ideal (ideal = stored-tile
density x dense), default/dense, default/masked_dense. A forward check gives the largest
relative difference of the tiled outputs from the default ones.

    python benchmarks/gpu/model_step_cuda.py --json /tmp/model_step_cuda.json
    python benchmarks/gpu/model_step_cuda.py --slots 16 --densities 0.1 --batch 256 --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for model_step.block_mask

import seq2d  # noqa: E402
from model_step import COMPILED, block_mask, clear_compiler_caches  # noqa: E402

IMPLS = ("default", "tiled", "kernel", "dense", "masked_dense", "loss")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Setting:
    def __init__(self, N, B, n, d, seed, dtype, dev, tile):
        self.N, self.B, self.n, self.d = N, B, n, d
        self.S = S = N // n
        self.tile = min(tile, S)
        self.mask = block_mask(n, d, seed)
        self.blocks = int(self.mask.sum())
        self.reached = [i for i in range(n) if bool(self.mask[i].any())]
        kw = dict(activations="relu", bias=True, seed=seed, steps=1)
        t0 = time.perf_counter()
        model = seq2d.from_mask([S] * n, self.mask, **kw)
        self.default_store = type(model.store).__name__ if model.store is not None else "none"
        if getattr(model, "matrix", None) is None:
            tiled = copy.deepcopy(model).to_blocksparse(tile=self.tile)
        else:  # from_mask chose the tiled store itself: convert its dense-store twin (same weights)
            tiled = seq2d.from_mask([S] * n, self.mask, **kw, store="dense").to_blocksparse(tile=self.tile)
        self.build_s = time.perf_counter() - t0
        self.model, self.tiled = model.to(dev, dtype), tiled.to(dev, dtype)
        self.matrix = self.tiled.matrix
        self.layout = self.matrix.layout
        g = torch.Generator(device=dev).manual_seed(seed + 1)
        self.g, self.dev, self.dtype = g, dev, dtype
        self.state = [torch.randn(B, S, device=dev, generator=g).to(dtype).requires_grad_() for _ in range(n)]
        self.w = {i: torch.randn(B, S, device=dev, generator=g).to(dtype) for i in self.reached}

    def _rand(self, *shape, grad=False):
        t = torch.randn(*shape, device=self.dev, generator=self.g).to(self.dtype)
        return t.requires_grad_() if grad else t

    def _loss(self, out):
        terms = [(out[i] * self.w[i]).sum() for i in self.reached if out[i] is not None]
        return torch.stack(terms).sum()

    def impl(self, name):
        """(step, reset) of one implementation."""
        if name in ("default", "tiled"):
            model = self.model if name == "default" else self.tiled
            params = [p for p in model.parameters() if p.requires_grad] + self.state

            def step():
                self._loss(model.step(self.state)).backward()
            return step, params
        if name in COMPILED:
            model = self.model if name == "default_compiled" else self.tiled
            params = [p for p in model.parameters() if p.requires_grad] + self.state
            loss = torch.compile(lambda state: self._loss(model.step(state)), mode="reduce-overhead", fullgraph=True)

            def step():
                torch.compiler.cudagraph_mark_step_begin()
                loss(self.state).backward()
            return step, params
        if name == "tiled_flat":  # the tiled model on a flat state, one loss term: the kernel's harness
            x, w = self._rand(self.B, self.N, grad=True), self._rand(self.B, self.N)
            params = [p for p in self.tiled.parameters() if p.requires_grad] + [x]

            def step():
                (self.tiled.step_flat(x) * w).sum().backward()
            return step, params
        if name == "kernel":
            L, T = self.layout, self.layout.tile
            wp = self.matrix.position_tiles().detach().requires_grad_()
            x, w = self._rand(self.B, L.Kt * T, grad=True), self._rand(self.B, L.Mt * T)
            kernel = self.matrix.kernel

            def step():
                (seq2d.sparse.bsmm(x, wp, L, kernel) * w).sum().backward()
            return step, [wp, x]
        if name == "dense":
            lin = nn.Linear(self.N, self.N, bias=False, device=self.dev, dtype=self.dtype)
            x, w = self._rand(self.B, self.N, grad=True), self._rand(self.B, self.N)

            def step():
                (lin(x) * w).sum().backward()
            return step, [lin.weight, x]
        if name == "masked_dense":
            S = self.S
            M = self.mask.repeat_interleave(S, 0).repeat_interleave(S, 1).to(self.dev, self.dtype)
            W = nn.Parameter(self._rand(self.N, self.N) / self.N ** 0.5)
            x, w = self._rand(self.B, self.N, grad=True), self._rand(self.B, self.N)

            def step():
                (F.linear(x, W * M) * w).sum().backward()
            return step, [W, x]
        outs = {i: self._rand(self.B, self.S, grad=True) for i in self.reached}

        def step():
            torch.stack([(outs[i] * self.w[i]).sum() for i in self.reached]).sum().backward()
        return step, list(outs.values())

    def check(self) -> float:
        with torch.no_grad():
            a, b = self.model.step(self.state), self.tiled.step(self.state)
        return max(float((a[i].float() - b[i].float()).norm() / a[i].float().norm().clamp_min(1e-30))
                   for i in self.reached)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(step, params) -> float:
    for p in params:
        p.grad = None
    _sync()
    t0 = time.perf_counter()
    step()
    _sync()
    return (time.perf_counter() - t0) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, default=4096, help="total features (default 4096, the issue-9 setting)")
    ap.add_argument("--batch", type=int, nargs="+", default=[256, 4096], help="batch sizes (default 256 4096)")
    ap.add_argument("--slots", type=int, nargs="+", default=[16, 64, 256], help="n (default 16 64 256)")
    ap.add_argument("--densities", type=float, nargs="+", default=[0.1, 0.25], help="block densities (default 0.1 0.25)")
    ap.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    ap.add_argument("--tile", type=int, default=64, help="tile = min(this, S) (default 64, as model_step.py)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=5.0, help="drop an implementation whose first call is slower")
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS + COMPILED)
    ap.add_argument("--compile", action="store_true",
                    help="also the library paths compiled with mode='reduce-overhead' (default_compiled, tiled_compiled)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu only to smoke-test this script")
    ap.add_argument("--json", default=None, help="output (default benchmarks/results/model_step-cuda-<date>.json)")
    args = ap.parse_args(argv)
    dev, dtype = torch.device(args.device), DTYPES[args.dtype]
    if args.compile:
        args.impls += [k for k in COMPILED if k not in args.impls]
    cache_root = tempfile.mkdtemp(prefix="model_step_cuda-inductor-") if any(k in COMPILED for k in args.impls) else None
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device is available")
    name, sms = ((torch.cuda.get_device_properties(dev).name, torch.cuda.get_device_properties(dev).multi_processor_count)
                 if dev.type == "cuda" else (platform.processor() or "cpu", None))
    env = {"date": time.strftime("%Y-%m-%d"), "device": str(dev), "gpu": name, "sm_count": sms,
           "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "dtype": args.dtype, "N": args.N, "command": " ".join(sys.argv)}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    path = Path(args.json or f"benchmarks/results/model_step-{dev.type}-{env['date']}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    results = []
    print(f"# model step on {name}, torch {torch.__version__}, {args.dtype}, N={args.N}, "
          f"median of {args.repeats} after {args.warmup} warm-up (wall clock, synchronized)")
    head = (f"{'B':>5} {'n':>4} {'d':>5} {'blocks':>6} {'tiles':>6} {'tdens':>6} | "
            + " ".join(f"{k:>12}" for k in args.impls) + " | tiled/kern tiled/ideal default/dense  check")
    print(head)
    for B in args.batch:
        for n in args.slots:
            for d in args.densities:
                s = Setting(args.N, B, n, d, args.seed, dtype, dev, args.tile)
                if cache_root:  # every setting compiles cold: no graph of the last one, an empty cache
                    torch._dynamo.reset()
                    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir=cache_root)
                    clear_compiler_caches()
                impls = {k: s.impl(k) for k in args.impls}
                rec = dict(batch=B, n=n, S=s.S, density=d, blocks=s.blocks, tile=s.tile, stored_tiles=int(s.layout.nnz),
                           tile_density=float(s.layout.density), default_store=s.default_store,
                           kernel=seq2d.sparse.resolve_kernel(s.matrix.kernel, dev, dtype, s.layout.density, s.layout.tile).name,
                           build_s=s.build_s, check_rel=s.check(), rows={})
                alive = {}
                for k, (step, params) in impls.items():
                    t0 = time.perf_counter()
                    try:
                        first = timed(step, params)
                        if k in COMPILED:  # the budget applies from the call after the compile
                            t0 = time.perf_counter()
                            timed(step, params)
                    except Exception as e:  # noqa: BLE001  (a path that does not compile is a finding)
                        rec["rows"][k] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                        continue
                    rec["rows"][k] = {"first_ms": first}
                    if time.perf_counter() - t0 > args.budget_s:
                        rec["rows"][k]["skipped"] = f"first call {first / 1e3:.1f} s > --budget-s"
                        continue
                    alive[k] = (step, params)
                    for _ in range(args.warmup - 1 if k not in COMPILED else max(args.warmup - 2, 1)):
                        timed(step, params)
                times = {k: [] for k in alive}
                names = list(alive)
                for r in range(args.repeats):
                    for k in names[r % len(names):] + names[:r % len(names)]:
                        times[k].append(timed(*alive[k]))
                for k, ts in times.items():
                    rec["rows"][k].update(median_ms=statistics.median(ts), times_ms=ts)
                med = {k: v.get("median_ms") for k, v in rec["rows"].items()}

                def ratio(a, b):
                    return None if a is None or b is None else a / b
                ideal = None if med.get("dense") is None else rec["tile_density"] * med["dense"]
                rec["ratios"] = {"tiled/kernel": ratio(med.get("tiled"), med.get("kernel")),
                                 "tiled/ideal": ratio(med.get("tiled"), ideal),
                                 "kernel/ideal": ratio(med.get("kernel"), ideal),
                                 "default/dense": ratio(med.get("default"), med.get("dense")),
                                 "default/masked_dense": ratio(med.get("default"), med.get("masked_dense")),
                                 **{f"{k}/{k.removesuffix('_compiled')}": ratio(med.get(k), med.get(k.removesuffix("_compiled")))
                                    for k in COMPILED if k in args.impls}}
                results.append(rec)
                cells = " ".join(f"{med[k]:12.3f}" if med.get(k) is not None else f"{'skipped':>12}" for k in args.impls)
                rr = rec["ratios"]
                fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"  # noqa: E731
                print(f"{B:5d} {n:4d} {d:5.2f} {s.blocks:6d} {rec['stored_tiles']:6d} {rec['tile_density']:6.3f} | {cells} |"
                      f"{fmt(rr['tiled/kernel'])} {fmt(rr['tiled/ideal'])} {fmt(rr['default/dense'])} {rec['check_rel']:.1e}",
                      flush=True)
                path.write_text(json.dumps({"environment": env, "settings": results}, indent=1))
                del s, impls, alive
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    if cache_root:
        import shutil

        shutil.rmtree(cache_root, ignore_errors=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
