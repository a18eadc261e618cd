"""Sequence mode component by component (the layer-wise schedule of ``nn.RNN``).

Computes :meth:`Sequential2D.sequence` (defined by ``T + D`` Jacobi steps of the whole model)
over the strongly connected components of the block graph (edge ``j -> i`` per ``F[i][j]``) in
topological order: a component runs its own recurrence with only its inner blocks per step;
every block reading an input, a held slot or an earlier component is evaluated for all time
steps at once (one product per group of slots sharing a delay and per read shift).

Exactness: slot ``i`` (delay ``d_i``) is updated in steps ``d_i <= s < T + d_i``, at step ``s``
to wave ``t = s - d_i``, reading slot ``j`` as at the end of step ``s - 1``: a non-held ``j`` at
wave ``t - k``, ``k = d_j + 1 - d_i`` (before wave 0 its initial state: ``None`` is zero for a
linear block and skipped for a module; after wave ``T - 1`` that wave), an input slot at
``xs[min(t + d_i, T - 1)]``, a held slot at its initial value. Inside a component the steps are
the reference's Jacobi steps restricted to it. ``pipeline=False``: every ``d = 0``.

Falls back to the step loop (:func:`unsupported_reason` says why) for the tiled store,
``loop=True``, a linear block with its own bias, an input slot with a non-empty row, a ContextModule or nested Sequential2D
block, dropout/RReLU in training mode. Module blocks and activations not known to act
position-wise are called once per wave.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..activations import elementwise_key
from ..blocks import ContextModule, block_kind, call_block
from ..errors import InvalidInput, InvalidType
from .state import check_context, check_state, from_flat, segments
from .topology import components, input_distances
from ..memo import memo_dict

__all__ = ["ENABLED", "unsupported_reason", "sequence_by_components", "step_loop", "delays", "run_sequence"]

ENABLED = True  # False (or ``model.options.use_schedule = False``): sequence() runs the step loop
_POINTWISE = (nn.Identity, nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.LeakyReLU, nn.ELU,
              nn.Softplus, nn.Linear)
_RANDOM = (nn.modules.dropout._DropoutNd, nn.RReLU)
_FUNC = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu, nn.Sigmoid: torch.sigmoid, nn.Identity: lambda x: x}


@contextlib.contextmanager
def step_loop():
    """Within this block :meth:`Sequential2D.sequence` runs the reference step loop."""
    global ENABLED
    old, ENABLED = ENABLED, False
    try:
        yield
    finally:
        ENABLED = old


def _pointwise(m: nn.Module) -> bool:
    """True when ``m`` maps ``(*batch, s)`` position by position (a leading time dim is safe)."""
    if isinstance(m, nn.Sequential):
        return all(_pointwise(c) for c in m)
    return len(m.normalized_shape) == 1 if isinstance(m, nn.LayerNorm) else type(m) in _POINTWISE


class _Group:
    """Slots of one component sharing a delay: ``[lo, hi)`` of the component's vector."""

    def __init__(self, delay: int, lo: int):
        self.delay, self.lo, self.hi, self.slots = delay, lo, lo, ()
        self.lin: dict[int, list] = {}  # shift k -> [sources (inputs, earlier components), rect id]
        self.held: dict[int, int] = {}  # held non-input source read by linear blocks -> rect id
        self.mods: list[tuple] = []     # (i, j, kind, source type, k): module and identity blocks


class _Comp:
    def __init__(self, slots, d, sizes):
        self.slots = tuple(sorted(slots, key=lambda i: (d[i], i)))  # groups of one delay contiguous
        self.off, self.groups, w = {}, [], 0
        for i in self.slots:
            if not self.groups or self.groups[-1].delay != d[i]:
                self.groups.append(_Group(d[i], w))
            self.off[i], w = w, w + sizes[i]
            g = self.groups[-1]
            g.slots, g.hi = g.slots + (i,), w
        self.width, self.inner, self.inner_mods, self.needed = w, None, [], False


def unsupported_reason(model, pipeline: bool = True) -> str | None:
    """Why :func:`sequence_by_components` would run the step loop for ``model``, or None."""
    plan = _plan(model, pipeline)
    return plan if isinstance(plan, str) else _random_reason(plan[2])


def _plan(model, pipeline: bool):
    """``(components, weight plan, modules to watch, number of rects)`` or why not (cached)."""
    if not isinstance(getattr(model, "_rows", None), dict):  # duck-typed: seq2d.core.sequential2d imports this file
        raise InvalidType(f"expected a Sequential2D, got {type(model).__name__}")

    store, rows, blocks = model.store, model._rows, model.blocks
    key = (bool(pipeline), id(store), getattr(store, "loop", None), model.inputs, model.outputs,
           tuple(map(id, blocks.values())), tuple(map(id, model.acts)))
    cache = memo_dict(model, "_schedule_plans")
    if key in cache:
        return cache[key]
    ctx = [f"block F[{i}][{j}] is a {type(b).__name__} (call-time context)" for i, j, _, b in model.positions()
           if isinstance(b, ContextModule)]
    reason = (f"the {store.kind} store" if store is not None and not store.component_products else
              "a linear block with its own bias" if model._step().block_bias_keys else
              "the dense store's per-block loop (loop=True)" if store is not None and store.loop else
              "an input slot with a non-empty row" if any(i in rows for i in model.inputs) else
              ctx[0] if ctx else None)
    if reason is not None:
        return cache.setdefault(key, reason)
    d, rects = delays(model) if pipeline else (0,) * model.n, []
    comps = [_Comp(c, d, model.sizes) for c in components(rows)]
    where = {i: c for c in comps for i in c.slots}
    watch = [model.acts[i] for i in rows if not _pointwise(model.acts[i])]
    for c in comps:
        for g in c.groups:
            for i, j in ((i, j) for i in g.slots for j in rows[i]):
                kind = block_kind(blocks[f"{i}_{j}"])
                watch += [blocks[f"{i}_{j}"]] if kind == "module" else []
                if where.get(j) is c:  # an inner block: evaluated per step
                    c.inner = -1 if kind == "linear" else c.inner
                    c.inner_mods += [] if kind == "linear" else [(i, j, kind)]
                    continue
                src = "in" if j in model.inputs else ("held" if j not in where else "hist")
                k = -g.delay if src == "in" else (d[j] + 1 - g.delay if src == "hist" else 0)
                if src == "hist":
                    where[j].needed = True
                if kind != "linear":
                    g.mods.append((i, j, kind, src, k))
                elif src == "held":
                    g.held[j] = -1
                elif j not in g.lin.setdefault(k, [[], -1])[0]:
                    g.lin[k][0].append(j)
            for e in g.lin.values():
                e[0].sort()
                e[1], rects = len(rects), rects + [(g.slots, tuple(e[0]))]
            for j in g.held:
                g.held[j], rects = len(rects), rects + [(g.slots, (j,))]
        if c.inner is not None:
            c.inner, rects = len(rects), rects + [(c.slots, c.slots)]
    for o in (o for o in model.outputs if o in where):
        where[o].needed = True
    weights = _weight_plan(store, model.sizes, rects) if rects else []
    plan = cache[key] = weights if isinstance(weights, str) else (comps, weights, watch, len(rects))
    return plan


def _weight_plan(store, sizes, rects):
    """How each rect ``(rows, cols)`` is cut out of its box's effective weight: a contiguous one
    is a piece of one row split and one column split per band (backward: a cat per split, not a
    zero-filled box per rect); the others come from one gather per box."""
    by_box: dict[int, list[int]] = {}
    for r, (rows, _) in enumerate(rects):
        boxes = {store.box_of_row[i] for i in rows if i in store.box_of_row}
        if len(boxes) != 1:
            return "a component's linear rows lie in several boxes"
        by_box.setdefault(boxes.pop(), []).append(r)
    plans = []
    for b, rids in by_box.items():
        box = store.boxes[b]
        (R, C), cont, idx, parts = box.shape, {}, [], []
        pad = False  # some rect reads rows or columns its box lacks (zeros)
        for r in rids:
            # decided from host ranges, never from tensor values (no graph break under torch.compile)
            spans = [[(o[x], sizes[x]) if x in o else (-1, sizes[x]) for x in xs]
                     for o, xs in ((box.roff, rects[r][0]), (box.coff, rects[r][1]))]
            if all(a >= 0 and all(b == a + sum(w for _, w in v[:k]) for k, (b, _) in enumerate(v))
                   for v in spans for a in (v[0][0],)):
                (a, _), (c, _) = spans[0][0], spans[1][0]
                cont[r] = (a, a + sum(w for _, w in spans[0]), c, c + sum(w for _, w in spans[1]))
            else:
                pad |= any(a < 0 for v in spans for a, _ in v)
                ri, ci = (torch.cat([torch.arange(a, a + w) if a >= 0 else torch.full((w,), -1) for a, w in v])
                          for v in spans)
                ok = (ri[:, None] >= 0) & (ci[None, :] >= 0)
                idx.append(torch.where(ok, ri[:, None] * C + ci[None, :], R * C).reshape(-1))
                parts.append((r, len(ri), len(ci)))
        rc = sorted({0, R} | {x for q in cont.values() for x in q[:2]})
        cc = [sorted({0, C} | {x for q in cont.values() if q[0] < hi and q[1] > lo for x in q[2:]})
              for lo, hi in zip(rc, rc[1:])]  # the column cuts of each band of rows
        where = {r: [(n, [k for k, c in enumerate(cc[n][:-1]) if q[2] <= c < q[3]])
                     for n in range(len(cc)) if q[0] <= rc[n] < q[1]] for r, q in cont.items()}
        widths = [[y - x for x, y in zip(c, c[1:])] for c in [rc] + cc]
        split = (widths[0], widths[1:], where) if cont else None
        idx = torch.cat(idx).to(torch.int32 if R * C < 2**31 - 1 else torch.long) if idx else None
        plans.append((b, split, None if idx is None else ({idx.device: idx}, pad, parts)))
    return plans


def _random_reason(watch) -> str | None:
    for m in (m for mod in watch for m in mod.modules()):
        if isinstance(m, _RANDOM) and m.training and getattr(m, "p", 1) != 0:
            return f"{type(m).__name__} in training mode (random numbers drawn in another order)"
    return None


def _weights(plans, effs, n) -> list[Tensor | None]:
    """The rect weights of one call, cut from the effective weights of the boxes."""
    out: list[Tensor | None] = [None] * n
    for b, split, gather in plans:
        e = effs[b]
        if split is not None:
            bands = e.split(split[0], 0)
            pieces = {m: bands[m].split(split[1][m], 1) for m in {m for sp in split[2].values() for m, _ in sp}}
            for r, spans in split[2].items():
                out[r] = _cat([_cat([pieces[m][k] for k in ks], 1) for m, ks in spans], 0)
        if gather is not None:
            (idx, pad, parts), flat = gather, e.reshape(-1)
            if e.device not in idx:  # the index, kept per device
                idx[e.device] = next(iter(idx.values())).to(e.device)
            idx = idx[e.device]
            g = (torch.cat([flat, flat.new_zeros(1)]) if pad else flat).index_select(0, idx)
            for (r, h, w), piece in zip(parts, g.split([h * w for _, h, w in parts])):
                out[r] = piece.view(h, w)
    return out


def _cat(ts: list[Tensor], dim: int) -> Tensor:
    return ts[0] if len(ts) == 1 else torch.cat(ts, dim)


def _shift(V: Tensor, k: int, init: Tensor | None) -> Tensor:
    """Row ``t``: wave ``t - k`` of ``V`` (T, ...); ``init`` (zero if None) before wave 0, wave
    ``T - 1`` after the last."""
    T, kk = V.shape[0], min(abs(k), V.shape[0])
    if k == 0:
        return V
    if k > 0:
        head = V.new_zeros(kk, *V.shape[1:]) if init is None else init.unsqueeze(0).expand(kk, *V.shape[1:])
        return torch.cat([head, V[:T - kk]]) if kk < T else head
    tail = V[T - 1:].expand(kk, *V.shape[1:])
    return torch.cat([V[kk:], tail]) if kk < T else tail


def _call(blk, x: Tensor, size: int, i: int, j: int) -> Tensor:
    """The module block F[i][j] on ``x``, its widths checked (:func:`call_block`)."""
    return call_block(blk, x, size, i, j)


def _call_seq(blk, V: Tensor, k: int, init: Tensor | None, size: int, i: int, j: int) -> Tensor:
    """A module block over the reads ``t - k`` of ``V`` for every t (skipped before wave 0 when
    ``init`` is None): on the stacked waves when position-wise, else once per wave."""
    T, zero = V.shape[0], V.new_zeros(*V.shape[1:-1], size)
    if _pointwise(blk):
        if init is not None or k <= 0:
            return _call(blk, _shift(V, k, init), size, i, j)
        head = zero.expand(min(k, T), *zero.shape)
        return torch.cat([head, _call(blk, V[:T - k], size, i, j)]) if k < T else head
    memo, waves = {}, [max(min(t - k, T - 1), -1) for t in range(T)]
    for w in (w for w in waves if w not in memo):
        memo[w] = _call(blk, V[w], size, i, j) if w >= 0 else (zero if init is None else _call(blk, init, size, i, j))
    return torch.stack([memo[w] for w in waves])


def _external(model, mats, g: _Group, comp: _Comp, vals, state, like) -> tuple:
    """``(E, const)`` of group ``g``: E (T, *batch, S_g) the time-varying part of its rows' sums
    (bias and constants folded in), else ``const`` the time-invariant part (or None)."""
    sizes, sb, E, const = model.sizes, model.slot_bias, None, None
    bias = None if all(sb.view(i) is None for i in g.slots) else sb.view(g.slots[0]) if len(g.slots) == 1 else \
        torch.cat([sb.view(i) if sb.view(i) is not None else like.new_zeros(sizes[i]) for i in g.slots])
    for k, (srcs, r) in sorted(g.lin.items()):
        y = F.linear(_cat([_shift(vals[j], k, state[j]) for j in srcs], -1), mats[r], bias if E is None else None)
        E = y if E is None else E + y
    const = bias if E is None else None
    for j, r in ((j, r) for j, r in g.held.items() if state[j] is not None):
        const = _add(const, F.linear(state[j], mats[r]))
    for i, j, kind, src, k in g.mods:
        blk, a = model.blocks[f"{i}_{j}"], comp.off[i] - g.lo
        pad = (a, g.hi - g.lo - a - sizes[i])
        if src == "held" and state[j] is not None:
            const = _add(const, F.pad(state[j] if kind == "identity" else _call(blk, state[j], sizes[i], i, j), pad))
        elif src != "held":
            init = state[j] if src == "hist" else None
            E = _add(E, F.pad(_shift(vals[j], k, init) if kind == "identity" else
                              _call_seq(blk, vals[j], k, init, sizes[i], i, j), pad))
    return (E, const) if E is None or const is None else (E + const, None)


def _add(a: Tensor | None, b: Tensor) -> Tensor:
    return b if a is None else a + b


def _acts(model, comp: _Comp, a: int, b: int) -> list[tuple[int, int, nn.Module]]:
    """Activation runs over the component's vector range [a, b) (elementwise neighbours merged)."""

    runs: list[list] = []
    for i in (i for i in comp.slots if a <= comp.off[i] < b):
        lo, key = comp.off[i] - a, elementwise_key(model.acts[i])
        if runs and key is not None and runs[-1][3] == key:
            runs[-1][1] = lo + model.sizes[i]
        else:
            runs.append([lo, lo + model.sizes[i], model.acts[i], key])
    return [tuple(r[:3]) for r in runs]


def _run_comp(model, comp: _Comp, mats, vals, last, state, batch, like, T) -> None:
    """The component's recurrence: its waves go to ``vals`` (when read later), its last to ``last``."""
    sizes, S, groups = model.sizes, comp.width, comp.groups
    ext = [_external(model, mats, g, comp, vals, state, like) for g in groups]
    if len(comp.slots) == 1 and comp.inner is None and not comp.inner_mods and _pointwise(model.acts[comp.slots[0]]):
        (i,), (E, const) = comp.slots, ext[0]  # no inner block: every wave at once
        y = model.acts[i](E if E is not None else const.expand(*batch, S) if const is not None else
                          like.new_zeros(*batch, S))
        vals[i], last[i] = (y, y[T - 1]) if E is not None else (y.expand(T, *y.shape), y)
        return
    cur = _cat([state[i] if state[i] is not None else like.new_zeros(*batch, sizes[i]) for i in comp.slots], -1)
    present = {i for i in comp.slots if state[i] is not None}
    Wt = None if comp.inner is None else mats[comp.inner].t()
    Es = [(E.unbind(0) if E is not None else None, c) for E, c in ext]  # one node, no per-step select
    delays, memo, runs, outs = [g.delay for g in groups], {}, _acts(model, comp, 0, S), [[] for _ in groups]
    steps = range(delays[0], delays[-1] + T)
    if len(groups) == 1 and not comp.inner_mods and Wt is not None and Es[0][0] is not None and cur.dim() == 2 \
            and len(runs) == 1:  # the common case (an RNN layer): one GEMM and one activation per step
        El, f, steps = Es[0][0], _FUNC.get(type(runs[0][2]), runs[0][2]), range(0)
        for t in range(T):
            cur = f(El[0] if t == 0 and not present else torch.addmm(El[t], cur, Wt))  # a zero state adds 0
            outs[0].append(cur)
    for s in steps:  # the reference's steps restricted to the component (its active groups: [a, b))
        active = [n for n, dl in enumerate(delays) if 0 <= s - dl < T]
        a, b = groups[active[0]].lo, groups[active[-1]].hi
        runs = memo[(a, b)] if (a, b) in memo else memo.setdefault((a, b), _acts(model, comp, a, b))
        parts = [Es[n][0][s - delays[n]] if Es[n][0] is not None else Es[n][1] for n in active]
        w = [groups[n].hi - groups[n].lo for n in active]
        base = parts[0] if len(parts) == 1 else \
            torch.cat([like.new_zeros(*batch, m) if p is None else p.expand(*batch, m) for p, m in zip(parts, w)], -1)
        if Wt is None:
            pre = base.expand(*batch, b - a) if base is not None else like.new_zeros(*batch, b - a)
        elif (a, b) == (0, S) and base is not None and cur.dim() == 2:
            pre = torch.addmm(base, cur, Wt)
        else:  # a partial step (a few at either end) computes every row: W is never sliced
            y = cur @ Wt if (a, b) == (0, S) else (cur @ Wt)[..., a:b]
            pre = y if base is None else base + y
        for i, j, kind in comp.inner_mods:
            r = comp.off[i]
            if a <= r < b and j in present:
                xj = cur[..., comp.off[j]:comp.off[j] + sizes[j]]
                y = xj if kind == "identity" else _call(model.blocks[f"{i}_{j}"], xj, sizes[i], i, j)
                pre = pre + F.pad(y, (r - a, b - r - sizes[i]))
        out = _cat([_FUNC.get(type(f), f)(pre[..., lo:hi] if len(runs) > 1 else pre) for lo, hi, f in runs], -1)
        cur = out if (a, b) == (0, S) else torch.cat([cur[..., :a], out, cur[..., b:]], -1)
        for n in active:
            g = groups[n]
            outs[n].append(out if (g.lo, g.hi) == (a, b) else out[..., g.lo - a:g.hi - a])
            present.update(g.slots)
    for n, g in enumerate(groups):
        hist = torch.stack(outs[n]) if comp.needed else None
        for i in g.slots:
            lo, hi, whole = comp.off[i] - g.lo, comp.off[i] - g.lo + sizes[i], len(g.slots) == 1
            last[i] = outs[n][-1] if whole else outs[n][-1][..., lo:hi]
            if hist is not None:
                vals[i] = hist if whole else hist[..., lo:hi]


def sequence_by_components(model, xs: Tensor, state: list, pipeline: bool, context: dict):
    """``(ys, final state)`` of ``model.sequence(xs, state, pipeline=pipeline)`` computed
    component by component, or None when the step loop must run (see the module docstring).
    ``state``: the checked state list, its input slots holding ``xs[0]``."""
    if not ENABLED or not model.options.use_schedule:
        return None
    plan = _plan(model, pipeline)
    if isinstance(plan, str) or _random_reason(plan[2]) is not None:
        return None
    (comps, wplan, _, n_rects), sizes, T, batch = plan, model.sizes, xs.shape[0], xs.shape[1:-1]
    like = next((x for x in state if x is not None), xs)
    xs = xs.to(dtype=like.dtype)
    vals = {model.inputs[0]: xs} if len(model.inputs) == 1 else \
        dict(zip(model.inputs, xs.split([sizes[i] for i in model.inputs], -1)))
    mats, last = _weights(wplan, model.store.effective({}), n_rects) if wplan else [], {}
    for comp in comps:
        _run_comp(model, comp, mats, vals, last, state, batch, like, T)
    ys = [vals[o] if o in vals else state[o].expand(T, *state[o].shape) if state[o] is not None
          else like.new_zeros(T, *batch, sizes[o]) for o in model.outputs]
    final = [vals[i][T - 1] if i in model.inputs else last.get(i, state[i]) for i in range(model.n)]
    return _cat(ys, -1).contiguous(), final


def delays(model) -> tuple[int, ...]:
    """Pipeline delay of every slot: (shortest number of blocks from an input slot) - 1,
    0 for input slots and for slots no input reaches."""
    dist = input_distances(model.n, model._positions, model.inputs)
    return tuple(0 if (d is None or i in model.inputs) else d - 1 for i, d in enumerate(dist))


def run_sequence(model, xs: Tensor, state, pipeline: bool, context: dict) -> tuple[Tensor, list]:
    """``model.sequence(xs, state, pipeline=pipeline, **context)`` (its docstring defines it): by
    components when :func:`sequence_by_components` supports the model, else the step loop below,
    which is the definition."""
    if context:
        check_context(model, context, "sequence")
    if not isinstance(xs, Tensor):
        raise InvalidType(f"xs must be a tensor of shape (T, *batch, {model.in_features}), got {type(xs).__name__}")
    if xs.dim() < 2 or xs.shape[-1] != model.in_features:
        raise InvalidInput(f"xs must have shape (T, *batch, {model.in_features}), got {tuple(xs.shape)}")
    if xs.shape[0] == 0:  # as nn.RNN: "Expected sequence length to be larger than 0"
        raise InvalidInput(f"xs has T = 0 time steps (shape {tuple(xs.shape)}); sequence mode needs T >= 1, as nn.RNN")
    T = xs.shape[0]
    if state is None:
        state = [None] * model.n
    if isinstance(state, (Tensor, str, bytes)) or not isinstance(state, Sequence):
        raise InvalidType(f"state must be None or a list of {model.n} tensors (or None), got {type(state).__name__}")
    state = list(state)
    if len(state) == model.n:
        for i, p in zip(model.inputs, _split_in(model, xs[0])):
            state[i] = p
    state = check_state(model, state)
    out = sequence_by_components(model, xs, state, pipeline, context)  # above
    if out is not None:
        return out
    d = delays(model) if pipeline else (0,) * model.n
    D = max((d[i] for i in model._rows), default=0)
    x, present = segments(model, state)
    x0 = x.parts[0][2]
    off = model.flat_offsets
    in_runs = _input_runs(model)
    outs_by_delay: dict[int, list[int]] = {}
    for k, o in enumerate(model.outputs):
        outs_by_delay.setdefault(d[o], []).append(k)
    ys: list[list[Tensor | None]] = [[None] * len(model.outputs) for _ in range(T)]
    cache: dict = {}
    xs = xs.to(dtype=x0.dtype) if xs.dtype != x0.dtype else xs
    upd_cache: dict = {}
    rows = model._all_rows_t
    step = model._step()
    # products with the input slots do not depend on the state: one GEMM for all T steps
    hoisted = model.store is not None and not _reads_inputs_elsewhere(model) and \
        model.store.hoist_inputs(xs, model.inputs, cache)
    xs_t = xs.unbind(0)  # one node for all T steps (xs[s] would zero-fill xs's gradient every step)
    for s in range(T + D):
        if hoisted:
            cache["t"] = min(s, T - 1)  # after the last input the input slots keep xs[T-1]
        if s < T and s > 0:
            xin = xs_t[s]
            x.write([(a, b, xin if (ca == 0 and cb == xin.shape[-1]) else xin[..., ca:cb]) for a, b, ca, cb in in_runs])
        key = (min(s, D), max(s - T + 1, 0))
        upd = upd_cache.get(key)
        if upd is None:
            upd = upd_cache[key] = tuple(i for i in rows if key[1] <= d[i] <= key[0])
        present = step.advance(x, present, upd, context, cache)
        for k, o in enumerate(model.outputs):
            if d[o] <= s < T + d[o]:
                ys[s - d[o]][k] = x.read(off[o], off[o] + model.sizes[o]) if o in present else \
                    x0.new_zeros(*x0.shape[:-1], model.sizes[o])
    rows_out = [r[0] if len(r) == 1 else torch.cat(r, dim=-1) for r in ys]
    return torch.stack(rows_out, dim=0), from_flat(model, x, present)


def _reads_inputs_elsewhere(model) -> bool:
    """True when an input slot also has linear blocks in its own row (then it is not held and
    its value is not xs[t]); hoisting input products is then not valid."""
    return any(i in model._rows for i in model.inputs)


def _split_in(model, x: Tensor) -> tuple[Tensor, ...]:
    return x.split([model.sizes[i] for i in model.inputs], dim=-1) if len(model.inputs) > 1 else (x,)


def _input_runs(model) -> list[tuple[int, int, int, int]]:
    """``(flat start, flat end, input start, input end)`` runs where the input tensor is
    written into the flat state (consecutive input slots without padding merge)."""
    off = model.flat_offsets
    runs: list[list[int]] = []
    c = 0
    for i in model.inputs:
        a, s = off[i], model.sizes[i]
        if runs and runs[-1][1] == a and runs[-1][3] == c:
            runs[-1][1] += s
            runs[-1][3] += s
        else:
            runs.append([a, a + s, c, c + s])
        c += s
    return [tuple(r) for r in sorted(runs)]
