r"""Stability of a Sequential2D's recurrent cores: certified and data-dependent contraction
constants, projections that enforce stability during training, and the truncation bound.

Reference: J. Miller and M. Hardt, "Stable Recurrent Models" (ICLR 2019; arXiv 1805.10369,
first circulated as "When Recurrent Models Don't Need To Be Recurrent"). A state map
``h_t = phi(h_{t-1}, x_t)`` is *lambda-stable* when it is a contraction in ``h``::

    ||phi(h, x) - phi(h', x)|| <= lambda ||h - h'||,   lambda < 1.

For the Elman RNN ``h_t = rho(W h_{t-1} + U x_t + b)`` with an elementwise ``rho`` whose
Lipschitz constant is ``L_rho`` this holds with ``lambda = L_rho ||W||_2`` (the paper's
sufficient condition ``||W|| < 1 / L_rho``).

What this module computes, for any Sequential2D (or a wrapper with ``.core``, such as
:class:`seq2d.RNN`), per *recurrent core* (a strongly connected component of the block
graph with a cycle, :func:`seq2d.graph.recurrent_cores`):

=========================  ===========================================================
:func:`certified_lambda`   ``lambda <= L_act * ||W_rec||_2``: a bound that holds for every
                           input (``W_rec`` = the core's block matrix, ``L_act`` = the largest
                           Lipschitz constant of the core's slot activations).
:func:`data_lambda`        the largest spectral norm of the state Jacobian
                           ``d state_t / d state_{t-1}`` (restricted to the core) along real
                           trajectories: what the model does on *this* data. Always <= the
                           certified number; the paper observes that nominally unstable
                           models often operate in the stable regime on data, so the two
                           answer different questions, and both are reported.
:class:`SpectralClip`      the projection ``W <- U diag(min(s, lambda / L_act)) V^T`` of the
                           core's matrix after each optimizer step (a trainer callback).
:func:`lemma1_bound`,      the truncation bound (Lemma 1): how far ``h_t`` of the RNN is from
:func:`truncation_length`  ``h_t^k`` of its k-truncation (:func:`seq2d.truncated_rnn`), and
                           the ``k`` that makes that at most ``eps``.
=========================  ===========================================================

Spectral norms are computed in float64 by an SVD (``torch.linalg.matrix_norm(ord=2)``) up
to ``exact_below`` rows/columns; beyond that the *certified* number is the rigorous cap
``min(sqrt(||W||_1 ||W||_inf), ||W||_F)`` (never smaller than ``||W||_2``, usually larger)
and :func:`spectral_norm` gives the power-iteration *estimate* (a lower bound). Each core's
report says which one it used (``norm_method``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from .activations import activation_name, lipschitz
from .blocks import Identity, LinearBlock, LinearLike
from .core import Sequential2D

__all__ = [
    "spectral_norm",
    "spectral_norm_bound",
    "recurrent_matrix",
    "certified_lambda",
    "data_lambda",
    "SpectralClip",
    "project_spectral_",
    "lemma1_bound",
    "truncation_length",
    "rnn_constants",
    "stacked_lemma1_bound",
    "stacked_truncation_length",
]

_F64 = torch.float64


def _core(model) -> Sequential2D:
    if isinstance(model, Sequential2D):
        return model
    core = getattr(model, "core", None)
    if isinstance(core, Sequential2D):
        return core
    raise TypeError(f"expected a Sequential2D (or a model with a .core Sequential2D, e.g. seq2d.RNN), got {type(model).__name__}")


def _cores(m: Sequential2D) -> list[list[int]]:
    from .graph import recurrent_cores

    return [sorted(c) for c in sorted(recurrent_cores(m), key=min)]


def _check_matrix(W) -> Tensor:
    if not isinstance(W, Tensor):
        raise TypeError(f"expected a 2-D tensor, got {type(W).__name__}")
    if W.dim() != 2:
        raise ValueError(f"expected a 2-D tensor (a matrix), got shape {tuple(W.shape)}")
    return W.detach().to(_F64)


# ---------------------------------------------------------------------- spectral norms
def spectral_norm(W: Tensor, *, exact_below: int = 512, iters: int = 100, tol: float = 1e-7,
                  generator: torch.Generator | None = None) -> float:
    """``||W||_2`` (largest singular value), in float64.

    Exact (an SVD, ``torch.linalg.matrix_norm(ord=2)``) when both dimensions are at most
    ``exact_below``; otherwise power iteration on ``W^T W`` from a random start (``generator``)
    for at most ``iters`` steps, stopping when the estimate changes by less than ``tol``
    (relative). The power-iteration value is ``||W v||`` for a unit ``v``, hence a *lower*
    bound that converges from below: for a certified number use :func:`spectral_norm_bound`.
    """
    W = _check_matrix(W)
    if W.numel() == 0:
        return 0.0
    if max(W.shape) <= exact_below:
        return float(torch.linalg.matrix_norm(W, ord=2))
    v = torch.randn(W.shape[1], generator=generator, dtype=_F64).to(W.device)
    v = v / v.norm()
    est = 0.0
    for _ in range(max(1, iters)):
        u = W @ v
        new = float(u.norm())
        w = W.T @ u
        wn = w.norm()
        if float(wn) == 0.0:  # v fell into the null space (W == 0 or an unlucky start)
            return new
        v = w / wn
        if abs(new - est) <= tol * max(new, 1e-300):
            est = new
            break
        est = new
    return max(est, float((W @ v).norm()))


def spectral_norm_bound(W: Tensor, *, exact_below: int = 4096) -> tuple[float, str]:
    """A certified upper bound on ``||W||_2`` and how it was obtained.

    ``("svd")``: the exact value from a float64 SVD, when both dimensions are at most
    ``exact_below`` (its rounding error, about ``n * 1e-16`` relative, is far below any
    margin that matters here). Otherwise the rigorous cap
    ``min(sqrt(||W||_1 ||W||_inf), ||W||_F)`` (``"holder"`` or ``"frobenius"``), which is
    never below ``||W||_2`` but can be well above it.
    """
    W = _check_matrix(W)
    if W.numel() == 0:
        return 0.0, "svd"
    if max(W.shape) <= exact_below:
        return float(torch.linalg.matrix_norm(W, ord=2)), "svd"
    return _cheap_cap(W)


def _cheap_cap(W: Tensor) -> tuple[float, str]:
    """``min(sqrt(||W||_1 ||W||_inf), ||W||_F) >= ||W||_2`` (Hoelder; Frobenius)."""
    a = W.abs()
    holder = math.sqrt(float(a.sum(0).max()) * float(a.sum(1).max()))
    fro = float(torch.linalg.matrix_norm(W, ord="fro"))
    return (holder, "holder") if holder <= fro else (fro, "frobenius")


# ---------------------------------------------------------------------- certified lambda
def recurrent_matrix(model, core: Iterable[int]) -> Tensor:
    """The block matrix of the recurrent ``core`` (slot indices) over its concatenated slots
    (in increasing slot order), in float64: ``F[i][j]``'s effective weight for a linear block,
    the identity for an identity block, zero where absent.

    Raises:
        ValueError: a module block sits inside the core (its Lipschitz constant is unknown, so
            the core's contraction cannot be certified), or ``core`` names a bad slot.
    """
    m = _core(model)
    slots = sorted(set(core))
    if not slots or any(not (0 <= i < m.n) for i in slots):
        raise ValueError(f"core must name slots of the model (0 .. {m.n - 1}), got {sorted(set(core))}")
    off, total = {}, 0
    for i in slots:
        off[i] = total
        total += m.sizes[i]
    ref = m._param_ref()
    W = torch.zeros(total, total, dtype=_F64, device=ref.device if ref is not None else None)
    for i in slots:
        for j in slots:
            blk = m.block(i, j)
            if blk is None:
                continue
            r, c = slice(off[i], off[i] + m.sizes[i]), slice(off[j], off[j] + m.sizes[j])
            if isinstance(blk, Identity):
                W[r, c] = torch.eye(m.sizes[i], dtype=_F64, device=W.device)
            elif isinstance(blk, LinearLike):
                W[r, c] = blk.effective_weight().detach().to(_F64)
            else:
                raise ValueError(
                    f"block F[{i}][{j}] is a module ({type(blk).__name__}) inside the recurrent core {slots}: its "
                    "Lipschitz constant is unknown, so the core's contraction cannot be certified. Only linear and "
                    "identity blocks are certifiable")
    return W


def _act_lipschitz(m: Sequential2D, slots: Sequence[int]) -> float | None:
    vals = [lipschitz(m.acts[i]) for i in slots]
    return None if any(v is None for v in vals) else max(vals)


def certified_lambda(model, *, exact_below: int = 4096) -> dict:
    """A certified bound on the contraction constant of every recurrent core.

    One step of sequence mode restricted to a core's slots is ``z <- act(W_rec z + rest)``,
    with ``rest`` not depending on ``z``; for elementwise activations with Lipschitz constants
    ``<= L_act`` its Jacobian is ``D W_rec`` with ``|D| <= L_act``, so the step is
    ``L_act ||W_rec||_2``-Lipschitz in ``z`` for every input: that is the reported lambda.

    Returns a dict:
        ``cores``: one dict per core (sorted by first slot) with ``slots``, ``lipschitz_act``
        (None when a slot's activation has no known constant, e.g. LayerNorm or a custom
        module), ``norm`` (the certified ``||W_rec||_2``), ``norm_method`` (see
        :func:`spectral_norm_bound`) and ``lambda`` (``lipschitz_act * norm``, or None);
        ``lambda``: the max over cores (None if any core is uncertified; ``0.0`` for an
        acyclic model, which has no recurrence and forgets its initial state after
        ``memory`` steps); ``stable``: ``lambda < 1`` (None when lambda is None);
        ``memory``: :func:`seq2d.graph.memory` for an acyclic model, else None.

    Raises:
        ValueError: a module block inside a core (see :func:`recurrent_matrix`).
    """
    from .graph import memory

    m = _core(model)
    rows = []
    for slots in _cores(m):
        W = recurrent_matrix(m, slots)
        norm, method = spectral_norm_bound(W, exact_below=exact_below)
        L = _act_lipschitz(m, slots)
        rows.append({"slots": slots, "lipschitz_act": L, "norm": norm, "norm_method": method,
                     "lambda": None if L is None else L * norm})
    if not rows:
        return {"cores": [], "lambda": 0.0, "stable": True, "memory": memory(m)}
    lams = [r["lambda"] for r in rows]
    lam = None if any(v is None for v in lams) else max(lams)
    return {"cores": rows, "lambda": lam, "stable": None if lam is None else lam < 1, "memory": None}


# ---------------------------------------------------------------------- data-dependent lambda
def data_lambda(model, xs: Tensor, *, iters: int = 20, generator: torch.Generator | None = None) -> dict:
    """The state Jacobian's spectral norm along the real trajectory of ``model`` on ``xs``.

    ``model`` (a Sequential2D or seq2d.RNN) runs in sequence mode with pipelining, exactly as
    :meth:`Sequential2D.sequence` (zero initial state) on ``xs`` of shape ``(T, B, in_features)``
    (time first, also for a ``batch_first`` RNN; ``(T, in_features)`` is one sequence). At every
    step ``s`` where all of a core's slots are updated, the map ``z -> (the core's slots after the
    step)``, with ``z`` the core's slots before it and every other slot fixed at its trajectory
    value, has a Jacobian ``J_s`` (per sequence); its spectral norm is estimated by ``iters``
    rounds of power iteration on ``J_s^T J_s`` with ``torch.func.jvp`` and ``torch.func.vjp``,
    all sequences at once (they are independent). Each estimate is ``||J_s v||`` for a unit
    ``v``, a lower bound on ``||J_s||_2 <= L_act ||W_rec||_2``, so the result never exceeds
    :func:`certified_lambda`.

    Returns a dict: ``cores``: per core ``slots``, ``max`` and ``mean`` over steps and
    sequences, ``per_step`` (a float64 tensor ``(steps, B)``), ``steps`` (the sequence-mode
    step indices measured); ``max``: the max over cores (0.0 without cores); ``mean``: the mean
    over every measured value. A multi-layer RNN has one core per layer.
    """
    m = _core(model)
    if not isinstance(xs, Tensor):
        raise TypeError(f"xs must be a tensor of shape (T, B, {m.in_features}), got {type(xs).__name__}")
    if xs.dim() == 2:
        xs = xs.unsqueeze(1)
    if xs.dim() != 3 or xs.shape[-1] != m.in_features:
        raise RuntimeError(f"xs must have shape (T, B, {m.in_features}) (time first), got {tuple(xs.shape)}")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive int, got {iters!r}")
    ref = m._param_ref()
    if ref is not None:
        xs = xs.to(device=ref.device, dtype=ref.dtype)
    cores = _cores(m)
    if not cores:
        return {"cores": [], "max": 0.0, "mean": 0.0}
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    T, B = xs.shape[0], xs.shape[1]
    held = set(m.held())
    rows = [i for i in range(m.n) if i not in held]
    d = m.delays()
    D = max((d[i] for i in rows), default=0)
    state: list[Tensor | None] = [None] * m.n
    found: list[list[Tensor]] = [[] for _ in cores]
    steps: list[list[int]] = [[] for _ in cores]
    for s in range(T + D):
        if s < T:
            parts = m.split_inputs(xs[s])
            for i in m.inputs:
                state[i] = parts[i]
        active = {i for i in rows if d[i] <= s < T + d[i]}
        hold = sorted(set(rows) - active)
        for c, slots in enumerate(cores):
            if set(slots) <= active:
                found[c].append(_jacobian_norm(m, state, slots, hold, iters, generator))
                steps[c].append(s)
        with torch.no_grad():
            state = [None if x is None else x.detach() for x in m(state, 1, hold=hold)]
    out, allv = [], []
    for slots, vals, st in zip(cores, found, steps):
        per = torch.stack(vals).to(_F64).cpu() if vals else torch.zeros(0, B, dtype=_F64)
        allv.append(per.reshape(-1))
        out.append({"slots": slots, "max": float(per.max()) if per.numel() else 0.0,
                    "mean": float(per.mean()) if per.numel() else 0.0, "per_step": per, "steps": st})
    flat = torch.cat(allv)
    return {"cores": out, "max": max(r["max"] for r in out), "mean": float(flat.mean()) if flat.numel() else 0.0}


def _jacobian_norm(m: Sequential2D, state, slots, hold, iters: int, generator) -> Tensor:
    """Power-iteration estimate of ``||d core_after / d core_before||_2`` per sequence: (B,)."""
    like = next(x for x in state if x is not None)
    B = like.shape[0]
    sizes = [m.sizes[i] for i in slots]
    z0 = torch.cat([state[i] if state[i] is not None else like.new_zeros(B, m.sizes[i]) for i in slots], dim=-1)

    def step(z: Tensor) -> Tensor:
        st = list(state)
        for i, p in zip(slots, z.split(sizes, dim=-1)):
            st[i] = p
        new = m(st, 1, hold=hold)
        return torch.cat([new[i] for i in slots], dim=-1)

    v = torch.randn(z0.shape, generator=generator, dtype=_F64).to(device=z0.device, dtype=z0.dtype)
    v = v / v.norm(dim=-1, keepdim=True)
    with torch.no_grad():  # the transforms still differentiate w.r.t. z; no graph w.r.t. the weights
        out, vjp_fn = torch.func.vjp(step, z0)  # vjp_fn(u) = J^T u, one forward for every round
        # J v without re-running the step: the vjp of the linear map u -> J^T u is v -> J v
        # (checked against torch.func.jvp below, once per call)
        _, jvp_fn = torch.func.vjp(lambda u: vjp_fn(u)[0], torch.zeros_like(out))
        _, u_ref = torch.func.jvp(step, (z0,), (v,))
        u = jvp_fn(v)[0]
        if not torch.allclose(u, u_ref, rtol=1e-4, atol=1e-6 * float(u_ref.abs().max().clamp_min(1))):
            raise RuntimeError("data_lambda: the Jacobian-vector products disagree (jvp vs double vjp)")
        for _ in range(iters):
            (w,) = vjp_fn(u)
            n = w.norm(dim=-1, keepdim=True)
            v = torch.where(n > 0, w / n.clamp_min(torch.finfo(w.dtype).tiny), v)
            u = jvp_fn(v)[0]
    return u.norm(dim=-1).detach()


# ---------------------------------------------------------------------- projections
def _shrink(dtype: torch.dtype, n: int) -> float:
    """Relative margin below the bound for projected singular values, so that after the
    values are rounded to ``dtype`` (an error of at most ``eps/2 * ||W||_F <= eps/2 sqrt(n)
    ||W||_2``) and re-measured in float64 the norm is still at most the bound."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(_F64).eps
    return eps * math.sqrt(n) + 64 * n * torch.finfo(_F64).eps


def _clip(W: Tensor, bound: float, shrink: float) -> Tensor | None:
    """``U diag(s') V^T`` with ``s' = bound (1 - shrink)`` where ``s > bound``, else ``s``;
    None when ``||W||_2 <= bound`` already (nothing changes: the projection is idempotent)."""
    if _cheap_cap(W)[0] <= bound:
        return None
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    if float(S[0]) <= bound:
        return None
    S = torch.where(S > bound, torch.full_like(S, bound * (1.0 - shrink)), S)
    return (U * S) @ Vh


def _check_bound(bound, what: str = "bound") -> float:
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound <= 0:
        raise ValueError(f"{what} must be a positive finite number, got {bound!r}")
    return float(bound)


@torch.no_grad()
def project_spectral_(W: Tensor, bound: float) -> Tensor:
    """Project the matrix ``W`` in place onto ``{||W||_2 <= bound}``: ``W <- U diag(min(s, bound)) V^T``.

    Only singular values above ``bound`` change (they become ``bound`` less a relative margin
    of a few float eps, so that the stored ``W`` measures at most ``bound`` after rounding);
    a matrix already within the bound is left untouched, so the projection is idempotent.
    Computed in float64. Returns ``W``.
    """
    if not isinstance(W, Tensor) or W.dim() != 2:
        raise ValueError(f"W must be a 2-D tensor, got {getattr(W, 'shape', type(W).__name__)}")
    bound = _check_bound(bound)
    new = _clip(W.detach().to(_F64), bound, _shrink(W.dtype, max(W.shape)))
    if new is not None:
        W.copy_(new.to(W.dtype))
    return W


class SpectralClip:
    r"""Keep every recurrent core ``lambda``-stable: ``||W_rec||_2 <= lam / L_act`` after each step.

    ``mode="svd"`` (default) projects each core's matrix onto the spectral-norm ball,
    ``W_rec <- U diag(min(s, lam / L_act)) V^T`` (the Euclidean projection: only singular
    values above the bound change, and applying it twice changes nothing), and writes the
    blocks back into the core's LinearBlocks. That needs every block position of the core to
    hold its own dense, unmasked LinearBlock (the projection fills every entry).
    ``mode="scale"`` multiplies the core's blocks by ``bound / ||W_rec||_2`` when the norm is
    above the bound: not the Euclidean projection (every singular value shrinks), but it
    keeps masks, absent blocks and ties, so it also serves sparse cores.

    Use it as a trainer callback (``on_step_end(trainer, step)``, after each optimizer step:
    projected gradient descent) or call it: ``clip(model)`` / ``clip.project()``.

    Args:
        model: a Sequential2D or a model with ``.core`` (seq2d.RNN).
        lam: the target contraction constant (> 0).
        cores: slot sets to project (default: every recurrent core).
        mode: ``"svd"`` or ``"scale"``.

    Raises (at construction, naming the blocks):
        NotImplementedError: a block the mode cannot write (identity, masked or absent positions
            for "svd", frozen values, tiled block-sparse blocks, a LinearBlock also used at
            another position).
        ValueError: a module block in a core, or an activation without a known Lipschitz constant.
    """

    def __init__(self, model, lam: float, cores: Iterable[Iterable[int]] | None = None, *, mode: str = "svd") -> None:
        self.model = model
        self.lam = _check_bound(lam, "lam")
        if mode not in ("svd", "scale"):
            raise ValueError(f"Unknown mode {mode!r}. Select from 'svd' or 'scale'.")
        self.mode = mode
        m = _core(model)
        cores = _cores(m) if cores is None else [sorted(set(c)) for c in cores]
        self._plans = [self._plan(m, slots) for slots in cores]
        uses: dict[int, list] = {}
        for _, _, kind, blk in m.positions():
            uses.setdefault(id(blk), []).append(blk)
        seen: dict[int, list[int]] = {}
        for plan in self._plans:
            for i, j, blk in plan["blocks"]:
                tied_in_core = sum(1 for a, b, x in plan["blocks"] if x is blk)
                if len(uses[id(blk)]) > (tied_in_core if mode == "scale" else 1):
                    raise NotImplementedError(
                        f"SpectralClip: the LinearBlock at F[{i}][{j}] is also used at another position of the model "
                        f"(tied weights); projecting core {plan['slots']} would change it there too")
                other = seen.setdefault(id(blk), plan["slots"])
                if other != plan["slots"]:
                    raise NotImplementedError(f"SpectralClip: the LinearBlock at F[{i}][{j}] is shared by cores {other} "
                                              f"and {plan['slots']}")
        self.last: list[dict] = []

    def _plan(self, m: Sequential2D, slots: list[int]) -> dict:
        if not slots or any(not (0 <= i < m.n) for i in slots):
            raise ValueError(f"cores must name slots of the model (0 .. {m.n - 1}), got {slots}")
        L = _act_lipschitz(m, slots)
        if L is None:
            names = {i: activation_name(m.acts[i]) or type(m.acts[i]).__name__ for i in slots}
            raise ValueError(f"SpectralClip: core {slots} has activations {names} without a known Lipschitz constant "
                             "(known: identity, relu, tanh, sigmoid), so no bound on ||W_rec|| makes it lam-stable")
        blocks, bad, absent = [], [], []
        for i in slots:
            for j in slots:
                blk = m.block(i, j)
                if blk is None:
                    absent.append(f"F[{i}][{j}]")
                    continue
                if isinstance(blk, Identity):
                    bad.append(f"F[{i}][{j}] (identity: fixed)")
                elif isinstance(blk, LinearBlock):
                    if blk.frozen is not None:
                        bad.append(f"F[{i}][{j}] (frozen values)")
                    elif blk.mask is not None and self.mode == "svd":
                        bad.append(f"F[{i}][{j}] (masked; use mode='scale')")
                    else:
                        blocks.append((i, j, blk))
                elif isinstance(blk, LinearLike):
                    bad.append(f"F[{i}][{j}] (tiled block of the block-sparse engine)")
                else:
                    raise ValueError(f"SpectralClip: block F[{i}][{j}] of core {slots} is a module "
                                     f"({type(blk).__name__}); only linear blocks can be projected")
        if absent and self.mode == "svd":
            bad.append(", ".join(absent) + " (absent: the projection would fill them; use mode='scale')")
        if bad:
            raise NotImplementedError(f"SpectralClip(mode={self.mode!r}) cannot write core {slots}: " + "; ".join(bad))
        return {"slots": slots, "L": L, "blocks": blocks}

    @torch.no_grad()
    def project(self, model=None) -> list[dict]:
        """Apply the projection (to ``model``, default the one given at construction).
        Returns one dict per core: ``slots``, ``bound`` (= lam / L_act), ``norm_before``,
        ``norm_after`` and ``projected`` (False when the core was already within the bound)."""
        if model is not None and _core(model) is not _core(self.model):
            raise ValueError("SpectralClip was built for another model; build one per model")
        m = _core(self.model)
        reports = []
        for plan in self._plans:
            slots, bound = plan["slots"], self.lam / plan["L"]
            W = recurrent_matrix(m, slots)
            dtype = plan["blocks"][0][2].weight.dtype if plan["blocks"] else _F64
            shrink = _shrink(dtype, W.shape[0])
            before = float(torch.linalg.matrix_norm(W, ord=2)) if W.numel() else 0.0
            projected = False
            if self.mode == "svd":
                new = _clip(W, bound, shrink)
                if new is not None:
                    off = {}
                    total = 0
                    for i in slots:
                        off[i] = total
                        total += m.sizes[i]
                    for i, j, blk in plan["blocks"]:
                        blk.weight.copy_(new[off[i]:off[i] + m.sizes[i], off[j]:off[j] + m.sizes[j]].to(blk.weight.dtype))
                    projected = True
            elif before > bound:
                factor = bound * (1.0 - shrink) / before
                for blk in {id(b): b for _, _, b in plan["blocks"]}.values():
                    blk.weight.mul_(factor)
                projected = True
            after = float(torch.linalg.matrix_norm(recurrent_matrix(m, slots), ord=2)) if projected else before
            reports.append({"slots": slots, "bound": bound, "norm_before": before, "norm_after": after, "projected": projected})
        self.last = reports
        return reports

    __call__ = project

    def on_step_end(self, trainer, step: int) -> None:
        """Trainer hook: project after each optimizer step (projected gradient descent)."""
        self.project()

    def __repr__(self) -> str:
        return f"SpectralClip(lam={self.lam}, cores={[p['slots'] for p in self._plans]}, mode={self.mode!r})"


# ---------------------------------------------------------------------- Lemma 1: truncation
def _check_lam(lam) -> float:
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    if lam >= 1:
        raise ValueError(f"no guarantee: lambda = {lam:.6g} >= 1, the model is not certified stable, so its "
                         "truncation gap need not shrink with k (Lemma 1 needs lambda < 1)")
    return float(lam)


def _nonneg(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    return float(v)


def _state_sup(lam: float, input_bound: float, lipschitz_x: float, f0: float, h0_bound: float,
               state_bound: float | None) -> float:
    """``sup_t ||h_t|| <= max(||h_0||, (L_x B_x + ||f(0,0)||) / (1 - lam))`` (capped by state_bound)."""
    s = max(h0_bound, (lipschitz_x * input_bound + f0) / (1.0 - lam))
    return s if state_bound is None else min(s, _nonneg("state_bound", state_bound))


def lemma1_bound(lam: float, k: int, *, input_bound: float, lipschitz_x: float, f0: float = 0.0,
                 h0_bound: float = 0.0, state_bound: float | None = None) -> float:
    r"""The truncation bound: ``||h_t - h_t^k|| <= lam^k * sup_s ||h_s||`` for every ``t >= k``.

    Miller & Hardt, Lemma 1: if ``phi`` is ``lambda``-contractive in ``h`` and ``L_x``-Lipschitz
    in ``x``, ``||x_t|| <= B_x``, ``phi(0, 0) = 0`` and ``h_0 = 0``, then a truncation length
    ``k >= log_{1/lambda}(L_x B_x / ((1 - lambda) eps))`` gives ``||h_t - h_t^k|| <= eps``.
    Here with the constants of a biased RNN and an optional nonzero start.

    Derivation. The k-truncation restarts from zero ``k`` steps back, ``h^k_{t-k} = 0``, and then
    applies the same map to the same inputs (:func:`seq2d.truncated_rnn`). By contraction, for
    ``t >= k``::

        ||h_t - h^k_t|| = ||phi(h_{t-1}, x_t) - phi(h^k_{t-1}, x_t)|| <= lam ||h_{t-1} - h^k_{t-1}||
                        <= ... <= lam^k ||h_{t-k} - 0||.

    And ``||h_t|| <= ||phi(h,x) - phi(0,x)|| + ||phi(0,x) - phi(0,0)|| + ||phi(0,0)||
    <= lam ||h_{t-1}|| + L_x B_x + f0``, so ``||h_t|| <= lam^t ||h_0|| + (1 - lam^t) R`` with
    ``R = (L_x B_x + f0) / (1 - lam)``, hence ``sup ||h|| <= max(h0_bound, R)``. For an Elman
    RNN ``h = rho(W h + U x + b)``: ``lam = L_rho ||W||_2``, ``L_x = L_rho ||U||_2``,
    ``f0 = ||rho(b)||`` (see :func:`rnn_constants`); ``state_bound`` optionally caps the
    supremum by an a-priori bound (``sqrt(H)`` for tanh, whose entries lie in (-1, 1)).
    With ``h_0 = 0`` and ``t <= k`` the truncation sees the whole sequence and the gap is 0.

    Raises:
        ValueError: ``lam >= 1`` (no guarantee) or a negative constant.
    """
    lam = _check_lam(lam)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    S = _state_sup(lam, _nonneg("input_bound", input_bound), _nonneg("lipschitz_x", lipschitz_x),
                   _nonneg("f0", f0), _nonneg("h0_bound", h0_bound), state_bound)
    return lam ** k * S


def truncation_length(lam: float, eps: float, *, input_bound: float, lipschitz_x: float, f0: float = 0.0,
                      h0_bound: float = 0.0, state_bound: float | None = None) -> int:
    """The smallest ``k >= 1`` with ``lemma1_bound(lam, k, ...) <= eps``: a k-truncated model is
    then within ``eps`` of the recurrent one at every step. With ``c = rnn_constants(rnn)``:
    ``truncation_length(eps=1e-3, input_bound=B, **c)``.

    Raises:
        ValueError: ``lam >= 1`` ("no guarantee"), ``eps <= 0``.
    """
    lam = _check_lam(lam)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or not math.isfinite(eps):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    kw = dict(input_bound=input_bound, lipschitz_x=lipschitz_x, f0=f0, h0_bound=h0_bound, state_bound=state_bound)
    S = lemma1_bound(lam, 0, **kw)
    if S <= eps:
        return 1
    if lam == 0:
        return 1
    k = max(1, math.ceil(math.log(S / eps) / math.log(1.0 / lam)))
    while lemma1_bound(lam, k, **kw) > eps:  # guard against rounding in the logarithms
        k += 1
    while k > 1 and lemma1_bound(lam, k - 1, **kw) <= eps:
        k -= 1
    return k


def rnn_constants(rnn, layer: int = 1) -> dict:
    """Lemma 1's constants of one layer (1-based) of a ``seq2d.RNN`` or ``torch.nn.RNN``:
    ``lam = L_rho ||W_hh||_2``, ``lipschitz_x = L_rho ||W_ih||_2``, ``f0 = ||rho(b)||_2``
    (``phi(0, 0)`` of the layer; ``b`` = the layer's total bias) and ``state_bound``
    (``sqrt(H)`` for tanh, None for relu). Exact norms (float64 SVD). The keys are exactly the
    keyword arguments of :func:`lemma1_bound` / :func:`truncation_length`. For a stack, the
    input of layer ``l > 1`` is layer ``l - 1``'s state: see :func:`stacked_lemma1_bound`.
    """
    from .recurrent import RNN

    if isinstance(rnn, RNN):
        L = rnn.num_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= L:
            raise ValueError(f"layer must be in 1 .. {L}, got {layer!r}")
        wih, whh = rnn.layer_blocks(layer)
        act = rnn.core.acts[layer]
        Lr = lipschitz(act)
        if Lr is None:
            raise ValueError(f"layer {layer}'s activation {type(act).__name__} has no known Lipschitz constant")
        name = activation_name(act)
        W_ih, W_hh, b = wih.effective_weight(), whh.effective_weight(), rnn.core.bias(layer)
    elif isinstance(rnn, nn.RNN):
        L = rnn.num_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= L:
            raise ValueError(f"layer must be in 1 .. {L}, got {layer!r}")
        if rnn.bidirectional:
            raise ValueError("rnn_constants: bidirectional RNNs are not supported")
        l = layer - 1
        W_ih, W_hh = getattr(rnn, f"weight_ih_l{l}"), getattr(rnn, f"weight_hh_l{l}")
        b = getattr(rnn, f"bias_ih_l{l}") + getattr(rnn, f"bias_hh_l{l}") if rnn.bias else None
        name, Lr = rnn.nonlinearity, 1.0
        act = torch.tanh if name == "tanh" else torch.relu
    else:
        raise TypeError(f"rnn_constants expects a seq2d.RNN or a torch.nn.RNN, got {type(rnn).__name__}")
    with torch.no_grad():
        H = W_hh.shape[0]
        b64 = torch.zeros(H, dtype=_F64) if b is None else b.detach().to(_F64).cpu()
        f0 = float(act(b64).norm())
        return {"lam": Lr * spectral_norm(W_hh, exact_below=1 << 30),
                "lipschitz_x": Lr * spectral_norm(W_ih, exact_below=1 << 30),
                "f0": f0, "state_bound": math.sqrt(H) if name in ("tanh", "sigmoid") else None}


def _stack_terms(layers: Sequence[dict], input_bound: float) -> list[tuple[float, float, float]]:
    if not layers:
        raise ValueError("layers must hold one rnn_constants dict per layer, got none")
    out, B = [], _nonneg("input_bound", input_bound)
    for c in layers:
        lam = _check_lam(c["lam"])
        Lx = _nonneg("lipschitz_x", c["lipschitz_x"])
        S = _state_sup(lam, B, Lx, _nonneg("f0", c.get("f0", 0.0)), 0.0, c.get("state_bound"))
        out.append((lam, Lx, S))
        B = S  # the next layer's input is this layer's state
    return out


def _stack_gaps(terms: list[tuple[float, float, float]]):
    """Yield ``(j, e_L(j))`` for j = 0, 1, 2, ... (the recursion of :func:`stacked_lemma1_bound`)."""
    e = [S for _, _, S in terms]  # e_l(0) = S_l
    j = 0
    yield j, e[-1]
    while True:
        j += 1
        below = 0.0  # e_0 = 0: the input itself is the same for both models
        for l, (lam, Lx, _) in enumerate(terms):
            e[l] = lam * e[l] + Lx * below
            below = e[l]
        yield j, e[-1]


def stacked_lemma1_bound(layers: Sequence[dict], k: int, *, input_bound: float) -> float:
    r"""Lemma 1 for a stack of RNN layers (``layers[l] = rnn_constants(rnn, l + 1)``): a bound on
    ``||h^L_t - h^{L,k}_t||``, the last layer's gap to the k-truncation (every layer restarted
    from zero ``k`` steps back, as :func:`seq2d.truncated_rnn` does), from a zero start.

    With ``S_l`` the state bound of layer ``l`` (``S_l = (L_x^l S_{l-1} + f0_l) / (1 - lam_l)``,
    ``S_0 = B_x``) and ``e_l(j)`` the gap of layer ``l`` after ``j`` steps of the window::

        e_l(0) <= S_l,    e_l(j) <= lam_l e_l(j-1) + L_x^l e_{l-1}(j),    e_0 = 0,

    since layer ``l``'s input is layer ``l-1``'s state, whose gap is ``e_{l-1}`` (contraction
    in the state plus Lipschitz in the input). The bound is ``e_L(k)``; for one layer it is
    :func:`lemma1_bound`. It need not decrease in ``k`` at first (terms like ``k lam^k``).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    for j, e in _stack_gaps(_stack_terms(layers, input_bound)):
        if j == k:
            return e
    raise AssertionError("unreachable")  # pragma: no cover


def stacked_truncation_length(layers: Sequence[dict], eps: float, *, input_bound: float, k_max: int = 10_000_000) -> int:
    """The smallest ``k >= 1`` with ``stacked_lemma1_bound(layers, k) <= eps``.

    Raises:
        ValueError: some layer has ``lam >= 1`` ("no guarantee"), ``eps <= 0``, or no ``k <= k_max``.
    """
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or not math.isfinite(eps):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    for j, e in _stack_gaps(_stack_terms(layers, input_bound)):
        if j >= 1 and e <= eps:
            return j
        if j >= k_max:
            raise ValueError(f"no k <= {k_max} brings the stacked Lemma 1 bound below eps = {eps}")
    raise AssertionError("unreachable")  # pragma: no cover
