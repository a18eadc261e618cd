"""seq2d: Sequential2D block networks in PyTorch.

One documented semantics (``Sequential2D``'s docstring, docs/concepts.md), constructors
proven equal to torch.nn, and one engine seam (seq2d.engines) for the parameter stores and their fast paths.
"""

from typing import TYPE_CHECKING

# Every public name is imported on first use (PEP 562 module __getattr__ below), so that `import
# seq2d.cli` or `import seq2d.errors` does not pay for torch, networkx and numpy: `from seq2d import
# mlp` and `seq2d.mlp` work as ever. One table: name -> the module that defines it.
_LAZY = {
    "graph": ".graph",  # the submodule itself
    "ACTIVATIONS": ".activations",
    "AttentionCore": ".attention",
    **dict.fromkeys(("ContextModule", "Identity", "LinearBlock"), ".blocks"),
    **dict.fromkeys(("Sequential2D", "block_kind"), ".core"),
    **dict.fromkeys(("DenseStore", "TiledBlock", "TiledStore"), ".engines"),
    **dict.fromkeys(("RNN", "TransformerEncoder", "TransformerEncoderLayer", "TruncatedRNN", "create_model", "from_mask",
                     "from_torch", "list_models", "mlp", "randomize", "register_model", "resolve_model", "rnn",
                     "transformer_encoder", "transformer_layer", "truncated_rnn"), ".models"),
    **dict.fromkeys(("from_spec", "load_spec", "save_spec", "to_spec"), ".spec"),
    **dict.fromkeys(("from_iterativenn", "from_iterativenn_description"), ".models.iterativenn"),  # docs/porting.md
}

if TYPE_CHECKING:  # what the table resolves to, for type checkers and IDEs
    from . import graph
    from .activations import ACTIVATIONS
    from .attention import AttentionCore
    from .blocks import ContextModule, Identity, LinearBlock
    from .core import Sequential2D, block_kind
    from .engines import DenseStore, TiledBlock, TiledStore
    from .models import (RNN, TransformerEncoder, TransformerEncoderLayer, TruncatedRNN, create_model, from_mask,
                         from_torch, list_models, mlp, randomize, register_model, resolve_model, rnn,
                         transformer_encoder, transformer_layer, truncated_rnn)
    from .spec import from_spec, load_spec, save_spec, to_spec
    from .models.iterativenn import from_iterativenn, from_iterativenn_description

__version__ = "0.1.0"


def available_stores() -> list[str]:
    """Store names a Sequential2D accepts as ``store`` (see :mod:`seq2d.engines`)."""
    from .engines import STORES

    return list(STORES)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name], __name__)
        value = module if name == "graph" else getattr(module, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'seq2d' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

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
    "available_stores",
    "DenseStore",
    "TiledBlock",
    "TiledStore",
    "block_kind",
    "create_model",
    "from_iterativenn",
    "from_iterativenn_description",
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
