"""The spec schema: key tables, the parsed form, and the typed value checks.

A spec (docs/spec.md) is a plain dict; :mod:`seq2d.spec.parse` validates it into the
dataclasses below with the checks below. Every check raises TypeError (wrong type) or
ValueError (bad value) naming the place (``blocks[3].init``), what was expected and
what arrived.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..errors import InvalidType, InvalidValue, did_you_mean
from ..errors import show_value as _show

# ---------------------------------------------------------------------- schema tables
TOP_KEYS = ("slots", "blocks", "steps", "inputs", "outputs", "seed", "store", "loop", "name")
# top-level keys renamed since spec files were first written: old -> new, read as the new one
RENAMED_TOP_KEYS = {"backend": "store"}
SLOT_KEYS = ("size", "activation", "bias", "role", "bias_value", "norm_weight", "norm_bias")
BLOCK_KEYS = (
    "row", "col", "kind", "density", "n", "mask", "indices", "init", "trainable", "dense_trainable", "tie", "weight", "frozen",
    "bias", "bias_value",
)
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
_LINEAR_KEYS = ("init", "trainable", "dense_trainable", "tie", "weight", "frozen", "bias", "bias_value")
INIT_KINDS = ("default", "normal", "uniform", "constant")
_INIT_KEYS = {
    "default": ("kind",),
    "normal": ("kind", "mean", "std"),
    "uniform": ("kind", "a", "b"),
    "constant": ("kind", "value"),
}
# what a tied block inherits from the first block of its tie when it leaves a key out
_BLOCK_DEFAULTS = {"kind": "dense", "init": "default", "trainable": True, "dense_trainable": False, "bias": False}


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
    # every entry trainable (mask None); the pattern only places the initial values
    # (iterativennsimple's R=p with trainable=True)
    dense_trainable: bool = False
    tie: str | None = None
    weight: Tensor | None = None  # float64 (rows, cols)
    frozen: Tensor | None = None  # float64 (rows, cols)
    bias: bool = False  # the block's own bias (LinearBlock(bias=True)), added when its input is present
    bias_value: Tensor | None = None  # float64 (rows,)
    leader: int | None = None  # for a tied block after the first: index of the first


@dataclass
class _Spec:
    slots: list[_Slot]
    blocks: list[_Block] = field(default_factory=list)
    steps: int | None = None
    inputs: list[int] | None = None
    outputs: list[int] | None = None
    seed: int = 0
    store: str = "dense"
    loop: bool = False
    name: str | None = None


# ---------------------------------------------------------------------- small checks
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
            raise InvalidType(f"{where}: keys must be strs, got {_show(k)}. Valid keys: {_choices(valid)}")
        raise InvalidValue(f"{where}: unknown key {k!r}{did_you_mean(k, valid)}. Valid keys: {_choices(valid)}")


def _table(v, where: str) -> Mapping:
    if not isinstance(v, Mapping):
        raise InvalidType(f"{where}: expected a table (dict), got {_show(v)}")
    return v


def _int(v, where: str, lo: int | None = None, hi: int | None = None, what: str = "an int") -> int:
    if not _is_int(v):
        raise InvalidType(f"{where}: expected {what}, got {_show(v)}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise InvalidValue(f"{where}: expected {what}, got {v}")
    return v


def _bool(v, where: str) -> bool:
    if not isinstance(v, bool):
        raise InvalidType(f"{where}: expected a bool (true or false), got {_show(v)}")
    return v


def _str(v, where: str) -> str:
    if not isinstance(v, str):
        raise InvalidType(f"{where}: expected a str, got {_show(v)}")
    return v


def _number(v, where: str, what: str = "a number") -> float:
    if not _is_num(v):
        raise InvalidType(f"{where}: expected {what}, got {_show(v)}")
    if not math.isfinite(v):
        raise InvalidValue(f"{where}: expected {what} (finite), got {v}")
    return float(v)


def _enum(v, choices, where: str, what: str) -> str:
    if not isinstance(v, str):
        raise InvalidType(f"{where}: expected {what} (a str): one of {_choices(choices)}; got {_show(v)}")
    if v not in choices:
        raise InvalidValue(f"{where}: unknown {what} {v!r}{did_you_mean(v, choices)}. Select from {_choices(choices)}")
    return v


def _vector(v, length: int, where: str) -> Tensor:
    if not _is_list(v):
        raise InvalidType(f"{where}: expected a list of {length} numbers, got {_show(v)}")
    if len(v) != length:
        raise InvalidValue(f"{where}: expected {length} numbers (the slot size), got {len(v)}")
    for k, x in enumerate(v):
        if not _is_num(x):
            raise InvalidType(f"{where}[{k}]: expected a number, got {_show(x)}")
    return torch.tensor(list(v), dtype=torch.float64)


def _rows_of(v, shape: tuple[int, int], where: str, what: str) -> None:
    r, c = shape
    if not _is_list(v):
        raise InvalidType(f"{where}: expected a 2-D list of {what} of shape ({r}, {c}), got {_show(v)}")
    if len(v) != r:
        raise InvalidValue(f"{where}: expected {r} rows (shape ({r}, {c}) = (sizes[row], sizes[col])), got {len(v)}")
    for k, row in enumerate(v):
        if not _is_list(row):
            raise InvalidType(f"{where}[{k}]: expected a list of {c} {what}, got {_show(row)}")
        if len(row) != c:
            raise InvalidValue(f"{where}[{k}]: expected {c} entries (shape ({r}, {c}) = (sizes[row], sizes[col])), got {len(row)}")


def _matrix(v, shape: tuple[int, int], where: str) -> Tensor:
    _rows_of(v, shape, where, "numbers")
    for k, row in enumerate(v):
        for m, x in enumerate(row):
            if not _is_num(x):
                raise InvalidType(f"{where}[{k}][{m}]: expected a number, got {_show(x)}")
    return torch.tensor([list(row) for row in v], dtype=torch.float64)


def _mask_matrix(v, shape: tuple[int, int], where: str) -> Tensor:
    _rows_of(v, shape, where, "0/1 or bools")
    for k, row in enumerate(v):
        for m, x in enumerate(row):
            if not (isinstance(x, bool) or (_is_int(x) and x in (0, 1))):
                raise InvalidType(f"{where}[{k}][{m}]: expected 0, 1, true or false, got {_show(x)}")
    return torch.tensor([[bool(x) for x in row] for row in v], dtype=torch.bool)


def _indices(v, shape: tuple[int, int], where: str) -> Tensor:
    r, c = shape
    if not _is_list(v):
        raise InvalidType(f"{where}: expected a list of [r, c] pairs, got {_show(v)}")
    mask = torch.zeros(shape, dtype=torch.bool)
    for k, pair in enumerate(v):
        if not (_is_list(pair) and len(pair) == 2 and all(_is_int(x) for x in pair)):
            raise InvalidType(f"{where}[{k}]: expected an [r, c] pair of ints, got {_show(pair)}")
        a, b = pair
        if not (0 <= a < r and 0 <= b < c):
            raise InvalidValue(f"{where}[{k}]: entry [{a}, {b}] is outside the block of shape ({r}, {c}) (0 <= r < {r}, 0 <= c < {c})")
        if mask[a, b]:
            raise InvalidValue(f"{where}[{k}]: entry [{a}, {b}] is listed twice")
        mask[a, b] = True
    return mask
