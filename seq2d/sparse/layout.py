"""The block-sparse type: which T x T tiles of a matrix are stored, and where.

A ``BlockSparseLayout`` describes a matrix ``W`` of shape ``(Mt*T, Kt*T)`` (rows =
outputs, as everywhere in seq2d) of which only ``P`` tiles are stored. Position ``p``
is the tile at tile-row ``row[p]``, tile-column ``col[p]``; positions are sorted
row-major (by row, then column). The values live in a tensor ``wp`` of shape
``(P, T, T)`` that stores every tile **transposed**::

    wp[p, a, b] == W[row[p]*T + b, col[p]*T + a]      # (in, out) inside the tile

so that one tile-row of ``W`` is a single contiguous ``(nnz_r*T, T)`` panel and
``y[:, row r] = gather(x, cols of row r) @ panel_r`` is one GEMM without a copy of
the weights. Index metadata for the product and for its transpose (positions grouped
by tile-column) is computed once here, so no backward pass ever sorts.

Tied weights: several positions may use the same stored tile. ``data_index[p]`` names
the data tile of position ``p``; the per-position tensor ``wp`` is then
``data.index_select(0, data_index)`` (differentiable: gradients of tied positions add up).
"""

from __future__ import annotations

import itertools
import weakref

import torch
from torch import Tensor

from ..errors import InvalidType, InvalidValue
from ..memo import memo_dict

__all__ = ["TILE_SIZES", "BlockSparseLayout"]

TILE_SIZES = (16, 32, 64, 128)


class BlockSparseLayout:
    """Stored-tile positions of a block-sparse matrix and the derived index metadata.

    Args:
        tile: tile size T (16, 32, 64 or 128).
        shape_tiles: ``(Mt, Kt)``, the matrix size in tiles.
        row, col: tile coordinates of the P stored positions (any order; sorted here).
        data_index: data tile of each position (default: position p uses tile p).
        n_data: number of data tiles (default: ``max(data_index) + 1``).

    Attributes (all int64 tensors on one device):
        row, col, data_index: ``(P,)``, row-major order.
        order: the permutation that sorted the given positions (``row_sorted = row_in[order]``).
        row_ptr: ``(Mt + 1,)``, positions of tile-row r are ``row_ptr[r]:row_ptr[r+1]``.
        t_pos: ``(P,)`` positions grouped by tile-column (then row): the transpose.
        col_ptr: ``(Kt + 1,)``, ``t_pos[col_ptr[c]:col_ptr[c+1]]`` are the positions in column c.
    """

    def __init__(self, tile: int, shape_tiles: tuple[int, int], row, col, data_index=None, n_data: int | None = None):
        if tile not in TILE_SIZES:
            raise InvalidValue(f"tile must be one of {TILE_SIZES}, got {tile!r}")
        Mt, Kt = shape_tiles
        for name, v in (("Mt", Mt), ("Kt", Kt)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidValue(f"shape_tiles: {name} must be a positive int, got {v!r}")
        row = torch.as_tensor(row, dtype=torch.long)
        col = torch.as_tensor(col, dtype=torch.long, device=row.device)
        if row.dim() != 1 or col.shape != row.shape:
            raise InvalidValue(f"row and col must be 1-D of one length, got {tuple(row.shape)} and {tuple(col.shape)}")
        P = row.numel()
        identity = data_index is None  # position p (after sorting) uses data tile p
        if identity:
            data_index = torch.arange(P, device=row.device)
        data_index = torch.as_tensor(data_index, dtype=torch.long, device=row.device)
        if data_index.shape != row.shape:
            raise InvalidValue(f"data_index must have shape ({P},) like row, got {tuple(data_index.shape)}")
        if n_data is None:
            n_data = int(data_index.max()) + 1 if P else 0
        self.tile = tile
        self.Mt, self.Kt = Mt, Kt
        self.n_data = int(n_data)
        key = row * Kt + col
        order = torch.argsort(key, stable=True)
        self.order = order
        self.row, self.col = row[order].contiguous(), col[order].contiguous()
        self.data_index = data_index if identity else data_index[order].contiguous()
        self._validate()
        self.row_ptr = _ptr(self.row, Mt)
        self.t_pos = torch.argsort(self.col * Mt + self.row, stable=True)
        self.col_ptr = _ptr(self.col, Kt)
        self._host = None
        _register(self)

    # ---------------------------------------------------------------- checks
    def _validate(self) -> None:
        P = self.row.numel()
        if P == 0:
            return
        bad = []
        if int(self.row.min()) < 0 or int(self.row.max()) >= self.Mt:
            bad.append(f"row: tile rows must lie in [0, {self.Mt}), got [{int(self.row.min())}, {int(self.row.max())}]")
        if int(self.col.min()) < 0 or int(self.col.max()) >= self.Kt:
            bad.append(f"col: tile columns must lie in [0, {self.Kt}), got [{int(self.col.min())}, {int(self.col.max())}]")
        if int(self.data_index.min()) < 0 or int(self.data_index.max()) >= self.n_data:
            bad.append(f"data_index: must lie in [0, {self.n_data}), got [{int(self.data_index.min())}, {int(self.data_index.max())}]")
        key = self.row * self.Kt + self.col
        if P > 1 and bool((key[1:] == key[:-1]).any()):
            k = int(key[1:][key[1:] == key[:-1]][0])
            bad.append(f"row/col: tile ({k // self.Kt}, {k % self.Kt}) is stored twice")
        if bad:
            raise InvalidValue("invalid BlockSparseLayout: " + "; ".join(bad))

    # ---------------------------------------------------------------- facts
    @property
    def nnz(self) -> int:
        """Number of stored positions P."""
        return self.row.numel()

    @property
    def shape(self) -> tuple[int, int]:
        return (self.Mt * self.tile, self.Kt * self.tile)

    @property
    def density(self) -> float:
        return self.nnz / (self.Mt * self.Kt)

    @property
    def tied(self) -> bool:
        """True when some data tile is used at several positions."""
        return self.nnz > 0 and int(torch.unique(self.data_index).numel()) < self.nnz

    @property
    def device(self) -> torch.device:
        return self.row.device

    def host(self) -> dict[str, list[int]]:
        """Python-list copies of the pointers (cached), for CPU loops without device syncs."""
        if self._host is None:
            self._host = {"row_ptr": self.row_ptr.tolist(), "col_ptr": self.col_ptr.tolist()}
        return self._host

    _TENSORS = ("order", "row", "col", "data_index", "row_ptr", "t_pos", "col_ptr")

    def to(self, device) -> BlockSparseLayout:
        """This layout on ``device`` (memoised: one copy per device, caches not carried over)."""
        device = torch.device(device)
        if device == self.device:
            return self
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        memo = memo_dict(self, "_on_device")
        if device not in memo:
            new = object.__new__(BlockSparseLayout)
            new.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_")})
            new._host = self._host
            for k in self._TENSORS:
                setattr(new, k, getattr(self, k).to(device))
            _register(new)
            memo[device] = new
        return memo[device]

    def tile_mask(self) -> Tensor:
        """``(Mt, Kt)`` bool: which tiles are stored."""
        m = torch.zeros(self.Mt, self.Kt, dtype=torch.bool, device=self.device)
        m[self.row, self.col] = True
        return m

    @property
    def handle(self) -> str:
        """This layout's name for the ``seq2d::`` custom ops (:mod:`seq2d.sparse.autograd`), which
        take plain values, not Python objects: :func:`layout_of` gives the layout back. A string,
        not an int: ``torch.compile`` may turn an int argument that changes between calls into a
        symbol. Assigned when the layout is built (and again when it is copied or unpickled),
        never in a forward."""
        return self._handle

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_handle", "_on_device")}

    def __setstate__(self, state: dict) -> None:  # a copy or an unpickled layout gets its own handle
        self.__dict__.update(state)
        _register(self)

    def __repr__(self) -> str:
        return (f"BlockSparseLayout(tile={self.tile}, shape={self.shape}, nnz={self.nnz}, "
                f"density={self.density:.4f}{', tied' if self.tied else ''})")

    # ---------------------------------------------------------------- dense conversions (tests, reference)
    def to_dense(self, wp: Tensor) -> Tensor:
        """The dense ``(Mt*T, Kt*T)`` matrix of per-position tiles ``wp`` (P, T, T) (differentiable)."""
        T = self.tile
        dense = wp.new_zeros(self.Mt, self.Kt, T, T)
        dense = dense.index_put((self.row, self.col), wp.transpose(1, 2))
        return dense.permute(0, 2, 1, 3).reshape(self.Mt * T, self.Kt * T)

    def from_dense(self, W: Tensor) -> Tensor:
        """Per-position tiles (P, T, T), transposed storage, sampled from a dense matrix."""
        T = self.tile
        tiles = W.reshape(self.Mt, T, self.Kt, T).permute(0, 2, 1, 3)  # (Mt, Kt, T_out, T_in)
        return tiles[self.row, self.col].transpose(1, 2).contiguous()


# handle -> layout, for the custom ops; weak: a layout lives as long as its owner (a matrix, a
# store's sub-layout cache, a test) keeps it, and a compiled graph guards on that owner
_LAYOUTS: "weakref.WeakValueDictionary[str, BlockSparseLayout]" = weakref.WeakValueDictionary()
_NEXT = itertools.count()


def _register(layout: BlockSparseLayout) -> None:
    layout._handle = f"layout{next(_NEXT)}"
    _LAYOUTS[layout._handle] = layout


def layout_of(handle: str) -> BlockSparseLayout:
    """The layout of :attr:`BlockSparseLayout.handle` ``handle`` (for the custom ops)."""
    try:
        return _LAYOUTS[handle]
    except KeyError:
        raise InvalidValue(f"no block-sparse layout has handle {handle!r}: it was freed (a compiled graph "
                           "outlived the model it was compiled for?)") from None


def _ptr(idx: Tensor, n: int) -> Tensor:
    counts = torch.bincount(idx, minlength=n) if idx.numel() else torch.zeros(n, dtype=torch.long, device=idx.device)
    ptr = torch.zeros(n + 1, dtype=torch.long, device=idx.device)
    ptr[1:] = counts.cumsum(0)
    return ptr


def layout_from_tile_mask(tile: int, tile_mask: Tensor) -> BlockSparseLayout:
    """A layout storing exactly the True tiles of a ``(Mt, Kt)`` bool mask."""
    if tile_mask.dtype != torch.bool or tile_mask.dim() != 2:
        raise InvalidType(f"tile_mask must be a 2-D bool tensor, got {tile_mask.dtype} of shape {tuple(tile_mask.shape)}")
    r, c = tile_mask.nonzero(as_tuple=True)
    return BlockSparseLayout(tile, tuple(tile_mask.shape), r, c)

