"""Reference kernel: materialise the masked dense matrix. For tests only (O(N^2) memory)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..layout import BlockSparseLayout
from .base import Kernel, register_kernel


class ReferenceKernel(Kernel):
    name = "reference"

    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        return x @ layout.to_dense(wp).T

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        return dy @ layout.to_dense(wp)

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        return layout.from_dense(dy.T @ x)


register_kernel(ReferenceKernel())


class DenseKernel(ReferenceKernel):
    """The high-density path: materialise W from the stored tiles and run dense GEMMs.

    Chosen by ``kernel="auto"`` above the measured density crossover (see
    :func:`seq2d.sparse.ops.resolve_kernel`). When every tile is stored (density 1) the
    dense matrix is one permuted copy of the tile storage, and dW goes back to tiles with
    one more; the backward forms W once for dX."""

    name = "dense"

    @staticmethod
    def _full(layout: BlockSparseLayout) -> bool:
        return layout.nnz == layout.Mt * layout.Kt  # sorted row-major, so position p = (p // Kt, p % Kt)

    def _dense(self, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        if not self._full(layout):
            return layout.to_dense(wp)
        T = layout.tile
        # wp[(r, c), a, b] = W[r*T + b, c*T + a]
        return wp.view(layout.Mt, layout.Kt, T, T).permute(0, 3, 1, 2).reshape(layout.Mt * T, layout.Kt * T)

    def _tiles(self, dW: Tensor, layout: BlockSparseLayout) -> Tensor:
        if not self._full(layout):
            return layout.from_dense(dW)
        T = layout.tile
        return dW.view(layout.Mt, T, layout.Kt, T).permute(0, 2, 3, 1).reshape(layout.nnz, T, T)

    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        return torch.nn.functional.linear(x, self._dense(wp, layout))

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        return dy @ self._dense(wp, layout)

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        return self._tiles(dy.T @ x, layout)


register_kernel(DenseKernel())
