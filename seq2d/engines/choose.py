"""``backend="auto"``: which store a model gets, from measured crossovers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..sparse.layout import TILE_SIZES

__all__ = ["STORES", "choose_store", "TILED_CROSSOVER"]

# Store names a Sequential2D accepts as ``backend``.
STORES = ("auto", "dense", "loop")

# Largest stored-tile density (stored tiles / all tiles of the padded matrix) at which the
# tiled store beat the dense store, fwd+bwd of one step through the list API, per tile size.
# CPU, float32, batch 256, N = 4096: `python benchmarks/model_step.py` (docs/performance.md,
# "Model step"). Tile 16 lost to the dense store at every density measured: never picked.
TILED_CROSSOVER = {"cpu": {128: 0.35, 64: 0.35, 32: 0.2, 16: 0.0}, "cuda": {128: 0.5, 64: 0.5, 32: 0.3, 16: 0.1}}


def choose_store(sizes: Sequence[int], block_mask, device_type: str = "cpu") -> tuple[str, int | None]:
    """``("tiled", T)`` or ``("dense", None)`` for a model with slot ``sizes`` and a bool
    ``block_mask[i][j]`` of linear positions (rows = outputs).

    The tile is the largest of 128/64/32/16 not larger than the smallest slot holding a
    linear block and wasting at most 1/8 of the flat state on padding; the model goes
    tiled when its stored-tile density is below ``TILED_CROSSOVER`` for that tile."""
    sizes = [int(s) for s in sizes]
    n = len(sizes)
    used = [i for i in range(n) if any(block_mask[i][j] or block_mask[j][i] for j in range(n))]
    if not used:
        return "dense", None
    smallest = min(sizes[i] for i in used)
    table = TILED_CROSSOVER.get(device_type, TILED_CROSSOVER["cpu"])
    for T in sorted(TILE_SIZES, reverse=True):
        if T > smallest:
            continue
        padded = sum(math.ceil(s / T) * T for s in sizes)
        if padded > sum(sizes) * 9 / 8:
            continue
        nt = [math.ceil(s / T) for s in sizes]
        stored = sum(nt[i] * nt[j] for i in range(n) for j in range(n) if block_mask[i][j])
        density = stored / (sum(nt) ** 2)
        return ("tiled", T) if density < table.get(T, 0.0) else ("dense", None)
    return "dense", None
