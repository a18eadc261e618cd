"""The errors a training run raises beyond the usual ones (:class:`NonFiniteLossError`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import Seq2DError

__all__ = ["NonFiniteLossError"]


class NonFiniteLossError(Seq2DError, RuntimeError):
    """The loss became NaN or infinite; the checkpoint on disk is the last good one."""

    def __init__(self, message: str, *, epoch: int, step: int, checkpoint: Path | None):
        super().__init__(message)
        self.epoch = epoch
        self.step = step
        self.checkpoint = checkpoint
