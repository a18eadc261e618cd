"""Preset strings: a registered model in one short argument, for the command line and the gallery.

    build_preset("mlp:784,256,10")                      # sizes; ,act=tanh ,bias=0
    build_preset("rnn:8,16,layers=2")                   # input, hidden; ,nonlinearity=relu
    build_preset("truncated_rnn:8,16,k=4,layers=2")     # the k-truncation of that RNN
    build_preset("transformer_layer:64,4,128")          # d_model, nhead, dim_ff; ,norm_first=1
    build_preset("transformer_encoder:64,4,128,layers=2")      # ,final_norm=1
    build_preset("random_mask:784,256,10,density=0.1")  # random element mask (cyclic), ,seed=0
    build_preset("random_tiles:512,256,64,density=0.2,tile=32")   # random tiles
    build_preset("random_model:784,256,10,granularity=tile")       # the paper's randomized model
    build_preset("model.toml")                          # a spec file (seq2d.spec.from_spec)

A preset's name is the registered constructor it calls (seq2d.models.registry, the one table of
model names): ``NAME:POSITIONAL,...,KEY=VALUE,...`` is ``create_model(NAME, ...)`` with the
positional ints and the keys mapped to its keyword arguments. Keys are checked (an unknown
preset or key raises ValueError naming the valid ones, with a did-you-mean hint), boolean values
are ``1/0/true/false/yes/no``. :func:`names_a_file` is the one rule for "this argument is a file".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from ..errors import InvalidType, InvalidValue, MissingFile, did_you_mean
from .registry import create_model, list_models

__all__ = ["PRESETS", "build_preset", "is_preset", "preset_help", "names_a_file", "SPEC_SUFFIXES",
           "CHECKPOINT_SUFFIXES", "unknown_preset"]

SPEC_SUFFIXES = (".toml", ".json")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class Preset:
    usage: str                  # shown in errors and in `seq2d draw --help`
    about: str
    positional: tuple[int, int | None]   # (min, max) number of positional ints; max None = any
    keys: dict[str, type]       # key -> type (int, float, bool, str); required keys have no default
    defaults: dict[str, object]
    names: tuple[str, ...] = ("sizes",)  # the constructor arguments the positional ints fill ("sizes": all)
    rename: dict[str, str] = field(default_factory=dict)  # preset key -> constructor argument


_RNN_NAMES, _RNN_RENAME = ("input_size", "hidden_size"), {"layers": "num_layers"}
_TF_NAMES = ("d_model", "nhead", "dim_feedforward")
# Keyed by registered name (tests/test_registry.py checks every key is one).
PRESETS: dict[str, Preset] = {
    "mlp": Preset("mlp:SIZE,SIZE[,...][,act=relu][,bias=1]", "multi-layer perceptron (block sub-diagonal)",
                  (2, None), {"act": str, "bias": bool}, {"act": "relu", "bias": True}, rename={"act": "activation"}),
    "rnn": Preset("rnn:INPUT,HIDDEN[,layers=1][,nonlinearity=tanh][,bias=1]", "Elman RNN (cyclic: self-loops)",
                  (2, 2), {"layers": int, "nonlinearity": str, "bias": bool},
                  {"layers": 1, "nonlinearity": "tanh", "bias": True}, _RNN_NAMES, _RNN_RENAME),
    "truncated_rnn": Preset("truncated_rnn:INPUT,HIDDEN,k=K[,layers=1][,nonlinearity=tanh][,bias=1]",
                            "the k-truncated RNN: acyclic, weight-tied", (2, 2),
                            {"k": int, "layers": int, "nonlinearity": str, "bias": bool},
                            {"layers": 1, "nonlinearity": "tanh", "bias": True}, _RNN_NAMES, _RNN_RENAME),
    "transformer_layer": Preset("transformer_layer:D_MODEL,NHEAD,DIM_FF[,norm_first=0][,activation=relu]",
                                "transformer encoder layer", (3, 3), {"norm_first": bool, "activation": str},
                                {"norm_first": False, "activation": "relu"}, _TF_NAMES),
    "transformer_encoder": Preset("transformer_encoder:D_MODEL,NHEAD,DIM_FF[,layers=1][,norm_first=0][,final_norm=0]"
                                  "[,activation=relu]", "transformer encoder: layers stacked in one Sequential2D",
                                  (3, 3), {"layers": int, "norm_first": bool, "final_norm": bool, "activation": str},
                                  {"layers": 1, "norm_first": False, "final_norm": False, "activation": "relu"},
                                  _TF_NAMES, {"layers": "num_layers"}),
    "random_mask": Preset("random_mask:SIZE,SIZE[,...][,density=0.1][,seed=0][,act=relu][,steps=n-1]",
                          "random element mask over every non-input row x every column (cyclic)", (2, None),
                          {"density": float, "seed": int, "act": str, "steps": int},
                          {"density": 0.1, "seed": 0, "act": "relu", "steps": None}, rename={"act": "activation"}),
    "random_model": Preset("random_model:SIZE,SIZE[,...][,granularity=element][,seed=0][,tile=64][,steps=n-1]",
                           "the paper's randomized model: mlp(SIZES)'s exact parameter count at random over the "
                           "full block matrix (seq2d.randomize)", (2, None),
                           {"granularity": str, "seed": int, "tile": int, "steps": int},
                           {"granularity": "element", "seed": 0, "tile": 64, "steps": None}),
    "random_tiles": Preset("random_tiles:SIZE,SIZE[,...][,density=0.1][,tile=32][,seed=0][,act=relu][,steps=n-1]",
                           "random T x T tiles (tile density) in one block-sparse matrix", (2, None),
                           {"density": float, "tile": int, "seed": int, "act": str, "steps": int},
                           {"density": 0.1, "tile": 32, "seed": 0, "act": "relu", "steps": None},
                           rename={"act": "activation"}),
}



def _build(name: str, pos: list, kw: dict) -> nn.Module:
    """``create_model(name, ...)``: the positional ints fill ``p.names`` (all of them ``sizes``
    when that is the one name), keys at None are left to the constructor's default."""
    p = PRESETS[name]
    args = {p.rename.get(k, k): v for k, v in kw.items() if v is not None}
    if p.names == ("sizes",):
        args["sizes"] = list(pos)
    else:
        args.update(zip(p.names, pos))
    return create_model(name, **args)


def unknown_preset(name: str) -> str:
    """``" (did you mean 'x'?)"`` for an unknown preset name; a former spelling names its successor,
    a registered name without a preset says how to give it."""
    from ..renames import FORMER_PRESETS

    if name in FORMER_PRESETS:
        return f" (renamed: did you mean {FORMER_PRESETS[name]}?)"
    if name in list_models():
        return f" ({name!r} has no preset string: give the bare name with key=value arguments)"
    return did_you_mean(name, list(PRESETS))


def preset_help() -> str:
    """One line per preset: usage and what it builds (for ``--help`` texts)."""
    return "\n".join(f"  {p.usage}\n      {p.about}" for p in PRESETS.values()) + \
        "\n  PATH.toml | PATH.json\n      a spec file (see seq2d.spec)"


def _preset_name(text: str) -> str | None:
    """The registered name before the colon of ``NAME:...``, else None."""
    name, sep, _ = text.partition(":")
    return name if sep and name in list_models() else None


def names_a_file(text: str) -> bool:
    """The one rule for whether a model argument (``MODEL``, a config's ``model``) means a file or
    folder: not when it is a registered name or a preset (``NAME:...`` with a registered NAME);
    else when it exists, holds a path separator or ends in a spec (.toml/.json) or checkpoint
    (.pt/.pth/.ckpt) suffix."""
    if text in list_models() or _preset_name(text) is not None:
        return False
    return (os.path.exists(text) or "/" in text or os.sep in text
            or text.lower().endswith(SPEC_SUFFIXES + CHECKPOINT_SUFFIXES))


def is_preset(text: str) -> bool:
    """True when ``text`` looks like a preset (``name:...``) or a spec file path."""
    if not isinstance(text, str):
        return False
    return _preset_name(text) in PRESETS or (names_a_file(text) and text.lower().endswith(SPEC_SUFFIXES))


def _value(raw: str, typ: type, where: str):
    raw = raw.strip()
    try:
        if typ is bool:
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            return int(raw)
        if typ is float:
            return float(raw)
    except ValueError:
        names = {bool: "a boolean (1/0/true/false)", int: "an int", float: "a number"}
        raise InvalidValue(f"{where} must be {names[typ]}, got {raw!r}") from None
    if not raw:
        raise InvalidValue(f"{where} must not be empty")
    return raw


def build_preset(text: str) -> nn.Module:
    """Build the model a preset string (or a spec file path) describes; see the module docstring."""
    if not isinstance(text, str):
        raise InvalidType(f"a preset must be a str, got {type(text).__name__}")
    if names_a_file(text):
        path = Path(text)
        if not path.is_file():
            raise MissingFile(f"spec file {text!r} does not exist")
        from ..spec import from_spec

        return from_spec(path)
    name, sep, rest = text.partition(":")
    valid = ", ".join(repr(k) for k in PRESETS)
    if name not in PRESETS:
        raise InvalidValue(f"Unknown preset {name!r}{unknown_preset(name)}. Select from {valid}, or give a path to a "
                           ".toml/.json spec")
    p = PRESETS[name]
    if not sep:
        raise InvalidValue(f"preset {name!r} needs arguments: {p.usage}")
    pos: list[int] = []
    kw: dict[str, object] = dict(p.defaults)
    given: set[str] = set()
    for k, item in enumerate(s for s in rest.split(",") if s.strip()):
        if "=" in item:
            key, raw = (s.strip() for s in item.split("=", 1))
            if key not in p.keys:
                raise InvalidValue(f"preset {name!r}: unknown key {key!r}. Select from "
                                 + ", ".join(repr(x) for x in p.keys) + f" (usage: {p.usage})")
            if key in given:
                raise InvalidValue(f"preset {name!r}: key {key!r} is given twice")
            given.add(key)
            kw[key] = _value(raw, p.keys[key], f"preset {name!r}: {key}")
        else:
            if given:
                raise InvalidValue(f"preset {name!r}: positional value {item.strip()!r} after key=value (usage: {p.usage})")
            pos.append(_value(item, int, f"preset {name!r}: positional value {k}"))
    lo, hi = p.positional
    if len(pos) < lo or (hi is not None and len(pos) > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise InvalidValue(f"preset {name!r} takes {want} positional ints, got {len(pos)} (usage: {p.usage})")
    missing = [k for k in p.keys if k not in kw]
    if missing:
        raise InvalidValue(f"preset {name!r}: missing required key(s) {', '.join(missing)} (usage: {p.usage})")
    return _build(name, pos, kw)
