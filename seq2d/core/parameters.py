"""A :class:`seq2d.Sequential2D`'s parameters as a whole: (re)initialisation and the count of
trainable entries. ``Sequential2D.reset_parameters``, ``reset_bias_parameters`` and
``num_parameters`` call these functions by name (their docstrings say what they do)."""

from __future__ import annotations

import math

import torch

from ..blocks import LinearBlock, draw_device, takes_generator

__all__ = ["reset_bias", "reset_all", "num_trainable"]


@torch.no_grad()
def reset_bias(model, generator: torch.Generator | None = None) -> None:
    """Every bias the model created: U(-1/sqrt(f), 1/sqrt(f)), f = the row's input width."""
    for i in sorted(model._fresh_bias):
        fan_in = sum(model.sizes[j] for j in model._rows.get(i, []))
        bound = 1.0 / math.sqrt(max(fan_in, 1))
        b = model.slot_bias.view(i)  # a CPU generator for a CUDA model: draw on the CPU, copy
        dev = draw_device(b, generator)
        fresh = b if dev == b.device else torch.empty(b.shape, dtype=b.dtype, device=dev)
        b.copy_(fresh.uniform_(-bound, bound, generator=generator))


def reset_all(model, generator: torch.Generator | None = None) -> None:
    """Every submodule with a ``reset_parameters`` (with ``generator`` where it takes one:
    LinearBlocks, nested Sequential2Ds, tile matrices), then the model's own biases."""
    seen: set[int] = set()
    for m in model.modules():
        if m is model or id(m) in seen:
            continue
        seen.add(id(m))
        if takes_generator(m):
            m.reset_parameters(generator=generator)
        elif hasattr(m, "reset_parameters"):
            m.reset_parameters()
    model.reset_bias_parameters(generator=generator)


def num_trainable(model, nested: type) -> int:
    """``model.num_parameters()``; ``nested``: the class whose instances (nested models) report
    their own count through ``num_parameters()``."""
    seen: set[int] = set()
    total = 0
    if model.store is not None:
        total += model.store.num_trainable()
        seen.update(id(p) for p in model.store.parameters())
    counted: set[int] = set()
    for _, _, kind, blk in model.positions():
        if kind != "module" or id(blk) in counted:
            continue
        own = getattr(blk, "num_trainable", None) or (blk.num_parameters if isinstance(blk, nested) else None)
        if callable(own):
            counted.add(id(blk))
            params = [p for p in blk.parameters() if id(p) not in seen]
            if params or not any(True for _ in blk.parameters()):
                total += int(own())
            seen.update(id(p) for p in params)
    for m in model.modules():
        if isinstance(m, LinearBlock) and m.store is None and id(m.weight) not in seen:
            seen.add(id(m.weight))
            total += m.num_trainable()
        elif type(m).__name__ == "BlockSparseLinear" and id(m.data) not in seen:
            seen.add(id(m.data))
            total += m.num_trainable()
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            if p.requires_grad:
                total += p.numel()
    return total
