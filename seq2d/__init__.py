"""seq2d: Sequential2D block networks in PyTorch.

One documented semantics (``Sequential2D``'s docstring, docs/concepts.md), constructors
proven equal to torch.nn, and a fused-linear seam for fast backends.
"""

from . import graph
from .activations import ACTIVATIONS
from .blocks import ContextModule, Identity, LinearBlock
from .constructors import from_mask, mlp, rnn
from .convert import from_torch
from .core import Sequential2D, block_kind
from .fused import available_backends, register_backend
from .recurrent import RNN, TruncatedRNN, truncated_rnn
from .randomize import randomize
from .registry import create_model, list_models, register_model
from .spec import from_spec, load_spec, save_spec, to_spec
from .transformer import AttentionCore, TransformerEncoder, TransformerEncoderLayer, transformer_encoder, transformer_layer

__version__ = "0.1.0"

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
    "block_kind",
    "create_model",
    "from_mask",
    "from_torch",
    "list_models",
    "mlp",
    "register_backend",
    "randomize",
    "register_model",
    "rnn",
    "truncated_rnn",
]
