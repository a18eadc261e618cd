"""A run's identity: the hash of its effective config (:func:`config_hash`), the fields in
which two configs differ (:func:`config_diff`), and the fields a resume may change when asked
(:func:`parse_allow_changed`, ``--allow-changed``). The model it trained is the other half,
recorded beside the hash and never inside it: :mod:`seq2d.train.fingerprint`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import InvalidType, InvalidValue, did_you_mean
from ..errors import show_value as _show
from ..renames import old_model_name, old_store_value
from .config import (ALLOW_CHANGED_FIELDS, LEGACY_DEFAULTS, OUTPUT_FIELDS, RENAMED_FIELDS, RESUME_FREE_FIELDS, TrainConfig,
                     config_fields, config_to_dict, renamed_fields)

__all__ = ["config_hash", "config_diff", "format_diff", "format_changes", "parse_allow_changed"]


def _comparable(cfg: TrainConfig | Mapping) -> dict:
    """The fields that define what a run computes: every field outside :data:`OUTPUT_FIELDS`
    whose value differs from the :class:`TrainConfig` default. Fields at their default are left
    out, so adding a new field (with a default that keeps the old behaviour) does not change the
    hash of existing runs: a finished run stays reusable across seq2d versions. A field added
    with a default that changes what a config computes is listed in
    :data:`~seq2d.train.config.LEGACY_DEFAULTS` (an older config then stands for its old value);
    changing an existing field's default changes what old configs compute: bump
    :data:`HASH_VERSION` then."""
    d = _with_legacy(cfg)
    defaults = config_to_dict(TrainConfig())
    out = {k: v for k, v in d.items() if k not in OUTPUT_FIELDS and (k not in defaults or defaults[k] != v)}
    # a renamed value is hashed under its old spelling (store = "dense", loop = true as store =
    # "loop": seq2d.renames.OLD_NAMES), so a run keeps the identity it was recorded with
    out = old_store_value(out)
    if "model" in out:  # a renamed model is hashed under its old name too (seq2d.renames.OLD_NAMES["model"])
        out["model"] = old_model_name(out["model"])
    # a renamed field is hashed under its old name (``store`` or ``kernel`` as ``backend``, while
    # only one of them is set), so a run keeps the identity it was recorded with
    for old, new in RENAMED_FIELDS.items():
        present = [k for k in new if k in out]
        if len(present) == 1:
            out[old] = out.pop(present[0])
    return out


def _with_legacy(cfg: TrainConfig | Mapping) -> dict:
    """The config as a dict; a dict written before a field of :data:`LEGACY_DEFAULTS` existed
    gets the value it stood for (not today's default), and its renamed keys are read as today's
    fields (:func:`~seq2d.train.config.renamed_fields`)."""
    if isinstance(cfg, TrainConfig):
        return config_to_dict(cfg)
    return {**{k: v for k, v in LEGACY_DEFAULTS.items() if k not in cfg}, **renamed_fields(cfg)}


# Bumped whenever the default of an existing TrainConfig field changes (see _comparable).
HASH_VERSION = 2


def config_hash(cfg: TrainConfig | Mapping) -> str:
    """The effective config's identity: sha256 (16 hex digits) of every field except
    :data:`OUTPUT_FIELDS` (where outputs go, how much is printed) and the fields at their
    default value, as canonical JSON.
    Two runs with the same hash compute the same thing; written to ``run.json`` in the run
    folder, and a finished result is reused only when it matches."""
    import hashlib
    import json

    text = json.dumps({"v": HASH_VERSION, **_comparable(cfg)}, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_diff(old: TrainConfig | Mapping, new: TrainConfig | Mapping, *, ignore: Sequence[str] = OUTPUT_FIELDS) -> dict:
    """``{field: (old, new)}`` for the fields that differ, outside ``ignore`` (a field that one
    side lacks counts as its default)."""
    defaults = config_to_dict(TrainConfig())
    a = {**defaults, **_with_legacy(old)}
    b = {**defaults, **_with_legacy(new)}
    return {k: (a.get(k), b.get(k)) for k in dict.fromkeys([*a, *b]) if k not in ignore and a.get(k) != b.get(k)}


def format_diff(diff: Mapping) -> str:
    """``"lr 0.01 -> 0.5, epochs 2 -> 3"`` from :func:`config_diff`."""
    return ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in diff.items())


def format_changes(changes) -> str:
    """``"lr: 0.01 -> 0.5 at update 40; ..."`` from the settings a resume changed (``allow_changed``;
    the records kept in ``run.json``, the checkpoint and the metrics rows, as their readers give them:
    an ``update`` each)."""
    return "; ".join(f"{c.get('field')}: {c.get('old')!r} -> {c.get('new')!r} at update {c.get('update')}" for c in changes)


def parse_allow_changed(value: str | Sequence[str] | None, *, where: str = "--allow-changed") -> tuple[str, ...]:
    """The fields a resume may change (``"lr,optimizer"`` or a sequence), checked against
    :data:`ALLOW_CHANGED_FIELDS`."""
    if value is None:
        return ()
    if isinstance(value, str):
        items = [v.strip().replace("-", "_") for v in value.split(",") if v.strip()]
    elif isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        items = [v.strip().replace("-", "_") for v in value if v.strip()]
    else:
        raise InvalidType(f"{where}: expected a comma-separated string or a list of field names, got {_show(value)}")
    for k in items:
        if k in ALLOW_CHANGED_FIELDS:
            continue
        if k in config_fields():
            raise InvalidValue(f"{where}: field {k!r} cannot be changed on resume; only "
                               f"{', '.join(ALLOW_CHANGED_FIELDS)} can (and {', '.join(RESUME_FREE_FIELDS)} "
                               "may change without asking)")
        raise InvalidValue(f"{where}: unknown field {k!r}{did_you_mean(k, ALLOW_CHANGED_FIELDS)}; fields that may "
                           "change on resume when allowed: "
                           + ", ".join(ALLOW_CHANGED_FIELDS))
    return tuple(dict.fromkeys(items))
