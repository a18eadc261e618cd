"""The errors a training run raises beyond the usual ones.

- :class:`DivergenceError`: the run stopped because it diverged: the smoothed training loss
  rose above ``divergence_factor`` x its best value so far (see :mod:`seq2d.train.loop`);
  :class:`NonFiniteLossError`, its refinement, when the loss became NaN or infinite. Both
  name the epoch, the optimizer update and the last good checkpoint (left as it was).
- :class:`RunLockedError`: another live run holds the output folder's lock.
- :class:`RunExistsError`: the output folder holds a run and neither resume nor overwrite was asked.
- :class:`ConstantOutputError`: the model's output cannot depend on its input within its
  steps, so training would fit a constant; refused before training (an ``InvalidValue``).

All are :class:`~seq2d.errors.Seq2DError`\\ s (``CheckpointError`` lives in
:mod:`seq2d.train.checkpoint`).

Their messages speak the caller's language: keyword arguments (``resume=True``) from the
Python API, flags (``--resume``) inside :func:`cli_terms` (the ``seq2d train`` command);
:func:`spell` picks the wording.
"""

from __future__ import annotations

import contextlib
import contextvars
from pathlib import Path

from ..errors import InvalidValue, Seq2DError

__all__ = ["DivergenceError", "NonFiniteLossError", "RunLockedError", "RunExistsError", "ConstantOutputError", "cli_terms",
           "spell"]

_CLI_TERMS = contextvars.ContextVar("seq2d_train_cli_terms", default=False)


@contextlib.contextmanager
def cli_terms():
    """Within this block the training errors name command-line flags (``--resume``), not
    keyword arguments (``resume=True``): the command line wraps its run in it."""
    token = _CLI_TERMS.set(True)
    try:
        yield
    finally:
        _CLI_TERMS.reset(token)


def spell(api: str, cli: str) -> str:
    """``cli`` inside :func:`cli_terms`, else ``api``: one wording per caller, never both."""
    return cli if _CLI_TERMS.get() else api


class DivergenceError(Seq2DError, RuntimeError):
    """The training loss exploded; the checkpoint on disk is the last good one."""

    def __init__(self, message: str, *, epoch: int, update: int, checkpoint: Path | None):
        super().__init__(message)
        self.epoch = epoch
        self.update = update  # the optimizer update it stopped at
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


class ConstantOutputError(InvalidValue):
    """The model's output cannot depend on its input within the steps it runs: ``slot`` (an output
    slot), ``distance`` (blocks from the input slots to it; None: no path) and ``steps``."""

    def __init__(self, message: str, *, slot: int, distance: int | None, steps: int):
        super().__init__(message)
        self.slot = slot
        self.distance = distance
        self.steps = steps
