"""The differentiable block-sparse product ``y = x @ W.T``: how a kernel is called.

Forward calls the kernel's ``dds_t``; backward its fused ``backward`` (``dds`` for dX and
``sdd_t`` for dW, the latter only on stored tiles), honouring the inputs' ``needs_input_grad``.
No N x N matrix is formed unless the kernel itself is the dense one. The tiles may be any
strided view (a transposed or stepped slice): they are made contiguous once here, so every
kernel sees the storage it indexes (``wp[a:b].view(k*T, T)``), and autograd returns dW to
the view the caller passed.

Three ways in, chosen by the kernel (:meth:`seq2d.sparse.kernels.Kernel.product`):

- kernels written in torch ops (``reference``, ``dense``) run inside the autograd Function
  :class:`BlockSparseMatmul`, which ``torch.compile`` traces through;
- kernels that loop in Python over index plans (the CPU kernels) are the custom ops
  ``seq2d::bsmm`` and ``seq2d::bsmm_backward`` (``torch.library.custom_op``, with fake
  implementations and ``register_autograd``): ``torch.compile`` sees one opaque op per pass,
  no graph break, and ``torch.library.opcheck`` checks them (tests/test_compile.py);
- the Triton kernels (``triton``, ``triton_v2``) are the ops ``seq2d::triton_bsmm`` and
  ``seq2d::triton_bsmm_backward`` (``torch.library.triton_op``, same autograd): ``torch.compile``
  traces into them and records each launch (``wrap_triton``), for inductor to compile into its
  graph (tests/test_triton_ops.py up to AOTAutograd on the CPU; inductor and CUDA-graph capture
  only on a GPU, tests/test_cuda.py).

Both pairs come from :func:`define_product_ops`. An op takes the layout as its
:attr:`~seq2d.sparse.layout.BlockSparseLayout.handle` (a string) and the kernel by name.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

# (the CPU kernels import this module: the package loads kernels.base first)
from .kernels.base import Kernel, get_kernel
from .layout import BlockSparseLayout, layout_of

__all__ = ["BlockSparseMatmul", "define_product_ops", "host_product"]


class BlockSparseMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, wp: torch.Tensor, layout: BlockSparseLayout, kernel: Kernel):
        ctx.layout, ctx.kernel = layout, kernel
        wp = wp.contiguous()  # a no-op for the matrices' own tiles; one copy for a strided view
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
def define_product_ops(name: str, define):
    """The ops ``seq2d::<name>`` (``x @ W.T``) and ``seq2d::<name>_backward`` (``(dX, dW)``),
    defined by ``define`` (``torch.library.custom_op``, or ``triton_op`` for kernels that launch
    through :func:`~seq2d.sparse.kernels.triton_v1.launcher`), the first differentiable
    through the second (``register_autograd``). Returns the pair; a ``custom_op`` pair still needs
    its fake implementations."""

    @define(f"seq2d::{name}", mutates_args=())
    def forward(x: Tensor, wp: Tensor, layout: str, kernel: str) -> Tensor:
        """``x @ W.T`` (B, Mt*T) by kernel ``kernel`` for the layout with handle ``layout``."""
        return _kernel(kernel).dds_t(x, wp, layout_of(layout))

    @define(f"seq2d::{name}_backward", mutates_args=())
    def backward(dy: Tensor, x: Tensor, wp: Tensor, layout: str, kernel: str, need_dx: bool,
                 need_dw: bool) -> tuple[Tensor, Tensor]:
        """``(dX, dW)`` of the forward op, contiguous (as the fake ones: ``cpu_bmm`` picks dW out of
        a permuted buffer); an empty tensor in place of one not asked for."""
        dx, dw = _kernel(kernel).backward(dy, x, wp, layout_of(layout), need_dx, need_dw)
        return (dx.contiguous() if dx is not None else x.new_empty(0)), (dw.contiguous() if dw is not None else wp.new_empty(0))

    backward_op = getattr(torch.ops.seq2d, f"{name}_backward")

    def setup_context(ctx, inputs, output) -> None:
        x, wp, layout, kernel = inputs
        ctx.save_for_backward(x, wp)
        ctx.layout, ctx.kernel = layout, kernel

    def derivative(ctx, dy: Tensor):
        x, wp = ctx.saved_tensors
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_dx or need_dw):
            return None, None, None, None
        dx, dw = backward_op(dy, x, wp, ctx.layout, ctx.kernel, need_dx, need_dw)
        return (dx if need_dx else None), (dw if need_dw else None), None, None

    forward.register_autograd(derivative, setup_context=setup_context)
    return forward, backward


# the CPU kernels' ops: opaque to torch.compile (their loops over index plans stay out of the graph)
_bsmm, _bsmm_backward = define_product_ops("bsmm", torch.library.custom_op)


@_bsmm.register_fake
def _(x, wp, layout, kernel):
    L = layout_of(layout)
    return x.new_empty(x.shape[0], L.Mt * L.tile)


@_bsmm_backward.register_fake
def _(dy, x, wp, layout, kernel, need_dx, need_dw):
    return (x.new_empty(x.shape) if need_dx else x.new_empty(0)), (wp.new_empty(wp.shape) if need_dw else wp.new_empty(0))


# kernel objects the custom ops reach by name that are not the registry's own (a CPUKernel built
# with other settings, e.g. another chunk size): name "<name>@<id>", held for the life of the process
_UNREGISTERED: dict[str, Kernel] = {}


def _kernel(name: str) -> Kernel:
    return _UNREGISTERED[name] if name in _UNREGISTERED else get_kernel(name)


def _op_name(kernel: Kernel) -> str:
    """The name the custom ops take for ``kernel``: its registry name when it is the registered object."""
    try:
        if get_kernel(kernel.name) is kernel:
            return kernel.name
    except ValueError:
        pass
    key = f"{kernel.name}@{id(kernel)}"
    _UNREGISTERED[key] = kernel
    return key


def host_product(x: Tensor, wp: Tensor, layout: BlockSparseLayout, kernel: Kernel, op=None) -> Tensor:
    """``x @ W.T`` through the custom op ``op`` of :func:`define_product_ops` (default
    ``seq2d::bsmm``; ``x`` 2-D, ``layout`` on ``x``'s device)."""
    op = torch.ops.seq2d.bsmm if op is None else op
    return op(x, wp.contiguous(), layout.handle, _op_name(kernel))
