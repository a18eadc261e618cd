"""``from_torch``: torch.nn modules -> equivalent Sequential2D models (weights copied)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from .blocks import LinearBlock
from .constructors import rnn as _rnn
from .core import Sequential2D
from .recurrent import RNN, truncated_rnn
from .registry import register_model

__all__ = ["from_torch"]

_ACT_TYPES = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LayerNorm, nn.Identity)
SUPPORTED = (
    "nn.Linear, nn.Sequential of Linear and activations (ReLU, Tanh, Sigmoid, GELU, LayerNorm, Identity), "
    "nn.RNN, nn.TransformerEncoderLayer, nn.TransformerEncoder"
)


def _copy_act(m: nn.Module) -> nn.Module:
    return copy.deepcopy(m)


def _from_sequential(seq: nn.Sequential | nn.Linear) -> Sequential2D:
    mods = [seq] if isinstance(seq, nn.Linear) else list(seq)
    linears: list[nn.Linear] = []
    acts: list[list[nn.Module]] = []  # activations after each linear
    for k, m in enumerate(mods):
        if isinstance(m, nn.Linear):
            linears.append(m)
            acts.append([])
        elif isinstance(m, _ACT_TYPES):
            if not linears:
                raise TypeError(
                    f"from_torch: nn.Sequential item {k} ({type(m).__name__}) comes before any nn.Linear; "
                    "the input slot of a Sequential2D is held and has no activation"
                )
            if not isinstance(m, nn.Identity):
                acts[-1].append(m)
        else:
            raise TypeError(
                f"from_torch: unsupported module {type(m).__name__} at item {k} of nn.Sequential. Supported: {SUPPORTED}"
            )
    if not linears:
        raise TypeError("from_torch: the nn.Sequential holds no nn.Linear")
    sizes = [linears[0].in_features] + [lin.out_features for lin in linears]
    for k in range(1, len(linears)):
        if linears[k].in_features != linears[k - 1].out_features:
            raise ValueError(
                f"from_torch: Linear {k} takes {linears[k].in_features} features but the previous one gives "
                f"{linears[k - 1].out_features}"
            )
    ref = linears[0].weight
    kw = {"device": ref.device, "dtype": ref.dtype}
    blocks = {}
    for l, lin in enumerate(linears):
        blk = LinearBlock(lin.in_features, lin.out_features, **kw)
        with torch.no_grad():
            blk.weight.copy_(lin.weight)
        blk.weight.requires_grad_(lin.weight.requires_grad)
        blocks[(l + 1, l)] = blk
    slot_acts: list = [None]
    for a in acts:
        if not a:
            slot_acts.append(None)
        elif len(a) == 1:
            slot_acts.append(_copy_act(a[0]))
        else:
            slot_acts.append(nn.Sequential(*[_copy_act(x) for x in a]))
    bias = [None] + [None if lin.bias is None else lin.bias.detach().clone() for lin in linears]
    L = len(linears)
    return Sequential2D(sizes, blocks, bias=bias, activations=slot_acts, inputs=[0], outputs=[L], steps=L, **kw)


def _from_rnn(m: nn.RNN) -> RNN:
    if m.mode not in ("RNN_TANH", "RNN_RELU"):
        raise TypeError(f"from_torch: unsupported recurrent mode {m.mode}. Supported: {SUPPORTED}")
    if m.bidirectional:
        raise ValueError("from_torch: bidirectional nn.RNN is not supported (a Sequential2D runs forward in time)")
    if m.dropout > 0:
        raise ValueError(
            f"from_torch: nn.RNN with dropout={m.dropout} between layers is not supported yet; "
            "build it with dropout=0 (eval-mode behaviour is identical)"
        )
    ref = m.weight_ih_l0
    out = _rnn(m.input_size, m.hidden_size, num_layers=m.num_layers, nonlinearity=m.nonlinearity, bias=m.bias,
               batch_first=m.batch_first, device=ref.device, dtype=ref.dtype)
    with torch.no_grad():
        for l in range(m.num_layers):
            wih, whh = out.layer_blocks(l + 1)
            wih.weight.copy_(getattr(m, f"weight_ih_l{l}"))
            whh.weight.copy_(getattr(m, f"weight_hh_l{l}"))
            if m.bias:
                out.core.bias(l + 1).copy_(getattr(m, f"bias_ih_l{l}") + getattr(m, f"bias_hh_l{l}"))
    return out


def from_torch(module: nn.Module) -> nn.Module:
    """Convert a torch module into an equivalent Sequential2D model, called the same way.

    ============================  ===============================================
    source                        result (called like the source)
    ============================  ===============================================
    ``nn.Linear`` / ``nn.Sequential``  :class:`Sequential2D` (``model(x)`` -> y)
    of Linear + activations
    ``nn.RNN`` (uni-directional)  :class:`seq2d.RNN` (``output, h_n = m(x, hx)``);
                                  the slot bias is ``bias_ih + bias_hh``
    ``nn.TransformerEncoderLayer``  :class:`seq2d.TransformerEncoderLayer`
    ``nn.TransformerEncoder``     :class:`seq2d.TransformerEncoder` (all layers in
                                  one Sequential2D, iterated depth times)
    ============================  ===============================================

    Weights are copied (new parameters). Anything else raises ``TypeError`` naming the
    unsupported module.
    """
    if isinstance(module, (nn.Sequential, nn.Linear)):
        return _from_sequential(module)
    if isinstance(module, nn.RNN):
        return _from_rnn(module)
    if isinstance(module, nn.TransformerEncoderLayer):
        from .transformer import layer_from_torch

        return layer_from_torch(module)
    if isinstance(module, nn.TransformerEncoder):
        from .transformer import encoder_from_torch

        return encoder_from_torch(module)
    if not isinstance(module, nn.Module):
        raise TypeError(f"from_torch expects an nn.Module, got {type(module).__name__}")
    raise TypeError(f"from_torch: unsupported module {type(module).__name__}. Supported: {SUPPORTED}")


@register_model(name="truncated_rnn")
def truncated_rnn_preset(input_size: int = 8, hidden_size: int = 16, num_layers: int = 1, k: int = 4,
                         nonlinearity: str = "tanh", *, device=None, dtype=None):
    """A freshly initialised RNN's k-truncation (registry entry; see :func:`seq2d.truncated_rnn`)."""
    return truncated_rnn(_rnn(input_size, hidden_size, num_layers, nonlinearity, device=device, dtype=dtype), k)

