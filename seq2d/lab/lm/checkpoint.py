r"""The language-model loop's checkpoint file: :class:`LMCheckpoint`, the file-backed
:class:`seq2d.lab.lm.LoopCheckpoint` that :func:`seq2d.lab.lm.train_lm` saves to and continues from.

One file in the format of :mod:`seq2d.train.checkpoint` (written by its
:func:`~seq2d.train.checkpoint.save_checkpoint`: temporary file, fsync, rename; read back by
:func:`~seq2d.train.checkpoint.load_checkpoint`, which refuses a torn, foreign or non-finite file)::

    model       the weights (at the end of training: the best-validation weights)
    optimizer   SGD's state (its lr)
    epoch       completed epochs              update   optimizer updates so far
    config      {"train_lm": the loop's settings, **the caller's config}: a resume under
                anything else is refused, naming the fields that differ
    rng         torch (dropout masks), CUDA, Python ``random``, numpy
    metrics     {"history": the completed epochs' rows}
    extra       {"loop": the rest of train_lm's state: batch reached within the epoch, the
                hidden state carried to it, the epoch's running sums, the lr after plateau
                annealing, the best validation loss and its weights, epochs since it, why
                training stopped (None while it runs), the resumes so far, the training time}

The loop (:mod:`~seq2d.lab.lm.train`) defines what it keeps (:class:`seq2d.lab.lm.LoopCheckpoint`)
and knows no files; this module keeps it in one. A file written before issue 36 says ``step`` for
``update`` (at its top, in its history rows and in its resumes entries): read as today's
(:func:`seq2d.lab.lm.migrate_result`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from ...train.checkpoint import (CheckpointError, capture_rng_state, check_model_state, check_optimizer_state,
                         upgrade_checkpoint, load_checkpoint, restore_rng_state, save_checkpoint)
from .train import migrate_result

__all__ = ["LMCheckpoint"]

# the loop's state beyond the checkpoint's own epoch, update and metrics["history"]
_LOOP_KEYS = ("batch", "lr", "best", "best_state", "since_best", "hidden", "partial", "stopped", "diverged", "resumes",
              "train_time_s")


def _plain(d: Mapping) -> dict:
    """``d`` as JSON would give it back (tuples as lists, ...): how configs are compared."""
    return json.loads(json.dumps(d, sort_keys=True, default=repr))


class LMCheckpoint:
    """The file ``path`` as a :class:`seq2d.lab.lm.LoopCheckpoint`; ``config`` (primitives: the model,
    the data, the condition, the seed ...) is stored with the loop's own settings and must match
    on resume. ``map_location``: where the loaded tensors go (default: the model's device)."""

    def __init__(self, path: str | os.PathLike, config: Mapping | None = None, *, map_location=None) -> None:
        self.path = Path(path)
        self.config = _plain(config or {})
        if "train_lm" in self.config:
            raise CheckpointError("LMCheckpoint: the config key 'train_lm' is the loop's own; rename that field")
        self.map_location = map_location

    def exists(self) -> bool:
        return self.path.is_file()

    def _full_config(self, settings: Mapping) -> dict:
        return {"train_lm": _plain(settings), **self.config}

    def load(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, settings: Mapping) -> dict | None:
        """The saved loop state (None when the file does not exist); puts the weights, the optimizer
        state and the random generators back. CheckpointError when the file is unusable, was saved
        under another config, or does not fit the model."""
        if not self.exists():
            return None
        where = repr(str(self.path))
        ref = next(iter(model.parameters()), None)
        ckpt = load_checkpoint(self.path, map_location=self.map_location or (ref.device if ref is not None else None))
        saved, now = ckpt["config"], self._full_config(settings)
        diff = [f"{k}: saved {saved.get(k)!r}, now {now.get(k)!r}" for k in dict.fromkeys([*saved, *now])
                if saved.get(k) != now.get(k)]
        if diff:
            raise CheckpointError(
                f"cannot continue the run saved in {where}: it was trained with another config ({'; '.join(diff)}). "
                "Continue it with its own settings, or start this one in another folder")
        loop = ckpt["extra"].get("loop")
        if not isinstance(loop, Mapping) or any(k not in loop for k in _LOOP_KEYS):
            raise CheckpointError(f"{where} holds no language-model loop state (extra['loop'] with "
                                  f"{', '.join(_LOOP_KEYS)}): not written by seq2d.lab.lm.train_lm")
        upgrade_checkpoint(ckpt, model, optimizer, extra_states=(loop["best_state"],))  # an earlier store layout
        check_model_state(ckpt["model"], model, where)
        check_optimizer_state(ckpt["optimizer"], optimizer, where)
        if loop["best_state"] is not None:
            check_model_state(loop["best_state"], model, f"{where} (its best-validation weights)")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        restore_rng_state(ckpt["rng"], where=where)
        state = migrate_result({**loop, "history": list(ckpt["metrics"].get("history", []))})  # "step" before issue 36
        state["epoch"], state["update"] = ckpt["epoch"], ckpt["update"]
        return state

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Mapping, settings: Mapping) -> None:
        """Write the loop's ``state`` with the weights, the optimizer, the random generators and the
        config, atomically."""
        loop = {k: v for k, v in state.items() if k not in ("history", "epoch", "update")}
        save_checkpoint(self.path, model=model, optimizer=optimizer, epoch=int(state["epoch"]),
                        update=int(state["update"]), config=self._full_config(settings), rng=capture_rng_state(),
                        metrics={"history": list(state["history"])}, extra={"loop": loop})
