"""The store names a model accepts, and ``store="auto"``: which store a model gets, from measured crossovers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import InvalidType, InvalidValue


__all__ = ["STORES", "choose_store", "check_store", "TILED_CROSSOVER"]

# Store names a Sequential2D accepts as ``store``: the stores ("dense", "tiled") and "auto" (one
# of them, chosen by choose_store). The dense store's per-block loop is a mode, ``loop=True``.
STORES = ("auto", "dense", "tiled")

# Stored-tile density (stored tiles / all tiles of the padded matrix) below which the tiled
# store is picked, per device and tile size. Measured: `python benchmarks/model_step.py
# --threads 1 2 --densities 0.1 0.25 0.5 --repeats 5 --sections grid` (CPU, float32, batch 256,
# N = 4096, fwd+bwd through the list API; benchmarks/results/model_step-grid-cpu-2026-11-23.json,
# docs/performance.md "Model step"): with tile 64 the tiled store beat the dense store at every
# density measured (0.1, 0.25, 0.5; 0.55x-0.98x its time quiet), so the crossover is at least
# 0.5 and 0.5 is used. Tile 16, since the cpu kernel's feature-major paths (issue 35): `python
# benchmarks/model_step.py --threads 1 --slots 256 64 --densities 0.1 0.25 0.5 --repeats 7
# --sections grid` (2026-11-28, Intel Xeon AVX512, 1 thread, training runs paused; benchmarks/
# results/model_step-smalltile-cpu-2026-11-28.json): 256 slots of 16, tiled / dense store 0.27,
# 0.48, 1.20 at density 0.1, 0.25, 0.5 (tiled time about linear in density: even near 0.43),
# so 0.4; benchmarks/store_auto.py checks it on irregular slots of 16-64. Two threads at tile 16
# are not re-measured. Tiles 32 and 128 and the GPU are not measured: never picked.
TILED_CROSSOVER = {"cpu": {64: 0.5, 16: 0.4}}


def choose_store(sizes: Sequence[int], block_mask, device_type: str = "cpu",
                 boxes: Sequence[tuple[Sequence[int], Sequence[int]]] | None = None, *,
                 tiled: bool = False) -> tuple[str, int | None]:
    """``("tiled", T)`` or ``("dense", None)`` for a model with slot ``sizes`` and a bool
    ``block_mask[i][j]`` of linear positions (rows = outputs).

    ``tiled=True`` (``store="tiled"``): the tile by the same rule whatever the density, among the
    measured tiles of the device or, where none is measured, every tile size (InvalidValue when
    none fits).

    The tile is the largest measured one (``TILED_CROSSOVER``) not larger than the smallest
    slot holding a linear block and wasting at most 1/8 of the flat state on padding; the
    model goes tiled when its stored-tile density is below the crossover for that tile. The
    density is measured against what the dense store would multiply instead: its ``boxes``
    (``(rows, cols)`` slot lists; default one box, every row holding a linear block x every
    column one reads), not the whole N x N matrix (held rows, unread columns and, for an
    acyclic model, the other levels' blocks cost the dense store nothing either)."""
    sizes = [int(s) for s in sizes]
    n = len(sizes)
    used = [i for i in range(n) if any(block_mask[i][j] or block_mask[j][i] for j in range(n))]
    if not used:
        return "dense", None
    smallest = min(sizes[i] for i in used)
    table = TILED_CROSSOVER.get(device_type, {})
    if tiled and not table:
        from ..sparse import TILE_SIZES

        table = dict.fromkeys(TILE_SIZES, 1.0)
    for T in sorted(table, reverse=True):
        if T > smallest:
            continue
        padded = sum(math.ceil(s / T) * T for s in sizes)
        if padded > sum(sizes) * 9 / 8:
            continue
        nt = [math.ceil(s / T) for s in sizes]
        stored = sum(nt[i] * nt[j] for i in range(n) for j in range(n) if block_mask[i][j])
        if boxes is None:
            rows = [i for i in range(n) if any(block_mask[i][j] for j in range(n))]
            cols = [j for j in range(n) if any(block_mask[i][j] for i in range(n))]
            boxes = [(rows, cols)]
        area = sum(sum(nt[i] for i in r) * sum(nt[j] for j in c) for r, c in boxes)
        density = stored / area
        return ("tiled", T) if tiled or density < table.get(T, 0.0) else ("dense", None)
    if tiled:
        raise InvalidValue(f"store='tiled', but no tile size fits slots {sizes} (a tile at most the smallest slot "
                           "holding a linear block, padding at most 1/8 of the state); give store='dense' and call "
                           "to_blocksparse(tile) with the tile you want")
    return "dense", None


def check_store(owner: str, store, loop) -> None:
    """``store`` / ``loop`` as ``owner`` got them: a name of :data:`STORES` (an old spelling raises
    the "now called" error, :func:`seq2d.renames.check_store_value`) and a bool, the loop
    being the dense store's mode."""
    from ..renames import check_store_value

    check_store_value(owner, store)
    if not isinstance(store, str) or store not in STORES:
        raise InvalidValue(f"Unknown store {store!r}. Select from " + ", ".join(repr(k) for k in STORES))
    if not isinstance(loop, bool):
        raise InvalidType(f"{owner}: loop must be a bool, got {type(loop).__name__} {loop!r}")
    if loop and store == "tiled":
        raise InvalidValue(f"{owner} got store='tiled' and loop=True; the per-block loop is a mode of the dense "
                           "store: give store='dense' (or leave loop off)")
