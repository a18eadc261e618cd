"""What a run shows while it trains (rank 0, unless ``quiet``): a per-epoch progress bar
on a terminal (:class:`EpochBar`; elsewhere, e.g. in a log file, a plain progress line at
most every ``HEARTBEAT_S`` seconds) and one line per finished epoch (:func:`epoch_line`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

__all__ = ["EpochBar", "epoch_line", "HEARTBEAT_S"]

HEARTBEAT_S = 30.0  # seconds between progress lines when stderr is not a terminal


class EpochBar:
    """A tqdm bar over an epoch's batches showing the running loss/accuracy when ``tty``;
    otherwise a line ``epoch 1/4: batch 120/938 ...`` on stdout every :data:`HEARTBEAT_S`
    seconds; nothing unless ``show``."""

    def __init__(self, show: bool, *, total: int, initial: int, desc: str, log_every: int, tty: bool = True,
                 heartbeat_s: float | None = None) -> None:
        self.total, self.log_every, self.desc = total, log_every, desc
        self.bar = None
        self.lines = show and not tty
        self.heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s  # read now: a process may change it
        self.t0 = self.last = time.perf_counter()
        if show and tty:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, leave=False, dynamic_ncols=True)

    def update(self, step: int, done: int, sums: dict | Callable[[], dict]) -> None:
        """One batch done (``done`` of ``total``, optimizer step ``step``); the postfix shows
        ``sums``' mean loss and accuracy every ``log_every`` steps and at the last batch.

        ``sums`` may be a function returning the dict: it is called only when the values are
        shown (so a trainer can keep them on the GPU until then)."""
        if self.lines:
            now = time.perf_counter()
            if now - self.last >= self.heartbeat_s and done < self.total:
                self.last = now
                sums = sums() if callable(sums) else sums
                print(f"  {self.desc}: batch {done}/{self.total}, step {step}, loss "
                      f"{sums['loss'] / max(sums['count'], 1):.4f} acc {sums['correct'] / max(sums['count'], 1):.4f}, "
                      f"{now - self.t0:.0f}s", file=sys.stdout, flush=True)
            return
        if self.bar is None:
            return
        self.bar.update(1)
        if step % self.log_every == 0 or done == self.total:
            sums = sums() if callable(sums) else sums
            self.bar.set_postfix(loss=f"{sums['loss'] / sums['count']:.4f}", acc=f"{sums['correct'] / sums['count']:.4f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def epoch_line(row: dict, epochs: int, step: int) -> str:
    """The line printed after an epoch: optimizer step, train and test loss/accuracy, time."""
    return (
        f"epoch {row['epoch']}/{epochs}  step {step}  train loss {row['train_loss']:.4f} "
        f"acc {row['train_acc']:.4f} | test loss {row['test_loss']:.4f} acc {row['test_acc']:.4f} "
        f"| {row['epoch_time_s']:.1f}s"
    )
