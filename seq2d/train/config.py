r"""The training configuration: one flat dataclass of commented defaults (nanoGPT style).

Values come, in increasing precedence, from the defaults below, a TOML file, ``--set
key=value`` strings and one command-line flag per field::

    cfg = load_config("run.toml", ["epochs=3", "sizes=784,100,10"])
    cfg = load_config({"epochs": 3})                 # or a dict
    save_config(cfg, "config.toml"); config_to_dict(cfg); config_from_dict(d)

    ap = argparse.ArgumentParser(); add_config_args(ap)   # --config, --set, --epochs, ...
    cfg = config_from_args(ap.parse_args())

Unknown keys raise ValueError naming the key, a close match and every valid key; a value
of the wrong type raises TypeError naming the field, the expected type and the value;
a bad value (an unknown choice, a negative size) raises ValueError. The config is saved
as ``config.toml`` next to every run and, as a dict, inside every checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tablefile import read_table
from ..errors import InvalidType, InvalidValue, did_you_mean, renamed_keyword
from ..errors import show_value as _show
from ..fileio import atomic_write

__all__ = ["TrainConfig", "CHOICES", "MODEL_FIELDS", "RESUME_FREE_FIELDS", "load_config", "save_config", "config_to_dict",
           "config_from_dict", "config_to_toml", "apply_overrides", "parse_value", "add_config_args", "config_from_args",
           "config_fields", "ALLOW_CHANGED_FIELDS", "LEGACY_DEFAULTS", "OUTPUT_FIELDS", "RENAMED_FIELDS", "renamed_fields"]


_NO_LEGACY = object()


def _f(default, help: str, *, model: bool = False, resume: str = "same", output: bool = False,
       choices: tuple[str, ...] = (), legacy=_NO_LEGACY, was: str | None = None):
    """A field with a default, its help text (shown by ``--help``) and what the run machinery
    needs to know of it (``dataclasses.fields(TrainConfig)[k].metadata``; the tuples below are read
    from it):

    - ``model``: it defines the model's parameters (a checkpoint fits only a model built alike);
    - ``resume``: ``"same"`` (a resumed run must keep the checkpoint's value, else CheckpointError),
      ``"free"`` (may change without breaking exact continuation) or ``"ask"`` (may change only when
      asked: ``allow_changed`` / ``--allow-changed``; the continuation is then a different run from
      that update on, and the change is recorded);
    - ``output``: it only says where outputs go or how much is printed: left out of the config
      hash (:func:`seq2d.train.identity.config_hash`), and free on resume;
    - ``choices``: the values it may take (anything else is refused);
    - ``legacy``: a field added with a default that changes what a config computes: the value a
      config written before the field existed (a run.json or checkpoint without it) stands for;
    - ``was``: the old key it replaces in files written before a rename (several fields may
      replace one key).
    """
    if resume not in ("same", "free", "ask"):
        raise AssertionError(f"resume={resume!r}")  # a bug in this file
    meta = {"help": help, "model": model, "resume": "free" if output else resume, "output": output,
            "choices": tuple(choices), "legacy": legacy, "was": was}
    if isinstance(default, list):
        return field(default_factory=lambda d=default: list(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    """Every knob of a training run. ``None`` means "not set" (see each field's help)."""

    # ---- model
    model: str = _f("mlp", 'a registered seq2d model name ("mlp", "random_model", ...; see seq2d.list_models()) or the path of a spec TOML/JSON',
                    model=True)
    sizes: list[int] = _f([2500, 500, 200, 100, 10], "slot sizes, input first, classes last (2500 = 50 x 50 images)",
                          model=True)
    activation: str = _f("relu", "hidden-slot activation", model=True)
    steps: int | None = _f(None, "Sequential2D steps per forward (None = the model's default, its depth when acyclic)",
                           model=True, was="iterations")
    allow_constant_output: bool = _f(False, "train a model whose output cannot depend on its input within its steps "
                                            "(fewer than the blocks from input to output, or no path: a constant "
                                            "predictor); without it such a model is refused before training "
                                            "(ConstantOutputError)", resume="free")
    granularity: str = _f("element", 'sparsity unit of the randomized model: "element", "tile" or "block"',
                          model=True, choices=("element", "tile", "block"))
    tile: int = _f(64, "tile edge for granularity 'tile' and for the block-sparse matrix", model=True)
    region: str = _f("default", "where the randomized model may place trainable entries (see seq2d.randomize)", model=True)
    model_seed: int | None = _f(None, "seed of the model's random structure and initial values (None = seed)", model=True)
    store: str = _f("auto", 'parameter store handed to model constructors that take one ("dense", "tiled"; see '
                            'seq2d.available_stores(); "auto" = their default)', resume="free", was="backend")
    loop: bool = _f(False, "evaluate the dense store one F.linear per block position (the slow reference) instead of "
                           "one GEMM per box: handed to model constructors that take loop=, else set as model.loop",
                    resume="free")
    kernel: str = _f("auto", 'block-sparse kernel handed to model constructors that take one (see '
                             'seq2d.sparse.available_kernels(); "auto" = their default)', resume="free", was="backend")
    # ---- data
    data: str = _f("subset", '"subset" (bundled MNIST subset), "full" (MNIST), "mnist1d" (MNIST-1D, 40-sample signals, '
                             'generated once into $SEQ2D_CACHE; needs the optional extra, seq2d.data.mnist1d) or '
                             '"synthetic" (Gaussian clusters, for tests)', choices=("subset", "full", "mnist1d", "synthetic"))
    data_root: str | None = _f(None, "MNIST folder (None = $SEQ2D_DATA, then the data module's default)", output=True)
    download: bool = _f(False, "download MNIST when absent from data_root", output=True)
    image_size: int = _f(50, "images are resized to image_size x image_size (so sizes[0] = image_size**2)", model=True)
    normalize: bool = _f(True, "MNIST pixels normalised with mean 0.1307, std 0.3081 (False: x / 255 in [0, 1], ToTensor "
                               "only); data 'synthetic' reads no pixels and refuses False, as does 'mnist1d' (its "
                               "generator standardises it)")
    # ---- optimisation
    epochs: int = _f(10, "passes over the training set", resume="free")
    batch_size: int = _f(64, "samples per optimizer update, summed over all processes (each of W processes takes 1/W)")
    lr: float = _f(1e-3, "learning rate", resume="ask")
    optimizer: str = _f("adam", '"adam" or "sgd" (momentum 0.9)', resume="ask", choices=("adam", "sgd"))
    optimizer_impl: str = _f("fused", 'torch\'s implementation of the optimizer step: "fused" (one kernel per step where '
                                      'torch has one for the device and dtype, else "foreach"), "foreach" or "loop" (one '
                                      "op per tensor and update term; torch's default on the CPU, and seq2d's before "
                                      "this field existed). The same update up to rounding; fused is several times "
                                      "faster on large parameters (docs/performance.md)",
                             resume="ask", choices=("fused", "foreach", "loop"), legacy="loop")
    weight_decay: float = _f(0.0, "L2 penalty added to the gradient (torch.optim semantics)", resume="ask")
    erasing_p: float = _f(0.0, "probability of random erasing per image (0 = off)")
    perspective_p: float = _f(0.0, "probability of a random perspective warp per image (0 = off)")
    augment_test: bool = _f(False, "also apply erasing_p / perspective_p to the test set: one draw per run, seeded by "
                                   "seed, the same images every epoch (needs one of them > 0)")
    seed: int = _f(0, "seeds the data order, augmentation and (unless model_seed is set) the model")
    deterministic: bool = _f(False, "torch.use_deterministic_algorithms(True, warn_only=True) during the run (slower on GPU)",
                             resume="free")
    # ---- system
    device: str = _f("auto", '"auto" (cuda when available), "cpu" or "cuda"', resume="free", choices=("auto", "cpu", "cuda"))
    dist_backend: str = _f("auto", 'torch.distributed backend under torchrun: "auto" (nccl on cuda, gloo on cpu), "gloo" or "nccl"',
                           resume="free", choices=("auto", "gloo", "nccl"))
    num_threads: int | str | None = _f(None, 'torch.set_num_threads for the run: a positive int (used as is) or "auto" (the '
                                          "cores idle at the start of the run, at most torch's count, see "
                                          'seq2d.threads); None (the default) is "auto" too, as in seq2d train', resume="free")
    # ---- output
    name: str = _f("run", "run name; the default out_dir is runs/<name>", output=True)
    out_dir: str | None = _f(None, "where config.toml, metrics.jsonl/csv and checkpoint.pt go (None = runs/<name>)",
                             output=True)
    tensorboard: str | None = _f(None, "also write TensorBoard events to <tensorboard>/<name> (None = off; needs the "
                                       "optional extra: pip install -e \".[tensorboard]\"; seq2d.train.tensorboard)",
                                 output=True)
    log_every: int = _f(50, "optimizer updates between progress-bar refreshes of loss/accuracy", output=True)
    eval_batch_size: int = _f(1000, "batch size of the per-epoch test-set evaluation", resume="free")
    max_updates: int | None = _f(None, "stop after this many optimizer updates in total (smoke runs; None = no limit); the "
                                       "run is then recorded as partial, evaluated where it stopped, and --resume continues it",
                                 resume="free", was="max_steps")
    checkpoint_every: int | None = _f(None, "also write checkpoint.pt every this many optimizer updates (None = at the end "
                                            "of each epoch and at a max_updates stop only)", output=True)
    divergence_factor: float | None = _f(1000.0, "stop with DivergenceError when the smoothed training loss (EMA, weight "
                                                 "0.1 per update) exceeds this factor x its lowest value so far and its "
                                                 "first value (None = only NaN/inf stop the run)", resume="free")
    quiet: bool = _f(False, "no progress bar and no per-epoch line on stdout", output=True)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, _check(f.name, _HINTS[f.name], getattr(self, f.name)))
        _check_values(self)

    def run_dir(self) -> Path:
        """``out_dir``, or ``runs/<name>`` when it is not set."""
        return Path(self.out_dir) if self.out_dir is not None else Path("runs") / self.name

    def effective_model_seed(self) -> int:
        return self.seed if self.model_seed is None else self.model_seed


# The field properties, read from each field's metadata (see _f), for the code that asks by kind.
_META = {f.name: f.metadata for f in dataclasses.fields(TrainConfig)}

# Fields whose values are fixed by a choice list (anything else is free text).
CHOICES: dict[str, tuple[str, ...]] = {k: m["choices"] for k, m in _META.items() if m["choices"]}

# Fields that define the model's parameters: a checkpoint only fits a model built from the same.
MODEL_FIELDS = tuple(k for k, m in _META.items() if m["model"])

# Fields a resumed run may change without breaking exact continuation (everything else must
# equal the checkpoint's config, else CheckpointError names the differences).
RESUME_FREE_FIELDS = tuple(k for k, m in _META.items() if m["resume"] == "free")

# Fields a resume may change only when asked explicitly (``allow_changed`` / ``--allow-changed``):
# the continuation is then a different run from that update on, and the change is recorded.
ALLOW_CHANGED_FIELDS = tuple(k for k, m in _META.items() if m["resume"] == "ask")

# Fields added with a default that changes what a config computes, and the value a config
# written before the field existed (a run.json or checkpoint without it) stands for.
LEGACY_DEFAULTS: dict[str, Any] = {k: m["legacy"] for k, m in _META.items() if m["legacy"] is not _NO_LEGACY}

# Fields renamed since configs were first saved (config.toml, run.json, checkpoints): old key -> the
# fields that replace it (``backend``: a store or a kernel name; ``iterations``: ``steps``, the model's
# keyword; ``max_steps``: ``max_updates``); seq2d.train.identity hashes the new fields under the old
# name, and ``TrainConfig(max_steps=...)`` is the typed "now called" error.
RENAMED_FIELDS: dict[str, tuple[str, ...]] = {}
for _k, _m in _META.items():
    if _m["was"] is not None:
        RENAMED_FIELDS[_m["was"]] = RENAMED_FIELDS.get(_m["was"], ()) + (_k,)
for _old, _new in RENAMED_FIELDS.items():  # TrainConfig(max_steps=...): the typed "now called" error
    TrainConfig.__init__ = renamed_keyword(_old, _new)(TrainConfig.__init__)

# Fields that only say where outputs go and how much is printed: left out of config_hash.
OUTPUT_FIELDS = tuple(k for k, m in _META.items() if m["output"])


def renamed_fields(d: Mapping) -> dict:
    """``d`` (read from a file written before a rename) with its old spellings of
    seq2d.renames.OLD_NAMES read as today's (``model = "random"`` is ``"random_model"``, ``store =
    "loop"`` is ``store = "dense"``, ``loop = true``), ``backend`` read as ``kernel`` when its value
    is a kernel name and no store name ('cpu', 'triton', ...), else as ``store``; giving an old key
    with a new one is an error; another renamed key is read as its one new field."""
    from ..renames import OLD_NAMES, migrate_model_name
    from ..renames import migrate_store_value

    out = dict(d)
    for old, new in RENAMED_FIELDS.items():
        if len(new) == 1 and old in out:
            if new[0] in out:
                raise InvalidValue(f"config: {old!r} is the old name of {new[0]!r}; give {new[0]!r} only, not both")
            out[new[0]] = out.pop(old)
    if "backend" in out:
        given = [k for k in RENAMED_FIELDS["backend"] if k in out]
        if given:
            raise InvalidValue(f"config: 'backend' is the old name of 'store' and 'kernel'; give {given[0]!r} only, "
                               "not both")
        from ..stores import STORES
        from ..sparse import available_kernels

        value = out.pop("backend")
        store_like = value in STORES or value in OLD_NAMES["store"]
        out["kernel" if not store_like and value in available_kernels() else "store"] = value
    if "model" in out:
        out["model"] = migrate_model_name(out["model"])
    return migrate_store_value(out, "config")

_HINTS: dict[str, Any] = typing.get_type_hints(TrainConfig)

# Fields whose type is a union of several types: what their messages say is expected.
_EXPECTED = {"num_threads": "a positive int, 'auto' or None"}


def config_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(TrainConfig))


# ---------------------------------------------------------------------- type checks
def _type_name(hint) -> str:
    if _union(hint) is not None:
        names = [a.__name__ for a in typing.get_args(hint)]
        return ", ".join(names[:-1]) + " or " + names[-1].replace("NoneType", "None")
    if _optional(hint) is not None:
        return f"{_type_name(_optional(hint))} or None"
    if typing.get_origin(hint) is list:
        return f"a list of {typing.get_args(hint)[0].__name__}"
    return hint.__name__


def _optional(hint):
    """``X`` for ``X | None``, else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
    return None


def _union(hint) -> tuple | None:
    """The non-None members of a union of two or more types (``int | str | None``), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and _optional(hint) is None:
        return tuple(a for a in typing.get_args(hint) if a is not type(None))
    return None


def _check(name: str, hint, value, expected: str | None = None):
    """``value`` checked (and normalised: int -> float, tuple -> list) against ``hint``."""
    members = _union(hint)
    if members is not None:
        if value is None and type(None) in typing.get_args(hint):
            return None
        for m in members:
            try:
                return _check(name, m, value)
            except TypeError:
                pass
        raise InvalidType(f"config field {name!r}: expected {_EXPECTED.get(name, _type_name(hint))}, got {_show(value)}")
    inner = _optional(hint)
    if inner is not None:
        return None if value is None else _check(name, inner, value, _type_name(hint))
    bad = InvalidType(f"config field {name!r}: expected {expected or _type_name(hint)}, got {_show(value)}")
    if hint is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad
        return value
    if typing.get_origin(hint) is list:
        (elem,) = typing.get_args(hint)
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
            raise bad
        return [_check(f"{name}[{k}]", elem, v) for k, v in enumerate(value)]
    raise AssertionError(f"unsupported config type {hint!r} for {name}")  # a bug in this file


def _check_values(cfg: TrainConfig) -> None:
    from ..renames import now_called
    from ..renames import check_store_value

    check_store_value("TrainConfig", cfg.store)  # an old spelling: the "now called" error
    now_called("config field 'model'", cfg.model)
    for name, choices in CHOICES.items():
        v = getattr(cfg, name)
        if v not in choices:
            raise InvalidValue(f"config field {name!r}: unknown value {v!r}{did_you_mean(v, choices)}. Select from "
                               + ", ".join(map(repr, choices)))
    if len(cfg.sizes) < 2:
        raise InvalidValue(f"config field 'sizes': expected at least two positive ints (input ... classes), got {cfg.sizes}")
    for k, s in enumerate(cfg.sizes):
        if s <= 0:
            raise InvalidValue(f"config field 'sizes': sizes[{k}] must be positive, got {s}")
    positive = ["tile", "image_size", "batch_size", "log_every", "eval_batch_size"]
    if isinstance(cfg.num_threads, str) and cfg.num_threads != "auto":
        raise InvalidValue(f"config field 'num_threads': expected {_EXPECTED['num_threads']}, got the string {cfg.num_threads!r}")
    for name in positive + ["steps", "num_threads", "max_updates", "checkpoint_every"]:
        v = getattr(cfg, name)
        if isinstance(v, str):  # num_threads = "auto"
            continue
        if v is not None and v <= 0 and not (name == "steps" and v == 0):
            raise InvalidValue(f"config field {name!r}: expected a positive int, got {v}")
    if cfg.data != "full" and cfg.data_root is not None:
        raise InvalidValue(f"config field 'data_root' is set, but data = {cfg.data!r} reads no MNIST files (only "
                           f"data = 'full' does); leave it out, or use --data full")
    if cfg.epochs < 0:
        raise InvalidValue(f"config field 'epochs': expected an int >= 0, got {cfg.epochs}")
    for name in ("lr", "weight_decay", "erasing_p", "perspective_p"):
        v = getattr(cfg, name)
        if not math.isfinite(v) or v < 0:
            raise InvalidValue(f"config field {name!r}: expected a finite number >= 0, got {v}")
    for name in ("erasing_p", "perspective_p"):
        if getattr(cfg, name) > 1:
            raise InvalidValue(f"config field {name!r}: expected a probability in [0, 1], got {getattr(cfg, name)}")
    if cfg.augment_test and cfg.erasing_p == 0 and cfg.perspective_p == 0:
        raise InvalidValue("config field 'augment_test' is set, but erasing_p and perspective_p are 0: there is no "
                           "augmentation to apply to the test set; set one of them (e.g. --protocol paper) or leave it off")
    if not cfg.normalize and cfg.data == "synthetic":
        raise InvalidValue("config field 'normalize' is False, but data = 'synthetic' reads no MNIST pixels to leave "
                           "unnormalised; use --data subset or full, or leave normalize on")
    if cfg.data == "mnist1d" and not cfg.normalize:
        raise InvalidValue("config field 'normalize' is False, but data = 'mnist1d' has no unnormalised form: the "
                           "mnist1d package standardises the set it generates (seq2d.data.mnist1d); leave normalize on")
    if cfg.data == "mnist1d" and (cfg.erasing_p or cfg.perspective_p):
        raise InvalidValue(f"config fields 'erasing_p' / 'perspective_p' are {cfg.erasing_p} / {cfg.perspective_p}, "
                           "but they augment images and data = 'mnist1d' holds 1-D signals; set both to 0")
    if cfg.divergence_factor is not None and not (math.isfinite(cfg.divergence_factor) and cfg.divergence_factor > 1):
        raise InvalidValue(f"config field 'divergence_factor': expected a finite number > 1 (or None to turn the rule off), "
                           f"got {cfg.divergence_factor}")
    if cfg.lr == 0:
        raise InvalidValue("config field 'lr': expected a positive learning rate, got 0")
    for name in ("seed", "model_seed"):
        v = getattr(cfg, name)
        if v is not None and not 0 <= v < 2**63:
            raise InvalidValue(f"config field {name!r}: expected an int in [0, 2**63), got {v}")
    if not cfg.name or "/" in cfg.name or "\\" in cfg.name:
        raise InvalidValue(f"config field 'name': expected a non-empty name without path separators, got {cfg.name!r}")


def _check_keys(keys, where: str) -> None:
    valid = config_fields()
    for k in keys:
        if k in valid:
            continue
        if not isinstance(k, str):
            raise InvalidType(f"{where}: keys must be strs, got {_show(k)}. Valid keys: {', '.join(valid)}")
        if k in RENAMED_FIELDS:
            raise InvalidValue(f"{where}: key {k!r} is now {' or '.join(map(repr, RENAMED_FIELDS[k]))}")
        raise InvalidValue(f"{where}: unknown key {k!r}{did_you_mean(k, valid)}. Valid keys: {', '.join(valid)}")


# ---------------------------------------------------------------------- dicts and files
def config_to_dict(cfg: TrainConfig) -> dict:
    """Every field as plain Python values (None kept), in field order."""
    if not isinstance(cfg, TrainConfig):
        raise InvalidType(f"expected a TrainConfig, got {type(cfg).__name__}")
    return {f.name: (list(v) if isinstance(v := getattr(cfg, f.name), list) else v) for f in dataclasses.fields(cfg)}


def config_from_dict(d: Mapping, *, where: str = "config") -> TrainConfig:
    """A TrainConfig from a (possibly partial) dict; missing keys keep their defaults."""
    if not isinstance(d, Mapping):
        raise InvalidType(f"{where}: expected a table (dict) of config fields, got {_show(d)}")
    d = renamed_fields(d)
    _check_keys(d, where)
    return TrainConfig(**d)


def _read_toml(path: Path) -> dict:
    raw = read_table(path, "config file", "TOML")
    for k, v in raw.items():
        if isinstance(v, dict):
            raise InvalidValue(f"{path}: the config is flat, but {k!r} is a table; write its fields at the top level")
    return raw


def load_config(source: str | os.PathLike | Mapping | TrainConfig | None = None, overrides: Mapping | Sequence[str] | None = None) -> TrainConfig:
    """The config from a TOML file, a dict or a TrainConfig (None: the defaults), then ``overrides``.

    ``overrides`` is a dict of typed values or a list of ``"key=value"`` strings (parsed to each
    field's type: ``epochs=3``, ``lr=1e-2``, ``sizes=784,100,10``, ``model_seed=none``).
    A TOML file is flat (no tables): every top-level key is a field name.
    """
    if source is None:
        cfg = TrainConfig()
    elif isinstance(source, TrainConfig):
        cfg = dataclasses.replace(source)
    elif isinstance(source, Mapping):
        cfg = config_from_dict(source)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        cfg = config_from_dict(_read_toml(path), where=str(path))
    else:
        raise InvalidType(f"load_config: expected a path, a dict or a TrainConfig, got {_show(source)}")
    return apply_overrides(cfg, overrides) if overrides else cfg


def apply_overrides(cfg: TrainConfig, overrides: Mapping | Sequence[str]) -> TrainConfig:
    """A copy of ``cfg`` with ``overrides`` (dict of values, or ``"key=value"`` strings) applied."""
    if isinstance(overrides, Mapping):
        items = dict(overrides)
    elif isinstance(overrides, Sequence) and not isinstance(overrides, (str, bytes)):
        items = {}
        for s in overrides:
            if not isinstance(s, str) or "=" not in s:
                raise InvalidValue(f"override {s!r}: expected 'key=value' (e.g. 'epochs=3')")
            k, v = s.split("=", 1)
            k = k.strip()
            if k.replace("-", "_") in config_fields():
                k = k.replace("-", "_")
            _check_keys([k], "override")
            items[k] = parse_value(k, v)
    else:
        raise InvalidType(f"overrides must be a dict or a list of 'key=value' strings, got {_show(overrides)}")
    _check_keys(items, "override")
    d = config_to_dict(cfg)
    d.update(items)
    return TrainConfig(**d)


_NONE = ("none", "null", "")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def parse_value(name: str, text: str):
    """Parse the command-line string ``text`` to the type of field ``name``."""
    _check_keys([name], "override")
    hint = _HINTS[name]
    return _parse(name, hint, text.strip())


def _parse(name: str, hint, text: str, expected: str | None = None):
    members = _union(hint)
    if members is not None:
        if type(None) in typing.get_args(hint) and text.lower() in _NONE:
            return None
        for m in members:
            try:
                return _parse(name, m, text)
            except TypeError:
                pass
        raise InvalidType(f"config field {name!r}: expected {_EXPECTED.get(name, _type_name(hint))}, got the string {text!r}")
    inner = _optional(hint)
    if inner is not None:
        return None if text.lower() in _NONE else _parse(name, inner, text, _type_name(hint) + " ('none')")
    bad = InvalidType(f"config field {name!r}: expected {expected or _type_name(hint)}, got the string {text!r}")
    if hint is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise bad
    if hint is int:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise bad from None
    if hint is float:
        try:
            return float(text)
        except ValueError:
            raise bad from None
    if hint is str:
        return text
    if typing.get_origin(hint) is list:
        (elem,) = typing.get_args(hint)
        body = text.strip("[]() ")
        parts = [p for p in body.replace(",", " ").split() if p]
        return [_parse(f"{name}[{k}]", elem, p) for k, p in enumerate(parts)]
    raise AssertionError(f"unsupported config type {hint!r}")


def config_to_toml(cfg: TrainConfig) -> str:
    """The config as TOML, each field preceded by its help as a comment; None fields are
    written commented out (TOML has no null), so reading the file back gives ``cfg``."""
    import tomli_w

    lines = ["# seq2d training config (seq2d.train.TrainConfig). Unset (None) fields are commented out.\n"]
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        lines.append(f"# {f.metadata['help']}\n")
        if v is None:
            lines.append(f"# {f.name} = (None)\n")
        elif isinstance(v, list):  # one line (tomli_w puts each element on its own)
            lines.append(f"{f.name} = [" + ", ".join(tomli_w.dumps({"v": x})[4:-1] for x in v) + "]\n")
        else:
            lines.append(tomli_w.dumps({f.name: v}))
    return "".join(lines)


def save_config(cfg: TrainConfig, path: str | os.PathLike) -> None:
    """Write ``cfg`` as commented TOML (atomically: a crash leaves the old file or the new one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, config_to_toml(cfg))


# ---------------------------------------------------------------------- argparse
def add_config_args(parser: argparse.ArgumentParser, *, files: bool = True,
                    defaults: Mapping | None = None) -> argparse.ArgumentParser:
    """Add one flag per field (``--epochs``, ``--batch-size``, ``--download/--no-download``, ...)
    (build the parser with ``allow_abbrev=False`` so that a typo like ``--epoch`` is an error)
    and, with ``files``, ``--config PATH`` and ``--set KEY=VALUE`` (repeatable).
    Flags default to "not given", so only what the user typed overrides the file.
    ``defaults`` (field -> value) changes the defaults shown in the help; pass the same
    mapping as ``base`` to :func:`config_from_args`."""
    if files:
        parser.add_argument("--config", metavar="TOML", default=None, help="read the config from this TOML file first")
        parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set_overrides",
                            help="override one field (repeatable), e.g. --set lr=1e-2")
    group = parser.add_argument_group("config fields (see seq2d.train.TrainConfig)")
    shown_defaults = load_config(defaults)
    for f in dataclasses.fields(TrainConfig):
        hint = _HINTS[f.name]
        flag = "--" + f.name.replace("_", "-")
        default = getattr(shown_defaults, f.name)
        shown = ",".join(map(str, default)) if isinstance(default, list) else default
        help_text = f"{f.metadata['help']} (default: {shown})".replace("%", "%%")
        if hint is bool:
            group.add_argument(flag, dest=f"cfg_{f.name}", action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif typing.get_origin(hint) is list:
            group.add_argument(flag, dest=f"cfg_{f.name}", nargs="+", metavar="N", default=None, help=help_text)
        else:
            metavar = {"int": "INT", "float": "FLOAT", "str": "STR"}.get(getattr(_optional(hint) or hint, "__name__", ""), "V")
            metavar = {"num_threads": "INT|auto", "tensorboard": "DIR"}.get(f.name, metavar)
            group.add_argument(flag, dest=f"cfg_{f.name}", metavar=metavar, default=None, help=help_text)
    return parser


def config_from_args(args: argparse.Namespace, base: TrainConfig | Mapping | str | os.PathLike | None = None) -> TrainConfig:
    """The config from parsed ``args``, layered: ``base`` (a TrainConfig, dict or TOML path;
    default: the dataclass defaults), then the keys of the ``--config`` file, then ``--set``
    strings, then the per-field flags the user typed."""
    cfg = load_config(base)
    path = getattr(args, "config", None)
    if path is not None:
        raw = _read_toml(Path(path))
        _check_keys(raw, str(path))
        cfg = apply_overrides(cfg, raw)
    sets = getattr(args, "set_overrides", None) or []
    if sets:
        cfg = apply_overrides(cfg, sets)
    flags = {}
    for name in config_fields():
        v = getattr(args, f"cfg_{name}", None)
        if v is None:
            continue
        if isinstance(v, bool):
            flags[name] = v
        elif isinstance(v, list):
            flags[name] = _parse(name, _HINTS[name], " ".join(v))
        else:
            flags[name] = _parse(name, _HINTS[name], v)
    return apply_overrides(cfg, flags) if flags else cfg
