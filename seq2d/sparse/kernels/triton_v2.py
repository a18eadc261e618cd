"""``kernel="triton_v2"``: the block-sparse ops as persistent TMA kernels (issue 37).

The kernels are in :mod:`.triton_v2_kernels` (their table is there); this module holds what
they need from the host: int32 index metadata cached per layout, the blocking (autotuned on a
GPU, fixed under the interpreter), the dW batch split, TMA-ready operands, and the
``TritonV2Kernel`` kernel object. ``"triton"`` (v1, :mod:`.triton_v1`) stays what
``kernel="auto"`` picks until v2 beats it on a GPU (benchmarks/gpu/README.md says how that is
measured); float32 (tf32 or IEEE dots) and layouts too large for int32 coordinates run v1's
kernels here too.

Blocking, per tile ``T`` (16-bit operands):

==========  ====================================================================
kernel      parameters
==========  ====================================================================
gather      ``BLOCK_B`` batch rows x ``T`` output columns per item, ``BLOCK_K``-wide
            slices of each tile, ``GROUP_B`` batch blocks per L2 band, warps, stages
sdd         ``BLOCK_B``-row batch chunks, ``G`` same-row tiles per item (fixed per
            tile by :data:`GROUP_TILES`: the metadata depends on it), warps, stages
==========  ====================================================================

``_GATHER_CONFIGS`` / ``_SDD_CONFIGS`` list the autotune candidates (keyed on the tile, the
op, the batch rounded up to a power of two and the mean stored tiles per output column); every
one passes the offline sm_90 compile check (``benchmarks/gpu/sm90_compile.py``; CI checks the
first of each: ``tests/test_triton_v2_compile.py``: shared memory, no spills, TMA + wgmma, three
buffers). ``_OVERRIDE[(op, T)]`` (op ``"dds_t"``, ``"dds"`` or ``"sdd_t"``) forces one candidate:
what ``benchmarks/gpu/triton_v2_tune.py`` sets while it sweeps, and the CUDA tests use to compile
one config per case.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch
import triton
from torch import Tensor
from torch.utils._python_dispatch import _disable_current_modes

from ..layout import BlockSparseLayout
from . import triton_v1 as v1
from .base import Kernel, register_kernel
from .triton_v2_kernels import _gather_gemm_kernel, _sdd_grouped_kernel

# same-row stored tiles per dW work item: G * T = 256 rows of accumulator at tiles 128 and 64
GROUP_TILES = {16: 4, 32: 4, 64: 4, 128: 2}
SMEM_LIMIT = 232_448  # bytes of shared memory one program may use on sm_90 (227 KiB)

# (BLOCK_B, BLOCK_K, GROUP_B, num_warps, num_stages). In the gather kernel the index load takes
# a stage of its own: num_stages 5 gives three TMA buffers (4 gives two, like 3); the dW kernel
# loads no index in its loop, so there num_stages is the number of buffers (checked offline for
# sm_90: tests/test_triton_v2_compile.py). Not tuned on hardware yet.
_GATHER_CONFIGS: dict[int, list[tuple[int, int, int, int, int]]] = {
    128: [(256, 64, 8, 8, 5), (128, 64, 8, 8, 5), (256, 64, 4, 8, 5)],
    64: [(256, 64, 8, 8, 5), (128, 64, 8, 4, 5), (256, 64, 4, 8, 5)],
    32: [(128, 32, 8, 4, 5), (64, 32, 8, 4, 5)],
    16: [(128, 16, 8, 4, 5), (64, 16, 8, 4, 5)],
}
# (BLOCK_B, num_warps, num_stages)
_SDD_CONFIGS: dict[int, list[tuple[int, int, int]]] = {
    128: [(64, 8, 4), (64, 8, 3)],
    64: [(64, 8, 4), (64, 4, 4)],
    32: [(64, 4, 4), (128, 4, 4)],
    16: [(64, 4, 4), (128, 4, 4)],
}
_OVERRIDE: dict[tuple[str, int], tuple[int, ...]] = {}  # (op, T) -> one config of its kernel's table
# under TRITON_INTERPRET=1: small blocks, a K split, narrow bands and fewer programs than items
_INTERP = {"gather": lambda T: (16, max(16, T // 2), 2, 4, 1), "sdd": lambda T: (16, 4, 1)}
INTERP_PROGRAMS = 3


# ---------------------------------------------------------------------------- metadata per layout
@dataclass(frozen=True)
class _Meta:
    """int32 index tensors on the layout's device, and the host facts the launches need."""

    row_ptr: Tensor  # (Mt+1,)
    col: Tensor  # (P,)
    row_order: Tensor  # (Mt,) tile-rows, most stored tiles first
    col_ptr: Tensor  # (Kt+1,)
    t_row: Tensor  # (P,) row[t_pos]: the transposed row index, one load in dX
    t_pos: Tensor  # (P,)
    col_order: Tensor  # (Kt,)
    row: Tensor  # (P,)
    gstart: Tensor  # (n_groups,) first position of each dW group
    gcount: Tensor  # (n_groups,) its tiles (<= G, same row)
    n_groups: int


_META: "weakref.WeakKeyDictionary[BlockSparseLayout, _Meta]" = weakref.WeakKeyDictionary()


def metadata(layout: BlockSparseLayout) -> _Meta:
    """The int32 metadata of ``layout`` (built once per layout object, so once per device; from
    the layout's real index tensors even while torch traces a ``seq2d::triton_bsmm`` op)."""
    meta = _META.get(layout)
    if meta is None:
        with _disable_current_modes():
            meta = _META[layout] = _build_meta(layout)
    return meta


def _longest_first(ptr: Tensor) -> Tensor:
    counts = ptr[1:] - ptr[:-1]
    return torch.argsort(-counts, stable=True)


def _build_meta(layout: BlockSparseLayout) -> _Meta:
    if layout.device.type == "meta":  # the dW groups (and so the grid) depend on the index values
        raise v1.InvalidInput("triton_v2 needs its layout's index values (the dW work items depend on them), "
                              "and a layout on the meta device has none: trace with fake tensors "
                              "(torch._subclasses.FakeTensorMode) and a real layout, or use kernel 'triton'")
    G = GROUP_TILES[layout.tile]
    row_ptr = layout.row_ptr.cpu()
    counts = row_ptr[1:] - row_ptr[:-1]
    per_row = (counts + G - 1) // G
    first = torch.repeat_interleave(row_ptr[:-1], per_row)
    k = torch.arange(int(per_row.sum())) - torch.repeat_interleave(torch.cumsum(per_row, 0) - per_row, per_row)
    gstart = first + k * G
    gcount = torch.minimum(torch.full_like(gstart, G), torch.repeat_interleave(row_ptr[1:], per_row) - gstart)
    dev = layout.device

    def i32(t: Tensor) -> Tensor:
        return t.to(device=dev, dtype=torch.int32).contiguous()

    return _Meta(
        row_ptr=i32(layout.row_ptr), col=i32(layout.col), row_order=i32(_longest_first(layout.row_ptr)),
        col_ptr=i32(layout.col_ptr), t_row=i32(layout.row[layout.t_pos]), t_pos=i32(layout.t_pos),
        col_order=i32(_longest_first(layout.col_ptr)), row=i32(layout.row),
        gstart=i32(gstart), gcount=i32(gcount), n_groups=int(gstart.numel()),
    )


def fits_int32(layout: BlockSparseLayout, B: int) -> bool:
    """Whether every TMA coordinate of the v2 kernels fits in int32 (else v1's int64 kernels run)."""
    T = layout.tile
    work = max(layout.Mt, layout.Kt) * (B // 16 + 1)  # the gather kernel's work items at BLOCK_B >= 16
    return max(layout.nnz * T, layout.Mt * T, layout.Kt * T, B, work) < 2**31


# ---------------------------------------------------------------------------- blocking
def _smem_bytes(kernel: str, T: int, cfg: tuple, itemsize: int = 2) -> int:
    """A model of a config's shared memory (the compile check measures it): the TMA buffers
    (``num_stages - 2`` in the gather kernel, ``num_stages`` in dW's), plus the gather kernel's
    output tile (its buffers live across the persistent loop, so nothing is reused)."""
    if kernel == "gather":
        bb, bk, _, _, stages = cfg
        return itemsize * (max(1, stages - 2) * (bb * bk + bk * T) + bb * T)
    bb, _, stages = cfg
    return itemsize * stages * bb * T * (GROUP_TILES[T] + 1)


def _programs(T: int, meta: dict, device: torch.device) -> int:
    """Persistent programs for the gather kernel: as many as fit on the GPU at once (three buffers)."""
    if v1._interpreting() or device.type != "cuda":  # (the meta device: a trace, never run)
        return INTERP_PROGRAMS
    cfg = (meta["BLOCK_B"], meta["BLOCK_K"], 0, 0, 5)
    per_sm = max(1, min(4, SMEM_LIMIT // _smem_bytes("gather", T, cfg)))
    return per_sm * torch.cuda.get_device_properties(device).multi_processor_count


def _as_kwargs(kernel: str, cfg: tuple) -> dict:
    if kernel == "gather":
        bb, bk, gb, w, s = cfg
        return dict(BLOCK_B=bb, BLOCK_K=bk, GROUP_B=gb, num_warps=w, num_stages=s)
    bb, w, s = cfg
    return dict(BLOCK_B=bb, num_warps=w, num_stages=s)


_TUNERS: dict = {}


def _tuner(kernel: str, T: int):
    """The autotuner of ``kernel`` at tile ``T`` (one per pair: each tile has its own candidates)."""
    key = (kernel, T)
    if key not in _TUNERS:
        fn = _gather_gemm_kernel if kernel == "gather" else _sdd_grouped_kernel
        table = _GATHER_CONFIGS if kernel == "gather" else _SDD_CONFIGS
        configs = []
        for cfg in table[T]:
            kw = _as_kwargs(kernel, cfg)
            configs.append(triton.Config({k: v for k, v in kw.items() if k.isupper()},
                                         num_warps=kw["num_warps"], num_stages=kw["num_stages"]))
        variant = "TRANS_W" if kernel == "gather" else "SPLIT"
        _TUNERS[key] = triton.autotune(configs=configs, key=["T", variant, "B_KEY", "TPR_KEY"])(v1._launchable(fn))
    return _TUNERS[key]


def _fixed_config(op: str, T: int) -> tuple | None:
    """The one config ``op`` runs with at tile ``T``, or None to autotune: an ``_OVERRIDE``,
    else the interpreter's (whose dots cannot be timed)."""
    if (op, T) in _OVERRIDE:
        return _OVERRIDE[(op, T)]
    if v1._interpreting():
        return _INTERP["sdd" if op == "sdd_t" else "gather"](T)
    return None


def _launch(op: str, T: int, grid, args: tuple, consts: dict, device: torch.device) -> None:
    """Run ``op``'s kernel with :func:`_fixed_config` or through the autotuner (as a graph node
    when ``args[0]`` is a stand-in: :func:`.triton_v1.launcher`). ``grid`` maps the config's
    constexprs (``BLOCK_B``, ...) to the grid."""
    kernel = "sdd" if op == "sdd_t" else "gather"
    fn = _gather_gemm_kernel if kernel == "gather" else _sdd_grouped_kernel
    _use_torch_allocator(device)
    guard = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with guard:  # Triton launches on the current device
        cfg = _fixed_config(op, T)
        if cfg is not None:
            kw = _as_kwargs(kernel, cfg)
            v1.launcher(fn, args[0])[grid(kw)](*args, **consts, **kw)  # the interpreter ignores warps/stages
        else:
            v1.launcher(_tuner(kernel, T), args[0])[grid](*args, **consts)


_ALLOCATORS: dict = {}


def _use_torch_allocator(device: torch.device) -> None:
    """In-kernel TMA descriptors need global scratch memory: take it from torch's allocator."""
    dev = torch.device(device)
    if dev not in _ALLOCATORS:
        _ALLOCATORS[dev] = lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=dev)
    triton.set_allocator(_ALLOCATORS[dev])


# ---------------------------------------------------------------------------- entry points (write into out)
def _tma_ready(t: Tensor) -> Tensor:
    """``t`` if TMA can read it (last stride 1, 16-byte aligned base and row stride), else a copy.
    A stand-in (a trace) has no address: its storage offset counts (inductor copies an input whose
    storage does not start 16-byte aligned, and aligns its own buffers)."""
    base = t.storage_offset() * t.element_size() if v1._stand_in(t) else t.data_ptr()
    ok = (t.stride(-1) == 1 and base % 16 == 0
          and all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1]))
    return t if ok else t.contiguous().clone() if t.is_contiguous() else t.contiguous()


def _v2_runs(layout: BlockSparseLayout, B: int, dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16) and fits_int32(layout, B)


def _keys(B: int, P: int, n_out: int) -> dict:
    return dict(B_KEY=triton.next_power_of_2(max(B, 1)), TPR_KEY=triton.next_power_of_2(max(1, round(P / n_out))))


def _gather(a: Tensor, wp: Tensor, out: Tensor, layout: BlockSparseLayout, transposed: bool) -> Tensor:
    B, T, P = a.shape[0], layout.tile, layout.nnz
    m = metadata(layout)
    if transposed:  # dX: output columns are tile-columns of W
        seg, idx, pos, order, n_in, n_out = m.col_ptr, m.t_row, m.t_pos, m.col_order, layout.Mt, layout.Kt
    else:
        seg, idx, pos, order, n_in, n_out = m.row_ptr, m.col, m.col, m.row_order, layout.Kt, layout.Mt
    a, wp = _tma_ready(a), _tma_ready(wp.contiguous())
    dst = _tma_ready(out)
    args = (a, wp, dst, seg, idx, pos, order, B, n_in, n_out, P, a.stride(0), dst.stride(0))
    consts = dict(**_keys(B, P, n_out), T=T, TRANS_W=transposed, UPCAST=v1._interpreting() and a.dtype == torch.bfloat16)
    _launch("dds" if transposed else "dds_t", T, lambda meta: (min(n_out * triton.cdiv(B, meta["BLOCK_B"]), _programs(T, meta, a.device)),),
            args, consts, a.device)
    if dst is not out:
        out.copy_(dst)
    return out


def dds_t(x: Tensor, wp: Tensor, layout: BlockSparseLayout, out: Tensor) -> Tensor:
    """``out[:] = x @ W.T``; x (B, Kt*T), out (B, Mt*T)."""
    B = x.shape[0]
    if B == 0:
        return out
    if layout.nnz == 0:
        return out.zero_()
    if not _v2_runs(layout, B, x.dtype):
        return v1.dds_t(x, wp, layout, out)
    return _gather(x, wp, out, layout, transposed=False)


def dds(dy: Tensor, wp: Tensor, layout: BlockSparseLayout, out: Tensor) -> Tensor:
    """``out[:] = dy @ W``; dy (B, Mt*T), out (B, Kt*T)."""
    B = dy.shape[0]
    if B == 0:
        return out
    if layout.nnz == 0:
        return out.zero_()
    if not _v2_runs(layout, B, dy.dtype):
        return v1.dds(dy, wp, layout, out)
    return _gather(dy, wp, out, layout, transposed=True)


def _split_unit(T: int) -> int:
    """Batch rows of one dW split are a multiple of this: the BLOCK_B of every config that may run."""
    cfg = _fixed_config("sdd_t", T)
    return cfg[0] if cfg is not None else max(c[0] for c in _SDD_CONFIGS[T])


def n_splits(B: int, n_groups: int, T: int, device: torch.device) -> int:
    """dW batch splits: items x splits >= 2x the SMs, each split >= 4 batch chunks."""
    if device.type != "cuda":
        return 1
    target = 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(triton.cdiv(target, max(n_groups, 1)), B // (4 * _split_unit(T))))


_COUNTERS: dict = {}


def _counters(n: int, device: torch.device, traced: bool = False) -> Tensor:
    """Zeroed int32 counters, one per dW group, per device and stream (the kernel leaves them zero);
    ``traced``: new ones (a graph allocates its own, and a cache must not keep a stand-in)."""
    if traced:
        return torch.zeros(max(n, 1), dtype=torch.int32, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = _COUNTERS[key] = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    return buf


def sdd_t(dy: Tensor, x: Tensor, layout: BlockSparseLayout, out: Tensor, splits: int | None = None) -> Tensor:
    """``out[:] = (dy.T @ x)`` at the stored tiles, transposed storage (P, T, T); ``splits``
    (default :func:`n_splits`) divides the batch, the partials summed in the same launch."""
    B, T, P = x.shape[0], layout.tile, layout.nnz
    if P == 0:
        return out
    if B == 0:
        return out.zero_()
    if not _v2_runs(layout, B, x.dtype):
        return v1.sdd_t(dy, x, layout, out, splits=splits)
    m = metadata(layout)
    G, ng = GROUP_TILES[T], m.n_groups
    S = splits if splits is not None else n_splits(B, ng, T, x.device)
    unit = _split_unit(T)
    rows_per_split = triton.cdiv(triton.cdiv(B, max(1, S)), unit) * unit
    S = triton.cdiv(B, rows_per_split)  # no empty splits
    x, dy = _tma_ready(x), _tma_ready(dy)
    dst = _tma_ready(out) if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
    if S > 1:
        ws = torch.empty(S * ng * G * T * T, dtype=torch.float32, device=x.device)
        count = _counters(ng, x.device, v1._stand_in(x))
    else:
        ws = count = m.gcount  # unused (SPLIT is off): any tensor of the right device
    args = (x, dy, dst, ws, count, m.gstart, m.gcount, m.row, m.col, B, layout.Kt, layout.Mt, P, ng,
            rows_per_split, x.stride(0), dy.stride(0))
    consts = dict(**_keys(B, P, layout.Mt), T=T, G=G, SPLIT=S > 1,
                  UPCAST=v1._interpreting() and x.dtype == torch.bfloat16)
    _launch("sdd_t", T, lambda meta: (S * ng,), args, consts, x.device)
    if dst is not out:
        out.copy_(dst)
    return out


# ---------------------------------------------------------------------------- kernel object
class TritonV2Kernel(v1.TritonKernel):
    """v2 kernels for 16-bit operands (v1's for float32); the checks and dtypes of v1."""

    name = "triton_v2"

    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        layout = layout.to(x.device)
        v1._check("dds_t", x, layout.Kt * layout.tile, wp, layout)
        return dds_t(x, wp, layout, x.new_empty(x.shape[0], layout.Mt * layout.tile))

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        layout = layout.to(dy.device)
        v1._check("dds", dy, layout.Mt * layout.tile, wp, layout)
        return dds(dy, wp, layout, dy.new_empty(dy.shape[0], layout.Kt * layout.tile))

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        layout = layout.to(x.device)
        v1._check("sdd_t", x, layout.Kt * layout.tile, None, layout)
        v1._check("sdd_t", dy, layout.Mt * layout.tile, None, layout)
        if dy.shape[0] != x.shape[0] or dy.dtype != x.dtype or dy.device != x.device:
            raise v1.InvalidInput(f"triton_v2 sdd_t: dy {tuple(dy.shape)} {dy.dtype} and x {tuple(x.shape)} "
                                  f"{x.dtype} must share batch size, dtype and device")
        T = layout.tile
        return sdd_t(dy, x, layout, x.new_empty(layout.nnz, T, T))


register_kernel(TritonV2Kernel())
