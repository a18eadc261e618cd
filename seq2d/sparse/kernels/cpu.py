"""CPU kernels: GEMMs on strided views of the stored tiles, no weight copies.

Five strategies behind one class, one registered kernel each (``CPUKernel(strategy=...)``):

``runs`` (default)
    Positions are grouped into *runs*: maximal sequences of stored tiles in one tile-row
    with consecutive tile-columns. A run from column ``c0`` of length ``k`` is one GEMM on
    strided views, accumulated in place (BLAS ``beta = 1``)::

        y[:, r]           += x[:, c0:c0+k] @ panel          panel = wp[a:b].view(k*T, T)
        dW panel           = x[:, c0:c0+k].T @ dy[:, r]     (written in place)
        dx[:, c0:c0+k]    += dy[:, r] @ panel.T

    Nothing is gathered or copied; the cost is one GEMM call per run. A layout of short
    runs (random tiles: about one or two tiles each) with small gathered copies is computed
    as ``gather`` instead (``ROWS_MAX_TILES_PER_RUN``, ``ROWS_MAX_VALUES``, measured); others
    as ``fmruns`` (tile 64 at large batches) or ``panels`` (small tiles), see
    ``FMRUNS_*`` and ``PANELS_*`` (measured).
``gather``
    One GEMM per tile-row over the gathered input tiles ``X_r`` (B, k*T) (forward, dW); dX
    is one GEMM per tile-row too, ``dy[:, r] @ panel_r.T`` -> the (B, k*T) products of the
    row's tiles, then one scatter-add (``index_add_``) of all of them by tile-column. Fewer,
    larger GEMMs, paid for with about B*P*T gathered or scattered values per pass.

``bmm`` (kernel ``cpu_bmm``)
    Few parallel regions per op, for shared machines. ``runs`` and ``gather`` issue one GEMM
    per run / tile-row, and every GEMM is its own OpenMP parallel region whose threads meet
    at a barrier: when another process holds a core, each region waits for a descheduled
    thread, and hundreds of small GEMMs collapse (docs/performance.md, "CPU kernel under
    contention"). ``bmm`` cuts every tile-row (tile-column for dX) into *chunks* of ``k0``
    stored tiles, the last one padded with zero tiles, and runs all chunks of an op as one
    batched GEMM::

        G  = x tiles of every chunk slot          (B, C, k0*T)   one index_select
        Wg = stored tiles of every chunk slot     (C, k0*T, T)   one index_select
        O  = bmm(G.transpose(0, 1), Wg)           (C, B, T)      one batched GEMM
        y  = per-row sums of the chunks of O      (Mt, B, T)     one segment_reduce

    dX is the same over tile-columns (dy tiles, transposed stored tiles); dW is one bmm of
    the dy tile of every chunk's row by the gathered x chunk, ``dW.T`` as ``(C, T, k0*T)``,
    from which the stored tiles are picked (transposed, pad slots dropped). About five
    parallel ops per pass (gathers, zeroing the pad slots, the bmm, the final copy; the
    segment sum is serial), whatever the layout. The price is the gathered copies (about
    B*P*T values per pass, like ``gather``), the padding (``k0`` is chosen per layout by
    :func:`_chunk_size`) and the reductions. The big temporaries live in per-thread scratch
    buffers (:func:`release_scratch` frees them). Quiet, this is slower than ``runs`` at
    tiles 64 and 128 and faster at tile 16; with a competing process it is many times
    faster (docs/performance.md).

``panels`` (kernel ``cpu_panels``) and ``fmruns`` (kernel ``cpu_fmruns``)
    The *feature-major* paths (:mod:`.cpu_fm`): the dense operand is transposed once per op,
    so a tile-column is one contiguous (T, B) block. ``panels``: one GEMM per tile-row over
    its gathered blocks forward, and per tile-column one gathered ``dy`` panel for both dX
    and dW (tiles 16 and 32, where a run's GEMM is tiny and a batch-major gather copies
    pieces of T values). ``fmruns``: ``runs`` on the contiguous blocks, dX tile by tile per
    tile-column (larger tiles).

``panel_r = wp[a:b].view(k*T, T)`` is contiguous thanks to the transposed tile storage.
Which strategy wins depends on density, batch, the machine's memory bandwidth and how busy
the machine is; ``benchmarks/blocksparse.py`` measures them side by side, ``--contend``
with a competing busy process (docs/performance.md).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch
from torch import Tensor

from ...errors import InvalidValue
from ...threads import follow_load_threads, threads_at_most
from ..autograd import host_product
from ..layout import BlockSparseLayout
from . import cpu_fm
from .base import Kernel, register_kernel
from ...memo import memo_dict


@contextmanager
def _threads_for_load():
    """Fewer OpenMP threads while other processes hold cores (``runs``/``gather`` issue one
    parallel region per GEMM and wait at every barrier for a descheduled thread; measured in
    docs/performance.md, "Model step", under contention). :func:`seq2d.threads.follow_load_threads`
    decides; torch's setting is restored on exit."""
    n = torch.get_num_threads()
    with threads_at_most(follow_load_threads(n) if n > 1 else n):
        yield


# When the ``runs`` strategy computes row by row over gathered tiles instead (as ``gather``):
# runs of at most this many stored tiles on average, and at most this many gathered values
# (batch x stored tiles x T) per op. Measured with `python benchmarks/tile_paths.py --repeats 9
# --rounds 3` (2026-11-25, AMD EPYC, 1 thread, float32, tile 64, load average 3.0 from other
# jobs; benchmarks/results/tile_paths-cpu-2026-11-25.json, -avx2-: with torch's AVX2 kernels),
# forward + backward, rows / runs time, AVX512 (AVX2): the random_tile MNIST model's two layouts
# at batch 64, 1.9 tiles per run: 0.62 (0.65) for the held input's, 1.3M values, and 0.79 (0.80)
# for the rest, 0.5M; N=4096, batch 256: 0.89 (0.87) at density 0.1 (1.15 tiles per run, 7.0M
# values), 1.14 (1.15) at 0.25 (16.5M), 1.24 (1.32) at 0.5 (32.8M: the gathered copies and the
# dX scatter leave the cache), 1.68 (1.85) with runs of 8 tiles.
ROWS_MAX_TILES_PER_RUN = 2.0
ROWS_MAX_VALUES = 4 * 1024 * 1024

# The feature-major paths (:mod:`.cpu_fm`). ``fmruns`` at tiles FMRUNS_MIN_TILE..FMRUNS_MAX_TILE and
# batch FMRUNS_MIN_BATCH and up, for a layout of short runs or of stored-tile density
# FMRUNS_MIN_DENSITY and up (below it the two transposes per op cost more than the contiguous
# blocks save); otherwise ``panels`` for a layout of short runs up to tile PANELS_MAX_TILE, and up
# to tile PANELS_SMALL_TILE for runs up to PANELS_MAX_TILES_PER_RUN tiles on average (a GEMM per
# run of 16 or 32 columns is slow). Measured with `python benchmarks/tile_paths.py --cases grid
# --repeats 3 --rounds 2` (2026-11-28 23:25, Intel Xeon, AVX512, 1 thread, training runs paused,
# load 2.1; benchmarks/results/tile_paths-cpu-2026-11-28-grid.json): model_step.py's layouts at
# tiles 16-128, slots of one tile (random tiles) and of 64-512 features (runs of 1.1-39 tiles),
# density 0.1/0.25, batch 64/256. Its `picked` (fmruns up to tile 128 then) was the fastest path
# or within 1.10x in 54 of 56 layouts (1.19x: tile 32, runs of 20, batch 256, fmruns faster than
# runs); at tile 128 fmruns lost to runs by 5-9% in the 3 layouts it took, hence FMRUNS_MAX_TILE.
PANELS_MAX_TILE = 64
PANELS_SMALL_TILE = 32
PANELS_MAX_TILES_PER_RUN = 8.0
FMRUNS_MIN_TILE = 64
FMRUNS_MAX_TILE = 64
FMRUNS_MIN_BATCH = 128
FMRUNS_MIN_DENSITY = 0.2


def _plan(layout: BlockSparseLayout) -> dict:
    """Index plans cached on the layout (built once, never in a backward pass)."""
    cache = layout.__dict__.get("_cpu_plan")
    if cache is not None:
        return cache
    row, col = layout.row.tolist(), layout.col.tolist()
    runs = []  # (row, first col, a, b)
    p, P = 0, len(row)
    while p < P:
        q = p + 1
        while q < P and row[q] == row[p] and col[q] == col[q - 1] + 1:
            q += 1
        runs.append((row[p], col[p], p, q))
        p = q

    def groups(ptr, idx, n):
        out = []
        for r in range(n):
            a, b = ptr[r], ptr[r + 1]
            contiguous = b > a and idx[b - 1] - idx[a] == b - a - 1
            out.append((a, b, idx[a] if contiguous else -1))
        return out

    # First touch (runs strategy): the first run writing an output tile-row overwrites it
    # (BLAS beta = 0) instead of accumulating into a zero-filled buffer; only tile-rows no
    # run writes are zeroed (one index_fill_). Same for the dX tile-columns of the backward
    # pass: a run whose columns are all untouched so far overwrites them; the columns that
    # no such run covers are zeroed up front.
    seen_r: set[int] = set()
    first_r = []
    for r, _c0, _a, _b in runs:
        first_r.append(r not in seen_r)
        seen_r.add(r)
    seen_c: set[int] = set()
    first_c, overwritten = [], set()
    for _r, c0, a, b in runs:
        cols = range(c0, c0 + b - a)
        fresh = not any(c in seen_c for c in cols)
        first_c.append(fresh)
        if fresh:
            overwritten.update(cols)
        seen_c.update(cols)
    n_empty = sum(1 for a, b in zip(layout.host()["row_ptr"], layout.host()["row_ptr"][1:]) if a == b)
    cache = {
        "runs": runs,
        "runs_beta_y": [0.0 if f else 1.0 for f in first_r],
        "runs_beta_dx": [0.0 if f else 1.0 for f in first_c],
        "zero_rows": torch.tensor(sorted(set(range(layout.Mt)) - seen_r), dtype=torch.long),
        "zero_cols": torch.tensor(sorted(set(range(layout.Kt)) - overwritten), dtype=torch.long),
        "rows": groups(layout.row_ptr.tolist(), col, layout.Mt),
        "empty_rows": [r for r in range(layout.Mt) if layout.row_ptr[r] == layout.row_ptr[r + 1]],
        # more runs than tile-rows, few tiles each: random tiles, where one GEMM per run is slow
        "short_runs": len(runs) > layout.Mt - n_empty and P <= ROWS_MAX_TILES_PER_RUN * len(runs),
    }
    layout.__dict__["_cpu_plan"] = cache
    return cache


# ---------------------------------------------------------------------- the bmm strategy: plans
# Cost model of the chunk size k0, in units of "B*T values copied once": a slot (one tile of
# a chunk, padding included) costs its gathered copy (1) plus its share of the GEMM
# (GEMM_PER_SLOT * T / 64); a chunk costs its (B, T) partial result, written by the bmm and
# read by the segment sum (CHUNK_COST). Constants fitted to single-thread CPU times of
# fwd + dX + dW with every k0 from 1 to 32 (N=4096, batch 256, tiles 16/32/64/128, densities
# 0.05 to 0.5); the optimum is flat, and the model's pick was within 10 % of the best k0
# measured at every point but one (tile 128, density 0.1: 32 % over).
GEMM_PER_SLOT = 1.0
CHUNK_COST = 1.5
MAX_CHUNK_COLS = 512  # k0 * T at most (larger chunks gained nothing but padding)


def _chunk_size(counts: Tensor, T: int) -> int:
    """``k0`` minimising the cost model over the segment lengths ``counts`` (stored tiles per row)."""
    n_max = int(counts.max()) if counts.numel() else 0
    best, best_cost = 1, None
    for k0 in range(1, max(1, min(n_max, MAX_CHUNK_COLS // T)) + 1):
        chunks = int(((counts + k0 - 1) // k0).sum())
        cost = chunks * k0 * (1.0 + GEMM_PER_SLOT * T / 64) + chunks * CHUNK_COST
        if best_cost is None or cost < best_cost:
            best, best_cost = k0, cost
    return best


def _chunks(ptr: Tensor, k0: int) -> dict:
    """Cut every segment ``ptr[s]:ptr[s+1]`` into chunks of ``k0`` consecutive entries.

    The last chunk of a segment is padded; a pad slot repeats the segment's first entry (its
    gathered input is zeroed, so it adds nothing). Returns the chunk count ``C``, the segment
    of every chunk ``seg`` (C,), chunks per segment ``m``, the entry of every slot ``slots``
    (C*k0,), the pad slots ``pad`` and the real slots ``real`` (in entry order)."""
    dev = ptr.device
    n = ptr[1:] - ptr[:-1]
    m = (n + k0 - 1) // k0
    C = int(m.sum())
    seg = torch.repeat_interleave(torch.arange(n.numel(), device=dev), m)
    j = torch.arange(C, device=dev) - (torch.cumsum(m, 0) - m)[seg]  # chunk index inside its segment
    slots = (ptr[seg] + j * k0).unsqueeze(1) + torch.arange(k0, device=dev)
    valid = slots < ptr[seg + 1].unsqueeze(1)
    slots = torch.where(valid, slots, ptr[seg].unsqueeze(1)).reshape(-1)
    valid = valid.reshape(-1)
    pad = (~valid).nonzero().squeeze(1)
    return {"k0": k0, "C": C, "seg": seg, "m": m, "slots": slots, "pad": pad, "npad": pad.numel(),
            "real": valid.nonzero().squeeze(1), "one_per_seg": C == n.numel() and bool((m == 1).all())}


def _bmm_plan(layout: BlockSparseLayout, chunk: int | None = None) -> dict:
    """Chunk plans of the ``bmm`` strategy, cached on the layout (built once, never in a backward pass).

    ``rows``: chunks of the tile-rows (forward, dW), ``idx`` = the x tile-column of every slot,
    slots are positions. ``cols``: chunks of the tile-columns (dX), ``pos`` = the position of
    every slot, ``idx`` = its tile-row (the dy tile it reads)."""
    cache = memo_dict(layout, "_cpu_bmm_plan")
    if chunk in cache:
        return cache[chunk]
    T = layout.tile
    row_counts = layout.row_ptr[1:] - layout.row_ptr[:-1]
    col_counts = layout.col_ptr[1:] - layout.col_ptr[:-1]
    rows = _chunks(layout.row_ptr, chunk or _chunk_size(row_counts, T))
    rows["idx"] = layout.col[rows["slots"]]
    rows["real_chunk"], rows["real_slot"] = rows["real"] // rows["k0"], rows["real"] % rows["k0"]
    cols = _chunks(layout.col_ptr, chunk or _chunk_size(col_counts, T))
    cols["pos"] = layout.t_pos[cols["slots"]]
    cols["idx"] = layout.row[cols["pos"]]
    cache[chunk] = plan = {"rows": rows, "cols": cols}
    return plan


# Scratch buffers for the big temporaries of the bmm strategy (the gathered operand, the
# batched GEMM's output), which never leave an op. A fresh tensor above glibc's mmap
# threshold (32 MiB at most) is new memory every time, and touching it page-faults: at
# N=4096, batch 256, density 0.25 the 72 MB gathered x cost 26 ms fresh against 6 ms reused
# (one thread). One buffer per thread, role and dtype, grown to the largest use, kept until
# release_scratch() (memory: about one gathered operand, B x stored tiles x T values).
_SCRATCH = threading.local()
SCRATCH_MIN_BYTES = 1 << 20


def _scratch(role: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """An uninitialised ``shape`` tensor: the thread's buffer for ``role`` (small ones fresh)."""
    n = 1
    for d in shape:
        n *= d
    if n * dtype.itemsize < SCRATCH_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    bufs = memo_dict(_SCRATCH, "bufs")
    buf = bufs.get((role, dtype))
    if buf is None or buf.numel() < n:
        bufs[(role, dtype)] = None  # free the old one first
        buf = bufs[(role, dtype)] = torch.empty(n, dtype=dtype)
    return buf[:n].view(shape)


def release_scratch() -> None:
    """Free the calling thread's scratch buffers of the ``cpu_bmm`` kernel."""
    _SCRATCH.__dict__.pop("bufs", None)


def _gather_tiles(a: Tensor, n_tiles: int, idx: Tensor, T: int) -> Tensor:
    """``a`` (B, n_tiles*T) -> its tiles ``idx`` as (B, len(idx), T), in a scratch buffer."""
    B = a.shape[0]
    out = _scratch("gather", (B, idx.numel(), T), a.dtype)
    return torch.index_select(a.contiguous().view(B, n_tiles, T), 1, idx, out=out)


def _chunk_product(a: Tensor, n_in: int, w: Tensor, part: dict, n_out: int, T: int) -> Tensor:
    """``out[:, o] = sum over the slots s of segment o of a_tile[idx[s]] @ w[s]``, (B, n_out*T).

    ``a`` (B, n_in*T) dense; ``w`` (C*k0, T, T) one tile per slot (pad slots: anything finite).
    One gather, one batched GEMM, one segment sum (plus one pass to zero the pad slots)."""
    B, C, k0 = a.shape[0], part["C"], part["k0"]
    if C == 0:
        return a.new_zeros(B, n_out * T)
    G = _gather_tiles(a, n_in, part["idx"], T)  # (B, C*k0, T)
    if part["npad"]:
        G.index_fill_(1, part["pad"], 0)
    O = _scratch("product", (C, B, T), a.dtype)
    torch.bmm(G.view(B, C, k0 * T).transpose(0, 1), w.view(C, k0 * T, T), out=O)  # (C, B, T)
    if not part["one_per_seg"]:
        O = torch.segment_reduce(O.view(C, B * T), "sum", lengths=part["m"], axis=0)  # (n_out, B*T)
    y = a.new_empty(B, n_out, T)  # a fresh tensor: O may be scratch
    y.copy_(O.view(n_out, B, T).transpose(0, 1))
    return y.view(B, n_out * T)


def _gather(tiles: Tensor, flat: Tensor, idx: Tensor, a: int, b: int, c0: int, T: int) -> Tensor:
    """(B, k*T): the tiles ``idx`` (the row's own column indices) of ``flat`` (B, n*T); a strided
    view for a contiguous run."""
    if c0 >= 0:
        return flat[:, c0 * T : (c0 + b - a) * T]
    return tiles.index_select(1, idx).view(flat.shape[0], (b - a) * T)


def _rows(layout: BlockSparseLayout) -> list[tuple[int, int, int, int, Tensor]]:
    """``(r, a, b, c0, cols)`` of every non-empty tile-row: positions ``a:b``, first column
    ``c0`` when its columns are contiguous (else -1) and its column indices (cached)."""
    plan = _plan(layout)
    rows = plan.get("nonempty_rows")
    if rows is None:
        rows = plan["nonempty_rows"] = [(r, a, b, c0, layout.col[a:b]) for r, (a, b, c0) in enumerate(plan["rows"]) if a < b]
    return rows


def _dds_t_rows(x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
    """``x @ W.T`` (B, Mt*T): one GEMM per tile-row over its gathered input tiles."""
    B, T = x.shape[0], layout.tile
    x = x.contiguous()
    xt = x.view(B, layout.Kt, T)
    y = x.new_empty(B, layout.Mt * T)  # returned itself, not a view (callers may add to it in place)
    yt = y.view(B, layout.Mt, T)
    if _plan(layout)["zero_rows"].numel():
        yt.index_fill_(1, _plan(layout)["zero_rows"], 0)
    for r, a, b, c0, cols in _rows(layout):
        torch.mm(_gather(xt, x, cols, a, b, c0, T), wp[a:b].view((b - a) * T, T), out=yt[:, r])
    return y


def _backward_rows(dy: Tensor, x: Tensor | None, wp: Tensor | None, layout: BlockSparseLayout,
                   need_dx: bool, need_dw: bool) -> tuple[Tensor | None, Tensor | None]:
    """dX and dW tile-row by tile-row, one loop for both.

    dW (P, T, T): the row's gathered input tiles' transpose times its dy tile, written straight
    into the row's contiguous panel of the transposed storage. dX (B, Kt*T): the row's dy tile
    times its panel's transpose gives the (B, k*T) products of its stored tiles, side by side in
    position order (no copy of the weights), then one scatter-add of them all by tile-column."""
    B, T = dy.shape[0], layout.tile
    if need_dw:
        x = x.contiguous()
        xt = x.view(B, layout.Kt, T)
        dw = x.new_empty(layout.nnz, T, T)
    if need_dx:
        D = dy.new_empty(B, layout.nnz * T)
    for r, a, b, c0, cols in _rows(layout):
        dyr = dy[:, r * T : (r + 1) * T]
        if need_dw:
            torch.mm(_gather(xt, x, cols, a, b, c0, T).T, dyr, out=dw[a:b].view((b - a) * T, T))
        if need_dx:
            D[:, a * T : b * T].addmm_(dyr, wp[a:b].view((b - a) * T, T).T, beta=0)
    dx = None
    if need_dx:
        dx = dy.new_zeros(B, layout.Kt * T)
        dx.view(B, layout.Kt, T).index_add_(1, layout.col, D.view(B, layout.nnz, T))
    return dx, dw if need_dw else None


class CPUKernel(Kernel):
    """Block-sparse product on the CPU for float32/float64 (see the module docstring)."""

    def __init__(self, strategy: str = "runs", name: str = "cpu", chunk: int | None = None):
        if strategy not in ("runs", "gather", "bmm", "panels", "fmruns"):
            raise InvalidValue(f"Unknown CPU strategy {strategy!r}. Select from 'runs', 'gather', 'bmm', 'panels' or 'fmruns'.")
        if chunk is not None and (strategy != "bmm" or isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
            raise InvalidValue(f"chunk: a positive int for the 'bmm' strategy only, got {chunk!r}")
        self.strategy = strategy
        self.name = name
        self.chunk = chunk  # bmm: stored tiles per chunk (None: chosen per layout by _chunk_size)

    def supports(self, device, dtype) -> bool:
        return torch.device(device).type == "cpu" and dtype in (torch.float32, torch.float64)

    def product(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        """Through the custom ops ``seq2d::bsmm`` / ``seq2d::bsmm_backward``: the Python loops over
        the layout's plans stay out of ``torch.compile``'s graph (one opaque op per pass)."""
        return host_product(x, wp, layout, self)

    def _by_rows(self, layout: BlockSparseLayout, batch: int) -> bool:
        """Whether this call runs tile-row by tile-row over gathered tiles: always for ``gather``;
        for ``runs`` when the layout's runs are short and the gathered copies small
        (:data:`ROWS_MAX_TILES_PER_RUN`, :data:`ROWS_MAX_VALUES`)."""
        return self._path(layout, batch) == "rows"

    def _path(self, layout: BlockSparseLayout, batch: int) -> str:
        """The path of this call: "runs", "rows" (over gathered tiles), "panels" or "fmruns"
        (:mod:`.cpu_fm`); the ``runs`` strategy picks one per layout and batch
        (:data:`ROWS_MAX_VALUES`, ``FMRUNS_*``, ``PANELS_*``)."""
        if self.strategy != "runs":
            return {"gather": "rows"}.get(self.strategy, self.strategy)
        plan, T = _plan(layout), layout.tile
        short = plan["short_runs"]
        if short and batch * layout.nnz * T <= ROWS_MAX_VALUES:
            return "rows"
        if FMRUNS_MIN_TILE <= T <= FMRUNS_MAX_TILE and batch >= FMRUNS_MIN_BATCH and (short or layout.density >= FMRUNS_MIN_DENSITY):
            return "fmruns"
        if T <= PANELS_MAX_TILE and (short or (T <= PANELS_SMALL_TILE
                                             and layout.nnz <= PANELS_MAX_TILES_PER_RUN * len(plan["runs"]))):
            return "panels"
        return "runs"

    # ------------------------------------------------------------------ forward
    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        if self.strategy == "bmm":
            return self._dds_t_bmm(x, wp, layout)
        with _threads_for_load():
            path = self._path(layout, x.shape[0])
            if path == "panels":
                return cpu_fm.panels_dds_t(x, wp, layout, _rows(layout), _plan(layout)["zero_rows"], _scratch)
            if path == "fmruns":
                return cpu_fm.fmruns_dds_t(x, wp, layout, _plan(layout), _scratch)
            if path == "rows":
                return _dds_t_rows(x, wp, layout)
            return self._dds_t_runs(x, wp, layout)

    def _dds_t_runs(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        B, T = x.shape[0], layout.tile
        plan = _plan(layout)
        y = x.new_empty(B, layout.Mt * T)
        if plan["zero_rows"].numel():
            y.view(B, layout.Mt, T).index_fill_(1, plan["zero_rows"], 0)
        for (r, c0, a, b), beta in zip(plan["runs"], plan["runs_beta_y"]):
            y[:, r * T : (r + 1) * T].addmm_(x[:, c0 * T : (c0 + b - a) * T], wp[a:b].view((b - a) * T, T), beta=beta)
        return y

    # ------------------------------------------------------------------ backward
    def backward(self, dy, x, wp, layout, need_dx, need_dw):
        if self.strategy == "bmm":
            return super().backward(dy, x, wp, layout, need_dx, need_dw)
        with _threads_for_load():
            return self._backward_by(self._path(layout, dy.shape[0]), dy, x, wp, layout, need_dx, need_dw)

    def _backward_by(self, path, dy, x, wp, layout, need_dx, need_dw):
        if path == "panels":
            return cpu_fm.panels_backward(dy, x, wp, layout, need_dx, need_dw, _scratch)
        if path == "fmruns":
            return cpu_fm.fmruns_backward(dy, x, wp, layout, need_dx, need_dw, _plan(layout), _scratch)
        if path == "rows":
            return _backward_rows(dy, x, wp, layout, need_dx, need_dw)
        if wp is None:  # dW only: the runs loop writes into a buffer shaped like the tiles
            wp = x.new_empty(layout.nnz, layout.tile, layout.tile)
        return self._backward_runs(dy, x, wp, layout, need_dx, need_dw)

    def _backward_runs(self, dy, x, wp, layout, need_dx, need_dw):
        B, T = dy.shape[0], layout.tile
        plan = _plan(layout)
        dx = None
        if need_dx:
            dx = dy.new_empty(B, layout.Kt * T)
            if plan["zero_cols"].numel():
                dx.view(B, layout.Kt, T).index_fill_(1, plan["zero_cols"], 0)
        dw = torch.empty_like(wp) if need_dw else None
        for (r, c0, a, b), beta in zip(plan["runs"], plan["runs_beta_dx"]):
            k = b - a
            dyr = dy[:, r * T : (r + 1) * T]
            if need_dw:
                torch.mm(x[:, c0 * T : (c0 + k) * T].T, dyr, out=dw[a:b].view(k * T, T))
            if need_dx:
                dx[:, c0 * T : (c0 + k) * T].addmm_(dyr, wp[a:b].view(k * T, T).T, beta=beta)
        return dx, dw

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        if self.strategy == "bmm":
            return self._dds_bmm(dy, wp, layout)
        return self._backward_by(self._path(layout, dy.shape[0]), dy, None, wp, layout, True, False)[0]

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        if self.strategy == "bmm":
            return self._sdd_t_bmm(dy, x, layout)
        return self._backward_by(self._path(layout, x.shape[0]), dy, x, None, layout, False, True)[1]

    # ------------------------------------------------------------------ the bmm strategy
    @torch.no_grad()  # out= into scratch buffers: the autograd Function differentiates, not these ops
    def _dds_t_bmm(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        rows = _bmm_plan(layout, self.chunk)["rows"]
        w = wp
        if rows["npad"]:  # else the slots are the positions 0..P-1
            w = _scratch("tiles", (rows["slots"].numel(),) + tuple(wp.shape[1:]), wp.dtype)
            torch.index_select(wp, 0, rows["slots"], out=w)
        return _chunk_product(x, layout.Kt, w, rows, layout.Mt, layout.tile)

    @torch.no_grad()
    def _dds_bmm(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        cols = _bmm_plan(layout, self.chunk)["cols"]
        wt = _scratch("tiles", (cols["pos"].numel(),) + tuple(wp.shape[1:]), wp.dtype)
        torch.index_select(wp.transpose(1, 2), 0, cols["pos"], out=wt)  # W tiles (T_out, T_in), column order
        return _chunk_product(dy, layout.Mt, wt, cols, layout.Kt, layout.tile)

    @torch.no_grad()
    def _sdd_t_bmm(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        """dW of every row chunk in one bmm: ``x_chunk.T (k0*T, B) @ dy_row (B, T)``, pad slots dropped."""
        B, T = x.shape[0], layout.tile
        rows = _bmm_plan(layout, self.chunk)["rows"]
        C, k0 = rows["C"], rows["k0"]
        if C == 0:
            return x.new_empty(0, T, T)
        G = _gather_tiles(x, layout.Kt, rows["idx"], T).view(B, C, k0 * T)
        D = dy.contiguous().view(B, layout.Mt, T)
        if not (rows["one_per_seg"] and C == layout.Mt):
            D = D.index_select(1, rows["seg"])  # (B, C, T): the dy tile of every chunk's row
        # dW.T of every chunk, (C, T_out, k0*T_in) (this orientation measured faster than the
        # (C, k0*T, T) one, whose left operand has a leading dimension of C*k0*T)
        O = _scratch("product", (C, T, k0 * T), x.dtype)
        torch.bmm(D.permute(1, 2, 0), G.transpose(0, 1), out=O)
        O = O.view(C, T, k0, T).permute(0, 2, 3, 1)  # (C, k0, T_in, T_out): slot tiles, transposed storage
        return O[rows["real_chunk"], rows["real_slot"]]  # (P, T, T), a fresh tensor, pad slots dropped


register_kernel(CPUKernel("runs", "cpu"))
register_kernel(CPUKernel("gather", "cpu_gather"))
register_kernel(CPUKernel("bmm", "cpu_bmm"))
register_kernel(CPUKernel("panels", "cpu_panels"))
register_kernel(CPUKernel("fmruns", "cpu_fmruns"))
