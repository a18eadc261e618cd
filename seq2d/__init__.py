"""seq2d: Sequential2D block networks in PyTorch.

One documented semantics (``Sequential2D``'s docstring, docs/concepts.md), constructors
proven equal to torch.nn, and one engine seam (seq2d.engines) for the parameter stores and their fast paths.
"""

from . import graph
from .activations import ACTIVATIONS
from .attention import AttentionCore
from .blocks import ContextModule, Identity, LinearBlock
from .core import Sequential2D, block_kind
from .engines import DenseStore, TiledBlock, TiledStore
from .models import (RNN, TransformerEncoder, TransformerEncoderLayer, TruncatedRNN, create_model, from_mask,
                     from_torch, list_models, mlp, randomize, register_model, resolve_model, rnn, transformer_encoder,
                     transformer_layer, truncated_rnn)
from .spec import from_spec, load_spec, save_spec, to_spec

__version__ = "0.1.0"


def available_backends() -> list[str]:
    """Store names a Sequential2D accepts as ``backend`` (see :mod:`seq2d.engines`)."""
    from .engines import STORES

    return list(STORES)


_MOVED = {"constructors": "seq2d.models.feedforward (mlp, from_mask) and seq2d.models.recurrent (rnn)",
          "recurrent": "seq2d.models.recurrent", "randomize": "seq2d.models.random",
          "presets": "seq2d.models.presets", "registry": "seq2d.models.registry",
          "transformer": "seq2d.models.transformer (AttentionCore: seq2d.attention)", "convert": "seq2d.models.convert",
          "sparsity": "seq2d.mnist_comparison"}


def __getattr__(name):
    if name in _MOVED:
        raise AttributeError(f"the module seq2d.{name} moved: see {_MOVED[name]}")
    if name == "register_backend":
        raise AttributeError("seq2d.register_backend was removed: linear blocks now live in a parameter "
                             "store; a new fast path is an engine in seq2d.engines (see docs/concepts.md)")
    raise AttributeError(f"module 'seq2d' has no attribute {name!r}")

__all__ = [
    "ACTIVATIONS",
    "AttentionCore",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "from_spec",
    "load_spec",
    "save_spec",
    "to_spec",
    "transformer_encoder",
    "transformer_layer",
    "ContextModule",
    "Identity",
    "LinearBlock",
    "RNN",
    "Sequential2D",
    "TruncatedRNN",
    "available_backends",
    "DenseStore",
    "TiledBlock",
    "TiledStore",
    "block_kind",
    "create_model",
    "from_mask",
    "from_torch",
    "list_models",
    "mlp",
    "randomize",
    "resolve_model",
    "register_model",
    "rnn",
    "truncated_rnn",
]
