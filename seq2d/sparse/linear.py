"""``BlockSparseLinear``: every linear block of a Sequential2D as one block-sparse matrix.

The matrix stores the fused linear part of ``F`` over the **tile-padded** concatenated
state: slot ``i`` occupies ``ceil(s_i / T)`` whole tiles starting at tile ``toff[i]``
(padding, not splitting: a block then always starts on a tile boundary, so a tied block
uses the same tiles at every position). Padding entries are zero, never trainable, and
never read back.

Storage (all proportional to the stored tiles, never N x N):

- ``data``   Parameter ``(n_data, T, T)``: the stored tiles, transposed (in, out);
- ``tmask``  bool buffer ``(n_data, T, T)`` or None: trainable entries (element masks
  and padding); None when every stored entry is trainable;
- ``frozen`` buffer ``(n_data, T, T)`` or None: fixed values at non-trainable entries;
- layout index buffers (positions, data index), see :mod:`seq2d.sparse.layout`.

A *group* is one weight object (a LinearBlock before conversion): its tile pattern and
data tiles are shared by all grid positions it sits at (weight tying). The grid of the
Sequential2D holds ``seq2d.stores.TiledBlock`` views, one per position, that read their
dense weight from here on demand (for inspection and the reference loop only). How a
Sequential2D step uses the matrix (flat padded state, plan levels) is
:mod:`seq2d.stores.tiled`: this package knows nothing of slots or steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..errors import InvalidValue, renamed_keyword
from .layout import TILE_SIZES, BlockSparseLayout
from ..memo import memo_dict

__all__ = ["BlockSparseLinear", "Group"]


class Group:
    """One weight object: shape, tile pattern (rt x ct bool) and its first data tile."""

    def __init__(self, shape: tuple[int, int], pattern: Tensor):
        self.shape = shape
        self.pattern = pattern.cpu()
        self.tiles = pattern.nonzero().tolist()  # (a, b) tile coordinates, row-major
        self.data_start = 0

    @property
    def n_tiles(self) -> int:
        return len(self.tiles)


class BlockSparseLinear(nn.Module):
    """The fused linear operator of a Sequential2D as one block-sparse matrix.

    Args:
        sizes: slot sizes of the model.
        tile: tile size T (16, 32, 64, 128).
        groups: the weight objects (shape and tile pattern each).
        placements: ``(i, j, group_index)`` for every grid position holding a linear block.
        kernel: kernel name or ``"auto"`` (see :func:`seq2d.sparse.ops.resolve_kernel`).
    """

    @renamed_keyword("backend", "kernel", "kernel choice")
    def __init__(self, sizes: Sequence[int], tile: int, groups: Sequence[Group],
                 placements: Sequence[tuple[int, int, int]], *, kernel: str = "auto", device=None, dtype=None):
        super().__init__()
        if tile not in TILE_SIZES:
            raise InvalidValue(f"tile must be one of {TILE_SIZES}, got {tile!r}")
        self.sizes = tuple(sizes)
        self.tile = tile
        self.kernel = kernel
        T = tile
        ntiles = [math.ceil(s / T) for s in self.sizes]
        toff = [0]
        for k in ntiles:
            toff.append(toff[-1] + k)
        self.toff = tuple(toff)
        self.groups = list(groups)
        self.placements = [tuple(p) for p in placements]
        for i, j, g in self.placements:
            shape = (self.sizes[i], self.sizes[j])
            if self.groups[g].shape != shape:
                raise InvalidValue(f"group {g} has shape {self.groups[g].shape} but sits at F[{i}][{j}] of shape {shape}")
        # data tiles: in row-major position order when nothing is tied, so wp == data
        rows, cols, gidx, tidx = [], [], [], []
        for i, j, g in self.placements:
            for t, (a, b) in enumerate(self.groups[g].tiles):
                rows.append(toff[i] + a)
                cols.append(toff[j] + b)
                gidx.append(g)
                tidx.append(t)
        n_uses = [0] * len(self.groups)
        for _, _, g in self.placements:
            n_uses[g] += 1
        order = sorted(range(len(rows)), key=lambda p: (rows[p], cols[p]))
        data_index = [0] * len(rows)
        nxt = 0
        first: dict[tuple[int, int], int] = {}
        for p in order:
            key = (gidx[p], tidx[p])
            if key not in first:
                first[key] = nxt
                nxt += 1
            data_index[p] = first[key]
        for g, grp in enumerate(self.groups):
            grp.data_index = [first.get((g, t)) for t in range(grp.n_tiles)]
        n_data = nxt
        layout = BlockSparseLayout(T, (toff[-1], toff[-1]), rows, cols, data_index, n_data)
        self._set_layout(layout, device)
        self.data = nn.Parameter(torch.zeros(n_data, T, T, device=device, dtype=dtype))
        self.register_buffer("tmask", None)
        self.register_buffer("frozen", None)
        self._padding_mask(device)

    # ------------------------------------------------------------------ layout buffers
    def _set_layout(self, layout: BlockSparseLayout, device=None) -> None:
        """Install ``layout`` (kept on the CPU as built, copied per device on demand by
        :attr:`layout`) and its index buffers on ``device`` (the parameters' device: a CUDA
        matrix indexes its tiles with CUDA indices)."""
        self._layout = layout
        on = layout.to(device) if device is not None else layout
        self.register_buffer("pos_row", on.row, persistent=True)
        self.register_buffer("pos_col", on.col, persistent=True)
        self.register_buffer("pos_data", on.data_index, persistent=True)
        # position p uses data tile p (nothing tied): position_tiles is then the data itself.
        # A Python bool computed once here, so a forward never compares tensors (a host sync on CUDA).
        P = layout.nnz
        self._identity = layout.n_data == P and bool(torch.equal(layout.data_index, torch.arange(P)))

    @property
    def layout(self) -> BlockSparseLayout:
        return self._layout.to(self.data.device)

    def _padding_mask(self, device) -> None:
        """Mark padding entries of edge tiles as not trainable (tmask), if any."""
        T = self.tile
        need = False
        m = torch.ones(self._layout.n_data, T, T, dtype=torch.bool)
        for grp in self.groups:
            so, si = grp.shape
            for (a, b), d in zip(grp.tiles, grp.data_index):
                if d is None:
                    continue
                rows_valid = min(T, so - a * T)
                cols_valid = min(T, si - b * T)
                if rows_valid < T or cols_valid < T:
                    need = True
                    m[d, cols_valid:, :] = False  # transposed storage: [in, out]
                    m[d, :, rows_valid:] = False
        if need:
            self.tmask = m.to(device)

    # ------------------------------------------------------------------ facts
    @property
    def nnz_tiles(self) -> int:
        return self._layout.nnz

    @property
    def density(self) -> float:
        return self._layout.density

    def num_trainable(self) -> int:
        if not self.data.requires_grad:
            return 0
        return int(self.tmask.sum()) if self.tmask is not None else self.data.numel()

    def extra_repr(self) -> str:
        L = self._layout
        return (f"tile={self.tile}, padded={L.Mt * self.tile}, stored_tiles={L.nnz}, data_tiles={L.n_data}, "
                f"density={L.density:.4f}, kernel={self.kernel!r}")

    # ------------------------------------------------------------------ values
    def effective_data(self) -> Tensor:
        """``frozen + data * tmask`` (n_data, T, T), differentiable in ``data``."""
        d = self.data
        if self.tmask is not None:
            d = d * self._float_tmask(d)
        if self.frozen is not None:
            d = d + self.frozen
        return d

    def _float_tmask(self, d: Tensor) -> Tensor:
        """The bool tile mask in ``d``'s dtype, cached and rebuilt when the mask changes (its
        version counter moves on in-place edits; assignment replaces the tensor): a bool mask
        would be converted in the forward and again in the backward of every call."""
        m = self.tmask
        if torch.compiler.is_compiling():
            return m.to(d.dtype)
        key = (id(m), m._version, d.dtype, d.device)
        hit = self.__dict__.get("_tmask_f")
        if hit is None or hit[0] != key:
            hit = self.__dict__["_tmask_f"] = (key, m.to(d.dtype))
        return hit[1]

    @property
    def position_is_data(self) -> bool:
        """Whether position p uses data tile p (nothing tied): the per-position tiles are then
        the data itself."""
        ident = self.__dict__.get("_identity")
        if ident is None:  # a matrix pickled before the flag existed: compute it once
            L = self._layout
            ident = self._identity = L.n_data == L.nnz and bool(torch.equal(L.data_index, torch.arange(L.nnz)))
        return ident

    def position_tiles(self) -> Tensor:
        """Per-position tiles ``wp`` (P, T, T); a copy only when weights are tied."""
        d = self.effective_data()
        if self.position_is_data:
            return d
        return d.index_select(0, self.pos_data)

    def group_dense(self, g: int, which: str | Tensor = "weight") -> Tensor:
        """Dense (out, in) matrix of group ``g``: 'weight' (effective), 'mask' or 'frozen', or the
        entries of a tensor shaped like ``data`` (its gradient, say) at the group's places."""
        grp = self.groups[g]
        T = self.tile
        so, si = grp.shape
        rt, ct = grp.pattern.shape
        if isinstance(which, Tensor):
            src = which
        elif which == "weight":
            src = self.effective_data()
        elif which == "mask":
            src = self.tmask if self.tmask is not None else torch.ones_like(self.data, dtype=torch.bool)
        else:
            src = self.frozen if self.frozen is not None else torch.zeros_like(self.data)
        out = src.new_zeros(rt * T, ct * T)
        if grp.tiles:
            idx, a, b = self._group_index(g, src.device)
            tiles = src.index_select(0, idx).transpose(1, 2)  # (k, out, in)
            full = src.new_zeros(rt, ct, T, T).index_put((a, b), tiles)
            out = full.permute(0, 2, 1, 3).reshape(rt * T, ct * T)
        return out[:so, :si]

    def _group_index(self, g: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Group ``g``'s data tiles and their tile coordinates (a, b) as index tensors on
        ``device``, built once per device (not copied to the GPU at every call)."""
        memo = memo_dict(self, "_group_idx")
        key = (g, torch.device(device))
        hit = memo.get(key)
        if hit is None:
            grp = self.groups[g]
            hit = memo[key] = (torch.tensor(grp.data_index, dtype=torch.long, device=device),
                               torch.tensor([t[0] for t in grp.tiles], dtype=torch.long, device=device),
                               torch.tensor([t[1] for t in grp.tiles], dtype=torch.long, device=device))
        return hit

    # ------------------------------------------------------------------ builders
    @classmethod
    @renamed_keyword("backend", "kernel", "kernel choice")
    def from_blocks(cls, sizes: Sequence[int], entries: Sequence[tuple[int, int, nn.Module]], tile: int, *,
                    kernel: str = "auto") -> tuple[BlockSparseLinear, list[int]]:
        """Pack LinearBlocks (tied by object identity) into a matrix. Returns the matrix and
        the group index of every entry. Tiles with no trainable and no frozen entry are not stored."""
        T = tile
        gid: dict[int, int] = {}
        groups: list[Group] = []
        blocks: list[nn.Module] = []
        placements = []
        for i, j, blk in entries:
            if id(blk) not in gid:
                so, si = blk.out_features, blk.in_features
                rt, ct = math.ceil(so / T), math.ceil(si / T)
                struct = blk.trainable_mask().clone()
                if blk.frozen is not None:
                    struct |= blk.frozen != 0
                padded = torch.zeros(rt * T, ct * T, dtype=torch.bool, device=struct.device)
                padded[:so, :si] = struct
                pattern = padded.view(rt, T, ct, T).any(dim=3).any(dim=1)
                gid[id(blk)] = len(groups)
                groups.append(Group((so, si), pattern))
                blocks.append(blk)
            placements.append((i, j, gid[id(blk)]))
        ref = blocks[0].weight
        eng = cls(sizes, tile, groups, placements, kernel=kernel, device=ref.device, dtype=ref.dtype)
        eng.load_blocks(blocks)
        return eng, [p[2] for p in placements]

    @torch.no_grad()
    def load_blocks(self, blocks: Sequence[nn.Module]) -> None:
        """Copy the weights, masks and frozen values of one LinearBlock per group into the tiles
        (duck-typed: ``weight``, ``trainable_mask()``, ``frozen``; this package does not import seq2d's blocks)."""
        T = self.tile
        n_data = self._layout.n_data
        tmask = torch.ones(n_data, T, T, dtype=torch.bool, device=self.data.device)
        frozen = torch.zeros(n_data, T, T, dtype=self.data.dtype, device=self.data.device)
        any_frozen = False
        for grp, blk in zip(self.groups, blocks):
            so, si = grp.shape
            rt, ct = grp.pattern.shape

            def tiles_of(m: Tensor, fill=0):
                p = m.new_full((rt * T, ct * T), fill)
                p[:so, :si] = m
                return p.view(rt, T, ct, T).permute(0, 2, 3, 1)  # (rt, ct, in, out)

            w = tiles_of(blk.weight.detach())
            msk = tiles_of(blk.trainable_mask(), False)
            fr = tiles_of(blk.frozen) if blk.frozen is not None else None
            any_frozen |= fr is not None
            for (a, b), d in zip(grp.tiles, grp.data_index):
                if d is None:
                    continue
                self.data[d] = w[a, b] * msk[a, b]
                tmask[d] = msk[a, b]
                if fr is not None:
                    frozen[d] = fr[a, b]
        self.tmask = None if bool(tmask.all()) else tmask
        self.frozen = frozen if any_frozen else None

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """U(-1/sqrt(f), 1/sqrt(f)) per output unit, f = its stored trainable fan-in."""
        L = self._layout
        T = self.tile
        m = self.tmask if self.tmask is not None else None
        per_pos = (m.sum(dim=1) if m is not None else torch.full((L.n_data, T), T, device=self.data.device))
        fan = torch.zeros(L.Mt, T, device=self.data.device)
        fan.index_add_(0, self.pos_row, per_pos.index_select(0, self.pos_data).to(fan.dtype))
        bound = fan.clamp(min=1).rsqrt()  # (Mt, T): per output unit
        # drawn where the generator lives (the CPU for None or a CPU generator), then copied: a
        # CUDA matrix gets exactly the values a CPU matrix gets from the same generator
        draw_on = generator.device if generator is not None else "cpu"
        u = torch.rand(self.data.shape, generator=generator, dtype=torch.float64, device=draw_on)
        u = u.to(self.data.device) * 2 - 1
        # data tile d's output units: take the row of (one of) its positions
        row_of = torch.empty(L.n_data, dtype=torch.long, device=self.data.device)
        row_of[self.pos_data] = self.pos_row
        self.data.copy_(u.to(self.data.dtype) * bound[row_of][:, None, :])
        if m is not None:
            self.data.mul_(m)
