"""The errors a training run raises beyond the usual ones.

- :class:`DivergenceError`: the run stopped because it diverged: the smoothed training loss
  rose above ``divergence_factor`` x its best value so far (see :mod:`seq2d.train.divergence`);
  :class:`NonFiniteLossError`, its refinement, when the loss became NaN or infinite. Both
  name the epoch, the step and the last good checkpoint (left as it was).
- :class:`RunLockedError`: another live run holds the output folder's lock.
- :class:`RunExistsError`: the output folder holds a run and neither resume nor overwrite was asked.

All are :class:`~seq2d.errors.Seq2DError`\\ s (``CheckpointError`` lives in
:mod:`seq2d.train.checkpoint`).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import Seq2DError

__all__ = ["DivergenceError", "NonFiniteLossError", "RunLockedError", "RunExistsError"]


class DivergenceError(Seq2DError, RuntimeError):
    """The training loss exploded; the checkpoint on disk is the last good one."""

    def __init__(self, message: str, *, epoch: int, step: int, checkpoint: Path | None):
        super().__init__(message)
        self.epoch = epoch
        self.step = step
        self.checkpoint = checkpoint


class NonFiniteLossError(DivergenceError):
    """The loss became NaN or infinite; the checkpoint on disk is the last good one."""


class RunLockedError(Seq2DError, RuntimeError):
    """Another live process holds the lock of the output folder (its pid is in the message)."""

    def __init__(self, message: str, *, pid: int | None = None, lock: Path | None = None):
        super().__init__(message)
        self.pid = pid
        self.lock = lock


class RunExistsError(Seq2DError, FileExistsError):
    """The output folder already holds a run (a checkpoint): resume it, overwrite it, or pick another."""
