"""Triton kernel: the three block-sparse ops as Triton kernels (the CUDA path).

One program owns one output block and loops over the stored tiles that feed it, so no
kernel needs atomics and every result is written exactly once:

=========  ==========================  ==================================================
kernel     grid (flattened to axis 0)  program computes
=========  ==========================  ==================================================
``dds_t``  (tile-row r, batch block)   ``y[bb, r]  = sum_p x[bb, col p] @ wp[p]``,
                                       p in ``row_ptr[r]:row_ptr[r+1]``
``dds``    (tile-col c, batch block)   ``dx[bb, c] = sum_p dy[bb, row p] @ wp[p].T``,
                                       p in ``t_pos[col_ptr[c]:col_ptr[c+1]]``
``sdd_t``  (position p, batch split)   ``dw[p] = sum_b x[b, col p].T @ dy[b, row p]``,
                                       the batch walked in BLOCK_B chunks
=========  ==========================  ==================================================

``bb`` is a block of ``BLOCK_B`` batch rows (masked at the end, B need not divide).
The tile ``T``, ``BLOCK_B``, the fp32 ``INPUT_PRECISION`` and ``UPCAST`` are constexpr,
so each (T, dtype) pair compiles its own kernel. Accumulation is fp32; results are
stored in the input dtype. ``wp`` holds tiles as (in, out), so the forward multiplies by
it directly and dX loads it with swapped strides (the transpose costs nothing).

dW has one program per stored tile; when there are few tiles and a long batch, the
batch is split over ``S`` programs per tile that write fp32 partials into a workspace
``(S, P, T, T)``, summed afterwards (deterministic, unlike atomics).

Kernels write into the ``out`` tensor they are given (stk style); the ``TritonKernel``
methods allocate it. With ``TRITON_INTERPRET=1`` the kernels also run on CPU tensors
through Triton's interpreter (slow; for tests): the mode is read at launch time, so it
does not matter whether the variable was set before or after this module was imported.
For that the kernels use only builtins of ``triton.language``, none of its ``@jit``
helpers (``tl.full``, not ``tl.zeros``): those are built in the mode triton was imported in.
Blocking is a fixed table per (T, dtype) (``_GPU_CONFIGS``), not ``triton.autotune``,
whose benchmarking needs a GPU.

``bsmm`` reaches the kernels (v1's and v2's) through the ops ``seq2d::triton_bsmm`` /
``seq2d::triton_bsmm_backward`` (``torch.library.triton_op``, defined at the end): eagerly they
launch as below; while torch traces them (``torch.compile``, a fake or meta call) every launch
goes through :func:`launcher` and becomes a graph node instead.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.library import wrap_triton
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from ...errors import InvalidInput, InvalidType
from ..autograd import define_product_ops, host_product
from ..layout import BlockSparseLayout
from .base import Kernel, register_kernel

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------- kernels
@triton.jit
def _dds_t_kernel(
    x_ptr, wp_ptr, y_ptr, row_ptr_ptr, col_ptr,  # x (B, Kt*T), wp (P, T, T), y (B, Mt*T)
    B, n_bblocks,
    stride_xb, stride_xk, stride_wp, stride_wa, stride_wb, stride_yb, stride_ym,
    T: tl.constexpr, BLOCK_B: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    r = (pid // n_bblocks).to(tl.int64)  # consecutive programs share a tile-row: its weights stay in L2
    offs_b = (pid % n_bblocks) * BLOCK_B + tl.arange(0, BLOCK_B)
    offs_t = tl.arange(0, T)
    mask_b = offs_b < B
    rows = offs_b.to(tl.int64)
    # int64 bounds (row_ptr is int64 already): p * stride_wp reaches P*T*T, past 2^31 on large layouts
    start = tl.load(row_ptr_ptr + r).to(tl.int64)
    end = tl.load(row_ptr_ptr + r + 1).to(tl.int64)
    acc = tl.full((BLOCK_B, T), 0.0, tl.float32)  # not tl.zeros: see the module docstring
    for p in range(start, end):
        c = tl.load(col_ptr + p).to(tl.int64)
        xt = tl.load(x_ptr + rows[:, None] * stride_xb + (c * T + offs_t[None, :]) * stride_xk,
                     mask=mask_b[:, None], other=0.0)  # (BLOCK_B, T)
        w = tl.load(wp_ptr + p * stride_wp + offs_t[:, None] * stride_wa + offs_t[None, :] * stride_wb)  # (in, out)
        if UPCAST:
            xt = xt.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(xt, w, acc, input_precision=INPUT_PRECISION)
    y = y_ptr + rows[:, None] * stride_yb + (r * T + offs_t[None, :]).to(tl.int64) * stride_ym
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=mask_b[:, None])


@triton.jit
def _dds_kernel(
    dy_ptr, wp_ptr, dx_ptr, row_ptr, t_pos_ptr, col_ptr_ptr,  # dy (B, Mt*T), dx (B, Kt*T)
    B, n_bblocks,
    stride_db, stride_dm, stride_wp, stride_wa, stride_wb, stride_xb, stride_xk,
    T: tl.constexpr, BLOCK_B: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    c = (pid // n_bblocks).to(tl.int64)
    offs_b = (pid % n_bblocks) * BLOCK_B + tl.arange(0, BLOCK_B)
    offs_t = tl.arange(0, T)
    mask_b = offs_b < B
    rows = offs_b.to(tl.int64)
    start = tl.load(col_ptr_ptr + c)
    end = tl.load(col_ptr_ptr + c + 1)
    acc = tl.full((BLOCK_B, T), 0.0, tl.float32)
    for q in range(start, end):
        p = tl.load(t_pos_ptr + q).to(tl.int64)
        r = tl.load(row_ptr + p).to(tl.int64)
        g = tl.load(dy_ptr + rows[:, None] * stride_db + (r * T + offs_t[None, :]) * stride_dm,
                    mask=mask_b[:, None], other=0.0)  # (BLOCK_B, T)
        # the tile as (out, in) = wp[p].T, loaded through swapped strides
        w = tl.load(wp_ptr + p * stride_wp + offs_t[:, None] * stride_wb + offs_t[None, :] * stride_wa)
        if UPCAST:
            g = g.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(g, w, acc, input_precision=INPUT_PRECISION)
    dx = dx_ptr + rows[:, None] * stride_xb + (c * T + offs_t[None, :]).to(tl.int64) * stride_xk
    tl.store(dx, acc.to(dx_ptr.dtype.element_ty), mask=mask_b[:, None])


@triton.jit
def _sdd_t_kernel(
    x_ptr, dy_ptr, out_ptr, row_ptr, col_ptr,  # out (S, P, T, T): one slab per batch split
    B, rows_per_split, n_pos,
    stride_xb, stride_xk, stride_db, stride_dm, stride_os, stride_op, stride_oa, stride_ob,
    T: tl.constexpr, BLOCK_B: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    p = pid % n_pos
    s = pid // n_pos
    r = tl.load(row_ptr + p).to(tl.int64)  # int64 already (the layout's indices are), said for safety
    c = tl.load(col_ptr + p).to(tl.int64)
    offs_t = tl.arange(0, T)
    x_cols = (c * T + offs_t).to(tl.int64) * stride_xk
    dy_cols = (r * T + offs_t).to(tl.int64) * stride_dm
    lo = s * rows_per_split
    hi = tl.minimum(B, lo + rows_per_split)
    acc = tl.full((T, T), 0.0, tl.float32)
    for b0 in range(lo, hi, BLOCK_B):
        offs_b = b0 + tl.arange(0, BLOCK_B)
        mask_b = offs_b < hi
        rows = offs_b.to(tl.int64)
        xt = tl.load(x_ptr + x_cols[:, None] + rows[None, :] * stride_xb,
                     mask=mask_b[None, :], other=0.0)  # (T, BLOCK_B): the x chunk transposed
        g = tl.load(dy_ptr + rows[:, None] * stride_db + dy_cols[None, :],
                    mask=mask_b[:, None], other=0.0)  # (BLOCK_B, T)
        if UPCAST:
            xt = xt.to(tl.float32)
            g = g.to(tl.float32)
        acc = tl.dot(xt, g, acc, input_precision=INPUT_PRECISION)
    # int64 offsets: p * stride_op reaches P*T*T, past 2^31 at density >= 12.5% for N = 131072
    o = (out_ptr + s.to(tl.int64) * stride_os + p.to(tl.int64) * stride_op
         + offs_t[:, None] * stride_oa + offs_t[None, :] * stride_ob)
    tl.store(o, acc.to(out_ptr.dtype.element_ty))


# ---------------------------------------------------------------------------- launch helpers
@torch.compiler.assume_constant_result  # (dynamo cannot read triton's knob: a model's trace asks `supports`)
def _interpreting() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return bool(triton.knobs.runtime.interpret)


def _stand_in(t: Tensor) -> bool:
    """Whether ``t`` stands in for data while torch traces (a fake, functional or meta tensor):
    a kernel launched on it must become a graph node, not run (:func:`launcher`)."""
    return t.device.type == "meta" or isinstance(t, (FakeTensor, FunctionalTensor))


class _InterpretedJIT(JITFunction):
    """A ``JITFunction`` (the kernel type ``wrap_triton`` records in a graph) whose launches run
    through the interpreter: what a trace under ``TRITON_INTERPRET=1`` records, so that the
    graph it makes runs on CPU tensors too."""

    def run(self, *args, grid, warmup, **kwargs):
        if not _interpreting():  # (a graph traced under the interpreter, run without it)
            return super().run(*args, grid=grid, warmup=warmup, **kwargs)
        return _launchable(self).run(*args, grid=grid, warmup=warmup, **kwargs)


def launcher(kernel, probe: Tensor):
    """``kernel`` (a ``@triton.jit`` function or an autotuner over one) ready for ``[grid](...)``.

    On data: :func:`_launchable` (launched directly, as the ``seq2d::triton_bsmm`` ops do eagerly).
    On a stand-in ``probe`` (:func:`_stand_in`: torch is tracing one of those ops, for
    ``torch.compile`` or a fake/meta call): through ``torch.library.wrap_triton``, which records
    the launch as a ``triton_kernel_wrapper`` node instead of running it. The kernel recorded is
    compiled-mode: the ``@triton.jit`` function itself, or under the interpreter an
    ``_InterpretedJIT`` (``wrap_triton`` would launch an interpreted one at once, fake tensors and
    all); and a real tensor among the arguments (the layout's index metadata) enters the trace as
    a graph constant (``aten.lift_fresh``): fake tensors and real ones must not meet."""
    jit = isinstance(kernel, (JITFunction, InterpretedFunction))  # else an autotuner, built in the current mode
    if not _stand_in(probe):
        return _launchable(kernel) if jit else kernel
    if jit and _interpreting():
        key = (kernel.fn, "traced")
        if key not in _RETARGETED:
            _RETARGETED[key] = _InterpretedJIT(kernel.fn)
        kernel = _RETARGETED[key]
    elif jit:
        kernel = _launchable(kernel)
    return _Lifting(wrap_triton(kernel))


class _Lifting:
    """``wrapped[grid](*args, **kwargs)`` with each real tensor argument lifted into the trace."""

    def __init__(self, wrapped):
        self.wrapped = wrapped

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            args = tuple(_lifted(a) for a in args)
            kwargs = {k: _lifted(v) for k, v in kwargs.items()}
            return self.wrapped[grid](*args, **kwargs)
        return launch


def _lifted(a):
    if isinstance(a, Tensor) and not isinstance(a, (FakeTensor, FunctionalTensor)):
        return torch.ops.aten.lift_fresh.default(a)
    return a


_RETARGETED: dict = {}


def _launchable(kernel):
    """``kernel`` in the mode Triton is in now.

    ``@triton.jit`` picks compiled vs interpreted when the module is imported; if
    ``TRITON_INTERPRET`` changed since (a test setting it after seq2d was imported), the
    same Python function is wrapped again for the current mode (cached).
    """
    interp = _interpreting()
    if isinstance(kernel, InterpretedFunction) == interp:
        return kernel
    key = (kernel.fn, interp)
    if key not in _RETARGETED:
        _RETARGETED[key] = InterpretedFunction(kernel.fn) if interp else JITFunction(kernel.fn)
    return _RETARGETED[key]


# (BLOCK_B, num_warps, num_stages) per (T, 4-byte dtype?). Chosen so that every kernel
# stays under ~99 KB of shared memory (checked by compiling for sm_80/sm_86/sm_90), which
# every CUDA GPU since Ampere offers; fp32 tiles are twice the bytes, hence smaller blocks.
# Not tuned on hardware.
_GPU_CONFIGS = {
    (16, False): (128, 4, 3), (32, False): (128, 4, 3), (64, False): (128, 4, 3), (128, False): (64, 8, 3),
    (16, True): (128, 4, 3), (32, True): (128, 4, 3), (64, True): (64, 4, 2), (128, True): (32, 8, 2),
}


# Per-kernel entries ("dds_t", "dds" or "sdd_t", T, 4-byte dtype?) -> (BLOCK_B, num_warps,
# num_stages) win over _GPU_CONFIGS. Empty until measured: benchmarks/gpu/triton_configs.py times
# candidates by setting entries here (the H200 kernel table of 2026-11-26 ran _GPU_CONFIGS alone).
_GPU_KERNEL_CONFIGS: dict[tuple[str, int, bool], tuple[int, int, int]] = {}


def _config(T: int, dtype: torch.dtype, device: torch.device, kernel: str | None = None) -> dict:
    """Compile-time parameters of ``kernel`` ('dds_t', 'dds' or 'sdd_t'): batch block, warps,
    stages, fp32 dot precision, bf16 upcast."""
    interp = _interpreting()
    fp32 = dtype == torch.float32
    if (kernel, T, fp32) in _GPU_KERNEL_CONFIGS:  # before the interpreter's: a sweep's BLOCK_B runs there too
        block_b, num_warps, num_stages = _GPU_KERNEL_CONFIGS[(kernel, T, fp32)]
    elif interp:
        # small blocks keep the interpreter's numpy work small and exercise the masks
        block_b, num_warps, num_stages = 16, 4, 1
    else:
        block_b, num_warps, num_stages = _GPU_CONFIGS[(T, fp32)]
    # fp32 operands: tf32 tensor cores only where torch allows them for its own matmuls.
    # 16-bit operands ignore the setting; "tf32" is then just tl.dot's NVIDIA default
    # (AMD only accepts "ieee" on most chips).
    nvidia = device.type == "cuda" and torch.version.hip is None
    tf32 = nvidia and (dtype != torch.float32 or torch.backends.cuda.matmul.allow_tf32)
    return dict(
        T=T,
        BLOCK_B=block_b,
        INPUT_PRECISION="tf32" if tf32 else "ieee",
        # Triton's interpreter stores bfloat16 as uint16 and its tl.dot is a plain
        # np.matmul on those bits, so bf16 dots return garbage there (triton 3.8).
        # Upcast the loaded tiles to fp32 only then; GPUs keep bf16 tensor-core dots.
        UPCAST=interp and dtype == torch.bfloat16,
        num_warps=num_warps,
        num_stages=num_stages,
    )


def _device_guard(t: Tensor):
    """Launch on the tensor's GPU (Triton launches on the current device)."""
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


# ---------------------------------------------------------------------------- kernel entry points (write into out)
def dds_t(x: Tensor, wp: Tensor, layout: BlockSparseLayout, out: Tensor) -> Tensor:
    """``out[:] = x @ W.T``; x (B, Kt*T), out (B, Mt*T)."""
    B, T = x.shape[0], layout.tile
    if B == 0:
        return out
    cfg = _config(T, x.dtype, x.device, "dds_t")
    nb = triton.cdiv(B, cfg["BLOCK_B"])
    with _device_guard(x):
        launcher(_dds_t_kernel, x)[(nb * layout.Mt,)](
            x, wp, out, layout.row_ptr, layout.col, B, nb,
            x.stride(0), x.stride(1), wp.stride(0), wp.stride(1), wp.stride(2), out.stride(0), out.stride(1),
            **cfg,  # the interpreter ignores num_warps/num_stages
        )
    return out


def dds(dy: Tensor, wp: Tensor, layout: BlockSparseLayout, out: Tensor) -> Tensor:
    """``out[:] = dy @ W``; dy (B, Mt*T), out (B, Kt*T)."""
    B, T = dy.shape[0], layout.tile
    if B == 0:
        return out
    cfg = _config(T, dy.dtype, dy.device, "dds")
    nb = triton.cdiv(B, cfg["BLOCK_B"])
    with _device_guard(dy):
        launcher(_dds_kernel, dy)[(nb * layout.Kt,)](
            dy, wp, out, layout.row, layout.t_pos, layout.col_ptr, B, nb,
            dy.stride(0), dy.stride(1), wp.stride(0), wp.stride(1), wp.stride(2), out.stride(0), out.stride(1),
            **cfg,  # the interpreter ignores num_warps/num_stages
        )
    return out


def _n_splits(B: int, P: int, block_b: int, device: torch.device) -> int:
    """Batch splits for dW: enough programs to fill the GPU, >= 4 batch blocks each."""
    if device.type != "cuda":
        return 1
    target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(target // max(P, 1), B // (4 * block_b)))


def sdd_t(dy: Tensor, x: Tensor, layout: BlockSparseLayout, out: Tensor, splits: int | None = None) -> Tensor:
    """``out[:] = (dy.T @ x)`` at the stored tiles, transposed storage (P, T, T).

    ``splits`` (default: chosen from the GPU size) divides the batch over that many
    programs per tile, summed through an fp32 workspace.
    """
    B, T, P = x.shape[0], layout.tile, layout.nnz
    if P == 0:
        return out
    if B == 0:
        return out.zero_()
    cfg = _config(T, x.dtype, x.device, "sdd_t")
    bb = cfg["BLOCK_B"]
    S = splits if splits is not None else _n_splits(B, P, bb, x.device)
    S = max(1, min(S, triton.cdiv(B, bb)))
    rows_per_split = triton.cdiv(triton.cdiv(B, S), bb) * bb
    S = triton.cdiv(B, rows_per_split)  # no empty splits
    dst = out if S == 1 else torch.empty(S, P, T, T, device=out.device, dtype=torch.float32)
    s_stride = 0 if S == 1 else dst.stride(0)
    st = out.stride() if S == 1 else dst.stride()[1:]
    with _device_guard(x):
        launcher(_sdd_t_kernel, x)[(S * P,)](
            x, dy, dst, layout.row, layout.col, B, rows_per_split, P,
            x.stride(0), x.stride(1), dy.stride(0), dy.stride(1), s_stride, st[0], st[1], st[2],
            **cfg,  # the interpreter ignores num_warps/num_stages
        )
    if S > 1:
        out.copy_(dst.sum(0))
    return out


# ---------------------------------------------------------------------------- kernel object
def _check(name: str, a: Tensor, a_cols: int, wp: Tensor | None, layout: BlockSparseLayout) -> None:
    if a.dim() != 2 or a.shape[1] != a_cols:
        raise InvalidInput(f"triton {name}: expected a 2-D operand with {a_cols} columns, got shape {tuple(a.shape)}")
    if wp is not None:
        T = layout.tile
        if tuple(wp.shape) != (layout.nnz, T, T):
            raise InvalidInput(f"triton {name}: expected wp of shape {(layout.nnz, T, T)}, got {tuple(wp.shape)}")
        if wp.dtype != a.dtype or wp.device != a.device:
            raise InvalidType(f"triton {name}: wp ({wp.dtype}, {wp.device}) must match the dense operand "
                            f"({a.dtype}, {a.device})")


class TritonKernel(Kernel):
    """Block-sparse ops as Triton kernels: CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``."""

    name = "triton"

    def supports(self, device, dtype) -> bool:
        device = torch.device(device)
        if dtype not in _DTYPES:
            return False
        return device.type == "cuda" or (device.type == "cpu" and _interpreting())

    def product(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        """Through the ops ``seq2d::triton_bsmm`` / ``seq2d::triton_bsmm_backward``
        (``torch.library.triton_op``): ``torch.compile`` traces into them and sees the kernels."""
        return host_product(x, wp, layout, self, torch.ops.seq2d.triton_bsmm)

    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        layout = layout.to(x.device)
        _check("dds_t", x, layout.Kt * layout.tile, wp, layout)
        return dds_t(x, wp, layout, x.new_empty(x.shape[0], layout.Mt * layout.tile))

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        layout = layout.to(dy.device)
        _check("dds", dy, layout.Mt * layout.tile, wp, layout)
        return dds(dy, wp, layout, dy.new_empty(dy.shape[0], layout.Kt * layout.tile))

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        layout = layout.to(x.device)
        _check("sdd_t", x, layout.Kt * layout.tile, None, layout)
        _check("sdd_t", dy, layout.Mt * layout.tile, None, layout)
        if dy.shape[0] != x.shape[0] or dy.dtype != x.dtype or dy.device != x.device:
            raise InvalidInput(f"triton sdd_t: dy {tuple(dy.shape)} {dy.dtype} and x {tuple(x.shape)} {x.dtype} "
                               "must share batch size, dtype and device")
        T = layout.tile
        return sdd_t(dy, x, layout, x.new_empty(layout.nnz, T, T))


register_kernel(TritonKernel())

# the ops of every Triton kernel object (kernel= names it): torch.compile traces into their bodies,
# each launch a triton_kernel_wrapper node (launcher), differentiable through the backward op
define_product_ops("triton_bsmm", torch.library.triton_op)
