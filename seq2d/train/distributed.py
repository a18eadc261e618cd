r"""Data-parallel training over several processes (torchrun + DistributedDataParallel).

Launch any run with ``torchrun``; a plain ``python`` run never touches torch.distributed::

    torchrun --standalone --nproc_per_node=2 -m seq2d.train --config run.toml --epochs 3

:func:`init_distributed` reads torchrun's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``) and starts the process group (nccl on CUDA, gloo on CPU); without it (or
with ``WORLD_SIZE=1``) it returns a single-process context and starts nothing.

How the trainer uses it (:mod:`seq2d.train.trainer`):

- every rank builds the same model from the same seed (DDP also broadcasts rank 0's
  parameters when wrapping) and derives the same epoch permutation from ``(seed, epoch)``;
- ``batch_size`` is the *global* batch: rank ``r`` of ``W`` takes the ``r``-th of ``W``
  near-equal slices of each batch, and its summed loss is scaled by ``W / batch`` so
  DDP's gradient average is exactly the mean over the global batch. The optimisation is
  then the single-process one, up to the order of floating-point sums;
- train loss/accuracy and the test-set evaluation (each rank a disjoint slice) are summed
  over ranks with all_reduce; only rank 0 writes config, metrics and checkpoints.

A run in one process never enters this module: :func:`seq2d.train.run` checks ``WORLD_SIZE`` once
and, below 2, trains in a :class:`~seq2d.train.trainer.OneProcess` (rank 0 of 1; the same methods as
:class:`DistContext`, each doing nothing); so does a :class:`~seq2d.train.Trainer` given no context
while no process group runs. The run's thread count and determinism are :func:`seq2d.train.loop.run_settings`.
"""

from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import InvalidValue
from .builder import resolve_device

__all__ = ["DistContext", "init_distributed", "cleanup", "wrap_model", "all_reduce_sum", "barrier",
           "unused_parameters"]


@dataclass
class DistContext:
    """Where this process stands: ``rank`` of ``world_size`` processes, its ``device``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None  # "gloo" / "nccl" when a process group is in use
    owns_group: bool = False  # True when init_distributed started the group (cleanup ends it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def current(cls, device: str | torch.device = "auto") -> "DistContext":
        """The context of an already started process group (started by the caller), else single."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            local = int(os.environ.get("LOCAL_RANK", 0))
            return cls(dist.get_rank(), dist.get_world_size(), local, resolve_device(device, local), dist.get_backend())
        return cls(device=resolve_device(device, 0))

    # the face the Trainer calls (trainer.OneProcess has the same, doing nothing)
    def barrier(self) -> None:
        barrier(self)

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        return all_reduce_sum(t, self)

    def wrap(self, model: nn.Module, example: torch.Tensor | None = None) -> nn.Module:
        return wrap_model(model, self, example)

    def close(self, *, sync: bool = True) -> None:
        cleanup(self, sync=sync)


def init_distributed(backend: str = "auto", device: str = "auto") -> DistContext:
    """Start the process group when run under torchrun with WORLD_SIZE > 1, else do nothing.

    ``backend="auto"`` picks nccl when this process runs on CUDA, gloo otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(device=resolve_device(device, 0))
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = resolve_device(device, local)
    if backend == "auto":
        backend = "nccl" if dev.type == "cuda" else "gloo"
    if backend not in ("gloo", "nccl"):
        raise InvalidValue(f"Unknown distributed backend {backend!r}. Select from 'auto', 'gloo', 'nccl'")
    if backend == "nccl" and dev.type != "cuda":
        raise InvalidValue("the nccl backend needs device='cuda' (or 'auto' on a GPU machine); use gloo on the CPU")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size(), local, dev, dist.get_backend(), owns_group=False)
    dist.init_process_group(backend=backend, **({"device_id": dev} if backend == "nccl" else {}))
    return DistContext(dist.get_rank(), dist.get_world_size(), local, dev, backend, owns_group=True)


def cleanup(ctx: DistContext | None = None, *, sync: bool = True) -> None:
    """End the process group if :func:`init_distributed` started it. ``sync=False`` skips the
    final barrier (when this rank failed alone, its peers may never reach it)."""
    if ctx is None or not ctx.owns_group:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        import gc

        gc.collect()  # drop DDP reducers still bound to the group before it goes
        if sync:
            dist.barrier()  # no rank tears down its connections while a peer still uses them
        dist.destroy_process_group()
    ctx.owns_group = False


def all_reduce_sum(t: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Sum ``t`` over ranks in place (a no-op in a single process); returns ``t``."""
    if ctx.distributed:
        import torch.distributed as dist

        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        import torch.distributed as dist

        dist.barrier()


def unused_parameters(model: nn.Module, example: torch.Tensor) -> list[str]:
    """Names of trainable parameters that get no gradient from ``model(example)``.

    DDP needs every trainable parameter to take part in each backward pass. In a
    Sequential2D a parameter can sit out when ``steps`` is below the depth (a slot the
    iteration never reaches) or in a block fed by a slot that stays None. Gradients are
    cleared again afterwards."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    saved = [p.grad for _, p in params]
    for _, p in params:
        p.grad = None
    try:
        out = model(example)
        if not out.requires_grad:  # the output does not depend on any parameter
            return [n for n, _ in params]
        (out.float().sum() * 0.0).backward()
        return [n for n, p in params if p.grad is None]
    finally:
        for (_, p), g in zip(params, saved):
            p.grad = g


def wrap_model(model: nn.Module, ctx: DistContext, example: torch.Tensor | None = None) -> nn.Module:
    """``model`` in DistributedDataParallel when ``ctx`` is distributed, else ``model`` itself.

    Parameters tied across grid positions appear once in ``model.parameters()``, so DDP
    reduces each once. Buffers (masks, frozen values) are constant, so they are not
    re-broadcast every forward (``forward_sync_buffers=False``; DDP still syncs them once at wrap time;
    a torch whose DDP lacks that keyword, before 2.13, gets ``broadcast_buffers=False``, which
    skips the wrap-time sync too, so rank 0's buffers are broadcast here first). When ``example`` shows
    parameters that get no gradient (see :func:`unused_parameters`), DDP is told to expect
    them (``find_unused_parameters=True``) and a warning names them."""
    if not ctx.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    unused = unused_parameters(model, example) if example is not None else []
    if unused and ctx.is_main:
        warnings.warn(
            f"{len(unused)} trainable parameters get no gradient from a forward pass ({', '.join(unused[:5])}"
            f"{', ...' if len(unused) > 5 else ''}); DDP will search for unused parameters every step (slower). "
            "Check the model's steps against its depth.",
            stacklevel=2,
        )
    device_ids = [ctx.device] if ctx.device.type == "cuda" else None
    if _accepts_keyword(DDP, "forward_sync_buffers"):
        buffers = {"forward_sync_buffers": False}
    else:  # torch < 2.13: broadcast_buffers=False also drops the sync at wrap time; do it here
        _broadcast_buffers(model)
        buffers = {"broadcast_buffers": False}
    return DDP(model, device_ids=device_ids, find_unused_parameters=bool(unused), **buffers)


def _accepts_keyword(cls, name: str) -> bool:
    """Whether ``cls.__init__`` names the keyword ``name`` (a ``**kwargs`` does not count: it may
    pass the keyword on to something that rejects it)."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - no introspectable signature
        return False
    return name in params


def _broadcast_buffers(model: nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s buffers to every rank (what DDP's wrap-time sync does)."""
    import torch.distributed as dist

    for buf in model.buffers():
        if buf.is_contiguous():
            dist.broadcast(buf.data, src=src)
        else:
            tmp = buf.data.contiguous()
            dist.broadcast(tmp, src=src)
            buf.data.copy_(tmp)
