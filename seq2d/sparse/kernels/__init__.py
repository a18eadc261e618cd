"""The kernels of the block-sparse product: one :class:`Kernel` object per name that
``kernel=`` selects (:func:`available_kernels`).

Every kernel implements the same three ops on 2-D dense operands (``x`` is
``(B, Kt*T)``, ``dy`` is ``(B, Mt*T)``, ``wp`` is ``(P, T, T)`` per-position tiles in the
transposed storage of :mod:`seq2d.sparse.layout`):

=========  ==========================================  ===========================
op         computes                                    used for
=========  ==========================================  ===========================
``dds_t``  ``x @ W.T``  -> dense ``(B, Mt*T)``          forward ``y``
``dds``    ``dy @ W``   -> dense ``(B, Kt*T)``          ``dX``
``sdd_t``  ``(dy.T @ x)`` sampled at the stored tiles    ``dW`` (only stored tiles)
           -> ``(P, T, T)`` transposed storage
=========  ==========================================  ===========================

Names follow stk: the letters are (output, left operand, right operand), ``s`` sparse,
``d`` dense; ``_t`` marks a transposed sparse operand (or a transposed dense left one).
``backward`` may fuse ``dds`` and ``sdd_t`` (the CPU kernel gathers ``x`` once for both).
"""

from __future__ import annotations

import importlib.util

from .base import Kernel, available_kernels, get_kernel, register_kernel, register_lazy_kernel
from . import reference, cpu  # noqa: F401  (registration)

# Triton is optional (it ships with the CUDA build of torch). Its kernels load on first use: importing
# them imports torch._dynamo and triton, seconds that a process which never asks for them should not pay
if importlib.util.find_spec("triton") is not None:
    register_lazy_kernel("triton", f"{__name__}.triton_v1")
    register_lazy_kernel("triton_v2", f"{__name__}.triton_v2")

__all__ = ["Kernel", "available_kernels", "get_kernel", "register_kernel"]
