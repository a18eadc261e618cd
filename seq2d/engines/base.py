"""The engine interface: how a Sequential2D's linear part is stored and multiplied.

An engine owns the parameters of every linear block of one model (the *store*) and knows
the model's flat state layout: slot ``i`` occupies ``[offsets[i], offsets[i] + sizes[i])``
of a ``(*batch, offsets[-1])`` buffer (the tiled engine pads every slot to whole tiles,
so its offsets step by multiples of the tile). A step asks the engine for the products of
some *boxes* (groups of output rows evaluated together: all rows for an iterated model,
one plan level for an acyclic one) and reads row ``i`` at ``row_source(i)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

__all__ = ["Engine", "contiguous_runs"]


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


class Engine(nn.Module):
    """Base of the parameter stores (``DenseStore``, ``TiledStore``).

    Subclasses set ``offsets`` (flat layout, length n + 1), ``rows`` (slots holding linear
    blocks), ``boxes`` and implement ``product``, ``row_source``, ``num_trainable``,
    ``dense_weight``."""

    kind = "base"

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

    def boxes_for(self, rows) -> list[int]:
        """The boxes holding any of ``rows``."""
        return sorted({self.box_of_row[i] for i in rows if i in self.box_of_row})

    def product(self, x: Tensor, boxes: Sequence[int], cache: dict | None = None) -> dict[int, Tensor]:
        raise NotImplementedError

    def row_source(self, i: int) -> tuple[int, int]:
        raise NotImplementedError

    def num_trainable(self) -> int:
        raise NotImplementedError
