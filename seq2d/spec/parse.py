"""Parse and validate a spec dict into the parsed form (:class:`~seq2d.spec.schema._Spec`).

Keys, types, values, ties and roles are checked here, so a typo fails in
:func:`~seq2d.spec.save_spec` as well as in :func:`~seq2d.spec.from_spec`. Given values
that must fit the pattern of a random kind are checked when building, once it is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from ..errors import InvalidType, InvalidValue
from ..activations import ACTIVATIONS
from ..stores import STORES
from ..errors import show_value as _show
from .schema import (
    _BLOCK_DEFAULTS,
    _INIT_KEYS,
    _KIND_KEYS,
    _LINEAR_KEYS,
    BLOCK_KEYS,
    INIT_KINDS,
    KINDS,
    ROLES,
    SLOT_KEYS,
    TOP_KEYS,
    RENAMED_TOP_KEYS,
    _Block,
    _bool,
    _check_keys,
    _choices,
    _enum,
    _indices,
    _int,
    _is_list,
    _mask_matrix,
    _matrix,
    _number,
    _Slot,
    _Spec,
    _str,
    _table,
    _vector,
)

# ---------------------------------------------------------------------- parsing
def _parse_slot(raw, k: int) -> _Slot:
    where = f"slots[{k}]"
    raw = _table(raw, where)
    _check_keys(raw, SLOT_KEYS, where)
    if "size" not in raw:
        raise InvalidValue(f"{where}: missing required key 'size' (a positive int)")
    s = _Slot(size=_int(raw["size"], f"{where}.size", lo=1, what="a positive int"))
    if "activation" in raw:
        s.activation = _enum(raw["activation"], tuple(ACTIVATIONS), f"{where}.activation", "activation")
    if "bias" in raw:
        s.bias = _bool(raw["bias"], f"{where}.bias")
    if "role" in raw:
        s.role = _enum(raw["role"], ROLES, f"{where}.role", "role")
    if "bias_value" in raw:
        if not s.bias:
            raise InvalidValue(f"{where}: 'bias_value' needs bias = true, got bias = {s.bias}")
        s.bias_value = _vector(raw["bias_value"], s.size, f"{where}.bias_value")
    for key in ("norm_weight", "norm_bias"):
        if key in raw:
            if s.activation != "layernorm":
                raise InvalidValue(f"{where}: {key!r} applies to activation 'layernorm' only, got activation {s.activation!r}")
            setattr(s, key, _vector(raw[key], s.size, f"{where}.{key}"))
    return s


def _parse_init(raw, where: str) -> tuple[str, dict[str, float]]:
    if isinstance(raw, str):
        if raw != "default":
            raise InvalidValue(
                f"{where}: expected 'default' or a table {{kind = ...}} with kind one of {_choices(INIT_KINDS)}, got {raw!r}"
            )
        return ("default", {})
    if not isinstance(raw, Mapping):
        raise InvalidType(f"{where}: expected 'default' or a table {{kind = ...}}, got {_show(raw)}")
    if "kind" not in raw:
        raise InvalidValue(f"{where}: missing required key 'kind'. Select from {_choices(INIT_KINDS)}")
    kind = _enum(raw["kind"], INIT_KINDS, f"{where}.kind", "init kind")
    valid = _INIT_KEYS[kind]
    for key in raw:
        if key not in valid:
            _check_keys({key: None}, valid, f"{where} (init kind {kind!r})")
    p = {k: _number(raw[k], f"{where}.{k}") for k in valid[1:] if k in raw}
    if kind == "normal":
        if "std" not in p:
            raise InvalidValue(f"{where}: init kind 'normal' needs 'std' (a number >= 0); 'mean' defaults to 0.0")
        if p["std"] < 0:
            raise InvalidValue(f"{where}.std: expected a number >= 0, got {p['std']}")
        p.setdefault("mean", 0.0)
    elif kind == "uniform":
        for key in ("a", "b"):
            if key not in p:
                raise InvalidValue(f"{where}: init kind 'uniform' needs 'a' and 'b' (numbers, a <= b); missing {key!r}")
        if p["a"] > p["b"]:
            raise InvalidValue(f"{where}: expected a <= b, got a = {p['a']}, b = {p['b']}")
    elif kind == "constant" and "value" not in p:
        raise InvalidValue(f"{where}: init kind 'constant' needs 'value' (a number)")
    return (kind, p)


def _parse_block(raw, k: int, sizes: tuple[int, ...], leaders: dict[str, tuple[Mapping, _Block]]) -> _Block:
    where = f"blocks[{k}]"
    raw = _table(raw, where)
    _check_keys(raw, BLOCK_KEYS, where)
    n = len(sizes)
    for key in ("row", "col"):
        if key not in raw:
            raise InvalidValue(f"{where}: missing required key {key!r} (a slot index in 0..{n - 1})")
    row = _int(raw["row"], f"{where}.row", 0, n - 1, f"a slot index (an int in 0..{n - 1})")
    col = _int(raw["col"], f"{where}.col", 0, n - 1, f"a slot index (an int in 0..{n - 1})")
    shape = (sizes[row], sizes[col])

    # a tied block after the first: inherits everything, may only repeat it
    tie = _str(raw["tie"], f"{where}.tie") if "tie" in raw else None
    if tie is not None and tie in leaders:
        lraw, lead = leaders[tie]
        lshape = (sizes[lead.row], sizes[lead.col])
        if shape != lshape:
            raise InvalidValue(
                f"{where}: tie {tie!r} needs one shape, but blocks[{lead.index}] is {lshape} "
                f"and this block (F[{row}][{col}]) is {shape} = (sizes[row], sizes[col])"
            )
        for key, v in raw.items():
            if key in ("row", "col", "tie"):
                continue
            lv = lraw.get(key, _BLOCK_DEFAULTS.get(key))
            if v != lv:
                raise InvalidValue(
                    f"{where}: tie {tie!r} is defined by blocks[{lead.index}] with {key} = {lv!r}, but this block "
                    f"gives {key} = {v!r}; leave the key out or make it match"
                )
        return _Block(
            index=k, row=row, col=col, kind=lead.kind, trainable=lead.trainable,
            dense_trainable=lead.dense_trainable, bias=lead.bias, tie=tie, leader=lead.index,
        )

    kind = _enum(raw.get("kind", "dense"), KINDS, f"{where}.kind", "block kind")
    allowed = ("row", "col", "kind") + _KIND_KEYS[kind] + (() if kind == "identity" else _LINEAR_KEYS)
    for key in raw:
        if key not in allowed:
            owners = [kd for kd, ks in _KIND_KEYS.items() if key in ks]
            why = f"it belongs to kind {_choices(owners)}" if owners else "an identity block has no values"
            raise InvalidValue(f"{where}: key {key!r} does not apply to kind {kind!r} ({why}). Keys for {kind!r}: {_choices(allowed)}")
    b = _Block(index=k, row=row, col=col, kind=kind, tie=tie)
    r, c = shape
    if kind == "identity":
        if r != c:
            raise InvalidValue(
                f"{where}: kind 'identity' needs equal slot sizes, but F[{row}][{col}] maps slot {col} (size {c}) to slot {row} (size {r})"
            )
        return b
    if kind == "diagonal" and r != c:
        raise InvalidValue(f"{where}: kind 'diagonal' needs a square block, but F[{row}][{col}] has shape ({r}, {c}) = (sizes[row], sizes[col])")
    if kind == "random":
        if "density" not in raw:
            raise InvalidValue(f"{where}: kind 'random' needs 'density' (a number in (0, 1])")
        p = _number(raw["density"], f"{where}.density", "a number in (0, 1]")
        if not 0 < p <= 1:
            raise InvalidValue(f"{where}.density: expected a number in (0, 1], got {p}")
        b.density = p
    elif kind in ("exact", "per_row"):
        if "n" not in raw:
            raise InvalidValue(f"{where}: kind {kind!r} needs 'n' (an int >= 0)")
        hi = r * c if kind == "exact" else c
        what = f"an int in 0..{hi} (" + (f"the block has {r} x {c} entries)" if kind == "exact" else f"entries per row; rows have {c} entries)")
        b.n = _int(raw["n"], f"{where}.n", 0, hi, what)
    elif kind == "mask":
        has = [key for key in ("mask", "indices") if key in raw]
        if len(has) != 1:
            raise InvalidValue(f"{where}: kind 'mask' needs exactly one of 'mask' (2-D list of 0/1) or 'indices' (list of [r, c]), got {has or 'neither'}")
        if has[0] == "mask":
            b.mask = _mask_matrix(raw["mask"], shape, f"{where}.mask")
        else:
            b.mask = _indices(raw["indices"], shape, f"{where}.indices")
    if "trainable" in raw:
        b.trainable = _bool(raw["trainable"], f"{where}.trainable")
    if "dense_trainable" in raw:
        b.dense_trainable = _bool(raw["dense_trainable"], f"{where}.dense_trainable")
        if b.dense_trainable and not b.trainable:
            raise InvalidValue(
                f"{where}: 'dense_trainable' = true makes every entry trainable, so it needs trainable = true, "
                "got trainable = false; leave 'dense_trainable' out for a fixed block"
            )
    if "init" in raw:
        b.init = _parse_init(raw["init"], f"{where}.init")
    if "weight" in raw:
        if not b.trainable:
            raise InvalidValue(f"{where}: 'weight' does not apply to a block with trainable = false; give its fixed values as 'frozen'")
        b.weight = _matrix(raw["weight"], shape, f"{where}.weight")
    if "frozen" in raw:  # on trainable entries: fixed offsets (W = frozen + weight * mask)
        b.frozen = _matrix(raw["frozen"], shape, f"{where}.frozen")
    if "bias" in raw:
        b.bias = _bool(raw["bias"], f"{where}.bias")
    if "bias_value" in raw:
        if not b.bias:
            raise InvalidValue(f"{where}: 'bias_value' needs bias = true, got bias = {b.bias}")
        b.bias_value = _vector(raw["bias_value"], r, f"{where}.bias_value")
    given = "weight" if b.trainable else "frozen"
    if "init" in raw and getattr(b, given) is not None:
        raise InvalidValue(f"{where}: give 'init' or '{given}' (the values themselves), not both")
    if tie is not None:
        leaders[tie] = (raw, b)
    return b


def _slot_list(v, key: str, n: int) -> list[int]:
    if not _is_list(v):
        raise InvalidType(f"{key}: expected a list of slot indices (ints in 0..{n - 1}), got {_show(v)}")
    out = [_int(s, f"{key}[{k}]", 0, n - 1, f"a slot index (an int in 0..{n - 1})") for k, s in enumerate(v)]
    if len(set(out)) != len(out):
        raise InvalidValue(f"{key}: expected distinct slot indices, got {out}")
    return out


def _renamed(spec: Mapping) -> Mapping:
    """``spec`` with the old top-level keys of a file written before a rename read as the new
    ones (:data:`~seq2d.spec.schema.RENAMED_TOP_KEYS`: ``backend`` is now ``store``)."""
    old = [k for k in RENAMED_TOP_KEYS if k in spec]
    if not old:
        return spec
    d = dict(spec)
    for k in old:
        new = RENAMED_TOP_KEYS[k]
        if new in d:
            raise InvalidValue(f"spec: {k!r} is the old name of {new!r}; give {new!r} only, not both")
        d[new] = d.pop(k)
    return d


def _parse(spec) -> _Spec:
    if not isinstance(spec, Mapping):
        raise InvalidType(f"spec: expected a dict (or a path to a TOML file), got {_show(spec)}")
    spec = _renamed(spec)
    from ..renames import migrate_store_value

    spec = migrate_store_value(spec, "spec")  # an old store value (store = "loop")
    _check_keys(spec, TOP_KEYS, "spec")
    if "slots" not in spec:
        raise InvalidValue("spec: missing required key 'slots' (a list of slot tables, one per slot)")
    raw_slots = spec["slots"]
    if not _is_list(raw_slots):
        raise InvalidType(f"slots: expected a list of slot tables, got {_show(raw_slots)}")
    if not raw_slots:
        raise InvalidValue("slots: expected at least one slot, got an empty list")
    slots = [_parse_slot(s, k) for k, s in enumerate(raw_slots)]
    sizes = tuple(s.size for s in slots)
    n = len(sizes)
    p = _Spec(slots=slots)

    raw_blocks = spec.get("blocks", [])
    if not _is_list(raw_blocks):
        raise InvalidType(f"blocks: expected a list of block tables, got {_show(raw_blocks)}")
    leaders: dict[str, tuple[Mapping, _Block]] = {}
    seen: dict[tuple[int, int], int] = {}
    for k, raw in enumerate(raw_blocks):
        b = _parse_block(raw, k, sizes, leaders)
        if (b.row, b.col) in seen:
            raise InvalidValue(f"blocks[{k}]: position F[{b.row}][{b.col}] (row {b.row}, col {b.col}) is already taken by blocks[{seen[(b.row, b.col)]}]")
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
            raise InvalidValue(f"slots[{i}].activation = {s.activation!r}: {why} and an activation would never be applied; use 'identity' or add a block")
        if s.bias:
            raise InvalidValue(f"slots[{i}].bias = true: {why} and cannot have a bias")

    for key in ("inputs", "outputs"):
        if key in spec:
            setattr(p, key, _slot_list(spec[key], key, n))
    _resolve_roles(p, held)
    if "steps" in spec:
        p.steps = _int(spec["steps"], "steps", lo=0, what="an int >= 0")
    if "seed" in spec:
        p.seed = _int(spec["seed"], "seed", 0, 2**64 - 1, "an int in [0, 2**64)")
    if "store" in spec:
        p.store = _enum(spec["store"], STORES, "store", "store")
    if "loop" in spec:
        p.loop = _bool(spec["loop"], "loop")
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
        # dense_trainable: every entry is trainable, so weight values may sit anywhere
        if b.weight is not None and not b.dense_trainable and bool((b.weight[~pat] != 0).any()):
            r, c = (~pat & (b.weight != 0)).nonzero()[0].tolist()
            raise InvalidValue(f"{where}.weight: expected zeros outside the {b.kind!r} pattern, got {b.weight[r, c].item()} at [{r}, {c}]")
        # trainable blocks: frozen values are allowed everywhere (offsets on the pattern);
        # a fixed block's values must sit on its pattern
        if b.frozen is not None and not b.trainable:
            bad = ~pat & (b.frozen != 0)
            if bool(bad.any()):
                r, c = bad.nonzero()[0].tolist()
                raise InvalidValue(f"{where}.frozen: expected zeros outside the {b.kind!r} pattern, got {b.frozen[r, c].item()} at [{r}, {c}]")


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
                raise InvalidValue(f"slots[{i}].role = {r!r} disagrees with {source}: {rule} (or leave the role out)")
