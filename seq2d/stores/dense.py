"""The dense parameter store: every LinearBlock of a Sequential2D in a few dense boxes.

A *box* is one dense ``(R, C)`` parameter over a set of output slots (rows) and the slots
they read (columns), in the order of the model's flat state. An iterated (cyclic) model
has one box: all rows that hold linear blocks x all columns those blocks read. An acyclic
model evaluated level by level (the execution plan) has one box per level, so a level's
product touches its own weights only (an MLP's boxes are exactly its ``nn.Linear`` weights).

Per box, buffers over the same ``(R, C)`` grid:

- ``mask_b`` (bool, or None when every entry is trainable): trainable entries; entries
  outside every block are False. A box with a mask stores only its trained entries (the
  *compact* layout, :mod:`.compact`): its Parameter is the vector of the entries the mask
  trains, in row-major order, ``index_b`` (a buffer not saved in the state dict: it follows
  from the mask) says where each sits in the box, and a step places them into the box in one
  op, so ``parameters()``, gradients and optimizer states hold the trained entries only; a
  box without a mask is one dense ``(R, C)`` Parameter;
- ``frozen_b`` (or None): fixed values at non-trainable entries;
- ties (a LinearBlock at several positions): a gather index per box holding a tied
  position says where each entry reads its value in the concatenation of the boxes; a
  tied position reads its first position's region, so the gradients of tied positions add
  up there (a box of tied positions only owns no Parameter at all).

The effective weight of box b is ``frozen_b + weight_b`` placed at ``index_b`` (``weight_b``
itself without a mask; then gathered through ``src_b`` when tied); it is formed once per forward
call and reused by every step. A mask edit that changes which entries a box trains (``blk.mask
= m``, or in place through ``blk.mask``) resizes that box's Parameter in place (the same
object: an optimizer built before it then refuses its old state; build it after the edit).
LinearBlocks become handles into their (first) region: see :class:`seq2d.LinearBlock`.

``loop=True`` keeps the same storage but evaluates one ``F.linear`` per block position
(the docstring loop; the slow, obviously right reference).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InvalidType, InvalidValue
from ..blocks import LinearBlock
from .base import Store, contiguous_runs
from .registry import register_store
from .compact import block_index, block_region, compact_boxes, compact_index, place, take
from ..store_view import WriteBack
from ..memo import memo_dict

__all__ = ["DenseStore"]


class _Box:
    """Static facts of one box: its rows/cols (slots) and where each lies inside it."""

    def __init__(self, rows: Sequence[int], cols: Sequence[int], sizes: Sequence[int], offsets: Sequence[int]):
        self.rows, self.cols = tuple(rows), tuple(cols)
        self.roff, self.coff = {}, {}
        r = 0
        for i in self.rows:
            self.roff[i] = r
            r += sizes[i]
        c = 0
        for j in self.cols:
            self.coff[j] = c
            c += sizes[j]
        self.shape = (r, c)
        # how to read the box's columns from the flat state: a slice when they are one run
        runs = contiguous_runs(self.cols, offsets)
        self.col_slice = runs[0] if len(runs) == 1 else None
        idx = [k for a, b in runs for k in range(a, b)]
        self.col_index = torch.tensor(idx, dtype=torch.long)


class _Columns:
    """Some slots of a box's columns: where they sit in the box (a slice when consecutive) and
    how to read them from the flat state (a slice when consecutive there)."""

    def __init__(self, box: _Box, slots: Sequence[int], sizes: Sequence[int], offsets: Sequence[int]):
        self.slots = frozenset(slots)
        idx = [k for j in slots for k in range(box.coff[j], box.coff[j] + sizes[j])]
        self.box_index = torch.tensor(idx, dtype=torch.long)
        self.box_slice = (idx[0], idx[-1] + 1) if idx and idx[-1] + 1 - idx[0] == len(idx) else None
        runs = contiguous_runs(slots, offsets)
        self.flat_slice = runs[0] if len(runs) == 1 else None
        self.flat_index = torch.tensor([k for a, c in runs for k in range(a, c)], dtype=torch.long)

    def read(self, x) -> Tensor:
        """These columns of the flat state ``x`` (a Segments)."""
        if self.flat_slice is not None:
            return x.read(*self.flat_slice)
        full = x.read(0, x.N)
        if self.flat_index.device != full.device:
            self.flat_index = self.flat_index.to(full.device)
        return full.index_select(-1, self.flat_index)

    def take(self, e: Tensor) -> Tensor:
        """These columns of the box weight ``e`` (a copy; see :meth:`_ColumnSplit.weights`)."""
        if self.box_index.device != e.device:
            self.box_index = self.box_index.to(e.device)
        return e.index_select(1, self.box_index)


class _ColumnSplit:
    """A box's columns split into held slots (constant during a call) and the rest."""

    def __init__(self, box: _Box, held: Sequence[int], sizes: Sequence[int], offsets: Sequence[int]):
        rest = [j for j in box.cols if j not in set(held)]
        self.held = _Columns(box, held, sizes, offsets)
        self.rest = _Columns(box, rest, sizes, offsets) if rest else None
        C = box.shape[1]
        # the usual case (held inputs first, or last): two consecutive column ranges, so the two
        # weights are views of one split, whose backward is one cat (no zero-filled full-size grads)
        hs = self.held.box_slice
        self.halves = None
        if hs is not None and self.rest is not None and self.rest.box_slice is not None and hs[0] in (0, C - (hs[1] - hs[0])):
            self.halves = (hs[1] - hs[0], C - (hs[1] - hs[0])) if hs[0] == 0 else (C - (hs[1] - hs[0]), hs[1] - hs[0])
            self.held_first = hs[0] == 0
        elif hs is not None and self.rest is None:
            self.halves = ()

    def weights(self, e: Tensor) -> tuple[Tensor, Tensor | None]:
        """(held columns, other columns or None) of the effective box weight ``e``."""
        if self.halves == ():
            return e, None
        if self.halves is not None:
            a, c = e.split(self.halves, dim=1)
            return (a, c) if self.held_first else (c, a)
        return self.held.take(e), (self.rest.take(e) if self.rest is not None else None)


@register_store
class DenseStore(Store):
    """Dense boxes holding every linear block of a model (see the module docstring).

    Args:
        sizes: slot sizes of the model.
        entries: ``(i, j, LinearBlock)`` for every linear grid position (tied blocks are the
            same object at several positions).
        box_rows: the rows of each box (e.g. the plan's levels); default one box of all rows.
        loop: one ``F.linear`` per position (the reference) instead of one GEMM per box.
    """

    kind = "dense"
    fuses_bias = True
    component_products = True

    @classmethod
    def from_blocks(cls, sizes: Sequence[int], entries, levels, *, loop: bool = False) -> "DenseStore":
        """The store of a model's LinearBlocks (:func:`seq2d.stores.registry.build_store`): one box
        per plan level (``levels``; None: one box)."""
        return cls(sizes, entries, levels, loop=loop)

    def __init__(self, sizes: Sequence[int], entries: Sequence[tuple[int, int, LinearBlock]],
                 box_rows: Sequence[Sequence[int]] | None = None, *, loop: bool = False):
        super().__init__(sizes)
        self.set_loop(loop)
        entries = sorted(entries, key=lambda e: (e[0], e[1]))
        if not entries:
            raise InvalidValue("a DenseStore needs at least one linear block")
        lin_rows = sorted({i for i, _, _ in entries})
        if box_rows is None:
            box_rows = [lin_rows]
        box_rows = [sorted(set(r) & set(lin_rows)) for r in box_rows]
        box_rows = [r for r in box_rows if r]
        covered = sorted(i for r in box_rows for i in r)
        if covered != lin_rows:
            raise InvalidValue(f"the boxes must cover every linear row exactly once: {box_rows} vs rows {lin_rows}")
        box_of_row = {i: b for b, rows in enumerate(box_rows) for i in rows}
        cols = [sorted({j for i, j, _ in entries if box_of_row[i] == b}) for b in range(len(box_rows))]
        self.boxes = [_Box(r, c, self.sizes, self.offsets) for r, c in zip(box_rows, cols)]
        self.rows = tuple(lin_rows)
        self.box_of_row = box_of_row

        ref = entries[0][2].weight
        dev, dt = ref.device, ref.dtype
        self.entries = [(i, j) for i, j, _ in entries]
        primary: dict[int, tuple] = {}  # id(block) -> key of its first position
        tied: list[tuple[tuple, tuple]] = []  # (secondary key, primary key)
        self._keys: dict[tuple[int, int], tuple] = {}
        blocks: dict[int, LinearBlock] = {}
        for i, j, blk in entries:
            b = box_of_row[i]
            box = self.boxes[b]
            key = (b, box.roff[i], box.coff[j], self.sizes[i], self.sizes[j])
            self._keys[(i, j)] = key
            if id(blk) in primary:
                tied.append((key, primary[id(blk)]))
            else:
                primary[id(blk)] = key
                blocks[id(blk)] = blk
        # a box holds a Parameter only when some block has its first position there; a box of
        # tied positions only (an unrolled RNN's later levels) is all gathered
        owner = sorted({key[0] for key in primary.values()})
        self._pidx = {b: k for k, b in enumerate(owner)}
        self._owner = owner
        self.weight = nn.ParameterList()
        weights, masks, frozens = {}, {}, {}
        for b in owner:
            shape = self.boxes[b].shape
            weights[b] = torch.zeros(shape, device=dev, dtype=dt)
            masks[b] = torch.zeros(shape, device=dev, dtype=torch.bool)
            frozens[b] = torch.zeros(shape, device=dev, dtype=dt)
        with torch.no_grad():
            for bid, key in primary.items():
                blk = blocks[bid]
                b, r0, c0, h, w = key
                sl = (slice(r0, r0 + h), slice(c0, c0 + w))
                if blk.weight.dtype != dt or blk.weight.device != dev:
                    raise InvalidType(f"all linear blocks of one model must share dtype and device: got "
                                    f"{blk.weight.dtype} on {blk.weight.device} and {dt} on {dev}")
                if blk._weight_requires_grad():  # a compact handle's weight is a copy: ask its store, not the copy (no_grad here)
                    m = blk.trainable_mask().to(dev)
                    weights[b][sl] = blk.weight.detach() * m
                    masks[b][sl] = m
                    if blk.frozen is not None:
                        frozens[b][sl] = blk.frozen
                else:  # a block with requires_grad=False: all of it is fixed values
                    frozens[b][sl] = blk.effective_weight().detach()
        for k, b in enumerate(owner):
            m, f = masks[b], frozens[b]
            m = None if bool(m.all()) else m
            idx = None if m is None else compact_index(m)
            self.weight.append(nn.Parameter(weights[b] if idx is None else take(weights[b], idx)))
            self.register_buffer(f"mask_{k}", m)
            self.register_buffer(f"index_{k}", idx, persistent=False)
            self.register_buffer(f"frozen_{k}", f if bool((f != 0).any()) else None)
        # ties: a gather index for every box holding a tied position, into the concatenation
        # of the owned boxes followed by one zero
        starts, total = {}, 0
        for b in owner:
            starts[b] = total
            total += self.boxes[b].shape[0] * self.boxes[b].shape[1]
        src: dict[int, Tensor] = {}
        for b, box in enumerate(self.boxes):
            if b not in self._pidx:
                src[b] = torch.full(box.shape, total, dtype=torch.long)
        for (b, r0, c0, h, w), (pb, pr0, pc0, _, _) in tied:
            if b not in src:
                R, C = self.boxes[b].shape
                src[b] = torch.arange(starts[b], starts[b] + R * C).view(R, C)
            pR, pC = self.boxes[pb].shape
            p = torch.arange(starts[pb], starts[pb] + pR * pC).view(pR, pC)[pr0:pr0 + h, pc0:pc0 + w]
            src[b][r0:r0 + h, c0:c0 + w] = p
        self._src = {b: t.reshape(-1) for b, t in src.items()}  # index plans, moved to the device lazily
        self.tied = bool(src)
        for bid, key in primary.items():
            blocks[bid]._bind(self, key)

    # ------------------------------------------------------------------ handle support
    @property
    def device(self) -> torch.device:
        return self.weight[0].device

    def _buf(self, kind: str, k: int) -> Tensor | None:
        """Buffer ``kind`` ('mask'/'index'/'frozen') of the k-th owned box."""
        return getattr(self, f"{kind}_{k}")

    def box_shape(self, k: int) -> tuple[int, int]:
        """The ``(R, C)`` shape of the k-th owned box (its Parameter's, unless compact)."""
        return self.boxes[self._owner[k]].shape

    def is_compact(self, k: int) -> bool:
        """Whether the k-th owned box stores its trained entries only (it has a mask)."""
        return self._buf("index", k) is not None

    def region(self, key, name: str) -> Tensor | None:
        b, r0, c0, h, w = key
        b = self._pidx[b]
        sl = (slice(r0, r0 + h), slice(c0, c0 + w))
        if name in ("weight", "grad") and self.is_compact(b):
            return self._compact_region(b, key, name)
        if name == "weight":
            return self.weight[b][sl]
        if name == "grad":
            g = self.weight[b].grad
            return None if g is None else g[sl]
        t = self._buf("mask" if name == "mask" else "frozen", b)
        if t is None:
            return None
        t = t[sl]
        if name == "mask":
            if bool(t.all()):
                return None
            # an edit in place changes which entries the box stores: it is laid out again
            return WriteBack.of(t, lambda _, k=b: self._relayout(k, self._buf("mask", k)))
        return t if bool((t != 0).any()) else None

    def _block_index(self, k: int, key) -> tuple[Tensor, Tensor]:
        """:func:`block_index` of ``key``'s region in the k-th (compact) box, memoised per index tensor."""
        idx = self._buf("index", k)
        memo = memo_dict(self, "_block_idx")
        hit = memo.get(key)
        if hit is None or hit[0] is not idx:
            _, r0, c0, h, w = key
            hit = memo[key] = (idx, block_index(idx, self.box_shape(k)[1], r0, c0, h, w))
        return hit[1]

    def _compact_region(self, k: int, key, name: str) -> Tensor | None:
        """A block's region of a compact box: its weight, assembled from the trained entries (a
        :class:`StoreView` whose in-place edits are written back and whose ``.grad`` is the block's
        gradient), or the region of the gradient (a copy)."""
        return block_region(self.weight[k], *self._block_index(k, key), key[3], key[4], grad=name == "grad")

    @torch.no_grad()
    def _relayout(self, k: int, mask: Tensor | None, old: Tensor | None = None) -> None:
        """Lay the k-th box out for ``mask`` (None: every entry trainable, a dense box), keeping the
        values of the entries trained before and after and zero for the newly trainable ones. The
        Parameter stays the same object (its ``.data`` is replaced; its gradient dropped when the
        shape changes). ``old``: the index it was laid out with (default the current one)."""
        W = self.weight[k]
        shape = self.box_shape(k)
        old = self._buf("index", k) if old is None else old
        dense = W.detach() if old is None else place(W.detach(), old, shape)
        if mask is not None and bool(mask.all()):
            mask = None
        idx = None if mask is None else compact_index(mask)
        new = dense if idx is None else take(dense, idx)
        if mask is not None:
            new = new * 1  # a fresh tensor (the dense box may be W's own storage)
        if new.shape != W.shape:
            W.grad = None
            # autograd keeps the leaf's gradient accumulator (with its shape) while any graph holds
            # it; torch drops it only when the dtype changes: pass through another dtype first
            W.data = torch.empty(0, dtype=torch.float16 if W.dtype != torch.float16 else torch.float32, device=W.device)
        W.data = new.contiguous() if idx is None else new
        setattr(self, f"mask_{k}", mask)
        setattr(self, f"index_{k}", idx)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        """A state's mask is the model's after loading (as the buffer's copy makes it): a box is
        laid out for it first, and a box saved densely (before the compact layout) is reduced
        to the entries that mask trains (:func:`compact_state_dict`)."""
        for k in range(len(self.weight)):
            m = state_dict.get(f"{prefix}mask_{k}")
            own = self._buf("mask", k)
            if isinstance(m, Tensor) and tuple(m.shape) == self.box_shape(k) and m.dtype == torch.bool \
                    and (own is None or not torch.equal(m.to(own.device), own)):
                self._relayout(k, m.to(self.device))
        compact_boxes([(prefix, self)], state_dict)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def apply_mask_(self) -> None:
        """Nothing to zero: a box with a mask stores its trained entries only (kept for the handles,
        whose own ``apply_mask_`` zeroes an unbound block's masked entries)."""

    def region_requires_grad(self, key) -> bool:
        return self.weight[self._pidx[key[0]]].requires_grad

    @torch.no_grad()
    def set_region(self, key, mask: Tensor | None, frozen: Tensor | None) -> None:
        """Replace the mask/frozen values of a block's region (None = all trainable / no values)."""
        b, r0, c0, h, w = key
        b = self._pidx[b]
        sl = (slice(r0, r0 + h), slice(c0, c0 + w))
        W = self.weight[b]
        m = self._buf("mask", b)
        if mask is not None or m is not None:
            m = torch.ones(self.box_shape(b), dtype=torch.bool, device=W.device) if m is None else m.clone()
            m[sl] = True if mask is None else mask.to(m.device)
            self._relayout(b, m)
        f = self._buf("frozen", b)
        if frozen is not None or f is not None:
            if f is None:
                f = W.new_zeros(self.box_shape(b))
            f[sl] = 0 if frozen is None else frozen.to(f)
            setattr(self, f"frozen_{b}", f if bool((f != 0).any()) else None)

    def num_trainable(self) -> int:
        """Trainable entries (a tied position's region is masked out: it reads its source)."""
        return sum(W.numel() for W in self.weight if W.requires_grad)  # a masked box stores its trained entries only

    def position_weight(self, i: int, j: int) -> Tensor:
        """Effective (s_i, s_j) weight at grid position (i, j) (differentiable)."""
        b, r0, c0, h, w = self._keys[(i, j)]
        return self.effective()[b][r0:r0 + h, c0:c0 + w]

    # ------------------------------------------------------------------ the product
    def effective(self, cache: dict | None = None) -> list[Tensor]:
        """``frozen`` + the trained entries of every box (tied positions gathered), once per forward."""
        if cache is not None and "dense" in cache:
            return cache["dense"]
        own = []
        for k, W in enumerate(self.weight):
            f, idx = self._buf("frozen", k), self._buf("index", k)
            if idx is not None:  # compact: the trained entries placed into the box (frozen values under them)
                own.append(place(W, idx, self.box_shape(k), f))
                continue
            e = W
            if f is not None:
                e = e + f
            own.append(e)
        if not self.tied:
            effs = own
        else:
            flat = torch.cat([e.reshape(-1) for e in own] + [own[0].new_zeros(1)])
            effs = []
            for b, box in enumerate(self.boxes):
                idx = self._src.get(b)
                if idx is None:
                    effs.append(own[self._pidx[b]])
                    continue
                if idx.device != flat.device:
                    idx = self._src[b] = idx.to(flat.device)
                effs.append(flat.index_select(0, idx).view(box.shape))
        if cache is not None:
            cache["dense"] = effs
        return effs

    def product(self, x, boxes: Sequence[int], cache: dict | None = None, bias: Tensor | None = None,
                present: frozenset | None = None) -> dict[int, Tensor]:
        """``{box: x_cols @ W_box.T}`` (``(*batch, R_box)``) for the given boxes; ``x`` is a
        :class:`seq2d.core.state.Segments` view of the flat state. ``bias`` (one box only) is fused
        into the GEMM.

        Held inputs (``cache["const"]``: the slots no step of this call writes, set by
        ``Sequential2D._iterate``): a box's product with those columns is computed once per call
        (with the bias) and each step multiplies only the other columns, ``y = y_held + x_rest @
        W_rest.T``; when none of the other columns is ``present`` (the first step of a call that
        starts from the inputs alone, where they are still zero) the step costs no GEMM at all.
        The held columns' weight gradient is then one product with the summed upstream gradient
        (autograd adds the steps' gradients of ``y_held`` first)."""
        out = {}
        if self.loop:
            for b in boxes:
                out[b] = self._loop_box(x, b)
            if bias is not None:
                out[boxes[0]] = out[boxes[0]] + bias
            return out
        effs = self.effective(cache)
        hoisted = cache.get("hoist") if cache is not None else None
        const = cache.get("const") if cache is not None else None
        for b in boxes:
            box = self.boxes[b]
            if const is not None:
                sp = self._split(b, const)
                if sp is not None:
                    out[b] = self._held_product(x, b, sp, effs[b], cache, bias, present)
                    continue
            if hoisted is not None and b in hoisted:
                (a, c), w_rest, y_in = hoisted[b]
                y = y_in[cache["t"]]
                xr = x.read(a, c)
                if bias is not None:
                    y = y + bias
                out[b] = torch.addmm(y, xr, w_rest.t()) if xr.dim() == 2 else y + F.linear(xr, w_rest)
                continue
            if box.col_slice is not None:
                xc = x.read(*box.col_slice)
            else:
                full = x.read(0, self.offsets[-1])
                idx = box.col_index
                if idx.device != full.device:
                    idx = box.col_index = idx.to(full.device)
                xc = full.index_select(-1, idx)
            out[b] = F.linear(xc, effs[b], bias)
        return out

    def prepare(self, boxes: Sequence[int], const: frozenset | None = None) -> None:
        """The column splits of ``boxes`` by the held slots ``const`` (:meth:`_split`)."""
        if const is not None:
            for b in boxes:
                self._split(b, const)

    def _split(self, b: int, const: frozenset) -> "_ColumnSplit | None":
        """Box ``b``'s columns split into the held slots ``const`` and the rest (static, memoised);
        None when the box reads no held slot."""
        memo = memo_dict(self, "_splits")
        key = (b, const)
        if key not in memo:
            box = self.boxes[b]
            held = [j for j in box.cols if j in const]
            memo[key] = _ColumnSplit(box, held, self.sizes, self.offsets) if held else None
        return memo[key]

    def _held_product(self, x, b: int, sp: "_ColumnSplit", e: Tensor, cache: dict, bias: Tensor | None,
                      present: frozenset | None) -> Tensor:
        """One step's product of box ``b`` with its held columns' part computed once per call."""
        held = cache.setdefault("held", {})
        key = (b, bias is not None)  # a step with the bias fused and one without never share y_held
        h = held.get(key)
        if h is None:
            w_held, w_rest = sp.weights(e)
            h = held[key] = (w_rest, F.linear(sp.held.read(x), w_held, bias))
        w_rest, y_held = h
        if w_rest is None or (present is not None and present.isdisjoint(sp.rest.slots)):
            return y_held  # every column it would read is zero
        xr = sp.rest.read(x)
        return torch.addmm(y_held, xr, w_rest.t()) if xr.dim() == 2 else y_held + F.linear(xr, w_rest)

    def hoist_inputs(self, xs: Tensor, inputs: Sequence[int], cache: dict) -> bool:
        """Sequence mode: precompute every box's product with the input slots for all time
        steps at once (``xs``: ``(T, *batch, in_features)``, input slots in ``inputs`` order) so
        that a step multiplies only the columns that depend on the state. Stored in ``cache``
        (``cache["t"]`` then says which time step's input the state holds). Returns False (and
        stores nothing) when the remaining columns are not one run of the flat state."""
        if self.loop:
            return False
        effs = self.effective(cache)
        in_set = set(inputs)
        plans = {}
        for b, box in enumerate(self.boxes):
            if not in_set & set(box.cols):
                continue
            rest = [j for j in box.cols if j not in in_set]
            if not rest:
                return False
            runs = []
            for j in rest:
                a = self.offsets[j]
                if runs and runs[-1][1] == a:
                    runs[-1][1] = a + self.sizes[j]
                else:
                    runs.append([a, a + self.sizes[j]])
            if len(runs) != 1:
                return False
            C = box.shape[1]
            # the input columns in the order of xs (zero columns for inputs this box does not read)
            idx = []
            for i in inputs:
                idx += list(range(box.coff[i], box.coff[i] + self.sizes[i])) if i in box.coff else [C] * self.sizes[i]
            rest_idx = [k for j in rest for k in range(box.coff[j], box.coff[j] + self.sizes[j])]
            e = effs[b]
            dev = e.device
            e_pad = torch.cat([e, e.new_zeros(e.shape[0], 1)], dim=1)
            w_in = e_pad.index_select(1, torch.tensor(idx, device=dev))
            w_rest = e.index_select(1, torch.tensor(rest_idx, device=dev))
            plans[b] = (tuple(runs[0]), w_rest, F.linear(xs, w_in).unbind(0))  # one node, not T selects
        cache["hoist"] = plans
        cache["t"] = 0
        return True

    def _loop_box(self, x: Tensor, b: int) -> Tensor:
        """The reference: one ``F.linear`` per position, rows concatenated."""
        box = self.boxes[b]
        off = self.offsets
        rows = []
        for i in box.rows:
            acc = None
            for (pi, j) in self.entries:
                if pi != i:
                    continue
                y = F.linear(x.read(off[j], off[j] + self.sizes[j]), self.position_weight(i, j))
                acc = y if acc is None else acc + y
            rows.append(acc)
        return rows[0] if len(rows) == 1 else torch.cat(rows, dim=-1)

    def set_loop(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise InvalidType(f"loop: expected a bool, got {type(on).__name__} {on!r}")
        self.loop = on

    def row_source(self, i: int, box=None) -> tuple[int, int]:
        """(box, offset of slot i's rows in that box's output); every step reads the same boxes."""
        b = self.box_of_row[i]
        return b, self.boxes[b].roff[i]

    def dense_weight(self) -> Tensor:
        """The N x N effective weight over the flat state (inspection and tests only)."""
        N = self.offsets[-1]
        effs = self.effective()
        W = effs[0].new_zeros(N, N)
        off = self.offsets
        for i, j in self.entries:
            b, r0, c0, h, w = self._keys[(i, j)]
            W[off[i]:off[i] + h, off[j]:off[j] + w] = effs[b][r0:r0 + h, c0:c0 + w]
        return W

    def extra_repr(self) -> str:
        shapes = ", ".join(f"{R}x{C}" for R, C in (box.shape for box in self.boxes))
        return f"boxes=[{shapes}], " + ("loop=True, " if self.loop else "") + f"tied={self.tied}"

