"""Seeds and data order that depend only on ``(seed, keys)``: the same on every rank, in
every process and after any resume (what makes a resumed run bitwise exact)."""

from __future__ import annotations

import hashlib
import random

import torch
from torch import Tensor

__all__ = ["derive_seed", "epoch_permutation", "seed_everything"]


def derive_seed(seed: int, *keys) -> int:
    """A 63-bit seed from ``seed`` and ``keys`` (stable across runs, platforms, processes)."""
    h = hashlib.blake2b(repr((int(seed),) + tuple(keys)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def epoch_permutation(n: int, seed: int, epoch: int) -> Tensor:
    """The order of the ``n`` training samples in epoch ``epoch`` (CPU int64): a function of
    ``(seed, epoch)`` only, identical on every rank and after any resume."""
    g = torch.Generator().manual_seed(derive_seed(seed, "shuffle", epoch))
    return torch.randperm(n, generator=g)


def seed_everything(seed: int) -> None:
    """Seed torch (every device), :mod:`random` and numpy's global generator."""
    torch.manual_seed(seed)  # also seeds every CUDA device
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass
