"""Public block-sparse ops (thin: shapes, kernel choice, then the autograd Function).

=================  ==========================================================
op                 meaning
=================  ==========================================================
``bsmm(x, wp, L)``  ``y = x @ W.T`` for ``x`` ``(*batch, Kt*T)``; differentiable in
                   ``x`` and in the per-position tiles ``wp`` (dW only on stored tiles)
``resolve_kernel``   the kernel ``kernel="auto"`` picks for a device/dtype/density
=================  ==========================================================
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from ..errors import InvalidInput, InvalidType
from .autograd import BlockSparseMatmul
from .backends import get_kernel
from .backends.base import KernelBackend
from .layout import BlockSparseLayout

__all__ = ["bsmm", "resolve_kernel", "DENSE_CROSSOVER"]

# Density from which the dense kernel (W materialised from the tiles, then dense GEMMs) beats
# the block-sparse kernels, forward + backward. CPU: measured with
# `benchmarks/blocksparse.py --sweep-crossover` (N=4096, batch 256, tile 64, float32, 2 threads;
# docs/performance.md): materialising W costs more than it saves at every density up to 1.0, so
# "auto" never picks it on the CPU. CUDA: not measured yet (no GPU in the first session).
DENSE_CROSSOVER = {"cpu": float("inf"), "cuda": 0.75}


def resolve_kernel(kernel: str, device: torch.device, dtype: torch.dtype, density: float) -> KernelBackend:
    """The kernel object for ``kernel`` ('auto' or a name) on ``device``/``dtype`` at ``density``."""
    if kernel != "auto":
        chosen = get_kernel(kernel)
        if not chosen.supports(device, dtype):
            raise InvalidInput(f"block-sparse kernel {kernel!r} does not support {dtype} on {device}")
        return chosen
    dev = torch.device(device).type
    if density >= DENSE_CROSSOVER.get(dev, 0.5):
        return get_kernel("dense")
    if dev == "cuda" or (os.environ.get("TRITON_INTERPRET") == "1" and dtype in (torch.float16, torch.bfloat16)):
        try:
            kernel = get_kernel("triton")
            if kernel.supports(device, dtype):
                return kernel
        except ValueError:
            pass
    # "cpu" (runs), not "cpu_bmm": measured 2026-11-23 (docs/performance.md, "CPU kernel under
    # contention", benchmarks/results/blocksparse-cpu-contend-2026-11-23-*.json; N=4096, batch 256,
    # tile 64, 2 threads) cpu_bmm is 1.4x slower than cpu on a quiet machine (2x at density 1)
    # although 3-11x faster with one competing busy process. (It wins quiet at tile 16, but the
    # tile is not known here.)
    cpu = get_kernel("cpu")
    if cpu.supports(device, dtype):
        return cpu
    return get_kernel("dense")


def bsmm(x: Tensor, wp: Tensor, layout: BlockSparseLayout, kernel: str | KernelBackend = "auto") -> Tensor:
    """``x @ W.T`` with ``W`` block-sparse (per-position tiles ``wp``, transposed storage)."""
    T = layout.tile
    if x.shape[-1] != layout.Kt * T:
        raise InvalidInput(f"bsmm: x must have last dimension {layout.Kt * T} (Kt * T), got {tuple(x.shape)}")
    if tuple(wp.shape) != (layout.nnz, T, T):
        raise InvalidInput(f"bsmm: wp must have shape {(layout.nnz, T, T)}, got {tuple(wp.shape)}")
    if wp.dtype != x.dtype or wp.device != x.device:
        raise InvalidType(f"bsmm: x ({x.dtype}, {x.device}) and wp ({wp.dtype}, {wp.device}) must share dtype and device")
    if not isinstance(kernel, KernelBackend):
        kernel = resolve_kernel(kernel, x.device, x.dtype, layout.density)
    if x.dim() == 2:  # the Function's own output, not a view of it (callers may add in place)
        return BlockSparseMatmul.apply(x, wp, layout.to(x.device), kernel)
    batch = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    y = BlockSparseMatmul.apply(x2, wp, layout.to(x.device), kernel)
    return y.reshape(*batch, layout.Mt * T)
