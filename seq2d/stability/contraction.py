r"""Contraction constants of the recurrent cores: lambda certified for every input, lambda
measured on data, and the constants of an Elman RNN layer.

A state map ``h_t = phi(h_{t-1}, x_t)`` is *lambda-stable* when it is a contraction in ``h``::

    ||phi(h, x) - phi(h', x)|| <= lambda ||h - h'||,   lambda < 1.

For the Elman RNN ``h_t = rho(W h_{t-1} + U x_t + b)`` with an elementwise ``rho`` whose
Lipschitz constant is ``L_rho`` this holds with ``lambda = L_rho ||W||_2`` (the paper's
sufficient condition ``||W|| < 1 / L_rho``).

What each function computes (:func:`certified_lambda`, :func:`data_lambda`,
:func:`rnn_constants`) is tabled in the package docstring, :mod:`seq2d.stability`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..errors import InvalidInput, InvalidType, InvalidValue
from ..activations import activation_name, lipschitz
from ..core import Sequential2D, core_of
from ..threads import threads_at_most
from .result import DataLambda
from .spectral import _F64, _cores, recurrent_matrix, spectral_norm, spectral_norm_bound

__all__ = ["certified_lambda", "data_lambda", "rnn_constants"]


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
    from ..graph import memory

    m = core_of(model)
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


def data_lambda(model, xs: Tensor, *, iters: int = 20, generator: torch.Generator | None = None,
                method: str = "auto") -> DataLambda:
    """The state Jacobian's spectral norm along the real trajectory of ``model`` on ``xs``.

    ``model`` (a Sequential2D or seq2d.RNN) runs in sequence mode with pipelining, exactly as
    :meth:`Sequential2D.sequence` (zero initial state) on ``xs`` of shape ``(T, B, in_features)``
    (time first, also for a ``batch_first`` RNN; ``(T, in_features)`` is one sequence). At every
    step ``s`` where all of a core's slots are updated, the map ``z -> (the core's slots after the
    step)``, with ``z`` the core's slots before it and every other slot fixed at its trajectory
    value, has a Jacobian ``J_s`` (per sequence); its spectral norm is estimated by ``iters``
    rounds of power iteration on ``J_s^T J_s`` from a random start (``generator``), all
    sequences at once (they are independent). Each estimate is ``||J_s v||`` for a unit ``v``, a
    lower bound on ``||J_s||_2 <= L_act ||W_rec||_2``, so the result never exceeds
    :func:`certified_lambda`.

    ``method``: how ``J_s`` is applied. ``"closed"``: in closed form, ``J_s = diag(act'(a_s))
    W_rec`` with ``act'`` read from the slot values after the step (``1 - h^2`` for tanh,
    ``h > 0`` for relu, ``h (1 - h)`` for sigmoid, 1 for identity) and every step's power
    iteration in one batch of products, float64; for a core of linear and identity blocks whose
    slots have those activations. ``"autograd"``: ``torch.func.jvp``/``vjp`` through the model's
    step, one step at a time (any core; much slower: benchmarks/data_lambda.py). ``"auto"`` (the
    default): closed form where a core allows it, else autograd. Both draw the same start vectors
    from ``generator`` and run the same iteration, so they agree to rounding (tests/test_stability.py).

    Returns a :class:`~seq2d.stability.result.DataLambda`, a dict with a short repr:
    ``cores``: per core ``slots``, ``max`` and ``mean`` over steps and sequences, ``per_step``
    (a float64 tensor ``(steps, B)``), ``steps`` (the sequence-mode step indices measured);
    ``max``: the max over cores (0.0 without cores); ``mean``: the mean over every measured
    value. A multi-layer RNN has one core per layer.

    An ``nn.LSTM`` is not a Sequential2D: it is refused here (``InvalidType``), and measured by
    ``seq2d.lab.lstm.lstm_data_lambda`` (the stable-RNN experiment's machinery: the exact
    Jacobian of each layer's ``(h, c)`` step, in the same :class:`DataLambda`).
    """
    if isinstance(model, nn.LSTM):
        raise InvalidType("data_lambda measures a Sequential2D (or a wrapper with .core), got an nn.LSTM: "
                          "measure it with seq2d.lab.lstm.lstm_data_lambda(lstm, xs)")
    m = core_of(model)
    if not isinstance(xs, Tensor):
        raise InvalidType(f"xs must be a tensor of shape (T, B, {m.in_features}), got {type(xs).__name__}")
    if xs.dim() == 2:
        xs = xs.unsqueeze(1)
    if xs.dim() != 3 or xs.shape[-1] != m.in_features:
        raise InvalidInput(f"xs must have shape (T, B, {m.in_features}) (time first), got {tuple(xs.shape)}")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise InvalidValue(f"iters must be a positive int, got {iters!r}")
    if method not in _METHODS:
        raise InvalidValue(f"method: unknown value {method!r}. Select from " + ", ".join(map(repr, _METHODS)))
    ref = m._param_ref()
    if ref is not None:
        xs = xs.to(device=ref.device, dtype=ref.dtype)
    cores = _cores(m)
    if not cores:
        return DataLambda(cores=[], max=0.0, mean=0.0)
    closed = [None if method == "autograd" else _closed_form(m, slots) for slots in cores]
    if method == "closed" and None in closed:
        c = closed.index(None)
        raise InvalidValue(f"method='closed': core {cores[c]} has a module block or an activation without a closed-form "
                           "derivative (closed form: linear and identity blocks; identity, relu, tanh or sigmoid slots); "
                           "use method='auto' or 'autograd'")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    B = xs.shape[1]
    # closed form only and small: one thread (ONE_THREAD_BELOW); the autograd path runs as it always did
    small = None not in closed and B * m.flat_size ** 2 < ONE_THREAD_BELOW
    with threads_at_most(1 if small else torch.get_num_threads()):
        found, steps = _measure(m, xs, cores, closed, iters, generator)
    out, allv = [], []
    for slots, vals, st in zip(cores, found, steps):
        per = torch.stack(vals).to(_F64).cpu() if vals else torch.zeros(0, B, dtype=_F64)
        allv.append(per.reshape(-1))
        out.append({"slots": slots, "max": float(per.max()) if per.numel() else 0.0,
                    "mean": float(per.mean()) if per.numel() else 0.0, "per_step": per, "steps": st})
    flat = torch.cat(allv)
    return DataLambda(cores=out, max=max(r["max"] for r in out), mean=float(flat.mean()) if flat.numel() else 0.0)


def _measure(m: Sequential2D, xs: Tensor, cores, closed, iters: int, generator) -> tuple[list, list]:
    """Run the trajectory of :func:`data_lambda` and measure every core at every step where all its
    slots are updated (closed form or autograd, per core): ``(values per core, steps per core)``."""
    T, B = xs.shape[0], xs.shape[1]
    held = set(m.held())
    rows = [i for i in range(m.n) if i not in held]
    d = m.delays()
    D = max((d[i] for i in rows), default=0)
    state: list[Tensor | None] = [None] * m.n
    found: list[list[Tensor]] = [[] for _ in cores]
    steps: list[list[int]] = [[] for _ in cores]
    starts: list[list[Tensor]] = [[] for _ in cores]  # closed form: the start vectors, in the autograd path's order
    derivs: list[list[Tensor]] = [[] for _ in cores]  # closed form: act'(a_s), read from the state after step s
    for s in range(T + D):
        if s < T:
            parts = m.split_inputs(xs[s])
            for i in m.inputs:
                state[i] = parts[i]
        active = {i for i in rows if d[i] <= s < T + d[i]}
        hold = sorted(set(rows) - active)
        measured = [c for c, slots in enumerate(cores) if set(slots) <= active]
        for c in measured:
            if closed[c] is None:
                found[c].append(_jacobian_norm(m, state, cores[c], hold, iters, generator))
            else:
                starts[c].append(_start(generator, B, closed[c][0].shape[0], xs))
            steps[c].append(s)
        with torch.no_grad():
            state = [None if x is None else x.detach() for x in m(state, 1, hold=hold)]
        for c in measured:
            if closed[c] is not None:
                derivs[c].append(_derivative(state, cores[c], closed[c][1], B, xs))
    for c, form in enumerate(closed):
        if form is not None and starts[c]:
            found[c] = list(_closed_norms(form[0], torch.stack(derivs[c]), torch.stack(starts[c]), iters))
    return found, steps


_METHODS = ("auto", "closed", "autograd")

# d act(a) / d a as a function of h = act(a): the derivative the closed form reads from the state
_DERIVATIVE_FROM_OUTPUT = {
    "identity": lambda h: torch.ones_like(h),
    "tanh": lambda h: 1 - h * h,
    "relu": lambda h: (h > 0).to(h.dtype),
    "sigmoid": lambda h: h * (1 - h),
}


def _closed_form(m: Sequential2D, slots: list[int]):
    """``(W_rec, [(size, act, act') per slot])`` when the core's step Jacobian is
    ``diag(act'(a)) W_rec`` with ``act'`` readable from the slot values (linear and identity
    blocks, elementwise activations of :data:`_DERIVATIVE_FROM_OUTPUT`), else None."""
    names = [activation_name(m.acts[i]) for i in slots]
    if any(n not in _DERIVATIVE_FROM_OUTPUT for n in names):
        return None
    try:
        W = recurrent_matrix(m, slots)  # float64; raises for a module block inside the core
    except ValueError:
        return None
    return W, [(m.sizes[i], m.acts[i], _DERIVATIVE_FROM_OUTPUT[n]) for i, n in zip(slots, names)]


def _start(generator, B: int, k: int, like: Tensor) -> Tensor:
    """The start vector of one step's power iteration: the draw (and the rounding to the model's
    dtype) of :func:`_jacobian_norm`, so both paths start from the same vectors; float64."""
    v = torch.randn((B, k), generator=generator, dtype=_F64).to(device=like.device, dtype=like.dtype).to(_F64)
    return v / v.norm(dim=-1, keepdim=True)


def _derivative(state, slots, parts, B: int, like: Tensor) -> Tensor:
    """``act'(a)`` of the core's slots (concatenated; float64 ``(B, k)``) from their values after
    the step; a slot left None (nothing reached it) holds ``act(0)``."""
    out = []
    for i, (size, act, deriv) in zip(slots, parts):
        h = state[i]
        if h is None:
            with torch.no_grad():
                h = act(like.new_zeros(B, size))
        out.append(deriv(h.detach().to(_F64)))
    return torch.cat(out, dim=-1)


# A product of fewer multiply-adds than this runs on one thread: too small to gain from threads,
# and a thread descheduled by other processes' load stalls it (a (200, 32) x (32, 32) GEMM took
# 7 ms with 2 threads at load average 9 on 2 cores, 37 us with 1; docs/performance.md, "Threads
# under load").
ONE_THREAD_BELOW = 1 << 24


def _closed_norms(W: Tensor, dg: Tensor, v: Tensor, iters: int, chunk: int = 1 << 22) -> Tensor:
    """The power iteration of :func:`_jacobian_norm` with ``J = diag(dg) W`` for every step and
    sequence at once: ``dg``, ``v`` ``(S, B, k)`` -> ``||J v||`` ``(S, B)``; steps in chunks of at
    most ``chunk`` values (memory)."""
    S, B, k = dg.shape
    per = max(1, chunk // max(B * k, 1))
    out = []
    Wt = W.T
    tiny = torch.finfo(_F64).tiny
    small = min(per, S) * B * k * k < ONE_THREAD_BELOW
    with torch.no_grad(), threads_at_most(1 if small else torch.get_num_threads()):
        for a in range(0, S, per):
            g, x = dg[a:a + per], v[a:a + per]
            u = g * (x @ Wt)  # J v
            for _ in range(iters):
                w = (g * u) @ W  # J^T u
                n = w.norm(dim=-1, keepdim=True)
                x = torch.where(n > 0, w / n.clamp_min(tiny), x)
                u = g * (x @ Wt)
            out.append(u.norm(dim=-1))
    return torch.cat(out)


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
        with warnings.catch_warnings():
            # The first torch.func.jvp of a process loads torch's forward-AD decompositions,
            # and that loader (torch/_decomp/decompositions_for_jvp.py, not seq2d) calls the
            # deprecated torch.jit.script: a FutureWarning nobody running seq2d can act on.
            # Only that warning is silenced, only around this call.
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
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


def rnn_constants(rnn, layer: int = 1) -> dict:
    """Lemma 1's constants of one layer (1-based) of a ``seq2d.RNN`` or ``torch.nn.RNN``:
    ``lam = L_rho ||W_hh||_2``, ``lipschitz_x = L_rho ||W_ih||_2``, ``f0 = ||rho(b)||_2``
    (``phi(0, 0)`` of the layer; ``b`` = the layer's total bias) and ``state_bound``
    (``sqrt(H)`` for tanh, None for relu). Exact norms (float64 SVD). The keys are exactly the
    keyword arguments of :func:`~seq2d.stability.lemma1_bound` / :func:`~seq2d.stability.truncation_length`. For a
    stack, the input of layer ``l > 1`` is layer ``l - 1``'s state: see
    :func:`~seq2d.stability.stacked_lemma1_bound`.
    """
    from ..models.recurrent import RNN

    if isinstance(rnn, RNN):
        L = rnn.num_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= L:
            raise InvalidValue(f"layer must be in 1 .. {L}, got {layer!r}")
        wih, whh = rnn.layer_blocks(layer)
        act = rnn.core.acts[layer]
        Lr = lipschitz(act)
        if Lr is None:
            raise InvalidValue(f"layer {layer}'s activation {type(act).__name__} has no known Lipschitz constant")
        name = activation_name(act)
        W_ih, W_hh, b = wih.effective_weight(), whh.effective_weight(), rnn.core.bias(layer)
    elif isinstance(rnn, nn.RNN):
        L = rnn.num_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= L:
            raise InvalidValue(f"layer must be in 1 .. {L}, got {layer!r}")
        if rnn.bidirectional:
            raise InvalidValue("rnn_constants: bidirectional RNNs are not supported")
        l = layer - 1
        W_ih, W_hh = getattr(rnn, f"weight_ih_l{l}"), getattr(rnn, f"weight_hh_l{l}")
        b = getattr(rnn, f"bias_ih_l{l}") + getattr(rnn, f"bias_hh_l{l}") if rnn.bias else None
        name, Lr = rnn.nonlinearity, 1.0
        act = torch.tanh if name == "tanh" else torch.relu
    else:
        raise InvalidType(f"rnn_constants expects a seq2d.RNN or a torch.nn.RNN, got {type(rnn).__name__}")
    with torch.no_grad():
        H = W_hh.shape[0]
        b64 = torch.zeros(H, dtype=_F64) if b is None else b.detach().to(_F64).cpu()
        f0 = float(act(b64).norm())
        return {"lam": Lr * spectral_norm(W_hh, exact_below=1 << 30),
                "lipschitz_x": Lr * spectral_norm(W_ih, exact_below=1 << 30),
                "f0": f0, "state_bound": math.sqrt(H) if name in ("tanh", "sigmoid") else None}
