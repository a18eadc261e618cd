"""Small helpers for tests and benchmarks: autograd-graph size, gradients of views, example inputs.

- :func:`autograd_nodes`: the number of nodes in the autograd graph of some outputs,
- :func:`view_grad` / :func:`grads_of`: gradients of leaves and of views of leaves (a
  LinearBlock handle's ``weight`` and ``model.bias(i)`` are views into the parameter store),
- :func:`example_input`: positional inputs any registered model accepts,
- :func:`ulps`: the tolerance for two computation paths that agree up to rounding.

The equivalence cases against torch.nn live in :mod:`seq2d.equivalence`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .errors import InvalidType
from .core import Sequential2D

__all__ = ["autograd_nodes", "example_input", "grads_of", "ulps", "view_grad"]


def ulps(dtype: torch.dtype, n: int = 8) -> dict[str, float]:
    """``{"rtol", "atol"}`` of ``n`` units in the last place of ``dtype``, for
    ``torch.testing.assert_close(a, b, **ulps(a.dtype))``: the tolerance for two different
    computation paths (another kernel, summation order or CPU capability: AVX2 and AVX512
    builds of the same GEMM differ in the last bits). Bitwise equality is only a valid claim
    where one code path is compared with itself (a resumed run, one configuration run twice)."""
    eps = torch.finfo(dtype).eps
    return {"rtol": n * eps, "atol": n * eps}


def autograd_nodes(*roots: Tensor, ops_only: bool = False) -> int:
    """Unique nodes of the graph of ``roots`` (their grad_fn and everything reachable by
    next_functions); ``ops_only`` leaves out the AccumulateGrad nodes of the leaves."""
    seen = set()  # holding the node objects keeps their Python wrappers (and so their identity) alive
    stack = [r.grad_fn for r in roots]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    if ops_only:
        return sum(1 for fn in seen if type(fn).__name__ != "AccumulateGrad")
    return len(seen)


def view_grad(t: Tensor) -> Tensor | None:
    """``t.grad`` for a leaf; for a view of a leaf (a handle's ``weight``, ``model.bias(i)``)
    the same view of the leaf's ``.grad``."""
    base = t._base if (t.grad_fn is not None and t._base is not None) else None
    if base is None:
        return t.grad
    g = base.grad
    if g is None:
        return None
    g = g.contiguous() if g.stride() != base.stride() else g
    return g.as_strided(tuple(t.size()), tuple(t.stride()), t.storage_offset() - base.storage_offset())


def grads_of(loss: Tensor, tensors: list[Tensor]) -> list[Tensor | None]:
    """Gradients of ``loss`` for leaves and for views of leaves (a LinearBlock handle's
    ``weight`` and ``model.bias(i)`` are views into the model's parameter store): the
    gradient of a view is the same view of its leaf's gradient."""
    leaves: list[Tensor] = []
    where: list[tuple[int, tuple | None]] = []
    for t in tensors:
        base = t._base if (t.grad_fn is not None and t._base is not None and t._base.grad_fn is None) else None
        leaf = t if base is None else base
        k = next((n for n, x in enumerate(leaves) if x is leaf), None)
        if k is None:
            k = len(leaves)
            leaves.append(leaf)
        view = None if base is None else (tuple(t.size()), tuple(t.stride()), t.storage_offset() - base.storage_offset())
        where.append((k, view))
    gs = torch.autograd.grad(loss, leaves, allow_unused=True)
    out = []
    for k, view in where:
        g = gs[k]
        if g is not None and view is not None:
            g = g.contiguous() if g.stride() != leaves[k].stride() else g
            g = g.as_strided(*view)
        out.append(g)
    return out


def example_input(model: nn.Module, batch: int = 3, steps: int = 5, dtype=None, generator=None) -> tuple:
    """Positional inputs that ``model`` accepts, for generic tests over the registry."""
    from .models.recurrent import RNN, TruncatedRNN

    p = next(model.parameters())
    dtype = dtype or p.dtype
    kw = {"dtype": dtype, "device": p.device, "generator": generator}
    if isinstance(model, Sequential2D):
        return (torch.randn(batch, model.in_features, **kw),)
    if isinstance(model, (RNN, TruncatedRNN)):
        return (torch.randn(steps, batch, model.input_size, **kw),)
    d_model = getattr(model, "d_model", None)
    if d_model is not None:  # transformer wrappers: (B, T, d)
        return (torch.randn(batch, steps, d_model, **kw),)
    raise InvalidType(f"example_input: no example input known for {type(model).__name__}")
