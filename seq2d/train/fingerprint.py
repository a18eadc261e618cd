r"""The model half of a run's identity: what a run trained, recorded beside its config hash.

A run's config hash (:func:`~seq2d.train.identity.config_hash`) says how it was trained; the
model passed to the :class:`~seq2d.train.Trainer` may still differ from one call to the next
(the user's own mask, activation or initial draw, or a spec file edited in place).
:func:`model_fingerprint` describes that model::

    {"version": 1,
     "structure": {...},           # the mathematics (below), readable: diffs name slots and blocks
     "structure_hash": "16 hex",   # sha256 of "structure"
     "init": "16 hex"}             # sha256 of the initial values (None: not known)

**Structure** of a :class:`~seq2d.Sequential2D`: ``sizes``, ``inputs``, ``outputs``, ``steps``,
the dtype, the number of trainable entries, per slot its activation and whether it has a bias
(shared with which slot), per block ``F[i][j]`` its kind (identity, linear, module), shape, the
hash of its trainable mask and of its frozen values, its own bias and its ties. The parameter
store and kernel (dense boxes or block-sparse tiles: how the product is computed, which may change
on resume) are left out, and so are the device and the fast-path switches.
Any other ``nn.Module`` (a :func:`~seq2d.from_torch` wrapper, an RNN language model, a module
block) is described generically: its class, its ``extra_repr()``, its parameters' names, shapes,
dtypes and ``requires_grad``, its buffers' names, shapes and dtypes (the values of bool buffers,
which are masks), and its children the same way (a Sequential2D inside as above). A generic
description is only as good as the module's ``extra_repr()``: two modules of one class whose
difference shows in neither it nor their tensors' shapes are not told apart.

**Initial values**: the hash of every parameter and buffer (its bytes), taken when the Trainer is
constructed, before any step; a
Sequential2D's linear blocks count through their effective weights (frozen + weight * mask), so
the hash does not depend on the store either. A model built from a config
(:func:`~seq2d.train.build_model`) gets its values from the config's model seed and, for a spec
file, from the file: an edit of a spec that changes the model changes this hash or the structure
(an edit of a comment changes neither).

**Rule.** Reusing a complete run (:meth:`Trainer.fit`, ``seq2d train``, ``seq2d mnist``,
:func:`~seq2d.train.vectorized.train_copies`) needs the same structure and, when both are known,
the same initial values; resuming needs the same structure (the values come from the checkpoint).
A difference raises :class:`ModelChangedError`, naming what differs
(:func:`fingerprint_diff`). A run recorded before fingerprints existed (no ``model_fingerprint``
in ``run.json`` or the checkpoint) follows the config-hash rule alone, as it did; even then a
checkpoint's mask (a bool entry of its state) is never loaded into a model built with another
(:func:`~seq2d.train.checkpoint.check_model_state`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from .checkpoint import ModelChangedError

__all__ = ["FINGERPRINT_KEY", "ModelChangedError", "model_fingerprint", "describe_model", "fingerprint_diff",
           "format_model_diff", "check_same_model", "adopt_fingerprint", "config_model_diff"]

#: The key of the fingerprint in ``run.json`` and in a checkpoint's ``extra``.
FINGERPRINT_KEY = "model_fingerprint"
# Bump whenever what describe_model or _init_hash writes changes (a new key, another hash of a
# tensor, a described class moved to another module): a fingerprint of another version is not compared (the config rule alone), whereas an
# unbumped change would refuse to reuse or resume every run recorded before it.
# tests/test_model_fingerprint.py pins the hashes of two small models to catch that.
_VERSION = 1
_TOTAL = "trainable parameters"
_HASH = "sha256:"  # prefix of a hash inside a description (a diff says "differs", not the digits)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _tensor_hash(t: Tensor) -> str:
    """Shape, dtype and bytes (a dtype's own bytes: the dtype is part of the structure anyway)."""
    t = t.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return _HASH + _digest(f"{tuple(t.shape)}{t.dtype}".encode() + raw)


def _generic(module: nn.Module) -> dict:
    """Any module: class, extra_repr, own parameters and buffers, children (recursively)."""
    d: dict = {"type": f"{type(module).__module__}.{type(module).__qualname__}"}
    extra = module.extra_repr()
    if extra:
        d["repr"] = extra
    for name, p in module.named_parameters(recurse=False):
        d[f"parameter {name}"] = {"shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", ""),
                                  "trainable": bool(p.requires_grad)}
    for name, b in module.named_buffers(recurse=False):
        entry = {"shape": list(b.shape), "dtype": str(b.dtype).replace("torch.", "")}
        if b.dtype == torch.bool:  # a mask: its values are structure
            entry["values"] = _tensor_hash(b)
        d[f"buffer {name}"] = entry
    for name, child in module.named_children():
        d[f"module {name}"] = describe_model(child)
    return d


def _linear(blk: nn.Module) -> dict:
    """A linear block (dense LinearBlock or tiled view): the same entry whichever store holds it."""
    mask = blk.trainable_mask()
    d = {"kind": "linear", "shape": [blk.out_features, blk.in_features],
         "trainable entries": int(mask.count_nonzero()), "mask": _tensor_hash(mask)}
    frozen = blk.frozen
    if frozen is not None:
        d["frozen"] = _tensor_hash(frozen)
    if blk.bias is not None:
        d["bias"] = list(blk.bias.shape)
    return d


def _sequential2d(m: nn.Module) -> dict:
    from ..activations import activation_name

    ref = m._param_ref()
    d: dict = {"type": "Sequential2D", "sizes": list(m.sizes), "inputs": list(m.inputs),
               "outputs": list(m.outputs), "steps": m.steps,
               "dtype": str(ref.dtype).replace("torch.", "") if ref is not None else None,
               _TOTAL: int(m.num_parameters())}
    first_at: dict[int, int] = {}  # bias position -> first slot using it
    for i in range(m.n):
        act = m.acts[i]
        slot: dict = {"activation": activation_name(act) or _generic(act)}
        pos = m.slot_bias.pos.get(i)
        if pos is not None:
            slot["bias"] = True if pos not in first_at else f"shared with slot {first_at[pos]}"
            first_at.setdefault(pos, i)
        d[f"slot {i}"] = slot
    if m.slot_bias.bias is not None:
        d["slot biases trainable"] = bool(m.slot_bias.bias.requires_grad)
    tied: dict[int, str] = {}
    for i, j, kind, blk in m.positions():
        name = f"F[{i}][{j}]"
        if kind == "identity":
            entry: dict | str = {"kind": "identity"}
        elif id(blk) in tied:
            entry = {"kind": "tied", "to": tied[id(blk)]}
        elif kind == "linear":
            entry = _linear(blk)
        else:
            entry = {"kind": "module", **describe_model(blk)}
        tied.setdefault(id(blk), name)
        d[f"block {name}"] = entry
    return d


def describe_model(model: nn.Module) -> dict:
    """The structure of ``model`` (see the module docstring): a JSON-able dict whose keys read as
    a diff's words (``"slot 2"``, ``"block F[1][0]"``, ``"module rnn"``)."""
    from ..core import Sequential2D

    return _sequential2d(model) if isinstance(model, Sequential2D) else _generic(model)


@torch.no_grad()
def _init_hash(model: nn.Module) -> str:
    """sha256 of every parameter and buffer, a Sequential2D's stored blocks as their
    effective weights (store-independent)."""
    from ..core import Sequential2D

    items: list[tuple[str, Tensor]] = []
    in_store: set[int] = set()
    for prefix, m in model.named_modules():
        if isinstance(m, Sequential2D) and m.store is not None:
            in_store.update(id(t) for t in (*m.store.parameters(), *m.store.buffers()))
            seen: set[int] = set()
            for i, j, kind, blk in m.positions():
                if kind == "linear" and id(blk) not in seen:
                    seen.add(id(blk))
                    items.append((f"{prefix}.F[{i}][{j}]", blk.effective_weight()))
    items += [(k, v) for k, v in model.state_dict(keep_vars=True).items() if id(v) not in in_store]
    h = hashlib.sha256()
    for name, t in sorted(items, key=lambda kv: kv[0]):
        h.update(name.encode() + b"\0" + _tensor_hash(t).encode())
    return h.hexdigest()[:16]


def model_fingerprint(model: nn.Module, *, init: bool = True) -> dict:
    """What ``model`` computes and where it starts (see the module docstring): ``structure``,
    ``structure_hash`` and ``init`` (the hash of its current values, which a Trainer takes when
    it is constructed, before any step; None when ``init`` is False)."""
    structure = describe_model(model)
    text = json.dumps(structure, sort_keys=True, separators=(",", ":"), default=repr)
    return {"version": _VERSION, "structure": structure, "structure_hash": _digest(text.encode()),
            "init": _init_hash(model) if init else None}


def _short(v) -> str:
    if isinstance(v, dict):
        kind = v.get("kind") or v.get("type")
        return str(kind) if kind else "present"
    return repr(v)


def _diff(a, b, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        if "shape" in a and "shape" in b and a["shape"] != b["shape"]:  # the rest of the entry follows from it
            out.append(f"{path} shape {a['shape']!r} -> {b['shape']!r}")
            return
        for k in dict.fromkeys([*a, *b]):
            where = f"{path} {k}".strip()
            if k not in a:
                out.append(f"{where}: absent -> {_short(b[k])}")
            elif k not in b:
                out.append(f"{where}: {_short(a[k])} -> absent")
            else:
                _diff(a[k], b[k], where, out)
    elif a != b:
        if isinstance(a, str) and isinstance(b, str) and a.startswith(_HASH) and b.startswith(_HASH):
            out.append(f"{path} differs")
        elif isinstance(a, dict) or isinstance(b, dict):
            out.append(f"{path}: {_short(a)} -> {_short(b)}")
        else:
            out.append(f"{path} {a!r} -> {b!r}")


def fingerprint_diff(old: Mapping | None, new: Mapping | None, *, init: bool) -> list[str]:
    """What differs between a recorded fingerprint ``old`` and ``new``, one phrase each
    (``"slot 2 activation 'tanh' -> 'relu'"``, ``"block F[2][0]: linear -> absent"``,
    ``"initial values differ"``); empty when they agree or ``old`` is not a fingerprint
    (a run recorded before fingerprints: nothing to compare). ``init``: compare the initial
    values too, when both are known."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping) or not isinstance(old.get("structure"), Mapping) \
            or old.get("version") != new.get("version"):  # another description: not comparable, the config rule alone
        return []
    out: list[str] = []
    if old.get("structure_hash") != new.get("structure_hash"):
        _diff(old["structure"], new["structure"], "", out)
        total = [d for d in out if d.startswith(_TOTAL)]
        out = [d for d in out if not d.startswith(_TOTAL)] + total  # the total (a consequence) last
        if not out:  # a hand-edited record: the hash is what counts
            out.append("the structure hash differs")
    if init and not out and old.get("init") and new.get("init") and old["init"] != new["init"]:
        out.append("the initial parameter values differ (another draw: build the model under the same "
                   "torch.manual_seed, or the same model_seed, to reproduce the run)")
    return out


def format_model_diff(diff: list[str], limit: int = 6) -> str:
    """``"slot 2 activation 'tanh' -> 'relu'; block F[2][0]: linear -> absent"`` (at most ``limit``)."""
    more = f"; and {len(diff) - limit} more" if len(diff) > limit else ""
    return "; ".join(diff[:limit]) + more


def check_same_model(recorded: Mapping | None, current: Mapping, *, reuse: bool, where: str) -> None:
    """:class:`ModelChangedError` unless ``recorded`` (the fingerprint a run recorded; None for a
    run recorded before fingerprints) fits ``current``: the same structure, and when ``reuse``
    (handing back a complete run in the folder ``where``) the same initial values; else
    (resuming the checkpoint ``where``) the structure alone. Its message names what differs and
    what to do, in the caller's terms (:func:`~seq2d.train.errors.spell`)."""
    from .errors import spell

    diff = fingerprint_diff(recorded, current, init=reuse)
    if not diff:
        return
    if reuse:
        raise ModelChangedError(
            f"the model differs from the one the complete run in {where!r} trained: {format_model_diff(diff)}; "
            + spell("use another out_dir (or name) for this model, or overwrite=True to train it there",
                    "use another --out-dir/--name for this model, or --overwrite to train it there"))
    raise ModelChangedError(
        f"cannot resume {where}: the model differs from the one it trained: {format_model_diff(diff)}; resume "
        "with the model that run was built with, or train this one "
        + spell("in another out_dir (or name), or with overwrite=True", "in another --out-dir/--name, or with --overwrite"))



def adopt_fingerprint(recorded: Mapping | None, current: Mapping) -> dict:
    """The fingerprint a resumed run goes on recording: the checkpoint's ``recorded`` one (its
    initial values, not those of the model object that was loaded into), else ``current`` with
    its initial values unknown (a run recorded before fingerprints: where it started is lost)."""
    if isinstance(recorded, Mapping) and recorded.get("version") == current.get("version"):
        return dict(recorded)
    return {**current, "init": None}


def config_model_diff(cfg) -> list[str]:
    """What differs between the model the run in ``cfg.out_dir`` trained (its ``run.json``
    fingerprint) and the one ``cfg`` builds now (:func:`~seq2d.train.build_model`), initial values
    included; empty when they agree or the run recorded no fingerprint (the config rule alone).
    Builds the model only when there is a fingerprint to compare (``seq2d mnist``'s reuse)."""
    from .builder import build_model
    from .rundir import read_record

    recorded = (read_record(cfg.out_dir) or {}).get(FINGERPRINT_KEY)
    if not isinstance(recorded, Mapping):
        return []
    return fingerprint_diff(recorded, model_fingerprint(build_model(cfg)), init=True)
