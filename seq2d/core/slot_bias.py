"""Every slot bias of a Sequential2D in one vector (``model.slot_bias``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..store_view import StoreView

__all__ = ["SlotBias"]


class SlotBias(nn.Module):
    """Every slot bias of a model in one vector ``bias`` (slots that share one Parameter share
    one range). ``view(i)`` is slot ``i``'s bias, a writable view."""

    def __init__(self, sizes: Sequence[int], given: dict[int, Tensor], fresh: set[int], *, device=None, dtype=None):
        super().__init__()
        self.sizes = tuple(sizes)
        self.pos: dict[int, int] = {}
        owners: dict[int, int] = {}  # id(tensor) -> offset (shared Parameters)
        chunks = []
        total = 0
        for i in sorted(given):
            t = given[i]
            if i not in fresh and id(t) in owners:
                self.pos[i] = owners[id(t)]
                continue
            self.pos[i] = total
            if i not in fresh:
                owners[id(t)] = total
            chunks.append(t.detach())
            total += self.sizes[i]
        self.shared = len(set(self.pos.values())) < len(self.pos)
        if chunks:
            data = torch.cat([c.reshape(-1).to(device=device or chunks[0].device, dtype=dtype or chunks[0].dtype)
                              for c in chunks])
            req = all(given[i].requires_grad for i in given if i not in fresh and isinstance(given[i], nn.Parameter))
            self.bias = nn.Parameter(data.clone(), requires_grad=req)
        else:
            self.register_parameter("bias", None)

    def view(self, i: int) -> Tensor | None:
        if i not in self.pos:
            return None
        o = self.pos[i]
        return self.bias[o:o + self.sizes[i]]

    def handle(self, i: int) -> StoreView | None:
        """``view(i)`` whose ``.grad`` is :meth:`grad` ``(i)`` (what ``model.bias(i)`` returns)."""
        return StoreView.of(self.view(i))

    def grad(self, i: int) -> Tensor | None:
        """Slot ``i``'s range of the bias vector's gradient (None: no bias, or no gradient yet)."""
        g = None if i not in self.pos or self.bias is None else self.bias.grad
        return None if g is None else g[self.pos[i]:self.pos[i] + self.sizes[i]]

    def __len__(self) -> int:
        return len(self.pos)

    def num_trainable(self) -> int:
        return 0 if self.bias is None or not self.bias.requires_grad else self.bias.numel()

    def extra_repr(self) -> str:
        return f"slots={sorted(self.pos)}, size={0 if self.bias is None else self.bias.numel()}"
