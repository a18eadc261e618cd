"""``AttentionCore``: multi-head self-attention as a block type (a :class:`~seq2d.ContextModule`
that reads the attention masks from the call-time context). The transformer models of
:mod:`seq2d.models.transformer` place it between their ``qkv`` and ``attn`` slots."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import InvalidInput, InvalidType, InvalidValue
from .blocks import ContextModule

__all__ = ["AttentionCore", "SequenceFirstDropout", "check_dropout"]


def _check_heads(d_model, nhead, what: str) -> None:
    for name, v in (("d_model", d_model), ("nhead", nhead)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidType(f"{what}: {name} must be a positive int, got {type(v).__name__} {v!r}")
        if v <= 0:
            raise InvalidValue(f"{what}: {name} must be a positive int, got {v}")
    if d_model % nhead != 0:
        raise InvalidValue(f"{what}: d_model ({d_model}) must be divisible by nhead ({nhead})")


def check_dropout(p, what: str) -> float:
    """A dropout probability: a number in [0, 1], as ``nn.Dropout`` takes (typed errors naming ``what``)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise InvalidType(f"{what}: dropout must be a number in [0, 1], got {type(p).__name__} {p!r}")
    if not 0 <= p <= 1:
        raise InvalidValue(f"{what}: dropout must be a probability in [0, 1], got {p!r}")
    return float(p)


def _additive_mask(mask, name: str, dtype: torch.dtype) -> Tensor:
    """A float mask added to the scores: bool True (= not allowed) -> -inf, float as is."""
    if not isinstance(mask, Tensor):
        raise InvalidType(f"{name} must be a torch.Tensor (bool or floating point), got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        # nn.Transformer convention: True = NOT allowed (SDPA's bool convention is the opposite).
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    if mask.is_floating_point():
        return mask.to(dtype)
    raise InvalidType(f"{name} must have dtype torch.bool or a floating-point dtype, got {mask.dtype}")


class AttentionCore(ContextModule):
    r"""Multi-head scaled dot-product attention without parameters, as a module block.

    Input: one slot holding ``[q | k | v]`` concatenated, ``(*batch, T, 3 * d_model)``
    (batch first, as the output of ``MultiheadAttention``'s packed in-projection).
    Output: ``(*batch, T, d_model)``, the heads concatenated::

        q, k, v = x.split(d_model, -1)                    # each (*batch, T, d_model)
        head_h = softmax(q_h k_h^T / sqrt(d_head) + mask) v_h   # d_head = d_model / nhead
        out = cat(head_0, ..., head_{nhead-1}, -1)

    Context keywords (``context_keys``; from ``Sequential2D.forward(..., **context)``, which
    passes this block these keys only and refuses keys no block of the model declares):

    * ``src_mask`` (alias ``mask``): ``(T, T)`` or ``(B * nhead, T, T)`` with
      ``B = prod(batch)``; bool (True = NOT allowed, the ``nn.Transformer`` convention)
      or float (added to the scores).
    * ``src_key_padding_mask``: ``(*batch, T)``; bool (True = padding, ignored as a key)
      or float (added).
    * ``is_causal``: when True and no ``src_mask`` is given, a causal mask is used. When a
      mask is given it is used as is (``is_causal`` is then only a hint, as in torch).

    A query whose keys are all masked gets whatever ``scaled_dot_product_attention`` gives
    (zeros with torch 2.5+), exactly as in ``nn.MultiheadAttention``, which calls it too.

    ``dropout``: the probability of zeroing an attention weight in training mode (after the
    softmax), passed to ``scaled_dot_product_attention`` as ``nn.MultiheadAttention`` passes
    it, so the same RNG state draws the same weights; none in eval mode.
    """

    context_keys = ("src_mask", "mask", "src_key_padding_mask", "is_causal")

    def __init__(self, d_model: int, nhead: int, dropout: float = 0.0) -> None:
        super().__init__()
        _check_heads(d_model, nhead, "AttentionCore")
        self.dropout = check_dropout(dropout, "AttentionCore")
        self.d_model = d_model
        self.nhead = nhead
        self.head_dim = d_model // nhead
        self.in_features = 3 * d_model
        self.out_features = d_model

    def forward(
        self,
        x: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = False,
        mask: Tensor | None = None,
        **unexpected,
    ) -> Tensor:
        if unexpected:
            bad = ", ".join(repr(k) for k in unexpected)
            raise InvalidType(f"AttentionCore.forward() got an unexpected keyword argument {bad}; it takes the context "
                              f"keys {list(self.context_keys)}")
        if x.dim() < 2 or x.shape[-1] != self.in_features:
            raise InvalidInput(
                f"AttentionCore expects input of shape (*batch, T, {self.in_features}) "
                f"(q, k, v of d_model={self.d_model} concatenated), got {tuple(x.shape)}"
            )
        if src_mask is not None and mask is not None:
            raise InvalidValue("AttentionCore: give the attention mask as src_mask or as mask, not both")
        attn_mask = src_mask if src_mask is not None else mask
        batch, T = x.shape[:-2], x.shape[-2]
        B = math.prod(batch)
        h, dh = self.nhead, self.head_dim
        # (B, T, 3, h, dh) -> (3, B, h, T, dh): [q | k | v], each split into heads, as torch does
        q, k, v = x.reshape(B, T, 3, h, dh).permute(2, 0, 3, 1, 4).unbind(0)

        bias = None  # additive, broadcastable to (B, h, T, T)
        if attn_mask is not None:
            bias = _additive_mask(attn_mask, "src_mask", x.dtype)
            if bias.shape == (T, T):
                bias = bias.view(1, 1, T, T)
            elif bias.shape == (B * h, T, T):
                bias = bias.view(B, h, T, T)
            else:
                raise InvalidInput(
                    f"src_mask must have shape ({T}, {T}) or (batch * nhead, T, T) = ({B * h}, {T}, {T}), "
                    f"got {tuple(attn_mask.shape)}"
                )
        causal = bool(is_causal) and attn_mask is None
        if src_key_padding_mask is not None:
            kpm = _additive_mask(src_key_padding_mask, "src_key_padding_mask", x.dtype)
            if kpm.shape != x.shape[:-1]:
                raise InvalidInput(
                    f"src_key_padding_mask must have shape (*batch, T) = {tuple(x.shape[:-1])}, "
                    f"got {tuple(src_key_padding_mask.shape)}"
                )
            kpm = kpm.reshape(B, 1, 1, T)
            if causal:  # SDPA takes a mask or is_causal, not both: build the causal mask
                bias = torch.full((T, T), float("-inf"), dtype=x.dtype, device=x.device).triu_(1).view(1, 1, T, T)
                causal = False
            bias = kpm if bias is None else bias + kpm
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p, is_causal=causal)  # (B, h, T, dh)
        return out.transpose(1, 2).reshape(*batch, T, self.d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, nhead={self.nhead}" + (f", dropout={self.dropout}" if self.dropout else "")


class SequenceFirstDropout(nn.Dropout):
    """``nn.Dropout`` drawn in the memory layout of ``nn.MultiheadAttention``'s batch-first
    output: a ``(B, T, d)`` tensor laid out as ``(T, B, d)``. torch's CPU dropout draws its
    mask in memory order, so this is what makes ``dropout1`` of a converted layer draw torch's
    mask (same values, a view of the same layout)."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0 or x.dim() < 3:
            return super().forward(x)  # (T, d): torch's layout is (T, 1, d), i.e. the same order
        shape = x.shape
        t = x.reshape(-1, shape[-2], shape[-1]).transpose(0, 1).contiguous()  # (T, B, d) in memory
        return F.dropout(t, self.p, True, self.inplace).transpose(0, 1).reshape(shape)
