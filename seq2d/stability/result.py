r"""What :func:`~seq2d.stability.data_lambda` returns: the numbers in a short repr, the tensors kept.

A :class:`DataLambda` is a ``dict`` (``result["max"]``, ``result["cores"]`` read as before) with
the same entries as attributes and a repr of one line per core::

    >>> seq2d.stability.data_lambda(seq2d.rnn(8, 16), xs)        # xs: (50, 4, 8)
    DataLambda(max=M, mean=m, q05/q50/q95=a/b/c, 1 core
      core [1]: max=M, mean=m, per_step (50 steps, 4 sequences))

(``M``, ``m``: the largest and the mean value, 4 decimals; ``a/b/c``: their 5, 50 and 95 %
quantiles over every step and sequence.)

Each core is a :class:`CoreLambda` (``slots`` or, for an ``nn.LSTM``, ``layer``; ``max``, ``mean``,
``per_step``, ``steps``): ``per_step`` is the float64 tensor ``(steps, B)`` of every measured
value; ``result.per_step`` is the one core's tensor of a one-core model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InvalidValue

__all__ = ["DataLambda", "CoreLambda"]


def _quantiles(t: Tensor) -> str:
    flat = t.detach().reshape(-1).to(torch.float64).cpu()
    if flat.numel() == 0:
        return "n/a"
    q = torch.quantile(flat, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64))
    return "/".join(f"{float(v):.4f}" for v in q)


class CoreLambda(dict):
    """One core's measurements (a dict: ``slots`` or ``layer``, ``max``, ``mean``, ``per_step``,
    ``steps``, and for an ``nn.LSTM`` ``max_inf``, ``mean_inf``, ``per_step_inf``), readable as
    attributes; the repr gives the numbers and the tensor's shape, not its values."""

    __slots__ = ()

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no entry {name!r}; it has {', '.join(self)}") from None

    def label(self) -> str:
        return f"core {list(self['slots'])}" if "slots" in self else f"layer {self.get('layer')}"

    def __repr__(self) -> str:
        per = self.get("per_step")
        shape = (f"per_step ({per.shape[0]} steps, {per.shape[1]} sequences)" if isinstance(per, Tensor) and per.dim() == 2
                 else "per_step n/a")
        extra = "".join(f", {k}={self[k]:.4f}" for k in ("max_inf", "mean_inf") if k in self)
        return f"{self.label()}: max={self['max']:.4f}, mean={self['mean']:.4f}{extra}, {shape}"


class DataLambda(dict):
    """The result of :func:`~seq2d.stability.data_lambda` (a dict: ``cores``, ``max``, ``mean``,
    and for an ``nn.LSTM`` ``max_inf``, ``mean_inf``, ``norm``), readable as attributes, with a
    short repr (module docstring)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self["cores"] = [c if isinstance(c, CoreLambda) else CoreLambda(c) for c in self.get("cores", [])]

    __getattr__ = CoreLambda.__getattr__

    @property
    def per_step(self) -> Tensor:
        """The ``(steps, B)`` tensor of a one-core model (with several cores: ``cores[c].per_step``)."""
        if len(self["cores"]) != 1:
            raise InvalidValue(f"per_step: this model has {len(self['cores'])} recurrent cores, each with its own steps; "
                               "read cores[c].per_step")
        return self["cores"][0]["per_step"]

    def __repr__(self) -> str:
        cores = self["cores"]
        if not cores:
            return f"DataLambda(max={self['max']:.4f}, mean={self['mean']:.4f}, no recurrent core)"
        per = [c["per_step"] for c in cores if isinstance(c.get("per_step"), Tensor)]
        q = _quantiles(torch.cat([p.reshape(-1) for p in per])) if per else "n/a"
        extra = "".join(f", {k}={self[k]:.4f}" for k in ("max_inf", "mean_inf") if k in self)
        head = (f"DataLambda(max={self['max']:.4f}, mean={self['mean']:.4f}{extra}, q05/q50/q95={q}, "
                f"{len(cores)} core{'s' if len(cores) != 1 else ''}")
        return head + "".join(f"\n  {c!r}" for c in cores) + ")"
