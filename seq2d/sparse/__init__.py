"""The block-sparse matrix: tiles, one block-sparse product per step, CPU and Triton kernels.

Layers (as in stk): :mod:`.layout` (the type) -> :mod:`.ops` (public ops) ->
:mod:`.autograd` (the Function) -> :mod:`.kernels` (kernels). :mod:`.linear` holds the
tiles as a module (``BlockSparseLinear``); how a Sequential2D steps with it is
:mod:`seq2d.stores.tiled`.
"""

from .kernels import available_kernels, get_kernel
from .layout import TILE_SIZES, BlockSparseLayout, layout_from_tile_mask
from .linear import BlockSparseLinear
from .ops import DENSE_CROSSOVER, bsmm, dense_crossover, resolve_kernel

__all__ = [
    "DENSE_CROSSOVER",
    "TILE_SIZES",
    "BlockSparseLayout",
    "BlockSparseLinear",
    "available_kernels",
    "bsmm",
    "dense_crossover",
    "get_kernel",
    "layout_from_tile_mask",
    "resolve_kernel",
]
