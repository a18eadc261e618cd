"""The kinds of block that can sit at a grid position F[i][j] of a Sequential2D.

- absent: ``None`` (the block is zero and never evaluated);
- :class:`Identity`: ``F[i][j](x) = x`` (slot sizes must match);
- :class:`LinearBlock`: ``F[i][j](x) = x @ W.T`` with
  ``W = frozen + weight * mask`` (masked-out weight entries are exactly zero and receive
  no gradient; frozen values take part in the product everywhere but are not trainable);
- any other ``nn.Module`` mapping ``(*batch, s_j)`` to ``(*batch, s_i)``.
  A module that needs call-time context (an attention mask, say) derives from
  :class:`ContextModule`, declares the keys it reads (``context_keys``) and receives those
  of the keyword arguments given to ``Sequential2D.forward``. Its output must have the
  shape ``(*batch, s_i)`` (:func:`check_block_output`, checked on every call).

Biases are not part of a block: they belong to the output slot (one per slot).
"""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import InvalidInput, InvalidType, InvalidValue, Seq2DError
from .store_view import StoreView

__all__ = ["Identity", "LinearLike", "LinearBlock", "ContextModule", "block_kind", "block_context",
           "call_block", "check_block_output", "check_device", "check_dtype", "expected_input_width"]


class Identity(nn.Module):
    """The identity block: copies slot j into the sum of slot i (sizes must match)."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class ContextModule(nn.Module):
    """Base for module blocks that take call-time keyword context (masks, ...).

    ``context_keys``: the names of the context keywords the block reads (a class attribute,
    e.g. ``("src_mask", "mask", "src_key_padding_mask", "is_causal")`` for
    :class:`~seq2d.attention.AttentionCore`). A Sequential2D accepts the union of its blocks'
    keys (nested Sequential2Ds included) and refuses any other keyword with
    :class:`~seq2d.errors.InvalidType`; the block is called with the given keys it declares
    only. ``None`` (a subclass that declares nothing) means *any key*: the block receives every
    keyword given to the model, and a model holding it accepts every keyword (no check, the
    behaviour before keys were declared)."""

    context_keys: tuple[str, ...] | None = None

    def forward(self, x: Tensor, **context) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError


def block_context(blk: ContextModule, context: dict) -> dict:
    """The keywords of ``context`` that the ContextModule ``blk`` declares (all when it declares
    none, see :class:`ContextModule`)."""
    keys = blk.context_keys
    if keys is None or not context:
        return context
    return {k: v for k, v in context.items() if k in keys}


def check_block_output(y, x: Tensor, size: int, i: int, j: int):
    """``y``, the output of block F[i][j] for the input ``x`` ``(*batch, s_j)``, must be a tensor
    of shape ``(*batch, size)``; anything else is refused (never broadcast) naming the block."""
    if not isinstance(y, Tensor):
        raise InvalidType(f"block F[{i}][{j}] must return a tensor of shape (*batch, {size}), got {type(y).__name__}")
    if y.shape[-1:] != (size,) or y.shape[:-1] != x.shape[:-1]:
        want = (*x.shape[:-1], size)
        raise InvalidInput(f"block F[{i}][{j}] must map (*batch, {x.shape[-1]}) to (*batch, {size}): for an input of "
                           f"shape {tuple(x.shape)} it should return {want}, got {tuple(y.shape)}")
    return y


def _elementwise(m: nn.Module) -> bool:
    """Width-preserving layers an ``nn.Sequential`` may start with (activations, dropout)."""
    return isinstance(m, (nn.Identity, nn.Dropout)) or (
        type(m).__module__ == "torch.nn.modules.activation" and not isinstance(m, nn.MultiheadAttention))


def expected_input_width(blk: nn.Module) -> int | None:
    """The input width a module block declares: its own ``in_features`` (or a LayerNorm's last
    normalized dim), else that of the first layer of an ``nn.Sequential`` after any leading
    activations; None when it declares none (only used to name the width in an error)."""
    fin = getattr(blk, "in_features", None)
    if isinstance(fin, int) and not isinstance(fin, bool):
        return fin
    shape = getattr(blk, "normalized_shape", None)
    if isinstance(shape, tuple) and shape:
        return int(shape[-1])
    if isinstance(blk, nn.Sequential):
        first = next((m for m in blk if not _elementwise(m)), None)
        return None if first is None else expected_input_width(first)
    return None


def call_block(blk: nn.Module, x: Tensor, size: int, i: int, j: int, context: dict | None = None) -> Tensor:
    """The module block F[i][j] on ``x`` ``(*batch, s_j)`` (a ContextModule gets its context
    keys), its output checked (:func:`check_block_output`). A module that fails on the slot's
    width while declaring another (``nn.Linear(5, 4)`` reading a 3-slot) is reported as an
    :class:`InvalidInput` naming the block and both widths; any other error from inside the
    module is re-raised as it is, with a note naming the block."""
    try:
        y = blk(x, **block_context(blk, context)) if isinstance(blk, ContextModule) and context else blk(x)
    except RuntimeError as e:
        if isinstance(e, Seq2DError):
            raise
        fin = expected_input_width(blk)
        if fin is not None and fin != x.shape[-1]:
            raise InvalidInput(f"block F[{i}][{j}] ({type(blk).__name__}) expects inputs of width {fin}, but slot {j} "
                               f"has width {x.shape[-1]} (input of shape {tuple(x.shape)})") from e
        e.add_note(f"(raised by block F[{i}][{j}], {type(blk).__name__}, on an input of shape {tuple(x.shape)})")
        raise
    return check_block_output(y, x, size, i, j)


def check_dtype(dtype, what: str):
    """``dtype`` (None or a floating-point ``torch.dtype``) or a typed error naming ``what``."""
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype):
        raise InvalidType(f"{what}: dtype must be a floating-point torch.dtype (e.g. torch.float32) or None, "
                          f"got {type(dtype).__name__} {dtype!r}")
    if not dtype.is_floating_point:
        raise InvalidType(f"{what}: dtype must be a floating-point torch.dtype (e.g. torch.float32), got {dtype}")
    return dtype


def draw_device(t: Tensor, generator: torch.Generator | None) -> torch.device:
    """Where to draw random values for ``t``: its own device, or the generator's when that
    differs (torch samples only with a generator on the tensor's device; draw there, then copy)."""
    if generator is None:
        return t.device
    g = torch.device(generator.device)
    same = g.type == t.device.type and (g.index is None or g.index == t.device.index)
    return t.device if same else g


def takes_generator(m: nn.Module) -> bool:
    """Whether ``m.reset_parameters`` accepts a ``generator`` (seq2d's blocks and tile matrices do)."""
    f = getattr(m, "reset_parameters", None)
    return f is not None and "generator" in inspect.signature(f).parameters


def no_cuda_error(what: str, device, instead: str) -> InvalidValue:
    """The one error for a CUDA device asked for on a machine without one (instead of torch's
    driver message): what was asked, that no CUDA device is available, and ``instead``."""
    return InvalidValue(f"{what}: device {str(device)!r} is not available: this machine has no CUDA device "
                        f"(torch.cuda.is_available() is False); use {instead}")


def check_device(device, what: str):
    """``device`` (None, a ``torch.device``, a device string or a CUDA index) or a typed error
    naming ``what``: an unknown device string, or a device this machine does not have."""
    if device is None:
        return None
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise InvalidType(f"{what}: device must be a torch.device, a device string (e.g. 'cpu', 'cuda:0') or None, "
                          f"got {type(device).__name__} {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise InvalidValue(f"{what}: device {device!r} is not a valid device (e.g. 'cpu', 'cuda', 'cuda:0', 'mps', "
                           "'meta')") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise no_cuda_error(what, device, "device='cpu' or device=None (the default: the CPU)")
        if dev.index is not None and dev.index >= count:
            raise InvalidValue(f"{what}: device {device!r} does not exist (this machine has {count} CUDA device(s))")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise InvalidValue(f"{what}: device {device!r} is not available (torch.backends.mps.is_available() is False)")
    return device


def _check_matrix(name: str, value, shape: tuple[int, int], what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise InvalidType(f"{what}: {name} must be a torch.Tensor of shape {shape}, got {type(value).__name__}")
    if tuple(value.shape) != shape:
        raise InvalidValue(f"{what}: {name} must have shape {shape} (out_features, in_features), got {tuple(value.shape)}")
    return value


class LinearLike(nn.Module):
    """Base of linear blocks: ``in_features``, ``out_features``, ``effective_weight()``,
    ``trainable_mask()``, ``num_trainable()``, ``mask``/``frozen`` (None when absent).
    :class:`LinearBlock` owns a dense weight; ``seq2d.stores.TiledBlock`` is a view of tiles
    stored in a block-sparse matrix. ``bias`` is the block's own bias (None when absent).
    ``store_kind``: the parameter store that holds a model's blocks of this class (the key of
    ``seq2d.stores.registry.STORE_CLASSES``)."""

    store_kind: str


class LinearBlock(LinearLike):
    r"""A linear block ``x -> x @ W.T`` from a slot of ``in_features`` to one of ``out_features``.

    ``W = frozen + weight * mask`` where

    - ``weight`` (out_features, in_features) is the trainable parameter; entries where
      ``mask`` is False are kept at exactly zero;
    - ``mask`` (bool, same shape, optional) marks the trainable entries. ``None`` means all;
    - ``frozen`` (same shape, optional) holds fixed, non-trainable values added to the
      product everywhere: at entries where ``mask`` is False they are the entry's value (as
      the authors' ``MaskedLinear`` does); where ``mask`` is True they are a fixed offset under
      the trainable entry (``W0 + U * M`` of iterativennsimple). Frozen values are buffers:
      ``num_trainable()``/``num_parameters()`` count trainable entries only.

    The same ``LinearBlock`` object may sit at several grid positions (weight tying):
    its gradient then accumulates over the positions and it is counted once.

    **Handle into a store.** A LinearBlock on its own owns its ``weight`` Parameter and
    its ``mask``/``frozen`` buffers. Once placed in a :class:`~seq2d.Sequential2D`, the
    model's parameter store (:mod:`seq2d.stores`) takes the values over and the block
    becomes a *handle*: ``weight``, ``mask``, ``frozen`` are views of the store's region
    (writes through them, ``blk.mask = m`` and in-place edits, are seen by the next
    forward), ``grad`` is the region of the store's gradient (so is ``weight.grad``:
    ``weight`` is a :class:`StoreView`), and the model's
    ``parameters()`` yield the store's tensors, not the block's.

    Args:
        in_features: size of the input slot.
        out_features: size of the output slot.
        mask: optional bool tensor (out_features, in_features) of trainable entries.
        frozen: optional tensor (out_features, in_features) of fixed values.
        bias: give the block its own bias (out_features,), as the authors' Linear blocks
            have: ``F[i][j](x_j) = x_j @ W.T + b_ij``, added to row ``i`` only when slot ``j``
            is present (not None). Default False: biases are per slot (``Sequential2D(bias=)``).
            Initialised as ``nn.Linear``'s bias; counted once, like the weight, when tied.
        device, dtype: as for ``nn.Linear``.
    """

    _HANDLE_ATTRS = ("weight", "mask", "frozen")
    store_kind = "dense"  # held by the DenseStore (seq2d/stores/registry.py)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        mask: Tensor | None = None,
        frozen: Tensor | None = None,
        *,
        bias: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        object.__setattr__(self, "_store", None)
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidValue(f"LinearBlock: {name} must be a positive int, got {v!r}")
        check_device(device, "LinearBlock")
        check_dtype(dtype, "LinearBlock")
        self.in_features = in_features
        self.out_features = out_features
        shape = (out_features, in_features)
        mask, frozen = self._checked(mask, frozen, device=device, dtype=dtype)
        self.register_parameter("weight", nn.Parameter(torch.empty(shape, **factory_kwargs)))
        self.register_buffer("mask", mask)
        self.register_buffer("frozen", None if frozen is None else frozen.to(self.weight.dtype))
        if not isinstance(bias, bool):
            raise InvalidType(f"LinearBlock: bias must be a bool, got {type(bias).__name__} {bias!r}")
        self.register_parameter("bias", nn.Parameter(torch.empty(out_features, **factory_kwargs)) if bias else None)
        self.reset_parameters()

    def _checked(self, mask, frozen, device=None, dtype=None):
        """Validate ``mask``/``frozen`` for this block's shape; returns own copies (or None)."""
        shape = (self.out_features, self.in_features)
        what = f"LinearBlock({self.in_features}, {self.out_features})"
        if mask is not None:
            _check_matrix("mask", mask, shape, what)
            if mask.dtype != torch.bool:
                raise InvalidType(f"{what}: mask must have dtype torch.bool, got {mask.dtype}")
            mask = mask.to(device=device).clone()  # own copy: later edits to the caller's tensor can't leak in
        if frozen is not None:
            _check_matrix("frozen", frozen, shape, what)
            if not frozen.is_floating_point():
                raise InvalidType(f"{what}: frozen must be a floating tensor, got {frozen.dtype}")
            frozen = frozen.to(**{k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None}).clone()
            if not bool((frozen != 0).any()):
                frozen = None  # an all-zero offset adds nothing: store nothing
        if mask is not None and bool(mask.all()):
            mask = None  # all trainable: no mask to store (a frozen offset stays)
        return mask, frozen

    # ------------------------------------------------------------------ handle plumbing
    @property
    def store(self):
        """The parameter store this block is a handle into, or None (it owns its tensors)."""
        return self.__dict__.get("_store")

    def _bind(self, store, key) -> None:
        """Become a handle into ``store`` at ``key`` (the store has copied the values)."""
        for name in self._HANDLE_ATTRS:
            self._parameters.pop(name, None)
            self._buffers.pop(name, None)
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_key", key)

    def _release(self) -> None:
        """Own the current values again (the store is going away, e.g. ``to_blocksparse``)."""
        store = self.store
        if store is None:
            return
        w, m, f = store.region(self._key, "weight"), self.mask, self.frozen
        w = w.detach().clone()
        req = store.region_requires_grad(self._key)
        object.__setattr__(self, "_store", None)
        self.register_parameter("weight", nn.Parameter(w, requires_grad=req))
        self.register_buffer("mask", None if m is None else m.clone())
        self.register_buffer("frozen", None if f is None else f.clone())

    def __getattr__(self, name):
        store = self.__dict__.get("_store")
        if store is not None and name in LinearBlock._HANDLE_ATTRS:
            key = self.__dict__["_key"]
            if name == "weight":  # .grad reads the store's gradient (as blk.grad does)
                return StoreView.of(store.region(key, name))
            return store.region(key, name)
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        store = self.__dict__.get("_store")
        if store is not None and name in LinearBlock._HANDLE_ATTRS:
            self._set_region(name, value)
            return
        super().__setattr__(name, value)

    @torch.no_grad()
    def _set_region(self, name: str, value) -> None:
        store, key = self.store, self._key
        if name == "weight":
            _check_matrix("weight", value, self.shape, f"LinearBlock({self.in_features}, {self.out_features})")
            store.region(key, "weight").copy_(value)
            self.apply_mask_()
            return
        mask = self.mask if name == "frozen" else value
        frozen = self.frozen if name == "mask" else value
        mask, frozen = self._checked(mask, frozen, device=store.device)
        store.set_region(key, mask, frozen)
        self.apply_mask_()

    @property
    def grad(self) -> Tensor | None:
        """The gradient of ``weight`` (the store's region when this block is a handle)."""
        store = self.store
        if store is None:
            return self._parameters["weight"].grad
        return store.region(self._key, "grad")

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """``nn.Linear``'s default init (U(-1/sqrt(in), 1/sqrt(in))), then masked entries zeroed.
        A ``generator`` on another device than the weights (a CPU generator for a CUDA model)
        draws on its own device: the model gets the values a model there would get."""
        w = self.weight
        dev = draw_device(w, generator)
        if self.store is None and dev == w.device:
            nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=generator)
        else:  # same numbers as an unbound block: draw into a contiguous tensor, copy into the region
            fresh = torch.empty(w.shape, dtype=w.dtype, device=dev)
            nn.init.kaiming_uniform_(fresh, a=math.sqrt(5), generator=generator)
            with torch.no_grad():
                w.copy_(fresh)
        self.apply_mask_()
        b = self._parameters.get("bias")
        if b is not None:  # nn.Linear's bias rule, after the weight (the same draws as nn.Linear)
            bound = 1 / math.sqrt(self.in_features)
            with torch.no_grad():
                b.copy_(torch.empty(b.shape, dtype=b.dtype, device=draw_device(b, generator))
                        .uniform_(-bound, bound, generator=generator))

    @torch.no_grad()
    def apply_mask_(self) -> None:
        """Zero the parameter at non-trainable entries (keeps the invariant after a manual edit).
        On a handle: every non-trainable entry of the store (entries outside all blocks too)."""
        if self.store is not None:
            self.store.apply_mask_()
            return
        m = self.mask
        if m is not None:
            self.weight.mul_(m)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features)

    def effective_weight(self) -> Tensor:
        """``frozen + weight * mask`` as a dense (out_features, in_features) tensor."""
        w = self.weight
        m = self.mask
        if m is not None:
            w = w * m
        f = self.frozen
        if f is not None:
            w = w + f
        return w

    def _weight_requires_grad(self) -> bool:
        store = self.store
        return self.weight.requires_grad if store is None else store.region_requires_grad(self._key)

    def num_trainable(self) -> int:
        """Number of trainable entries (mask count; all entries without a mask)."""
        if not self._weight_requires_grad():
            return 0
        m = self.mask
        if m is None:
            return self.in_features * self.out_features
        return int(m.sum())

    def num_stored(self) -> int:
        """Entries that take part in the product: trainable ones and non-zero frozen values at
        non-trainable entries (an offset under a trainable entry is not counted twice)."""
        m = self.mask
        if m is None:
            return self.in_features * self.out_features
        n = int(m.sum())
        f = self.frozen
        if f is not None:
            n += int(((f != 0) & ~m.to(f.device)).sum())
        return n

    def trainable_mask(self) -> Tensor:
        m = self.mask
        if m is None:
            return torch.ones(self.shape, dtype=torch.bool, device=self.weight.device)
        return m

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.effective_weight(), self.bias)

    def extra_repr(self) -> str:
        s = f"in_features={self.in_features}, out_features={self.out_features}"
        if self.bias is not None:
            s += ", bias=True"
        if self.mask is not None:
            s += f", trainable={self.num_trainable()}/{self.in_features * self.out_features}"
        if self.frozen is not None:
            s += ", frozen=True"
        if self.store is not None:
            s += ", handle"
        return s


def block_kind(block: nn.Module | None) -> str:
    """'absent', 'identity', 'linear' or 'module' (the kinds of a grid position)."""
    if block is None:
        return "absent"
    if isinstance(block, Identity):
        return "identity"
    if isinstance(block, LinearLike):
        return "linear"
    return "module"
