r"""A declarative spec for Sequential2D models: write a model down, share it, rebuild it.

A spec is a plain dict (JSON/TOML-serialisable: lists, ints, floats, strs, bools,
never ``None``: leave a key out instead) or a TOML file holding one::

    model = from_spec("model.toml", device="cuda")   # or from_spec(dict)
    spec = to_spec(model)                             # structure only
    spec = to_spec(model, weights=True)               # + values: a bitwise copy
    save_spec(spec, "model.toml"); spec = load_spec("model.toml")

A full example (the test suite builds it, so it stays true)::

    name = "sparse-rnn-cell"        # free text, ignored by the builder
    seed = 0                        # seeds every random choice (default 0)
    steps = 3                       # needed: F[1][2] feeds back, so the graph has a cycle
    backend = "dense"               # a name from seq2d.available_backends()

    [[slots]]                       # slot 0
    size = 16
    role = "input"

    [[slots]]                       # slot 1
    size = 16
    activation = "relu"
    bias = true
    role = "hidden"

    [[slots]]                       # slot 2
    size = 16
    activation = "tanh"
    role = "hidden"

    [[slots]]                       # slot 3
    size = 4
    bias = true
    role = "output"

    [[blocks]]                      # F[1][0]: slot 0 -> slot 1; 64 of the 256 entries trainable
    row = 1
    col = 0
    kind = "random"
    density = 0.25

    [[blocks]]                      # F[2][1]: three trainable entries, shared with F[1][2]
    row = 2
    col = 1
    kind = "mask"
    indices = [[0, 1], [1, 2], [2, 3]]
    init = { kind = "normal", mean = 0.0, std = 0.1 }
    tie = "shared"

    [[blocks]]                      # F[1][2]: the same LinearBlock object as F[2][1]
    row = 1
    col = 2
    tie = "shared"

    [[blocks]]                      # F[2][0]: an identity skip (sizes match)
    row = 2
    col = 0
    kind = "identity"

    [[blocks]]                      # F[2][2]: a self-loop on the diagonal
    row = 2
    col = 2
    kind = "diagonal"
    init = { kind = "constant", value = 0.5 }

    [[blocks]]                      # F[3][2]: exactly 3 trainable entries in each row
    row = 3
    col = 2
    kind = "per_row"
    n = 3
    init = { kind = "uniform", a = -0.1, b = 0.1 }

    [[blocks]]                      # F[3][0]: 5 fixed (non-trainable) entries
    row = 3
    col = 0
    kind = "exact"
    n = 5
    trainable = false

Trainable parameters: 64 + 3 + 16 + 12 + 0 (blocks) + 16 + 4 (biases) = 115.

Schema
------
Top level (``slots`` required, everything else optional):

===========  ===============================================================
key          meaning
===========  ===============================================================
``slots``    list of slot tables (below), one per slot, in slot order
``blocks``   list of block tables (below); default: none (every slot held)
``steps``    int >= 0; default: the depth when the graph is acyclic
``inputs``   list of slot indices; default: slots with role "input", else the
             held slots
``outputs``  list of slot indices; default: slots with role "output", else the
             last slot
``seed``     int in [0, 2**64); default 0 (see "Random generation")
``backend``  fused-linear backend name; default "dense"
``name``     str, free text
===========  ===============================================================

Slot:

==============  ===========================================================
``size``        positive int (required)
``activation``  a name from :data:`seq2d.activations.ACTIVATIONS`; default
                "identity". Held slots (no block in their row) must keep it.
``bias``        bool, default false (held slots cannot have one)
``role``        "input" | "hidden" | "output". When ``inputs``/``outputs`` are
                not given they default to the slots with those roles. Every
                role must agree with the final lists (role "input" <=> listed
                in ``inputs``, role "output" <=> listed in ``outputs``), else
                ValueError.
``bias_value``  list of ``size`` floats (needs ``bias = true``); written by
                ``to_spec(weights=True)``
``norm_weight``, ``norm_bias``  lists of ``size`` floats: the affine parameters
                of a "layernorm" activation (written by ``to_spec(weights=True)``)
==============  ===========================================================

Block (``row``, ``col``: ints in ``0..n-1``, required; the block maps slot ``col`` to
slot ``row``, so its shape is ``(sizes[row], sizes[col])``; one block per position):

==============  ===========================================================
``kind``        the *pattern* of the block's entries; default "dense":

                - "dense": every entry
                - "diagonal": the diagonal (square blocks only)
                - "identity": an :class:`~seq2d.Identity` block (sizes must
                  match; takes no other key)
                - "random": ``density`` p in (0, 1]: exactly ``round(p*rows*cols)``
                  entries, uniformly at random without replacement
                - "exact": ``n``: exactly n random entries (0 <= n <= rows*cols)
                - "per_row": ``n``: exactly n random entries in every row
                  (0 <= n <= cols)
                - "mask": ``mask`` (2-D list of 0/1 or bools, shape (rows, cols))
                  or ``indices`` (list of [r, c] pairs), not both
``init``        values at the pattern: "default" (``nn.Linear``'s U(-1/sqrt(cols),
                1/sqrt(cols)) drawn over the full block, then masked) or a table
                ``{kind = "normal", mean = 0.0, std = ...}`` (mean optional),
                ``{kind = "uniform", a = ..., b = ...}``,
                ``{kind = "constant", value = ...}``, ``{kind = "default"}``
``trainable``   bool, default true: the pattern is the trainable mask
                (``LinearBlock(mask=pattern)``). false: the values are fixed
                (``LinearBlock(mask=all False, frozen=values at the pattern)``)
``tie``         str: blocks with the same tie name share ONE LinearBlock (same
                shape required). The first such block defines it; the others
                need only ``row``, ``col``, ``tie``, and any other key they give
                must equal the first one's (else ValueError).
``weight``      2-D list (rows, cols): the trainable values (instead of ``init``;
                zero off the pattern); for ``trainable = true`` blocks
``frozen``      2-D list (rows, cols): fixed values. With ``trainable = false``
                they replace ``init`` (zero off the pattern). With
                ``trainable = true`` they are extra fixed entries next to the
                trainable pattern (zero on it): a partly frozen block.
==============  ===========================================================

Unknown keys raise ValueError naming the key, where it was found
(``blocks[3].init``) and the valid keys; a key that belongs to another kind (say
``density`` on a "dense" block) also raises. Bad values raise TypeError (wrong type)
or ValueError (bad value) naming the place, what was expected and what arrived.

Random generation
-----------------
One CPU ``torch.Generator`` seeded with ``seed`` is consumed in a fixed order:
the blocks in list order (first the random pattern, then the init values; a tied
block after the first, an identity block and a block given by ``weight``/
``frozen`` draw nothing), then the default biases in slot order. Values are drawn
in float64 and then cast to ``dtype``, so the same spec and seed give bitwise
identical models on every device, and a float64 model is the float32 one before
rounding. Building never touches the global RNG.

to_spec
-------
Linear blocks are written as a pattern: a LinearBlock without frozen values
becomes trainable with pattern = its mask ("dense"/"diagonal" when the mask is
one of those, else "mask" with ``indices`` or ``mask``, whichever is shorter); a
fully frozen one (mask all False) becomes ``trainable = false`` with pattern =
its nonzero frozen entries. A partly frozen block (some trainable entries and
frozen values) always carries its ``frozen`` values, even without
``weights=True``, because they are its structure. Weights are written as float64
lists (exact for every float dtype up to float64); pass the model's ``dtype`` to
``from_spec`` to get a bitwise copy. Tied blocks get the tie names "tie0",
"tie1", ... in order of first appearance.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .activations import ACTIVATIONS, activation_name
from .blocks import Identity, LinearBlock
from .core import Sequential2D
from .engines import STORES

__all__ = ["from_spec", "to_spec", "load_spec", "save_spec"]

# ---------------------------------------------------------------------- schema tables
TOP_KEYS = ("slots", "blocks", "steps", "inputs", "outputs", "seed", "backend", "name")
SLOT_KEYS = ("size", "activation", "bias", "role", "bias_value", "norm_weight", "norm_bias")
BLOCK_KEYS = ("row", "col", "kind", "density", "n", "mask", "indices", "init", "trainable", "tie", "weight", "frozen")
ROLES = ("input", "hidden", "output")
KINDS = ("dense", "diagonal", "identity", "random", "exact", "per_row", "mask")
# keys only some kinds take; every linear kind also takes _LINEAR_KEYS, identity takes none
_KIND_KEYS = {
    "dense": (),
    "diagonal": (),
    "identity": (),
    "random": ("density",),
    "exact": ("n",),
    "per_row": ("n",),
    "mask": ("mask", "indices"),
}
_LINEAR_KEYS = ("init", "trainable", "tie", "weight", "frozen")
INIT_KINDS = ("default", "normal", "uniform", "constant")
_INIT_KEYS = {
    "default": ("kind",),
    "normal": ("kind", "mean", "std"),
    "uniform": ("kind", "a", "b"),
    "constant": ("kind", "value"),
}
# what a tied block inherits from the first block of its tie when it leaves a key out
_BLOCK_DEFAULTS = {"kind": "dense", "init": "default", "trainable": True}


# ---------------------------------------------------------------------- parsed form
@dataclass
class _Slot:
    size: int
    activation: str = "identity"
    bias: bool = False
    role: str | None = None
    bias_value: Tensor | None = None  # float64 (size,)
    norm_weight: Tensor | None = None
    norm_bias: Tensor | None = None


@dataclass
class _Block:
    index: int  # position in the spec's block list
    row: int
    col: int
    kind: str
    density: float | None = None
    n: int | None = None
    mask: Tensor | None = None  # bool (rows, cols) for kind "mask"
    init: tuple[str, dict[str, float]] = ("default", {})
    trainable: bool = True
    tie: str | None = None
    weight: Tensor | None = None  # float64 (rows, cols)
    frozen: Tensor | None = None  # float64 (rows, cols)
    leader: int | None = None  # for a tied block after the first: index of the first


@dataclass
class _Spec:
    slots: list[_Slot]
    blocks: list[_Block] = field(default_factory=list)
    steps: int | None = None
    inputs: list[int] | None = None
    outputs: list[int] | None = None
    seed: int = 0
    backend: str = "dense"
    name: str | None = None


# ---------------------------------------------------------------------- small checks
def _show(v: Any) -> str:
    """``type value`` for messages, long values shortened."""
    r = repr(v)
    if len(r) > 60:
        r = r[:57] + "..."
    return f"{type(v).__name__} {r}"


def _choices(values) -> str:
    return ", ".join(repr(v) for v in values)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_list(v) -> bool:
    return isinstance(v, (list, tuple))


def _check_keys(d: Mapping, valid, where: str) -> None:
    for k in d:
        if k in valid:
            continue
        if not isinstance(k, str):
            raise TypeError(f"{where}: keys must be strs, got {_show(k)}. Valid keys: {_choices(valid)}")
        close = difflib.get_close_matches(k, valid, n=1, cutoff=0.7)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{where}: unknown key {k!r}{hint}. Valid keys: {_choices(valid)}")


def _table(v, where: str) -> Mapping:
    if not isinstance(v, Mapping):
        raise TypeError(f"{where}: expected a table (dict), got {_show(v)}")
    return v


def _int(v, where: str, lo: int | None = None, hi: int | None = None, what: str = "an int") -> int:
    if not _is_int(v):
        raise TypeError(f"{where}: expected {what}, got {_show(v)}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{where}: expected {what}, got {v}")
    return v


def _bool(v, where: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{where}: expected a bool (true or false), got {_show(v)}")
    return v


def _str(v, where: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{where}: expected a str, got {_show(v)}")
    return v


def _number(v, where: str, what: str = "a number") -> float:
    if not _is_num(v):
        raise TypeError(f"{where}: expected {what}, got {_show(v)}")
    if not math.isfinite(v):
        raise ValueError(f"{where}: expected {what} (finite), got {v}")
    return float(v)


def _enum(v, choices, where: str, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{where}: expected {what} (a str): one of {_choices(choices)}; got {_show(v)}")
    if v not in choices:
        close = difflib.get_close_matches(v, choices, n=1, cutoff=0.7)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{where}: unknown {what} {v!r}{hint}. Select from {_choices(choices)}")
    return v


def _vector(v, length: int, where: str) -> Tensor:
    if not _is_list(v):
        raise TypeError(f"{where}: expected a list of {length} numbers, got {_show(v)}")
    if len(v) != length:
        raise ValueError(f"{where}: expected {length} numbers (the slot size), got {len(v)}")
    for k, x in enumerate(v):
        if not _is_num(x):
            raise TypeError(f"{where}[{k}]: expected a number, got {_show(x)}")
    return torch.tensor(list(v), dtype=torch.float64)


def _rows_of(v, shape: tuple[int, int], where: str, what: str) -> None:
    r, c = shape
    if not _is_list(v):
        raise TypeError(f"{where}: expected a 2-D list of {what} of shape ({r}, {c}), got {_show(v)}")
    if len(v) != r:
        raise ValueError(f"{where}: expected {r} rows (shape ({r}, {c}) = (sizes[row], sizes[col])), got {len(v)}")
    for k, row in enumerate(v):
        if not _is_list(row):
            raise TypeError(f"{where}[{k}]: expected a list of {c} {what}, got {_show(row)}")
        if len(row) != c:
            raise ValueError(f"{where}[{k}]: expected {c} entries (shape ({r}, {c}) = (sizes[row], sizes[col])), got {len(row)}")


def _matrix(v, shape: tuple[int, int], where: str) -> Tensor:
    _rows_of(v, shape, where, "numbers")
    for k, row in enumerate(v):
        for m, x in enumerate(row):
            if not _is_num(x):
                raise TypeError(f"{where}[{k}][{m}]: expected a number, got {_show(x)}")
    return torch.tensor([list(row) for row in v], dtype=torch.float64)


def _mask_matrix(v, shape: tuple[int, int], where: str) -> Tensor:
    _rows_of(v, shape, where, "0/1 or bools")
    for k, row in enumerate(v):
        for m, x in enumerate(row):
            if not (isinstance(x, bool) or (_is_int(x) and x in (0, 1))):
                raise TypeError(f"{where}[{k}][{m}]: expected 0, 1, true or false, got {_show(x)}")
    return torch.tensor([[bool(x) for x in row] for row in v], dtype=torch.bool)


def _indices(v, shape: tuple[int, int], where: str) -> Tensor:
    r, c = shape
    if not _is_list(v):
        raise TypeError(f"{where}: expected a list of [r, c] pairs, got {_show(v)}")
    mask = torch.zeros(shape, dtype=torch.bool)
    for k, pair in enumerate(v):
        if not (_is_list(pair) and len(pair) == 2 and all(_is_int(x) for x in pair)):
            raise TypeError(f"{where}[{k}]: expected an [r, c] pair of ints, got {_show(pair)}")
        a, b = pair
        if not (0 <= a < r and 0 <= b < c):
            raise ValueError(f"{where}[{k}]: entry [{a}, {b}] is outside the block of shape ({r}, {c}) (0 <= r < {r}, 0 <= c < {c})")
        if mask[a, b]:
            raise ValueError(f"{where}[{k}]: entry [{a}, {b}] is listed twice")
        mask[a, b] = True
    return mask


# ---------------------------------------------------------------------- parsing
def _parse_slot(raw, k: int) -> _Slot:
    where = f"slots[{k}]"
    raw = _table(raw, where)
    _check_keys(raw, SLOT_KEYS, where)
    if "size" not in raw:
        raise ValueError(f"{where}: missing required key 'size' (a positive int)")
    s = _Slot(size=_int(raw["size"], f"{where}.size", lo=1, what="a positive int"))
    if "activation" in raw:
        s.activation = _enum(raw["activation"], tuple(ACTIVATIONS), f"{where}.activation", "activation")
    if "bias" in raw:
        s.bias = _bool(raw["bias"], f"{where}.bias")
    if "role" in raw:
        s.role = _enum(raw["role"], ROLES, f"{where}.role", "role")
    if "bias_value" in raw:
        if not s.bias:
            raise ValueError(f"{where}: 'bias_value' needs bias = true, got bias = {s.bias}")
        s.bias_value = _vector(raw["bias_value"], s.size, f"{where}.bias_value")
    for key in ("norm_weight", "norm_bias"):
        if key in raw:
            if s.activation != "layernorm":
                raise ValueError(f"{where}: {key!r} applies to activation 'layernorm' only, got activation {s.activation!r}")
            setattr(s, key, _vector(raw[key], s.size, f"{where}.{key}"))
    return s


def _parse_init(raw, where: str) -> tuple[str, dict[str, float]]:
    if isinstance(raw, str):
        if raw != "default":
            raise ValueError(
                f"{where}: expected 'default' or a table {{kind = ...}} with kind one of {_choices(INIT_KINDS)}, got {raw!r}"
            )
        return ("default", {})
    if not isinstance(raw, Mapping):
        raise TypeError(f"{where}: expected 'default' or a table {{kind = ...}}, got {_show(raw)}")
    if "kind" not in raw:
        raise ValueError(f"{where}: missing required key 'kind'. Select from {_choices(INIT_KINDS)}")
    kind = _enum(raw["kind"], INIT_KINDS, f"{where}.kind", "init kind")
    valid = _INIT_KEYS[kind]
    for key in raw:
        if key not in valid:
            _check_keys({key: None}, valid, f"{where} (init kind {kind!r})")
    p = {k: _number(raw[k], f"{where}.{k}") for k in valid[1:] if k in raw}
    if kind == "normal":
        if "std" not in p:
            raise ValueError(f"{where}: init kind 'normal' needs 'std' (a number >= 0); 'mean' defaults to 0.0")
        if p["std"] < 0:
            raise ValueError(f"{where}.std: expected a number >= 0, got {p['std']}")
        p.setdefault("mean", 0.0)
    elif kind == "uniform":
        for key in ("a", "b"):
            if key not in p:
                raise ValueError(f"{where}: init kind 'uniform' needs 'a' and 'b' (numbers, a <= b); missing {key!r}")
        if p["a"] > p["b"]:
            raise ValueError(f"{where}: expected a <= b, got a = {p['a']}, b = {p['b']}")
    elif kind == "constant" and "value" not in p:
        raise ValueError(f"{where}: init kind 'constant' needs 'value' (a number)")
    return (kind, p)


def _parse_block(raw, k: int, sizes: tuple[int, ...], leaders: dict[str, tuple[Mapping, _Block]]) -> _Block:
    where = f"blocks[{k}]"
    raw = _table(raw, where)
    _check_keys(raw, BLOCK_KEYS, where)
    n = len(sizes)
    for key in ("row", "col"):
        if key not in raw:
            raise ValueError(f"{where}: missing required key {key!r} (a slot index in 0..{n - 1})")
    row = _int(raw["row"], f"{where}.row", 0, n - 1, f"a slot index (an int in 0..{n - 1})")
    col = _int(raw["col"], f"{where}.col", 0, n - 1, f"a slot index (an int in 0..{n - 1})")
    shape = (sizes[row], sizes[col])

    # a tied block after the first: inherits everything, may only repeat it
    tie = _str(raw["tie"], f"{where}.tie") if "tie" in raw else None
    if tie is not None and tie in leaders:
        lraw, lead = leaders[tie]
        lshape = (sizes[lead.row], sizes[lead.col])
        if shape != lshape:
            raise ValueError(
                f"{where}: tie {tie!r} needs one shape, but blocks[{lead.index}] is {lshape} "
                f"and this block (F[{row}][{col}]) is {shape} = (sizes[row], sizes[col])"
            )
        for key, v in raw.items():
            if key in ("row", "col", "tie"):
                continue
            lv = lraw.get(key, _BLOCK_DEFAULTS.get(key))
            if v != lv:
                raise ValueError(
                    f"{where}: tie {tie!r} is defined by blocks[{lead.index}] with {key} = {lv!r}, but this block "
                    f"gives {key} = {v!r}; leave the key out or make it match"
                )
        return _Block(index=k, row=row, col=col, kind=lead.kind, trainable=lead.trainable, tie=tie, leader=lead.index)

    kind = _enum(raw.get("kind", "dense"), KINDS, f"{where}.kind", "block kind")
    allowed = ("row", "col", "kind") + _KIND_KEYS[kind] + (() if kind == "identity" else _LINEAR_KEYS)
    for key in raw:
        if key not in allowed:
            owners = [kd for kd, ks in _KIND_KEYS.items() if key in ks]
            why = f"it belongs to kind {_choices(owners)}" if owners else "an identity block has no values"
            raise ValueError(f"{where}: key {key!r} does not apply to kind {kind!r} ({why}). Keys for {kind!r}: {_choices(allowed)}")
    b = _Block(index=k, row=row, col=col, kind=kind, tie=tie)
    r, c = shape
    if kind == "identity":
        if r != c:
            raise ValueError(
                f"{where}: kind 'identity' needs equal slot sizes, but F[{row}][{col}] maps slot {col} (size {c}) to slot {row} (size {r})"
            )
        return b
    if kind == "diagonal" and r != c:
        raise ValueError(f"{where}: kind 'diagonal' needs a square block, but F[{row}][{col}] has shape ({r}, {c}) = (sizes[row], sizes[col])")
    if kind == "random":
        if "density" not in raw:
            raise ValueError(f"{where}: kind 'random' needs 'density' (a number in (0, 1])")
        p = _number(raw["density"], f"{where}.density", "a number in (0, 1]")
        if not 0 < p <= 1:
            raise ValueError(f"{where}.density: expected a number in (0, 1], got {p}")
        b.density = p
    elif kind in ("exact", "per_row"):
        if "n" not in raw:
            raise ValueError(f"{where}: kind {kind!r} needs 'n' (an int >= 0)")
        hi = r * c if kind == "exact" else c
        what = f"an int in 0..{hi} (" + (f"the block has {r} x {c} entries)" if kind == "exact" else f"entries per row; rows have {c} entries)")
        b.n = _int(raw["n"], f"{where}.n", 0, hi, what)
    elif kind == "mask":
        has = [key for key in ("mask", "indices") if key in raw]
        if len(has) != 1:
            raise ValueError(f"{where}: kind 'mask' needs exactly one of 'mask' (2-D list of 0/1) or 'indices' (list of [r, c]), got {has or 'neither'}")
        if has[0] == "mask":
            b.mask = _mask_matrix(raw["mask"], shape, f"{where}.mask")
        else:
            b.mask = _indices(raw["indices"], shape, f"{where}.indices")
    if "trainable" in raw:
        b.trainable = _bool(raw["trainable"], f"{where}.trainable")
    if "init" in raw:
        b.init = _parse_init(raw["init"], f"{where}.init")
    if "weight" in raw:
        if not b.trainable:
            raise ValueError(f"{where}: 'weight' does not apply to a block with trainable = false; give its fixed values as 'frozen'")
        b.weight = _matrix(raw["weight"], shape, f"{where}.weight")
    if "frozen" in raw:
        b.frozen = _matrix(raw["frozen"], shape, f"{where}.frozen")
        if b.trainable and kind == "dense":
            raise ValueError(
                f"{where}: 'frozen' needs entries outside the trainable pattern, but kind 'dense' makes every entry trainable; "
                "use trainable = false, or a sparser kind"
            )
    given = "weight" if b.trainable else "frozen"
    if "init" in raw and getattr(b, given) is not None:
        raise ValueError(f"{where}: give 'init' or '{given}' (the values themselves), not both")
    if tie is not None:
        leaders[tie] = (raw, b)
    return b


def _slot_list(v, key: str, n: int) -> list[int]:
    if not _is_list(v):
        raise TypeError(f"{key}: expected a list of slot indices (ints in 0..{n - 1}), got {_show(v)}")
    out = [_int(s, f"{key}[{k}]", 0, n - 1, f"a slot index (an int in 0..{n - 1})") for k, s in enumerate(v)]
    if len(set(out)) != len(out):
        raise ValueError(f"{key}: expected distinct slot indices, got {out}")
    return out


def _parse(spec) -> _Spec:
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec: expected a dict (or a path to a TOML file), got {_show(spec)}")
    _check_keys(spec, TOP_KEYS, "spec")
    if "slots" not in spec:
        raise ValueError("spec: missing required key 'slots' (a list of slot tables, one per slot)")
    raw_slots = spec["slots"]
    if not _is_list(raw_slots):
        raise TypeError(f"slots: expected a list of slot tables, got {_show(raw_slots)}")
    if not raw_slots:
        raise ValueError("slots: expected at least one slot, got an empty list")
    slots = [_parse_slot(s, k) for k, s in enumerate(raw_slots)]
    sizes = tuple(s.size for s in slots)
    n = len(sizes)
    p = _Spec(slots=slots)

    raw_blocks = spec.get("blocks", [])
    if not _is_list(raw_blocks):
        raise TypeError(f"blocks: expected a list of block tables, got {_show(raw_blocks)}")
    leaders: dict[str, tuple[Mapping, _Block]] = {}
    seen: dict[tuple[int, int], int] = {}
    for k, raw in enumerate(raw_blocks):
        b = _parse_block(raw, k, sizes, leaders)
        if (b.row, b.col) in seen:
            raise ValueError(f"blocks[{k}]: position F[{b.row}][{b.col}] (row {b.row}, col {b.col}) is already taken by blocks[{seen[(b.row, b.col)]}]")
        seen[(b.row, b.col)] = k
        p.blocks.append(b)
    _check_values_fit(p.blocks)

    # held slots (empty row): keep their value, so no activation and no bias
    fed = {b.row for b in p.blocks}
    held = [i for i in range(n) if i not in fed]
    for i in held:
        s = slots[i]
        why = f"slot {i} has no incoming blocks (no block has row = {i}), so it is held (keeps its value)"
        if s.activation != "identity":
            raise ValueError(f"slots[{i}].activation = {s.activation!r}: {why} and an activation would never be applied; use 'identity' or add a block")
        if s.bias:
            raise ValueError(f"slots[{i}].bias = true: {why} and cannot have a bias")

    for key in ("inputs", "outputs"):
        if key in spec:
            setattr(p, key, _slot_list(spec[key], key, n))
    _resolve_roles(p, held)
    if "steps" in spec:
        p.steps = _int(spec["steps"], "steps", lo=0, what="an int >= 0")
    if "seed" in spec:
        p.seed = _int(spec["seed"], "seed", 0, 2**64 - 1, "an int in [0, 2**64)")
    if "backend" in spec:
        p.backend = _enum(spec["backend"], STORES, "backend", "backend")
    if "name" in spec:
        p.name = _str(spec["name"], "name")
    return p


def _check_values_fit(blocks: list[_Block]) -> None:
    """Given weight/frozen values must fit the pattern (the pattern of a random kind is
    only known after drawing, so those are checked at build time)."""
    for b in blocks:
        pat = _fixed_pattern(b)
        if pat is None:
            continue
        where = f"blocks[{b.index}]"
        if b.weight is not None and bool((b.weight[~pat] != 0).any()):
            r, c = (~pat & (b.weight != 0)).nonzero()[0].tolist()
            raise ValueError(f"{where}.weight: expected zeros outside the {b.kind!r} pattern, got {b.weight[r, c].item()} at [{r}, {c}]")
        if b.frozen is not None:
            bad = pat & (b.frozen != 0) if b.trainable else ~pat & (b.frozen != 0)
            if bool(bad.any()):
                r, c = bad.nonzero()[0].tolist()
                side = "on the trainable" if b.trainable else "outside the"
                raise ValueError(f"{where}.frozen: expected zeros {side} {b.kind!r} pattern, got {b.frozen[r, c].item()} at [{r}, {c}]")


def _fixed_pattern(b: _Block) -> Tensor | None:
    """The pattern of a non-random linear kind (None for random kinds, identity, tied copies)."""
    if b.leader is not None or b.kind == "identity" or (b.weight is None and b.frozen is None):
        return None
    shape = (b.weight if b.weight is not None else b.frozen).shape
    if b.kind == "dense":
        return torch.ones(shape, dtype=torch.bool)
    if b.kind == "diagonal":
        return torch.eye(shape[0], dtype=torch.bool)
    if b.kind == "mask":
        return b.mask
    return None


def _resolve_roles(p: _Spec, held: list[int]) -> None:
    roles = [s.role for s in p.slots]
    if all(r is None for r in roles):
        return
    for key, want, default, what in (
        ("inputs", "input", held, "the held slots"),
        ("outputs", "output", [len(roles) - 1], "the last slot"),
    ):
        given = getattr(p, key)
        marked = [i for i, r in enumerate(roles) if r == want]
        if given is not None:
            final, source = given, f"{key} = {given}"
        elif marked:
            final, source = marked, None
        else:
            final, source = default, f"{key} = {default} (the default: {what}, as no slot has role {want!r})"
        setattr(p, key, final)
        if source is None:
            continue
        for i, r in enumerate(roles):
            if r is not None and (r == want) != (i in final):
                rule = f"role {want!r} must be listed in {key}" if r == want else f"a slot listed in {key} must have role {want!r}"
                raise ValueError(f"slots[{i}].role = {r!r} disagrees with {source}: {rule} (or leave the role out)")


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
        mask[torch.randperm(r * c, generator=g)[:k]] = True
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


def _build_linear(b: _Block, shape: tuple[int, int], g: torch.Generator, dtype) -> LinearBlock:
    r, c = shape
    pat = _pattern(b, shape, g)
    where = f"blocks[{b.index}]"
    given = b.weight if b.trainable else b.frozen
    if given is not None:
        if b.kind in ("random", "exact", "per_row"):  # pattern just drawn: check here
            off = ~pat & (given != 0)
            if bool(off.any()):
                i, j = off.nonzero()[0].tolist()
                name = "weight" if b.trainable else "frozen"
                raise ValueError(f"{where}.{name}: expected zeros outside the drawn {b.kind!r} pattern, got {given[i, j].item()} at [{i}, {j}]")
        values = given
    else:
        values = torch.where(pat, _draw(b.init, shape, g), 0.0)
    if not b.trainable:
        return LinearBlock(c, r, mask=torch.zeros(shape, dtype=torch.bool), frozen=values.to(dtype), dtype=dtype)
    frozen = None
    if b.frozen is not None:
        if bool((pat & (b.frozen != 0)).any()):
            i, j = (pat & (b.frozen != 0)).nonzero()[0].tolist()
            raise ValueError(f"{where}.frozen: expected zeros on the drawn {b.kind!r} pattern (those entries are trainable), got {b.frozen[i, j].item()} at [{i}, {j}]")
        if bool(pat.all()):
            raise ValueError(f"{where}: 'frozen' needs entries outside the trainable pattern, but the drawn pattern covers the whole block")
        frozen = b.frozen.to(dtype)
    blk = LinearBlock(c, r, mask=pat, frozen=frozen, dtype=dtype)
    with torch.no_grad():
        blk.weight.copy_(values)
    blk.apply_mask_()
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
            backend=p.backend,
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


# ---------------------------------------------------------------------- public API
def from_spec(spec: Mapping | str | os.PathLike, *, device=None, dtype=None) -> Sequential2D:
    """Build a :class:`~seq2d.Sequential2D` from a spec dict or a TOML file (schema: module docstring).

    Args:
        spec: the spec as a dict, or a path to a TOML (or ``.json``) file.
        device, dtype: of the model's parameters (default: CPU, the default dtype).
            Random values are drawn on the CPU in float64 and then cast, so a
            spec gives the same model on every device.

    Raises:
        ValueError: unknown key, bad value (the message names the place, e.g. ``blocks[3]``).
        TypeError: a value of the wrong type.
    """
    if isinstance(spec, (str, os.PathLike)):
        spec = load_spec(spec)
    return _build(_parse(spec), device, dtype)


def load_spec(path: str | os.PathLike) -> dict:
    """Read a spec from a TOML file (or JSON when the name ends in ``.json``); not validated."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    else:
        import tomllib

        with open(path, "rb") as f:
            spec = tomllib.load(f)
    if not isinstance(spec, dict):
        raise TypeError(f"{path}: expected a table (dict) at the top level, got {type(spec).__name__}")
    return spec


def save_spec(spec: Mapping, path: str | os.PathLike) -> None:
    """Validate ``spec`` and write it as TOML (or JSON when the name ends in ``.json``)."""
    _parse(spec)  # a typo should fail here, not when someone loads the file
    path = Path(path)
    if path.suffix.lower() == ".json":
        text = json.dumps(spec, indent=1, allow_nan=True) + "\n"
    else:
        text = _toml(spec)
    path.write_text(text, encoding="utf-8")


# A validated spec has a fixed shape (bare keys; values that are scalars, flat or 2-D
# lists of numbers, or the flat init table), so the layout is written here and only
# scalars go through tomli_w: tomli_w alone puts every array element on its own line,
# which turns a 100 x 100 weight into 10^4 lines. Tested: tomllib reads back the spec.
def _toml(spec: Mapping) -> str:
    top = [(k, v) for k, v in spec.items() if k not in ("slots", "blocks") or not v]
    chunks = ["".join(_toml_line(k, v) for k, v in top)]
    for key in ("slots", "blocks"):
        for table in spec.get(key) or []:
            chunks.append(f"[[{key}]]\n" + "".join(_toml_line(k, v) for k, v in table.items()))
    return "\n".join(c for c in chunks if c)


def _toml_line(key: str, v) -> str:
    if isinstance(v, Mapping):  # the init table, inline
        return f"{key} = {{ " + ", ".join(f"{k} = {_toml_scalar(x)}" for k, x in v.items()) + " }\n"
    if _is_list(v) and v and all(_is_list(r) for r in v):  # 2-D: one row per line
        return f"{key} = [\n" + "".join(f"    {_toml_flat(r)},\n" for r in v) + "]\n"
    if _is_list(v):
        return f"{key} = {_toml_flat(v)}\n"
    return f"{key} = {_toml_scalar(v)}\n"


def _toml_flat(v) -> str:
    return "[" + ", ".join(_toml_scalar(x) for x in v) + "]"


def _toml_scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)  # repr: exact round trip; nan/inf are TOML too
    import tomli_w

    return tomli_w.dumps({"v": v})[len("v = ") : -1]


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
    mask = blk.mask.cpu() if blk.mask is not None else torch.ones(blk.shape, dtype=torch.bool)
    frozen = blk.frozen.cpu() if blk.frozen is not None else None
    if frozen is not None and not bool(mask.any()):  # fully frozen
        entry = _pattern_entry(frozen != 0)
        entry["trainable"] = False
        if weights:
            entry["frozen"] = _floats(frozen)
        return entry
    entry = _pattern_entry(mask)
    if weights:
        w = blk.weight.detach().cpu()
        entry["weight"] = _floats(w * mask if blk.mask is not None else w)
    if frozen is not None:  # partly frozen: the values are structure
        entry["frozen"] = _floats(frozen)
    return entry


def to_spec(model: Sequential2D, *, weights: bool = False) -> dict:
    """The spec of ``model`` (whose blocks are linear or identity): ``from_spec`` rebuilds it.

    Without ``weights`` the spec holds the structure: sizes, activations, biases,
    patterns (masks and frozen entries), ties, inputs, outputs, steps and backend.
    With ``weights=True`` it also holds every value (``weight``, ``frozen``,
    ``bias_value``, ``norm_weight``/``norm_bias``), so
    ``from_spec(to_spec(m, weights=True), dtype=<m's dtype>)`` computes bitwise the same.

    Raises:
        TypeError: a block that is a module (not linear/identity), or an activation
            with no name in :data:`~seq2d.activations.ACTIVATIONS`.
        ValueError: one bias Parameter shared by several slots (a spec has no way to say so).
    """
    if not isinstance(model, Sequential2D):
        raise TypeError(f"to_spec: expected a Sequential2D, got {type(model).__name__}")
    if not isinstance(weights, bool):
        raise TypeError(f"to_spec: weights must be a bool, got {_show(weights)}")
    n = model.n
    slots: list[dict] = []
    bias_owner: dict[int, int] = {}
    for i in range(n):
        s: dict[str, Any] = {"size": model.sizes[i]}
        act = model.acts[i]
        name = activation_name(act)
        if name is None or (name == "layernorm" and act.bias is None):
            raise TypeError(
                f"to_spec: slot {i} has activation {type(act).__name__} ({act!r}), which has no name; "
                f"a spec can hold {_choices(ACTIVATIONS)} (layernorm with default eps and affine weight and bias)"
            )
        if name != "identity":
            s["activation"] = name
        b = model.bias(i)
        if b is not None:
            if model.slot_bias.pos[i] in bias_owner:
                raise ValueError(f"to_spec: slots {bias_owner[model.slot_bias.pos[i]]} and {i} share one bias Parameter; a spec gives every slot its own bias")
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
    if model.backend != "dense":
        spec["backend"] = model.backend

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
            raise TypeError(
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
