"""The store interface: how a Sequential2D's linear part is stored and multiplied.

A store owns the parameters of every linear block of one model and knows
the model's flat state layout: slot ``i`` occupies ``[offsets[i], offsets[i] + sizes[i])``
of a ``(*batch, offsets[-1])`` buffer (the tiled store pads every slot to whole tiles,
so its offsets step by multiples of the tile). A step asks the store for the products of
some *boxes* (groups of output rows evaluated together: all rows for an iterated model,
one plan level for an acyclic one) and reads row ``i`` at ``row_source(i)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

__all__ = ["Store", "contiguous_runs"]


def contiguous_runs(slots: Sequence[int], offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal ``[start, end)`` flat ranges covered by ``slots`` (sorted), merging neighbours."""
    runs: list[list[int]] = []
    for s in sorted(slots):
        a, b = offsets[s], offsets[s + 1]
        if runs and runs[-1][1] == a:
            runs[-1][1] = b
        else:
            runs.append([a, b])
    return [(a, b) for a, b in runs]


class Store(nn.Module):
    """Base of the parameter stores (``DenseStore``, ``TiledStore``): what a step may ask of one.

    Callers (the step plan in :mod:`seq2d.core.step`, sequence mode, ``Sequential2D``) use only what
    is declared here and ask for capabilities through the attributes below, never a store's
    class or ``kind``; a new store is added in ``seq2d/stores`` alone (docs/concepts.md, "Where
    things live", lists what it must implement; tests/test_store_seam.py builds a tiny one).

    Subclasses set ``offsets`` (flat layout, length n + 1), ``rows`` (slots holding linear
    blocks), ``boxes`` and ``box_of_row``, and implement :meth:`product`, :meth:`row_source`,
    :meth:`num_trainable` and :meth:`dense_weight`."""

    #: the store's name ('dense', 'tiled'), its one identity: the registry's key
    #: (:mod:`.registry`), shown to a reader as ``model.store.kind`` ("the tiled store"), never
    #: branched on outside this package (ask for a capability below instead)
    kind = "base"
    #: evaluating one ``F.linear`` per block position (the docstring loop, the reference) instead
    #: of the store's fast products: ``Sequential2D(..., loop=True)``, :meth:`set_loop`
    loop = False
    #: ``product(..., bias=b)`` adds ``b`` inside its GEMM (one box only)
    fuses_bias = False
    #: ``product``'s outputs are fresh tensors that no autograd node saved: a caller may add to
    #: them in place (no second buffer)
    output_writable = False
    #: per-block weights for sequence mode's component-by-component evaluation
    #: (:func:`seq2d.core.sequence.sequence_by_components` needs ``position_weight``)
    component_products = False
    #: the weights are the tiles of a ``seq2d.sparse.BlockSparseLinear``, held as the
    #: submodule ``matrix`` (declared by such stores only: a class attribute would hide it)
    block_sparse = False
    #: a product over some of a box's rows costs only those rows (``boxes_for`` gives exactly
    #: them), so a step that needs fewer rows is cheaper (``Sequential2D``'s tensor call then
    #: leaves out, in its last steps, the rows its outputs do not depend on)
    partial_rows = False

    def __init__(self, sizes: Sequence[int]):
        super().__init__()
        self.sizes = tuple(int(s) for s in sizes)
        off = [0]
        for s in self.sizes:
            off.append(off[-1] + s)
        self.offsets = tuple(off)

    @property
    def flat_size(self) -> int:
        return self.offsets[-1]

    def boxes_for(self, rows) -> list:
        """The boxes holding any of ``rows``."""
        return sorted({self.box_of_row[i] for i in rows if i in self.box_of_row})

    def product(self, x, boxes: Sequence, cache: dict | None = None, bias: Tensor | None = None,
                present: frozenset | None = None) -> dict:
        """``{box: x_cols @ W_box.T}`` for the given boxes (``x``: a :class:`seq2d.core.state.Segments`).
        ``cache``: one dict per forward call (weights formed once; ``cache["const"]`` names the
        slots no step of the call writes); ``bias``: only when :attr:`fuses_bias`; ``present``:
        the slots holding a value (the others are zero)."""
        raise NotImplementedError

    def prepare(self, boxes: Sequence, const: frozenset | None = None) -> None:
        """Build now the host-side index plans that :meth:`product` needs for ``boxes`` (with the
        held slots ``const``), so that a compiled forward finds them built instead of computing
        them while it is traced (a graph break); the default has none."""

    def row_source(self, i: int, box=None) -> tuple:
        """(box, offset of slot ``i``'s rows in that box's product); ``box``: the box the step
        asked for (the tiled store's products depend on it)."""
        raise NotImplementedError

    def num_trainable(self) -> int:
        raise NotImplementedError

    def dense_weight(self) -> Tensor:
        """The N x N effective weight over the unpadded state (inspection and tests)."""
        raise NotImplementedError

    def hoist_inputs(self, xs: Tensor, inputs: Sequence[int], cache: dict) -> bool:
        """Sequence mode: precompute the products with the input slots for all time steps, if
        this store can (then ``True``, and ``cache`` holds them); the default cannot."""
        return False

    def set_loop(self, on: bool) -> None:
        """Switch to the per-block loop (:attr:`loop`) where the store has one (the dense store);
        the default has none and ignores it."""
