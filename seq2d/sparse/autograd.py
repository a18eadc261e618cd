"""The differentiable block-sparse product ``y = x @ W.T``: how a kernel is called.

Forward calls the kernel's ``dds_t``; backward its fused ``backward`` (``dds`` for dX and
``sdd_t`` for dW, the latter only on stored tiles), honouring the inputs' ``needs_input_grad``.
No N x N matrix is formed unless the kernel itself is the dense one. The tiles may be any
strided view (a transposed or stepped slice): they are made contiguous once here, so every
kernel sees the storage it indexes (``wp[a:b].view(k*T, T)``), and autograd returns dW to
the view the caller passed.

Two ways in, chosen by the kernel (:meth:`seq2d.sparse.backends.KernelBackend.product`):

- kernels written in torch ops (``reference``, ``dense``) run inside the autograd Function
  :class:`BlockSparseMatmul`, which ``torch.compile`` traces through;
- kernels that loop in Python over index plans (the CPU kernels) are the custom ops
  ``seq2d::bsmm`` and ``seq2d::bsmm_backward`` (``torch.library.custom_op``, with fake
  implementations and ``register_autograd``): ``torch.compile`` sees one opaque op per pass,
  no graph break, and ``torch.library.opcheck`` checks them (tests/test_compile.py). An op
  takes the layout as its :attr:`~seq2d.sparse.layout.BlockSparseLayout.handle` (a string) and the
  kernel by name; the Triton kernels have their own ``triton_op``\\ s
  (:mod:`seq2d.sparse.backends.triton_backend`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

# (the CPU kernels import this module: the package loads backends.base first)
from .backends.base import KernelBackend, get_kernel
from .layout import BlockSparseLayout, layout_of

__all__ = ["BlockSparseMatmul", "host_product"]


class BlockSparseMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, wp: torch.Tensor, layout: BlockSparseLayout, kernel: KernelBackend):
        ctx.layout, ctx.kernel = layout, kernel
        wp = wp.contiguous()  # a no-op for the engines' own tiles; one copy for a strided view
        ctx.save_for_backward(x, wp)
        return kernel.dds_t(x, wp, layout)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor):
        x, wp = ctx.saved_tensors
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dw = ctx.kernel.backward(dy, x, wp, ctx.layout, need_dx, need_dw)
        return dx, dw, None, None


# ---------------------------------------------------------------------------- the custom ops
@torch.library.custom_op("seq2d::bsmm", mutates_args=())
def _bsmm(x: Tensor, wp: Tensor, layout: str, kernel: str) -> Tensor:
    """``x @ W.T`` (B, Mt*T) by kernel ``kernel`` for the layout with handle ``layout``."""
    return _kernel(kernel).dds_t(x, wp, layout_of(layout))


@_bsmm.register_fake
def _(x, wp, layout, kernel):
    L = layout_of(layout)
    return x.new_empty(x.shape[0], L.Mt * L.tile)


@torch.library.custom_op("seq2d::bsmm_backward", mutates_args=())
def _bsmm_backward(dy: Tensor, x: Tensor, wp: Tensor, layout: str, kernel: str, need_dx: bool,
                   need_dw: bool) -> tuple[Tensor, Tensor]:
    """``(dX, dW)`` of :func:`_bsmm`, contiguous (as the fake ones: ``cpu_bmm`` picks dW out of a
    permuted buffer); an empty tensor in place of one not asked for."""
    dx, dw = _kernel(kernel).backward(dy, x, wp, layout_of(layout), need_dx, need_dw)
    return (dx.contiguous() if dx is not None else x.new_empty(0)), (dw.contiguous() if dw is not None else wp.new_empty(0))


@_bsmm_backward.register_fake
def _(dy, x, wp, layout, kernel, need_dx, need_dw):
    return (x.new_empty(x.shape) if need_dx else x.new_empty(0)), (wp.new_empty(wp.shape) if need_dw else wp.new_empty(0))


def _setup(ctx, inputs, output) -> None:
    x, wp, layout, kernel = inputs
    ctx.save_for_backward(x, wp)
    ctx.layout, ctx.kernel = layout, kernel


def _backward(ctx, dy: Tensor):
    x, wp = ctx.saved_tensors
    need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_dx or need_dw):
        return None, None, None, None
    dx, dw = torch.ops.seq2d.bsmm_backward(dy, x, wp, ctx.layout, ctx.kernel, need_dx, need_dw)
    return (dx if need_dx else None), (dw if need_dw else None), None, None


_bsmm.register_autograd(_backward, setup_context=_setup)


# kernel objects the custom ops reach by name that are not the registry's own (a CPUBackend built
# with other settings, e.g. another chunk size): name "<name>@<id>", held for the life of the process
_UNREGISTERED: dict[str, KernelBackend] = {}


def _kernel(name: str) -> KernelBackend:
    return _UNREGISTERED[name] if name in _UNREGISTERED else get_kernel(name)


def _op_name(kernel: KernelBackend) -> str:
    """The name the custom ops take for ``kernel``: its registry name when it is the registered object."""
    try:
        if get_kernel(kernel.name) is kernel:
            return kernel.name
    except ValueError:
        pass
    key = f"{kernel.name}@{id(kernel)}"
    _UNREGISTERED[key] = kernel
    return key


def host_product(x: Tensor, wp: Tensor, layout: BlockSparseLayout, kernel: KernelBackend) -> Tensor:
    """``x @ W.T`` through the custom op ``seq2d::bsmm`` (``x`` 2-D, ``layout`` on ``x``'s device)."""
    return torch.ops.seq2d.bsmm(x, wp.contiguous(), layout.handle, _op_name(kernel))
