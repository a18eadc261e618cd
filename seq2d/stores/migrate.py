"""Loading what earlier versions saved: checkpoints from before the parameter store
(``blocks.i_j.weight``/``mask``/``frozen`` per block, ``biases.i`` per slot), a masked box saved
densely, before the compact layout (:mod:`.compact`; a model's own ``load_state_dict`` converts
it, :func:`compact_state_dict` and :func:`compact_optimizer_state` convert a checkpoint before it
is checked against the model), and the renamed state-dict keys of :data:`seq2d.renames.OLD_NAMES`
(the one table of old spellings; a config's or spec's old ``store`` value is read by
:func:`seq2d.renames.migrate_store_value`)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..errors import InvalidInput, InvalidValue
from ..blocks import LinearBlock
from .compact import compact_boxes, compact_index, old_boxes, take
from .dense import DenseStore
from ..renames import OLD_NAMES

__all__ = ["migrate_state_dict", "compact_state_dict", "compact_optimizer_state"]


@torch.no_grad()
def migrate_state_dict(model, state_dict: dict, prefix: str) -> None:
    """Load checkpoints written before the parameter store (per-block ``blocks.i_j.weight``/
    ``mask``/``frozen``, per-slot ``biases.i``) through the handles, replaced by the store's keys,
    and the old key prefixes of ``OLD_NAMES["state_dict"]`` under today's."""
    old_blocks = {k for k in state_dict if k.startswith(prefix + "blocks.")
                  and k.rsplit(".", 1)[-1] in ("weight", "mask", "frozen")}
    seen_handles = set()
    for name in ("mask", "frozen", "weight"):  # a new mask zeroes weights: weights last
        for k in sorted(old_blocks):
            pos, what = k[len(prefix) + len("blocks."):].rsplit(".", 1)
            blk = model.blocks[pos] if pos in model.blocks else None
            if what != name or not isinstance(blk, LinearBlock) or blk.store is not model.store:
                continue
            v = state_dict.pop(k)
            if v is not None and tuple(v.shape) != blk.shape:
                raise InvalidInput(f"checkpoint key {k}: expected shape {blk.shape} (F[{pos.replace('_', '][')}]), "
                                   f"got {tuple(v.shape)}")
            setattr(blk, name, v)
            if name == "weight":
                seen_handles.add(id(blk))
    handles = {id(b) for _, _, k, b in model.positions() if isinstance(b, LinearBlock) and b.store is model.store}
    if seen_handles and seen_handles == handles:
        for k, v in model.store.state_dict().items():
            state_dict.setdefault(prefix + "store." + k, v)
    old_bias = [k for k in state_dict if k.startswith(prefix + "biases.")]
    if old_bias:
        for k in old_bias:
            i = int(k[len(prefix) + len("biases."):])
            v = state_dict.pop(k)
            if model.bias(i) is None or tuple(v.shape) != (model.sizes[i],):
                raise InvalidInput(f"checkpoint key {k}: slot {i} has "
                                   f"{'no bias' if model.bias(i) is None else f'a bias of shape ({model.sizes[i]},)'}, got {tuple(v.shape)}")
            model.bias(i).copy_(v)
        if len(old_bias) == len(model.slot_bias):
            state_dict.setdefault(prefix + "slot_bias.bias", model.slot_bias.bias.detach().clone())
    for old, new in OLD_NAMES["state_dict"].items():
        for k in [k for k in state_dict if k.startswith(prefix + old)]:
            state_dict[prefix + new + k[len(prefix) + len(old):]] = state_dict.pop(k)


def _stores(model: nn.Module):
    for prefix, m in model.named_modules():
        if isinstance(m, DenseStore):  # state dict prefixes
            yield (prefix + "." if prefix else ""), m


def compact_state_dict(model: nn.Module, state: dict) -> dict:
    """:func:`compact_boxes` for every dense store in ``model`` (a model state dict ``state``)."""
    return compact_boxes(_stores(model), state)


def compact_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, model_state: Mapping,
                            opt_state: Mapping) -> Mapping:
    """An optimizer state dict ``opt_state`` saved beside the model state ``model_state`` (before
    :func:`compact_state_dict` converts it) with every per-parameter tensor of a box's dense shape
    reduced to the entries the saved mask trains (Adam's moments, SGD's momentum). Parameters are
    matched by position, as ``optimizer.load_state_dict`` matches them. Changes ``opt_state`` in place."""
    old = {id(W): m for _, _, W, m in old_boxes(_stores(model), model_state)}
    if not old or not isinstance(opt_state, Mapping) or "state" not in opt_state:
        return opt_state
    ours = [p for g in optimizer.param_groups for p in g["params"]]
    saved = [pid for g in opt_state.get("param_groups", ()) for pid in g.get("params", ())]
    for p, pid in zip(ours, saved):
        m = old.get(id(p))
        st = opt_state["state"].get(pid)
        if m is None or not isinstance(st, dict):
            continue
        for name, t in st.items():
            if isinstance(t, Tensor) and tuple(t.shape) == tuple(m.shape):
                st[name] = take(t, compact_index(m.to(t.device)))
    return opt_state
