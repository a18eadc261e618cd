r"""Seed-vectorised training: ``k`` copies of one model config, differing only in their seed,
trained as one batched computation (what lets one GPU run the 5 seeds of a protocol at once)::

    summaries = train_seeds(cfg, [0, 1, 2, 3, 4])   # one Trainer.fit() summary per seed
    summaries = train_copies(configs)               # or configs equal but for seed and outputs

Copy ``c`` is the run ``Trainer(configs[c], ...)`` makes: its model is built from its own
(model) seed, its data order is ``epoch_permutation(N, seed_c, e)`` and its augmentation draws
come from its own generator seeded ``(seed_c, "augment", e, 0)``; only the arithmetic is
batched. One update is equivalent to the following::

    for c in range(k):                      # k = number of copies, b = this batch's size
        idx = perm[c][kb * B:(kb + 1) * B]
        xb, yb = augment(X[idx], gen[c]), y[idx]
        loss[c] = criterion(model_c(xb), yb)[0] / (b * targets per sample)
    sum(loss).backward()                    # the copies share no tensor: grad_c = d loss[c] / d params_c
    optimizer.step()                        # Adam/SGD are elementwise: k independent updates

where the ``k`` models are one ``vmap`` of :func:`torch.func.functional_call` over parameters
stacked with a leading copy dimension (the layout of :func:`torch.func.stack_module_state`),
buffers that differ between copies (a random model's masks) stacked the same way and the
others shared, and one optimizer of the copies' kind and settings over the stacked tensors.

Each copy writes its run folder as a single-seed run does (``config.toml``, metrics, ``run.json``
and, after every epoch, ``checkpoint.pt`` with the copy's own weights and optimizer state), so
``Trainer(...).fit(resume=True)`` continues it and a later run of the same config reuses a
complete one. ``epoch_time_s`` is the batched epoch's wall time, shared by the copies (the
row's ``copies`` column says by how many). Tested equal to the single-seed runs, update by update
in float64 (tests/test_vectorized.py).

Refused with :class:`NotVectorizable` (train those seeds one at a time):

- copies that differ in structure: a ``random_tile`` model stores as many tiles as its seed
  places, and its block-sparse product (:mod:`seq2d.sparse.autograd`) has no vmap rule;
- configs that differ in more than ``seed``/``model_seed`` and the output fields; torchrun;
  configs that ask for TensorBoard logging (a Trainer callback).

Not supported here: resume (continue a copy alone with the Trainer), callbacks, models that draw
random numbers in their forward pass (dropout: vmap refuses them). A copy that
diverges stops every copy: it is recorded ``diverged``, the others ``interrupted``, each with
its last epoch's checkpoint intact.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap

from ..errors import InvalidType, InvalidValue
from .builder import build_model
from .config import OUTPUT_FIELDS, TrainConfig, save_config
from .datasets import augment_generator, epoch_permutation, load_data, make_augment, seed_everything
from .distributed import DistContext
from .errors import DivergenceError, NonFiniteLossError, RunExistsError, spell
from .identity import config_diff, format_diff
from .loop import EpochBar, UpdateStats, epoch_line, run_settings, sync_interval, train_update
from .rundir import describe_record, is_finished_run, read_record, write_metrics
from .trainer import Trainer

__all__ = ["NotVectorizable", "seed_configs", "train_seeds", "train_copies", "check_vectorizable"]

# config fields in which the copies may differ
FREE_FIELDS = ("seed", "model_seed") + OUTPUT_FIELDS

_FROM_CONFIG = object()  # augment: make_augment(config), as seq2d.train.run does


class NotVectorizable(InvalidValue):
    """The copies cannot be trained as one batched computation; the message says why."""


def seed_configs(config: TrainConfig, seeds: Sequence[int]) -> list[TrainConfig]:
    """One config per seed: ``seed`` set, run folder ``<run_dir>/seed<s>``, name ``<name>-s<s>``."""
    if not isinstance(config, TrainConfig):
        raise InvalidType(f"config must be a TrainConfig, got {type(config).__name__}")
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise InvalidValue(f"seeds must be a non-empty list of ints, got {seeds!r}")
    return [dataclasses.replace(config, seed=s, name=f"{config.name}-s{s}", out_dir=str(config.run_dir() / f"seed{s}"))
            for s in seeds]


def train_seeds(config: TrainConfig, seeds: Sequence[int], **kwargs) -> list[dict]:
    """:func:`train_copies` of :func:`seed_configs`: the summaries, in the order of ``seeds``."""
    return train_copies(seed_configs(config, seeds), **kwargs)


def check_vectorizable(configs: Sequence[TrainConfig], models: Sequence[nn.Module] | None = None) -> None:
    """Raise :class:`NotVectorizable` unless ``configs`` (and their built ``models``) can be
    trained as one batched computation (see the module docstring)."""
    configs = list(configs)
    if not configs or not all(isinstance(c, TrainConfig) for c in configs):
        raise InvalidType("configs must be a non-empty list of TrainConfigs")
    for c in configs[1:]:
        diff = config_diff(configs[0], c, ignore=FREE_FIELDS)
        if diff:
            raise NotVectorizable(f"the copies' configs may differ only in {', '.join(FREE_FIELDS[:2])} and the output "
                                  f"fields; seed {configs[0].seed} and seed {c.seed} differ in {format_diff(diff)}")
    if any(c.tensorboard is not None for c in configs):
        raise NotVectorizable("TensorBoard logging (tensorboard = DIR) is a Trainer callback, and the batched copies run "
                              "no callbacks; train these seeds one at a time")
    dirs = [c.run_dir().resolve() for c in configs]
    if len(set(dirs)) != len(dirs):
        raise InvalidValue(f"the copies need one run folder each, got {[str(c.run_dir()) for c in configs]}")
    if models is None:
        return
    from ..core import Sequential2D

    for m in models[0].modules():
        if isinstance(m, Sequential2D) and m.store is not None and m.store.block_sparse:
            raise NotVectorizable(
                f"model {configs[0].model!r} (granularity {configs[0].granularity!r}) is block-sparse: its product "
                "(seq2d.sparse.autograd: the custom ops seq2d::bsmm / seq2d::triton_bsmm or the Function BlockSparseMatmul) has no vmap rule, and each seed stores its own number of "
                "tiles, so the copies cannot be stacked; train its seeds one at a time")
    ref = _layout(models[0])
    for c, m in zip(configs[1:], models[1:]):
        other = _layout(m)
        if other != ref:
            bad = next((k for k in dict.fromkeys([*ref, *other]) if ref.get(k) != other.get(k)), "the structure")
            raise NotVectorizable(
                f"the copies differ in structure, so they cannot be stacked: {bad} is {ref.get(bad)} for seed "
                f"{configs[0].seed} and {other.get(bad)} for seed {c.seed}; train these seeds one at a time")


def _layout(model: nn.Module) -> dict:
    """What must agree between copies: the type, every tensor's name/shape/dtype, the grid."""
    from ..core import Sequential2D

    out: dict = {"the model type": type(model).__name__}
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for n, t in named:
            out[f"{kind} {n!r}"] = (tuple(t.shape), str(t.dtype).replace("torch.", ""), t.requires_grad)
    for n, m in model.named_modules():
        if isinstance(m, Sequential2D):
            out[f"the block grid of {n or 'the model'}"] = (m.grid(), m.steps)
    return out


def train_copies(configs: Sequence[TrainConfig], *, build: Callable[[TrainConfig], nn.Module] | None = None,
                 data=None, augment=_FROM_CONFIG, overwrite: bool = False) -> list[dict]:
    """Train the copies (one per config, see the module docstring) and return one summary per
    config, in the format of :meth:`Trainer.fit`'s.

    ``build(config) -> model`` (default :func:`build_model`) and ``data`` (default
    :func:`load_data`; loaded per copy when ``augment_test`` makes the test images depend on the
    seed) and ``augment`` (default :func:`make_augment` of the config) are what
    ``Trainer(config, build(config), data, augment=augment)`` would take. A copy whose folder
    holds a complete run of its config is reused (``reused`` True); another existing
    checkpoint raises RunExistsError unless ``overwrite``."""
    configs = list(configs)
    check_vectorizable(configs)
    cfg = configs[0]
    dist = DistContext.current(cfg.device)
    if dist.distributed:
        raise NotVectorizable("seed-vectorised training runs in one process; under torchrun train one seed per run")
    models = [(build or build_model)(c) for c in configs]
    check_vectorizable(configs, models)
    if data is None:
        shared = None if cfg.augment_test else load_data(cfg, dist.device)
        datas = [shared if shared is not None else load_data(c, dist.device) for c in configs]
    else:
        datas = [data] * len(configs)
    if augment is _FROM_CONFIG:
        augment = make_augment(cfg)
    trainers = [Trainer(c, m, d, augment=augment, dist=dist) for c, m, d in zip(configs, models, datas)]
    with run_settings(cfg, dist) as (threads, why):
        locked = []
        try:
            for t in trainers:
                t.num_threads = threads
                t._lock()
                locked.append(t)
            if not cfg.quiet:
                print(f"torch threads: {threads} ({why}); {len(trainers)} copies (seeds "
                      f"{', '.join(str(c.seed) for c in configs)}) trained as one batch", flush=True)
            return _fit(trainers, overwrite)
        finally:
            for t in locked:
                if t.rundir is not None:
                    t.rundir.release()


def _fit(trainers: list[Trainer], overwrite: bool) -> list[dict]:
    summaries: list = [None] * len(trainers)
    todo = []
    for c, t in enumerate(trainers):
        if t.checkpoint_path.exists() and not overwrite:
            record = read_record(t.out_dir)
            if is_finished_run(record, t.config):
                summaries[c] = t._reuse(record)
                continue
            raise RunExistsError(f"{str(t.checkpoint_path)!r} exists ({describe_record(record)}): "
                                 + spell("pass overwrite=True to start afresh, or continue it alone with "
                                         "Trainer(...).fit(resume=True)", "add --overwrite to start afresh, or "
                                         "continue it alone with seq2d train --resume"))
        todo.append(c)
    run = [trainers[c] for c in todo]
    for t in run:
        t.checkpoint_path.unlink(missing_ok=True)
        save_config(t.config, t.out_dir / "config.toml")
        write_metrics(t.out_dir, [])
        t._record("running")
    if run:
        batch = _Batch(run)
        try:
            batch.fit()
        except DivergenceError:
            for k, t in enumerate(run):
                t._record("diverged" if k in batch.failed else "interrupted")
            raise
        except KeyboardInterrupt:
            for t in run:
                t._record("interrupted")
            raise
        except BaseException as e:
            for t in run:
                t._record("failed", error=f"{type(e).__name__}: {e}")
            raise
        for c, t in zip(todo, run):
            summaries[c] = s = t.summary()
            t._record(s["status"])
    return summaries


class _Batch:
    """The copies' stacked tensors, their optimizer and the batched update."""

    def __init__(self, trainers: list[Trainer]) -> None:
        self.trainers = trainers
        self.k = k = len(trainers)
        first = trainers[0].model
        named = [dict(t.model.named_parameters()) for t in trainers]
        self.params = {n: torch.stack([p[n].detach() for p in named]).requires_grad_(p0.requires_grad)
                       for n, p0 in first.named_parameters()}
        bufs = [dict(t.model.named_buffers()) for t in trainers]
        self.buffers, self.buffer_dims = {}, {}
        for n, b0 in first.named_buffers():
            same = all(torch.equal(b[n], b0) for b in bufs[1:])
            self.buffers[n] = b0 if same else torch.stack([b[n] for b in bufs])
            self.buffer_dims[n] = None if same else 0
        # the copies' optimizer (kind, implementation, settings) over the stacked tensors: Adam and
        # SGD update each entry on its own, so this is k independent optimizers
        opt = trainers[0].optimizer
        order = [n for n, p in first.named_parameters() if p.requires_grad]  # the Trainer's order
        self.optimizer = type(opt)([self.params[n] for n in order], **opt.defaults)
        self.order = order
        # a structural copy of the first model: functional_call swaps the stacked tensors in
        self.template = copy.deepcopy(first)

        def one(params, buffers, x):
            return functional_call(self.template, (params, buffers), (x,))

        self.forward = vmap(one, in_dims=(0, self.buffer_dims, 0))
        self._forward = lambda xb: self.forward(self.params, self.buffers, xb)
        self.criterion = vmap(trainers[0].criterion)
        self.failed: set[int] = set()

    @torch.no_grad()
    def store(self, c: int) -> None:
        """Copy ``c``'s weights and optimizer state into its own model and optimizer."""
        t = self.trainers[c]
        for n, p in t.model.named_parameters():
            p.copy_(self.params[n][c])
        for n, b in t.model.named_buffers():
            if self.buffer_dims.get(n) == 0:
                b.copy_(self.buffers[n][c])
        full = self.optimizer.state_dict()
        shapes = [self.params[n].shape for n in self.order]
        state = {i: {key: (v[c].clone() if torch.is_tensor(v) and v.shape == shapes[i] else
                           v.clone() if torch.is_tensor(v) else v) for key, v in st.items()}
                 for i, st in full["state"].items()}
        t.optimizer.load_state_dict({"state": state, "param_groups": t.optimizer.state_dict()["param_groups"]})

    def save(self, c: int, epoch: int, **kw) -> None:
        self.store(c)
        t = self.trainers[c]
        seed_everything(t.config.seed)  # the global RNG state a single run's checkpoint records
        t._save(epoch, **kw)

    def fit(self) -> None:
        cfg = self.trainers[0].config
        for epoch in range(cfg.epochs):
            if cfg.max_updates is not None and self.trainers[0].updates >= cfg.max_updates:
                break
            if not self.epoch(epoch):
                break

    def epoch(self, epoch: int) -> bool:
        """One epoch of every copy; False when ``max_updates`` stopped it early (Trainer._run_epoch)."""
        ts, k = self.trainers, self.k
        t0, cfg = ts[0], ts[0].config
        X, y = t0.train_data
        N, B = X.shape[0], cfg.batch_size
        nb = t0._batches()
        perms = torch.stack([epoch_permutation(N, t.config.seed, epoch) for t in ts]).to(t0.device)  # (k, N)
        gens = [augment_generator(t.config.seed, epoch, t.dist.rank, t.device) if t.augment is not None else None for t in ts]
        sums = [{"loss": 0.0, "correct": 0, "count": 0, "time": 0.0} for _ in ts]
        pending = [UpdateStats(sums[c], t._monitor, self._fail(c, epoch, nb),
                               lambda update, kb, s=t.config.seed: f"of seed {s} at epoch {epoch + 1}, update {update} "
                                                                   f"(batch {kb + 1} of {nb})")
                   for c, t in enumerate(ts)]
        self.bar = bar = EpochBar(not cfg.quiet, tty=sys.stderr.isatty(), total=nb, initial=0,
                                  desc=f"epoch {epoch + 1}/{cfg.epochs} ({k} seeds)", log_every=cfg.log_every)
        sync_every = sync_interval(t0.host_sync_every, t0.device, cfg.log_every)
        self.template.train()
        start = time.perf_counter()
        done, stopped, update = 0, False, t0.updates

        def flush():
            for p in pending:
                p.flush()
            return {key: sum(s[key] for s in sums) for key in ("loss", "correct", "count")}

        for kb in range(nb):
            idx = perms[:, kb * B:(kb + 1) * B]  # (k, b)
            b = idx.shape[1]
            xb, yb = X[idx], y[idx]  # (k, b, ...)
            if t0.augment is not None:
                xb = torch.stack([ts[c].augment(xb[c], gens[c]) for c in range(k)])
            count = b * t0.targets_per_sample
            now = (update + 1) % sync_every == 0 or kb + 1 == nb

            def queue(stats, update=update + 1, kb=kb, count=count, now=now):  # stats (k, 2)
                for c in range(k):
                    pending[c].add(stats[c], update, kb, count)
                if now:
                    flush()  # with sync_every 1 (CPU): every copy's update is checked before the backward pass

            # the copies' losses (k,) summed: each copy's parameters get their own gradient
            train_update(self._forward, self.criterion, self.optimizer, xb, yb, scale=1 / count, before_backward=queue)
            update += 1
            for t in ts:
                t.updates = update
            done = kb + 1
            bar.update(update, done, flush)
            if cfg.max_updates is not None and update >= cfg.max_updates and done < nb:
                stopped = True
                break
            if cfg.checkpoint_every is not None and update % cfg.checkpoint_every == 0 and done < nb:
                flush()
                now = time.perf_counter() - start
                for c, t in enumerate(ts):
                    partial = dict(sums[c], time=sums[c]["time"] + now)
                    self.save(c, epoch, rows=t.history, extra=t._extra(done, partial),
                              generators={"augment": gens[c]} if gens[c] is not None else None)
        flush()
        bar.close()
        if t0.device.type == "cuda":
            torch.cuda.synchronize(t0.device)
        elapsed = time.perf_counter() - start
        for c, t in enumerate(ts):
            sums[c]["time"] += elapsed
            self.store(c)
            test = t.evaluate()
            if not math.isfinite(test["loss"]):
                self.failed.add(c)
                t._diverged(NonFiniteLossError, f"the test loss of seed {t.config.seed} is {test['loss']} after "
                            f"epoch {epoch + 1} (update {t.updates}): the weights are no longer finite", epoch, None, nb)
            row = {
                "epoch": epoch + 1 if not stopped else round(epoch + done / nb, 6),
                "update": t.updates,
                "train_loss": sums[c]["loss"] / max(sums[c]["count"], 1),
                "train_acc": sums[c]["correct"] / max(sums[c]["count"], 1),
                "test_loss": test["loss"],
                "test_acc": test["acc"],
                "epoch_time_s": round(sums[c]["time"], 4),
                "lr": t.optimizer.param_groups[0]["lr"],
                "device": str(t.device),
                "world_size": 1,
                "num_threads": t.num_threads,
                "copies": k,
            }
            t._last_row = row
            gen = {"augment": gens[c]} if gens[c] is not None else None
            if stopped:
                self.save(c, epoch, rows=t.history + [row], extra=t._extra(done, sums[c]), generators=gen)
            else:
                t.history.append(row)
                t.epoch = epoch + 1
                self.save(c, t.epoch, rows=t.history, extra=t._extra(0))
            if not cfg.quiet:
                print(f"[seed {t.config.seed}] " + epoch_line(row, cfg.epochs, t.updates)
                      + ("  (stopped by max_updates)" if stopped else ""), flush=True)
        return not stopped

    def _fail(self, c: int, epoch: int, nb: int):
        def fail(cls, what, update):
            self.failed.add(c)
            self.trainers[c]._diverged(cls, what, epoch, self.bar, nb, update=update)
        return fail
