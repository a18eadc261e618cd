"""Per-object memo dicts: the one way seq2d keeps derived values (plans, index tensors) on an
object it does not own the ``__init__`` of, or that must not hold them as attributes.

``memo_dict(obj, "_name")`` returns ``obj.__dict__["_name"]``, made empty on first use. It reads and
writes ``__dict__`` by ``get`` and item assignment, never ``__dict__.setdefault``: torch 2.11's
Dynamo cannot trace that method ("Unsupported method call ... setdefault"), which broke
``torch.compile(fullgraph=True)`` of the cyclic models of the graph-step tests on the H200 run of
2026-11-29 (a model iterated over several steps reads its held-products memo inside the traced
forward). tests/test_memo.py keeps the rule.
"""

from __future__ import annotations


def memo_dict(obj, name: str) -> dict:
    """The memo dict ``name`` of ``obj`` (created empty on first use; dropped with
    ``obj.__dict__.pop(name, None)``)."""
    d = obj.__dict__.get(name)
    if d is None:
        d = {}
        obj.__dict__[name] = d
    return d
