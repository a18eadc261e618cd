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
``max_steps`` in the middle of an epoch stores its batch index, the augmentation
generator and the partial sums, so it resumes exactly too.

**Non-finite loss.** Every step's loss (summed over ranks) is checked before the backward
pass; a NaN/inf raises :class:`NonFiniteLossError` naming the epoch, the step and the last
good checkpoint, which is left as it was. A non-finite test loss (weights gone bad within
an epoch) raises the same way, before that epoch's checkpoint is written.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InvalidType, InvalidValue, MissingFile
from .checkpoint import (
    CheckpointError,
    capture_rng_state,
    check_resume_config,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from .config import TrainConfig, config_to_dict, save_config
from .datasets import load_data, make_augment, split_data, synthetic_data
from .distributed import DistContext, all_reduce_sum, barrier, cleanup, init_distributed, wrap_model
from .errors import NonFiniteLossError
from .metrics import METRIC_COLUMNS, read_metrics, write_metrics
from .progress import EpochBar, epoch_line
from .runtime import run_settings
from .seeds import derive_seed, epoch_permutation, seed_everything

__all__ = [
    "Trainer",
    "train",
    "run",
    "NonFiniteLossError",
    "METRIC_COLUMNS",
    "build_model",
    "load_data",
    "make_augment",
    "synthetic_data",
    "derive_seed",
    "epoch_permutation",
    "write_metrics",
    "read_metrics",
]


# ---------------------------------------------------------------------- model
def _is_spec_path(name: str) -> bool:
    return name.lower().endswith((".toml", ".json")) or (":" not in name and Path(name).is_file())


# config field -> constructor keyword(s) it feeds, when the constructor names one of them
_MODEL_KWARGS = {
    "sizes": ("sizes",),
    "activation": ("activation",),
    "granularity": ("granularity",),
    "tile": ("tile",),
    "region": ("region",),
    "backend": ("backend",),
    "iterations": ("iterations", "steps"),
}


def build_model(cfg: TrainConfig, *, device=None) -> nn.Module:
    """The model ``cfg.model`` names (:func:`seq2d.models.resolve_model`), built from
    ``cfg.model_seed`` (None = ``cfg.seed``).

    - a registered name (``seq2d.list_models()``, e.g. "mlp", "random"): the constructor is
      called with the config fields its signature names (``sizes``, ``activation``,
      ``granularity``, ``tile``, ``region``, ``backend`` unless "auto",
      ``iterations``/``steps`` unless None, ``seed`` = the model seed); "random" is
      :func:`seq2d.models.random.random_model`, ``randomize(mlp(sizes, activation))``;
    - a preset string (``"mlp:784,256,10"``, see :mod:`seq2d.models.presets`) or a spec file
      path (.toml/.json, :func:`seq2d.from_spec`): its structure comes from the string/file.

    The global RNG is seeded with the model seed while building and restored after. A model
    field set away from its default that the builder does not use raises ValueError (never
    silently ignored), except ``iterations``, which is then applied as ``model.steps``.
    """
    from ..models import constructor_options, list_models, resolve_model

    defaults = TrainConfig()
    seed = cfg.effective_model_seed()
    changed = [k for k in _MODEL_KWARGS if k != "iterations" and getattr(cfg, k) != getattr(defaults, k)]
    consumed: set[str] = set()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cfg.model in list_models():
            available = {f: (names, getattr(cfg, f)) for f, names in _MODEL_KWARGS.items()
                         if not ((f == "backend" and cfg.backend == "auto") or (f == "iterations" and cfg.iterations is None))}
            available["seed"] = (("seed",), seed)
            kwargs, consumed = constructor_options(cfg.model, available)
            consumed.discard("seed")
            model = resolve_model(cfg.model, **kwargs)
            source = "not in its signature"
        elif _is_spec_path(cfg.model) or ":" in cfg.model:
            if _is_spec_path(cfg.model) and not Path(cfg.model).is_file():
                raise MissingFile(f"config field 'model': the spec file {cfg.model!r} does not exist")
            model = resolve_model(cfg.model)
            source = "its structure comes from the preset string or spec file"
        else:
            raise InvalidValue(
                f"config field 'model': unknown model {cfg.model!r}. Select from "
                + ", ".join(repr(m) for m in list_models())
                + ", a preset string such as 'mlp:784,256,10', or the path of a spec file (.toml/.json)"
            )
    ignored = [k for k in changed if k not in consumed]
    if ignored:
        raise InvalidValue(
            f"config field(s) {', '.join(map(repr, ignored))} are set, but model {cfg.model!r} does not use them "
            f"({source}); leave them at their defaults"
        )
    if cfg.iterations is not None and "iterations" not in consumed:
        from ..arguments import check_steps
        from ..core import core_of

        try:
            target = core_of(model)
        except TypeError:
            raise InvalidValue(f"config field 'iterations' is set, but a {type(model).__name__} has no Sequential2D steps to set") from None
        target.steps = check_steps(cfg.iterations)
    if device is not None:
        model = model.to(device)
    return model


# ---------------------------------------------------------------------- the trainer
def classification_loss(out: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """(summed cross-entropy, number of correct argmax predictions) over the last dimension."""
    logits = out.reshape(-1, out.shape[-1])
    t = y.reshape(-1)
    return F.cross_entropy(logits, t, reduction="sum"), (logits.argmax(-1) == t).sum()


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
            ``on_step_end(trainer, step)`` (after each optimizer step; e.g. a projection
            of the weights), ``on_epoch_end(trainer, epoch, row)`` (may return a dict of
            extra metrics for the row), ``on_train_end(trainer, summary)``.
        dist: the :class:`~seq2d.train.distributed.DistContext` (default: an already started
            process group, else a single process).
        criterion: ``(output, y) -> (summed loss, number correct)``; default cross-entropy.

    Attributes used by callbacks: ``model``, ``optimizer``, ``config``, ``epoch``
    (completed epochs), ``step`` (optimizer steps), ``device``, ``dist``, ``history``.
    """

    def __init__(self, config: TrainConfig, model: nn.Module, data, *, augment: Callable | None = None,
                 callbacks: Sequence = (), dist: DistContext | None = None,
                 criterion: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None) -> None:
        if not isinstance(config, TrainConfig):
            raise InvalidType(f"config must be a TrainConfig, got {type(config).__name__}")
        if not isinstance(model, nn.Module):
            raise InvalidType(f"model must be an nn.Module, got {type(model).__name__}")
        if augment is not None and not callable(augment):
            raise InvalidType(f"augment must be callable (xb, generator) -> xb, got {type(augment).__name__}")
        self.config = cfg = config
        self.dist = dist if dist is not None else DistContext.current(cfg.device)
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
            raise InvalidValue(
                f"the model takes {fin} input features but the data has {Xtr.shape[1]} per sample "
                f"(for images: sizes[0] must be image_size**2 = {cfg.image_size ** 2})"
            )
        self.targets_per_sample = ytr[0].numel()
        self.augment = augment
        self.callbacks = tuple(callbacks)
        self.criterion = criterion or classification_loss
        self.optimizer = self._make_optimizer()
        self.train_model = wrap_model(self.model, self.dist, self.train_data[0][:2]) if self.dist.distributed else self.model
        self.out_dir = cfg.run_dir()
        self.checkpoint_path = self.out_dir / "checkpoint.pt"
        self.epoch = 0  # completed epochs
        self.step = 0  # optimizer steps
        self.history: list[dict] = []
        self._resume_batch = 0  # batches already done in epoch self.epoch (max_steps stops)
        self._partial: dict | None = None
        self._aug_state: Tensor | None = None
        self._last_good: Path | None = None
        self.num_threads: int = torch.get_num_threads()  # set for the run by fit()

    # ------------------------------------------------------------------ setup
    def _make_optimizer(self) -> torch.optim.Optimizer:
        cfg = self.config
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise InvalidValue("the model has no trainable parameters")
        if cfg.optimizer == "adam":
            return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)

    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    def _aug_generator(self, epoch: int) -> torch.Generator:
        g = torch.Generator(device=self.device)
        g.manual_seed(derive_seed(self.config.seed, "augment", epoch, self.dist.rank))
        return g

    def load(self, path: str | os.PathLike | None = None) -> dict:
        """Restore model, optimizer, counters, metrics and RNG states from a checkpoint
        (default ``<out_dir>/checkpoint.pt``), after checking its config against ours."""
        path = Path(path) if path is not None else self.checkpoint_path
        ckpt = load_checkpoint(path, map_location=self.device)
        check_resume_config(ckpt["config"], self.config, path)
        try:
            self.model.load_state_dict(ckpt["model"])
        except RuntimeError as e:
            raise CheckpointError(f"the model in {str(path)!r} does not fit this model: {e}") from e
        try:
            self.optimizer.load_state_dict(ckpt["optimizer"])
        except (ValueError, KeyError) as e:
            raise CheckpointError(f"the optimizer state in {str(path)!r} does not fit this optimizer: {e}") from e
        self.epoch, self.step = ckpt["epoch"], ckpt["step"]
        self.history = list(ckpt["metrics"].get("history", []))
        extra = ckpt["extra"]
        self._resume_batch = int(extra.get("batch", 0))
        self._partial = extra.get("partial") if self._resume_batch else None
        restore_rng_state(ckpt["rng"])
        self._aug_state = ckpt["rng"].get("generators", {}).get("augment") if self._resume_batch else None
        self._last_good = path
        return ckpt

    # ------------------------------------------------------------------ the loop
    def fit(self, resume: bool = False, overwrite: bool = False) -> dict:
        """Train to ``config.epochs`` (or ``max_steps``) and return a summary dict.

        ``resume=True`` continues from ``<out_dir>/checkpoint.pt`` (CheckpointError when it
        is missing or does not fit). Without it, an existing checkpoint there raises
        FileExistsError unless ``overwrite=True`` (then it is deleted first)."""
        cfg = self.config
        with run_settings(cfg, self.dist) as (self.num_threads, why):
            if self.is_main and not cfg.quiet:
                print(f"torch threads: {self.num_threads} ({why})", flush=True)
            if resume:
                self.load()
            else:
                if self.checkpoint_path.exists() and not overwrite:
                    raise FileExistsError(
                        f"{str(self.checkpoint_path)!r} exists: pass resume=True (--resume) to continue that run, "
                        "overwrite=True (--overwrite) to start afresh, or choose another out_dir/name"
                    )
                if self.is_main and overwrite:
                    self.checkpoint_path.unlink(missing_ok=True)
                seed_everything(cfg.seed)
            if self.is_main:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                save_config(cfg, self.out_dir / "config.toml")
                write_metrics(self.out_dir, self.history)
            barrier(self.dist)  # every rank sees the folder, and no rank runs ahead of a resume
            _call(self.callbacks, "on_train_start", self)
            for epoch in range(self.epoch, cfg.epochs):
                if cfg.max_steps is not None and self.step >= cfg.max_steps:
                    break
                if not self._run_epoch(epoch):
                    break
            summary = self.summary()
            _call(self.callbacks, "on_train_end", self, summary)
        return summary

    def _run_epoch(self, epoch: int) -> bool:
        """One epoch (from ``self._resume_batch``); False when ``max_steps`` stopped it early."""
        cfg, W, rank = self.config, self.dist.world_size, self.dist.rank
        X, y = self.train_data
        N, B = X.shape[0], cfg.batch_size
        nb = -(-N // B)
        perm = epoch_permutation(N, cfg.seed, epoch).to(self.device)
        aug_gen = self._aug_generator(epoch) if self.augment is not None else None
        start = self._resume_batch
        if self._aug_state is not None and aug_gen is not None:
            aug_gen.set_state(self._aug_state)
        sums = dict(self._partial) if self._partial else {"loss": 0.0, "correct": 0, "count": 0, "time": 0.0}
        self._resume_batch, self._partial, self._aug_state = 0, None, None

        bar = EpochBar(self.is_main and not cfg.quiet and sys.stderr.isatty(), total=nb, initial=start,
                       desc=f"epoch {epoch + 1}/{cfg.epochs}", log_every=cfg.log_every)
        t0 = time.perf_counter()
        self.train_model.train()
        done = start
        stopped = False
        for k in range(start, nb):
            idx = perm[k * B:(k + 1) * B]
            b = idx.numel()
            local = idx.tensor_split(W)[rank] if W > 1 else idx
            xb, yb = X[local], y[local]
            if aug_gen is not None:
                xb = self.augment(xb, aug_gen)
            out = self.train_model(xb)
            loss_sum, correct = self.criterion(out, yb)
            stats = torch.stack([loss_sum.detach().double(), correct.detach().double()])
            all_reduce_sum(stats, self.dist)
            loss_total, correct_total = stats.tolist()
            if not math.isfinite(loss_total):
                self._nonfinite(f"the training loss is {loss_total} at epoch {epoch + 1}, step {self.step + 1} "
                                f"(batch {k + 1} of {nb})", epoch, bar)
            count = b * self.targets_per_sample
            self.optimizer.zero_grad(set_to_none=True)
            # DDP averages gradients over W ranks: scaling by W / count makes that average the
            # mean over the global batch, whatever the slice sizes.
            (loss_sum * (W / count)).backward()
            self.optimizer.step()
            self.step += 1
            done = k + 1
            sums["loss"] += loss_total
            sums["correct"] += int(correct_total)
            sums["count"] += count
            _call(self.callbacks, "on_step_end", self, self.step)
            bar.update(self.step, done, sums)
            if cfg.max_steps is not None and self.step >= cfg.max_steps and done < nb:
                stopped = True
                break
        bar.close()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        sums["time"] += time.perf_counter() - t0

        test = self.evaluate()
        if not math.isfinite(test["loss"]):
            self._nonfinite(f"the test loss is {test['loss']} after epoch {epoch + 1} (step {self.step}): "
                            "the weights are no longer finite", epoch, None)
        row = {
            "epoch": epoch + 1 if not stopped else round(epoch + done / nb, 6),
            "step": self.step,
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
        for extra in _call(self.callbacks, "on_epoch_end", self, epoch + 1, row):
            if isinstance(extra, Mapping):
                row.update(extra)
        if stopped:
            self._save(epoch, rows=self.history + [row], extra={"batch": done, "partial": sums},
                       generators={"augment": aug_gen} if aug_gen is not None else None)
        else:
            self.history.append(row)
            self.epoch = epoch + 1
            self._save(self.epoch, rows=self.history, extra={"batch": 0})
        if self.is_main and not cfg.quiet:
            print(epoch_line(row, cfg.epochs, self.step), flush=True)
        return not stopped

    def _save(self, epoch: int, *, rows: list[dict], extra: dict, generators=None) -> None:
        if self.is_main:
            best = max(self.history, key=lambda r: r["test_acc"]) if self.history else None
            save_checkpoint(
                self.checkpoint_path,
                model=self.model,
                optimizer=self.optimizer,
                epoch=epoch,
                step=self.step,
                config=config_to_dict(self.config),
                rng=capture_rng_state(generators),
                metrics={"history": self.history, "best": best, "last": rows[-1] if rows else None},
                extra=extra,
            )
            write_metrics(self.out_dir, rows)
        self._last_good = self.checkpoint_path
        barrier(self.dist)

    def _nonfinite(self, what: str, epoch: int, bar) -> None:
        if bar is not None:
            bar.close()
        good = self._last_good if self._last_good is not None and self._last_good.exists() else None
        where = (f"The last good checkpoint, {str(good)!r} (after {self.epoch} epochs, step "
                 f"{self.history[-1]['step'] if self.history else 0}), is kept unchanged"
                 if good else "No checkpoint was written yet (the run failed in its first epoch)")
        raise NonFiniteLossError(
            f"stopping: {what}. {where}. Try a smaller lr (now {self.config.lr}) or check the data.",
            epoch=epoch + 1, step=self.step + 1, checkpoint=good,
        )

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
        all_reduce_sum(t, self.dist)
        total, corr, count = t.tolist()
        return {"loss": total / count, "acc": corr / count}

    def summary(self) -> dict:
        h = self.history
        best = max(h, key=lambda r: r["test_acc"]) if h else None
        num = getattr(self.model, "num_parameters", None)
        return {
            "final_test_acc": h[-1]["test_acc"] if h else None,
            "final_test_loss": h[-1]["test_loss"] if h else None,
            "best_test_acc": best["test_acc"] if best else None,
            "best_epoch": best["epoch"] if best else None,
            "epochs": self.epoch,
            "steps": self.step,
            "time_per_epoch_s": sum(r["epoch_time_s"] for r in h) / len(h) if h else None,
            "params": num() if callable(num) else sum(p.numel() for p in self.model.parameters() if p.requires_grad),
            "device": str(self.device),
            "world_size": self.dist.world_size,
            "num_threads": self.num_threads,
            "out_dir": str(self.out_dir),
            "checkpoint": str(self.checkpoint_path),
            "history": list(h),
        }


def train(config: TrainConfig, model: nn.Module, data, *, augment: Callable | None = None, callbacks: Sequence = (),
          resume: bool = False, overwrite: bool = False, dist: DistContext | None = None) -> dict:
    """``Trainer(config, model, data, ...).fit(resume, overwrite)``: train and return the summary."""
    return Trainer(config, model, data, augment=augment, callbacks=callbacks, dist=dist).fit(resume=resume, overwrite=overwrite)


def run(config: TrainConfig, *, resume: bool = False, overwrite: bool = False, callbacks: Sequence = ()) -> dict:
    """The whole run from a config: start torch.distributed when under torchrun, build the
    model (:func:`build_model`), load the data (:func:`load_data`), train, clean up."""
    ctx = init_distributed(config.dist_backend, config.device)
    try:
        model = build_model(config)
        data = load_data(config, ctx.device, ctx)
        summary = train(config, model, data, augment=make_augment(config), callbacks=callbacks,
                        resume=resume, overwrite=overwrite, dist=ctx)
    except NonFiniteLossError:
        cleanup(ctx)  # every rank sees the same (all-reduced) loss, so all stop together
        raise
    except BaseException:
        cleanup(ctx, sync=False)
        raise
    cleanup(ctx)
    return summary
