"""seq2d: Sequential2D block networks in PyTorch.

One documented semantics (``Sequential2D``'s docstring, docs/concepts.md), constructors
proven equal to torch.nn, and one engine seam (seq2d.engines) for the parameter stores and their fast paths.
"""

from . import graph
from .activations import ACTIVATIONS
from .blocks import ContextModule, Identity, LinearBlock
from .constructors import from_mask, mlp, rnn
from .convert import from_torch
from .core import Sequential2D, block_kind
from .engines import DenseStore, TiledBlock, TiledStore
from .recurrent import RNN, TruncatedRNN, truncated_rnn
from .randomize import randomize
from .registry import create_model, list_models, register_model
from .spec import from_spec, load_spec, save_spec, to_spec
from .transformer import AttentionCore, TransformerEncoder, TransformerEncoderLayer, transformer_encoder, transformer_layer

__version__ = "0.1.0"


def available_backends() -> list[str]:
    """Store names a Sequential2D accepts as ``backend`` (see :mod:`seq2d.engines`)."""
    from .engines import STORES

    return list(STORES)


def __getattr__(name):
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
    "register_model",
    "rnn",
    "truncated_rnn",
]
