"""The autograd Function of the block-sparse product ``y = x @ W.T``.

Forward calls the kernel's ``dds_t``; backward its fused ``backward`` (``dds`` for dX and
``sdd_t`` for dW, the latter only on stored tiles), honouring ``ctx.needs_input_grad``.
No N x N matrix is formed unless the kernel itself is the dense one. The tiles may be any
strided view (a transposed or stepped slice): they are made contiguous once here, so every
kernel sees the storage it indexes (``wp[a:b].view(k*T, T)``), and autograd returns dW to
the view the caller passed.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .backends.base import KernelBackend
from .layout import BlockSparseLayout


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
