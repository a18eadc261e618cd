"""Loading checkpoints written before the parameter store (``blocks.i_j.weight``/``mask``/
``frozen`` per block, ``biases.i`` per slot, ``engine.*`` for the tiled engine)."""

from __future__ import annotations

import torch

from ..errors import InvalidInput
from ..blocks import LinearBlock

__all__ = ["migrate_state_dict"]


@torch.no_grad()
def migrate_state_dict(model, state_dict: dict, prefix: str) -> None:
    """Load checkpoints written before the parameter store (per-block ``blocks.i_j.weight``/
    ``mask``/``frozen``, per-slot ``biases.i``, ``engine.*``): their values are written
    through the handles and replaced by the store's keys."""
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
    for k in [k for k in state_dict if k.startswith(prefix + "engine.")]:
        state_dict[prefix + "store.matrix." + k[len(prefix) + len("engine."):]] = state_dict.pop(k)
