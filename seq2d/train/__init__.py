"""Training infrastructure: config, trainer, checkpoints, data-parallel runs.

Generic over models and tensor data sets (the MNIST experiments and the stability
experiments share it)::

    from seq2d.train import load_config, run, Trainer
    cfg = load_config("run.toml", ["epochs=3"])
    summary = run(cfg)                       # or Trainer(cfg, model, data).fit(resume=True)

Submodules: :mod:`~seq2d.train.config` (TrainConfig, TOML, flags),
:mod:`~seq2d.train.trainer` (the Trainer: its epochs, resume, run bookkeeping), :mod:`~seq2d.train.loop`
(what every training loop shares: the optimizer, the loss, one training step, the step statistics,
the loss-explosion rule, the progress bar, the run's threads and determinism), :mod:`~seq2d.train.datasets` (data sets, augmentation,
seeds, epoch order), :mod:`~seq2d.train.errors`, :mod:`~seq2d.train.checkpoint` (atomic save,
checked load), :mod:`~seq2d.train.rundir` (the run folder's lock, ``run.json``, metrics.jsonl/.csv,
test predictions), :mod:`~seq2d.train.identity` (the config hash, config differences),
:mod:`~seq2d.train.fingerprint` (the model a run trained), :mod:`~seq2d.train.builder` (the model a
config names, the device), :mod:`~seq2d.train.distributed` (torchrun/DDP),
:mod:`~seq2d.train.vectorized` (several seeds as one batched computation),
:mod:`~seq2d.train.tensorboard` (TensorBoard logging, the optional extra). The command line is ``python -m seq2d.train``
(``torchrun --nproc_per_node=2 -m seq2d.train ...`` for data-parallel runs).

Names are imported on first use, so ``import seq2d.train.config`` stays light.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "config": ("TrainConfig", "load_config", "save_config", "config_to_dict", "config_from_dict", "config_to_toml",
               "apply_overrides", "add_config_args", "config_from_args", "MODEL_FIELDS", "RESUME_FREE_FIELDS",
               "ALLOW_CHANGED_FIELDS", "OUTPUT_FIELDS"),
    "identity": ("config_hash", "config_diff", "parse_allow_changed"),
    "fingerprint": ("model_fingerprint",),
    "checkpoint": ("CheckpointError", "ModelChangedError", "save_checkpoint", "load_checkpoint", "check_resume_config",
                   "capture_rng_state", "restore_rng_state", "check_rng_state", "FORMAT", "FORMAT_VERSION"),
    "trainer": ("Trainer", "train", "run", "OneProcess"),
    "builder": ("build_model", "resolve_device"),
    "errors": ("NonFiniteLossError", "DivergenceError", "RunLockedError", "RunExistsError", "ConstantOutputError"),
    "rundir": ("RunDir", "read_record", "METRIC_COLUMNS", "write_metrics", "read_metrics"),
    "loop": ("DivergenceMonitor", "train_update", "make_optimizer"),
    "datasets": ("load_data", "make_augment", "synthetic_data", "derive_seed", "epoch_permutation", "seed_everything"),
    "distributed": ("DistContext", "init_distributed", "cleanup", "wrap_model"),
    "vectorized": ("train_seeds", "train_copies", "NotVectorizable"),
    "tensorboard": ("TensorBoardLogger", "TensorBoardMissing"),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'seq2d.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
