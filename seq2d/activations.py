"""Per-slot activations: names -> modules.

A slot activation is applied after the row sum, once per slot (never inside a
block). Names are resolved here so that every constructor, the spec loader and
the CLI accept the same vocabulary and reject typos the same way.
"""

from __future__ import annotations

from torch import nn

from .errors import InvalidType, InvalidValue

__all__ = ["ACTIVATIONS", "make_activation", "activation_name", "elementwise_key"]


def _layernorm(size: int, device=None, dtype=None) -> nn.Module:
    return nn.LayerNorm(size, device=device, dtype=dtype)


# name -> factory(size, device, dtype). Only "layernorm" owns parameters.
ACTIVATIONS = {
    "identity": lambda size, device=None, dtype=None: nn.Identity(),
    "relu": lambda size, device=None, dtype=None: nn.ReLU(),
    "tanh": lambda size, device=None, dtype=None: nn.Tanh(),
    "sigmoid": lambda size, device=None, dtype=None: nn.Sigmoid(),
    "gelu": lambda size, device=None, dtype=None: nn.GELU(),
    "gelu_tanh": lambda size, device=None, dtype=None: nn.GELU(approximate="tanh"),
    "layernorm": _layernorm,
}

# Module type -> canonical name, used by repr/to_spec/from_torch.
_NAMES = [
    (nn.Identity, "identity"),
    (nn.ReLU, "relu"),
    (nn.Tanh, "tanh"),
    (nn.Sigmoid, "sigmoid"),
]


def make_activation(spec, size: int, *, slot: int | None = None, device=None, dtype=None) -> nn.Module:
    """Return the module for an activation given by name, module, or None (identity)."""
    if spec is None:
        return nn.Identity()
    if isinstance(spec, nn.Module):
        return spec
    if isinstance(spec, str):
        key = spec.lower().replace("-", "_")
        if key in ("layer_norm", "ln"):
            key = "layernorm"
        if key in ("none", "linear"):
            key = "identity"
        if key not in ACTIVATIONS:
            where = f" for slot {slot}" if slot is not None else ""
            raise InvalidValue(
                f"Unknown activation {spec!r}{where}. Select from "
                + ", ".join(repr(k) for k in ACTIVATIONS)
                + ", None, or pass an nn.Module."
            )
        return ACTIVATIONS[key](size, device=device, dtype=dtype)
    where = f" for slot {slot}" if slot is not None else ""
    raise InvalidType(
        f"activation{where} must be a name (str), an nn.Module or None, got {type(spec).__name__}"
    )


def activation_name(module: nn.Module) -> str | None:
    """Canonical name of an activation module, or None if it has no name (custom module)."""
    if isinstance(module, nn.GELU):
        return "gelu" if module.approximate == "none" else "gelu_tanh"
    if isinstance(module, nn.LayerNorm):
        # Only the default LayerNorm over the last dim round-trips through a name.
        if (len(module.normalized_shape) == 1 and module.elementwise_affine and module.bias is not None
                and abs(module.eps - 1e-5) < 1e-12):
            return "layernorm"
        return None
    for cls, name in _NAMES:
        if type(module) is cls:
            return name
    return None


def is_identity(module: nn.Module) -> bool:
    return type(module) is nn.Identity


def lipschitz(module: nn.Module) -> float | None:
    """Global Lipschitz constant of an elementwise activation, None when unknown."""
    name = activation_name(module)
    return {"identity": 1.0, "relu": 1.0, "tanh": 1.0, "sigmoid": 0.25}.get(name)


_ELEMENTWISE = (nn.Identity, nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.LeakyReLU, nn.ELU, nn.Softplus)


def elementwise_key(act: nn.Module):
    """A hashable key shared by activations that act elementwise in the same way, else None."""
    t = type(act)
    if t not in _ELEMENTWISE:
        return None
    if t is nn.GELU:
        return (t, act.approximate)
    if t is nn.LeakyReLU:
        return (t, act.negative_slope)
    if t is nn.ELU:
        return (t, act.alpha)
    if t is nn.Softplus:
        return (t, act.beta, act.threshold)
    return (t,)
