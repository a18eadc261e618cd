"""seq2d: Sequential2D block networks in PyTorch.

One documented semantics (``Sequential2D``'s docstring, docs/concepts.md), constructors
proven equal to torch.nn, and one seam (seq2d.stores) for the parameter stores and their fast paths.
"""

from typing import TYPE_CHECKING

# Every public name is imported on first use (PEP 562 module __getattr__ below), so that `import
# seq2d.cli` or `import seq2d.errors` does not pay for torch, networkx and numpy: `from seq2d import
# mlp` and `seq2d.mlp` work as ever. The one table of public names: module -> the names it defines;
# `__all__`, `dir(seq2d)` and the lazy imports are derived from it. The TYPE_CHECKING block repeats
# it as static imports for type checkers and IDEs (tests/test_cli.py checks the two agree).
_EXPORTS = {
    ".activations": ("ACTIVATIONS",),
    ".attention": ("AttentionCore",),
    ".blocks": ("ContextModule", "Identity", "LinearBlock"),
    ".core": ("Sequential2D", "block_kind"),
    ".stores": ("DenseStore", "TiledBlock", "TiledStore"),
    ".models": ("RNN", "TransformerEncoder", "TransformerEncoderLayer", "TruncatedRNN", "create_model", "from_mask",
                "from_torch", "list_models", "mlp", "randomize", "register_model", "resolve_model", "rnn",
                "transformer_encoder", "transformer_layer", "truncated_rnn"),
    ".spec": ("from_spec", "load_spec", "save_spec", "to_spec"),
    ".models.iterativenn": ("from_iterativenn", "from_iterativenn_description"),  # docs/porting.md
}
_SUBMODULES = ("graph",)  # reachable as seq2d.graph without an import; not in __all__ (not star-imported)
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted([*_WHERE, "available_stores"])  # available_stores: defined below

if TYPE_CHECKING:  # the table above as static imports
    from . import graph
    from .activations import ACTIVATIONS
    from .attention import AttentionCore
    from .blocks import ContextModule, Identity, LinearBlock
    from .core import Sequential2D, block_kind
    from .stores import DenseStore, TiledBlock, TiledStore
    from .models import (RNN, TransformerEncoder, TransformerEncoderLayer, TruncatedRNN, create_model, from_mask,
                         from_torch, list_models, mlp, randomize, register_model, resolve_model, rnn,
                         transformer_encoder, transformer_layer, truncated_rnn)
    from .spec import from_spec, load_spec, save_spec, to_spec
    from .models.iterativenn import from_iterativenn, from_iterativenn_description

__version__ = "0.1.0"


def available_stores() -> list[str]:
    """Store names a Sequential2D accepts as ``store`` (see :mod:`seq2d.stores`)."""
    from .stores import STORES

    return list(STORES)


def __getattr__(name):
    if name in _WHERE or name in _SUBMODULES:
        import importlib

        module = importlib.import_module(_WHERE.get(name, "." + name), __name__)
        value = module if name in _SUBMODULES else getattr(module, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'seq2d' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE) | set(_SUBMODULES))
