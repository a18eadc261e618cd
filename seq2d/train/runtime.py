"""Torch's process-wide settings for the length of a run: the thread count (``num_threads``,
"auto" from the cores idle when the run starts, see :mod:`seq2d.threads`; None, the config's
default, means "auto" too, so ``Trainer(TrainConfig(...))`` and ``seq2d train`` choose alike) and
deterministic algorithms (``deterministic``); :func:`run_settings` restores both after."""

from __future__ import annotations

import contextlib
import os

import torch

from .config import TrainConfig
from .distributed import DistContext

__all__ = ["choose_threads", "run_settings"]


def choose_threads(cfg: TrainConfig, dist: DistContext) -> tuple[int, str]:
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
def run_settings(cfg: TrainConfig, dist: DistContext | None = None):
    """Apply num_threads / deterministic for the run (yields the thread count used and how it
    was chosen); restore torch's settings after."""
    threads = torch.get_num_threads()
    det, det_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        n, why = choose_threads(cfg, dist if dist is not None else DistContext.current(cfg.device))
        if n != threads:
            torch.set_num_threads(n)
        if cfg.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        yield n, why
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det, warn_only=det_warn)
