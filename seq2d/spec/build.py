"""Build a :class:`~seq2d.Sequential2D` from a parsed spec: :func:`from_spec`.

All random values come from one CPU generator seeded with the spec's ``seed``, drawn
in float64 in a fixed order (docs/spec.md, "Random generation"); the global RNG is
never touched.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..arguments import check_factory
from ..errors import InvalidValue
from ..sampling import choose
from ..blocks import Identity, LinearBlock
from ..core import Sequential2D
from .io import load_spec
from .parse import _parse
from .schema import _Block, _Spec

# ---------------------------------------------------------------------- building
def _pattern(b: _Block, shape: tuple[int, int], g: torch.Generator) -> Tensor:
    r, c = shape
    if b.kind == "dense":
        return torch.ones(shape, dtype=torch.bool)
    if b.kind == "diagonal":
        return torch.eye(r, dtype=torch.bool)
    if b.kind == "mask":
        return b.mask
    if b.kind in ("random", "exact"):
        k = round(b.density * r * c) if b.kind == "random" else b.n
        mask = torch.zeros(r * c, dtype=torch.bool)
        mask[choose(r * c, k, g)] = True
        return mask.view(r, c)
    # per_row: the first n of a random permutation of every row's columns
    order = torch.rand(r, c, generator=g, dtype=torch.float64).argsort(dim=1, stable=True)
    mask = torch.zeros(r, c, dtype=torch.bool)
    mask.scatter_(1, order[:, : b.n], True)
    return mask


def _draw(init: tuple[str, dict[str, float]], shape: tuple[int, int], g: torch.Generator) -> Tensor:
    kind, p = init
    w = torch.empty(shape, dtype=torch.float64)
    if kind == "default":
        nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=g)  # exactly nn.Linear's init
    elif kind == "normal":
        w.normal_(p["mean"], p["std"], generator=g)
    elif kind == "uniform":
        w.uniform_(p["a"], p["b"], generator=g)
    else:
        w.fill_(p["value"])
    return w


def _linear_block(b: _Block, shape: tuple[int, int], g: torch.Generator, dtype, bias: bool) -> LinearBlock:
    r, c = shape
    pat = _pattern(b, shape, g)
    where = f"blocks[{b.index}]"
    given = b.weight if b.trainable else b.frozen
    if given is not None:
        # pattern just drawn: check here (dense_trainable: every entry trainable, values anywhere)
        if b.kind in ("random", "exact", "per_row") and not b.dense_trainable:
            off = ~pat & (given != 0)
            if bool(off.any()):
                i, j = off.nonzero()[0].tolist()
                name = "weight" if b.trainable else "frozen"
                raise InvalidValue(f"{where}.{name}: expected zeros outside the drawn {b.kind!r} pattern, got {given[i, j].item()} at [{i}, {j}]")
        values = given
    else:
        values = torch.where(pat, _draw(b.init, shape, g), 0.0)
    if not b.trainable:
        return LinearBlock(c, r, mask=torch.zeros(shape, dtype=torch.bool), frozen=values.to(dtype), bias=bias, dtype=dtype)
    if b.dense_trainable:
        # iterativennsimple's R=p with trainable=True: the pattern placed the initial values
        # (drawn exactly as without dense_trainable, 0 off the pattern); every entry trains
        blk = LinearBlock(c, r, bias=bias, dtype=dtype)
        with torch.no_grad():
            blk.weight.copy_(values)
        return blk
    # frozen values: fixed entries off the pattern and fixed offsets under trainable entries
    # on it (W = frozen + weight * mask, docs/concepts.md)
    frozen = None if b.frozen is None else b.frozen.to(dtype)
    blk = LinearBlock(c, r, mask=pat, frozen=frozen, bias=bias, dtype=dtype)
    with torch.no_grad():
        blk.weight.copy_(values)
    blk.apply_mask_()
    return blk

def _build_linear(b: _Block, shape: tuple[int, int], g: torch.Generator, dtype) -> LinearBlock:
    blk = _linear_block(b, shape, g, dtype, b.bias)
    if b.bias:  # the block's own bias: given values, or nn.Linear's rule from our generator
        r, c = shape
        bound = 1.0 / math.sqrt(c)
        values = b.bias_value if b.bias_value is not None else \
            torch.empty(r, dtype=torch.float64).uniform_(-bound, bound, generator=g)
        with torch.no_grad():
            blk.bias.copy_(values)
    return blk


def _build(p: _Spec, device, dtype) -> Sequential2D:
    dtype = torch.get_default_dtype() if dtype is None else dtype
    sizes = [s.size for s in p.slots]
    g = torch.Generator().manual_seed(p.seed)
    grid: dict[tuple[int, int], nn.Module] = {}
    built: dict[int, LinearBlock] = {}  # block index -> module, for ties
    # constructors below draw from the global RNG (values we then overwrite): keep it untouched
    with torch.random.fork_rng(devices=[]):
        for b in p.blocks:
            if b.kind == "identity":
                grid[(b.row, b.col)] = Identity()
            elif b.leader is not None:
                grid[(b.row, b.col)] = built[b.leader]
            else:
                built[b.index] = grid[(b.row, b.col)] = _build_linear(b, (sizes[b.row], sizes[b.col]), g, dtype)
        fed = {b.row for b in p.blocks}
        model = Sequential2D(
            sizes,
            grid,
            bias=[s.bias for s in p.slots],
            activations=[s.activation if i in fed else None for i, s in enumerate(p.slots)],
            inputs=p.inputs,
            outputs=p.outputs,
            steps=p.steps,
            store=p.store,
            loop=p.loop,
            dtype=dtype,
        )
    with torch.no_grad():
        for i, s in enumerate(p.slots):
            if not s.bias:
                continue
            if s.bias_value is not None:
                values = s.bias_value
            else:  # as Sequential2D.reset_bias_parameters, from our generator
                fan_in = sum(sizes[b.col] for b in p.blocks if b.row == i)
                bound = 1.0 / math.sqrt(max(fan_in, 1))
                values = torch.empty(s.size, dtype=torch.float64).uniform_(-bound, bound, generator=g)
            model.bias(i).copy_(values)
        for i, s in enumerate(p.slots):
            if s.norm_weight is not None:
                model.acts[i].weight.copy_(s.norm_weight)
            if s.norm_bias is not None:
                model.acts[i].bias.copy_(s.norm_bias)
    if device is not None:
        model.to(device)
    return model


def from_spec(spec: Mapping | str | os.PathLike, *, device=None, dtype=None) -> Sequential2D:
    """Build a :class:`~seq2d.Sequential2D` from a spec dict or a TOML file (schema: docs/spec.md).

    Args:
        spec: the spec as a dict, or a path to a TOML (or ``.json``) file.
        device, dtype: of the model's parameters (default: CPU, the default dtype).
            Random values are drawn on the CPU in float64 and then cast, so a
            spec gives the same model on every device.

    Raises:
        ValueError: unknown key, bad value (the message names the place, e.g. ``blocks[3]``).
        TypeError: a value of the wrong type.
    """
    check_factory(device, dtype, "from_spec")
    if isinstance(spec, (str, os.PathLike)):
        spec = load_spec(spec)
    return _build(_parse(spec), device, dtype)
