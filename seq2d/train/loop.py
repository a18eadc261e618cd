r"""What every training loop of seq2d shares (the :class:`~seq2d.train.Trainer` and the
seed-vectorised copies of :mod:`seq2d.train.vectorized`): the optimizer a config names
(:func:`make_optimizer`), the default loss (:func:`classification_loss`), **one optimizer update**
(:func:`train_update`), the per-update statistics and their checks (:class:`UpdateStats`, the
loss-explosion rule :class:`DivergenceMonitor`) and what a run shows while it trains
(:class:`EpochBar`, :func:`epoch_line`), and torch's process-wide settings for the length of a run
(:func:`run_settings`).

**One update** (:func:`train_update`) is, for a batch ``xb, yb``::

    loss_sum, correct = criterion(forward(xb), yb)   # summed over the batch (per copy when batched)
    stats = (loss_sum, correct) as float64            # summed over ranks under DDP
    before_backward(stats)                            # queued; checked on the host (UpdateStats)
    optimizer.zero_grad(set_to_none=True)
    (loss_sum * scale).sum().backward()               # scale = W / (global samples x targets)
    optimizer.step()

The scale makes DDP's gradient average over ``W`` ranks the mean over the global batch; with
``k`` batched copies (their losses stacked, ``(k,)``) the sum of the copies' losses has each
copy's own gradient, as the copies share no tensor.

**Update statistics.** Each update's ``(loss, correct)`` pair (summed over ranks) stays on the
device in a queue; :meth:`UpdateStats.flush` reads the whole queue in one transfer and then checks
and sums the updates in order, exactly as reading them one by one would: a non-finite loss or a
divergence is reported through ``fail`` with the first bad update. The loops flush at every
``every``-th update (:func:`sync_interval`: every update on the CPU, where it is free and each
update is checked before its backward pass; ``log_every`` updates on a GPU), at an epoch's last batch and
before a mid-epoch checkpoint.

**The loss-explosion rule** (config field ``divergence_factor``). After every optimizer update the
mean training loss of the update's global batch updates an exponential moving average,
``s = 0.9 s + 0.1 loss`` (``s`` starts at the first update's loss). The run has *diverged* when

    s > divergence_factor * min(s so far)    and    s > s at the first update,

that is, when the smoothed loss has grown by the factor (1000 by default) over its best
value and is worse than where training started (the second condition keeps a run whose loss
went to nearly zero from stopping on noise). The trainer then raises
:class:`~seq2d.train.errors.DivergenceError` naming the epoch, the update and the last good
checkpoint. ``divergence_factor = None`` turns the rule off (NaN/inf still stop the run).
The average is stored in every checkpoint, so a resumed run judges exactly as the
uninterrupted one would.

**Progress** (rank 0, unless ``quiet``): a per-epoch progress bar on a terminal
(:class:`EpochBar`; elsewhere, e.g. in a log file, a plain progress line at most every
``HEARTBEAT_S`` seconds) and one line per finished epoch (:func:`epoch_line`).

**The run's torch settings** (:func:`run_settings`): the thread count (``num_threads``, "auto" from
the cores idle when the run starts, see :mod:`seq2d.threads`; None, the config's default, means
"auto" too, so ``Trainer(TrainConfig(...))`` and ``seq2d train`` choose alike; under torchrun the
idle cores are shared by the local processes) and deterministic algorithms (``deterministic``);
both are restored after.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from ..errors import InvalidValue
from .config import TrainConfig
from .errors import DivergenceError, NonFiniteLossError

__all__ = ["make_optimizer", "classification_loss", "train_update", "UpdateStats", "sync_interval", "DivergenceMonitor",
           "BETA", "EpochBar", "epoch_line", "HEARTBEAT_S", "choose_threads", "run_settings"]


# ---------------------------------------------------------------------- the optimizer and the loss
def make_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum 0.9, on the parameters of ``model`` that require grad."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise InvalidValue("the model has no trainable parameters")
    if cfg.optimizer == "adam":
        def make(**impl):
            return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **impl)
    else:
        def make(**impl):
            return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay, **impl)
    # optimizer_impl: torch's fused kernel where it has one for these devices and dtypes (it
    # refuses the others when constructed), else foreach; "loop" is torch's CPU default
    if cfg.optimizer_impl == "fused":
        try:
            return make(fused=True)
        except RuntimeError:
            return make(foreach=True)
    return make(foreach=cfg.optimizer_impl == "foreach")


def classification_loss(out, y):
    """(summed cross-entropy, number of correct argmax predictions) over the last dimension: the
    Trainer's default criterion (``(B, C)`` classification and ``(B, T, V)`` language modelling)."""
    import torch.nn.functional as F

    logits = out.reshape(-1, out.shape[-1])
    t = y.reshape(-1)
    return F.cross_entropy(logits, t, reduction="sum"), (logits.argmax(-1) == t).sum()


# ---------------------------------------------------------------------- one update
def train_update(forward: Callable[[Tensor], Tensor], criterion: Callable, optimizer: torch.optim.Optimizer,
                 xb: Tensor, yb: Tensor, *, scale: float, before_backward: Callable[[Tensor], None]) -> Tensor:
    """One optimizer update on the batch ``xb, yb`` (see the module docstring); returns the update's
    statistics ``(loss_sum, correct)`` as float64, shape ``(..., 2)`` (``(k, 2)`` for ``k`` batched
    copies), after ``before_backward`` has seen them (it sums them over ranks in place, queues
    them and may check them: an error raised there leaves the weights untouched)."""
    loss_sum, correct = criterion(forward(xb), yb)
    stats = torch.stack([loss_sum.detach().double(), correct.detach().double()], -1)
    before_backward(stats)
    optimizer.zero_grad(set_to_none=True)
    (loss_sum * scale).sum().backward()
    optimizer.step()
    return stats


# ---------------------------------------------------------------------- update statistics
def sync_interval(host_sync_every: int | None, device: torch.device, log_every: int) -> int:
    """How many updates the host may leave unread: ``host_sync_every``, or by default 1 on the
    CPU and ``log_every`` elsewhere."""
    n = host_sync_every
    if n is None:
        n = 1 if device.type == "cpu" else log_every
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidValue(f"host_sync_every must be an int >= 1 or None, got {n!r}")
    return n


class UpdateStats:
    """A queue of unread update statistics and the running ``sums`` they are added to.

    ``sums``: the dict ``{"loss", "correct", "count", ...}`` to add to (updated in place);
    ``monitor``: the divergence monitor (``update(mean_loss) -> reason or None``); ``fail(cls,
    message, update)``: raises for a bad update; ``where(update, batch)``: the "at epoch ..." text."""

    def __init__(self, sums: dict, monitor, fail: Callable, where: Callable[[int, int], str]) -> None:
        self.sums, self.monitor, self.fail, self.where = sums, monitor, fail, where
        self.pending: list[tuple[Tensor, int, int, int]] = []  # (stats on the device, update, batch, count)

    def add(self, stats: Tensor, update: int, batch: int, count: int, *, flush: bool = False) -> None:
        """Queue one update's ``(loss, correct)``; with ``flush``, read and check the queue now."""
        self.pending.append((stats, update, batch, count))
        if flush:
            self.flush()

    def flush(self) -> dict:
        """Read the queue in one transfer; check and sum it in update order; return ``sums``."""
        if self.pending:
            values = torch.stack([p[0] for p in self.pending]).tolist()  # the host synchronisation
            queued, self.pending = self.pending, []
            sums = self.sums
            for (loss_total, correct_total), (_, update, batch, count) in zip(values, queued):
                if not math.isfinite(loss_total):
                    self.fail(NonFiniteLossError, f"the training loss is {loss_total} {self.where(update, batch)}", update)
                why = self.monitor.update(loss_total / count)
                if why is not None:
                    self.fail(DivergenceError, f"{why} {self.where(update, batch)}", update)
                sums["loss"] += loss_total
                sums["correct"] += int(correct_total)
                sums["count"] += count
        return self.sums


# ---------------------------------------------------------------------- the loss-explosion rule
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


# ---------------------------------------------------------------------- progress
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

    def update(self, updates: int, done: int, sums: dict | Callable[[], dict]) -> None:
        """One batch done (``done`` of ``total``, ``updates`` optimizer updates taken); the postfix
        shows ``sums``' mean loss and accuracy every ``log_every`` updates and at the last batch.

        ``sums`` may be a function returning the dict: it is called only when the values are
        shown (so a trainer can keep them on the GPU until then)."""
        if self.lines:
            now = time.perf_counter()
            if now - self.last >= self.heartbeat_s and done < self.total:
                self.last = now
                sums = sums() if callable(sums) else sums
                print(f"  {self.desc}: batch {done}/{self.total}, update {updates}, loss "
                      f"{sums['loss'] / max(sums['count'], 1):.4f} acc {sums['correct'] / max(sums['count'], 1):.4f}, "
                      f"{now - self.t0:.0f}s", file=sys.stdout, flush=True)
            return
        if self.bar is None:
            return
        self.bar.update(1)
        if updates % self.log_every == 0 or done == self.total:
            sums = sums() if callable(sums) else sums
            self.bar.set_postfix(loss=f"{sums['loss'] / sums['count']:.4f}", acc=f"{sums['correct'] / sums['count']:.4f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def epoch_line(row: dict, epochs: int, updates: int) -> str:
    """The line printed after an epoch: optimizer updates taken, train and test loss/accuracy, time."""
    return (
        f"epoch {row['epoch']}/{epochs}  update {updates}  train loss {row['train_loss']:.4f} "
        f"acc {row['train_acc']:.4f} | test loss {row['test_loss']:.4f} acc {row['test_acc']:.4f} "
        f"| {row['epoch_time_s']:.1f}s"
    )


# ---------------------------------------------------------------------- the run's torch settings
def choose_threads(cfg: TrainConfig, dist) -> tuple[int, str]:
    """The torch thread count for the run and how it was chosen (``num_threads``: an int is used
    as is; "auto", and None (the config's default: the API chooses as ``seq2d train``, whose
    default is "auto"), sample the idle cores now, at most torch's current count, see
    seq2d.threads; to keep torch's count whatever the load, give it as an int)."""
    if cfg.num_threads is not None and cfg.num_threads != "auto":
        return int(cfg.num_threads), "num_threads"
    from ..threads import auto_threads, available_cores, cpu_limit

    share = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world_size)) if dist.distributed else 1
    avail = available_cores()
    n = auto_threads(limit=torch.get_num_threads(), share=max(share, 1), available=avail)
    per = f" shared by {share} processes" if share > 1 else ""
    return n, f"auto: {avail:.1f} of {cpu_limit()} cores idle{per}, torch default {torch.get_num_threads()}"


@contextlib.contextmanager
def run_settings(cfg: TrainConfig, dist):
    """Apply num_threads / deterministic for the run in context ``dist`` (a
    :class:`~seq2d.train.distributed.DistContext` or a :class:`~seq2d.train.trainer.OneProcess`);
    yields the thread count used and how it was chosen; restores torch's settings after."""
    threads = torch.get_num_threads()
    det, det_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        n, why = choose_threads(cfg, dist)
        if n != threads:
            torch.set_num_threads(n)
        if cfg.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        yield n, why
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det, warn_only=det_warn)
