"""The base of the models that are one :class:`~seq2d.Sequential2D` behind torch's interface."""

from __future__ import annotations

from torch import nn

from ..core import Sequential2D

__all__ = ["CoreModel"]


class CoreModel(nn.Module):
    """A model whose whole computation is ``self.core``, one :class:`~seq2d.Sequential2D`
    (:class:`~seq2d.RNN`, :class:`~seq2d.TruncatedRNN`, the transformer layer and encoder):
    what the core knows about itself is asked of the core, here, once.

    The Sequential2D methods a user calls on a model are here too, so a wrapper answers them
    like a Sequential2D does: :meth:`num_parameters`, :meth:`summary`, :meth:`grid`,
    :meth:`to_blocksparse` and :attr:`store` (anything else: ``model.core``)."""

    core: Sequential2D

    def num_parameters(self) -> int:
        """The core's trainable entries (:meth:`~seq2d.Sequential2D.num_parameters`).

        For a model converted from torch this is torch's count except for ``nn.RNN``: its two
        biases ``bias_ih + bias_hh`` are one slot bias here (they only ever act as their sum),
        so a converted ``nn.RNN`` counts ``num_layers * hidden_size`` entries fewer than
        ``sum(p.numel() for p in rnn.parameters())`` (``nn.RNN(16, 32)``: 1,568 against 1,600).
        A transformer layer or encoder counts exactly torch's number."""
        return self.core.num_parameters()

    @property
    def store(self):
        """The core's parameter store (``model.store.kind``: 'dense' or 'tiled'; None without
        linear blocks)."""
        return self.core.store

    def grid(self) -> str:
        """The core's block grid as text (:meth:`~seq2d.Sequential2D.grid`)."""
        return self.core.grid()

    def summary(self) -> str:
        """One line naming this model, then the core's :meth:`~seq2d.Sequential2D.summary`."""
        return f"{type(self).__name__}({self.extra_repr()}), computed by one Sequential2D (.core):\n" + self.core.summary()

    def to_blocksparse(self, tile: int = 64, kernel: str = "auto") -> "CoreModel":
        """The core's :meth:`~seq2d.Sequential2D.to_blocksparse` (in place); returns this model,
        called as before. The blocks become tile views of one block-sparse matrix, so the
        ``weight`` read through a block (``layer_blocks``, ``torch_named_parameters``) is then
        a view of the tiles, not a Parameter."""
        self.core.to_blocksparse(tile, kernel=kernel)
        return self
