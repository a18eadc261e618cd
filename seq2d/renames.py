"""Renamed words: the one table of old spellings (:data:`OLD_NAMES`) that saved files may still
hold, and the "now called" error a Python call or command line that passes one gets.

A saved file (a config TOML, a run's ``run.json``, a checkpoint, a spec file, a run folder's
name) keeps loading: its readers map each old spelling to today's. A run's identity does not
move: :func:`seq2d.train.identity.config_hash` hashes today's spelling under the old one, so a
committed run keeps the hash it was recorded with. Code that passes an old spelling today is
told what it is now called (:func:`now_called`). Renamed config *fields* (``backend``,
``iterations``, ``max_steps``) are per-field metadata of :class:`seq2d.train.TrainConfig` (its
``was`` entries), read by the same loaders; renamed *record keys* (a run's ``step``, now
``update``) are read as today's by :func:`migrate_record`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import InvalidValue

__all__ = ["OLD_NAMES", "FORMER_PRESETS", "migrate_model_name", "old_model_name", "now_called", "migrate_record",
           "migrate_store_value", "old_store_value", "check_store_value", "check_hooks"]

#: Old spelling -> today's, by what it names. Readers:
#: ``state_dict``: key prefixes (seq2d.stores.migrate.migrate_state_dict);
#: ``store``: a config's or spec's ``store`` value -> the keys that replace it (:func:`migrate_store_value`);
#: ``model``: a registered model name in a config (``model = "random"``; registry names are the
#: Python functions' names, so the paper's randomized model is ``random_model``);
#: ``mnist_model``: a named configuration of ``seq2d mnist`` (one spelling with the registry's:
#: underscores), in a run folder's name or a results row;
#: ``record``: a key of a saved run record (optimizer updates were "steps" until issue 36: run.json,
#: a checkpoint and a metrics row held ``step``, a run's summary row ``steps``; :func:`migrate_record`);
#: ``hook``: a trainer callback's method (:func:`check_hooks`: a callback with only the old one is refused,
#: as it would never be called).
#: tests/test_renames.py checks every entry both ways (loads, and the "now called" error).
OLD_NAMES: dict[str, dict] = {
    # a tiled model's block-sparse matrix was ``model.engine``, saved under ``engine.*``
    "state_dict": {"engine.": "store.matrix."},
    # the per-block loop was a store, store="loop"; it is a mode of the dense store
    "store": {"loop": {"store": "dense", "loop": True}},
    "model": {"random": "random_model"},
    "mnist_model": {"random-element": "random_element", "random-tile": "random_tile", "random-block": "random_block",
                    "random-density": "random_density", "linear-28": "linear_28",
                    "random-element-feedforward": "random_element_feedforward"},
    "record": {"step": "update", "steps": "updates"},
    "hook": {"on_step_end": "on_update_end"},
}

#: Preset names of earlier versions that build nothing any more: the error names the successor.
FORMER_PRESETS = {"truncated-rnn": "'truncated_rnn'", "masked-random": "'random_mask'",
                  "blocksparse-random": "'random_tiles'",
                  "transformer": "'transformer_layer', or 'transformer_encoder' with layers=N",
                  "random": "'random_model'"}


def migrate_model_name(name, kind: str = "model"):
    """Today's spelling of ``name`` (a value read from a saved file); other values unchanged."""
    return OLD_NAMES[kind].get(name, name) if isinstance(name, str) else name


def old_model_name(name, kind: str = "model"):
    """:func:`migrate_model_name` undone: the spelling ``name`` had when runs were first saved
    (what :func:`seq2d.train.identity.config_hash` hashes)."""
    for old, new in OLD_NAMES[kind].items():
        if new == name:
            return old
    return name


def now_called(where: str, name, kind: str = "model") -> None:
    """The "now called" error for an old spelling passed in code or on a command line
    (``config field 'model': 'random' is now called 'random_model'``); other values pass."""
    table: Mapping = OLD_NAMES[kind]
    if isinstance(name, str) and name in table:
        raise InvalidValue(f"{where}: {name!r} is now called {table[name]!r}")


def migrate_record(record):
    """``record`` (one dict read from a saved run file: ``run.json``, a checkpoint, a metrics row,
    a change made on resume, a summary row) with its old keys (``OLD_NAMES["record"]``) read as
    today's; a key whose new spelling is there too is kept as it is; anything else unchanged.
    Only the top level: a record's ``config`` is read by the config loaders (its ``steps`` is the
    model's)."""
    if not isinstance(record, Mapping):
        return record
    table = OLD_NAMES["record"]
    return {(table[k] if k in table and table[k] not in record else k): v for k, v in record.items()}


def check_hooks(callbacks) -> None:
    """The "now called" error for a trainer callback that defines a hook by its old name only
    (``on_step_end``): the trainer would never call it, and the callback would do nothing."""
    for cb in callbacks:
        for old, new in OLD_NAMES["hook"].items():
            if hasattr(cb, old) and not hasattr(cb, new):
                raise InvalidValue(f"callback {type(cb).__name__} defines {old}(trainer, step); the hook is now "
                                   f"called {new}(trainer, update) (after each optimizer update)")


def check_store_value(owner: str, store) -> None:
    """The "now called" error for a ``store`` value of :data:`OLD_NAMES` passed to ``owner``
    (``Sequential2D got store='loop'; it is now called store='dense', loop=True``)."""
    if isinstance(store, str) and store in OLD_NAMES["store"]:
        new = ", ".join(f"{k}={v!r}" for k, v in OLD_NAMES["store"][store].items())
        raise InvalidValue(f"{owner} got store={store!r}; it is now called {new} (the per-block loop is a mode of "
                           "the dense store)")


def migrate_store_value(d: Mapping, where: str) -> dict:
    """``d`` (a config or spec table read from a file) with an old ``store`` value replaced by the
    keys that now say it (``store = "loop"`` -> ``store = "dense"``, ``loop = true``); an old value
    beside one of its new keys is an error (which one would be meant?)."""
    out = dict(d)
    new = OLD_NAMES["store"].get(out.get("store")) if isinstance(out.get("store"), str) else None
    if new is not None:
        both = [k for k in new if k != "store" and k in out]
        if both:
            raise InvalidValue(f"{where}: store = {out['store']!r} is the old spelling of "
                               + ", ".join(f"{k} = {v!r}" for k, v in new.items()) + f"; give {both[0]!r} with "
                               "store = 'dense' only")
        out.update(new)
    return out


def old_store_value(d: Mapping) -> dict:
    """:func:`migrate_store_value` undone: ``d`` (a config's fields away from their defaults)
    with the keys an old ``store`` value stands for put back as that value, so that a config
    hashes as it did when it was written with the old spelling."""
    out = dict(d)
    for old, new in OLD_NAMES["store"].items():
        if all(k in out and out[k] == v for k, v in new.items()):
            for k in new:
                del out[k]
            out["store"] = old
    return out
