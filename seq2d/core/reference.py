"""The plain per-block loop of the ``Sequential2D`` docstring, for tests.

Deliberately naive: no fused operator, no plans, one block call at a time. Every
fast path in seq2d is tested for equality against :func:`reference_forward`.
"""

from __future__ import annotations

from torch import Tensor

from ..blocks import call_block

__all__ = ["reference_step", "reference_forward"]


def reference_step(model, x: list[Tensor | None], **context) -> list[Tensor | None]:
    n = model.n
    like = next(t for t in x if t is not None)
    new = list(x)
    for i in range(n):
        row = [j for j in range(n) if model.block(i, j) is not None]
        if not row:
            continue  # held slot
        b = model.bias(i)
        acc = b if b is not None else 0
        for j in row:
            if x[j] is not None:
                acc = acc + call_block(model.block(i, j), x[j], model.sizes[i], i, j, context)  # never broadcast
        acc = acc + like.new_zeros((*like.shape[:-1], model.sizes[i]))  # broadcast to (*batch, s_i)
        new[i] = model.acts[i](acc)
    return new


def reference_forward(model, x: list[Tensor | None], steps: int, **context) -> list[Tensor | None]:
    for _ in range(steps):
        x = reference_step(model, x, **context)
    return x
