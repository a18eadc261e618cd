"""The tiled store: a Sequential2D's linear part as one block-sparse matrix.

Wraps a :class:`seq2d.sparse.BlockSparseLinear` (the tiles, their layout and the kernels)
and adds what a Sequential2D step needs: the flat state layout (every slot padded to whole
tiles, so slot ``i`` starts at ``toff[i] * T``), products restricted to the rows of one
plan level (a cached sub-layout per row set) and :class:`TiledBlock` handles.
``seq2d.sparse`` itself knows nothing of slots or steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..blocks import LinearLike
from ..sparse.layout import BlockSparseLayout
from ..sparse.linear import BlockSparseLinear
from ..sparse.ops import bsmm, resolve_backend
from .base import Engine

__all__ = ["TiledStore", "TiledBlock"]


class TiledStore(Engine):
    """The store of a block-sparse model: ``matrix`` is the BlockSparseLinear."""

    kind = "tiled"

    def __init__(self, matrix: BlockSparseLinear, box_rows: Sequence[Sequence[int]] | None = None):
        super().__init__(matrix.sizes)
        self.matrix = matrix
        T = matrix.tile
        self.offsets = tuple(t * T for t in matrix.toff)  # padded flat layout
        self.rows = tuple(sorted({i for i, _, _ in matrix.placements}))
        rows = set(self.rows)
        if box_rows is None:
            box_rows = [self.rows]
        self.boxes = [tuple(sorted(set(r) & rows)) for r in box_rows]
        self.boxes = [b for b in self.boxes if b]
        self.box_of_row = {i: b for b, r in enumerate(self.boxes) for i in r}
        self._sub: dict[tuple[int, ...], tuple[BlockSparseLayout, Tensor | None]] = {}
        self._rowmap: dict[tuple[int, ...], tuple[Tensor, dict[int, int]]] = {}
        self._sub_idx: dict[tuple[tuple[int, ...], torch.device], Tensor] = {}  # kept positions, per device

    @property
    def device(self) -> torch.device:
        return self.matrix.data.device

    @property
    def tile(self) -> int:
        return self.matrix.tile

    def boxes_for(self, rows) -> list:
        """One product per step: the full layout when every linear row is updated, else the
        sub-layout of exactly the updated linear rows (a plan level)."""
        key = tuple(sorted(set(rows) & set(self.rows)))
        return [key] if key else []

    def row_source(self, i: int, box=None) -> tuple:
        """Where row ``i``'s sum sits in the product of ``box``: the product holds exactly the
        tile-rows of the box's slots, side by side in slot order (no empty tile-rows)."""
        box = self.rows if box is None else box
        return box, self._compact(box)[1][i]

    def num_trainable(self) -> int:
        return self.matrix.num_trainable()

    def _compact(self, key: tuple[int, ...]) -> tuple[Tensor, dict[int, int]]:
        """Tile-row map of ``key``'s slots (full tile-row -> compact tile-row, -1 if not in the
        key) and each slot's flat offset in the compact product."""
        c = self._rowmap.get(key)
        if c is None:
            toff, T = self.matrix.toff, self.tile
            rmap = torch.full((self.matrix._layout.Mt,), -1, dtype=torch.long)
            start, t = {}, 0
            for i in key:
                k = toff[i + 1] - toff[i]
                rmap[toff[i]:toff[i + 1]] = torch.arange(t, t + k)
                start[i] = t * T
                t += k
            c = (rmap, start)
            self._rowmap[key] = c
        return c

    def _layout_for(self, key: tuple[int, ...]) -> tuple[BlockSparseLayout, Tensor | None]:
        """Layout of the tile-rows of ``key``'s slots, renumbered side by side (the product has
        no empty tile-rows to zero-fill, slice and differentiate back), and the positions it
        keeps (None = all)."""
        if key not in self._sub:
            full = self.matrix._layout
            rmap, _ = self._compact(key)
            Mt = int((rmap >= 0).sum())
            if Mt == full.Mt and torch.equal(rmap, torch.arange(full.Mt)):
                self._sub[key] = (full, None)
            else:
                row = full.row.cpu()
                idx = (rmap[row] >= 0).nonzero().squeeze(1)
                sub = BlockSparseLayout(self.tile, (Mt, full.Kt), rmap[row[idx]], full.col.cpu()[idx],
                                        full.data_index.cpu()[idx], full.n_data)
                self._sub[key] = (sub, idx if idx.numel() < row.numel() else None)
        sub, idx = self._sub[key]
        if sub is self.matrix._layout:  # the full layout: the matrix keeps it on its device
            return self.matrix.layout, None
        dev = self.device
        if idx is not None and idx.device != dev:  # one copy per device, kept (CPU original stays)
            memo = self.__dict__.setdefault("_sub_idx", {})
            idx = memo.get((key, dev))
            if idx is None:
                idx = memo[(key, dev)] = self._sub[key][1].to(dev)
        return sub.to(dev), idx

    def product(self, x, boxes, cache: dict | None = None, bias: Tensor | None = None) -> dict:
        """``{box: x @ W_box.T}``: the sums of the box's rows only, side by side in slot order
        (:meth:`row_source`); ``x`` is a :class:`seq2d.flat.Segments` view of the flat state."""
        assert bias is None, "the tiled store adds biases after the product"
        x = x.read(0, self.offsets[-1])
        out = {}
        if cache is not None and "tiles" in cache:
            wp = cache["tiles"]
        else:
            wp = self.matrix.position_tiles()
            if cache is not None:
                cache["tiles"] = wp  # the masked tiles are formed once per forward, not per step
        for key in boxes:
            L, idx = self._layout_for(key)
            w = wp if idx is None else wp.index_select(0, idx)
            kernel = resolve_backend(self.matrix.backend, x.device, x.dtype, L.density)
            out[key] = bsmm(x, w, L, kernel)
        return out

    def dense_weight(self) -> Tensor:
        """The unpadded N x N effective weight (inspection and tests only)."""
        m = self.matrix
        N = sum(self.sizes)
        off = [0]
        for s in self.sizes:
            off.append(off[-1] + s)
        W = m.data.new_zeros(N, N)
        for i, j, g in m.placements:
            W[off[i]:off[i + 1], off[j]:off[j + 1]] = m.group_dense(g, "weight")
        return W


class TiledBlock(LinearLike):
    """A grid position's view of its group's tiles in a :class:`BlockSparseLinear`.

    Holds no weights (the engine does); ``bias`` is the converted LinearBlock's own bias
    Parameter, when it had one. ``effective_weight()`` assembles the dense (out, in) weight
    for inspection and the reference loop; the model's forward pass uses the engine directly.
    """

    def __init__(self, engine: BlockSparseLinear, group: int, bias: Tensor | None = None):
        super().__init__()
        object.__setattr__(self, "_engine", engine)  # not a submodule: the model owns the engine
        self.group = group
        self.out_features, self.in_features = engine.groups[group].shape
        self.register_parameter("bias", bias)

    @property
    def engine(self) -> BlockSparseLinear:
        return self._engine

    def effective_weight(self) -> Tensor:
        return self._engine.group_dense(self.group, "weight")

    @property
    def weight(self) -> Tensor:
        return self.effective_weight()

    def trainable_mask(self) -> Tensor:
        return self._engine.group_dense(self.group, "mask")

    @property
    def mask(self) -> Tensor | None:
        m = self.trainable_mask()
        return None if bool(m.all()) else m

    @property
    def frozen(self) -> Tensor | None:
        if self._engine.frozen is None:
            return None
        return self._engine.group_dense(self.group, "frozen")

    def _tile_sum(self, t) -> int:
        idx = self._engine._group_index(self.group, t.device)[0]
        return int(t.index_select(0, idx).sum()) if idx.numel() else 0

    def num_trainable(self) -> int:
        """Trainable entries of this group's tiles (read from the tile mask: no dense block)."""
        eng = self._engine
        if not eng.data.requires_grad:
            return 0
        if eng.tmask is None:
            return eng.groups[self.group].n_tiles * eng.tile * eng.tile
        return self._tile_sum(eng.tmask)

    def num_stored(self) -> int:
        """Entries that take part in the product: trainable ones and non-zero frozen values at
        non-trainable entries (an offset under a trainable entry is not counted twice)."""
        eng = self._engine
        if eng.tmask is None:
            return eng.groups[self.group].n_tiles * eng.tile * eng.tile
        n = self._tile_sum(eng.tmask)
        if eng.frozen is not None:
            n += self._tile_sum((eng.frozen != 0) & ~eng.tmask)
        return n

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.effective_weight(), self.bias)

    def extra_repr(self) -> str:
        g = self._engine.groups[self.group]
        return f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}, tiles={g.n_tiles}"
