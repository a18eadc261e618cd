r"""Checkpoints: written atomically, read with ``torch.load(weights_only=True)``, checked.

A checkpoint is one ``torch.save``d dict of tensors and plain Python values only (so the
safe ``weights_only`` loader reads it)::

    format     "seq2d-checkpoint"          the tag that tells ours from any other .pt file
    version    FORMAT_VERSION (int)
    model      the model's state_dict      (the unwrapped module under DDP)
    optimizer  the optimizer's state_dict
    epoch      completed epochs (int)
    update     optimizer updates taken so far (int; ``step`` in files written before issue 36,
               read as ``update``: seq2d.renames.migrate_record)
    config     the TrainConfig as a dict of primitives
    rng        capture_rng_state(): torch CPU, CUDA (when initialised), python random,
               numpy, and named torch.Generators, all as tensors/lists
    metrics    {"history": [per-epoch rows], "best": row, "last": row}
    extra      trainer-specific values (a dict; may be empty): the Trainer's batch, divergence
               monitor, changes and the model's fingerprint (seq2d.train.fingerprint)
    torch_version

``save_checkpoint`` writes a temporary file in the same folder, fsyncs it and renames it
over the target (``os.replace``), so a crash at any moment leaves either the previous
checkpoint or the new one, never a torn file. ``load_checkpoint`` raises
:class:`CheckpointError` for a missing, truncated, corrupt or foreign file and for a
version it does not read; it never returns something to "start fresh" from.
"""

from __future__ import annotations

import os
import pickle
import random
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import InvalidType, Seq2DError
from ..fileio import atomic_write
from .config import (
    ALLOW_CHANGED_FIELDS,
    MODEL_FIELDS,
    RESUME_FREE_FIELDS,
    TrainConfig,
    config_from_dict,
    config_to_dict,
)
from .errors import RunExistsError, spell
from .identity import parse_allow_changed

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "ModelChangedError",
    "save_checkpoint",
    "load_checkpoint",
    "check_resume_config",
    "check_rng_state",
    "check_model_state",
    "upgrade_checkpoint",
    "check_finite_state",
    "check_optimizer_state",
    "load_states",
    "check_resume_extra",
    "capture_rng_state",
    "restore_rng_state",
]

FORMAT = "seq2d-checkpoint"
FORMAT_VERSION = 1
_REQUIRED = {"model": dict, "optimizer": dict, "epoch": int, "update": int, "config": dict, "rng": dict, "metrics": dict}


class CheckpointError(Seq2DError, RuntimeError):
    """A checkpoint that cannot be used: missing, truncated, corrupt, foreign, another
    format version, or written by a run whose config does not match."""


class ModelChangedError(RunExistsError, CheckpointError):
    """The model differs from the one the run in the folder trained (its structure, or on reuse
    its initial values; :mod:`seq2d.train.fingerprint`): reusing or resuming that run would hand
    back, or continue, another model's weights. Also a :class:`~seq2d.train.errors.RunExistsError`
    (a ``FileExistsError``) and a :class:`CheckpointError`."""


# ---------------------------------------------------------------------- RNG states
def capture_rng_state(generators: Mapping[str, torch.Generator] | None = None) -> dict:
    """Every RNG state a run may consume, as tensors and lists (``weights_only``-safe)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    version, internal, gauss = random.getstate()
    state["python"] = {"version": version, "state": list(internal), "gauss": gauss}
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    else:
        st = np.random.get_state(legacy=False)
        state["numpy"] = {
            "bit_generator": st["bit_generator"],
            "key": torch.from_numpy(st["state"]["key"].astype("int64")),
            "pos": int(st["state"]["pos"]),
            "has_gauss": int(st["has_gauss"]),
            "gauss": float(st["gauss"]),
        }
    state["generators"] = {name: g.get_state() for name, g in (generators or {}).items()}
    return state


def check_rng_state(state, where: str = "the checkpoint") -> None:
    """Raise CheckpointError naming ``where`` and the entry unless ``state`` has the layout
    :func:`capture_rng_state` writes (``torch`` required; ``python``, ``numpy``, ``cuda``,
    ``generators`` optional but complete)."""
    def bad(entry: str, what: str):
        raise CheckpointError(f"{where}: the RNG state is incomplete or malformed: rng[{entry}] {what}")

    if not isinstance(state, Mapping):
        raise CheckpointError(f"{where}: entry 'rng' should be a dict, got {type(state).__name__}")
    if "torch" not in state:
        bad("'torch'", f"is missing (it has: {sorted(map(str, state))})")
    t = state["torch"]
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.dim() != 1 or t.numel() != torch.get_rng_state().numel():
        bad("'torch'", f"should be the uint8 tensor of torch.get_rng_state() ({torch.get_rng_state().numel()} bytes), got "
            + (f"a {t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__))
    if "cuda" in state and not (isinstance(state["cuda"], (list, tuple)) and all(
            isinstance(c, torch.Tensor) and c.dtype == torch.uint8 for c in state["cuda"])):
        bad("'cuda'", "should be a list of uint8 tensors")
    if "python" in state:
        py = state["python"]
        if not isinstance(py, Mapping):
            bad("'python'", f"should be a dict, got {type(py).__name__}")
        for k in ("version", "state", "gauss"):
            if k not in py:
                bad(f"'python'][{k!r}", "is missing")
        if not (isinstance(py["state"], (list, tuple)) and len(py["state"]) == 625 and all(isinstance(v, int) for v in py["state"])):
            bad("'python']['state'", "should be a list of 625 ints (random.getstate())")
    if "numpy" in state:
        n = state["numpy"]
        if not isinstance(n, Mapping):
            bad("'numpy'", f"should be a dict, got {type(n).__name__}")
        for k in ("bit_generator", "key", "pos", "has_gauss", "gauss"):
            if k not in n:
                bad(f"'numpy'][{k!r}", "is missing")
        if not (isinstance(n["key"], torch.Tensor) and n["key"].numel() == 624):
            bad("'numpy']['key'", "should be a tensor of 624 ints (the MT19937 key)")
    gens = state.get("generators", {})
    if not isinstance(gens, Mapping) or not all(isinstance(g, torch.Tensor) and g.dtype == torch.uint8 for g in gens.values()):
        bad("'generators'", "should be a dict of name -> uint8 generator-state tensor")


def restore_rng_state(state: Mapping, generators: Mapping[str, torch.Generator] | None = None, *,
                      where: str = "the checkpoint") -> None:
    """Restore what :func:`capture_rng_state` captured (generators by name; a generator the
    state does not hold, or an incomplete state, raises CheckpointError naming ``where``).

    The state may come from ``load_checkpoint(map_location="cuda")``, which puts every tensor
    on the GPU; torch and numpy want host memory (CPU ByteTensors, arrays), so every tensor is
    moved to the CPU before use (a no-op for CPU tensors)."""
    check_rng_state(state, where)
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
    if "python" in state:
        p = state["python"]
        random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    if "numpy" in state:
        import numpy as np

        n = state["numpy"]
        np.random.set_state({
            "bit_generator": n["bit_generator"],
            "state": {"key": n["key"].cpu().numpy().astype("uint32"), "pos": n["pos"]},
            "has_gauss": n["has_gauss"],
            "gauss": n["gauss"],
        })
    saved = state.get("generators", {})
    for name, g in (generators or {}).items():
        if name not in saved:
            raise CheckpointError(f"{where} holds no state for generator {name!r} (it has: {sorted(saved)})")
        g.set_state(saved[name].cpu())


# ---------------------------------------------------------------------- save
def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    # DistributedDataParallel / DataParallel keep the real model in .module
    return model.module if hasattr(model, "module") and isinstance(model.module, torch.nn.Module) else model


def _primitive_config(config) -> dict:
    if isinstance(config, TrainConfig):
        return config_to_dict(config)
    if isinstance(config, Mapping):
        return dict(config)
    raise InvalidType(f"save_checkpoint: config must be a TrainConfig or a dict, got {type(config).__name__}")


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    epoch: int,
    update: int,
    config,
    rng: Mapping | None = None,
    metrics: Mapping | None = None,
    extra: Mapping | None = None,
) -> Path:
    """Write a checkpoint atomically (tmp file in the same folder, fsync, ``os.replace``).

    ``rng`` defaults to :func:`capture_rng_state` (no named generators). Returns the path."""
    path = Path(path)
    for name, v in (("epoch", epoch), ("update", update)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidType(f"save_checkpoint: {name} must be an int >= 0, got {v!r}")
    payload = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else {},
        "epoch": epoch,
        "update": update,
        "config": _primitive_config(config),
        "rng": dict(rng) if rng is not None else capture_rng_state(),
        "metrics": dict(metrics) if metrics is not None else {},
        "extra": dict(extra) if extra is not None else {},
        "torch_version": str(torch.__version__),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: torch.save(payload, f), fsync=True)
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return path
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
    return path


# ---------------------------------------------------------------------- load
def load_checkpoint(path: str | os.PathLike, map_location=None) -> dict:
    """Read and validate a checkpoint written by :func:`save_checkpoint`.

    Raises:
        CheckpointError: the file is missing, truncated or corrupt, not a seq2d checkpoint
            (e.g. a plain state_dict), of another format version, or lacks a required entry.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {str(path)!r}: the file does not exist (nothing to resume from; "
                              + spell("start the run without resume=True)", "start the run without --resume)"))
    if path.is_dir():
        raise CheckpointError(f"{str(path)!r} is a folder, expected a checkpoint file")
    size = path.stat().st_size
    where = repr(str(path))
    # torch.save writes a zip archive: its local header starts the file and its central
    # directory ends it, so a torn copy keeps the first and loses the second.
    with open(path, "rb") as f:
        head = f.read(4)
    if size == 0:
        raise CheckpointError(f"{where} is empty (0 bytes): a truncated or interrupted write")
    if head != b"PK\x03\x04":
        raise CheckpointError(
            f"{where} is not a torch checkpoint ({size} bytes that do not start with the zip header torch.save "
            f"writes, starting with {head!r}): corrupt, or a file from another tool"
        )
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{where} is truncated or corrupt ({size} bytes; the zip archive has no end record, "
                              "as after an interrupted write or copy)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" in str(e).lower() or "weights_only" in str(e).lower():
            raise CheckpointError(
                f"{where} holds Python objects that the safe loader (torch.load(weights_only=True)) refuses; "
                f"it is not a seq2d checkpoint (those hold tensors and plain values only). Loader said: {_first_line(e)}"
            ) from e
        raise CheckpointError(f"{where} is corrupt ({size} bytes): {_first_line(e)}") from e
    except Exception as e:  # zip/pickle internals raise many types for damaged bytes
        raise CheckpointError(f"{where} is truncated or corrupt ({size} bytes): {_first_line(e)}") from e
    return _validate(ckpt, path)


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0] if s else ''}"


def _validate(ckpt, path: Path) -> dict:
    where = repr(str(path))
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{where} is not a seq2d checkpoint: it holds a {type(ckpt).__name__}, expected a dict tagged format={FORMAT!r}")
    if "format" not in ckpt:
        keys = list(ckpt)[:6]
        looks = " It looks like a plain state_dict (load it with model.load_state_dict)." if ckpt and all(
            isinstance(v, torch.Tensor) for v in ckpt.values()) else ""
        raise CheckpointError(
            f"{where} is not a seq2d checkpoint: it has no 'format' tag (expected {FORMAT!r}; "
            f"its first keys are {keys}).{looks}"
        )
    if ckpt["format"] != FORMAT:
        raise CheckpointError(f"{where} is not a seq2d checkpoint: its format tag is {ckpt['format']!r}, expected {FORMAT!r}")
    version = ckpt.get("version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{where} has checkpoint format version {version!r}; this seq2d reads version {FORMAT_VERSION} only"
        )
    from ..renames import migrate_record

    ckpt = migrate_record(ckpt)  # a checkpoint written before a rename: its old keys read as today's
    for key, typ in _REQUIRED.items():
        if key not in ckpt:
            raise CheckpointError(f"{where} is incomplete: the required entry {key!r} is missing")
        if not isinstance(ckpt[key], typ) or (typ is int and isinstance(ckpt[key], bool)):
            raise CheckpointError(f"{where}: entry {key!r} should be a {typ.__name__}, got {type(ckpt[key]).__name__}")
    for key in ("epoch", "update"):
        if ckpt[key] < 0:
            raise CheckpointError(f"{where}: entry {key!r} should be an int >= 0, got {ckpt[key]}")
    ckpt.setdefault("extra", {})
    if not isinstance(ckpt["extra"], dict):
        raise CheckpointError(f"{where}: entry 'extra' should be a dict, got {type(ckpt['extra']).__name__}")
    history = ckpt["metrics"].get("history", [])
    if not isinstance(history, list) or not all(isinstance(r, dict) for r in history):
        raise CheckpointError(f"{where}: entry metrics['history'] should be a list of dicts (one row per epoch)")
    check_rng_state(ckpt["rng"], where)
    check_finite_state(ckpt, where)
    return ckpt


def _first_non_finite(tensors) -> tuple[str, torch.Tensor] | None:
    for name, t in tensors:
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            return name, t
    return None


def check_finite_state(ckpt: Mapping, where: str) -> None:
    """CheckpointError naming the first model or optimizer tensor of ``ckpt`` that holds a NaN or an
    infinity: a run resumed from it could only diverge (its "last good checkpoint" would not be good)."""
    model = ckpt.get("model", {})
    opt = ckpt.get("optimizer", {})
    opt_state = opt.get("state", {}) if isinstance(opt, Mapping) else {}
    found = _first_non_finite((f"model[{k!r}]", t) for k, t in model.items()) or _first_non_finite(
        (f"optimizer['state'][{pid!r}][{k!r}]", t)
        for pid, st in (opt_state.items() if isinstance(opt_state, Mapping) else ())
        if isinstance(st, Mapping) for k, t in st.items())
    if found is not None:
        name, t = found
        bad = int((~torch.isfinite(t)).sum())
        kinds = [w for w, n in (("NaN", int(torch.isnan(t).sum())), ("inf", bad - int(torch.isnan(t).sum()))) if n]
        raise CheckpointError(
            f"{where}: {name} holds {bad} non-finite value(s) ({' and '.join(kinds)}) of {t.numel()}: the run that "
            "wrote it had diverged (or the file was altered), so it cannot be resumed or used; resume from an earlier "
            "copy, or start the run afresh")


# ---------------------------------------------------------------------- resume checks
def check_resume_config(saved: Mapping, current: TrainConfig, path: str | os.PathLike = "checkpoint", *,
                        allow_changed=()) -> TrainConfig:
    """Raise CheckpointError unless ``current`` may continue the run that wrote ``saved``.

    Model-defining fields (:data:`~seq2d.train.config.MODEL_FIELDS`) must match, or the
    weights would not fit; so must every other field outside
    :data:`~seq2d.train.config.RESUME_FREE_FIELDS` (lr, batch_size, seed, ...), or the
    continuation would not be the run that was interrupted, except the fields named in
    ``allow_changed`` (a subset of :data:`~seq2d.train.config.ALLOW_CHANGED_FIELDS`: the
    caller records the change). Returns the saved config."""
    try:
        old = config_from_dict(saved, where=f"the config stored in {str(path)!r}")
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"the config stored in {str(path)!r} is not a valid TrainConfig for this seq2d: {e}") from e
    a, b = config_to_dict(old), config_to_dict(current)
    # model_seed None means "seed": compare what the model was built from
    a["model_seed"], b["model_seed"] = old.effective_model_seed(), current.effective_model_seed()
    allowed = set(parse_allow_changed(allow_changed, where="allow_changed"))
    diffs = [k for k in a if k not in RESUME_FREE_FIELDS and k not in allowed and a[k] != b[k]]
    if diffs:
        model = [k for k in diffs if k in MODEL_FIELDS]
        rest = [k for k in diffs if k not in MODEL_FIELDS]
        parts = []
        if model:
            parts.append("model-defining fields differ (the saved weights would not fit): "
                         + "; ".join(f"{k}: checkpoint {a[k]!r}, now {b[k]!r}" for k in model))
        if rest:
            parts.append("training fields differ (the resumed run would not continue the saved one): "
                         + "; ".join(f"{k}: checkpoint {a[k]!r}, now {b[k]!r}" for k in rest))
        askable = [k for k in rest if k in ALLOW_CHANGED_FIELDS]
        if askable and not model:
            parts.append(f"To continue with the new {', '.join(askable)} from this checkpoint on (recorded in the "
                         "metrics), pass " + spell(f"allow_changed={tuple(askable)!r}", f"--allow-changed {','.join(askable)}"))
        raise CheckpointError(
            f"cannot resume from {str(path)!r}: " + ". ".join(parts)
            + f". Fields that may change on resume: {', '.join(RESUME_FREE_FIELDS)}"
        )
    return old


def upgrade_checkpoint(ckpt: Mapping, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                       extra_states=()) -> None:
    """Convert, in place, what ``ckpt`` holds in an earlier layout of ``model``'s parameter store
    (a masked box saved densely: :mod:`seq2d.stores.compact`) to the current one: its ``"model"``
    state, the optimizer's per-parameter tensors (with ``optimizer``) and the model states named in
    ``extra_states`` (e.g. a best-validation copy). Called before the checks below."""
    from ..stores.migrate import compact_optimizer_state, compact_state_dict

    own = _unwrap(model)
    state = ckpt.get("model")
    if not isinstance(state, dict):
        return
    if optimizer is not None and isinstance(ckpt.get("optimizer"), Mapping):
        compact_optimizer_state(own, optimizer, state, ckpt["optimizer"])  # with the saved masks, before these convert
    for s in (state, *extra_states):
        if isinstance(s, dict):
            compact_state_dict(own, s)


def check_model_state(state: Mapping, model: torch.nn.Module, where: str) -> None:
    """CheckpointError unless ``state`` has exactly the entries of ``model.state_dict()``,
    each of its shape, and its bool entries (masks) the model's values (checked before anything
    is loaded, so a refused resume changes nothing)."""
    own = _unwrap(model).state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k!r} has shape {tuple(state[k].shape)}, this model's {tuple(own[k].shape)}" for k in own
              if k in state and isinstance(state[k], torch.Tensor) and state[k].shape != own[k].shape]
    kinds = [f"{k!r} is a {type(state[k]).__name__}, not a tensor" for k in own if k in state and not isinstance(state[k], torch.Tensor)]
    # a bool entry is a mask (structure, never trained): loading another one would change the model
    masks = [k for k in own if own[k].dtype == torch.bool and k in state and isinstance(state[k], torch.Tensor)
             and state[k].shape == own[k].shape and not torch.equal(state[k].cpu(), own[k].cpu())]
    if masks and not (missing or unexpected or shapes or kinds):
        raise ModelChangedError(f"the model in {where} was trained with another mask than this model's: entries "
                                f"{masks[:5]} differ; a checkpoint's mask is never loaded into a model built with another")
    if missing or unexpected or shapes or kinds:
        parts = ([f"missing entries {missing[:5]}"] if missing else []) + ([f"unexpected entries {unexpected[:5]}"] if unexpected else []) \
            + shapes[:5] + kinds[:5]
        raise CheckpointError(f"the model in {where} does not fit this model: " + "; ".join(parts))


def check_optimizer_state(state: Mapping, optimizer: torch.optim.Optimizer, where: str) -> None:
    """CheckpointError unless the saved optimizer state fits ``optimizer``: as many parameter
    groups and parameters, and every per-parameter tensor (momenta) of its parameter's shape."""
    if not isinstance(state, Mapping) or not isinstance(state.get("param_groups"), list) or not isinstance(state.get("state"), Mapping):
        raise CheckpointError(f"{where}: entry 'optimizer' is not an optimizer state_dict (it needs 'state' and 'param_groups')")
    groups = optimizer.param_groups
    saved = state["param_groups"]
    if len(saved) != len(groups) or any(not isinstance(g, Mapping) or len(g.get("params", ())) != len(h["params"])
                                        for g, h in zip(saved, groups)):
        raise CheckpointError(
            f"{where}: the optimizer state does not fit this optimizer: it has {len(saved)} parameter group(s) of "
            f"{[len(g.get('params', ())) if isinstance(g, Mapping) else '?' for g in saved]} parameters, this optimizer "
            f"{len(groups)} of {[len(h['params']) for h in groups]}")
    params = {pid: p for g, h in zip(saved, groups) for pid, p in zip(g["params"], h["params"])}
    for pid, st in state["state"].items():
        if pid not in params:
            raise CheckpointError(f"{where}: optimizer['state'] has an entry for parameter {pid!r}, which no group lists")
        if not isinstance(st, Mapping):
            raise CheckpointError(f"{where}: optimizer['state'][{pid!r}] should be a dict, got {type(st).__name__}")
        for name, t in st.items():
            if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape != params[pid].shape:
                raise CheckpointError(
                    f"{where}: optimizer['state'][{pid!r}][{name!r}] has shape {tuple(t.shape)}, but its parameter has "
                    f"shape {tuple(params[pid].shape)}")


def load_states(ckpt: Mapping, model: torch.nn.Module, optimizer: torch.optim.Optimizer, where: str, *,
                new_optimizer: bool = False, lr: float | None = None, weight_decay: float | None = None) -> None:
    """Load ``ckpt``'s model and optimizer states into ``model`` and ``optimizer``, after upgrading an
    earlier store layout (:func:`upgrade_checkpoint`) and checking that both fit (CheckpointError,
    ModelChangedError; nothing is loaded when one does not). ``new_optimizer``: the optimizer starts
    without the saved state (a new kind). ``lr``, ``weight_decay``: set in every parameter group
    after loading (the config's values)."""
    upgrade_checkpoint(ckpt, model, optimizer)  # a masked box saved densely, by an earlier seq2d
    check_model_state(ckpt["model"], model, where)
    if not new_optimizer:
        check_optimizer_state(ckpt["optimizer"], optimizer, where)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise CheckpointError(f"the model in {where} does not fit this model: {e}") from e
    if new_optimizer:
        return
    try:
        optimizer.load_state_dict(ckpt["optimizer"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"the optimizer state in {where} does not fit this optimizer: {e}") from e
    for g in optimizer.param_groups:
        g["lr"] = g["lr"] if lr is None else lr
        g["weight_decay"] = g["weight_decay"] if weight_decay is None else weight_decay


def check_resume_extra(extra: Mapping, batches: int, where: str) -> None:
    """CheckpointError unless the trainer's ``extra`` entry is usable: ``batch`` an int in
    ``[0, batches)`` and, mid-epoch, ``partial`` the running sums."""
    batch = extra.get("batch", 0)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 0 <= batch < batches:
        raise CheckpointError(f"{where}: extra['batch'] should be an int in [0, {batches}) (the batch to continue the "
                              f"epoch from), got {batch!r}")
    if batch:
        partial = extra.get("partial")
        if not isinstance(partial, Mapping):
            raise CheckpointError(f"{where}: extra['partial'] (the running sums of the interrupted epoch) is missing")
        for k in ("loss", "correct", "count", "time"):
            v = partial.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise CheckpointError(f"{where}: extra['partial'][{k!r}] should be a number, got {v!r}")
    div = extra.get("divergence")
    if div is not None and not (isinstance(div, Mapping) and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in div.values())):
        raise CheckpointError(f"{where}: extra['divergence'] should be a dict of numbers, got {div!r}")
