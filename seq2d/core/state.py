"""The state of a :class:`seq2d.Sequential2D` at its boundary: the list of slots, the tensor
form (input and output slots side by side) and the flat form (one ``(*batch, flat_size)``
buffer, see :class:`Segments`, run by :mod:`seq2d.core.step`).

:class:`StateIO` holds the methods of ``Sequential2D`` that check a state and convert it
between these forms (``check_state``, ``to_flat``/``from_flat``, ``split_inputs``/
``join_outputs``); it reads the model's ``n``, ``sizes``, ``inputs``, ``outputs``,
``flat_offsets``, ``flat_size``, ``steps`` and ``_param_ref()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..errors import InvalidInput, InvalidType, InvalidValue
from .checks import check_steps, context_keys_of, unexpected_keywords

__all__ = ["State", "Segments", "StateIO"]

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


class StateIO:
    """The state-list methods of :class:`seq2d.Sequential2D` (a mixin; see the module docstring)."""

    @property
    def context_keys(self) -> frozenset | None:
        """The call-time context keys this model accepts: the union of the ``context_keys`` of its
        ContextModule blocks (nested Sequential2Ds included), or ``None`` (any key) when one of them
        declares none. Computed once; :meth:`_grid_changed` forgets it."""
        v = self.__dict__.get("_context_keys_v", False)
        if v is False:
            v = self.__dict__["_context_keys_v"] = context_keys_of(blk for _, _, _, blk in self.positions())
        return v

    def _check_context(self, context: dict, method: str) -> None:
        """Refuse keywords no block of this model reads (``method``: the one called, for the message)."""
        keys = self.context_keys
        if keys is not None and not keys.issuperset(context):
            raise InvalidType(unexpected_keywords(f"{type(self).__name__}.{method}", context, keys, _OWN.get(method, ())))

    def _grid_changed(self) -> None:
        """Forget what was computed from the blocks (the step and its plans, context keys, sequence plans)."""
        for k in ("_step_v", "_context_keys_v", "_schedule_plans"):
            self.__dict__.pop(k, None)

    def check_state(self, state) -> State:
        """Validate a state list and return it as a list (typed errors name the slot)."""
        if isinstance(state, Tensor) or not isinstance(state, Sequence) or isinstance(state, (str, bytes)):
            raise InvalidType(f"state must be a list of {self.n} tensors (or None), got {type(state).__name__}")
        if len(state) != self.n:
            raise InvalidValue(f"state must have {self.n} slots (sizes {list(self.sizes)}), got {len(state)}")
        batch = dtype = device = None
        first = None
        for i, x in enumerate(state):
            if x is None:
                continue
            if not isinstance(x, Tensor):
                raise InvalidType(f"slot {i} of the state must be a tensor or None, got {type(x).__name__}")
            if x.dim() == 0 or x.shape[-1] != self.sizes[i]:
                raise InvalidInput(f"slot {i} expects shape (*batch, {self.sizes[i]}), got {tuple(x.shape)}")
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
        ref = self._param_ref()
        if first is not None and ref is not None:
            if dtype != ref.dtype:
                raise InvalidType(f"the state has dtype {dtype} but the model's parameters are {ref.dtype}; convert one with .to()")
            if device != ref.device:
                raise InvalidInput(f"the state is on {device} but the model's parameters are on {ref.device}; move one with .to()")
        return list(state)

    def _resolve_steps(self, steps) -> int:
        if steps is None:
            if self.steps is None:
                raise InvalidValue("steps is not set: this model has a cycle, so give steps= to the constructor or to forward")
            return self.steps
        return check_steps(steps)

    def _batch_like(self, state: State) -> Tensor:
        for x in state:
            if x is not None:
                return x
        raise InvalidValue("every slot of the state is None: give at least one slot so the batch shape is known")

    def to_flat(self, state: State) -> tuple[Tensor, frozenset]:
        """``(flat, present)``: the state list as one ``(*batch, flat_size)`` tensor (``None``
        slots and tile padding as zeros; one ``cat``) and the set of non-None slots."""
        seg, present = self._segments(state)
        return seg.tensor(), present

    def _segments(self, state: State) -> tuple[Segments, frozenset]:
        """The state list as flat-state pieces (no copy: a slot read back is its own tensor)."""
        like = self._batch_like(state)
        batch = like.shape[:-1]
        off = self.flat_offsets
        pieces: list[tuple[int, int, Tensor]] = []
        gap = 0
        for i, x in enumerate(state):
            w = off[i + 1] - off[i]
            if x is None:
                gap += w
                continue
            if gap:
                pieces.append((off[i] - gap, off[i], like.new_zeros(*batch, gap)))
            pieces.append((off[i], off[i] + self.sizes[i], x))
            gap = w - self.sizes[i]
        if gap:
            pieces.append((off[-1] - gap, off[-1], like.new_zeros(*batch, gap)))
        return Segments.of(pieces, off[-1]), frozenset(i for i, x in enumerate(state) if x is not None)

    def from_flat(self, flat, present=None, keep: State | None = None, touched=None) -> State:
        """The flat state (a tensor or :class:`Segments`) as a list of slot views (one
        ``split`` per piece); slots not in ``present`` are None, slots not in ``touched`` are
        returned as the tensors of ``keep``."""
        seg = flat if isinstance(flat, Segments) else Segments(flat)
        off = self.flat_offsets
        if any(a not in off for a, _, _ in seg.parts):  # a piece starts inside a slot (tile padding)
            seg.tensor()
        views: dict[int, Tensor] = {}
        for a, b, t in seg.parts:
            slots = [i for i in range(self.n) if a <= off[i] < b]
            widths, index = [], []
            for i in slots:
                index.append(len(widths))
                widths.append(self.sizes[i])
                pad = off[i + 1] - off[i] - self.sizes[i]
                if pad:
                    widths.append(pad)
            parts = t.split(widths, dim=-1) if len(widths) > 1 else (t,)
            for i, k in zip(slots, index):
                views[i] = parts[k]
        out: State = []
        for i in range(self.n):
            if present is not None and i not in present:
                out.append(None)
            elif keep is not None and touched is not None and i not in touched:
                out.append(keep[i])
            else:
                out.append(views[i])
        return out

    def _check_flat(self, x) -> Tensor:
        if not isinstance(x, Tensor):
            raise InvalidType(f"the flat state must be a tensor of shape (*batch, {self.flat_size}), got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.flat_size:
            raise InvalidInput(f"the flat state must have shape (*batch, {self.flat_size}) (slots at flat_offsets "
                               f"{list(self.flat_offsets)}), got {tuple(x.shape)}")
        ref = self._param_ref()
        if ref is not None and (x.dtype != ref.dtype or x.device != ref.device):
            raise InvalidType(f"the flat state is {x.dtype} on {x.device} but the model's parameters are "
                            f"{ref.dtype} on {ref.device}; convert one with .to()")
        return x

    def split_inputs(self, x: Tensor) -> State:
        """A state with ``x`` (*batch, in_features) split over the input slots, others None."""
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise InvalidInput(
                f"expected input of shape (*batch, {self.in_features}) (input slots {list(self.inputs)} "
                f"of sizes {[self.sizes[i] for i in self.inputs]}), got {tuple(x.shape)}"
            )
        state: State = [None] * self.n
        parts = x.split([self.sizes[i] for i in self.inputs], dim=-1) if len(self.inputs) > 1 else (x,)
        for i, p in zip(self.inputs, parts):
            state[i] = p
        return state

    def join_outputs(self, state: State) -> Tensor:
        like = self._batch_like(state)
        outs = [state[i] if state[i] is not None else like.new_zeros((*like.shape[:-1], self.sizes[i])) for i in self.outputs]
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

    def _read_outputs(self, x: Segments, present: frozenset) -> Tensor:
        """The output slots of a flat state, concatenated (zeros for absent ones)."""
        off = self.flat_offsets
        outs = []
        for o in self.outputs:
            if o in present:
                outs.append(x.read(off[o], off[o] + self.sizes[o]))
            else:
                like = x.parts[0][2]
                outs.append(like.new_zeros(*like.shape[:-1], self.sizes[o]))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
