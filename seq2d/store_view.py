"""A view into a model's parameter store that autograd treats as the store's region.

:class:`StoreView` is what a handle hands out (``blk.weight`` of a LinearBlock placed in a
Sequential2D, ``model.bias(i)``): ``.grad`` reads the store's gradient at the view's region, and
``torch.autograd.grad`` / ``backward(inputs=...)`` with a StoreView differentiate with respect to
the store's Parameter and answer with the region (``__torch_function__`` below; every other torch
function sees a plain tensor and returns one).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .errors import InvalidInput, InvalidValue

__all__ = ["StoreView"]


class StoreView(Tensor):
    """A region of a model's parameter store as a tensor (a handle's ``blk.weight``,
    ``model.bias(i)``) whose ``.grad`` is the store's gradient at the same region.

    With the dense store the region is a view of one store Parameter (writes go through). A
    tiled block's ``weight`` is its tiles assembled into the dense ``(out, in)`` matrix, a copy
    (``region``: the function that assembles it from a tensor shaped like the engine's tiles).
    Neither is a leaf, so torch gives it no ``.grad`` of its own (``None``, with a warning);
    code written for ``nn.Linear`` reads ``layer.weight.grad``, so the handles return this
    subclass instead. Anything computed from it is a plain tensor. ``.grad`` is read-only:
    gradients live in the store's Parameters (``model.zero_grad()``; with the dense store
    in-place edits of ``.grad`` write through to the store's gradient).

    **Autograd with a view as input.** The forward pass reads the store's Parameters, not the
    views a handle hands out afterwards, so for a plain view torch would answer
    ``torch.autograd.grad(loss, blk.weight)`` with "not used in the graph" (``None`` under
    ``allow_unused=True``, zeros under ``materialize_grads=True``) and
    ``loss.backward(inputs=[blk.weight])`` with nothing at all. A StoreView routes both to the
    store: ``torch.autograd.grad`` differentiates with respect to the store Parameter the view
    lies in and returns the view's region of that gradient (every keyword works, including
    ``create_graph``, ``is_grads_batched`` and ``materialize_grads``; a region the loss does not
    reach gets zeros, as an unused part of any Parameter does); ``backward(inputs=[...])``
    adds the region's gradient into the store's ``.grad`` at that region only. So per-block
    gradients are ``torch.autograd.grad(loss, [blk.weight for blk in blocks])``, equal to
    those of the same network written with ``nn.Linear`` (tests/test_store_view.py)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.autograd.grad:
            return _grad_through_store(*args, **kwargs)
        if func is torch.autograd.backward:
            return _backward_through_store(*args, **kwargs)
        return _plain_torch_function(func, types, args, kwargs)  # results are plain tensors

    @staticmethod
    def of(view: Tensor | None, leaf: Tensor | None = None, region=None) -> "StoreView | None":
        """``view`` as a StoreView of the store Parameter ``leaf``. Without ``region``, ``view``
        is a view of ``leaf`` (default: its ``_base``) and its region is located by its strides
        and offset; else ``region(t)`` computes ``view``'s entries from a tensor ``t`` shaped like
        ``leaf`` (``view == region(leaf)``, linear in ``leaf``'s entries: a gather)."""
        if view is None:
            return None
        out = view.as_subclass(StoreView)
        if leaf is None:
            leaf = view if view._base is None else view._base  # read on the plain view: no dispatch
        out._leaf, out._region = leaf, region
        return out

    def region_of(self, t: Tensor) -> Tensor:
        """This view's region of ``t``, a tensor shaped like the store Parameter the view lies in
        (after any leading batch dimensions): with the dense store a view of ``t`` when ``t`` is
        laid out like the Parameter, else of a contiguous copy."""
        leaf = self._leaf
        lead = t.dim() - leaf.dim()
        if lead < 0 or tuple(t.shape[lead:]) != tuple(leaf.shape):
            raise InvalidInput(f"StoreView.region_of: expected a tensor of shape (..., {', '.join(map(str, leaf.shape))}) "
                               f"like the store parameter, got {tuple(t.shape)}")
        if self._region is not None:
            if lead == 0:
                return self._region(t)
            flat = t.reshape(-1, *leaf.shape)
            return torch.stack([self._region(u) for u in flat]).reshape(*t.shape[:lead], *self.shape)
        if not _same_layout(t.stride()[lead:], leaf.stride(), leaf.shape):
            t = t.contiguous()
            if not _same_layout(t.stride()[lead:], leaf.stride(), leaf.shape):
                raise InvalidValue("StoreView.region_of: the store parameter is not contiguous "
                                   f"(strides {leaf.stride()} for shape {tuple(leaf.shape)}); its regions cannot be located")
        return t.as_strided(tuple(t.shape[:lead]) + tuple(self.shape), tuple(t.stride()[:lead]) + tuple(self.stride()),
                            t.storage_offset() + self.storage_offset() - leaf.storage_offset())

    @property
    def grad(self) -> Tensor | None:
        g = self._leaf.grad
        return None if g is None else self.region_of(g)

    @grad.setter
    def grad(self, value) -> None:
        raise InvalidValue("this tensor is a view into the model's parameter store (a block's weight or a "
                           "slot's bias): its gradient is the store's and cannot be set here; clear gradients "
                           "with model.zero_grad()")


_plain_torch_function = torch._C._disabled_torch_function_impl


def _same_layout(strides, leaf_strides, shape) -> bool:
    """Equal strides wherever a dimension has more than one entry (the others address nothing)."""
    return all(a == b for a, b, n in zip(strides, leaf_strides, shape) if n > 1)


def _plain(t):
    return t.as_subclass(Tensor) if isinstance(t, StoreView) else t


def _grad_through_store(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
                        only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """``torch.autograd.grad`` with every StoreView input replaced by its store Parameter (each
    Parameter differentiated once), answered with the views' regions of those gradients."""
    outputs = tuple(map(_plain, outputs)) if isinstance(outputs, (tuple, list)) else _plain(outputs)
    targets: list[Tensor] = []
    where = []
    for t in inputs:
        target = t._leaf if isinstance(t, StoreView) else t
        k = next((n for n, u in enumerate(targets) if u is target), None)
        if k is None:
            targets.append(target)
            k = len(targets) - 1
        where.append(k)
    grads = torch.autograd.grad(outputs, targets, grad_outputs=grad_outputs, retain_graph=retain_graph,
                                create_graph=create_graph, allow_unused=allow_unused,
                                is_grads_batched=is_grads_batched, materialize_grads=materialize_grads)
    return tuple(g if g is None or not isinstance(t, StoreView) else t.region_of(g)
                 for t, g in zip(inputs, (grads[k] for k in where)))


def _backward_through_store(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None,
                            **kwargs):
    """``torch.autograd.backward`` where ``inputs`` may hold StoreViews: their regions' gradients
    are added into the store's ``.grad`` at those regions; other inputs accumulate as torch does."""
    tensors = tuple(map(_plain, tensors)) if isinstance(tensors, (tuple, list)) else _plain(tensors)
    views = [t for t in (inputs or ()) if isinstance(t, StoreView)]
    rest = [t for t in (inputs or ()) if not isinstance(t, StoreView)]
    if not views:
        return torch.autograd.backward(tensors, grad_tensors, retain_graph, create_graph, inputs=inputs, **kwargs)
    if create_graph:
        raise InvalidValue("backward(inputs=...) with create_graph=True is not supported for a region of the "
                           "parameter store (a block's weight or a slot's bias, a StoreView); "
                           "torch.autograd.grad(loss, blk.weight, create_graph=True) is")
    grads = _grad_through_store(tensors, tuple(views), grad_outputs=grad_tensors,
                                retain_graph=True if rest else retain_graph, allow_unused=True)
    for v, g in zip(views, grads):
        if g is None:
            continue
        leaf = v._leaf
        if v._region is not None:  # the region is assembled (a gather): its adjoint puts g back in place
            with torch.enable_grad():
                z = torch.zeros_like(leaf, requires_grad=True)
                g, = torch.autograd.grad(v._region(z), z, g)
        with torch.no_grad():
            if leaf.grad is None:
                leaf.grad = torch.zeros_like(leaf)
            (leaf.grad if v._region is not None else v.grad).add_(g)
    if rest:
        torch.autograd.backward(tensors, grad_tensors, retain_graph, False, inputs=rest, **kwargs)
    return None
