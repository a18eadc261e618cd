r"""The training loop: generic over models and tensor data sets, exact on resume.

The data protocol is small: ``data["train"] = (X, y)`` and ``data["test"] = (X, y)`` (a dict,
as :func:`seq2d.data.get_data` returns, or any object with ``.train``/``.test``), tensors
with the sample index first; an optional ``augment(xb, generator) -> xb`` applied to each
training batch. The loss is cross-entropy over the last dimension of the model's output
(so ``(B, C)`` classification and ``(B, T, V)`` language modelling both work)::

    cfg = load_config("run.toml")
    summary = run(cfg)                                   # build model + data, train, clean up
    summary = Trainer(cfg, model, data).fit()            # or with your own model and data
    summary = Trainer(cfg, model, data).fit(resume=True) # continue <out_dir>/checkpoint.pt

Each epoch: a progress bar (rank 0, on a terminal) showing loss/accuracy, an evaluation
on the test set, one row appended to ``metrics.jsonl``/``metrics.csv`` and an atomic
``checkpoint.pt``; ``config.toml`` is written at the start.

**Exact resume.** The data order of epoch ``e`` is a permutation drawn from a generator
seeded with ``(seed, "shuffle", e)``, and augmentation draws from a generator seeded with
``(seed, "augment", e, rank)``; neither depends on what ran before. Continuing after
``k`` completed epochs therefore needs only the model, the optimizer state, the counters
and the global RNG states, all in the checkpoint, and gives bitwise the weights and the
metrics of an uninterrupted run (same device, same number of threads: with ``num_threads =
"auto"`` the count is chosen again at the resume, from the cores idle then). A run stopped by
``max_updates`` in the middle of an epoch stores its batch index, the augmentation
generator and the partial sums, so it resumes exactly too.

``checkpoint_every = N`` also writes the checkpoint every N optimizer updates (mid-epoch, the
same way), so a run killed at any moment loses at most N updates and ``resume=True`` continues
it bitwise exactly.

**A run stopped by max_updates** is evaluated where it stopped: its row (a fractional
``epoch``) goes to the metrics files and the summary says ``status = "partial"`` (``complete``
False, ``stopped_by = "max_updates"``), as does ``run.json`` in the run folder; resuming with a
larger (or no) max_updates continues it exactly.

**Divergence.** Every update's loss (summed over ranks) is checked; a NaN/inf raises
:class:`NonFiniteLossError`, and a smoothed loss that exploded (the rule of
:mod:`seq2d.train.loop`, config field ``divergence_factor``) raises
:class:`DivergenceError`, both naming the epoch, the update and the last good checkpoint,
which is left as it was. On the CPU each update is checked before its backward pass; on a GPU
the update statistics are read in one transfer every :attr:`Trainer.host_sync_every` updates
(default ``log_every``; :mod:`seq2d.train.loop`), the error still naming the first bad
update, and no checkpoint follows an unchecked update. A non-finite test loss (weights gone bad within an epoch) raises
the same way, before that epoch's checkpoint is written.

**The run folder** is locked for the length of the run, and ``run.json`` records the config, its
hash and the status (:mod:`seq2d.train.rundir`). A resume that changes lr/optimizer/weight_decay
needs ``allow_changed`` (``--allow-changed``); the change is printed, recorded in ``run.json`` and
the checkpoint, and shown in the ``changes`` column of the next metrics row.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from ..errors import InvalidType, InvalidValue
from ..renames import check_hooks, migrate_record
from .builder import build_model, check_output_sees_input, group_started, resolve_device
from .checkpoint import (CheckpointError, capture_rng_state, check_resume_config, check_resume_extra, load_checkpoint,
                         load_states, restore_rng_state, save_checkpoint)
from .config import TrainConfig, config_to_dict, save_config
from .datasets import augment_generator, derive_seed, epoch_permutation, load_data, make_augment, seed_everything, split_data, synthetic_data
from .distributed import DistContext, init_distributed
from .errors import DivergenceError, NonFiniteLossError, RunLockedError, spell
from .fingerprint import FINGERPRINT_KEY as FP, adopt_fingerprint, check_same_model, model_fingerprint
from .identity import config_hash, format_changes, parse_allow_changed
from .loop import (DivergenceMonitor, EpochBar, UpdateStats, classification_loss, epoch_line, make_optimizer, run_settings,
                   sync_interval, train_update)
from .rundir import (METRIC_COLUMNS, RunDir, is_finished_run, predict, read_metrics, read_record, reuse_line,
                     run_exists_error, write_metrics, write_predictions)
from .tensorboard import config_callbacks

__all__ = ["Trainer", "train", "run", "OneProcess", "NonFiniteLossError", "DivergenceError", "METRIC_COLUMNS", "build_model",
           "load_data", "make_augment", "synthetic_data", "derive_seed", "epoch_permutation", "write_metrics",
           "read_metrics"]


# ---------------------------------------------------------------------- the trainer
class OneProcess:
    """A run in one process, rank 0 of 1 on ``device``: what :func:`run` makes unless torchrun started
    several (``WORLD_SIZE`` > 1), and the :class:`Trainer` unless given a context or a process group runs.
    The face of :class:`~seq2d.train.distributed.DistContext`, its collectives doing nothing."""

    rank, world_size, local_rank, backend, owns_group, is_main, distributed = 0, 1, 0, None, False, True, False

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def barrier(self) -> None:
        pass

    def all_reduce_sum(self, t: Tensor) -> Tensor:
        return t

    def wrap(self, model: nn.Module, example: Tensor | None = None) -> nn.Module:
        return model

    def close(self, *, sync: bool = True) -> None:
        pass


def _call(callbacks, hook: str, *args) -> list:
    out = []
    for cb in callbacks:
        fn = getattr(cb, hook, None)
        if fn is not None:
            out.append(fn(*args))
    return out


class Trainer:
    """Train ``model`` on ``data`` as ``config`` says (see the module docstring).

    Args:
        config: a :class:`~seq2d.train.TrainConfig`.
        model: the (unwrapped) model; it is moved to the run's device.
        data: ``{"train": (X, y), "test": (X, y)}`` or an object with ``.train``/``.test``.
        augment: optional ``augment(xb, generator) -> xb`` for training batches.
        callbacks: objects with any of ``on_train_start(trainer)``,
            ``on_update_end(trainer, update)`` (after each optimizer step; e.g. a projection
            of the weights), ``on_epoch_end(trainer, epoch, row)`` (may return a dict of
            extra metrics for the row, which later callbacks see), ``on_train_end(trainer, summary)``;
            a TensorBoard logger follows them when ``config.tensorboard`` is set (:mod:`.tensorboard`).
        dist: the :class:`~seq2d.train.distributed.DistContext` (default: an already started
            process group's, else a :class:`OneProcess`).
        criterion: ``(output, y) -> (summed loss, number correct)``; default cross-entropy.

    Attributes used by callbacks: ``model``, ``optimizer``, ``config``, ``epoch``
    (completed epochs), ``updates`` (optimizer updates taken), ``device``, ``dist``, ``history``.

    ``host_sync_every``: optimizer updates between host reads of the update losses (a GPU sync); None: 1 on
    the CPU, ``config.log_every`` elsewhere (:class:`~seq2d.train.loop.UpdateStats`; metrics unchanged).
    """

    host_sync_every: int | None = None

    def __init__(self, config: TrainConfig, model: nn.Module, data, *, augment: Callable | None = None,
                 callbacks: Sequence = (), dist: DistContext | OneProcess | None = None,
                 criterion: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None) -> None:
        if not isinstance(config, TrainConfig):
            raise InvalidType(f"config must be a TrainConfig, got {type(config).__name__}")
        if not isinstance(model, nn.Module):
            raise InvalidType(f"model must be an nn.Module, got {type(model).__name__}")
        if augment is not None and not callable(augment):
            raise InvalidType(f"augment must be callable (xb, generator) -> xb, got {type(augment).__name__}")
        self.config = cfg = config
        check_output_sees_input(model, cfg)  # a model that cannot see its input is refused before training
        self.dist = dist if dist is not None else (
            DistContext.current(cfg.device) if group_started() else OneProcess(resolve_device(cfg.device, 0)))
        self.device = self.dist.device
        if cfg.batch_size % self.dist.world_size:
            raise InvalidValue(
                f"batch_size {cfg.batch_size} is the global batch and must divide evenly over "
                f"{self.dist.world_size} processes; use a multiple of {self.dist.world_size}"
            )
        self.model = model.to(self.device)
        Xtr, ytr, Xte, yte = split_data(data)
        self.train_data = (Xtr.to(self.device), ytr.to(self.device))
        self.test_data = (Xte.to(self.device), yte.to(self.device))
        fin = getattr(model, "in_features", None)
        if isinstance(fin, int) and Xtr.dim() == 2 and Xtr.shape[1] != fin:
            hint = ("MNIST-1D signals have 40 samples: sizes[0] must be 40" if cfg.data == "mnist1d"
                    else f"for images: sizes[0] must be image_size**2 = {cfg.image_size ** 2}")
            raise InvalidValue(f"the model takes {fin} input features but the data has {Xtr.shape[1]} per sample ({hint})")
        self.targets_per_sample = ytr[0].numel()
        self.augment = augment
        check_hooks(callbacks)
        self.callbacks = tuple(callbacks) + config_callbacks(cfg)  # the config's (TensorBoard) last: it logs the extras
        self.criterion = criterion or classification_loss
        self.optimizer = make_optimizer(cfg, self.model)
        self._monitor = DivergenceMonitor(cfg.divergence_factor)  # the loss-explosion rule (loop.py, as the optimizer)
        self.train_model = self.dist.wrap(self.model, self.train_data[0][:2])  # DDP under torchrun
        self._fingerprint = model_fingerprint(self.model)  # what the run trains, before any update (recorded, compared)
        self.out_dir = cfg.run_dir()
        self.checkpoint_path = self.out_dir / "checkpoint.pt"
        self.epoch = 0  # completed epochs
        self.updates = 0  # optimizer updates taken (``update`` in the run's records)
        self.history: list[dict] = []
        self._resume_batch = 0  # batches already done in epoch self.epoch (max_updates stops)
        self._partial: dict | None = None
        self._aug_state: Tensor | None = None
        self._last_good: Path | None = None
        self._last_good_at: tuple[int, int, int] = (0, 0, 0)  # (epoch, update, batch) of the last good checkpoint
        self._last_row: dict | None = None  # the last evaluated row (a partial one after a max_updates stop)
        self._changes: list[dict] = []  # settings changed on resume (allow_changed), oldest first
        self.rundir: RunDir | None = None
        self.num_threads: int = torch.get_num_threads()  # set for the run by fit()

    # ------------------------------------------------------------------ setup
    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    def _batches(self) -> int:
        return -(-self.train_data[0].shape[0] // self.config.batch_size)

    def load(self, path: str | os.PathLike | None = None, *, allow_changed=()) -> dict:
        """Restore model, optimizer, counters, metrics and RNG states from a checkpoint (default
        ``<out_dir>/checkpoint.pt``), after checking its config (fields in ``allow_changed`` may
        differ: recorded) and its model's structure (else ModelChangedError) against ours."""
        cfg = self.config
        path = Path(path) if path is not None else self.checkpoint_path
        where = repr(str(path))
        # Read onto the CPU: load_state_dict copies the model's and the optimizer's tensors to
        # their parameters' device, while the RNG states must be CPU ByteTensors and Adam's
        # ``step`` counters stay where they are loaded (on a GPU each would be read back with
        # .item() at every update: a host sync per parameter; a fresh run keeps them on the CPU).
        ckpt = load_checkpoint(path, map_location="cpu")
        allow = parse_allow_changed(allow_changed, where="allow_changed")
        old = check_resume_config(ckpt["config"], cfg, path, allow_changed=allow)
        changes = [{"field": k, "old": getattr(old, k), "new": getattr(cfg, k), "update": ckpt["update"]}
                   for k in allow if getattr(old, k) != getattr(cfg, k)]
        check_resume_extra(ckpt["extra"], self._batches(), where)
        check_same_model(ckpt["extra"].get(FP), self._fingerprint, reuse=False, where=where)
        new_optimizer = any(c["field"] == "optimizer" for c in changes)  # a new kind of optimizer starts from scratch
        load_states(ckpt, self.model, self.optimizer, where, new_optimizer=new_optimizer,
                    lr=cfg.lr, weight_decay=cfg.weight_decay)  # the config's values (equal unless allowed to change)
        self.epoch, self.updates = ckpt["epoch"], ckpt["update"]
        self.history = [migrate_record(r) for r in ckpt["metrics"].get("history", [])]  # "step" before issue 36
        last = migrate_record(ckpt["metrics"].get("last"))
        self._last_row = last if isinstance(last, dict) else (self.history[-1] if self.history else None)
        extra = ckpt["extra"]
        self._resume_batch = int(extra.get("batch", 0))
        self._partial = dict(extra["partial"]) if self._resume_batch else None
        restore_rng_state(ckpt["rng"], where=where)
        aug_state = ckpt["rng"].get("generators", {}).get("augment") if self._resume_batch else None
        # Generator.set_state takes a CPU ByteTensor (a no-op here, as the checkpoint is read onto
        # the CPU; kept so that a state loaded onto a GPU never reaches set_state)
        self._aug_state = aug_state.cpu() if aug_state is not None else None
        self._monitor.load_state_dict(extra.get("divergence"))
        self._fingerprint = adopt_fingerprint(extra.get(FP), self._fingerprint)
        earlier = extra.get("changes")
        self._changes = ([migrate_record(c) for c in earlier] if isinstance(earlier, list) else []) + changes
        self._last_good, self._last_good_at = path, (self.epoch, self.updates, self._resume_batch)
        if changes and self.is_main and not cfg.quiet:
            print(f"resuming {where} at update {self.updates} with changed settings (allowed): {format_changes(changes)}"
                  + ("; the new optimizer starts without state" if any(c["field"] == "optimizer" for c in changes) else ""),
                  flush=True)
        return ckpt

    # ------------------------------------------------------------------ the loop
    def fit(self, resume: bool = False, overwrite: bool = False, allow_changed=()) -> dict:
        """Train to ``config.epochs`` (or ``max_updates``) and return a summary dict.

        ``resume=True`` continues from ``<out_dir>/checkpoint.pt`` (CheckpointError when it
        is missing or does not fit; ``allow_changed``: fields among lr, optimizer, weight_decay
        that may differ). Without it, a complete run of the same config and model there is reused
        (loaded, ``reused`` True, nothing trained: :mod:`seq2d.train.fingerprint`; another model:
        ModelChangedError), any other checkpoint raises
        RunExistsError (a FileExistsError) unless ``overwrite=True`` (then it is deleted first).
        The run folder is locked meanwhile (RunLockedError when another live run holds it)."""
        cfg = self.config
        allow = parse_allow_changed(allow_changed, where="allow_changed")
        if allow and not resume:
            raise InvalidValue(spell("allow_changed only applies when resuming: pass resume=True",
                                     "--allow-changed only applies when resuming: add --resume"))
        if resume and not self.checkpoint_path.exists() and not self.out_dir.is_dir():
            raise CheckpointError(f"cannot resume: the run folder {str(self.out_dir)!r} does not exist, so there is no "
                                  f"checkpoint {str(self.checkpoint_path)!r} to resume from (start "
                                  + spell("without resume=True)", "without --resume)"))
        with run_settings(cfg, self.dist) as (self.num_threads, why):
            self._lock()
            try:
                if self.is_main and not cfg.quiet:
                    print(f"torch threads: {self.num_threads} ({why})", flush=True)
                return self._fit_locked(resume, overwrite, allow)
            finally:
                if self.rundir is not None:
                    self.rundir.release()

    def _lock(self) -> None:
        """Rank 0 takes the folder's lock; every rank learns whether it did."""
        err = None
        if self.is_main:
            self.rundir = RunDir(self.out_dir)
            try:
                self.rundir.acquire()
            except RunLockedError as e:
                self.rundir, err = None, e
        if self.dist.distributed:
            flag = torch.tensor([0.0 if err is None else 1.0], device=self.device)
            self.dist.all_reduce_sum(flag)
            if flag.item() and err is None:
                raise RunLockedError(f"rank 0 could not lock the run folder {str(self.out_dir)!r} (see its message)")
        if err is not None:
            raise err

    def _fit_locked(self, resume: bool, overwrite: bool, allow: tuple) -> dict:
        cfg = self.config
        if resume:
            self.load(allow_changed=allow)
        else:
            if self.checkpoint_path.exists() and not overwrite:
                record = read_record(self.out_dir)  # every rank reads it: all take the same branch
                if is_finished_run(record, cfg):
                    return self._reuse(record)
                raise run_exists_error(self.checkpoint_path, record, cfg)
            if self.is_main and overwrite:
                self.checkpoint_path.unlink(missing_ok=True)
            seed_everything(cfg.seed)
        if self.is_main:
            save_config(cfg, self.out_dir / "config.toml")
            write_metrics(self.out_dir, self.history)
            self._record("running")
        self.dist.barrier()  # every rank sees the folder, and no rank runs ahead of a resume
        _call(self.callbacks, "on_train_start", self)
        try:
            for epoch in range(self.epoch, cfg.epochs):
                if cfg.max_updates is not None and self.updates >= cfg.max_updates:
                    break
                if not self._run_epoch(epoch):
                    break
        except DivergenceError:
            self._record("diverged")
            raise
        except KeyboardInterrupt:
            self._record("interrupted")
            raise
        except BaseException as e:
            self._record("failed", error=f"{type(e).__name__}: {e}")
            raise
        summary = self.summary()
        self._record(summary["status"])
        _call(self.callbacks, "on_train_end", self, summary)
        return summary

    def _reuse(self, record: dict | None) -> dict:
        """Load the complete run of this config and model in ``out_dir`` (``record``: its ``run.json``, as read);
        its summary, nothing trained or written."""
        recorded = (record or {}).get(FP)
        check_same_model(recorded, self._fingerprint, reuse=True, where=str(self.out_dir))  # ModelChangedError
        self.load()
        summary = {**self.summary(), "reused": True}
        if self.is_main and not self.config.quiet:
            print(reuse_line(summary), flush=True)
        return summary

    def _record(self, status: str, **extra) -> None:
        if self.is_main and self.rundir is not None:
            self.rundir.write_record(self.config, status, epoch=self.epoch, update=self.updates, changes=self._changes,
                                     **{FP: self._fingerprint}, **extra)

    def _extra(self, batch: int, partial: dict | None = None) -> dict:
        extra = {"batch": batch, "divergence": self._monitor.state_dict(), "changes": self._changes,
                 FP: self._fingerprint}
        if batch:
            extra["partial"] = partial
        return extra

    def _run_epoch(self, epoch: int) -> bool:
        """One epoch (from ``self._resume_batch``); False when ``max_updates`` stopped it early."""
        cfg, W, rank = self.config, self.dist.world_size, self.dist.rank
        X, y = self.train_data
        N, B = X.shape[0], cfg.batch_size
        nb = self._batches()
        perm = epoch_permutation(N, cfg.seed, epoch).to(self.device)
        aug_gen = augment_generator(cfg.seed, epoch, rank, self.device) if self.augment is not None else None
        gens = {"augment": aug_gen} if aug_gen is not None else None
        start = self._resume_batch
        if self._aug_state is not None and aug_gen is not None:
            aug_gen.set_state(self._aug_state.cpu())  # a CPU ByteTensor, whatever the generator's device
        sums = dict(self._partial) if self._partial else {"loss": 0.0, "correct": 0, "count": 0, "time": 0.0}
        self._resume_batch, self._partial, self._aug_state = 0, None, None

        bar = EpochBar(self.is_main and not cfg.quiet, tty=sys.stderr.isatty(), total=nb, initial=start,
                       desc=f"epoch {epoch + 1}/{cfg.epochs}", log_every=cfg.log_every)
        t0 = time.perf_counter()
        self.train_model.train()
        done = start
        stopped = False
        sync_every = sync_interval(self.host_sync_every, self.device, cfg.log_every)
        pending = UpdateStats(sums, self._monitor,
                              lambda cls, what, update: self._diverged(cls, what, epoch, bar, nb, update=update),
                              lambda update, kb: f"at epoch {epoch + 1}, update {update} (batch {kb + 1} of {nb})")
        flush = pending.flush

        for k in range(start, nb):
            idx = perm[k * B:(k + 1) * B]
            b = idx.numel()
            local = idx.tensor_split(W)[rank] if W > 1 else idx
            xb, yb = X[local], y[local]
            if aug_gen is not None:
                xb = self.augment(xb, aug_gen)
            count = b * self.targets_per_sample
            # the same updates are read on every rank; with sync_every 1 (CPU) before the backward pass
            now = (self.updates + 1) % sync_every == 0 or k + 1 == nb

            def queue(stats, update=self.updates + 1, k=k, count=count, now=now):
                if W > 1:
                    self.dist.all_reduce_sum(stats)
                pending.add(stats, update, k, count, flush=now)

            # DDP averages gradients over W ranks: scaling by W / count makes that average the
            # mean over the global batch, whatever the slice sizes.
            train_update(self.train_model, self.criterion, self.optimizer, xb, yb, scale=W / count, before_backward=queue)
            self.updates += 1
            done = k + 1
            _call(self.callbacks, "on_update_end", self, self.updates)
            # one process: the bar reads the pending stats when it shows them (its heartbeat is
            # timed); under DDP every rank must check the same updates, so it shows what was read
            bar.update(self.updates, done, sums if self.dist.distributed else flush)
            if cfg.max_updates is not None and self.updates >= cfg.max_updates and done < nb:
                stopped = True
                break
            if cfg.checkpoint_every is not None and self.updates % cfg.checkpoint_every == 0 and done < nb:
                flush()  # no checkpoint after an unchecked update; it stores the sums and the monitor
                partial = dict(sums, time=sums["time"] + time.perf_counter() - t0)
                self._save(epoch, rows=self.history, extra=self._extra(done, partial), generators=gens)
        flush()
        bar.close()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        sums["time"] += time.perf_counter() - t0

        test = self.evaluate()
        if not math.isfinite(test["loss"]):
            self._diverged(NonFiniteLossError, f"the test loss is {test['loss']} after epoch {epoch + 1} (update "
                           f"{self.updates}): the weights are no longer finite", epoch, None, nb)
        row = {
            "epoch": epoch + 1 if not stopped else round(epoch + done / nb, 6),
            "update": self.updates,
            "train_loss": sums["loss"] / max(sums["count"], 1),
            "train_acc": sums["correct"] / max(sums["count"], 1),
            "test_loss": test["loss"],
            "test_acc": test["acc"],
            "epoch_time_s": round(sums["time"], 4),
            "lr": self.optimizer.param_groups[0]["lr"],
            "device": str(self.device),
            "world_size": W,
            "num_threads": self.num_threads,
        }
        since = self.history[-1]["update"] if self.history else -1
        pending = [c for c in self._changes if isinstance(c, dict) and c.get("update", -1) >= since]
        if pending:  # settings changed on resume since the last row
            row["changes"] = format_changes(pending)
        for cb in self.callbacks:  # each sees the extra metrics of those before it
            extra = _call([cb], "on_epoch_end", self, epoch + 1, row)
            row.update(extra[0] if extra and isinstance(extra[0], Mapping) else {})
        self._last_row = row
        if not stopped and epoch + 1 == cfg.epochs and self.is_main:  # before the checkpoint that marks it complete
            write_predictions(self.out_dir, predict(self.model, *self.test_data, cfg.eval_batch_size), epoch + 1)
        if stopped:
            self._save(epoch, rows=self.history + [row], extra=self._extra(done, sums), generators=gens)
        else:
            self.history.append(row)
            self.epoch = epoch + 1
            self._save(self.epoch, rows=self.history, extra=self._extra(0))
        if self.is_main and not cfg.quiet:
            print(epoch_line(row, cfg.epochs, self.updates) + ("  (stopped by max_updates)" if stopped else ""), flush=True)
        return not stopped

    def _save(self, epoch: int, *, rows: list[dict], extra: dict, generators=None) -> None:
        if self.is_main:
            best = max(self.history, key=lambda r: r["test_acc"]) if self.history else None
            save_checkpoint(
                self.checkpoint_path,
                model=self.model,
                optimizer=self.optimizer,
                epoch=epoch,
                update=self.updates,
                config=config_to_dict(self.config),
                rng=capture_rng_state(generators),
                metrics={"history": self.history, "best": best, "last": self._last_row},
                extra=extra,
            )
            write_metrics(self.out_dir, rows)
            self._record("running")  # run.json's progress = the checkpoint's (what a resume reports)
        self._last_good, self._last_good_at = self.checkpoint_path, (epoch, self.updates, extra.get("batch", 0))
        self.dist.barrier()

    def _diverged(self, cls, what: str, epoch: int, bar, nb: int, update: int | None = None) -> None:
        if bar is not None:
            bar.close()
        good = self._last_good if self._last_good is not None and self._last_good.exists() else None
        if good is not None:
            e, s, b = self._last_good_at
            at = f"after {e} epochs, update {s}" if not b else f"epoch {e + 1}, batch {b} of {nb}, update {s}"
            where = f"The last good checkpoint, {str(good)!r} ({at}), is kept unchanged"
        else:
            where = "No checkpoint was written yet (the run stopped before its first checkpoint)"
        raise cls(f"stopping: {what}. {where}. Try a smaller lr (now {self.config.lr}) or check the data.",
                  epoch=epoch + 1, update=self.updates + 1 if update is None else update, checkpoint=good)

    @torch.no_grad()
    def evaluate(self, X: Tensor | None = None, y: Tensor | None = None) -> dict:
        """Mean loss and accuracy on the test set (or ``X, y``), summed over ranks (each rank
        evaluates a disjoint slice)."""
        if X is None:
            X, y = self.test_data
        n = X.shape[0]
        lo, hi = n * self.dist.rank // self.dist.world_size, n * (self.dist.rank + 1) // self.dist.world_size
        was_training = self.model.training
        self.model.eval()
        loss = torch.zeros((), dtype=torch.float64, device=self.device)
        correct = torch.zeros((), dtype=torch.float64, device=self.device)
        for i in range(lo, hi, self.config.eval_batch_size):
            j = min(i + self.config.eval_batch_size, hi)
            ls, c = self.criterion(self.model(X[i:j]), y[i:j])
            loss += ls.double()
            correct += c.double()
        self.model.train(was_training)
        t = torch.stack([loss, correct, torch.tensor(float((hi - lo) * self.targets_per_sample), dtype=torch.float64, device=self.device)])
        self.dist.all_reduce_sum(t)
        total, corr, count = t.tolist()
        return {"loss": total / count, "acc": corr / count}

    def summary(self) -> dict:
        """What the run reached. ``status`` is "complete" (``config.epochs`` done) or "partial"
        (stopped by ``max_updates``: ``final_test_acc`` is then the evaluation where it stopped,
        and ``time_per_epoch_s`` is extrapolated from the partial epoch when no epoch finished)."""
        h = self.history
        last = self._last_row
        partial_row = last if last is not None and (not h or last.get("update", -1) > h[-1]["update"]) else None
        evaluated = h + ([partial_row] if partial_row is not None else [])
        final = evaluated[-1] if evaluated else None
        best = max(evaluated, key=lambda r: r["test_acc"]) if evaluated else None
        if h:
            per_epoch = sum(r["epoch_time_s"] for r in h) / len(h)
        elif partial_row is not None:
            frac = partial_row["epoch"] - math.floor(partial_row["epoch"])
            per_epoch = partial_row["epoch_time_s"] / frac if frac > 0 else partial_row["epoch_time_s"]
        else:
            per_epoch = None
        complete = self.epoch >= self.config.epochs
        num = getattr(self.model, "num_parameters", None)
        return {
            "status": "complete" if complete else "partial",
            "complete": complete,
            "stopped_by": None if complete else "max_updates",
            "final_test_acc": final["test_acc"] if final else None,
            "final_test_loss": final["test_loss"] if final else None,
            "best_test_acc": best["test_acc"] if best else None,
            "best_epoch": best["epoch"] if best else None,
            "epochs": self.epoch,
            "updates": self.updates,
            "time_per_epoch_s": per_epoch,
            "params": num() if callable(num) else sum(p.numel() for p in self.model.parameters() if p.requires_grad),
            "device": str(self.device),
            "world_size": self.dist.world_size,
            "num_threads": self.num_threads,
            "out_dir": str(self.out_dir),
            "checkpoint": str(self.checkpoint_path),
            "config_hash": config_hash(self.config),
            "changes": list(self._changes),
            "history": list(h),
        }


def train(config: TrainConfig, model: nn.Module, data, *, augment: Callable | None = None, callbacks: Sequence = (),
          resume: bool = False, overwrite: bool = False, dist: DistContext | OneProcess | None = None,
          allow_changed=()) -> dict:
    """``Trainer(config, model, data, ...).fit(resume, overwrite, allow_changed)``: train and return the summary."""
    return Trainer(config, model, data, augment=augment, callbacks=callbacks, dist=dist).fit(
        resume=resume, overwrite=overwrite, allow_changed=allow_changed)


def run(config: TrainConfig, *, resume: bool = False, overwrite: bool = False, callbacks: Sequence = (),
        allow_changed=()) -> dict:
    """The whole run from a config: start torch.distributed when under torchrun (else a :class:`OneProcess`),
    build the model (:func:`build_model`), load the data (:func:`load_data`; with ``download``, rank 0
    first), train, clean up."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        ctx = init_distributed(config.dist_backend, config.device)
    else:
        ctx = OneProcess(resolve_device(config.device, 0))
    try:
        model = build_model(config)
        first = config.download and ctx.distributed  # rank 0 fetches, the others wait for it
        if first and not ctx.is_main:
            ctx.barrier()
        data = load_data(config, ctx.device)
        if first and ctx.is_main:
            ctx.barrier()
        summary = train(config, model, data, augment=make_augment(config), callbacks=callbacks,
                        resume=resume, overwrite=overwrite, dist=ctx, allow_changed=allow_changed)
    except DivergenceError:
        ctx.close()  # every rank sees the same (all-reduced) loss, so all stop together
        raise
    except BaseException:
        ctx.close(sync=False)
        raise
    ctx.close()
    return summary
