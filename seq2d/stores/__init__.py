"""Stores: where a Sequential2D's linear weights live and how a step multiplies them.

One seam for every fast path. A model holds one store (``model.store``):

==========  ===========================================================================
``dense``   :class:`DenseStore`: dense boxes (one ``(R, C)`` parameter for an iterated
            model, one per level for a plan-evaluated acyclic one), masks and frozen
            values as buffers over them; one GEMM per box per step.
``tiled``   :class:`TiledStore`: the block-sparse tiles of :mod:`seq2d.sparse`
            (``model.to_blocksparse(tile)``, or the tile ``auto`` would take), one
            block-sparse product per step.
``auto``    ``tiled`` where the measured crossover says the tiles win, else ``dense``
            (:func:`choose_store`).
==========  ===========================================================================

The dense store's mode ``loop=True`` (``model.loop``) keeps its storage and evaluates one
``F.linear`` per block position (the reference). ``model.store.kind`` names the store.

Layers: :mod:`.base` (interface, flat layout) -> :mod:`.registry` (the stores by name: each linear
block names the store that holds it) -> :mod:`.dense` / :mod:`.tiled`.
"""

from __future__ import annotations

from .base import Store, contiguous_runs
from .dense import DenseStore
from .tiled import TiledBlock, TiledStore
from .choose import STORES, check_store, choose_store
from .registry import STORE_CLASSES, build_store, register_store

__all__ = ["Store", "DenseStore", "TiledStore", "TiledBlock", "STORES", "check_store", "choose_store", "contiguous_runs", "STORE_CLASSES",
           "build_store", "register_store"]
