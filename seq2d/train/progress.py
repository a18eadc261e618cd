"""What a run shows while it trains (rank 0, unless ``quiet``): a per-epoch progress bar
on a terminal (:class:`EpochBar`) and one line per finished epoch (:func:`epoch_line`)."""

from __future__ import annotations

__all__ = ["EpochBar", "epoch_line"]


class EpochBar:
    """A tqdm bar over an epoch's batches showing the running loss/accuracy; does nothing
    unless ``show``."""

    def __init__(self, show: bool, *, total: int, initial: int, desc: str, log_every: int) -> None:
        self.total, self.log_every = total, log_every
        self.bar = None
        if show:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, leave=False, dynamic_ncols=True)

    def update(self, step: int, done: int, sums: dict) -> None:
        """One batch done (``done`` of ``total``, optimizer step ``step``); the postfix shows
        ``sums``' mean loss and accuracy every ``log_every`` steps and at the last batch."""
        if self.bar is None:
            return
        self.bar.update(1)
        if step % self.log_every == 0 or done == self.total:
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
