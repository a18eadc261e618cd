"""The block grid of a Sequential2D as text (``Sequential2D.grid()``, ``summary()``)."""

from __future__ import annotations

from .activations import activation_name
from .blocks import LinearBlock

__all__ = ["grid_text", "LEGEND"]

# the footer of Sequential2D.summary(): what the grid's letters mean (docs/concepts.md, "Reading summary()")
LEGEND = ("cells: . absent, I identity, W dense linear, w masked linear, F linear with frozen values, "
          "T tiled (block-sparse), M module; a digit after a letter: tied-weight group; +b: the slot has a bias")


def grid_text(model) -> str:
    """The block grid as text. Legend: ``.`` absent, ``I`` identity, ``W`` dense linear,
    ``w`` masked linear, ``F`` linear with frozen values, ``T`` a tiled block of the
    block-sparse matrix, ``M`` module; a digit after the
    letter names the tied-weight group when one LinearBlock sits at several positions."""
    n = model.n
    groups: dict[int, int] = {}
    counts: dict[int, int] = {}
    for _, _, kind, blk in model.positions():
        if kind == "linear":
            counts[id(blk)] = counts.get(id(blk), 0) + 1
    for _, _, kind, blk in model.positions():
        if kind == "linear" and counts[id(blk)] > 1 and id(blk) not in groups:
            groups[id(blk)] = len(groups)
    cells = [["." for _ in range(n)] for _ in range(n)]
    for i, j, kind, blk in model.positions():
        if kind == "identity":
            c = "I"
        elif kind == "module":
            c = "M"
        else:
            c = "F" if blk.frozen is not None else ("w" if blk.mask is not None else "W")
            if not isinstance(blk, LinearBlock):
                c = "T" + c[1:]  # tiled (block-sparse matrix)
            if id(blk) in groups:
                c += str(groups[id(blk)])
        cells[i][j] = c
    w = max(3, max(len(c) for row in cells for c in row) + 1, len(str(n - 1)) + 1)
    head = " " * 12 + "".join(f"{j:>{w}}" for j in range(n))
    lines = [head]
    for i in range(n):
        role = "in" if i in model.inputs else ("out" if i in model.outputs else "")
        name = activation_name(model.acts[i]) or type(model.acts[i]).__name__
        label = f"{i:>2} {model.sizes[i]:>5} {role:>3}"
        lines.append(f"{label:<12}" + "".join(f"{c:>{w}}" for c in cells[i]) + f"   {name}" + (" +b" if model.bias(i) is not None else ""))
    return "\n".join(lines)
