"""The kernel interface and registry."""

from __future__ import annotations

import torch
from torch import Tensor

from ...errors import InvalidValue
from ..layout import BlockSparseLayout

_KERNELS: dict[str, "Kernel"] = {}
# name -> module that registers it on import: kernels whose import is costly (Triton's pull in
# torch._dynamo, seconds per process) load on first use, through get_kernel
_LAZY: dict[str, str] = {}


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


def register_lazy_kernel(name: str, module: str) -> None:
    """Register ``name`` as the kernel that importing ``module`` registers (:func:`register_kernel`),
    imported the first time :func:`get_kernel` asks for it."""
    if name not in _KERNELS:
        _LAZY[name] = module


def available_kernels() -> list[str]:
    return sorted({*_KERNELS, *_LAZY})


def get_kernel(name: str) -> Kernel:
    if name not in _KERNELS and name in _LAZY:
        import importlib

        module = _LAZY.pop(name)
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise InvalidValue(f"block-sparse kernel {name!r} could not be loaded ({module}: {e})") from e
    try:
        return _KERNELS[name]
    except KeyError:
        raise InvalidValue(f"Unknown block-sparse kernel {name!r}. Select from "
                         + ", ".join(repr(k) for k in ["auto", *available_kernels()])) from None
