"""Reference backend: materialise the masked dense matrix. For tests only (O(N^2) memory)."""

from __future__ import annotations

from torch import Tensor

from ..layout import BlockSparseLayout
from .base import KernelBackend, register_kernel


class ReferenceBackend(KernelBackend):
    name = "reference"

    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        return x @ layout.to_dense(wp).T

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        return dy @ layout.to_dense(wp)

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        return layout.from_dense(dy.T @ x)


register_kernel(ReferenceBackend())


class DenseBackend(ReferenceBackend):
    """The high-density path: materialise W from the stored tiles and run dense GEMMs.

    Same arithmetic as the reference; chosen by ``backend="auto"`` when the density is
    above the measured crossover (see :func:`seq2d.sparse.ops.resolve_backend`)."""

    name = "dense"


register_kernel(DenseBackend())
