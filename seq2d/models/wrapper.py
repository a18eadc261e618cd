"""The base of the models that are one :class:`~seq2d.Sequential2D` behind torch's interface."""

from __future__ import annotations

from torch import nn

from ..core import Sequential2D

__all__ = ["CoreModel"]


class CoreModel(nn.Module):
    """A model whose whole computation is ``self.core``, one :class:`~seq2d.Sequential2D`
    (:class:`~seq2d.RNN`, :class:`~seq2d.TruncatedRNN`, the transformer layer and encoder):
    what the core knows about itself is asked of the core, here, once."""

    core: Sequential2D

    def num_parameters(self) -> int:
        """The core's trainable entries (:meth:`~seq2d.Sequential2D.num_parameters`)."""
        return self.core.num_parameters()

    @property
    def store_kind(self) -> str | None:
        """The core's :attr:`~seq2d.Sequential2D.store_kind` ('dense' or 'tiled')."""
        return self.core.store_kind
