r"""The loss-explosion rule (config field ``divergence_factor``).

After every optimizer step the mean training loss of the step's global batch updates an
exponential moving average, ``s = 0.9 s + 0.1 loss`` (``s`` starts at the first step's
loss). The run has *diverged* when

    s > divergence_factor * min(s so far)    and    s > s at the first step,

that is, when the smoothed loss has grown by the factor (1000 by default) over its best
value and is worse than where training started (the second condition keeps a run whose loss
went to nearly zero from stopping on noise). The trainer then raises
:class:`~seq2d.train.errors.DivergenceError` naming the epoch, the step and the last good
checkpoint. ``divergence_factor = None`` turns the rule off (NaN/inf still stop the run).
The average is stored in every checkpoint, so a resumed run judges exactly as the
uninterrupted one would.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["DivergenceMonitor", "BETA"]

BETA = 0.9  # weight of the previous average


class DivergenceMonitor:
    """Tracks the smoothed loss; :meth:`update` returns why the run diverged, or None."""

    def __init__(self, factor: float | None) -> None:
        self.factor = factor
        self.ema: float | None = None
        self.best: float | None = None
        self.start: float | None = None

    def update(self, loss: float) -> str | None:
        if not math.isfinite(loss):
            return None  # the non-finite check reports this one
        self.ema = loss if self.ema is None else BETA * self.ema + (1 - BETA) * loss
        if self.start is None:
            self.start = self.ema
        self.best = self.ema if self.best is None else min(self.best, self.ema)
        if self.factor is not None and self.ema > self.factor * self.best and self.ema > self.start:
            return (f"the smoothed training loss {self.ema:.4g} exceeds divergence_factor x its lowest value "
                    f"({self.factor:g} x {self.best:.4g}; first value {self.start:.4g})")
        return None

    def state_dict(self) -> dict:
        return {"ema": self.ema, "best": self.best, "start": self.start}

    def load_state_dict(self, state: Mapping | None) -> None:
        state = state or {}
        self.ema, self.best, self.start = state.get("ema"), state.get("best"), state.get("start")
