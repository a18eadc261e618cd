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

__all__ = ["StoreView", "WriteBack"]


class WriteBack(Tensor):
    """A tensor whose in-place edits are handed to a callback: what a handle gives out where the
    store does not keep the region as one strided view (a compactly stored block's ``weight``,
    assembled from the trained entries; its ``mask``, whose edit changes which entries are
    stored). An in-place method (``t.mul_(2)``, ``t[0, 0] = x``, ``t += 1``, ``t.copy_(v)``, an
    ``nn.init`` function, ``out=t``) on it or on a view of it (``t[:, :3]``, ``t.data``,
    ``t.detach()``, which stay WriteBacks) calls ``write(root)`` with the tensor first handed out,
    after the edit; anything else computed from it is a plain tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _with_write_back(func, types, args, kwargs or {})

    @staticmethod
    def of(t: Tensor | None, write, root: Tensor | None = None) -> "WriteBack | None":
        """``t`` as a WriteBack whose in-place edits call ``write(root)`` (default ``root``: ``t``)."""
        if t is None:
            return None
        out = t.as_subclass(WriteBack)
        out._wb = (t if root is None else root, write)
        return out


_INPLACE_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
                              "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"})
_NOT_WRITES = frozenset({"requires_grad_", "retain_grad", "share_memory_", "record_stream"})


def _with_write_back(func, types, args, kwargs):
    """``func`` on plain tensors; then the write-back of every WriteBack it edited in place, or,
    for a result that shares the storage of a WriteBack argument (a view), that result as one."""
    out = _plain_torch_function(func, types, args, kwargs)
    name = getattr(func, "__name__", "")
    first = args[0] if args else kwargs.get("tensor", kwargs.get("input"))  # nn.init passes ``tensor=``
    edited = []
    if first is not None and (name in _INPLACE_DUNDERS or (name.endswith("_") and not name.startswith("_")
                                              and name not in _NOT_WRITES)):
        edited.append(first)
    dest = kwargs.get("out")
    edited += list(dest) if isinstance(dest, (tuple, list)) else [dest]
    wbs = [t.__dict__["_wb"] for t in edited if isinstance(t, WriteBack) and t.__dict__.get("_wb") is not None]
    for root, write in wbs:
        write(root)
    if wbs or name in _NOT_VIEWS or not isinstance(out, Tensor) or isinstance(out, WriteBack) or not args:
        return out
    src = args[0]
    wb = src.__dict__.get("_wb") if isinstance(src, WriteBack) else None
    if wb is not None and out is not wb[0]:
        with torch._C.DisableTorchFunctionSubclass():
            shared = out.numel() > 0 and out.untyped_storage().data_ptr() == src.untyped_storage().data_ptr()
        if shared:
            return WriteBack.of(out, wb[1], root=wb[0])
    return out


_NOT_VIEWS = frozenset({"as_subclass"})  # ``t.as_subclass(Tensor)``: the way out to a plain tensor


class StoreView(WriteBack):
    """A region of a model's parameter store as a tensor (a handle's ``blk.weight``,
    ``model.bias(i)``) whose ``.grad`` is the store's gradient at the same region.

    With the dense store the region is a view of one store Parameter (writes go through). A
    tiled block's ``weight`` is its tiles assembled into the dense ``(out, in)`` matrix, a copy
    (``region``: the function that assembles it from a tensor shaped like the matrix's tiles).
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
        return _with_write_back(func, types, args, kwargs)  # results are plain tensors (views of a
        # write-back region excepted)

    @staticmethod
    def of(view: Tensor | None, leaf: Tensor | None = None, region=None, put=None) -> "StoreView | None":
        """``view`` as a StoreView of the store Parameter ``leaf``. Without ``region``, ``view``
        is a view of ``leaf`` (default: its ``_base``) and its region is located by its strides
        and offset; else ``region(t)`` computes ``view``'s entries from a tensor ``t`` shaped like
        ``leaf`` (``view == region(leaf)``, linear in ``leaf``'s entries: a gather). ``put(t, v)``
        (with ``region`` only): write the region's values ``v`` into ``t`` shaped like ``leaf``; then
        the view and its ``.grad`` are copies whose in-place edits are put back into ``leaf`` and
        its gradient (:class:`WriteBack`). A StoreView given again without ``leaf`` is returned as it is."""
        if view is None:
            return None
        if isinstance(view, StoreView) and leaf is None:
            return view
        out = view.as_subclass(StoreView)
        out._put = put
        out._wb = None if put is None else (view, lambda v: _put_no_grad(put, leaf, v))
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
        if g is None:
            return None
        put = self.__dict__.get("_put")
        r = self.region_of(g)
        return r if put is None else WriteBack.of(r, lambda v: _put_no_grad(put, g, v))

    @grad.setter
    def grad(self, value) -> None:
        raise InvalidValue("this tensor is a view into the model's parameter store (a block's weight or a "
                           "slot's bias): its gradient is the store's and cannot be set here; clear gradients "
                           "with model.zero_grad()")


_plain_torch_function = torch._C._disabled_torch_function_impl


@torch.no_grad()
def _put_no_grad(put, t: Tensor, v: Tensor) -> None:
    put(t, v.as_subclass(Tensor))


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
