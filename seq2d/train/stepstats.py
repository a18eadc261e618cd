"""The per-step training statistics, read on the host without a GPU sync at every step.

Each step's ``(loss, correct)`` pair (summed over ranks) stays on the device in a queue;
:meth:`StepStats.flush` reads the whole queue in one transfer and then checks and sums the
steps in order, exactly as reading them one by one would: a non-finite loss or a divergence
(:mod:`seq2d.train.divergence`) is reported through ``fail`` with the first bad step. The
trainer flushes at every ``every``-th step (:func:`sync_interval`: every step on the CPU,
where it is free and each step is checked before its backward pass; ``log_every`` steps on a
GPU), at an epoch's last batch and before a mid-epoch checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import InvalidValue
from .errors import DivergenceError, NonFiniteLossError

__all__ = ["StepStats", "sync_interval"]


def sync_interval(host_sync_every: int | None, device: torch.device, log_every: int) -> int:
    """How many steps the host may leave unread: ``host_sync_every``, or by default 1 on the
    CPU and ``log_every`` elsewhere."""
    n = host_sync_every
    if n is None:
        n = 1 if device.type == "cpu" else log_every
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidValue(f"host_sync_every must be an int >= 1 or None, got {n!r}")
    return n


class StepStats:
    """A queue of unread step statistics and the running ``sums`` they are added to.

    ``sums``: the dict ``{"loss", "correct", "count", ...}`` to add to (updated in place);
    ``monitor``: the divergence monitor (``update(mean_loss) -> reason or None``); ``fail(cls,
    message, step)``: raises for a bad step; ``where(step, batch)``: the "at epoch ..." text."""

    def __init__(self, sums: dict, monitor, fail: Callable, where: Callable[[int, int], str]) -> None:
        self.sums, self.monitor, self.fail, self.where = sums, monitor, fail, where
        self.pending: list[tuple[Tensor, int, int, int]] = []  # (stats on the device, step, batch, count)

    def add(self, stats: Tensor, step: int, batch: int, count: int) -> None:
        self.pending.append((stats, step, batch, count))

    def flush(self) -> dict:
        """Read the queue in one transfer; check and sum it in step order; return ``sums``."""
        if self.pending:
            values = torch.stack([p[0] for p in self.pending]).tolist()  # the host synchronisation
            queued, self.pending = self.pending, []
            sums = self.sums
            for (loss_total, correct_total), (_, step, batch, count) in zip(values, queued):
                if not math.isfinite(loss_total):
                    self.fail(NonFiniteLossError, f"the training loss is {loss_total} {self.where(step, batch)}", step)
                why = self.monitor.update(loss_total / count)
                if why is not None:
                    self.fail(DivergenceError, f"{why} {self.where(step, batch)}", step)
                sums["loss"] += loss_total
                sums["correct"] += int(correct_total)
                sums["count"] += count
        return self.sums
