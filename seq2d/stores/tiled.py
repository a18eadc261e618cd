"""The tiled store: a Sequential2D's linear part as one block-sparse matrix.

Wraps a :class:`seq2d.sparse.BlockSparseLinear` (the tiles, their layout and the kernels)
and adds what a Sequential2D step needs: the flat state layout (every slot padded to whole
tiles, so slot ``i`` starts at ``toff[i] * T``), products restricted to the rows of one
plan level (a cached sub-layout per row set) and :class:`TiledBlock` handles.
``seq2d.sparse`` itself knows nothing of slots or steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from ..blocks import LinearLike
from ..errors import InvalidValue
from ..store_view import StoreView
from ..sparse.layout import BlockSparseLayout
from ..sparse.linear import BlockSparseLinear
from ..sparse.ops import bsmm, resolve_kernel
from .base import Store
from .registry import register_store
from ..memo import memo_dict

__all__ = ["TiledStore", "TiledBlock"]


@register_store
class TiledStore(Store):
    """The store of a block-sparse model: ``matrix`` is the BlockSparseLinear."""

    kind = "tiled"
    output_writable = True  # the kernels save their inputs, not their output
    block_sparse = True
    partial_rows = True  # boxes_for gives exactly the updated rows' tile-rows

    @classmethod
    def from_blocks(cls, sizes: Sequence[int], entries, levels, *, loop: bool = False) -> "TiledStore":
        """The store of a model's TiledBlocks (:func:`seq2d.stores.registry.build_store`): their one
        BlockSparseLinear, checked to match the model (``loop`` is the dense store's mode; ignored)."""
        matrices = {id(b.matrix): b.matrix for _, _, b in entries}
        if len(matrices) != 1:
            raise InvalidValue(f"all tiled blocks of one Sequential2D must share one matrix, got {len(matrices)}")
        eng = next(iter(matrices.values()))
        if tuple(eng.sizes) != tuple(sizes):
            raise InvalidValue(f"the block-sparse matrix was built for sizes {list(eng.sizes)}, not {list(sizes)}")
        if {(i, j) for i, j, _ in eng.placements} != {(i, j) for i, j, _ in entries}:
            raise InvalidValue("the grid's tiled blocks do not match the matrix's placements")
        return cls(eng, levels)

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
            memo = memo_dict(self, "_sub_idx")
            idx = memo.get((key, dev))
            if idx is None:
                idx = memo[(key, dev)] = self._sub[key][1].to(dev)
        return sub.to(dev), idx

    def prepare(self, boxes, const: frozenset | None = None) -> None:
        """The sub-layouts of ``boxes`` and, with held slots ``const``, their held/rest splits and
        where a smaller row set finds its rows in a larger one's held product (:meth:`_held_of_subset`)."""
        for key in boxes:
            self._layout_for(key)
        if const is None:
            return
        split = {key: self._held_split(key, const) for key in boxes}
        for key in boxes:
            if split[key] is None:
                continue
            (_, ih, _), rest, _ = split[key]
            self._on(ih, self.device)
            if rest is not None:
                self._on(rest[1], self.device)
            for big in boxes:
                if split[big] is not None and set(key) < set(big):
                    self._subset_index(key, big, const, rest, self.device)

    def product(self, x, boxes, cache: dict | None = None, bias: Tensor | None = None,
                present: frozenset | None = None) -> dict:
        """``{box: x @ W_box.T}``: the sums of the box's rows only, side by side in slot order
        (:meth:`row_source`); ``x`` is a :class:`seq2d.core.state.Segments` view of the flat state.

        Held inputs (``cache["const"]``, see :meth:`seq2d.stores.DenseStore.product`): the tiles
        in the held slots' tile-columns are multiplied once per call, each step multiplies the
        other tiles only, and not at all while none of their columns is ``present``."""
        if bias is not None:
            raise InvalidValue("the tiled store adds biases after the product; got a bias to fuse")
        out = {}
        const = cache.get("const") if cache is not None else None
        for key in boxes:
            split = self._held_split(key, const) if const is not None else None
            if split is not None:
                out[key] = self._held_product(x, key, split, cache, present)
                continue
            xf = x.read(0, self.offsets[-1])
            L, idx = self._layout_for(key)
            wp = self._position_tiles(cache)
            w = wp if idx is None else wp.index_select(0, idx)
            kernel = resolve_kernel(self.matrix.kernel, xf.device, xf.dtype, L.density, L.tile)
            out[key] = bsmm(xf, w, L, kernel)
        return out

    def _position_tiles(self, cache: dict | None) -> Tensor:
        """The masked per-position tiles, formed once per forward (not per step)."""
        if cache is not None and "tiles" in cache:
            return cache["tiles"]
        wp = self.matrix.position_tiles()
        if cache is not None:
            cache["tiles"] = wp
        return wp

    def _held_split(self, key: tuple[int, ...], const: frozenset):
        """The positions of ``key``'s sub-layout split by tile-column: those in the slots
        ``const`` and the rest, each as (layout, positions in the full layout's tiles, the flat
        range of columns it reads), plus the slots the rest reads; None when no stored tile reads
        a held slot (static, memoised). Each layout spans only its part's tile-columns, from the
        first to the last it reads (the product reads that slice of the state: no gradient is
        zero-filled and carried back over the other columns)."""
        memo = memo_dict(self, "_held_splits")
        mkey = (key, const)
        if mkey not in memo:
            full = self.matrix._layout
            rmap, _ = self._compact(key)
            toff = self.matrix.toff
            col_slot = torch.empty(full.Kt, dtype=torch.long)
            for j in range(len(self.sizes)):
                col_slot[toff[j]:toff[j + 1]] = j
            held_col = torch.tensor([j in const for j in range(len(self.sizes))])[col_slot]
            row, col = full.row.cpu(), full.col.cpu()
            keep = rmap[row] >= 0
            parts = []
            for side in (held_col[col], ~held_col[col]):
                idx = (keep & side).nonzero().squeeze(1)
                if idx.numel() == 0:
                    parts.append(None)
                    continue
                Mt = int((rmap >= 0).sum())
                lo, hi = int(col[idx].min()), int(col[idx].max()) + 1
                L = BlockSparseLayout(self.tile, (Mt, hi - lo), rmap[row[idx]], col[idx] - lo,
                                      full.data_index.cpu()[idx], full.n_data)
                # the layout sorts its positions: gather the tiles in its order
                parts.append((L, idx[L.order], (lo * self.tile, hi * self.tile)))
            if parts[0] is None:
                memo[mkey] = None
            else:
                rest_slots = frozenset(int(col_slot[c]) for c in col[parts[1][1]].unique().tolist()) if parts[1] else frozenset()
                memo[mkey] = (parts[0], parts[1], rest_slots)
        return memo[mkey]

    def _held_product(self, x: Tensor, key, split, cache: dict, present: frozenset | None) -> Tensor:
        """One step's product of ``key``'s rows with the held tiles' part computed once per call."""
        held = cache.setdefault("held", {})
        h = held.get(key)
        (Lh, ih, span), rest, rest_slots = split
        dev = self.device
        if h is None:
            h = self._held_of_subset(key, held, rest, cache["const"])
            if h is not None:
                held[key] = h
        if h is None:
            xh = x.read(*span)
            kernel = resolve_kernel(self.matrix.kernel, dev, xh.dtype, Lh.density, Lh.tile)
            m = self.matrix
            if rest is not None and ih.numel() + rest[1].numel() == m.nnz_tiles and m.position_is_data:
                # every position is held or rest, each its own data tile: both parts gathered from
                # the data with the mask applied on the way, and one scatter back in the backward
                mask = m._float_tmask(m.data) if m.tmask is not None else None
                w_held, w_rest = _MaskedSplit.apply(m.data, self._on(ih, dev), self._on(rest[1], dev), mask,
                                                    *self._part_masks(key, ih, rest[1]))
            else:
                wp = self._position_tiles(cache)
                w_held = wp.index_select(0, self._on(ih, dev))
                w_rest = None if rest is None else wp.index_select(0, self._on(rest[1], dev))
            y_held = bsmm(xh, w_held, Lh, kernel)
            h = held[key] = (w_rest, y_held)
        w_rest, y_held = h
        if rest is None or (present is not None and present.isdisjoint(rest_slots)):
            return y_held  # every column the rest reads is zero
        Lr, _, span = rest
        kernel = resolve_kernel(self.matrix.kernel, dev, y_held.dtype, Lr.density, Lr.tile)
        return y_held + bsmm(x.read(*span), w_rest, Lr, kernel)

    def _held_of_subset(self, key: tuple[int, ...], held: dict, rest, const: frozenset) -> tuple | None:
        """``(w_rest, y_held)`` of ``key`` taken from those of a call's larger row set (a step of
        the tensor call's last ones, which compute fewer rows: :meth:`Sequential2D._iterate`):
        its rows of ``y_held`` and its rest tiles among the larger set's rest tiles; no product.
        None when no cached row set holds ``key``'s rows."""
        big = next((k for k in held if set(key) < set(k)), None)
        if big is None:
            return None
        w_rest_big, y_big = held[big]
        cols, tiles = self._subset_index(key, big, const, rest, y_big.device)
        y = y_big.narrow(-1, *cols) if isinstance(cols, tuple) else y_big.index_select(-1, cols)
        w_rest = None if tiles is None else w_rest_big.index_select(0, tiles)
        return w_rest, y

    def _subset_index(self, key: tuple[int, ...], big: tuple[int, ...], const: frozenset, rest, device) -> tuple:
        """``key``'s columns in ``big``'s held product (``(start, width)`` when contiguous, else an
        index) and its rest tiles among ``big``'s (None without rest tiles), on ``device`` (static, memoised)."""
        memo = memo_dict(self, "_subset_idx")
        mkey = (key, big, const, device)
        if mkey not in memo:
            _, start_big = self._compact(big)
            cols = torch.cat([torch.arange(start_big[i], start_big[i] + (self.offsets[i + 1] - self.offsets[i]))
                              for i in key])
            contiguous = bool(torch.equal(cols, torch.arange(int(cols[0]), int(cols[0]) + cols.numel())))
            tiles = None
            if rest is not None:  # key's rest positions (full layout) -> their places among big's rest tiles
                big_split = self._held_split(big, const)
                where = torch.full((self.matrix._layout.nnz,), -1, dtype=torch.long)
                where[big_split[1][1]] = torch.arange(big_split[1][1].numel())
                tiles = where[rest[1]].to(device)
            memo[mkey] = ((int(cols[0]), cols.numel()) if contiguous else cols.to(device), tiles)
        return memo[mkey]

    def _part_masks(self, key, *parts: Tensor) -> list:
        """The float tile mask and the frozen values at each part's positions (None where the
        matrix has none), kept until the mask or the frozen values change (their version counters
        move on in-place edits; assignment replaces the tensor)."""
        m = self.matrix
        d = m.data
        out = []
        for name, t in (("tmask", m.tmask), ("frozen", m.frozen)):
            if t is None:
                out.append([None] * len(parts))
                continue
            if torch.compiler.is_compiling():  # a graph cannot re-check the version counter: no memo
                src = m._float_tmask(d) if name == "tmask" else t.to(d.dtype)
                out.append([src.index_select(0, self._on(p, d.device)) for p in parts])
                continue
            memo = memo_dict(self, "_part_mask")
            k = (name, key, d.dtype, d.device)
            hit = memo.get(k)
            if hit is None or hit[0] is not t or hit[1] != t._version:  # the tensor itself is kept: its id stays its own
                src = m._float_tmask(d) if name == "tmask" else t.to(d.dtype)
                hit = memo[k] = (t, t._version, [src.index_select(0, self._on(p, d.device)) for p in parts])
            out.append(hit[2])
        return [v for pair in zip(*out) for v in pair]

    def _on(self, idx: Tensor, device) -> Tensor:
        """A CPU index tensor on ``device`` (one copy per device, kept)."""
        if idx.device == device:
            return idx
        memo = memo_dict(self, "_idx_on")
        k = (id(idx), device)
        if k not in memo:
            memo[k] = (idx, idx.to(device))  # the CPU original is held too, so its id stays unique
        return memo[k][1]

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


class _MaskedSplit(torch.autograd.Function):
    """``(frozen + data * tmask)[a], (frozen + data * tmask)[b]`` for index tensors ``a`` and
    ``b`` that together cover every data tile once (``mask`` the float tile mask, and the mask
    and frozen values already gathered: ``ma, fa, mb, fb``; each None when absent). Two gathers with the mask applied in
    place, where ``effective_data`` then two ``index_select`` would form the whole masked matrix
    first; the backward writes both parts' gradients into one tensor (no zero fill, no
    ``cat``) and masks it in place."""

    @staticmethod
    def forward(ctx, data: Tensor, a: Tensor, b: Tensor, mask, ma, fa, mb, fb):
        parts = []
        for idx, m, frozen in ((a, ma, fa), (b, mb, fb)):
            w = data.index_select(0, idx)
            if m is not None:
                w.mul_(m)
            if frozen is not None:
                w.add_(frozen)
            parts.append(w)
        ctx.save_for_backward(a, b, mask)
        ctx.n = data.shape[0]
        return tuple(parts)

    @staticmethod
    def backward(ctx, ga: Tensor | None, gb: Tensor | None):
        a, b, mask = ctx.saved_tensors
        like = ga if ga is not None else gb
        g = like.new_empty((ctx.n,) + tuple(like.shape[1:]))
        for idx, gp in ((a, ga), (b, gb)):
            if gp is None:
                g.index_fill_(0, idx, 0)
            else:
                g.index_copy_(0, idx, gp)
        if mask is not None:
            g.mul_(mask)
        return g, None, None, None, None, None, None, None


class TiledBlock(LinearLike):
    """A grid position's view of its group's tiles in a :class:`BlockSparseLinear`.

    Holds no weights (the matrix does); ``bias`` is the converted LinearBlock's own bias
    Parameter, when it had one. ``effective_weight()`` assembles the dense (out, in) weight
    for inspection and the reference loop; the model's forward pass uses the matrix directly.
    """

    store_kind = "tiled"  # held by the TiledStore (seq2d/stores/registry.py)

    def __init__(self, matrix: BlockSparseLinear, group: int, bias: Tensor | None = None):
        super().__init__()
        object.__setattr__(self, "_matrix", matrix)  # not a submodule: the model owns the matrix
        self.group = group
        self.out_features, self.in_features = matrix.groups[group].shape
        self.register_parameter("bias", bias)

    @property
    def matrix(self) -> BlockSparseLinear:
        return self._matrix

    def effective_weight(self) -> Tensor:
        return self._matrix.group_dense(self.group, "weight")

    @property
    def weight(self) -> Tensor:
        """``effective_weight()`` as a :class:`~seq2d.store_view.StoreView` of the matrix's tiles:
        ``.grad`` and ``torch.autograd.grad`` give this block's gradient (a copy: edits do not
        reach the matrix)."""
        eng = self._matrix
        return StoreView.of(self.effective_weight(), eng.data, partial(eng.group_dense, self.group))

    def trainable_mask(self) -> Tensor:
        return self._matrix.group_dense(self.group, "mask")

    @property
    def mask(self) -> Tensor | None:
        m = self.trainable_mask()
        return None if bool(m.all()) else m

    @property
    def frozen(self) -> Tensor | None:
        if self._matrix.frozen is None:
            return None
        return self._matrix.group_dense(self.group, "frozen")

    def _tile_sum(self, t) -> int:
        idx = self._matrix._group_index(self.group, t.device)[0]
        return int(t.index_select(0, idx).sum()) if idx.numel() else 0

    def num_trainable(self) -> int:
        """Trainable entries of this group's tiles (read from the tile mask: no dense block)."""
        eng = self._matrix
        if not eng.data.requires_grad:
            return 0
        if eng.tmask is None:
            return eng.groups[self.group].n_tiles * eng.tile * eng.tile
        return self._tile_sum(eng.tmask)

    def num_stored(self) -> int:
        """Entries that take part in the product: trainable ones and non-zero frozen values at
        non-trainable entries (an offset under a trainable entry is not counted twice)."""
        eng = self._matrix
        if eng.tmask is None:
            return eng.groups[self.group].n_tiles * eng.tile * eng.tile
        n = self._tile_sum(eng.tmask)
        if eng.frozen is not None:
            n += self._tile_sum((eng.frozen != 0) & ~eng.tmask)
        return n

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.effective_weight(), self.bias)

    def extra_repr(self) -> str:
        g = self._matrix.groups[self.group]
        return f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}, tiles={g.n_tiles}"
