"""The kinds of block that can sit at a grid position F[i][j] of a Sequential2D.

- absent: ``None`` (the block is zero and never evaluated);
- :class:`Identity`: ``F[i][j](x) = x`` (slot sizes must match);
- :class:`LinearBlock`: ``F[i][j](x) = x @ W.T`` with
  ``W = frozen + weight * mask`` (masked entries are exactly zero and receive no
  gradient; frozen entries take part in the product but are not trainable);
- any other ``nn.Module`` mapping ``(*batch, s_j)`` to ``(*batch, s_i)``.
  A module that needs call-time context (an attention mask, say) derives from
  :class:`ContextModule` and receives the keyword arguments given to
  ``Sequential2D.forward``.

Biases are not part of a block: they belong to the output slot (one per slot).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Identity", "LinearLike", "LinearBlock", "ContextModule"]


class Identity(nn.Module):
    """The identity block: copies slot j into the sum of slot i (sizes must match)."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class ContextModule(nn.Module):
    """Base for module blocks that take call-time keyword context (masks, ...)."""

    def forward(self, x: Tensor, **context) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


def _check_matrix(name: str, value, shape: tuple[int, int], what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{what}: {name} must be a torch.Tensor of shape {shape}, got {type(value).__name__}")
    if tuple(value.shape) != shape:
        raise ValueError(f"{what}: {name} must have shape {shape} (out_features, in_features), got {tuple(value.shape)}")
    return value


class LinearLike(nn.Module):
    """Base of linear blocks: ``in_features``, ``out_features``, ``effective_weight()``,
    ``trainable_mask()``, ``num_trainable()``, ``mask``/``frozen`` (None when absent).
    :class:`LinearBlock` owns a dense weight; ``seq2d.sparse.TiledBlock`` is a view of tiles
    stored in a block-sparse engine."""


class LinearBlock(LinearLike):
    r"""A linear block ``x -> x @ W.T`` from a slot of ``in_features`` to one of ``out_features``.

    ``W = frozen + weight * mask`` where

    - ``weight`` (out_features, in_features) is the trainable parameter; entries where
      ``mask`` is False are kept at exactly zero;
    - ``mask`` (bool, same shape, optional) marks the trainable entries. ``None`` means all;
    - ``frozen`` (same shape, optional) holds fixed values at non-trainable entries (as
      the authors' ``MaskedLinear`` does). It must be zero wherever ``mask`` is True.

    The same ``LinearBlock`` object may sit at several grid positions (weight tying):
    its gradient then accumulates over the positions and it is counted once.

    Args:
        in_features: size of the input slot.
        out_features: size of the output slot.
        mask: optional bool tensor (out_features, in_features) of trainable entries.
        frozen: optional tensor (out_features, in_features) of fixed values.
        device, dtype: as for ``nn.Linear``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        mask: Tensor | None = None,
        frozen: Tensor | None = None,
        *,
        device=None,
        dtype=None,
    ) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"LinearBlock: {name} must be a positive int, got {v!r}")
        self.in_features = in_features
        self.out_features = out_features
        shape = (out_features, in_features)
        what = f"LinearBlock({in_features}, {out_features})"
        if mask is not None:
            _check_matrix("mask", mask, shape, what)
            if mask.dtype != torch.bool:
                raise TypeError(f"{what}: mask must have dtype torch.bool, got {mask.dtype}")
            mask = mask.to(device=device).clone()  # own copy: later edits to the caller's tensor can't leak in
        if frozen is not None:
            _check_matrix("frozen", frozen, shape, what)
            if mask is None:
                raise ValueError(
                    f"{what}: frozen values need a mask saying which entries are trainable "
                    "(frozen entries are those where mask is False)"
                )
            frozen = frozen.to(**{k: v for k, v in factory_kwargs.items() if v is not None}).clone()
            if bool((frozen[mask] != 0).any()):
                raise ValueError(f"{what}: frozen must be zero wherever mask is True (those entries are trainable)")
        if mask is not None and bool(mask.all()):
            mask = frozen = None  # all trainable (frozen is then all zero): store nothing
        self.weight = nn.Parameter(torch.empty(shape, **factory_kwargs))
        self.register_buffer("mask", mask)
        self.register_buffer("frozen", None if frozen is None else frozen.to(self.weight.dtype))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """``nn.Linear``'s default init (U(-1/sqrt(in), 1/sqrt(in))), then masked entries zeroed."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=generator)
        self.apply_mask_()

    @torch.no_grad()
    def apply_mask_(self) -> None:
        """Zero the parameter at non-trainable entries (keeps the invariant after a manual edit)."""
        if self.mask is not None:
            self.weight.mul_(self.mask)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features)

    def effective_weight(self) -> Tensor:
        """``frozen + weight * mask`` as a dense (out_features, in_features) tensor."""
        w = self.weight
        if self.mask is not None:
            w = w * self.mask
        if self.frozen is not None:
            w = w + self.frozen
        return w

    def num_trainable(self) -> int:
        """Number of trainable entries (mask count; all entries without a mask)."""
        if not self.weight.requires_grad:
            return 0
        if self.mask is None:
            return self.weight.numel()
        return int(self.mask.sum())

    def num_stored(self) -> int:
        """Entries that take part in the product: trainable ones and non-zero frozen ones."""
        n = self.weight.numel() if self.mask is None else int(self.mask.sum())
        if self.frozen is not None:
            n += int((self.frozen != 0).sum())
        return n

    def trainable_mask(self) -> Tensor:
        if self.mask is None:
            return torch.ones(self.shape, dtype=torch.bool, device=self.weight.device)
        return self.mask

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.effective_weight())

    def extra_repr(self) -> str:
        s = f"in_features={self.in_features}, out_features={self.out_features}"
        if self.mask is not None:
            s += f", trainable={self.num_trainable()}/{self.weight.numel()}"
        if self.frozen is not None:
            s += ", frozen=True"
        return s
