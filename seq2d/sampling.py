"""Choosing places at random: the one rule by which seq2d puts ``k`` things (mask entries,
tiles, examples) among ``n`` places, so that every random pattern is drawn the same way and a
seed means the same choice everywhere (random masks and tiles in :mod:`seq2d.models.random`,
spec blocks with ``density``/``n`` in :mod:`seq2d.spec.build`, the MNIST subset in
:mod:`seq2d.data.make_subset`)."""

from __future__ import annotations

import torch
from torch import Tensor

from .errors import InvalidValue

__all__ = ["choose"]


def choose(total: int, k: int, generator: torch.Generator | None) -> Tensor:
    """``k`` distinct indices in ``[0, total)``, uniformly: the first ``k`` of
    ``torch.randperm(total, generator=generator)``, sorted (int64)."""
    if k > total:
        raise InvalidValue(f"cannot place {k} entries in a region of {total}")
    return torch.randperm(total, generator=generator)[:k].sort().values
