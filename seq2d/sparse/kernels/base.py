"""The kernel interface and registry."""

from __future__ import annotations

import torch
from torch import Tensor

from ...errors import InvalidValue
from ..layout import BlockSparseLayout

_KERNELS: dict[str, "Kernel"] = {}


class Kernel:
    """Base class: ``dds_t`` (forward), ``dds`` (dX), ``sdd_t`` (dW on stored tiles)."""

    name = "base"

    def product(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor | None:
        """The differentiable ``x @ W.T`` (``x`` 2-D) as this kernel's own torch op, or None: the
        kernel then runs inside the autograd Function :class:`seq2d.sparse.autograd.BlockSparseMatmul`
        (right for kernels written in torch ops, which ``torch.compile`` traces; a kernel that
        loops over host-side plans returns a custom op instead, see :mod:`seq2d.sparse.autograd`)."""
        return None

    def supports(self, device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def dds_t(self, x: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        raise NotImplementedError

    def dds(self, dy: Tensor, wp: Tensor, layout: BlockSparseLayout) -> Tensor:
        raise NotImplementedError

    def sdd_t(self, dy: Tensor, x: Tensor, layout: BlockSparseLayout) -> Tensor:
        raise NotImplementedError

    def backward(self, dy: Tensor, x: Tensor, wp: Tensor, layout: BlockSparseLayout, need_dx: bool, need_dw: bool):
        dx = self.dds(dy, wp, layout) if need_dx else None
        dw = self.sdd_t(dy, x, layout) if need_dw else None
        return dx, dw


def register_kernel(kernel: Kernel) -> Kernel:
    _KERNELS[kernel.name] = kernel
    return kernel


def available_kernels() -> list[str]:
    return sorted(_KERNELS)


def get_kernel(name: str) -> Kernel:
    try:
        return _KERNELS[name]
    except KeyError:
        raise InvalidValue(f"Unknown block-sparse kernel {name!r}. Select from "
                         + ", ".join(repr(k) for k in ["auto", *available_kernels()])) from None
