"""Block-sparse ``y = x @ W.T``, forward + backward: seq2d against dense and other sparse libraries.

    python benchmarks/blocksparse.py                     # the CPU target point (a few minutes)
    python benchmarks/blocksparse.py --quick --json /tmp/x.json      # CI smoke test (< 30 s)
    python benchmarks/blocksparse.py --sweep-crossover   # where dense starts to beat seq2d[cpu]
    python benchmarks/blocksparse.py --contend --densities 0.1 0.25   # the same, with a busy process beside it
    python benchmarks/blocksparse.py --device cuda --dtype bfloat16 --N 8192 --batch 8192 --tile 64 128
    python benchmarks/blocksparse.py --mask element --densities 0.01 0.02 0.05 0.1 0.25   # random element masks
    python benchmarks/blocksparse.py --mask mnist-random-element --batch 64   # the paper's random_element model

For every case (N, batch, tile, density, dtype, device) a random tile mask is drawn
(``torch.rand(Mt, Kt) < density`` from a generator seeded with ``--seed``) together with
``x`` (batch, N), a fixed upstream gradient ``dy`` (batch, N) and the tile values of ``W``
(N, N; zero outside the stored tiles). One *step* of an implementation is the forward
``y = x @ W.T`` and the backward of ``dy``, giving ``dX`` (batch, N) and ``dW`` (on the
stored tiles for the sparse implementations). ``--mask element`` draws an element mask
instead (``torch.rand(N, N) < density``, the placement of random_element models): W is zero
outside its entries, the tile implementations store every tile holding at least one entry
(at tile 64 that is every tile from element density 0.01 up: 1 - 0.99^4096 ~ 1), and
densities, ``x ideal`` and GFLOP/s count entries. ``--mask mnist-random-element`` is the one
dense-store box (810 x 3310, element density 0.511) of the paper's random_element MNIST
model, which iterates that product 4 times per forward. What each implementation times per step:

=====================  ====================================================================
``dense``              ``F.linear(x, W)``, W a dense (N, N) leaf, then ``y.backward(dy)``:
                       the baseline. Ideal time of a case = density_actual x this median.
``masked_dense``       ``F.linear(x, W * M)`` with M the (N, N) float element mask expanded
                       from the tile mask (what the public Sequential2D code does);
                       autograd gives dW = (dy.T @ x) * M.
``torch_bsr``          torch.sparse BSR, no autograd (torch's BSR cannot give dX: the
                       transposed product raises "addmm: computation on CPU is not
                       implemented for Strided + SparseBsc @ Strided"), so by hand:
                       ``y = (W_bsr @ x.T).T``; ``dX = (WT_bsr @ dy.T).T`` with a second
                       BSR tensor holding W.T, built once before timing (its refresh after
                       an optimiser step is *not* timed: a lower bound); ``dW = dy.T @ x``
                       as a dense GEMM, then the stored tiles gathered out of it into
                       BSR-values order (torch's own autograd for BSR values does the same
                       dense GEMM + ``sparse_mask``).
``torch_csr``          The same with element-level CSR tensors: ``W_csr @ x.T``,
                       ``WT_csr @ dy.T`` (W.T in CSR built once, not timed), and
                       ``dW = torch.sparse.sampled_addmm(W_csr, dy.T, x, beta=0)``. In 16-bit
                       both are run once first: a dtype torch's kernels refuse (cuSPARSE and
                       bf16) makes the row n/a with torch's message.
``torch_bsr_triton``   (CUDA, batch % 16 == 0) ``torch.sparse._triton_ops.bsr_dense_mm`` for y
                       and dX (same two BSR tensors), ``torch.sparse._triton_ops.sampled_addmm``
                       for dW.
``stk``                (CUDA, tile 128, 16-bit, batch % 128 == 0: stk asserts it; other
                       batches are n/a, not rounded) stanford-stk: ``W = stk.ops.to_sparse(W,
                       128)``, ``y = stk.ops.dds(x, W.t())``, autograd backward.
``blksprs``            (CUDA, batch % tile == 0) ``bs.ops.matmul`` of x (full layout) by W.T
                       (tile layout) with autograd; the conversions of x to and y from
                       compressed form are timed, their layout metadata is not (one
                       ``layout_cache`` per call site, filled in the untimed first step, as is
                       the autotuning; ``BLKSPRS_AUTOTUNE`` is DEFAULT unless set).
``torch_csr_autograd`` torch's own element CSR with autograd: a ``sparse_csr_tensor`` made
                       each step from fixed (crow, col) and the leaf of stored values, then
                       ``(A @ x.T).T`` and ``y.backward(dy)`` (torch's backward gives dX and
                       the CSR gradient of the values).
``torch_sparse``       (optional: PyG's torch_sparse, see benchmarks/README.md; n/a when not
                       installed) ``SparseTensor`` (element CSR) whose row pointers and
                       transpose (colptr, csr2csc) are built once, untimed (``fill_cache_``);
                       each step puts the leaf of stored values in (``set_value``, keeps the
                       caches), ``(A @ x.T).T``, autograd backward.
``seq2d[<kernel>]``    ``seq2d.sparse.bsmm(x, wp, layout, kernel)`` on a (P, T, T) leaf of
                       stored tiles, then ``y.backward(dy)``: kernels ``cpu`` (the ``runs``
                       strategy), ``cpu_gather``, ``cpu_bmm`` (one batched GEMM per pass),
                       ``dense`` (materialise W, dense GEMMs) on CPU, ``triton`` on CUDA, and
                       ``auto`` (what ``kernel="auto"`` picks).
=====================  ====================================================================

Input gradients are set to None before every step; setup (building masks, sparse
tensors, layouts, their cached plans) is outside the timing. All implementations of a
case are timed side by side in one process: ``--warmup`` untimed rounds, then
``--repeats`` rounds, each running every implementation once in a rotating order (so
load from other processes on a shared machine hits all of them alike); the median per
implementation is reported, with every raw time in the JSON.

Shared machines (CPU runs): interleaving spreads other processes' load over all
implementations, but not fairly. With 2 OpenMP threads on 2 cores, another process that
takes one core slows a single large GEMM about 2x, and an implementation made of hundreds
of small GEMMs (each an OpenMP region whose threads must meet) by tens of times. So the
script reads /proc/stat around every round: a round in which other processes used more
than ``--max-others`` (10 %) of the CPUs is replaced by another (up to ``--max-rounds``,
3 x repeats), before each round it waits for them to quieten down (at most ``--max-wait``
seconds per case), and the ``--repeats`` least disturbed rounds are the ones used. A case
still disturbed after that is queued again at the end (``--retries``, 3), and its least
disturbed attempt is reported. The other processes' share of every round is in the JSON
and summarised per case.

``--contend`` measures the other regime on purpose: it starts one competing busy process
(a Python child spinning a tight loop, not pinned to any core) for the warm-up and timed
rounds of every case and kills it afterwards (also on error or interrupt; the child also
exits by itself when this process is gone). Its CPU time is read from /proc and *not*
counted as "other processes", so the filter above still rejects rounds disturbed by anyone
else. Run the script once without and once with ``--contend`` to get the same table quiet
and contended (the JSON records ``contend`` and the spinner's share of the CPUs per round).

Reported per (case, implementation): median ms; ``x ideal`` = median / (density_actual x
dense median) with density_actual = stored tiles / all tiles; ``x dense`` = median /
dense median; speedups ``masked/this`` and ``bsr/this`` (> 1: this is faster); useful
GFLOP/s = 3 passes x 2 x batch x stored_tiles x T x T / median, the same useful work for
every implementation; the max relative error of y, dX and dW (stored tiles) against a
float64 masked-dense reference, checked once per case before timing; and ``IQR %``, the
interquartile range of the repeats over their median (how noisy that measurement was).
The case header gives the tile count, the number of *runs* (maximal sequences of adjacent
stored tiles in a tile-row: the GEMM calls per pass of seq2d's CPU ``runs`` strategy) and
the machine's load average after the case. An implementation
that is not installed, does not support the case, or raises is reported as ``n/a`` with
the reason in the JSON; the run goes on.

``--passes`` adds rows ``<impl>:<pass>`` for dense and the sparse seq2d kernels: the
three products of a step (fwd ``x @ W.T``; dX ``dy @ W``; dW ``dy.T @ x``, on the stored
tiles for seq2d: the kernel's ``dds_t`` and its ``backward`` asked for one gradient),
called directly without autograd, timed in the same rounds; their ``x dense`` and
``x ideal`` compare with the same pass of dense, their GFLOP/s count a third of the flops.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import gc
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from seq2d.envinfo import cpu_name
from seq2d.sparse import DENSE_CROSSOVER, bsmm, layout_from_tile_mask, resolve_kernel
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py, also when imported by path
from machine import busy_cpu_s  # noqa: E402

# ------------------------------------------------------------------------------ defaults
TARGET = dict(N=[4096], batch=[256], tile=[64], density=[0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0],
              dtype=["float32"], device=["cpu"])  # the CPU target point of the issue
# CI smoke test: tiny, and it never waits for a quiet machine (its rounds are too short to tell)
QUICK = dict(N=[256], batch=[16], tile=[16], density=[0.1, 1.0], repeats=2, warmup=1, max_others=1.0, max_wait=0.0)
SWEEP = [round(0.3 + 0.1 * i, 1) for i in range(8)]  # --sweep-crossover: 0.3 .. 1.0
MASKS = ("tile", "element", "mnist-random-element")  # --mask: what a density is a density of (Case)
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}

warnings.filterwarnings("ignore", message=".*[Ss]parse.*")  # torch's "BSR support is in beta" etc.


class Unavailable(Exception):
    """The implementation cannot run this case (not installed, unsupported): no timing."""


# ------------------------------------------------------------------------------ one case
class Case:
    """The shared operands of one (N, batch, tile, density, dtype, device) combination.

    ``mask`` (``--mask``) says what ``density`` is a density of: ``tile`` (the default) draws
    the tile mask and stores whole tiles; ``element`` draws an (N, N) element mask, each entry
    kept with probability ``density`` (random element placement), and the tile mask is then
    the tiles holding at least one entry (what a tiled store would have to keep);
    ``mnist-random-element`` is the dense store's box of the paper's random_element MNIST model
    (``create_model("random_model", sizes=[2500, 500, 200, 100, 10], granularity="element",
    seed=seed)``: 810 rows x 3310 columns, ``density`` and ``N`` ignored), which has no tile
    layout (810 and 3310 are not multiples of a tile).
    """

    def __init__(self, N, batch, tile, density, dtype, device, seed, mask="tile"):
        if mask not in MASKS:
            raise ValueError(f"mask must be one of {MASKS}, got {mask!r}")
        self.B, self.T, self.density, self.dtype, self.device, self.mask = batch, tile, density, dtype, device, mask
        g = torch.Generator().manual_seed(seed)
        if mask == "tile":
            if N % tile:
                raise ValueError(f"N must be a multiple of the tile, got N={N}, tile={tile}")
            Mt = N // tile
            self.tile_mask = torch.rand(Mt, Mt, generator=g) < density  # (Mt, Kt), rows = outputs
            M = self.tile_mask.repeat_interleave(tile, 0).repeat_interleave(tile, 1)  # (N, N) bool
        else:
            M = torch.rand(N, N, generator=g) < density if mask == "element" else mnist_random_element_box(seed)
            self.tile_mask = _tiles_touched(M, tile)
        self.R, self.N = M.shape  # rows (outputs) x columns (inputs); N is the input size
        self.nnz = int(M.sum())
        self.density_actual = self.nnz / M.numel()  # stored entries / all entries (tile mask: stored tiles / all)
        # operands drawn on the CPU from the seeded generator (identical on every device)
        W = torch.randn(self.R, self.N, generator=g) / self.N ** 0.5
        self.W = (W * M).to(device, dtype)  # (R, N), zero outside the stored entries
        self.x = torch.randn(batch, self.N, generator=g).to(device, dtype)
        self.dy = torch.randn(batch, self.R, generator=g).to(device, dtype)
        self.M = M.to(device)
        self.P = self.layout = self.runs = self.tile_density = None
        if self.tile_mask is not None:
            Mt, Kt = self.tile_mask.shape
            self.P = int(self.tile_mask.sum())
            self.tile_density = self.P / (Mt * Kt)
            self.layout = layout_from_tile_mask(tile, self.tile_mask).to(device)
            # GEMM calls of seq2d's CPU "runs" strategy: maximal runs of adjacent stored tiles in a tile-row
            m = self.tile_mask
            self.runs = int((m & ~torch.cat([torch.zeros(Mt, 1, dtype=torch.bool), m[:, :-1]], 1)).sum())

    @property
    def useful_flops(self) -> int:
        return 3 * 2 * self.B * self.nnz  # tile mask: nnz = P x T x T

    def describe(self) -> str:
        dt = f"{str(self.dtype).replace('torch.', '')} {self.device}"
        if self.mask == "tile":
            return (f"N={self.N} batch={self.B} tile={self.T} density={self.density:g} "
                    f"(actual {self.density_actual:.4f}: {self.P}/{self.tile_mask.numel()} tiles in {self.runs} runs, "
                    f"mean run {self.P / max(self.runs, 1):.2f} tiles) {dt}")
        what = (f"element density={self.density:g}" if self.mask == "element"
                else "mnist-random-element box")
        tiles = (f"tiles of {self.T} touched: {self.P}/{self.tile_mask.numel()} = {self.tile_density:.4f}"
                 if self.tile_mask is not None else f"no tile layout ({self.R} x {self.N} is not a multiple of {self.T})")
        return (f"{self.R}x{self.N} batch={self.B} {what} (actual {self.density_actual:.4f}: {self.nnz} entries; "
                f"{tiles}) {dt}")

    def reference(self):
        """float64 masked-dense y, dX, dW (dW zero outside the stored entries)."""
        W, x, dy = (t.double() for t in (self.W, self.x, self.dy))
        return x @ W.T, dy @ W, (dy.T @ x) * self.M


def _tiles_touched(M, tile: int):
    """(Mt, Kt) bool: the T x T tiles of the element mask ``M`` holding at least one entry
    (None when M's shape is not a multiple of the tile)."""
    R, K = M.shape
    if R % tile or K % tile:
        return None
    return M.view(R // tile, tile, K // tile, tile).any(3).any(1)


def mnist_random_element_box(seed: int):
    """The (810, 3310) bool mask of the dense store's one box of the paper's random_element
    MNIST model (seq2d.lab.mnist_comparison.MODELS["random_element"] at the full scale's sizes):
    every non-input row x every column, 1,371,000 trainable weights + 810 biases."""
    from seq2d.core import core_of
    from seq2d.lab.mnist_comparison import MODELS, SCALES
    from seq2d.models.registry import create_model

    spec = {k: v for k, v in MODELS["random_element"].items() if k != "model"}
    model = create_model(MODELS["random_element"]["model"], sizes=SCALES["full"]["sizes"], seed=seed, **spec)
    masks = [b for n, b in core_of(model, "mnist_random_element_box").named_buffers() if n.startswith("store.mask_")]
    if len(masks) != 1:
        raise RuntimeError(f"expected the random_element model to have one dense-store box mask, got {len(masks)}")
    return masks[0].cpu()


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------ implementations
# Each builder takes a Case and returns (step, result): step() runs forward + backward,
# result() returns (y, dX, dW as a dense (N, N) matrix) of the last step, for the check.
# A builder raises Unavailable when the implementation cannot run the case.

def build_dense(c: Case):
    W = c.W.clone().requires_grad_()
    x = c.x.clone().requires_grad_()
    out = {}

    def step():
        W.grad = x.grad = None
        y = F.linear(x, W)
        y.backward(c.dy)
        out["y"] = y

    return step, lambda: (out["y"], x.grad, W.grad)


def build_masked_dense(c: Case):
    W = c.W.clone().requires_grad_()
    x = c.x.clone().requires_grad_()
    M = c.M.to(c.dtype)  # the element mask, as the public Sequential2D code multiplies it
    out = {}

    def step():
        W.grad = x.grad = None
        y = F.linear(x, W * M)
        y.backward(c.dy)
        out["y"] = y

    return step, lambda: (out["y"], x.grad, W.grad)


def _tile_values(c: Case, G):
    """The stored tiles of a dense (N, N) matrix as (P, T, T), (out, in), row-major: BSR values order."""
    T, L = c.T, c.layout
    return G.view(L.Mt, T, L.Kt, T).permute(0, 2, 1, 3)[L.row, L.col]


def _bsr_pair(c: Case):
    """BSR tensors of W and of W.T with exactly the stored tiles (zero tiles stay stored)."""
    L = c.layout
    idx = torch.int32 if c.device.type == "cuda" else torch.int64
    vals = _tile_values(c, c.W).contiguous()  # (P, T_out, T_in)
    W_bsr = torch.sparse_bsr_tensor(L.row_ptr.to(idx), L.col.to(idx), vals, (c.R, c.N))
    # W.T: tile (c, r) of W.T is tile (r, c) of W transposed; positions grouped by tile-column
    WT_bsr = torch.sparse_bsr_tensor(L.col_ptr.to(idx), L.row[L.t_pos].to(idx),
                                     vals[L.t_pos].transpose(1, 2).contiguous(), (c.N, c.R))
    return W_bsr, WT_bsr


def _from_tiles(c: Case, tiles):
    """Dense (N, N) matrix from (P, T_out, T_in) tiles in BSR-values order."""
    return c.layout.to_dense(tiles.transpose(1, 2))


def _refused(c: Case, step, what: str) -> None:
    """16-bit cases: run ``step`` once; if torch's sparse kernels refuse the dtype (cuSPARSE
    has no bf16 for some BSR/CSR products, and some CPU kernels no 16-bit at all), the row is
    ``n/a`` with that reason instead of an error. Other dtypes are not probed."""
    if c.dtype not in (torch.float16, torch.bfloat16):
        return
    try:
        step()
        _sync(c.device)
    except (RuntimeError, NotImplementedError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Unavailable(f"{what} refuses {str(c.dtype).replace('torch.', '')} on {c.device.type}: {reason}") from None


def _stored_tiles(c: Case) -> None:
    """Raise Unavailable for a tile implementation when the case has no tile layout or no tile."""
    if c.layout is None:
        raise Unavailable(f"no tile layout: {c.R} x {c.N} is not a multiple of the tile {c.T}")
    if c.P == 0:
        raise Unavailable("no stored tiles")


def build_torch_bsr(c: Case):
    _stored_tiles(c)
    W_bsr, WT_bsr = _bsr_pair(c)
    out = {}

    def step():
        y = (W_bsr @ c.x.T).T  # (B, N)
        dx = (WT_bsr @ c.dy.T).T  # dy @ W
        dw = _tile_values(c, c.dy.T @ c.x)  # dense GEMM, then the stored tiles (P, T, T)
        out.update(y=y, dx=dx, dw=dw)

    _refused(c, step, "torch BSR @ dense" + (" (cuSPARSE)" if c.device.type == "cuda" else ""))
    return step, lambda: (out["y"], out["dx"], _from_tiles(c, out["dw"]))


def build_torch_csr(c: Case):
    if c.nnz == 0:
        raise Unavailable("no stored entries")
    W_csr = c.W.to_sparse_csr()
    WT_csr = c.W.T.contiguous().to_sparse_csr()
    out = {}

    def step():
        y = (W_csr @ c.x.T).T
        dx = (WT_csr @ c.dy.T).T
        dw = torch.sparse.sampled_addmm(W_csr, c.dy.T, c.x, beta=0.0)  # CSR, W's pattern
        out.update(y=y, dx=dx, dw=dw)

    _refused(c, step, "torch CSR @ dense / sampled_addmm" + (" (cuSPARSE)" if c.device.type == "cuda" else ""))
    return step, lambda: (out["y"], out["dx"], out["dw"].to_dense())


def build_torch_bsr_triton(c: Case):
    if c.device.type != "cuda":
        raise Unavailable("CUDA only")
    if c.B % 16:  # the dense operand's columns are the batch: its Triton kernels tile them by 16
        raise Unavailable(f"torch's Triton BSR ops need batch % 16 == 0, got batch {c.B}")
    try:
        from torch.sparse._triton_ops import bsr_dense_mm, sampled_addmm
    except ImportError as e:
        raise Unavailable(f"not installed ({e})") from None
    _stored_tiles(c)
    W_bsr, WT_bsr = _bsr_pair(c)
    out = {}

    def step():
        y = bsr_dense_mm(W_bsr, c.x.T.contiguous()).T
        dx = bsr_dense_mm(WT_bsr, c.dy.T.contiguous()).T
        dw = sampled_addmm(W_bsr, c.dy.T.contiguous(), c.x, beta=0.0)  # BSR, W's pattern
        out.update(y=y, dx=dx, dw=dw)

    return step, lambda: (out["y"], out["dx"], out["dw"].to_dense())


def build_stk(c: Case):
    if c.device.type != "cuda":
        raise Unavailable("CUDA only")
    if c.T != 128:
        raise Unavailable("stk supports tile 128 only")
    if c.dtype not in (torch.float16, torch.bfloat16):
        raise Unavailable("stk supports 16-bit dtypes only")
    if c.B % 128:  # stk asserts it (the dense operand is tiled by 128 rows); not rounded: same batch for all rows
        raise Unavailable(f"stk needs batch % 128 == 0, got batch {c.B} (skipped, not rounded)")
    try:
        import stk
    except ImportError:
        raise Unavailable("not installed") from None
    _stored_tiles(c)
    W = stk.ops.to_sparse(c.W, blocking=c.T)  # (out, in); stores the nonzero tiles
    W.requires_grad_(True)
    x = c.x.clone().requires_grad_()
    out = {}

    def step():
        W.data.grad = x.grad = None
        y = stk.ops.dds(x, W.t())
        y.backward(c.dy)
        out["y"] = y

    return step, lambda: (out["y"], x.grad, stk.ops.to_dense(W.grad))


# blksprs reads its autotuning profile once, at import: DEFAULT (its production search) unless the
# caller chose one. Its autotuning runs on the first call of each kernel, which is the untimed
# correctness step of run_case, so neither it nor the layout caches below are timed.
BLKSPRS_AUTOTUNE = "DEFAULT"


def build_blksprs(c: Case):
    if c.device.type != "cuda":
        raise Unavailable("CUDA only")
    if c.B % c.T:
        raise Unavailable(f"blksprs needs batch divisible by the tile, got batch {c.B}, tile {c.T}")
    os.environ.setdefault("BLKSPRS_AUTOTUNE", BLKSPRS_AUTOTUNE)
    try:
        import blksprs as bs
    except ImportError:
        raise Unavailable("not installed") from None
    _stored_tiles(c)
    return _blksprs_step(c, bs)


def _layout_cache_kw(fn) -> dict | None:
    """``{"layout_cache": {}}`` when ``fn`` takes a layout cache (blksprs >= 2), else None."""
    import inspect

    try:
        return {"layout_cache": {}} if "layout_cache" in inspect.signature(fn).parameters else None
    except (TypeError, ValueError):
        return None


def _blksprs_step(c: Case, bs):
    """The blksprs step on ``c``'s device, with one layout cache per op and call site (blksprs
    keys a cache by the layout tensors and the op, so each site keeps its own): the layouts'
    index metadata is built in the first, untimed step, not in every timed one."""
    T, L, dev = c.T, c.layout, c.device
    lay_x = torch.ones(1, c.B // T, L.Kt, dtype=torch.bool, device=dev)
    lay_w = c.tile_mask.T.contiguous().unsqueeze(0).to(dev)  # W.T (in, out): (1, Kt, Mt)
    lay_o = torch.ones(1, c.B // T, L.Mt, dtype=torch.bool, device=dev)
    kw = {name: _layout_cache_kw(getattr(bs.ops, op)) or {}
          for name, op in (("x", "to_sparse"), ("mm", "matmul"), ("y", "to_dense"), ("dw", "to_dense"))}
    w = bs.ops.to_sparse(c.W.T.contiguous().unsqueeze(0), lay_w, T).detach().requires_grad_()
    x = c.x.clone().requires_grad_()
    out = {}

    def step():
        w.grad = x.grad = None
        xs = bs.ops.to_sparse(x.unsqueeze(0), lay_x, T, **kw["x"])
        o = bs.ops.matmul(xs, lay_x, w, lay_w, lay_o, T, **kw["mm"])
        y = bs.ops.to_dense(o, lay_o, T, **kw["y"])[0]
        y.backward(c.dy)
        out["y"] = y

    step.kernel = (f"autotune={os.environ.get('BLKSPRS_AUTOTUNE', 'DEFAULT')}, layout caches "
                   + ("on" if kw["mm"] else "n/a (blksprs < 2)"))
    step.caches = kw
    return step, lambda: (out["y"], x.grad, bs.ops.to_dense(w.grad, lay_w, T, **kw["dw"])[0].T)


def _element_values(c: Case):
    """(row, col, values) of W's stored entries in row-major (CSR) order; values a fresh leaf."""
    row, col = c.M.nonzero(as_tuple=True)  # row-major: sorted by row, then column
    return row, col, c.W[row, col].clone().requires_grad_()


def _element_result(c: Case, out, x, row, col, value):
    dw = torch.zeros(c.R, c.N, dtype=c.dtype, device=c.device)
    dw[row, col] = value.grad
    return out["y"], x.grad, dw


def build_torch_csr_autograd(c: Case):
    if c.nnz == 0:
        raise Unavailable("no stored entries")
    row, col, value = _element_values(c)
    idx = torch.int32 if c.device.type == "cuda" else torch.int64
    crow = torch.zeros(c.R + 1, dtype=idx, device=c.device)
    crow[1:] = torch.bincount(row, minlength=c.R).cumsum(0)
    col = col.to(idx)
    x = c.x.clone().requires_grad_()
    out = {}

    def step():
        value.grad = x.grad = None
        A = torch.sparse_csr_tensor(crow, col, value, (c.R, c.N))  # a view of the leaf: gradient flows to it
        y = (A @ x.T).T
        y.backward(c.dy)
        out["y"] = y

    _refused(c, step, "torch CSR @ dense with autograd" + (" (cuSPARSE)" if c.device.type == "cuda" else ""))
    return step, lambda: _element_result(c, out, x, row.long(), col.long(), value)


def build_torch_sparse(c: Case):
    try:
        from torch_sparse import SparseTensor
    except ImportError:
        raise Unavailable("torch_sparse not installed (optional; benchmarks/README.md says how)") from None
    if c.nnz == 0:
        raise Unavailable("no stored entries")
    row, col, value = _element_values(c)
    # The pattern is fixed, the values are the parameters: row pointers and the transpose's
    # (colptr, csr2csc), which the backward needs for dX, are built once here, untimed, and
    # every step only swaps the values in (set_value keeps them).
    A0 = SparseTensor(row=row, col=col, value=value.detach(), sparse_sizes=(c.R, c.N), is_sorted=True).fill_cache_()
    x = c.x.clone().requires_grad_()
    out = {}

    def step():
        value.grad = x.grad = None
        A = A0.set_value(value, layout="coo")
        y = (A @ x.T).T
        y.backward(c.dy)
        out["y"] = y

    return step, lambda: _element_result(c, out, x, row, col, value)


def build_seq2d(name: str):
    def build(c: Case):
        _stored_tiles(c)
        try:
            kernel = resolve_kernel(name, c.device, c.dtype, c.layout.density, c.layout.tile)
        except (RuntimeError, ValueError) as e:
            raise Unavailable(str(e)) from None
        wp = c.layout.from_dense(c.W).requires_grad_()  # (P, T, T) stored tiles, transposed
        x = c.x.clone().requires_grad_()
        out = {"kernel": kernel.name}

        def step():
            wp.grad = x.grad = None
            y = bsmm(x, wp, c.layout, kernel)
            y.backward(c.dy)
            out["y"] = y

        step.kernel = kernel.name
        return step, lambda: (out["y"], x.grad, c.layout.to_dense(wp.grad))

    return build


def implementations(device: torch.device) -> dict:
    impls = {
        "dense": build_dense,
        "masked_dense": build_masked_dense,
        "torch_bsr": build_torch_bsr,
        "torch_csr": build_torch_csr,
        "torch_csr_autograd": build_torch_csr_autograd,
    }
    if device.type == "cuda":
        impls.update(torch_bsr_triton=build_torch_bsr_triton, stk=build_stk, blksprs=build_blksprs)
    impls["torch_sparse"] = build_torch_sparse
    kernels = ["cpu", "cpu_gather", "cpu_bmm", "dense"] if device.type == "cpu" else ["triton", "dense"]
    for b in [*kernels, "auto"]:
        impls[f"seq2d[{b}]"] = build_seq2d(b)
    return impls


# --passes: the three products of one step timed one by one, without autograd
PASSES = ("fwd", "dX", "dW")


def build_pass(impl: str, which: str):
    """``dense`` or ``seq2d[<kernel>]``, one pass: fwd ``x @ W.T``, dX ``dy @ W``, dW ``dy.T @ x`` (stored tiles)."""
    def build(c: Case):
        x, dy = c.x, c.dy
        if impl == "dense":
            W = c.W
            f = {"fwd": lambda: x @ W.T, "dX": lambda: dy @ W, "dW": lambda: dy.T @ x}[which]
        else:
            _stored_tiles(c)
            try:
                k = resolve_kernel(impl[6:-1], c.device, c.dtype, c.layout.density, c.layout.tile)
            except (RuntimeError, ValueError) as e:
                raise Unavailable(str(e)) from None
            wp, L = c.layout.from_dense(c.W), c.layout
            f = {"fwd": lambda: k.dds_t(x, wp, L),
                 "dX": lambda: k.backward(dy, x, wp, L, True, False),
                 "dW": lambda: k.backward(dy, x, wp, L, False, True)}[which]
        return (lambda: f()), None  # no correctness check: the full steps have it

    return build


def pass_implementations(builders: dict) -> dict:
    """Pass-level rows ``<impl>:<pass>`` for dense and the sparse seq2d kernels among ``builders``."""
    out = {}
    for impl in builders:
        if impl == "dense" or (impl.startswith("seq2d[") and impl not in ("seq2d[auto]", "seq2d[dense]")):
            for which in PASSES:
                out[f"{impl}:{which}"] = build_pass(impl, which)
    return out


# ------------------------------------------------------------------------------ measuring
def max_rel_error(c: Case, result, ref) -> float:
    errs = []
    for got, want, masked in zip(result, ref, (False, False, True)):
        got = got.detach().double()
        if masked:
            got = got * c.M
        errs.append(float((got - want).abs().max() / want.abs().max().clamp_min(1e-30)))
    return max(errs)


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# The spinner of --contend: a tight loop that exits by itself once its parent is gone.
_SPIN = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(200000):\n        pass\n"


class Contender:
    """One competing busy process (``--contend``), started and killed around each case's timing."""

    def __init__(self):
        self.proc = None

    def start(self) -> None:
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL)
            time.sleep(0.2)  # let it reach its loop

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cpu_s(self) -> float:
        """CPU seconds the spinner has used (0 when none runs)."""
        if self.proc is None:
            return 0.0
        try:
            f = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        except (OSError, ValueError, IndexError):
            return float("nan")


CONTENDER = Contender()
atexit.register(CONTENDER.stop)


def _excluded_cpu_s() -> float:
    """CPU seconds not counted as "other processes": this process and the --contend spinner."""
    return _own_cpu_s() + CONTENDER.cpu_s()


def _wait_quiet(max_others: float, until: float, window: float = 0.5) -> float | None:
    """Sleep until other processes use at most ``max_others`` of the CPUs over a ``window``
    (or until ``until``, a perf_counter deadline); returns the seconds waited, None if it timed out."""
    t0 = time.perf_counter()
    ncpu = os.cpu_count() or 1
    while True:
        busy, own = busy_cpu_s(), _excluded_cpu_s()
        time.sleep(window)
        others = ((busy_cpu_s() - busy) - (_excluded_cpu_s() - own)) / (window * ncpu)
        if not others > max_others:  # also NaN: no /proc/stat, nothing to wait for
            return time.perf_counter() - t0
        if time.perf_counter() >= until:
            return None


def run_case(c: Case, builders: dict, repeats: int, warmup: int, max_others: float, max_rounds: int,
             max_wait: float = 0.0, contend: bool = False):
    """Build, check and time every implementation of one case.

    Returns ``(rows, rounds)``: per implementation its record, and per timed round the
    share of the machine's CPUs that *other* processes used meanwhile. A round in which
    they used more than ``max_others`` is replaced by another one (at most ``max_rounds``
    in all); if too few rounds were clean, the least disturbed ones make up ``repeats``.
    Before each round it waits (up to ``max_wait`` seconds per case in all) for the other
    processes to quieten down.
    """
    rows: dict[str, dict] = {}
    steps = {}
    ref = c.reference()
    for name, build in builders.items():
        row = rows[name] = {"status": "ok"}
        try:
            step, result = build(c)
            if hasattr(step, "kernel"):
                row["kernel"] = step.kernel
            step()  # the correctness check doubles as the first warm-up
            _sync(c.device)
            row["max_rel_err"] = max_rel_error(c, result(), ref) if result else None
            steps[name] = step
        except Unavailable as e:
            row.update(status="n/a", error=str(e))
        except Exception as e:  # noqa: BLE001  record and go on, as documented
            row.update(status="error", error=f"{type(e).__name__}: {e}")
    del ref
    names = list(steps)

    def once(name):
        try:
            _sync(c.device)
            t0 = time.perf_counter()
            steps[name]()
            _sync(c.device)
            return time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            rows[name].update(status="error", error=f"{type(e).__name__}: {e}")
            names.remove(name)
            return None

    rounds = []  # {"times": {name: s}, "others": share of all CPUs used by other processes}
    ncpu = os.cpu_count() or 1
    if contend:
        CONTENDER.start()  # --contend: one busy process for the warm-up and the timed rounds
    try:
        for _ in range(max(warmup - 1, 0)):
            for n in list(names):
                once(n)
        deadline = time.perf_counter() + max_wait
        while names and len(rounds) < max(max_rounds, repeats):
            if max_wait > 0 and max_others < 1:
                _wait_quiet(max_others, deadline)
            k = len(rounds) % len(names)
            wall, busy, excl, spin = time.perf_counter(), busy_cpu_s(), _excluded_cpu_s(), CONTENDER.cpu_s()
            times = {}
            for n in names[k:] + names[:k]:  # rotating order
                t = once(n)
                if t is not None:
                    times[n] = t
            wall = time.perf_counter() - wall
            others = ((busy_cpu_s() - busy) - (_excluded_cpu_s() - excl)) / (wall * ncpu)
            rounds.append({"times": times, "others": max(others, 0.0) if others == others else None})
            if contend:
                rounds[-1]["contender"] = (CONTENDER.cpu_s() - spin) / (wall * ncpu)  # the spinner's share
            if sum(1 for r in rounds if r["others"] is None or r["others"] <= max_others) >= repeats:
                break
    finally:
        CONTENDER.stop()
    ranked = sorted(range(len(rounds)), key=lambda i: (rounds[i]["others"] or 0.0, i))
    used = sorted(ranked[:repeats])  # the least disturbed rounds (all of them on a quiet machine)
    for i, r in enumerate(rounds):
        r["used"] = i in used
    for n in names:
        ms = [rounds[i]["times"][n] * 1e3 for i in used if n in rounds[i]["times"]]
        if ms:
            rows[n].update(times_ms=ms, median_ms=statistics.median(ms), min_ms=min(ms))
            if len(ms) >= 2:
                q1, _, q3 = statistics.quantiles(ms, n=4)
                rows[n]["iqr_pct"] = 100 * (q3 - q1) / statistics.median(ms)  # spread: noise indicator
    _derive(c, rows)
    return rows, rounds


def _derive(c: Case, rows: dict) -> None:
    """Ratios to ideal/dense, speedups vs masked_dense and torch_bsr, useful GFLOP/s."""
    med = {n: r["median_ms"] for n, r in rows.items() if "median_ms" in r}
    dense = med.get("dense")
    ideal = c.density_actual * dense if dense else None
    for n, ms in med.items():
        r = rows[n]
        which = n.partition(":")[2]
        if which:  # a single pass (--passes): against the same pass of dense, one third of the flops
            ref = med.get(f"dense:{which}")
            r["x_ideal"] = ms / (c.density_actual * ref) if ref and c.density_actual else None
            r["x_dense"] = ms / ref if ref else None
            r["speedup_vs_masked_dense"] = r["speedup_vs_torch_bsr"] = None
            r["gflops"] = c.useful_flops / 3 / (ms * 1e-3) / 1e9
            continue
        r["x_ideal"] = ms / ideal if ideal else None
        r["x_dense"] = ms / dense if dense else None
        r["speedup_vs_masked_dense"] = med["masked_dense"] / ms if "masked_dense" in med else None
        r["speedup_vs_torch_bsr"] = med["torch_bsr"] / ms if "torch_bsr" in med else None
        r["gflops"] = c.useful_flops / (ms * 1e-3) / 1e9


# ------------------------------------------------------------------------------ printing
def _fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def print_case(c: Case, rows: dict, rounds: list, args, attempt: int = 1) -> None:
    where = f"{args.threads} threads" if c.device.type == "cpu" else torch.cuda.get_device_name(c.device)
    print(f"\n## {c.describe()}, {where}")
    shares = [r["others"] for r in rounds if r["used"] and r["others"] is not None]
    dirty = sum(1 for r in rounds if r["others"] is not None and r["others"] > args.max_others)
    spin = [r["contender"] for r in rounds if r["used"] and r.get("contender") is not None]
    if shares:
        print(f"rounds: {sum(r['used'] for r in rounds)} used of {len(rounds)} ({dirty} with other processes "
              f"above {args.max_others:.0%} of the CPUs); other processes in the used rounds: median "
              f"{statistics.median(shares):.0%}, max {max(shares):.0%}; load average {' '.join(c.load)}"
              + (f"; attempt {attempt}" if attempt > 1 else "")
              + (f"; --contend spinner: median {statistics.median(spin):.0%} of the CPUs" if spin else ""))
    print(f"{'implementation':<20}{'ms':>10}{'x ideal':>9}{'x dense':>9}{'masked/this':>12}"
          f"{'bsr/this':>10}{'GFLOP/s':>9}{'max rel err':>13}{'IQR %':>7}")
    for name, r in rows.items():
        label = f"{name[:-1]}->{r['kernel']}]" if name == "seq2d[auto]" and "kernel" in r else name
        if "median_ms" not in r:
            print(f"{label:<20}{'n/a':>10}   ({r.get('error', r['status'])[:90]})")
            continue
        print(f"{label:<20}{r['median_ms']:>10.2f}{_fmt(r['x_ideal'], '.2f'):>9}{_fmt(r['x_dense'], '.2f'):>9}"
              f"{_fmt(r['speedup_vs_masked_dense'], '.2f'):>12}{_fmt(r['speedup_vs_torch_bsr'], '.2f'):>10}"
              f"{r['gflops']:>9.1f}{_fmt(r.get('max_rel_err'), '.1e'):>13}{_fmt(r.get('iqr_pct'), '.0f'):>7}")
    sys.stdout.flush()


def crossover(records: list[dict], sparse: str, dense: str):
    """Lowest swept density from which ``dense`` is faster than ``sparse`` at every higher one."""
    pts = sorted((r["density"], r["rows"][dense].get("median_ms"), r["rows"][sparse].get("median_ms"))
                 for r in records)
    pts = [(d, a, b) for d, a, b in pts if a is not None and b is not None]
    found = None
    for d, t_dense, t_sparse in reversed(pts):
        if t_dense < t_sparse:
            found = d
        else:
            break
    return found


# ------------------------------------------------------------------------------ environment
def loadavg() -> list[str]:
    """1, 5 and 15-minute load averages (other processes on a shared machine)."""
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return ["?"]


def _source_hash() -> str:
    """sha256 of the seq2d.sparse sources (the code under test), first 16 hex digits."""
    import seq2d.sparse

    h = hashlib.sha256()
    root = Path(seq2d.sparse.__file__).parent
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def environment(args, devices) -> dict:
    env = {
        "date": datetime.date.today().isoformat(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "seed": args.seed,
        "contend": bool(getattr(args, "contend", False)),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "dense_crossover": {"/".join(str(p) for p in k): (v if math.isfinite(v) else str(v)) for k, v in DENSE_CROSSOVER.items()},
        "seq2d_sparse_sha256": _source_hash(),  # which version of the kernels was measured
    }
    if any(d.type == "cuda" for d in devices):
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    env["loadavg_start"] = loadavg()
    return env


# ------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="+", default=TARGET["N"], help="matrix size N (W is N x N); default 4096")
    ap.add_argument("--batch", type=int, nargs="+", default=TARGET["batch"], help="batch rows of x; default 256")
    ap.add_argument("--tile", type=int, nargs="+", default=TARGET["tile"], help="tile size T; default 64")
    ap.add_argument("--densities", type=float, nargs="+", default=TARGET["density"],
                    help="densities of the --mask; default 0.01 0.05 0.1 0.25 0.5 0.75 1.0")
    ap.add_argument("--mask", default="tile", choices=MASKS,
                    help="tile (default): random tile masks; element: random element masks (the tile "
                         "implementations then keep every tile holding an entry); mnist-random-element: the "
                         "dense-store box of the paper's random_element MNIST model (810 x 3310; --N and "
                         "--densities ignored)")
    ap.add_argument("--dtype", nargs="+", default=TARGET["dtype"], choices=sorted(DTYPES), help="default float32")
    ap.add_argument("--device", nargs="+", default=TARGET["device"], help="cpu and/or cuda; default cpu")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds, median reported (default 7)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2; the check is one)")
    ap.add_argument("--max-others", type=float, default=0.1,
                    help="a round in which other processes used more than this share of the machine's CPUs "
                         "is replaced by another (default 0.1; 1 disables)")
    ap.add_argument("--max-rounds", type=int, help="at most this many timed rounds per case (default 3 x repeats)")
    ap.add_argument("--max-wait", type=float, default=120.0,
                    help="CPU runs: before each round, wait for the other processes to drop below --max-others, "
                         "for at most this many seconds per attempt in all (default 120; 0 never waits)")
    ap.add_argument("--retries", type=int, default=3,
                    help="a case with disturbed rounds is queued again up to this many times; the least "
                         "disturbed attempt is reported (default 3)")
    ap.add_argument("--contend", action="store_true",
                    help="CPU runs: time every case with one competing busy process (a spinning Python "
                         "child, not pinned, killed afterwards); its CPU time is not counted as other processes")
    ap.add_argument("--seed", type=int, default=0, help="seed of masks and operands (default 0)")
    ap.add_argument("--impls", nargs="+", help="run only these implementations (names as printed)")
    ap.add_argument("--passes", action="store_true",
                    help="also time the three passes (fwd, dX, dW) of dense and of the sparse seq2d kernels "
                         "one by one, rows '<impl>:<pass>' compared with the same pass of dense")
    ap.add_argument("--quick", action="store_true",
                    help="CI smoke mode: N=256, batch=16, tile=16, densities 0.1 1.0, repeats 2, warmup 1, no waiting")
    ap.add_argument("--sweep-crossover", action="store_true",
                    help="densities 0.3..1.0 step 0.1, dense against the seq2d kernels; prints the crossover")
    ap.add_argument("--json", help="output file (default benchmarks/results/blocksparse-<device>[-<mask>]-<date>.json)")
    args = ap.parse_args(argv)

    if args.quick:
        args.N, args.batch, args.tile, args.densities = QUICK["N"], QUICK["batch"], QUICK["tile"], QUICK["density"]
        args.repeats, args.warmup = QUICK["repeats"], QUICK["warmup"]
        args.max_others, args.max_wait = QUICK["max_others"], QUICK["max_wait"]
    if args.sweep_crossover:
        args.densities = SWEEP
    if args.mask == "mnist-random-element":
        args.N, args.densities = args.N[:1], [float("nan")]  # one box, whatever --N and --densities say
    torch.set_num_threads(args.threads)
    devices = [torch.device(d) for d in args.device]
    for d in devices:
        if d.type == "cuda" and not torch.cuda.is_available():
            ap.error("--device cuda: no CUDA device is available")

    env = environment(args, devices)
    print(f"# blocksparse benchmark, {env['date']}: torch {env['torch']}, {env['cpu']} "
          f"({env.get('gpu', 'no GPU')}), {env['threads']} threads, median of {args.repeats} after "
          f"{args.warmup} warm-up, seed {args.seed}"
          + (", CONTENDED (one busy process beside it)" if args.contend else ""))
    records = []
    queue = []  # (order, device, builders, dtype, N, batch, tile, density, attempt)
    for device in devices:
        builders = implementations(device)
        if args.sweep_crossover and not args.impls:
            sparse = "seq2d[cpu]" if device.type == "cpu" else "seq2d[triton]"
            keep = ["dense", sparse, "seq2d[cpu_gather]", "seq2d[cpu_bmm]", "seq2d[dense]"]
            builders = {k: v for k, v in builders.items() if k in keep}
        if args.impls:
            unknown = sorted(set(args.impls) - set(builders))
            if unknown:
                ap.error(f"unknown implementation(s) {unknown} on {device}. Select from {list(builders)}")
            builders = {k: v for k, v in builders.items() if k in args.impls}
        if args.passes:
            builders = {**builders, **pass_implementations(builders)}
        for dtype in args.dtype:
            for N in args.N:
                for batch in args.batch:
                    for tile in args.tile:
                        for density in args.densities:
                            queue.append([len(queue), device, builders, dtype, N, batch, tile, density, 0])
    masked = "" if args.mask == "tile" else f"-{args.mask}"
    path = Path(args.json or f"benchmarks/results/blocksparse-{'-'.join(args.device)}{masked}-{env['date']}"
                             f"{'-contend' if args.contend else ''}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    best: dict[int, dict] = {}  # per case, the least disturbed attempt
    done: list[int] = []
    while queue:
        item = queue.pop(0)
        order, device, builders, dtype, N, batch, tile, density, attempt = item
        c = Case(N, batch, tile, density, DTYPES[dtype], device, args.seed, args.mask)
        load_before = loadavg()
        rows, rounds = run_case(c, builders, args.repeats, args.warmup,
                                args.max_others, args.max_rounds or 3 * args.repeats,
                                args.max_wait if device.type == "cpu" else 0.0,
                                contend=args.contend and device.type == "cpu")
        c.load = loadavg()
        used = [r["others"] or 0.0 for r in rounds if r["used"]]
        disturbance = statistics.median(used) if used else 0.0
        rec = dict(mask=args.mask, R=c.R, N=c.N, batch=batch, tile=tile,  # W is R x N (outputs x inputs)
                   density=density if density == density else None, density_actual=c.density_actual,
                   nnz=c.nnz, stored_tiles=c.P, tile_density=c.tile_density, runs=c.runs,
                   dtype=dtype, device=str(device), attempt=attempt + 1,
                   loadavg_before=load_before, loadavg_after=c.load, disturbance=disturbance,
                   rounds=[{k: r[k] for k in ("others", "contender", "used") if k in r} for r in rounds],
                   rows=rows)
        if order not in best or disturbance < best[order]["disturbance"]:
            best[order] = rec
        clean = bool(used) and max(used) <= args.max_others
        if not clean and attempt < args.retries:
            item[-1] += 1
            queue.append(item)  # try again later, when the other processes may have finished
            print(f"\n(disturbed: {c.describe()}, other processes used a median {disturbance:.0%} of the CPUs "
                  f"in its rounds; queued again, attempt {attempt + 2} of {args.retries + 1})")
        else:
            rec = best[order]
            c.load = rec["loadavg_after"]
            print_case(c, rec["rows"], rec["rounds"], args, rec["attempt"])
            done.append(order)  # the JSON is rewritten after every case: an interrupted run keeps its cases
            path.write_text(json.dumps({"environment": env, "cases": [best[k] for k in sorted(done)]}, indent=1))
        del c
        gc.collect()
    records = [best[k] for k in sorted(best)]
    result = {"environment": env, "cases": records}

    if args.sweep_crossover:
        result["crossover"] = {}
        groups: dict = {}
        for r in records:
            groups.setdefault((r["device"], r["dtype"], r["N"], r["batch"], r["tile"]), []).append(r)
        print()
        for key, recs in groups.items():
            sparse = "seq2d[cpu]" if key[0] == "cpu" else "seq2d[triton]"
            for dense in ("dense", "seq2d[dense]"):
                if dense not in recs[0]["rows"] or sparse not in recs[0]["rows"]:
                    continue
                d = crossover(recs, sparse, dense)
                tag = "device={} dtype={} N={} batch={} tile={}".format(*key)
                result["crossover"][f"{tag}: {dense} vs {sparse}"] = d
                where = f"from density {d:g}" if d is not None else f"nowhere up to {max(SWEEP):g}"
                print(f"crossover ({tag}): {dense} beats {sparse} {where}")

    env["loadavg_end"] = loadavg()
    path.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
