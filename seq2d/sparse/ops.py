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

import functools
import os

import torch
from torch import Tensor

from ..errors import InvalidInput, InvalidType
from .autograd import BlockSparseMatmul
from .kernels import get_kernel
from .kernels.base import Kernel
from .layout import BlockSparseLayout

__all__ = ["bsmm", "dense_crossover", "resolve_kernel", "DENSE_CROSSOVER"]

# Stored-tile density from which the dense kernel (W materialised from the tiles, then dense
# GEMMs) beats the block-sparse kernels, forward + backward, keyed by (device type, dtype group,
# tile); None is "any". CPU: `benchmarks/blocksparse.py --sweep-crossover` (N=4096, batch 256,
# tile 64, float32, 2 threads; docs/performance.md): materialising W costs more than it saves at
# every density up to 1.0, so "auto" never picks it on the CPU. CUDA: an NVIDIA H200, 2026-11-26,
# N=8192, batch 8192 (benchmarks/results/blocksparse-cuda-2026-11-26-bf16.json and -tf32.json;
# `python benchmarks/gpu/report.py --date 2026-11-26` prints these numbers and
# tests/test_gpu_report.py checks them against the JSON). Not measured: tile 16 on CUDA (the
# tile-32 value is used, the nearest tile), float32 at tiles other than 64 (likewise).
DENSE_CROSSOVER = {
    ("cpu", None, None): float("inf"),
    ("cuda", "16-bit", 128): 0.77,
    ("cuda", "16-bit", 64): 0.53,
    ("cuda", "16-bit", 32): 0.15,
    ("cuda", "float32", 64): 0.15,  # with tf32 dots (the Triton kernel's IEEE fp32 dots are slower still)
}


def dense_crossover(device: torch.device | str, dtype: torch.dtype, tile: int | None = None) -> float:
    """The :data:`DENSE_CROSSOVER` entry for ``device``/``dtype``/``tile``: the exact tile, else the
    nearest measured tile of the same device and dtype group, else the device's catch-all, else 0.5."""
    group = "16-bit" if dtype in (torch.float16, torch.bfloat16) else "float32"
    return _crossover(torch.device(device).type, group, tile)


@functools.lru_cache(maxsize=None)
def _crossover(dev: str, group: str, tile: int | None) -> float:
    """:func:`dense_crossover`'s lookup, once per key: ``resolve_kernel`` asks on every forward."""
    tiles = {t: v for (d, g, t), v in DENSE_CROSSOVER.items() if d == dev and g == group}
    if tiles:
        if tile in tiles:
            return tiles[tile]
        nearest = min(tiles, key=lambda t: (abs(t - tile) if tile else 0, t))
        return tiles[nearest]
    return DENSE_CROSSOVER.get((dev, None, None), 0.5)


def resolve_kernel(kernel: str, device: torch.device, dtype: torch.dtype, density: float,
                   tile: int | None = None) -> Kernel:
    """The kernel object for ``kernel`` ('auto' or a name) on ``device``/``dtype`` at stored-tile
    ``density`` (and ``tile``, which the CUDA crossover depends on: :func:`dense_crossover`)."""
    if kernel != "auto":
        chosen = get_kernel(kernel)
        if not chosen.supports(device, dtype):
            raise InvalidInput(f"block-sparse kernel {kernel!r} does not support {dtype} on {device}")
        return chosen
    dev = torch.device(device).type
    if density >= dense_crossover(device, dtype, tile):
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


def bsmm(x: Tensor, wp: Tensor, layout: BlockSparseLayout, kernel: str | Kernel = "auto") -> Tensor:
    """``x @ W.T`` with ``W`` block-sparse (per-position tiles ``wp``, transposed storage)."""
    T = layout.tile
    if x.shape[-1] != layout.Kt * T:
        raise InvalidInput(f"bsmm: x must have last dimension {layout.Kt * T} (Kt * T), got {tuple(x.shape)}")
    if tuple(wp.shape) != (layout.nnz, T, T):
        raise InvalidInput(f"bsmm: wp must have shape {(layout.nnz, T, T)}, got {tuple(wp.shape)}")
    if wp.dtype != x.dtype or wp.device != x.device:
        raise InvalidType(f"bsmm: x ({x.dtype}, {x.device}) and wp ({wp.dtype}, {wp.device}) must share dtype and device")
    if not isinstance(kernel, Kernel):
        kernel = resolve_kernel(kernel, x.device, x.dtype, layout.density, layout.tile)
    if x.dim() == 2:  # the op's own output, not a view of it (callers may add in place)
        return _product(x, wp, layout.to(x.device), kernel)
    batch = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    y = _product(x2, wp, layout.to(x.device), kernel)
    return y.reshape(*batch, layout.Mt * T)


def _product(x: Tensor, wp: Tensor, layout: BlockSparseLayout, kernel: Kernel) -> Tensor:
    """The kernel's own differentiable op (a custom op) if it has one, else the autograd Function."""
    y = kernel.product(x, wp, layout)
    return BlockSparseMatmul.apply(x, wp, layout, kernel) if y is None else y
