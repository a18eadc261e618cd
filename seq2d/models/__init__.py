"""Every model constructor of seq2d, registered by name (``seq2d.create_model``), and the one
resolver from a name, a preset string or a spec file to a model (:func:`resolve_model`).

=====================  ====================================================================
file                   what it builds
=====================  ====================================================================
``feedforward.py``     ``mlp``, ``from_mask``, ``from_sequential`` (nn.Sequential -> model)
``recurrent.py``       ``rnn``, ``RNN``, ``TruncatedRNN``/``truncated_rnn``, ``from_rnn``
``transformer.py``     ``transformer_layer``/``transformer_encoder`` and their wrappers
``random.py``          ``randomize`` and every random placement: ``random_model`` (the paper's
                       randomized MLP), ``random_mask``, ``random_tiles``, ``random_tile_matrix``
``convert.py``         ``from_torch`` (dispatches to the files above)
``presets.py``         preset strings (``mlp:784,256,10``): a small parser over the registry
``resolve.py``         ``resolve_model``: registered name | preset string | spec file
``registry.py``        ``register_model``, ``create_model``, ``list_models``
=====================  ====================================================================

A new constructor is one file here plus ``@register_model`` and one import line below; the
registry-wide tests (tests/test_registry.py) then check it like every other.
"""

from .convert import from_torch
from .feedforward import from_mask, mlp
from .presets import PRESETS, build_preset, is_preset, preset_help
from .random import random_model, random_tile_matrix, randomize, region_mask
from .registry import create_model, list_models, model_entrypoint, register_model
from .resolve import constructor_options, resolve_model
from .recurrent import RNN, TruncatedRNN, rnn, truncated_rnn
from .transformer import TransformerEncoder, TransformerEncoderLayer, transformer_encoder, transformer_layer

__all__ = ["mlp", "from_mask", "rnn", "RNN", "TruncatedRNN", "truncated_rnn", "transformer_layer",
           "transformer_encoder", "TransformerEncoderLayer", "TransformerEncoder", "randomize", "region_mask",
           "random_model", "random_tile_matrix", "from_torch", "PRESETS", "build_preset", "is_preset", "preset_help",
           "register_model", "create_model", "list_models", "model_entrypoint", "resolve_model", "constructor_options"]
