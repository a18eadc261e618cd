"""Constructors registered by name, as timm does: ``create_model(name, **kw)``.

Tests run generic checks (forward vs reference, backward reaches every
parameter, state_dict round trip, ``.to(dtype)``, repr, pickle) over every
registered name, so a new constructor gets them for free.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..errors import InvalidType, InvalidValue

__all__ = ["register_model", "create_model", "list_models", "model_entrypoint"]

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}


def register_model(fn: Callable[..., nn.Module] | None = None, *, name: str | None = None):
    """Register a constructor under ``name`` (default: its ``__name__``). Usable as a decorator."""

    def deco(f):
        key = name or f.__name__
        if key in _REGISTRY and _REGISTRY[key] is not f:
            raise InvalidValue(f"a model constructor named {key!r} is already registered")
        _REGISTRY[key] = f
        return f

    return deco(fn) if fn is not None else deco


def list_models() -> list[str]:
    return sorted(_REGISTRY)


def model_entrypoint(name: str) -> Callable[..., nn.Module]:
    if not isinstance(name, str):
        raise InvalidType(f"model name must be a str, got {type(name).__name__}")
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidValue(f"Unknown model {name!r}. Select from " + ", ".join(repr(k) for k in list_models())) from None


def create_model(name: str, **kwargs) -> nn.Module:
    """Build the registered constructor ``name`` with keyword arguments."""
    return model_entrypoint(name)(**kwargs)
