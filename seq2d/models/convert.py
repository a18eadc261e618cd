"""``from_torch``: torch.nn modules -> equivalent Sequential2D models (weights copied)."""

from __future__ import annotations

from torch import nn

from ..errors import InvalidType
from .feedforward import SUPPORTED, from_sequential
from .recurrent import from_rnn
__all__ = ["from_torch"]


def from_torch(module: nn.Module) -> nn.Module:
    """Convert a torch module into an equivalent Sequential2D model, called the same way.

    ============================  ===============================================
    source                        result (called like the source)
    ============================  ===============================================
    ``nn.Linear`` / ``nn.Sequential``  :class:`Sequential2D` (``model(x)`` -> y)
    of Linear + activations
    ``nn.RNN`` (uni-directional)  :class:`seq2d.RNN` (``output, h_n = m(x, hx)``);
                                  the slot bias is ``bias_ih + bias_hh``, so
                                  ``num_parameters()`` is torch's count minus
                                  ``num_layers * hidden_size``
    ``nn.TransformerEncoderLayer``  :class:`seq2d.TransformerEncoderLayer`, in the
                                  source's layout (``batch_first=False``, torch's
                                  default: ``(T, B, d)``, transposed at the boundary)
    ``nn.TransformerEncoder``     :class:`seq2d.TransformerEncoder` (all layers in
                                  one Sequential2D, iterated depth times)
    ============================  ===============================================

    Weights are copied (new parameters). Anything else raises ``TypeError`` naming the
    unsupported module. The wrappers answer ``num_parameters()``, ``summary()``, ``grid()`` and
    ``to_blocksparse()`` as their ``.core`` Sequential2D does (docs/concepts.md, "From torch").

    Dropout: a transformer's is modelled where torch applies it and draws torch's masks in
    training mode (:mod:`seq2d.models.transformer`), and the result keeps the source's
    train/eval mode; an ``nn.RNN`` with dropout between layers (``num_layers > 1``) is refused
    with ``InvalidValue`` (its draws cannot be matched; eval-mode behaviour equals ``dropout=0``).
    """
    if isinstance(module, (nn.Sequential, nn.Linear)):
        return from_sequential(module)
    if isinstance(module, nn.RNN):
        return from_rnn(module)
    if isinstance(module, nn.TransformerEncoderLayer):
        from .transformer import layer_from_torch

        return layer_from_torch(module)
    if isinstance(module, nn.TransformerEncoder):
        from .transformer import encoder_from_torch

        return encoder_from_torch(module)
    if not isinstance(module, nn.Module):
        raise InvalidType(f"from_torch expects an nn.Module, got {type(module).__name__}")
    raise InvalidType(f"from_torch: unsupported module {type(module).__name__}. Supported: {SUPPORTED}")


