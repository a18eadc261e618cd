"""Port models from the authors' library, rcpaffenroth/iterativennsimple (docs/porting.md).

Two converters, each taking the peer's own table in the peer's own index convention:

* :func:`from_iterativenn` mirrors ``Sequential2D.from_config(cfg)`` of iterativennsimple
  (``iterativennsimple/Sequential2D.py``): ``block_types[i][j]`` maps **input** slot ``i`` to
  **output** slot ``j``, the transpose of seq2d's ``F[row = output][col = input]``. Call it
  as ``from_iterativenn(**cfg)``.
* :func:`from_iterativenn_description` mirrors ``MaskedLinear.from_description`` of
  ``iterativennsimple/MaskedLinear.py``, whose tables are indexed ``[output block][input
  block]``, the same way round as seq2d.

Both return a :class:`~seq2d.Sequential2D` computing the peer's function with the same
trainable entries. The peer draws its random patterns and values from numpy's global RNG
(and its biases from torch's); that stream is not reproduced draw for draw: the values come
from one CPU ``torch.Generator`` seeded with ``seed`` (the global RNGs are left untouched),
with the peer's distributions (Bernoulli ``R=p``, draws with replacement for ``S=n`` and
``Row=n``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..blocks import Identity, LinearBlock
from ..core import Sequential2D
from ..errors import InvalidType, InvalidValue, renamed_keyword

__all__ = ["from_iterativenn", "from_iterativenn_description", "BLOCK_KINDS", "BLOCK_CODES", "INIT_CODES",
           "TRAINABLE_CODES"]

# Sequential2D.from_config's block_types entries (a module instance is also taken as is)
BLOCK_KINDS = (None, "None", "Identity", "Linear", "MaskedLinear", "MaskedLinear.from_description",
               "SparseLinear.from_description", "SparseLinear.from_singleBlock")
BLOCK_CODES = ("0", "W", "D", "R=p", "S=n", "Row=n")  # MaskedLinear.from_description's block types
INIT_CODES = ("0", "1", "C=v", "G", "G=mu,sigma", "U", "U=a,b", "a tensor")
TRAINABLE_CODES = ("True", "False", "'non-zero'")
_KWARGS = ("block_type", "initialization_type", "trainable", "bias")


def _codes(codes) -> str:
    return ", ".join(codes)


# ---------------------------------------------------------------------- codes -> values
def _number(text: str, code, where: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidValue(f"{where}: {what} code {code!r} has a bad number {text!r}") from None


def _pair(code: str, where: str, default: tuple[float, float]) -> tuple[float, float]:
    if len(code) == 1:
        return default
    parts = code[2:].split(",")
    if code[1] != "=" or len(parts) != 2:
        raise InvalidValue(f"{where}: initialization code {code!r}: expected {code[0]} or {code[0]}=x,y. "
                           f"Valid codes: {_codes(INIT_CODES)}")
    return _number(parts[0], code, where, "initialization"), _number(parts[1], code, where, "initialization")


def _init_values(code, shape: tuple[int, int], g: torch.Generator, where: str) -> Tensor:
    """The values the peer's initializer gives every entry of a (rows, cols) block (float64)."""
    r, c = shape
    if isinstance(code, Tensor):
        if code.dim() != 2 or code.shape[0] < r or code.shape[1] < c:
            raise InvalidValue(f"{where}: a tensor initialization must be 2-D of shape at least ({r}, {c}) (the block), "
                               f"got shape {tuple(code.shape)}")
        return code[:r, :c].detach().to("cpu", torch.float64).clone()
    if not isinstance(code, bool) and code in (0, 1):
        return torch.full(shape, float(code), dtype=torch.float64)
    w = torch.empty(shape, dtype=torch.float64)
    if isinstance(code, str) and code.startswith("C="):
        return w.fill_(_number(code[2:], code, where, "initialization"))
    if isinstance(code, str) and code[:1] == "G" and (len(code) == 1 or code[1] == "="):
        mu, sigma = _pair(code, where, (0.0, 1.0))
        return w.normal_(generator=g).mul_(sigma).add_(mu)  # randn * sigma + mu, as the peer (any sign of sigma)
    if isinstance(code, str) and code[:1] == "U" and (len(code) == 1 or code[1] == "="):
        lo, hi = _pair(code, where, (-1.0, 1.0))
        return w.uniform_(generator=g).mul_(hi - lo).add_(lo)  # rand * (max - min) + min, as the peer
    raise InvalidValue(f"{where}: unknown initialization code {code!r}. Valid codes: {_codes(INIT_CODES)}")


def _count(code: str, prefix: str, where: str) -> int:
    text = code[len(prefix):]
    if not text.isdigit():
        raise InvalidValue(f"{where}: block type {code!r} needs a count >= 0 after {prefix!r}. Valid codes: {_codes(BLOCK_CODES)}")
    return int(text)


def _draws(n: int, hi: int, g: torch.Generator) -> Tensor:
    return torch.randint(0, hi, (n,), generator=g)


def _pattern(code, shape: tuple[int, int], g: torch.Generator, where: str) -> Tensor:
    """The peer's MaskedLinear pattern of a block type: where the initial values sit (bool)."""
    r, c = shape
    mask = torch.zeros(shape, dtype=torch.bool)
    if not isinstance(code, bool) and code == 0:
        return mask
    if code == "W":
        return mask.fill_(True)
    if code == "D":
        k = min(r, c)
        mask[torch.arange(k), torch.arange(k)] = True
        return mask
    if isinstance(code, str) and code.startswith("Row="):  # n column draws per row, with replacement
        n = _count(code, "Row=", where)
        mask[torch.arange(r).repeat_interleave(n), _draws(r * n, c, g)] = True
        return mask
    if isinstance(code, str) and code.startswith("R="):  # each entry kept with probability p
        p = _number(code[2:], code, where, "block type")
        return torch.rand(shape, generator=g, dtype=torch.float64) < p
    if isinstance(code, str) and code.startswith("S="):  # n draws anywhere, with replacement
        n = _count(code, "S=", where)
        mask[_draws(n, r, g), _draws(n, c, g)] = True
        return mask
    raise InvalidValue(f"{where}: unknown block type {code!r}. Valid codes: {_codes(BLOCK_CODES)}")


def _trainable(code, where: str):
    if isinstance(code, str):
        if code == "non-zero":
            return code
    elif code in (True, False):  # also 1 and 0, as the peer's == comparisons take them
        return bool(code)
    raise InvalidValue(f"{where}: unknown trainable code {code!r}. Valid codes: {_codes(TRAINABLE_CODES)}")


def _description_block(block_type, init, trainable, shape: tuple[int, int], g: torch.Generator, where: str, dtype,
                       bias_bound: float | None) -> LinearBlock:
    """One block of MaskedLinear.from_description as a LinearBlock: W = weight_0 + U * mask with
    U = 0 is, at the start, the block's values; mask says which entries train."""
    train = _trainable(trainable, where)
    zero_init = not isinstance(init, (bool, str, Tensor)) and init == 0
    if not isinstance(block_type, (bool, str)) and block_type == 0 and (train is not False or not zero_init):
        raise InvalidValue(f"{where}: block type 0 (a zero block) needs trainable = False and initialization 0 "
                           f"(as the peer asserts), got trainable {trainable!r}, initialization {init!r}")
    pattern = _pattern(block_type, shape, g, where)
    values = torch.where(pattern, _init_values(init, shape, g, where), 0.0) if bool(pattern.any()) else \
        torch.zeros(shape, dtype=torch.float64)
    r, c = shape
    if train is False:
        blk = LinearBlock(c, r, mask=torch.zeros(shape, dtype=torch.bool), frozen=values.to(dtype),
                          bias=bias_bound is not None, dtype=dtype)
    else:
        mask = None if train is True else values != 0  # True: every entry, even the zeros of R/S/Row/D
        blk = LinearBlock(c, r, mask=mask, bias=bias_bound is not None, dtype=dtype)
        with torch.no_grad():
            blk.weight.copy_(values)
    _fill_bias(blk, bias_bound, g)
    return blk


def _fill_bias(blk: LinearBlock, bound: float | None, g: torch.Generator) -> None:
    if bound is None:
        return
    with torch.no_grad():
        blk.bias.copy_(torch.empty(blk.out_features, dtype=torch.float64).uniform_(-bound, bound, generator=g))


def _linear(shape: tuple[int, int], g: torch.Generator, dtype) -> LinearBlock:
    """torch.nn.Linear (or the peer's plain MaskedLinear: the same function, every entry trainable)."""
    r, c = shape
    w = torch.empty(shape, dtype=torch.float64)
    nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=g)  # nn.Linear's rule
    blk = LinearBlock(c, r, bias=True, dtype=dtype)
    with torch.no_grad():
        blk.weight.copy_(w)
    _fill_bias(blk, 1.0 / math.sqrt(c), g)
    return blk


def _single_block(kw: dict, shape: tuple[int, int], g: torch.Generator, where: str, dtype) -> LinearBlock:
    """SparseLinear.from_singleBlock: entries drawn with replacement, a repeated entry holds the SUM of its
    draws (the COO tensor is coalesced); exactly the stored entries train; the bias starts at 0."""
    r, c = shape
    code = kw["block_type"]
    if code == "D":
        k = min(r, c)
        rows, cols = torch.arange(k), torch.arange(k)
    elif isinstance(code, str) and code.startswith("Row="):
        n = _count(code, "Row=", where)
        rows, cols = torch.arange(r).repeat_interleave(n), _draws(r * n, c, g)
    elif isinstance(code, str) and code[:2] in ("R=", "S="):
        n = _count(code, "S=", where) if code[0] == "S" else int(_number(code[2:], code, where, "block type") * r * c)
        rows, cols = _draws(n, r, g), _draws(n, c, g)
    else:
        raise InvalidValue(f"{where}: unknown block type {code!r} for 'SparseLinear.from_singleBlock'. "
                           "Valid codes: D, R=p, S=n, Row=n")
    init = kw["initialization_type"]
    if isinstance(init, Tensor) or (not isinstance(init, bool) and init == 0):
        raise InvalidValue(f"{where}: initialization {init!r} is not one 'SparseLinear.from_singleBlock' takes. "
                           "Valid codes: 1, C=v, G, G=mu,sigma, U, U=a,b")
    values = _init_values(init, (1, rows.numel()), g, where).view(-1) if rows.numel() else torch.zeros(0, dtype=torch.float64)
    w = torch.zeros(r * c, dtype=torch.float64).index_put_((rows * c + cols,), values, accumulate=True).view(r, c)
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[rows, cols] = True
    bias = kw.get("bias", True)
    blk = LinearBlock(c, r, mask=mask, bias=bool(bias), dtype=dtype)
    with torch.no_grad():
        blk.weight.copy_(w)
        if bias:
            blk.bias.zero_()
    return blk


# ---------------------------------------------------------------------- Sequential2D.from_config
def _kwargs(block_kwargs, i: int, j: int, kind: str) -> dict:
    where = f"block_kwargs[{i}][{j}]"
    try:
        kw = block_kwargs[i][j]
    except (TypeError, IndexError, KeyError):
        kw = None
    if not isinstance(kw, dict):
        raise InvalidValue(f"{where}: block type {kind!r} at block_types[{i}][{j}] needs a dict with keys "
                           f"{_codes(_KWARGS)} (bias optional, default True), got {kw!r}")
    for key in kw:
        if key not in _KWARGS:
            raise InvalidValue(f"{where}: unknown key {key!r}. Valid keys: {_codes(_KWARGS)}")
    for key in _KWARGS[:2] + (() if kind == "SparseLinear.from_singleBlock" else ("trainable",)):
        if key not in kw:
            raise InvalidValue(f"{where}: missing key {key!r} (block type {kind!r}). Valid keys: {_codes(_KWARGS)}")
    return kw


def _block(kind, kw_of, shape: tuple[int, int], g: torch.Generator, where: str, dtype):
    """One entry of the peer's block_types as a seq2d block (None: absent)."""
    r, c = shape
    if isinstance(kind, nn.Module):
        return kind  # the peer's Sequential2D(in_features_list, out_features_list, blocks) form
    if kind is None or kind == "None":
        return None
    if kind == "Identity":
        if r != c:
            raise InvalidValue(f"{where}: 'Identity' returns its input, so it needs equal sizes, got input size {c} "
                               f"and output size {r}")
        return Identity()
    if kind in ("Linear", "MaskedLinear"):
        return _linear(shape, g, dtype)
    if kind in ("MaskedLinear.from_description", "SparseLinear.from_description"):
        # SparseLinear.from_MaskedLinearExact keeps the function and the trainable entries
        kw = kw_of(kind)
        bias = kw.get("bias", True)
        return _description_block(kw["block_type"], kw["initialization_type"], kw["trainable"], shape, g,
                                  f"{where} ({kw['block_type']!r})", dtype, 1.0 / math.sqrt(c) if bias else None)
    if kind == "SparseLinear.from_singleBlock":
        return _single_block(kw_of(kind), shape, g, where, dtype)
    raise InvalidValue(f"{where}: unknown block type {kind!r}. Valid block types: "
                       + ", ".join(repr(k) for k in BLOCK_KINDS) + ", or an nn.Module")


def _sizes(v, what: str) -> list[int]:
    if isinstance(v, Tensor):
        v = v.tolist()
    if not isinstance(v, Sequence) or not v or any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in v):
        raise InvalidValue(f"{what}: expected a non-empty list of positive ints, got {v!r}")
    return list(v)


def _table(t, rows: int, cols: int, what: str) -> None:
    if not isinstance(t, Sequence) or len(t) != rows or any(not isinstance(row, Sequence) or isinstance(row, str)
                                                              or len(row) != cols for row in t):
        raise InvalidValue(f"{what}: expected {rows} rows of {cols} entries, got {t!r}"[:300])


@renamed_keyword("backend", "store", "store choice")
def from_iterativenn(in_features_list, out_features_list, block_types, block_kwargs=None, *, seed: int = 0,
                     unfed: str = "clear", inputs=None, outputs=None, steps: int | None = None,
                     store: str = "dense", device=None, dtype=None) -> Sequential2D:
    """iterativennsimple's ``Sequential2D.from_config(cfg)`` as a seq2d model: ``from_iterativenn(**cfg)``.

    Args:
        in_features_list, out_features_list: the peer's slot sizes (inputs of a step, outputs of a step).
        block_types: the peer's table, **``block_types[i][j]`` maps input ``i`` to output ``j``**
            (seq2d's ``F[j][i]``): ``None``/``'None'``, ``'Identity'``, ``'Linear'``, ``'MaskedLinear'``,
            ``'MaskedLinear.from_description'``, ``'SparseLinear.from_description'``,
            ``'SparseLinear.from_singleBlock'``, or an ``nn.Module`` (used as is: the peer's
            ``Sequential2D(in_features_list, out_features_list, blocks)``).
        block_kwargs: the same table of dicts (``block_type``, ``initialization_type``, ``trainable``,
            ``bias``) for the ``*.from_description``/``from_singleBlock`` entries (docs/porting.md).
        seed: seeds the one generator every random pattern and value is drawn from.
        unfed: the peer writes zero (``None``) to an output slot no block feeds, one step after
            the start; seq2d *holds* such a slot. ``"clear"`` (default) adds a fixed zero block
            ``F[k][k]`` to each, so any number of steps is the peer's; ``"hold"`` keeps seq2d's
            held slots (the same outputs for a feed-forward graph run for its depth, and an
            acyclic model). Only for equal lists.
        inputs, outputs, steps: of the model. Equal lists (an iterated map): by default every
            slot is an input and an output, so ``model(z, steps=k)`` is the peer's ``map(z)``
            applied ``k`` times to a full state ``z`` (pass ``inputs=[0], outputs=[n - 1]`` for
            the peer's ``[x, None, ...]`` style, or call with a state list); ``steps`` as seq2d's
            default. Unequal lists (one map): seq2d's slots are the input slots then the output
            slots, ``steps = 1``, ``model(z)`` is the peer's ``forward(z)``.
        store, device, dtype: as for :class:`~seq2d.Sequential2D`.
    """
    ins, outs = _sizes(in_features_list, "in_features_list"), _sizes(out_features_list, "out_features_list")
    _table(block_types, len(ins), len(outs), "block_types")
    if unfed not in ("clear", "hold"):
        raise InvalidValue(f"unfed: expected 'clear' or 'hold', got {unfed!r}")
    iterated = ins == outs
    if not iterated and (inputs is not None or outputs is not None or steps not in (None, 1)):
        raise InvalidValue("inputs, outputs and steps apply to equal in_features_list and out_features_list (an "
                           f"iterated map); {ins} -> {outs} is one map: its slots are fixed and it runs one step")
    off = 0 if iterated else len(ins)
    sizes = ins if iterated else ins + outs
    dtype = torch.get_default_dtype() if dtype is None else dtype
    g = torch.Generator().manual_seed(seed)
    grid: dict[tuple[int, int], nn.Module] = {}
    with torch.random.fork_rng(devices=[]):  # LinearBlock's constructor draws values we overwrite
        for i in range(len(ins)):
            for j in range(len(outs)):
                where = f"block_types[{i}][{j}] (input {i} -> output {j}, seq2d F[{off + j}][{i}])"
                blk = _block(block_types[i][j], lambda kind: _kwargs(block_kwargs, i, j, kind), (outs[j], ins[i]), g,
                             where, dtype)
                if blk is not None:
                    grid[(off + j, i)] = blk
        for j in range(len(outs)):
            if any((off + j, i) in grid for i in range(len(ins))) or (iterated and unfed == "hold"):
                continue
            src = j if iterated else 0  # a fixed zero block: the slot becomes 0 after one step, as in the peer
            grid[(off + j, src)] = LinearBlock(sizes[src], outs[j], mask=torch.zeros(outs[j], sizes[src], dtype=torch.bool),
                                               frozen=torch.zeros(outs[j], sizes[src], dtype=dtype), dtype=dtype)
        if iterated:
            inputs = list(range(len(ins))) if inputs is None else inputs  # model(z) is the peer's map(z)
            outputs = list(range(len(ins))) if outputs is None else outputs
        else:
            inputs, outputs, steps = list(range(len(ins))), list(range(len(ins), len(sizes))), 1
        model = Sequential2D(sizes, grid, inputs=inputs, outputs=outputs, steps=steps, store=store, dtype=dtype)
    return model if device is None else model.to(device)


# ---------------------------------------------------------------------- MaskedLinear.from_description
@renamed_keyword("backend", "store", "store choice")
def from_iterativenn_description(out_features_sizes, in_features_sizes, block_types, initialization_types, trainable,
                                 bias: bool = True, *, seed: int = 0, store: str = "dense", device=None,
                                 dtype=None) -> Sequential2D:
    """iterativennsimple's ``MaskedLinear.from_description`` as a one-step seq2d model.

    The peer's tables here are indexed ``[output block][input block]``, as seq2d's ``F`` (the
    peer's *Sequential2D* tables are the transpose). Ints for both sizes mean one block, as in
    the peer. The model's slots are the input blocks, then the output blocks; its tensor call
    ``model(x)`` is the peer's ``MaskedLinear(x)``: one step, one bias over all outputs (a slot
    bias on each output slot, drawn as the peer's, U(-1/sqrt(k), 1/sqrt(k)) with k the total input size).
    """
    if isinstance(out_features_sizes, int) and isinstance(in_features_sizes, int):
        out_features_sizes, in_features_sizes = [out_features_sizes], [in_features_sizes]
        block_types, initialization_types, trainable = [[block_types]], [[initialization_types]], [[trainable]]
    outs, ins = _sizes(out_features_sizes, "out_features_sizes"), _sizes(in_features_sizes, "in_features_sizes")
    for name, t in (("block_types", block_types), ("initialization_types", initialization_types), ("trainable", trainable)):
        _table(t, len(outs), len(ins), name)
    if not isinstance(bias, bool):
        raise InvalidType(f"bias: expected a bool, got {type(bias).__name__} {bias!r}")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    g = torch.Generator().manual_seed(seed)
    n_in = len(ins)
    grid: dict[tuple[int, int], nn.Module] = {}
    with torch.random.fork_rng(devices=[]):
        for a in range(len(outs)):
            for b in range(n_in):
                where = f"block_types[{a}][{b}] (input block {b} -> output block {a})"
                blk = _description_block(block_types[a][b], initialization_types[a][b], trainable[a][b],
                                         (outs[a], ins[b]), g, where, dtype, None)
                if blk.mask is not None and not bool(blk.mask.any()) and (blk.frozen is None or not bool(blk.frozen.any())):
                    continue  # all zero and fixed: nothing to compute
                grid[(n_in + a, b)] = blk
        for a in range(len(outs)):  # a row of zero blocks still carries the bias: keep the slot written
            if not any((n_in + a, b) in grid for b in range(n_in)):
                grid[(n_in + a, 0)] = LinearBlock(ins[0], outs[a], mask=torch.zeros(outs[a], ins[0], dtype=torch.bool),
                                                  frozen=torch.zeros(outs[a], ins[0], dtype=dtype), dtype=dtype)
        model = Sequential2D(ins + outs, grid, bias=[False] * n_in + [bias] * len(outs), inputs=list(range(n_in)),
                             outputs=list(range(n_in, n_in + len(outs))), steps=1, store=store, dtype=dtype)
    if bias:
        bound = 1.0 / math.sqrt(sum(ins))
        with torch.no_grad():
            for a in range(len(outs)):
                model.bias(n_in + a).copy_(torch.empty(outs[a], dtype=torch.float64).uniform_(-bound, bound, generator=g))
    return model if device is None else model.to(device)
