r"""A declarative spec for Sequential2D models: write a model down, share it, rebuild it.

The user guide -- what a spec is, the schema and its rules, random generation, what
``to_spec`` writes -- is docs/spec.md. A spec is a plain dict (JSON/TOML-serialisable)
or a TOML file holding one::

    model = from_spec("model.toml", device="cuda")   # or from_spec(dict)
    spec = to_spec(model)                             # structure only
    spec = to_spec(model, weights=True)               # + values: a bitwise copy
    save_spec(spec, "model.toml"); spec = load_spec("model.toml")

A full example with every kind of block is in docs/spec.md (tests/test_spec.py builds it,
tests/test_spec_doc.py checks what the page says about it).

Modules (each imports only those before it): ``schema`` (key tables, parsed form,
typed checks) <- ``parse`` (dict -> parsed spec, validation) <- ``io`` (``load_spec``,
``save_spec``) <- ``build`` (``from_spec``); ``export`` (``to_spec``) needs only
``schema``.
"""

from .build import from_spec
from .export import to_spec
from .io import load_spec, save_spec
# the schema's key tables were importable from seq2d.spec: keep them so
from .schema import BLOCK_KEYS, INIT_KINDS, KINDS, ROLES, SLOT_KEYS, TOP_KEYS  # noqa: F401

__all__ = ["from_spec", "to_spec", "load_spec", "save_spec"]
