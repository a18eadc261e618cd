"""The state of a :class:`seq2d.Sequential2D` at its boundary: the list of slots, the tensor
form (input and output slots side by side) and the flat form (one ``(*batch, flat_size)``
buffer, see :class:`Segments`, run by :mod:`seq2d.core.step`).

The functions below check a state and convert it between these forms; ``Sequential2D`` calls
them by name (``check_state``, ``segments``/``from_flat``, ``split_inputs``/``join_outputs``,
...). Each takes the model first and reads its ``n``, ``sizes``, ``inputs``, ``outputs``,
``flat_offsets``, ``flat_size``, ``steps`` and ``_param_ref()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..errors import InvalidInput, InvalidType, InvalidValue
from .checks import check_steps, context_keys_of, unexpected_keywords

__all__ = ["State", "Segments", "context_keys", "check_context", "check_state", "resolve_steps", "to_flat", "segments",
           "from_flat", "check_flat", "split_inputs", "join_outputs", "read_outputs"]

State = list[Tensor | None]


class Segments:
    """The flat state as consecutive pieces ``[(start, end, tensor)]`` covering ``[0, N)``.

    A step writes its updated rows as new pieces instead of copying the whole buffer, and
    a read of a range that one piece covers is that piece (or a view of it): an MLP run
    level by level reads each layer's input without a copy, as ``nn.Sequential`` does.
    ``tensor()`` joins the pieces with one ``cat``."""

    __slots__ = ("parts", "N")

    def __init__(self, x: Tensor):
        self.N = x.shape[-1]
        self.parts: list[tuple[int, int, Tensor]] = [(0, self.N, x)]

    @classmethod
    def of(cls, pieces: list[tuple[int, int, Tensor]], N: int) -> "Segments":
        """Pieces ``(start, end, tensor)`` already covering ``[0, N)`` in order."""
        seg = cls.__new__(cls)
        seg.N = N
        seg.parts = list(pieces)
        return seg

    def read(self, a: int, b: int) -> Tensor:
        pieces = []
        for s, e, t in self.parts:
            if e <= a or s >= b:
                continue
            lo, hi = max(a, s), min(b, e)
            pieces.append(t if (lo == s and hi == e) else t[..., lo - s:hi - s])
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=-1)

    def tensor(self) -> Tensor:
        if len(self.parts) > 1:
            self.parts = [(0, self.N, self.read(0, self.N))]
        return self.parts[0][2]

    def write(self, pieces: list[tuple[int, int, Tensor]]) -> None:
        """Replace the ranges of ``pieces`` (sorted, disjoint) by their tensors."""
        out: list[tuple[int, int, Tensor]] = []
        k = 0
        for s, e, t in self.parts:
            pos = s
            while k < len(pieces) and pieces[k][0] < e:
                a, b, new = pieces[k]
                if a > pos:
                    out.append((pos, a, t[..., pos - s:a - s]))
                if a >= pos:
                    out.append((a, b, new))
                pos = max(pos, b)
                if b > e:
                    break
                k += 1
            if pos < e:
                out.append((pos, e, t if pos == s else t[..., pos - s:]))
        self.parts = out


_OWN = {"forward": ("steps", "hold"), "forward_flat": ("steps", "hold"), "sequence": ("state", "pipeline")}


def context_keys(model) -> frozenset | None:
    """The call-time context keys this model accepts: the union of the ``context_keys`` of its
    ContextModule blocks (nested Sequential2Ds included), or ``None`` (any key) when one of them
    declares none. Computed once; ``Sequential2D._grid_changed`` forgets it."""
    v = model.__dict__.get("_context_keys_v", False)
    if v is False:
        v = model.__dict__["_context_keys_v"] = context_keys_of(blk for _, _, _, blk in model.positions())
    return v


def check_context(model, context: dict, method: str) -> None:
    """Refuse keywords no block of this model reads (``method``: the one called, for the message)."""
    keys = context_keys(model)
    if keys is not None and not keys.issuperset(context):
        raise InvalidType(unexpected_keywords(f"{type(model).__name__}.{method}", context, keys, _OWN.get(method, ())))


def check_state(model, state) -> State:
    """Validate a state list and return it as a list (typed errors name the slot)."""
    if isinstance(state, Tensor) or not isinstance(state, Sequence) or isinstance(state, (str, bytes)):
        raise InvalidType(f"state must be a list of {model.n} tensors (or None), got {type(state).__name__}")
    if len(state) != model.n:
        raise InvalidValue(f"state must have {model.n} slots (sizes {list(model.sizes)}), got {len(state)}")
    batch = dtype = device = None
    first = None
    for i, x in enumerate(state):
        if x is None:
            continue
        if not isinstance(x, Tensor):
            raise InvalidType(f"slot {i} of the state must be a tensor or None, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != model.sizes[i]:
            raise InvalidInput(f"slot {i} expects shape (*batch, {model.sizes[i]}), got {tuple(x.shape)}")
        if first is None:
            first, batch, dtype, device = i, x.shape[:-1], x.dtype, x.device
            continue
        if x.shape[:-1] != batch:
            raise InvalidInput(
                f"slot {i} has batch dims {tuple(x.shape[:-1])} but slot {first} has {tuple(batch)}; all slots must share them"
            )
        if x.dtype != dtype:
            raise InvalidType(f"slot {i} has dtype {x.dtype} but slot {first} has {dtype}; all slots must share one dtype")
        if x.device != device:
            raise InvalidInput(f"slot {i} is on {x.device} but slot {first} is on {device}; all slots must be on one device")
    ref = model._param_ref()
    if first is not None and ref is not None:
        if dtype != ref.dtype:
            raise InvalidType(f"the state has dtype {dtype} but the model's parameters are {ref.dtype}; convert one with .to()")
        if device != ref.device:
            raise InvalidInput(f"the state is on {device} but the model's parameters are on {ref.device}; move one with .to()")
    return list(state)


def resolve_steps(model, steps) -> int:
    if steps is None:
        if model.steps is None:
            raise InvalidValue("steps is not set: this model has a cycle, so give steps= to the constructor or to forward")
        return model.steps
    return check_steps(steps)


def batch_like(state: State) -> Tensor:
    for x in state:
        if x is not None:
            return x
    raise InvalidValue("every slot of the state is None: give at least one slot so the batch shape is known")


def to_flat(model, state: State) -> tuple[Tensor, frozenset]:
    """``(flat, present)``: the state list as one tensor and the set of its non-None slots."""
    seg, present = segments(model, state)
    return seg.tensor(), present


def segments(model, state: State) -> tuple[Segments, frozenset]:
    """The state list as flat-state pieces (no copy: a slot read back is its own tensor)."""
    like = batch_like(state)
    batch = like.shape[:-1]
    off = model.flat_offsets
    pieces: list[tuple[int, int, Tensor]] = []
    gap = 0
    for i, x in enumerate(state):
        w = off[i + 1] - off[i]
        if x is None:
            gap += w
            continue
        if gap:
            pieces.append((off[i] - gap, off[i], like.new_zeros(*batch, gap)))
        pieces.append((off[i], off[i] + model.sizes[i], x))
        gap = w - model.sizes[i]
    if gap:
        pieces.append((off[-1] - gap, off[-1], like.new_zeros(*batch, gap)))
    return Segments.of(pieces, off[-1]), frozenset(i for i, x in enumerate(state) if x is not None)


def from_flat(model, flat, present=None, keep: State | None = None, touched=None) -> State:
    """The flat state (a tensor or :class:`Segments`) as a list of slot views (one
    ``split`` per piece); slots not in ``present`` are None, slots not in ``touched`` are
    returned as the tensors of ``keep``."""
    seg = flat if isinstance(flat, Segments) else Segments(flat)
    off = model.flat_offsets
    if any(a not in off for a, _, _ in seg.parts):  # a piece starts inside a slot (tile padding)
        seg.tensor()
    views: dict[int, Tensor] = {}
    for a, b, t in seg.parts:
        slots = [i for i in range(model.n) if a <= off[i] < b]
        widths, index = [], []
        for i in slots:
            index.append(len(widths))
            widths.append(model.sizes[i])
            pad = off[i + 1] - off[i] - model.sizes[i]
            if pad:
                widths.append(pad)
        parts = t.split(widths, dim=-1) if len(widths) > 1 else (t,)
        for i, k in zip(slots, index):
            views[i] = parts[k]
    out: State = []
    for i in range(model.n):
        if present is not None and i not in present:
            out.append(None)
        elif keep is not None and touched is not None and i not in touched:
            out.append(keep[i])
        else:
            out.append(views[i])
    return out


def check_flat(model, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise InvalidType(f"the flat state must be a tensor of shape (*batch, {model.flat_size}), got {type(x).__name__}")
    if x.dim() == 0 or x.shape[-1] != model.flat_size:
        raise InvalidInput(f"the flat state must have shape (*batch, {model.flat_size}) (slots at flat_offsets "
                           f"{list(model.flat_offsets)}), got {tuple(x.shape)}")
    ref = model._param_ref()
    if ref is not None and (x.dtype != ref.dtype or x.device != ref.device):
        raise InvalidType(f"the flat state is {x.dtype} on {x.device} but the model's parameters are "
                        f"{ref.dtype} on {ref.device}; convert one with .to()")
    return x


def split_inputs(model, x: Tensor) -> State:
    """A state with ``x`` (*batch, in_features) split over the input slots, others None."""
    if x.dim() == 0 or x.shape[-1] != model.in_features:
        raise InvalidInput(
            f"expected input of shape (*batch, {model.in_features}) (input slots {list(model.inputs)} "
            f"of sizes {[model.sizes[i] for i in model.inputs]}), got {tuple(x.shape)}"
        )
    state: State = [None] * model.n
    parts = x.split([model.sizes[i] for i in model.inputs], dim=-1) if len(model.inputs) > 1 else (x,)
    for i, p in zip(model.inputs, parts):
        state[i] = p
    return state


def join_outputs(model, state: State) -> Tensor:
    like = batch_like(state)
    outs = [state[i] if state[i] is not None else like.new_zeros((*like.shape[:-1], model.sizes[i])) for i in model.outputs]
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


def read_outputs(model, x: Segments, present: frozenset) -> Tensor:
    """The output slots of a flat state, concatenated (zeros for absent ones)."""
    off = model.flat_offsets
    outs = []
    for o in model.outputs:
        if o in present:
            outs.append(x.read(off[o], off[o] + model.sizes[o]))
        else:
            like = x.parts[0][2]
            outs.append(like.new_zeros(*like.shape[:-1], model.sizes[o]))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
