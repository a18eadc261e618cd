"""The optimizer a :class:`~seq2d.train.TrainConfig` names (``optimizer``, ``lr``,
``weight_decay``, ``optimizer_impl``), over the model's trainable parameters."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import InvalidValue
from .config import TrainConfig

__all__ = ["make_optimizer"]


def make_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum 0.9, on the parameters of ``model`` that require grad."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise InvalidValue("the model has no trainable parameters")
    if cfg.optimizer == "adam":
        def make(**impl):
            return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **impl)
    else:
        def make(**impl):
            return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay, **impl)
    # optimizer_impl: torch's fused kernel where it has one for these devices and dtypes (it
    # refuses the others when constructed), else foreach; "loop" is torch's CPU default
    if cfg.optimizer_impl == "fused":
        try:
            return make(fused=True)
        except RuntimeError:
            return make(foreach=True)
    return make(foreach=cfg.optimizer_impl == "foreach")
