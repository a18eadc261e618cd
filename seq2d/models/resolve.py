"""One way from a name to a model, for the CLI, the trainer and the MNIST comparison.

    resolve_model("mlp", sizes=[784, 256, 10])    # a registered constructor with keyword arguments
    resolve_model("mlp:784,256,10,act=tanh")      # a preset string (seq2d.models.presets)
    resolve_model("model.toml")                   # a spec file (seq2d.from_spec)

A registered name wins over a preset of the same spelling; keyword arguments go only with a
registered name. :func:`constructor_options` picks, from a table of available values, the
ones a registered constructor's signature names (the trainer maps its config fields this way).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path

from torch import nn

from ..errors import InvalidType, InvalidValue
from .presets import PRESETS, build_preset, is_preset
from .registry import create_model, list_models, model_entrypoint

__all__ = ["resolve_model", "constructor_options"]


def resolve_model(name: str, /, **kwargs) -> nn.Module:
    """The model ``name`` names: a registered constructor (called with ``kwargs``), a preset
    string or a spec file path. Unknown names raise ValueError listing what is valid."""
    if not isinstance(name, str):
        raise InvalidType(f"a model name must be a str, got {type(name).__name__}")
    if name in list_models() and not is_preset(name):
        return create_model(name, **kwargs)
    if kwargs:
        if is_preset(name):
            raise InvalidValue(f"key=value arguments go with a registered constructor name, not with the preset {name!r}; "
                             "write preset options after the colon (e.g. mlp:784,256,10,act=tanh)")
        return create_model(name, **kwargs)  # raises: unknown registered name
    if not is_preset(name) and ":" not in name and name not in PRESETS and not Path(name).suffix:
        raise InvalidValue(f"Unknown model {name!r}. Give a preset (" + ", ".join(f"{k}:..." for k in PRESETS)
                         + "), a path to a .toml/.json spec, or a registered constructor ("
                         + ", ".join(list_models()) + ")")
    return build_preset(name)


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
