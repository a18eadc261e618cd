"""The parameter stores by name: which store a model's linear blocks live in.

Every linear block names the store that holds it (``LinearBlock.store_kind = "dense"``,
``TiledBlock.store_kind = "tiled"``); a store class registers under its ``kind`` with
:func:`register_store` and builds itself from the blocks with ``from_blocks``.
``Sequential2D`` asks :func:`build_store`, never a block's or a store's class.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InvalidValue
from .base import Store

__all__ = ["STORE_CLASSES", "register_store", "build_store"]

#: store kind ('dense', 'tiled') -> its class; filled by :func:`register_store`
STORE_CLASSES: dict[str, type[Store]] = {}


def register_store(cls: type[Store]) -> type[Store]:
    """Class decorator: ``cls`` holds the linear blocks whose ``store_kind`` is ``cls.kind``.
    ``cls.from_blocks(sizes, entries, levels, loop=...)`` builds it (raising a typed error
    naming what does not fit)."""
    STORE_CLASSES[cls.kind] = cls
    return cls


def build_store(sizes: Sequence[int], entries: Sequence[tuple[int, int, object]], levels, loop: bool) -> Store:
    """The store holding ``entries`` (``(i, j, block)`` of every linear position, at least one):
    the registered class of the kind the blocks name (one kind per model). ``levels``: the plan's
    levels (None: iterated); ``loop``: the dense store's per-block loop (:attr:`Store.loop`)."""
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for i, j, blk in entries:
        by_kind.setdefault(getattr(blk, "store_kind", None), []).append((i, j))
    if len(by_kind) != 1:
        held = "; ".join(f"blocks {pos} by the {kind} store" for kind, pos in sorted(by_kind.items(), key=str))
        raise InvalidValue(f"the linear blocks of one Sequential2D live in one store, got {held}; "
                           "convert the whole model with to_blocksparse()")
    (kind,) = by_kind
    if kind not in STORE_CLASSES:
        raise InvalidValue(f"no store is registered for linear blocks of store_kind {kind!r}; registered: "
                           + ", ".join(repr(k) for k in STORE_CLASSES))
    return STORE_CLASSES[kind].from_blocks(sizes, entries, levels, loop=loop)
