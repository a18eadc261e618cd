"""Checks of :class:`seq2d.Sequential2D`'s constructor and call arguments (sizes, the block grid,
slot lists, step counts, activations, biases, context keywords) and its rules for degenerate
models. Each check raises a typed error that says what was expected and what arrived."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from ..activations import is_identity, make_activation
from ..arguments import is_pos_int, module_features
from ..blocks import ContextModule, Identity, block_kind
from ..errors import InvalidIndex, InvalidType, InvalidValue, closest_name

__all__ = ["check_sizes", "normalize_grid", "check_block_fits", "check_slot_list", "check_steps", "build_activations",
           "slot_biases", "context_keys_of", "unexpected_keywords", "check_degenerate", "warn_steps"]


def check_sizes(sizes) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise InvalidType(f"sizes must be a sequence of positive ints, got {type(sizes).__name__}")
    if len(sizes) == 0:
        raise InvalidValue("sizes must name at least one slot, got an empty sequence")
    for k, s in enumerate(sizes):
        if not is_pos_int(s):
            raise InvalidValue(f"sizes[{k}] must be a positive int, got {s!r}")
    return tuple(int(s) for s in sizes)


def normalize_grid(blocks, n: int) -> dict[tuple[int, int], nn.Module]:
    items: list[tuple[tuple[int, int], object]] = []
    if isinstance(blocks, Mapping):
        for key, blk in blocks.items():
            if not (isinstance(key, tuple) and len(key) == 2
                    and all(isinstance(k, int) and not isinstance(k, bool) for k in key)):
                raise InvalidType(f"block keys must be (row, col) int pairs, got {key!r}")
            i, j = key
            if not (-n <= i < n and -n <= j < n):
                raise InvalidIndex(f"block position {key} is outside the {n} x {n} grid")
            items.append(((i % n, j % n), blk))
    elif isinstance(blocks, Sequence) and not isinstance(blocks, (str, bytes)):
        if len(blocks) != n:
            raise InvalidValue(f"blocks must be an {n} x {n} grid (one row per slot), got {len(blocks)} rows")
        for i, row in enumerate(blocks):
            if not isinstance(row, Sequence) or isinstance(row, (str, bytes)) or len(row) != n:
                got = len(row) if isinstance(row, Sequence) else type(row).__name__
                raise InvalidValue(f"blocks row {i} must hold {n} entries (one per slot), got {got}")
            for j, blk in enumerate(row):
                items.append(((i, j), blk))
    else:
        raise InvalidType(f"blocks must be an n x n nested list or a dict {{(i, j): block}}, got {type(blocks).__name__}")
    grid: dict[tuple[int, int], nn.Module] = {}
    shared_identity = None
    for (i, j), blk in items:
        if blk is None:
            continue
        if isinstance(blk, str):
            if blk.lower() != "identity":
                raise InvalidValue(f"block F[{i}][{j}]: unknown block name {blk!r}. Select from 'identity', or pass a module")
            shared_identity = shared_identity or Identity()
            blk = shared_identity
        if not isinstance(blk, nn.Module):
            raise InvalidType(f"block F[{i}][{j}] must be None, 'identity' or an nn.Module, got {type(blk).__name__}")
        if (i, j) in grid:
            raise InvalidValue(f"block F[{i}][{j}] is given twice")
        grid[(i, j)] = blk
    return grid


def check_block_fits(sizes: Sequence[int], i: int, j: int, blk: nn.Module) -> None:
    si, sj = sizes[i], sizes[j]
    kind = block_kind(blk)
    if kind == "identity" and si != sj:
        raise InvalidValue(f"block F[{i}][{j}] is an identity, but slot {j} has size {sj} and slot {i} has size {si}")
    if kind == "linear":
        fin, fout = blk.in_features, blk.out_features
    elif kind == "module":
        fin, fout = module_features(blk)
    else:
        return
    if fin is not None and fin != sj:
        raise InvalidValue(f"block F[{i}][{j}] takes {fin} input features, but slot {j} has size {sj}")
    if fout is not None and fout != si:
        raise InvalidValue(f"block F[{i}][{j}] gives {fout} output features, but slot {i} has size {si}")


def check_slot_list(name: str, slots, n: int, *, allow_empty: bool = True) -> tuple[int, ...]:
    if isinstance(slots, int) and not isinstance(slots, bool):
        slots = [slots]
    if isinstance(slots, (str, bytes, Tensor)) or not hasattr(slots, "__iter__"):
        raise InvalidType(f"{name} must be a slot index or a list of slot indices, got {type(slots).__name__} {slots!r}")
    slots = list(slots)
    if not allow_empty and len(slots) == 0:
        raise InvalidValue(f"{name} must name at least one slot, got an empty list (leave it out for the default)")
    out = []
    for s in slots:
        if isinstance(s, bool) or not isinstance(s, int):
            raise InvalidType(f"{name} must hold slot indices (ints), got {s!r}")
        if not -n <= s < n:
            raise InvalidIndex(f"{name}: slot {s} does not exist (the model has {n} slots)")
        out.append(s % n)
    if len(set(out)) != len(out):
        raise InvalidValue(f"{name} lists a slot twice: {list(slots)}")
    return tuple(out)


def check_steps(steps) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise InvalidType(f"steps must be a non-negative int, got {type(steps).__name__} {steps!r}")
    if steps < 0:
        raise InvalidValue(f"steps must be a non-negative int, got {steps}")
    return steps


def build_activations(sizes, activations, held, factory_kwargs) -> nn.ModuleList:
    """One activation module per slot (held slots: identity; a non-identity one there is an error)."""
    n = len(sizes)
    per_slot = isinstance(activations, Sequence) and not isinstance(activations, str)
    if per_slot and len(activations) != n:
        raise InvalidValue(f"activations must be one spec or a list of {n} (one per slot), got {len(activations)}")
    acts = []
    for i in range(n):
        spec = activations[i] if per_slot else activations
        if i in held:
            if per_slot and spec is not None and not (isinstance(spec, str) and spec.lower() in ("identity", "none", "linear")) and not (isinstance(spec, nn.Module) and is_identity(spec)):
                raise InvalidValue(f"slot {i} has no incoming blocks (it is held), so its activation {spec!r} would never be applied")
            spec = None
        acts.append(make_activation(spec, sizes[i], slot=i, **factory_kwargs))
    return nn.ModuleList(acts)


def slot_biases(sizes, bias, held, factory_kwargs) -> tuple[dict[int, Tensor], set[int]]:
    """The per-slot biases the ``bias`` argument asks for: ``(given, fresh)``, given tensors by slot
    and the slots whose bias is created here (initialised by ``reset_bias_parameters``)."""
    n = len(sizes)
    if isinstance(bias, bool):
        per = [bias and i not in held for i in range(n)]
    elif isinstance(bias, Sequence) and not isinstance(bias, str):
        if len(bias) != n:
            raise InvalidValue(f"bias must be a bool or a list of {n} entries (one per slot), got {len(bias)}")
        per = list(bias)
    else:
        raise InvalidType(f"bias must be a bool or a per-slot list, got {type(bias).__name__}")
    given: dict[int, Tensor] = {}
    fresh: set[int] = set()
    for i, b in enumerate(per):
        if b is None or b is False:
            continue
        if i in held:
            raise InvalidValue(f"slot {i} has no incoming blocks (it is held), so it cannot have a bias")
        if b is True:
            given[i] = torch.empty(sizes[i], **factory_kwargs)
            fresh.add(i)
        elif isinstance(b, Tensor):
            if tuple(b.shape) != (sizes[i],):
                raise InvalidValue(f"bias of slot {i} must have shape ({sizes[i]},), got {tuple(b.shape)}")
            given[i] = b
        else:
            raise InvalidType(f"bias of slot {i} must be a bool, a tensor or None, got {type(b).__name__}")
    return given, fresh


def context_keys_of(blocks) -> frozenset | None:
    """The context keys a model with these blocks accepts: the union of the ``context_keys`` of
    its ContextModule blocks (a nested Sequential2D's is its own union), or ``None`` (any key)
    when one of them declares none (see :class:`seq2d.ContextModule`)."""
    keys: set[str] = set()
    for blk in blocks:
        if isinstance(blk, ContextModule):
            k = blk.context_keys
            if k is None:
                return None
            if isinstance(k, (str, bytes)) or not all(isinstance(name, str) for name in k):
                raise InvalidType(f"{type(blk).__name__}.context_keys must be a tuple of names (str) or None, got {k!r}")
            keys.update(k)
    return frozenset(keys)


def unexpected_keywords(where: str, given, accepted, own: Sequence[str] = (), takes: str | None = None) -> str:
    """The message for keywords ``given`` outside ``accepted`` (as Python words a bad keyword),
    with the accepted keys and a close match ("did you mean") among ``accepted`` and ``own``."""
    bad = [k for k in given if k not in accepted]
    names = ", ".join(repr(k) for k in bad)
    msg = f"{where}() got an unexpected keyword argument{'s' if len(bad) > 1 else ''} {names}; "
    msg += takes if takes is not None else (
        f"this model takes the context keys {sorted(accepted)}" if accepted else
        "this model takes no context keys (none of its blocks is a ContextModule)")
    hints = [h for k in bad if (h := closest_name(k, [*accepted, *own])) is not None]
    if hints:
        msg += "; did you mean " + " or ".join(repr(h) for h in dict.fromkeys(hints)) + "?"
    return msg


def _warn(msg: str, stacklevel: int = 4) -> None:
    """A UserWarning pointing at the caller's line (stack: _warn, the rule, the model method, ...)."""
    warnings.warn(msg, UserWarning, stacklevel=stacklevel)


def check_degenerate(model) -> None:
    """The construction-time rules for degenerate models (docs/concepts.md, "Malformed models and
    calls"): no block at all is an error, no trainable parameter a warning. (Steps too few for an
    output to depend on the input: :func:`warn_steps`, at the tensor call.)"""
    if not model._positions:
        raise InvalidValue(f"blocks: the model has no block at all (sizes {list(model.sizes)}): every slot would be "
                           "held and it would compute nothing; give at least one block")
    if model.num_parameters() == 0:
        _warn(f"this Sequential2D (sizes {list(model.sizes)}) has no trainable parameter: training cannot change it "
              "(every block is an identity, a parameter-free module or fully frozen)",
              stacklevel=5)  # _warn, check_degenerate, __init__, its renamed_keyword wrapper, the caller


def unseen_output(model, steps: int) -> tuple[int, int | None] | None:
    """``(output slot, its distance in blocks from the input slots)`` when, in a tensor call
    ``model(x, steps)``, that output cannot depend on ``x`` (distance None: no input slot reaches
    it; else ``steps`` is below the distance), or None when every output can."""
    far = model.__dict__.get("_far_output")
    if far is None or (far[1] is not None and steps >= far[1]):
        return None
    return far


def unseen_output_text(model, steps: int, unseen: tuple[int, int | None]) -> str:
    """What :func:`unseen_output` found, in words (the warning's text, and the trainer's refusal's)."""
    o, d = unseen
    if d is None:
        return (f"output slot {o} cannot be reached from any input slot {list(model.inputs)}: the output of model(x) "
                "never depends on x, whatever the number of steps")
    return (f"steps={steps} is smaller than the distance from the input slots {list(model.inputs)} to output slot {o} "
            f"({d} blocks): after {steps} step(s) the output cannot depend on the input; it needs steps >= {d}")


def warn_steps(model, steps: int) -> None:
    """Warn (once per model) when, in a tensor call ``model(x, steps)``, an output slot cannot depend
    on ``x``: no input slot reaches it, or ``steps`` is below its distance (in blocks) from them."""
    unseen = unseen_output(model, steps)
    if unseen is None or model.__dict__.get("_steps_warned"):
        return
    model.__dict__["_steps_warned"] = True
    _warn(unseen_output_text(model, steps, unseen),
          stacklevel=7)  # _warn, warn_steps, _forward_tensor, forward, Module._call_impl, __call__, the caller
