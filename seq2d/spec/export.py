"""Export: :func:`to_spec`, the spec of a :class:`~seq2d.Sequential2D` (model -> spec)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import InvalidType, InvalidValue
from ..activations import ACTIVATIONS, activation_name
from ..blocks import LinearBlock
from ..core import Sequential2D
from ..errors import show_value as _show
from .schema import _choices


def _floats(t: Tensor) -> list:
    return t.detach().to(device="cpu", dtype=torch.float64).tolist()


def _pattern_entry(pat: Tensor) -> dict:
    r, c = pat.shape
    if bool(pat.all()):
        return {"kind": "dense"}
    if r == c and torch.equal(pat, torch.eye(r, dtype=torch.bool)):
        return {"kind": "diagonal"}
    nnz = int(pat.sum())
    if 2 * nnz < r * c:
        return {"kind": "mask", "indices": pat.nonzero().tolist()}
    return {"kind": "mask", "mask": pat.to(torch.int8).tolist()}


def _linear_entry(blk: LinearBlock, weights: bool) -> dict:
    entry = _linear_values(blk, weights)
    if blk.bias is not None:  # the block's own bias
        entry["bias"] = True
        if weights:
            entry["bias_value"] = _floats(blk.bias.detach().cpu())
    return entry


def _linear_values(blk: LinearBlock, weights: bool) -> dict:
    mask = blk.mask.cpu() if blk.mask is not None else torch.ones(blk.shape, dtype=torch.bool)
    frozen = blk.frozen.cpu() if blk.frozen is not None else None
    if frozen is not None and not bool(mask.any()):  # fully frozen
        entry = _pattern_entry(frozen != 0)
        entry["trainable"] = False
        if weights:
            entry["frozen"] = _floats(frozen)
        return entry
    entry = _pattern_entry(mask)  # mask None (dense, or dense_trainable: indistinguishable) -> "dense"
    if weights:
        w = blk.weight.detach().cpu()
        entry["weight"] = _floats(w * mask if blk.mask is not None else w)
    if frozen is not None:  # partly frozen: the values are structure
        entry["frozen"] = _floats(frozen)
    return entry


def to_spec(model: Sequential2D, *, weights: bool = False) -> dict:
    """The spec of ``model`` (whose blocks are linear or identity): ``from_spec`` rebuilds it.

    Without ``weights`` the spec holds the structure: sizes, activations, biases,
    patterns (masks and frozen entries), ties, inputs, outputs, steps and store.
    With ``weights=True`` it also holds every value (``weight``, ``frozen``,
    ``bias_value``, ``norm_weight``/``norm_bias``), so
    ``from_spec(to_spec(m, weights=True), dtype=<m's dtype>)`` computes bitwise the same.

    A block built with ``dense_trainable = true`` (a sparse start, every entry trainable)
    is a LinearBlock without a mask, like a ``"dense"`` one: ``to_spec`` cannot tell them
    apart and writes ``kind = "dense"`` (its sparse start is in ``weight`` with ``weights=True``).

    Raises:
        TypeError: a block that is a module (not linear/identity), or an activation
            with no name in :data:`~seq2d.activations.ACTIVATIONS`.
        ValueError: one bias Parameter shared by several slots (a spec has no way to say so).
    """
    if not isinstance(model, Sequential2D):
        raise InvalidType(f"to_spec: expected a Sequential2D, got {type(model).__name__}")
    if not isinstance(weights, bool):
        raise InvalidType(f"to_spec: weights must be a bool, got {_show(weights)}")
    n = model.n
    slots: list[dict] = []
    bias_owner: dict[int, int] = {}
    for i in range(n):
        s: dict[str, Any] = {"size": model.sizes[i]}
        act = model.acts[i]
        name = activation_name(act)
        if name is None or (name == "layernorm" and act.bias is None):
            raise InvalidType(
                f"to_spec: slot {i} has activation {type(act).__name__} ({act!r}), which has no name; "
                f"a spec can hold {_choices(ACTIVATIONS)} (layernorm with default eps and affine weight and bias)"
            )
        if name != "identity":
            s["activation"] = name
        b = model.bias(i)
        if b is not None:
            if model.slot_bias.pos[i] in bias_owner:
                raise InvalidValue(f"to_spec: slots {bias_owner[model.slot_bias.pos[i]]} and {i} share one bias Parameter; a spec gives every slot its own bias")
            bias_owner[model.slot_bias.pos[i]] = i
            s["bias"] = True
            if weights:
                s["bias_value"] = _floats(b)
        if weights and name == "layernorm":
            s["norm_weight"] = _floats(act.weight)
            s["norm_bias"] = _floats(act.bias)
        slots.append(s)

    # roles when they say it all (each list non-empty, ascending, disjoint); else the lists
    ins, outs = list(model.inputs), list(model.outputs)
    spec: dict[str, Any] = {}
    if ins and outs and ins == sorted(ins) and outs == sorted(outs) and not set(ins) & set(outs):
        for i, s in enumerate(slots):
            s["role"] = "input" if i in ins else ("output" if i in outs else "hidden")
    else:
        spec["inputs"] = ins
        spec["outputs"] = outs
    if model.steps is not None:
        spec["steps"] = model.steps
    if model._store_arg != "dense":
        spec["store"] = model._store_arg
    if model.loop:
        spec["loop"] = True

    uses: dict[int, int] = {}
    for _, _, kind, blk in model.positions():
        if kind == "linear":
            uses[id(blk)] = uses.get(id(blk), 0) + 1
    ties: dict[int, str] = {}
    blocks: list[dict] = []
    for i, j, kind, blk in model.positions():
        entry: dict[str, Any] = {"row": i, "col": j}
        if kind == "identity":
            entry["kind"] = "identity"
        elif kind == "module":
            raise InvalidType(
                f"to_spec: block F[{i}][{j}] is a {type(blk).__name__} module; a spec holds only linear "
                "(LinearBlock) and identity blocks"
            )
        elif uses[id(blk)] == 1:
            entry.update(_linear_entry(blk, weights))
        elif id(blk) in ties:  # a later position of a tied block: the name says it all
            entry["tie"] = ties[id(blk)]
        else:
            ties[id(blk)] = f"tie{len(ties)}"
            entry.update(_linear_entry(blk, weights))
            entry["tie"] = ties[id(blk)]
        blocks.append(entry)
    spec["slots"] = slots
    spec["blocks"] = blocks
    return spec
