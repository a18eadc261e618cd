"""Checks of :class:`seq2d.Sequential2D`'s constructor arguments (sizes, the block grid, slot
lists, step counts, activations, biases) and the graph facts computed from them (depth and
levels). Each check raises a typed error that says what was expected and what arrived."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from .errors import InvalidIndex, InvalidType, InvalidValue
from .activations import is_identity, make_activation
from .blocks import Identity, block_kind

__all__ = ["is_pos_int", "module_features", "check_sizes", "normalize_grid", "check_block_fits",
           "check_slot_list", "check_steps", "build_activations", "slot_biases", "depth_and_levels"]


def is_pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def module_features(block: nn.Module) -> tuple[int | None, int | None]:
    """(in_features, out_features) when a module declares them (a nested Sequential2D does), else None."""
    fin = getattr(block, "in_features", None)
    fout = getattr(block, "out_features", None)
    return (fin if is_pos_int(fin) else None, fout if is_pos_int(fout) else None)


def check_sizes(sizes) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise InvalidType(f"sizes must be a sequence of positive ints, got {type(sizes).__name__}")
    if len(sizes) == 0:
        raise InvalidValue("sizes must name at least one slot, got an empty sequence")
    for k, s in enumerate(sizes):
        if not is_pos_int(s):
            raise InvalidValue(f"sizes[{k}] must be a positive int, got {s!r}")
    return tuple(int(s) for s in sizes)


def normalize_grid(blocks, n: int) -> dict[tuple[int, int], nn.Module]:
    items: list[tuple[tuple[int, int], object]] = []
    if isinstance(blocks, Mapping):
        for key, blk in blocks.items():
            if not (isinstance(key, tuple) and len(key) == 2
                    and all(isinstance(k, int) and not isinstance(k, bool) for k in key)):
                raise InvalidType(f"block keys must be (row, col) int pairs, got {key!r}")
            i, j = key
            if not (-n <= i < n and -n <= j < n):
                raise InvalidIndex(f"block position {key} is outside the {n} x {n} grid")
            items.append(((i % n, j % n), blk))
    elif isinstance(blocks, Sequence) and not isinstance(blocks, (str, bytes)):
        if len(blocks) != n:
            raise InvalidValue(f"blocks must be an {n} x {n} grid (one row per slot), got {len(blocks)} rows")
        for i, row in enumerate(blocks):
            if not isinstance(row, Sequence) or isinstance(row, (str, bytes)) or len(row) != n:
                got = len(row) if isinstance(row, Sequence) else type(row).__name__
                raise InvalidValue(f"blocks row {i} must hold {n} entries (one per slot), got {got}")
            for j, blk in enumerate(row):
                items.append(((i, j), blk))
    else:
        raise InvalidType(f"blocks must be an n x n nested list or a dict {{(i, j): block}}, got {type(blocks).__name__}")
    grid: dict[tuple[int, int], nn.Module] = {}
    shared_identity = None
    for (i, j), blk in items:
        if blk is None:
            continue
        if isinstance(blk, str):
            if blk.lower() != "identity":
                raise InvalidValue(f"block F[{i}][{j}]: unknown block name {blk!r}. Select from 'identity', or pass a module")
            shared_identity = shared_identity or Identity()
            blk = shared_identity
        if not isinstance(blk, nn.Module):
            raise InvalidType(f"block F[{i}][{j}] must be None, 'identity' or an nn.Module, got {type(blk).__name__}")
        if (i, j) in grid:
            raise InvalidValue(f"block F[{i}][{j}] is given twice")
        grid[(i, j)] = blk
    return grid


def check_block_fits(sizes: Sequence[int], i: int, j: int, blk: nn.Module) -> None:
    si, sj = sizes[i], sizes[j]
    kind = block_kind(blk)
    if kind == "identity" and si != sj:
        raise InvalidValue(f"block F[{i}][{j}] is an identity, but slot {j} has size {sj} and slot {i} has size {si}")
    if kind == "linear":
        fin, fout = blk.in_features, blk.out_features
    elif kind == "module":
        fin, fout = module_features(blk)
    else:
        return
    if fin is not None and fin != sj:
        raise InvalidValue(f"block F[{i}][{j}] takes {fin} input features, but slot {j} has size {sj}")
    if fout is not None and fout != si:
        raise InvalidValue(f"block F[{i}][{j}] gives {fout} output features, but slot {i} has size {si}")


def check_slot_list(name: str, slots, n: int) -> tuple[int, ...]:
    if isinstance(slots, int):
        slots = [slots]
    out = []
    for s in slots:
        if isinstance(s, bool) or not isinstance(s, int):
            raise InvalidType(f"{name} must hold slot indices (ints), got {s!r}")
        if not -n <= s < n:
            raise InvalidIndex(f"{name}: slot {s} does not exist (the model has {n} slots)")
        out.append(s % n)
    if len(set(out)) != len(out):
        raise InvalidValue(f"{name} lists a slot twice: {list(slots)}")
    return tuple(out)


def check_steps(steps) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise InvalidType(f"steps must be a non-negative int, got {type(steps).__name__} {steps!r}")
    if steps < 0:
        raise InvalidValue(f"steps must be a non-negative int, got {steps}")
    return steps


def build_activations(sizes, activations, held, factory_kwargs) -> nn.ModuleList:
    """One activation module per slot (held slots: identity; a non-identity one there is an error)."""
    n = len(sizes)
    per_slot = isinstance(activations, Sequence) and not isinstance(activations, str)
    if per_slot and len(activations) != n:
        raise InvalidValue(f"activations must be one spec or a list of {n} (one per slot), got {len(activations)}")
    acts = []
    for i in range(n):
        spec = activations[i] if per_slot else activations
        if i in held:
            if per_slot and spec is not None and not (isinstance(spec, str) and spec.lower() in ("identity", "none", "linear")) and not (isinstance(spec, nn.Module) and is_identity(spec)):
                raise InvalidValue(f"slot {i} has no incoming blocks (it is held), so its activation {spec!r} would never be applied")
            spec = None
        acts.append(make_activation(spec, sizes[i], slot=i, **factory_kwargs))
    return nn.ModuleList(acts)

def slot_biases(sizes, bias, held, factory_kwargs) -> tuple[dict[int, Tensor], set[int]]:
    """The per-slot biases the ``bias`` argument asks for: ``(given, fresh)``, given tensors by slot
    and the slots whose bias is created here (initialised by ``reset_bias_parameters``)."""
    n = len(sizes)
    if isinstance(bias, bool):
        per = [bias and i not in held for i in range(n)]
    elif isinstance(bias, Sequence) and not isinstance(bias, str):
        if len(bias) != n:
            raise InvalidValue(f"bias must be a bool or a list of {n} entries (one per slot), got {len(bias)}")
        per = list(bias)
    else:
        raise InvalidType(f"bias must be a bool or a per-slot list, got {type(bias).__name__}")
    given: dict[int, Tensor] = {}
    fresh: set[int] = set()
    for i, b in enumerate(per):
        if b is None or b is False:
            continue
        if i in held:
            raise InvalidValue(f"slot {i} has no incoming blocks (it is held), so it cannot have a bias")
        if b is True:
            given[i] = torch.empty(sizes[i], **factory_kwargs)
            fresh.add(i)
        elif isinstance(b, Tensor):
            if tuple(b.shape) != (sizes[i],):
                raise InvalidValue(f"bias of slot {i} must have shape ({sizes[i]},), got {tuple(b.shape)}")
            given[i] = b
        else:
            raise InvalidType(f"bias of slot {i} must be a bool, a tensor or None, got {type(b).__name__}")
    return given, fresh


def depth_and_levels(n: int, positions, rows) -> tuple[int | None, list[frozenset] | None]:
    """``(depth, levels)``: the longest path (in blocks) from the held slots and the non-held
    slots grouped by depth (levels 1 .. depth), or ``(None, None)`` when the graph has a cycle."""
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, j in positions:
        succ[j].append(i)
        indeg[i] += 1
    depth = [0] * n
    queue = deque(k for k in range(n) if indeg[k] == 0)
    seen = 0
    while queue:
        j = queue.popleft()
        seen += 1
        for i in succ[j]:
            depth[i] = max(depth[i], depth[j] + 1)
            indeg[i] -= 1
            if indeg[i] == 0:
                queue.append(i)
    if seen < n:
        return None, None
    # the execution plan: non-held slots grouped by depth (level 1 .. depth)
    levels: dict[int, list[int]] = {}
    for i in range(n):
        if i in rows:
            levels.setdefault(depth[i], []).append(i)
    return (max(depth) if n else 0), [frozenset(levels[d]) for d in sorted(levels)]
