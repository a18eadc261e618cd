"""One way from a name to a model, for the CLI, the trainer and the MNIST comparison.

    resolve_model("mlp", sizes=[784, 256, 10])    # a registered constructor with keyword arguments
    resolve_model("mlp:784,256,10,act=tanh")      # a preset string (seq2d.models.presets)
    resolve_model("model.toml")                   # a spec file (seq2d.from_spec)

Every name is a registered one (seq2d.models.registry, the one table of model names): a preset
is ``NAME:ARGS`` for a registered NAME, and keyword arguments go only with a bare registered name.
Whether an argument means a file is :func:`seq2d.models.presets.names_a_file`. :func:`constructor_options` picks, from a table of available values, the
ones a registered constructor's signature names (the trainer maps its config fields this way).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from torch import nn

from ..errors import InvalidType, InvalidValue, MissingFile, Seq2DError, did_you_mean
from .presets import CHECKPOINT_SUFFIXES, PRESETS, SPEC_SUFFIXES, build_preset, names_a_file
from .registry import create_model, list_models, model_entrypoint

__all__ = ["resolve_model", "constructor_options"]


def _check_constructor_args(name: str, kw: dict, where: str) -> None:
    """A registered constructor's keyword arguments must fit its signature (else Python's
    TypeError would escape as if it were a bug in seq2d)."""
    sig = inspect.signature(model_entrypoint(name))
    try:
        sig.bind(**kw)
    except TypeError as e:
        raise InvalidValue(f"{where}constructor {name!r}: {e}. Its arguments: "
                           + ", ".join(f"{k}=" for k in sig.parameters)) from None


def _from_file(text: str, kwargs: dict, where: str) -> nn.Module:
    if not os.path.exists(text):
        what = ("spec file" if text.lower().endswith(SPEC_SUFFIXES)
                else "checkpoint file" if text.lower().endswith(CHECKPOINT_SUFFIXES) else "file or folder")
        raise MissingFile(f"{where}{what} {text!r} does not exist")
    if os.path.isdir(text):
        raise InvalidValue(f"{where}{text!r} is a folder; expected a preset, a .toml/.json spec file or a "
                           "registered constructor name")
    if text.lower().endswith(CHECKPOINT_SUFFIXES):
        raise InvalidValue(f"{where}{text!r} is a checkpoint; this reads presets, .toml/.json spec files "
                           "and registered constructor names (`seq2d stability` reads checkpoints)")
    if kwargs:
        raise InvalidValue(f"{where}key=value arguments go with a registered constructor name, not with the spec file {text!r}")
    try:
        return build_preset(text)
    except Seq2DError as e:
        if text in str(e) or str(Path(text)) in str(e):
            raise
        try:
            again = type(e)(f"spec file {text!r}: {e}")
        except Exception:  # a Seq2DError subclass with another signature
            again = InvalidValue(f"spec file {text!r}: {e}")
        raise again from e


def resolve_model(name: str, /, *, where: str | None = None, **kwargs) -> nn.Module:
    """The model ``name`` names: a registered constructor (called with ``kwargs``, which must fit
    its signature), a preset string or a spec file path. Every failure is a Seq2DError naming the
    place: unknown names list what is valid, a missing file or a folder or checkpoint given as a
    model says so. ``where`` prefixes messages (the CLI passes ``"MODEL"``, its argument)."""
    if not isinstance(name, str):
        raise InvalidType(f"a model name must be a str, got {type(name).__name__}")
    pre = f"{where}: " if where else ""
    if name in list_models():
        _check_constructor_args(name, kwargs, pre)
        return create_model(name, **kwargs)
    if names_a_file(name):
        return _from_file(name, kwargs, pre)
    if ":" in name:
        if kwargs:
            raise InvalidValue(f"{pre}key=value arguments go with a registered constructor name, not with the preset "
                               f"{name!r}; write preset options after the colon (e.g. mlp:784,256,10,act=tanh)")
        return build_preset(name)  # an unknown NAME raises, naming the presets
    raise InvalidValue(f"{pre}Unknown model {name!r}{did_you_mean(name, list_models())}. Give a registered name ("
                       + ", ".join(list_models()) + "), a preset (" + ", ".join(f"{k}:..." for k in PRESETS)
                       + ") or a path to a .toml/.json spec")


def constructor_options(name: str, available: Mapping[str, tuple[Sequence[str], object]]) -> tuple[dict, set]:
    """For the registered constructor ``name``: ``(kwargs, used)`` where ``available`` maps a
    source field to ``(keyword names it may feed, value)``; the first keyword the constructor's
    signature names gets the value (lists copied), and ``used`` lists the fields consumed."""
    params = inspect.signature(model_entrypoint(name)).parameters
    kwargs, used = {}, set()
    for field, (names, value) in available.items():
        for kw in names:
            if kw in params:
                kwargs[kw] = list(value) if isinstance(value, list) else value
                used.add(field)
                break
    return kwargs, used
