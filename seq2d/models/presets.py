"""Preset strings: a model in one short argument, for the command line and the gallery.

    build_preset("mlp:784,256,10")                      # sizes; ,act=tanh ,bias=0
    build_preset("rnn:8,16,layers=2")                   # input, hidden; ,nonlinearity=relu
    build_preset("truncated-rnn:8,16,k=4,layers=2")     # the k-truncation of that RNN
    build_preset("transformer:64,4,128,layers=2")       # d_model, nhead, dim_ff; ,norm_first=1
    build_preset("masked-random:784,256,10,density=0.1")       # random element mask (cyclic), ,seed=0
    build_preset("blocksparse-random:512,256,64,density=0.2,tile=32")   # random tiles
    build_preset("model.toml")                          # a spec file (seq2d.spec.from_spec)

The grammar is ``NAME:POSITIONAL,...,KEY=VALUE,...``: positional values are ints, keys
are checked (an unknown preset or key raises ValueError naming the valid ones), boolean
values are ``1/0/true/false/yes/no``. A string naming an existing file, or ending in
``.toml`` / ``.json``, is read as a spec.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from ..errors import InvalidType, InvalidValue, MissingFile

__all__ = ["PRESETS", "build_preset", "is_preset", "preset_help"]


@dataclass(frozen=True)
class Preset:
    usage: str                  # shown in errors and in `seq2d draw --help`
    about: str
    positional: tuple[int, int | None]   # (min, max) number of positional ints; max None = any
    keys: dict[str, type]       # key -> type (int, float, bool, str); required keys have no default
    defaults: dict[str, object]
    build: Callable[..., nn.Module]


def _registered(name: str, **fixed):
    """A preset that calls the registered constructor ``name``: positional ints as ``sizes`` (or
    the names in ``positional``), keys renamed by ``rename``."""

    def build(pos, kw, *, positional=("sizes",), rename=None):
        from .registry import create_model

        args = {k: v for k, v in kw.items() if v is not None}
        for old, new in (rename or {}).items():
            if old in args:
                args[new] = args.pop(old)
        if positional == ("sizes",):
            args["sizes"] = list(pos)
        else:
            args.update(zip(positional, pos))
        return create_model(name, **args, **fixed)

    return build


def _mlp(pos, kw):
    return _registered("mlp")(pos, kw, rename={"act": "activation"})


def _rnn_model(pos, kw):
    return _registered("rnn")(pos, kw, positional=("input_size", "hidden_size"), rename={"layers": "num_layers"})


def _truncated(pos, kw):
    return _registered("truncated_rnn")(pos, kw, positional=("input_size", "hidden_size"),
                                        rename={"layers": "num_layers"})


def _transformer(pos, kw):
    d, h, dff = pos
    common = dict(activation=kw["activation"], norm_first=kw["norm_first"])
    from .registry import create_model

    if kw["layers"] == 1 and not kw["final_norm"]:
        return create_model("transformer_layer", d_model=d, nhead=h, dim_feedforward=dff, **common)
    return create_model("transformer_encoder", d_model=d, nhead=h, num_layers=kw["layers"], dim_feedforward=dff,
                        final_norm=kw["final_norm"], **common)


def _random(pos, kw):
    return _registered("random_mask")(pos, kw, rename={"act": "activation"})


def _randomized(pos, kw):
    return _registered("random")(pos, kw)


def _blocksparse_random(pos, kw):
    return _registered("random_tiles")(pos, kw, rename={"act": "activation"})


_NL = ("tanh", "relu")
PRESETS: dict[str, Preset] = {
    "mlp": Preset("mlp:SIZE,SIZE[,...][,act=relu][,bias=1]", "multi-layer perceptron (block sub-diagonal)",
                  (2, None), {"act": str, "bias": bool}, {"act": "relu", "bias": True}, _mlp),
    "rnn": Preset("rnn:INPUT,HIDDEN[,layers=1][,nonlinearity=tanh][,bias=1]", "Elman RNN (cyclic: self-loops)",
                  (2, 2), {"layers": int, "nonlinearity": str, "bias": bool},
                  {"layers": 1, "nonlinearity": "tanh", "bias": True}, _rnn_model),
    "truncated-rnn": Preset("truncated-rnn:INPUT,HIDDEN,k=K[,layers=1][,nonlinearity=tanh][,bias=1]",
                            "the k-truncated RNN: acyclic, weight-tied", (2, 2),
                            {"k": int, "layers": int, "nonlinearity": str, "bias": bool},
                            {"layers": 1, "nonlinearity": "tanh", "bias": True}, _truncated),
    "transformer": Preset("transformer:D_MODEL,NHEAD,DIM_FF[,layers=1][,norm_first=0][,final_norm=0][,activation=relu]",
                          "transformer encoder layer (layers=1) or encoder", (3, 3),
                          {"layers": int, "norm_first": bool, "final_norm": bool, "activation": str},
                          {"layers": 1, "norm_first": False, "final_norm": False, "activation": "relu"}, _transformer),
    "masked-random": Preset("masked-random:SIZE,SIZE[,...][,density=0.1][,seed=0][,act=relu][,steps=n-1]",
                     "random element mask over every non-input row x every column (cyclic)", (2, None),
                     {"density": float, "seed": int, "act": str, "steps": int},
                     {"density": 0.1, "seed": 0, "act": "relu", "steps": None}, _random),
    "random": Preset("random:SIZE,SIZE[,...][,granularity=element][,seed=0][,tile=64][,steps=n-1]",
                     "the paper's randomized model: mlp(SIZES)'s exact parameter count at random over the "
                     "full block matrix (seq2d.randomize)", (2, None),
                     {"granularity": str, "seed": int, "tile": int, "steps": int},
                     {"granularity": "element", "seed": 0, "tile": 64, "steps": None}, _randomized),
    "blocksparse-random": Preset("blocksparse-random:SIZE,SIZE[,...][,density=0.1][,tile=32][,seed=0][,act=relu][,steps=n-1]",
                                 "random T x T tiles (tile density) in one block-sparse engine", (2, None),
                                 {"density": float, "tile": int, "seed": int, "act": str, "steps": int},
                                 {"density": 0.1, "tile": 32, "seed": 0, "act": "relu", "steps": None},
                                 _blocksparse_random),
}


def preset_help() -> str:
    """One line per preset: usage and what it builds (for ``--help`` texts)."""
    return "\n".join(f"  {p.usage}\n      {p.about}" for p in PRESETS.values()) + \
        "\n  PATH.toml | PATH.json\n      a spec file (see seq2d.spec)"


def _is_spec_path(text: str) -> bool:
    return text.lower().endswith((".toml", ".json")) or (":" not in text and os.path.isfile(text))


def is_preset(text: str) -> bool:
    """True when ``text`` looks like a preset (``name:...``) or a spec file path."""
    if not isinstance(text, str):
        return False
    return _is_spec_path(text) or text.split(":", 1)[0] in PRESETS and ":" in text


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
    if _is_spec_path(text):
        path = Path(text)
        if not path.is_file():
            raise MissingFile(f"spec file {text!r} does not exist")
        from ..spec import from_spec

        return from_spec(path)
    name, sep, rest = text.partition(":")
    valid = ", ".join(repr(k) for k in PRESETS)
    if name not in PRESETS:
        raise InvalidValue(f"Unknown preset {name!r}. Select from {valid}, or give a path to a .toml/.json spec")
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
    return p.build(pos, kw)
