"""The compiled step: how ``Sequential2D`` runs one Jacobi update on its flat state.

A :class:`Step` is built from what the model gives it (slot sizes, flat offsets, rows, blocks,
activations, the slot-bias vector and the parameter store) and never reads the model itself.
It works on one ``(*batch, N)`` buffer (:class:`seq2d.core.state.Segments`; slot ``i`` is
``[offsets[i], offsets[i] + sizes[i])``, the tiled store pads every slot to whole tiles). For
each distinct (updated slots, present slots) pair it compiles a :class:`StepPlan` once;
running it costs, independently of the number of slots and of linear blocks:

1. one product per box of the store (one for an iterated model, one per plan level);
2. one bias add (a slice of the bias vector, or one gather when rows and biases differ);
3. one activation call per run of consecutive slots with the same elementwise activation
   (per slot only for non-elementwise ones such as LayerNorm);
4. one call per module/identity block (they are arbitrary functions);
5. one ``cat`` that writes the updated rows between the kept (held) ones.

Equal to the docstring loop of :class:`seq2d.Sequential2D` (tests/test_store.py,
tests/test_property.py): absent (``None``) slots are zeros for the linear product, which
adds exactly zero, and are skipped for module blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice, repeat

import torch
from torch import Tensor, nn

from ..activations import elementwise_key
from ..blocks import block_kind, call_block
from .state import Segments
from ..memo import memo_dict

__all__ = ["Step", "StepPlan", "build_plan", "run_plan"]


class StepPlan:
    """The precomputed work of one step (see the module docstring)."""

    def __init__(self):
        self.upd: tuple[int, ...] = ()
        self.boxes: list = []
        self.pre_pieces: list[tuple] = []      # (box or None, start, width)
        self.width = 0                         # width of the updated-rows space U
        self.bias: tuple | None = None         # ("slice", a, b) | ("gather", index)
        self.modules: list[tuple] = []         # (u_start, size, i, j, kind)
        self.acts: list[tuple] = []            # (u_start, u_end, slot, elementwise, size)
        self.write: list[tuple] = []           # ("x", a, b) | ("u", a, b) in flat order
        self.act_widths: list[int] = []        # width of each activation run (one split of U)
        self.act_write: list[list] = []        # per run: its flat ranges [(start, width)]
        self.all_updated = False
        self.fuse_bias = False                 # the bias is added inside the box's GEMM
        self.block_bias: tuple | None = None   # (U positions, positions in the block-bias vector)


class Step:
    """The step of one model: ``advance`` runs one Jacobi update of some slots on a flat state.

    Built from the model's parts, which it keeps (the model builds a new one when its grid or
    its store changes): ``sizes``, ``offsets`` (the flat offsets, ``n + 1``), ``rows`` (``{i: [j,
    ...]}`` for every slot with a block in its row), ``blocks`` (``{"i_j": block}``), ``acts`` (one
    activation per slot), ``slot_bias`` (a :class:`seq2d.core.slot_bias.SlotBias`) and ``store``
    (the parameter store, or None without linear blocks). Compiled plans are cached here."""

    def __init__(self, sizes, offsets, rows, blocks, acts, slot_bias, store):
        self.sizes, self.offsets, self.n = tuple(sizes), tuple(offsets), len(sizes)
        self.rows, self.blocks, self.acts, self.slot_bias, self.store = rows, blocks, acts, slot_bias, store
        self.kinds = {(i, j): block_kind(blocks[f"{i}_{j}"]) for i in sorted(rows) for j in rows[i]}
        # the linear blocks' own biases: the block keys holding each bias Parameter once (grid
        # order; their concatenation is the block-bias vector) and every biased position's offset
        keys, first, off, o = [], {}, {}, 0
        for (i, j), kind in sorted(self.kinds.items()):
            p = getattr(blocks[f"{i}_{j}"], "bias", None) if kind == "linear" else None
            if p is None:
                continue
            if id(p) not in first:
                first[id(p)] = o
                keys.append(f"{i}_{j}")
                o += p.numel()
            off[(i, j)] = first[id(p)]
        self.block_bias_keys, self.block_bias_off = keys, off
        # a step depends on which slots are None (module or identity blocks, block biases)
        self.reads_present = bool(keys) or any(k in ("module", "identity") for k in self.kinds.values())
        self.plans: dict = {}

    def plan(self, upd: tuple[int, ...], present: frozenset) -> StepPlan:
        """The compiled step updating ``upd`` given the ``present`` slots (built once)."""
        key = (upd, present if self.reads_present else None)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = build_plan(self, upd, present)
        return plan

    def demand_schedule(self, upd: tuple[int, ...], steps: int, read: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The rows each of ``steps`` Jacobi updates of ``upd`` computes when only the slots
        ``read`` are read after the last one: going back from the last step, a step computes the
        rows a later step (or the final read) reads, and every row it may not leave out; the
        others keep a stale value that nothing reads. Equal results for ``read`` (proof: the
        docstring loop, with every omitted value never read; tested in tests/test_held_products.py).

        A row may be left out only when leaving it out changes nothing but its own value: all its
        blocks are linear (the store) or identity blocks and its activation is a known
        elementwise one (a module block or another activation may hold state or draw random
        numbers). Usually every step but the last few is ``upd`` itself; the last ones are
        memoised."""
        memo = memo_dict(self, "_demand")
        key = (upd, steps, read)
        hit = memo.get(key)
        if hit is None:
            if len(memo) > 64:  # calls with many different step counts: keep the memo small
                memo.clear()
            full = set(upd)
            fixed = {i for i in upd if elementwise_key(self.acts[i]) is None
                     or any(self.kinds[(i, j)] not in ("linear", "identity") for j in self.rows.get(i, ()))}
            need, tail = set(read), []
            while len(tail) < steps:
                rows = tuple(i for i in upd if i in need or i in fixed)
                if set(rows) == full:
                    break
                tail.append(rows)
                need = {j for i in rows for j in self.rows.get(i, ())} | (need - full)
            hit = memo[key] = (steps - len(tail), tail[::-1])
        return [upd] * hit[0] + hit[1]

    def prepare(self, present: frozenset, schedule, const: frozenset | None) -> None:
        """Build now the plans of the updates ``schedule`` (as :meth:`run` would, from the
        ``present`` slots) and the store's index plans for their products (``const``: the slots no
        step of the call writes, see :meth:`seq2d.stores.Store.product`)."""
        if isinstance(schedule, repeat):
            schedule = islice(schedule, 2)  # the present slots settle after one update
        boxes: list = []
        for upd in schedule:
            if upd:
                boxes.extend(b for b in self.plan(upd, present).boxes if b not in boxes)
                present = present | frozenset(upd)
        if boxes:
            self.store.prepare(boxes, const)

    def run(self, x: Segments, present: frozenset, schedule, context: dict, cache: dict | None) -> frozenset:
        """The updates of ``schedule`` (an iterable of slot tuples: the plan's levels, or the
        updated rows once per step) one after the other on ``x``; returns the present slots."""
        for upd in schedule:
            present = self.advance(x, present, upd, context, cache)
        return present

    def advance(self, x: Segments, present: frozenset, upd: tuple[int, ...], context: dict,
                cache: dict | None) -> frozenset:
        """One Jacobi update of the slots ``upd`` on the flat state ``x`` (in place); returns the
        present slots after it."""
        if not upd:
            return present
        plan = self.plan(upd, present)
        run_plan(self, plan, x, context, cache, present)
        return present if present.issuperset(upd) else present | frozenset(upd)


def build_plan(step: "Step", upd: Sequence[int], present: frozenset) -> StepPlan:
    """Compile the step that updates slots ``upd`` given the ``present`` slots."""

    plan = StepPlan()
    plan.upd = tuple(sorted(upd))
    off = step.offsets
    sizes = step.sizes
    store = step.store
    width = {i: off[i + 1] - off[i] for i in range(step.n)}
    # U-space: the updated slots side by side, in flat order
    u_off, u = {}, 0
    for i in plan.upd:
        u_off[i] = u
        u += width[i]
    plan.width = u
    plan.u_to_flat = {u_off[i]: off[i] for i in plan.upd}
    # 1. linear products: which boxes, and where each row's sum sits in them
    lin = [i for i in plan.upd if store is not None and i in store.rows]
    plan.boxes = store.boxes_for(lin) if lin else []
    pieces: list[list] = []
    for i in plan.upd:
        if i in lin:
            src, start = store.row_source(i, plan.boxes[0])
        else:
            src, start = None, 0
        w = width[i]
        last = pieces[-1] if pieces else None
        if last is not None and last[0] == src and (src is None or last[1] + last[2] == start):
            last[2] += w
        else:
            pieces.append([src, start, w])
    plan.pre_pieces = [tuple(p) for p in pieces]
    # 2. the bias over U
    bias = step.slot_bias
    if bias is not None and bias.bias is not None and any(i in bias.pos for i in plan.upd):
        # host lists, no tensor op: a plan built inside torch.compile adds no graph break
        Nb = bias.bias.numel()
        idx = [Nb] * u  # Nb: the zero appended to the bias vector (padding, slots without a bias)
        for i in plan.upd:
            if i in bias.pos:
                o = bias.pos[i]
                idx[u_off[i]:u_off[i] + sizes[i]] = range(o, o + sizes[i])
        a = idx[0]
        if a + u <= Nb and idx == list(range(a, a + u)):
            plan.bias = ("slice", a, a + u)
        else:
            plan.bias = ("gather", torch.tensor(idx, dtype=torch.long))
    # 2b. the linear blocks' own biases: row i gets b_ij for every present input slot j
    keys, boff = step.block_bias_keys, step.block_bias_off
    if keys:
        dst, src = [], []
        for i in plan.upd:
            for j in step.rows[i]:
                if (i, j) in boff and j in present:
                    o = boff[(i, j)]
                    dst.extend(range(u_off[i], u_off[i] + sizes[i]))
                    src.extend(range(o, o + sizes[i]))
        if dst:
            plan.block_bias = (torch.tensor(dst), torch.tensor(src))
    # 3. module and identity blocks whose input is present
    for i in plan.upd:
        for j in step.rows[i]:
            kind = step.kinds[(i, j)]
            if kind in ("module", "identity") and j in present:
                plan.modules.append((u_off[i], sizes[i], i, j, kind))
    # 4. activation runs
    for i in plan.upd:
        key = elementwise_key(step.acts[i])
        last = plan.acts[-1] if plan.acts else None
        if key is not None and last is not None and last[3] == key and last[1] == u_off[i]:
            plan.acts[-1] = (last[0], u_off[i] + width[i], last[2], key, None)
        else:
            plan.acts.append((u_off[i], u_off[i] + width[i], i, key, sizes[i]))
    # 5. write-back pieces in flat order
    upd_set = set(plan.upd)
    write: list[list] = []
    for i in range(step.n):
        src = "u" if i in upd_set else "x"
        a = u_off[i] if src == "u" else off[i]
        if write and write[-1][0] == src and write[-1][2] == a:
            write[-1][2] = a + width[i]
        else:
            write.append([src, a, a + width[i]])
    plan.write = [tuple(w) for w in write]
    plan.all_updated = len(plan.write) == 1 and plan.write[0][0] == "u"
    # where each activation run goes: its flat ranges [(flat start, width)] (a run of slots
    # consecutive in U-space is cut where held slots sit between them in the flat state)
    plan.act_widths = [a1 - a0 for a0, a1, *_ in plan.acts]
    u_ranges = [(a, b) for src, a, b in plan.write if src == "u"]
    plan.act_write = []
    for a0, a1, *_ in plan.acts:
        dest = []
        for a, b in u_ranges:
            lo, hi = max(a, a0), min(b, a1)
            if lo < hi:
                dest.append((plan.u_to_flat[a] + (lo - a), hi - lo))
        plan.act_write.append(dest)
    # one dense box giving exactly the updated rows: the bias goes into the GEMM
    plan.fuse_bias = (store is not None and store.fuses_bias and len(plan.boxes) == 1
                      and len(plan.pre_pieces) == 1 and plan.pre_pieces[0][:2] == (plan.boxes[0], 0)
                      and plan.pre_pieces[0][2] == store.boxes[plan.boxes[0]].shape[0]
                      and (plan.bias is None or plan.bias[0] == "slice") and not plan.modules)
    return plan


def _cat(parts: list[Tensor]) -> Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def run_plan(step: "Step", plan: StepPlan, x: Segments, context: dict, cache: dict | None,
             present: frozenset | None = None) -> None:
    """One step on the flat state ``x`` (updated in place: the new rows become its pieces).
    ``present``: the slots holding a value before the step (the store skips products whose
    columns are all absent, i.e. zero, when the call's cache says which slots are held)."""
    store = step.store
    bias = plan.bias
    fused = None
    if plan.fuse_bias and bias is not None:
        b = step.slot_bias.bias
        _, a, c = bias
        fused = b if (a == 0 and c == b.numel()) else b[a:c]
        bias = None
    ys = store.product(x, plan.boxes, cache, fused, present) if plan.boxes else {}
    parts = []
    like = None
    for src, start, w in plan.pre_pieces:
        if src is None:
            like = like if like is not None else x.parts[0][2]
            parts.append(like.new_zeros(*like.shape[:-1], w))
        else:
            y = ys[src]
            parts.append(y if (start == 0 and w == y.shape[-1]) else y[..., start:start + w])
    pre = _cat(parts)
    if bias is not None:
        b = step.slot_bias.bias
        if bias[0] == "slice":
            _, a, c = bias
            b = b if (a == 0 and c == b.numel()) else b[a:c]
            # in place when ``pre`` is a product we own (the kernels save their inputs, not
            # their output): no second (batch, width) buffer
            # (not with held-input products: the store may return the call's cached y_held itself)
            own = (len(parts) == 1 and ys and parts[0] is next(iter(ys.values())) and store.output_writable
                   and not (cache and "const" in cache))
            pre = pre.add_(b) if own else pre + b
        else:
            idx = bias[1]
            if idx.device != b.device:
                idx = idx.to(b.device)
                plan.bias = ("gather", idx)
            pre = pre + torch.cat([b, b.new_zeros(1)]).index_select(0, idx)
    if plan.block_bias is not None:
        pre = pre + _block_bias(step, plan, cache)
    if plan.modules:
        pre = _add_modules(step, plan, x, pre, context)
    # activations: one call per run, on the pieces of one split (no slice whose backward
    # zero-fills the whole width), and the results go straight to the write-back (no cat)
    acts = step.acts
    runs = plan.acts
    segs = [pre] if len(runs) == 1 else pre.split(plan.act_widths, dim=-1)
    outs = []
    for (a0, a1, i, key, size), seg in zip(runs, segs):
        act = acts[i]
        if key is not None:
            outs.append(seg if type(act) is nn.Identity else act(seg))
        elif size == a1 - a0:
            outs.append(act(seg))
        else:  # a padded slot with a non-elementwise activation: only its real entries
            real, pad = seg.split([size, a1 - a0 - size], dim=-1)
            outs.append(torch.cat([act(real), torch.zeros_like(pad)], dim=-1))
    if plan.all_updated and len(outs) == 1:
        x.parts = [(0, x.N, outs[0])]
        return
    new = []
    for t, dest in zip(outs, plan.act_write):
        if len(dest) == 1:
            new.append((dest[0][0], dest[0][0] + dest[0][1], t))
        else:  # a run cut by held slots: its flat ranges, one split
            new.extend((f, f + w, p) for (f, w), p in zip(dest, t.split([w for _, w in dest], dim=-1)))
    x.write(new)


def _block_bias(step: "Step", plan: StepPlan, cache: dict | None) -> Tensor:
    """The (U,) sum of the linear blocks' own biases of this step (two gathers, any number of blocks)."""
    if cache is not None and "block_bias" in cache:
        vec = cache["block_bias"]
    else:
        params = [step.blocks[k].bias for k in step.block_bias_keys]
        vec = params[0] if len(params) == 1 else torch.cat(params)
        if cache is not None:
            cache["block_bias"] = vec
    dst, src = plan.block_bias
    if dst.device != vec.device:
        dst, src = dst.to(vec.device), src.to(vec.device)
        plan.block_bias = (dst, src)
    return vec.new_zeros(plan.width).index_add(0, dst, vec.index_select(0, src))


def _add_modules(step: "Step", plan: StepPlan, x: Segments, pre: Tensor, context: dict) -> Tensor:
    """Add the module and identity blocks of this step to ``pre``; a module block's output must
    have shape ``(*batch, s_i)`` (refused otherwise, never broadcast); a ContextModule gets the
    context keys it declares."""
    off = step.offsets
    sizes = step.sizes
    cuts = sorted({c for u0, s, *_ in plan.modules for c in (u0, u0 + s)} | {0, plan.width})
    widths = [b - a for a, b in zip(cuts, cuts[1:])]
    parts = list(pre.split(widths, dim=-1))
    where = {a: k for k, a in enumerate(cuts[:-1])}
    for u0, s, i, j, kind in plan.modules:
        xj = x.read(off[j], off[j] + sizes[j])
        if kind == "identity":
            y = xj
        else:
            y = call_block(step.blocks[f"{i}_{j}"], xj, s, i, j, context)  # widths checked, F[i][j] named
        k = where[u0]
        parts[k] = parts[k] + y
    return _cat(parts)
