"""The compact layout of a masked box: its trained entries only, placed into the box in the step.

A box of the dense store with a mask (entries outside every block, element masks, tied copies)
keeps as its Parameter the vector of its trained entries, in row-major order of the box, and
``index`` (``mask.reshape(-1).nonzero()``): where each entry sits in the flattened box. A step
forms the box in one op, ``frozen.reshape(-1).index_add(0, index, values)`` (without frozen values
``zeros.index_copy(0, index, values)``), whose backward is one gather of the box's gradient at
``index``: ``parameters()``, gradients and every optimizer's state hold the trained entries only.

Old state (the box as a dense ``(R, C)`` Parameter with its ``mask``: state dicts and
checkpoints written before this layout) is converted with the mask it was saved with:
:func:`compact_boxes` here (a store's part of a state dict; :mod:`.migrate` applies it to whole
models and to optimizer states).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

from ..store_view import StoreView

__all__ = ["compact_index", "place", "take", "block_index", "block_region", "compact_boxes", "old_boxes"]


def compact_index(mask: Tensor) -> Tensor:
    """Where the True entries of the bool ``mask`` sit in ``mask.reshape(-1)`` (row-major)."""
    return mask.reshape(-1).nonzero().squeeze(1)


def place(values: Tensor, index: Tensor, shape: tuple[int, int], frozen: Tensor | None = None) -> Tensor:
    """The ``shape`` box holding ``values`` at ``index`` (flat) and ``frozen`` (or zeros) elsewhere,
    plus ``frozen`` under the values too: one differentiable op, its backward one gather."""
    if frozen is not None:
        return frozen.reshape(-1).index_add(0, index, values).view(shape)
    zeros = values.new_zeros(shape[0] * shape[1])
    if not torch.compiler.is_compiling() and torch._C._functorch.is_functorch_wrapped_tensor(values):
        return zeros.index_copy(0, index, values).view(shape)  # vmapped copies (seq2d.train.vectorized): batched values
    return zeros.index_copy_(0, index, values).view(shape)  # in place: no copy of the zeros


def take(box: Tensor, index: Tensor) -> Tensor:
    """The entries of ``box`` at the flat positions ``index`` (:func:`compact_index` of a mask): the
    values a compact box stores, the inverse of :func:`place`."""
    return box.reshape(-1).index_select(0, index)


def block_index(index: Tensor, C: int, r0: int, c0: int, h: int, w: int) -> tuple[Tensor, Tensor]:
    """The entries of the ``(h, w)`` region at ``(r0, c0)`` of a box with ``C`` columns stored
    compactly at ``index``: (their positions in the values vector, their flat positions in the region)."""
    r, c = index // C, index % C
    sel = ((r >= r0) & (r < r0 + h) & (c >= c0) & (c < c0 + w)).nonzero().squeeze(1)
    return sel, (r.index_select(0, sel) - r0) * w + (c.index_select(0, sel) - c0)


def block_region(W: Tensor, sel: Tensor, local: Tensor, h: int, w: int, grad: bool = False) -> Tensor | None:
    """The ``(h, w)`` region of a block in a compact box whose values are ``W`` (``sel``, ``local``:
    :func:`block_index`): its weight as a :class:`StoreView` (``.grad`` the block's gradient;
    in-place edits of either are written back into ``W`` or its gradient), or with ``grad`` that
    gradient's region."""

    def region(t: Tensor) -> Tensor:  # t shaped like W
        return t.new_zeros(h * w).index_copy(0, local, t.index_select(0, sel)).view(h, w)

    def put(t: Tensor, v: Tensor) -> None:  # the region's values v into t shaped like W: its trained entries
        t.index_copy_(0, sel, v.reshape(-1).index_select(0, local).to(t.dtype))

    view = StoreView.of(region(W), W, region, put=put)
    return view.grad if grad else view


def old_boxes(stores: Iterable, state: Mapping) -> list[tuple[str, int, nn.Parameter, Tensor]]:
    """(key, k, Parameter, saved mask) of every compact box of the ``(prefix, store)`` pairs whose
    weight ``state`` holds as the dense ``(R, C)`` box (the layout before this one), with the
    mask it was saved with."""
    out = []
    for prefix, store in stores:
        for k, W in enumerate(store.weight):
            shape = store.box_shape(k)
            key, mkey = f"{prefix}weight.{k}", f"{prefix}mask_{k}"
            w, m = state.get(key), state.get(mkey)
            if (store.is_compact(k) and isinstance(w, Tensor) and tuple(w.shape) == shape
                    and isinstance(m, Tensor) and tuple(m.shape) == shape):
                out.append((key, k, W, m.bool()))
    return out


def compact_boxes(stores: Iterable, state: dict) -> dict:
    """``state`` with every box that a ``(prefix, store)`` of ``stores`` stores compactly but
    ``state`` holds densely (with its mask: written before the compact layout) reduced to the
    entries that mask trains. Changes ``state`` in place and returns it."""
    for key, _, _, m in old_boxes(stores, state):
        state[key] = take(state[key], compact_index(m.to(state[key].device)))
    return state
