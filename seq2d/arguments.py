"""Argument checks shared by every constructor (``device``/``dtype``, seeds, positive ints, a module's
declared widths). Sequential2D's own checks are in :mod:`seq2d.core.checks`. Each check raises a
typed error that says what was expected and what arrived."""

from __future__ import annotations

from torch import nn

from .blocks import check_device, check_dtype
from .errors import InvalidType, InvalidValue

__all__ = ["is_pos_int", "module_features", "check_device", "check_dtype", "check_factory", "check_seed"]


def check_factory(device, dtype, what: str) -> None:
    """The ``device``/``dtype`` arguments of a constructor (see :func:`seq2d.blocks.check_device`,
    :func:`seq2d.blocks.check_dtype`): typed errors naming ``what`` and the argument."""
    check_device(device, what)
    check_dtype(dtype, what)


_SEED_RANGE = (-(2**63), 2**64 - 1)  # torch.Generator.manual_seed's range


def check_seed(seed, what: str, *, optional: bool = False):
    """``seed``: an int in torch's seed range (``None`` too when ``optional``)."""
    if seed is None and optional:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidType(f"{what}: seed must be an int{' or None' if optional else ''}, got {type(seed).__name__} {seed!r}")
    if not _SEED_RANGE[0] <= seed <= _SEED_RANGE[1]:
        raise InvalidValue(f"{what}: seed must lie in [-2**63, 2**64 - 1], got {seed}")
    return seed


def is_pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def module_features(block: nn.Module) -> tuple[int | None, int | None]:
    """(in_features, out_features) when a module declares them (a nested Sequential2D does), else None."""
    fin = getattr(block, "in_features", None)
    fout = getattr(block, "out_features", None)
    return (fin if is_pos_int(fin) else None, fout if is_pos_int(fout) else None)
