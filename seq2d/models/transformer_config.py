"""How a transformer layer's configuration is read: from ``nn.TransformerEncoderLayer``'s own
signature (the constructors' arguments, :func:`layer_config`) and from a torch layer
(:func:`torch_layer_config`, for :func:`~seq2d.models.transformer.layer_from_torch`); both give the
same dict, so every torch keyword reaches a seq2d layer the same way or is refused by name."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..arguments import check_factory
from ..attention import _check_heads, check_dropout
from ..errors import InvalidType, InvalidValue

__all__ = ["LAYER_SIGNATURE", "ENCODER_SIGNATURE", "layer_config", "torch_layer_config"]

# ---------------------------------------------------------------------------- activation
_ACT_CALLABLES: dict[Callable, str] = {F.relu: "relu", torch.relu: "relu", F.gelu: "gelu"}


def _feedforward_activation(activation, what: str):
    """The slot activation of the feed-forward slot: a name or an nn.Module."""
    if isinstance(activation, str):
        if activation not in ("relu", "gelu"):
            raise InvalidValue(f"{what}: unknown activation {activation!r}. Select from 'relu', 'gelu', or pass an nn.Module")
        return activation
    if isinstance(activation, nn.Module):
        return activation  # applied elementwise after the row sum, as torch applies it after linear1
    if callable(activation):
        try:
            return _ACT_CALLABLES[activation]
        except (KeyError, TypeError):
            pass
        raise InvalidValue(
            f"{what}: unsupported activation callable {getattr(activation, '__name__', activation)!r}. "
            "Pass 'relu', 'gelu', F.relu, F.gelu, or an nn.Module (e.g. nn.SiLU())"
        )
    raise InvalidType(f"{what}: activation must be a str, a callable or an nn.Module, got {type(activation).__name__}")


def _check_config(d_model, nhead, dim_feedforward, layer_norm_eps, what) -> None:
    _check_heads(d_model, nhead, what)
    if isinstance(dim_feedforward, bool) or not isinstance(dim_feedforward, int) or dim_feedforward <= 0:
        raise InvalidValue(f"{what}: dim_feedforward must be a positive int, got {dim_feedforward!r}")
    if isinstance(layer_norm_eps, bool) or not isinstance(layer_norm_eps, (int, float)) or not layer_norm_eps > 0:
        raise InvalidValue(f"{what}: layer_norm_eps must be a positive float, got {layer_norm_eps!r}")


# ---------------------------------------------------------------------------- arguments
def _torch_signature(extra: tuple[inspect.Parameter, ...] = (), final: tuple[inspect.Parameter, ...] = ()):
    """``nn.TransformerEncoderLayer``'s own signature, read from torch (not restated here), with
    two defaults of ours: ``dropout=0.0`` (torch: 0.1; no dropout unless asked) and
    ``batch_first=True`` (torch: False; both layouts are taken, see
    :class:`~seq2d.TransformerEncoderLayer`); ``extra`` positional parameters go after ``nhead``
    (the encoder's ``num_layers``), ``final`` keyword-only ones at the end."""
    ours = {"dropout": 0.0, "batch_first": True}
    params = [p.replace(default=ours[p.name]) if p.name in ours else p
              for p in inspect.signature(nn.TransformerEncoderLayer).parameters.values()]
    return inspect.Signature(params[:2] + list(extra) + params[2:] + list(final))


LAYER_SIGNATURE = _torch_signature()
ENCODER_SIGNATURE = _torch_signature((inspect.Parameter("num_layers", inspect.Parameter.POSITIONAL_OR_KEYWORD),),
                                      (inspect.Parameter("final_norm", inspect.Parameter.KEYWORD_ONLY, default=False),))


def layer_config(what: str, sig: inspect.Signature, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    """``(cfg, factory_kwargs, own)``: the layer configuration of the call ``(*args, **kwargs)``
    read back from the ``nn.TransformerEncoderLayer`` it builds (on the meta device: nothing
    allocated, no random numbers drawn) by :func:`torch_layer_config`, the same reading
    :func:`~seq2d.models.transformer.layer_from_torch` does, so every torch keyword reaches the result or is refused
    there; ``own`` holds the arguments that are not the layer's (``num_layers``, ``final_norm``).
    A keyword torch does not take is a TypeError naming it."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise InvalidType(f"{what}: {e}; it takes the arguments of nn.TransformerEncoderLayer "
                          f"({', '.join(sig.parameters)})") from None
    bound.apply_defaults()
    a = dict(bound.arguments)
    own = {k: a.pop(k) for k in ("num_layers", "final_norm") if k in a}
    factory = {"device": a.pop("device"), "dtype": a.pop("dtype")}
    # our checks first: typed messages that name the argument, before torch's asserts
    _check_config(a["d_model"], a["nhead"], a["dim_feedforward"], a["layer_norm_eps"], what)
    dropout = check_dropout(a["dropout"], what)
    if not isinstance(a["batch_first"], bool):
        raise InvalidType(f"{what}: batch_first must be a bool (True: inputs (*batch, T, d_model); False: torch's "
                          f"default layout (T, B, d_model)), got {type(a['batch_first']).__name__} {a['batch_first']!r}")
    check_factory(factory["device"], factory["dtype"], what)
    act = _feedforward_activation(a["activation"], what)
    layer = nn.TransformerEncoderLayer(**a, device="meta", dtype=factory["dtype"])
    cfg = torch_layer_config(layer, what)
    cfg["dropout"] = dropout
    cfg["activation"] = act  # the caller's module itself (the reading copies it)
    return cfg, factory, own


def torch_layer_config(layer, what: str) -> dict:
    """The configuration of the torch ``layer``: the keyword arguments of
    :class:`~seq2d.TransformerEncoderLayer` that build its equal (a module activation copied);
    what seq2d does not model is refused, naming it."""
    if not isinstance(layer, nn.TransformerEncoderLayer):
        raise InvalidType(f"{what} expects an nn.TransformerEncoderLayer, got {type(layer).__name__}")
    attn = layer.self_attn
    for name in ("norm1", "norm2"):
        ln = getattr(layer, name)
        if not isinstance(ln, nn.LayerNorm) or tuple(ln.normalized_shape) != (attn.embed_dim,) or not ln.elementwise_affine:
            raise InvalidValue(f"{what}: {name} must be an affine nn.LayerNorm({attn.embed_dim}), got {ln!r}")
    if attn.add_zero_attn:
        raise InvalidValue(f"{what}: self_attn has add_zero_attn=True, which is not supported")
    drops = {"dropout": layer.dropout, "dropout1": layer.dropout1, "dropout2": layer.dropout2}
    probs = {name: float(m.p) if isinstance(m, nn.Dropout) else None for name, m in drops.items()}
    probs["self_attn.dropout"] = float(attn.dropout)
    if any(v is None for v in probs.values()) or len(set(probs.values())) != 1:
        raise InvalidValue(f"{what}: the layer's dropouts must be nn.Dropout modules of one probability (as "
                           f"nn.TransformerEncoderLayer builds them), got {probs}")
    act = layer.activation
    return {
        "dropout": probs["dropout"],
        "d_model": attn.embed_dim,
        "nhead": attn.num_heads,
        "dim_feedforward": layer.linear1.out_features,
        "activation": copy.deepcopy(act) if isinstance(act, nn.Module) else act,
        "norm_first": bool(layer.norm_first),
        "layer_norm_eps": layer.norm1.eps,
        "bias": layer.linear1.bias is not None,
        "batch_first": bool(attn.batch_first),
    }
