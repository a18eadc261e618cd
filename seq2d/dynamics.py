r"""The iteration map of a Sequential2D as a dynamical system: the states it visits, a linear
(DMD) model fitted to them, and the spectral radius of its Jacobian.

A Sequential2D iterates ``x <- F(x)`` over its slots (docs/concepts.md); with its input slots
held, the map on the *updated* (non-held) slots ``z`` is ``z <- f(z; u)`` for a fixed input
``u``. Near a fixed point ``z*`` the distance shrinks like ``rho^t``, ``rho`` the spectral radius
of ``J = d f / d z`` there: a small ``rho`` means few steps are needed; an acyclic model (an
MLP) has a nilpotent ``J`` (``rho = 0``) and stops moving after ``depth`` steps. Koopman /
DMD (Hershey et al.'s open question 3) fits one linear operator to the trajectories instead.

====================================  =====================================================
:func:`record_states`                 the concatenated state after each step,
                                      ``(steps + 1, *batch, N)``, ``N = sum(sizes)``
:func:`dmd`                           exact DMD (Tu et al. 2014) of a batch of trajectories,
                                      Hankel / delay-embedded when ``delays > 1``:
                                      :class:`DMDResult`
:func:`jacobian_spectral_radius`      ``max |eig(d step / d z)|`` at a state, per sample
:func:`iteration_spectrum`            the three together on a model and a data batch:
                                      :class:`IterationSpectrum`
====================================  =====================================================

Symbols: ``T + 1`` snapshots (time first), ``M`` trajectories (the flattened batch), ``N`` the
observable's width, ``d`` = ``delays``, ``D = d N`` the delay-embedded width, ``r`` the rank.

**Why our own DMD, not pydmd or pykoopman** (checked: pydmd 2025.8.1, pykoopman 1.2.1, the
wheels read in full). pykoopman pins ``torch~=2.1``, ``numpy<=1.26`` and ``pydmd<=0.4.1``: it
cannot be installed next to this project's torch. pydmd's ``import pydmd`` imports its
``EDMD``, ``LANDO`` and ``CoSTS`` modules, so it needs scikit-learn and xarray (with pandas,
joblib, narwhals: 163 MB installed next to numpy, scipy and matplotlib, measured with ``pip install
--target``), and it declares h5netcdf (h5py); none is a seq2d dependency. It works on numpy arrays on the
CPU (a CUDA state would be copied to the host); its ``HankelDMD`` fits a single trajectory, and
``DMD.fit(X, Y)`` takes snapshot pairs, so a batch of trajectories (one per data sample, as
here) has to be paired by the caller anyway, which is most of exact DMD. Exact DMD itself is an
SVD, a small matrix and its eigendecomposition (:func:`dmd`, about 30 lines), in torch on the
state's device, in float64. Where pydmd is installed, tests/test_dynamics.py checks that both
give the same eigenvalues.

**What "the Jacobian" is here.** Held slots keep their value (an identity row: eigenvalue 1 for
each held unit, whatever the weights), so :func:`jacobian_spectral_radius` differentiates the
map on the updated slots only (``slots``: default every non-held slot), the others fixed at the
given state. It uses reverse-mode autograd only (``torch.autograd.grad``; also the tiled store's
kernels, which torch.func cannot transform), and ``J^T`` has the spectrum of ``J``:

- ``n <= exact_below`` (``n`` = the width of ``slots``): the full Jacobian of every sample, one
  backward pass per row (all samples at once: a step treats samples independently), then
  ``torch.linalg.eigvals`` in float64: exact up to rounding.
- larger ``n``: ``krylov`` steps of Arnoldi on ``J^T`` (one backward pass each, every sample at
  once, twice-orthogonalised in float64), the largest ``|Ritz value|``: an *estimate*, exact when
  the Krylov space becomes invariant (it stops early, e.g. at ``0`` for an MLP) and otherwise
  usually below the true value for a Jacobian whose eigenvalues fill a disk; double ``krylov`` to
  check it converged.

``rho`` describes the asymptotic rate; a non-normal ``J`` can still grow a perturbation for a
few steps (its spectral norm, :func:`seq2d.stability.data_lambda` for sequence mode, bounds that).
Sequence mode (inputs refilled every step, the RNN form) is a driven system and not what
:func:`record_states` records; token states ``(B, T, d)`` (attention couples the tokens) are
not supported by :func:`jacobian_spectral_radius`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .core import Sequential2D, core_of
from .core.checks import check_steps
from .errors import InvalidInput, InvalidType, InvalidValue

__all__ = ["DMDResult", "IterationSpectrum", "dmd", "iteration_spectrum", "jacobian_spectral_radius",
           "record_states", "updated_slots"]

_F64, _C128 = torch.float64, torch.complex128


# ---------------------------------------------------------------------------- states
def updated_slots(model) -> list[int]:
    """The slots a step updates (every non-held slot), in increasing order."""
    m = core_of(model)
    held = set(m.held())
    return [i for i in range(m.n) if i not in held]


def _columns(m: Sequential2D, slots: Sequence[int] | None = None, flat: bool = False) -> Tensor | None:
    """Column indices of ``slots`` (default: all) in the concatenated state (``flat=False``) or in
    the model's flat state (``flat=True``, tile padding skipped); None when that is every column
    in order (no gather needed)."""
    off = m.flat_offsets if flat else m.offsets
    slots = list(range(m.n)) if slots is None else list(slots)
    if slots == list(range(m.n)) and off == m.offsets:
        return None
    return torch.cat([torch.arange(off[i], off[i] + m.sizes[i]) for i in slots])


def _check_slots(m: Sequential2D, slots) -> list[int]:
    if slots is None:
        return updated_slots(m)
    if isinstance(slots, (str, bytes)) or not isinstance(slots, Sequence) or not slots:
        raise InvalidValue(f"slots must be a non-empty list of slot indices (0 .. {m.n - 1}), got {slots!r}")
    for i in slots:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < m.n:
            raise InvalidValue(f"slots must name slots of the model (0 .. {m.n - 1}), got {list(slots)}")
    return sorted(set(slots))


def _concat(m: Sequential2D, state, cols: Tensor | None) -> Tensor:
    """A state list as the concatenated ``(*batch, N)`` tensor (None slots as zeros)."""
    flat = m.to_flat(state)[0]
    return flat if cols is None else flat[..., cols.to(flat.device)]


def record_states(model, x, steps: int, **context) -> Tensor:
    """The state after each of ``steps`` steps, from the state ``x`` gives.

    ``x``: a data batch ``(*batch, in_features)``, filled into the input slots as the tensor call
    does (every other slot starts absent, i.e. zero), or a state list of ``n`` slots. Returns
    ``S`` of shape ``(steps + 1, *batch, N)``, ``N = sum(sizes)`` (slots concatenated in order,
    ``model.offsets``; a slot absent at time ``t`` is zeros; the tiled store's padding removed),
    with ``S[0]`` the initial state and ``S[t] = step^t(x)``, equal to the docstring loop::

        state = x
        for t in range(1, steps + 1):
            state = model.step(state)        # S[t] = state, slots concatenated

    Steps run through the model's own API: :meth:`~seq2d.Sequential2D.step` while some slot is
    still absent (absent slots' module blocks are skipped, as the loop says), then
    :meth:`~seq2d.Sequential2D.step_flat` on the flat state. No gradient is recorded. ``context``:
    the call-time keywords of the model's context blocks.
    """
    m = core_of(model)
    steps = check_steps(steps)
    if isinstance(x, Tensor):
        state = m.split_inputs(x)
    elif isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        state = list(x)
    else:
        raise InvalidType(f"x must be a tensor (*batch, {m.in_features}) or a state list of {m.n} slots, "
                          f"got {type(x).__name__}")
    state = m.check_state(state)
    cols = _columns(m, flat=True)
    with torch.no_grad():
        flat, present = m.to_flat(state)
        first = flat if cols is None else flat[..., cols.to(flat.device)]
        out = first.new_empty((steps + 1, *first.shape))
        out[0] = first
        for t in range(1, steps + 1):
            if len(present) < m.n:  # some slot still absent: the list API tracks it
                state = m.step(state, **context)
                flat, present = m.to_flat(state)
            else:
                flat = m.step_flat(flat, **context)
            out[t] = flat if cols is None else flat[..., cols.to(flat.device)]
    return out


# ---------------------------------------------------------------------------- DMD
@dataclass
class DMDResult:
    """An exact DMD fit (see :func:`dmd`); tensors on the snapshots' device, float64/complex128.

    Attributes:
        eigenvalues: ``(r,)`` complex, the eigenvalues of the fitted operator (per step).
        modes: ``(D, r)`` complex exact DMD modes; rows ``k N .. (k + 1) N`` belong to delay ``k``.
        amplitudes: ``(M, r)`` complex, per trajectory: ``modes @ amplitudes[m]`` is the
            least-squares fit of its first (delay-embedded) snapshot.
        operator: ``(r, r)`` the reduced operator ``U_r^T Y V_r S_r^{-1}``.
        basis: ``(D, r)`` the POD basis ``U_r`` (the leading left singular vectors of ``X``).
        singular_values: every singular value of ``X`` (the rank choice can be read off them).
        rank: ``r``, the rank used; delays: ``d``.
        reconstruction_error: ``||Z_hat - Z||_F / ||Z||_F`` over every (delay-embedded) snapshot
            of every trajectory, ``Z_hat`` the fitted model run from each trajectory's first
            snapshot: ``z_hat_t = U_r A_r^t U_r^T z_0`` (``= modes diag(lambda^t) b`` with the
            projected modes when ``A_r`` is diagonalisable, and defined when it is not, e.g.
            the nilpotent map of an acyclic model). 0.0 when ``Z`` is all zeros.
        residual: the one-step error ``||Y - U_r A_r U_r^T X||_F / ||Y||_F``.
    """

    eigenvalues: Tensor
    modes: Tensor
    amplitudes: Tensor
    operator: Tensor
    basis: Tensor
    singular_values: Tensor
    rank: int
    delays: int
    reconstruction_error: float
    residual: float

    @property
    def spectral_radius(self) -> float:
        """``max |eigenvalue|`` (0.0 at rank 0)."""
        return float(self.eigenvalues.abs().max()) if self.rank else 0.0

    def as_dict(self) -> dict:
        """The scalars and the eigenvalues (as ``[re, im]`` pairs), for JSON."""
        ev = self.eigenvalues.cpu()
        return {"rank": self.rank, "delays": self.delays, "spectral_radius": self.spectral_radius,
                "reconstruction_error": self.reconstruction_error, "residual": self.residual,
                "eigenvalues": [[float(z.real), float(z.imag)] for z in ev]}


def dmd(snapshots: Tensor, rank: int | None = None, delays: int = 1, *, rtol: float | None = None) -> DMDResult:
    r"""Exact DMD of a batch of trajectories (Tu et al. 2014), Hankel when ``delays > 1``.

    ``snapshots``: ``(T + 1, *batch, N)``, time first (what :func:`record_states` returns), or
    ``(T + 1, N)`` for one trajectory. Each trajectory is delay-embedded,
    ``z_t = [x_t; x_{t+1}; ...; x_{t+d-1}]`` (``t = 0 .. T + 1 - d``), and one operator ``A`` is
    fitted to every pair ``z_t -> z_{t+1}`` of every trajectory: ``X`` and ``Y`` (``D x P``)
    hold the pairs' columns, ``X = U S V^T`` truncated to rank ``r``, ``A_r = U_r^T Y V_r S_r^{-1}
    = W diag(lambda) W^{-1}``, and the exact modes are ``Y V_r S_r^{-1} w_k / lambda_k``
    (``U_r w_k`` for ``lambda_k = 0``), so that ``A Y X^+`` maps each mode to ``lambda_k`` times it.

    ``rank``: an int ``r >= 1`` (at most the numerical rank), or None for the numerical rank:
    singular values above ``rtol * s_max``, ``rtol`` defaulting to ``max(D, P)`` times the
    snapshots' dtype epsilon (float32 data: noise directions below that would add eigenvalues of
    rounding errors). Computed in float64 on the snapshots' device.
    """
    if not isinstance(snapshots, Tensor):
        raise InvalidType(f"snapshots must be a tensor (T + 1, *batch, N), got {type(snapshots).__name__}")
    if snapshots.dim() < 2 or not (snapshots.is_floating_point() or snapshots.is_complex()):
        raise InvalidInput(f"snapshots must be a floating tensor of shape (T + 1, *batch, N), got "
                           f"{snapshots.dtype} of shape {tuple(snapshots.shape)}")
    if isinstance(delays, bool) or not isinstance(delays, int) or delays < 1:
        raise InvalidValue(f"delays must be a positive int, got {delays!r}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise InvalidValue(f"rank must be a positive int or None (the numerical rank), got {rank!r}")
    T1, N = snapshots.shape[0], snapshots.shape[-1]
    windows = T1 - delays + 1  # delay-embedded snapshots per trajectory
    if windows < 2:
        raise InvalidInput(f"dmd needs at least delays + 1 = {delays + 1} snapshots (time is dimension 0), "
                           f"got {T1}; record more steps or use fewer delays")
    eps = torch.finfo(snapshots.real.dtype if snapshots.is_complex() else snapshots.dtype).eps
    S = snapshots.detach().reshape(T1, -1, N).to(_C128 if snapshots.is_complex() else _F64)
    Z = torch.cat([S[k:k + windows] for k in range(delays)], dim=-1)  # (windows, M, D)
    M, D = Z.shape[1], Z.shape[2]
    X = Z[:-1].reshape(-1, D).T  # (D, P): every pair of every trajectory, time-major
    Y = Z[1:].reshape(-1, D).T
    U, s, Vh = torch.linalg.svd(X, full_matrices=False)
    tol = (max(X.shape) * eps if rtol is None else rtol) * (float(s[0]) if s.numel() else 0.0)
    numerical = int((s > tol).sum()) if s.numel() and float(s[0]) > 0 else 0
    if rank is not None and rank > numerical:
        raise InvalidValue(f"rank {rank} exceeds the numerical rank {numerical} of the snapshots "
                           f"(singular values {[round(float(v), 6) for v in s[:numerical + 2]]} ...)")
    r = numerical if rank is None else rank
    Ur, sr, Vr = U[:, :r], s[:r], Vh[:r].mH
    YVS = (Y @ Vr) / sr  # (D, r)
    A = Ur.mH @ YVS  # (r, r)
    lam, W = torch.linalg.eig(A) if r else (torch.zeros(0, dtype=_C128, device=S.device), None)
    if r:
        exact = (YVS.to(_C128) @ W)
        nonzero = lam.abs() > eps * max(1.0, float(lam.abs().max()))
        modes = torch.where(nonzero, exact / torch.where(nonzero, lam, torch.ones_like(lam)), Ur.to(_C128) @ W)
        amplitudes = (torch.linalg.pinv(modes) @ Z[0].T.to(_C128)).T  # (M, r)
    else:
        modes = torch.zeros(D, 0, dtype=_C128, device=S.device)
        amplitudes = torch.zeros(M, 0, dtype=_C128, device=S.device)
    a = Z[0] @ Ur.conj()  # (M, r) reduced coordinates; the model run from each first snapshot
    err2 = torch.zeros((), dtype=_F64, device=S.device)
    for t in range(windows):
        err2 = err2 + (a @ Ur.T - Z[t]).abs().square().sum()
        a = a @ A.T
    total = Z.abs().square().sum()
    recon = float((err2 / total).sqrt()) if float(total) > 0 else 0.0
    ynorm = float(torch.linalg.matrix_norm(Y))
    res = float(torch.linalg.matrix_norm(Y - Ur @ (A @ (Ur.mH @ X)))) / ynorm if ynorm > 0 else 0.0
    return DMDResult(eigenvalues=lam, modes=modes, amplitudes=amplitudes, operator=A, basis=Ur,
                     singular_values=s, rank=r, delays=delays, reconstruction_error=recon, residual=res)


# ---------------------------------------------------------------------------- the Jacobian
def _as_concat(m: Sequential2D, state) -> Tensor:
    """A state (list, or the concatenated ``(B, N)`` tensor) as the concatenated ``(B, N)`` tensor."""
    N = m.offsets[-1]
    if isinstance(state, Tensor):
        if state.dim() != 2 or state.shape[-1] != N:
            raise InvalidInput(f"state must be the concatenated state (B, {N}) (slots in order, as record_states "
                               f"returns each step) or a state list; got shape {tuple(state.shape)}")
        return state
    if isinstance(state, Sequence) and not isinstance(state, (str, bytes)):
        st = m.check_state(list(state))
        x = _concat(m, st, _columns(m, flat=True))
        if x.dim() != 2:
            raise InvalidInput(f"state slots must have shape (B, size), got batch dims {tuple(x.shape[:-1])}")
        return x
    raise InvalidType(f"state must be a tensor (B, {N}) or a state list of {m.n} slots, got {type(state).__name__}")


def jacobian_spectral_radius(model, state, *, slots: Sequence[int] | None = None, exact_below: int = 512,
                             krylov: int = 64, generator: torch.Generator | None = None, **context) -> Tensor:
    """The spectral radius of one step's Jacobian at ``state``, per sample: ``(B,)`` float64.

    ``J_b = d step(x)[slots] / d x[slots]`` for sample ``b``, every other slot fixed at its value
    in ``state`` (the concatenated ``(B, N)`` state, e.g. ``record_states(...)[-1]``, or a state
    list; absent slots are zeros, every slot is treated as present). ``slots``: default the
    updated (non-held) slots, whose map decides how fast the iteration settles; a held slot
    included adds an eigenvalue 1. Exact (full Jacobian, float64 eigenvalues) when the slots'
    width ``n <= exact_below``, else an Arnoldi estimate with ``krylov`` backward passes
    (``generator``: its random start); see the module docstring. Average with ``.mean()``.
    """
    m = core_of(model)
    slots = _check_slots(m, slots)
    for name, v in (("exact_below", exact_below), ("krylov", krylov)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidValue(f"{name} must be a positive int, got {v!r}")
    x0 = _as_concat(m, state).detach()
    idx = _columns(m, slots)
    idx = torch.arange(m.offsets[-1]) if idx is None else idx
    idx = idx.to(x0.device)
    B, n = x0.shape[0], idx.numel()
    z = x0[:, idx].clone().requires_grad_(True)
    with torch.enable_grad():
        full = x0.index_copy(1, idx, z)
        new = m.step(list(full.split(list(m.sizes), dim=-1)), **context)
        out = _concat(m, new, _columns(m, flat=True))[:, idx]

    def JT(u: Tensor) -> Tensor:  # J_b^T u_b for every sample b
        (g,) = torch.autograd.grad(out, z, grad_outputs=u.to(out.dtype), retain_graph=True, allow_unused=True)
        return torch.zeros_like(z) if g is None else g

    if n <= exact_below:
        eye = torch.eye(n, dtype=out.dtype, device=out.device)
        rows = torch.stack([JT(eye[k].expand(B, n)) for k in range(n)], dim=1)  # (B, n, n): rows of J_b^T
        return torch.linalg.eigvals(rows.detach().to(_F64)).abs().amax(dim=-1)
    return _arnoldi_radius(JT, B, n, min(krylov, n), out.dtype, out.device, generator)


def _arnoldi_radius(JT, B: int, n: int, k: int, dtype, device, generator) -> Tensor:
    """``max |Ritz value|`` of ``k`` Arnoldi steps on ``J_b^T`` for every sample at once: (B,)."""
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    v = torch.randn(B, n, generator=gen, dtype=_F64).to(device)
    V = [v / v.norm(dim=-1, keepdim=True)]
    H = torch.zeros(B, k + 1, k, dtype=_F64, device=device)
    tol = 100 * torch.finfo(dtype).eps  # a new direction smaller than this (relative) is rounding
    alive = torch.ones(B, dtype=torch.bool, device=device)
    for j in range(k):
        w = JT(V[j]).detach().to(_F64)
        size = w.norm(dim=-1)
        Vs = torch.stack(V, dim=1)  # (B, j + 1, n)
        for _ in range(2):  # classical Gram-Schmidt, twice
            h = torch.einsum("bjn,bn->bj", Vs, w)
            w = w - torch.einsum("bjn,bj->bn", Vs, h)
            H[:, :j + 1, j] += h
        beta = w.norm(dim=-1)
        alive = alive & (beta > tol * size.clamp_min(torch.finfo(_F64).tiny))
        H[:, j + 1, j] = torch.where(alive, beta, torch.zeros_like(beta))
        V.append(torch.where(alive[:, None], w / beta.clamp_min(torch.finfo(_F64).tiny)[:, None], torch.zeros_like(w)))
        if not bool(alive.any()):  # every Krylov space is invariant: the Ritz values are eigenvalues
            break
    return torch.linalg.eigvals(H[:, :k, :k]).abs().amax(dim=-1)


# ---------------------------------------------------------------------------- together
@dataclass
class IterationSpectrum:
    """What :func:`iteration_spectrum` measured.

    Attributes:
        states: ``(steps + 1, B, N)`` from :func:`record_states`.
        slots: the slots analysed (default: the updated ones).
        dmd: :class:`DMDResult` of the increments ``z_{t+1} - z_t`` of those slots (or of the
            states themselves, ``increments=False``).
        jacobian_radius: ``(B,)`` :func:`jacobian_spectral_radius` at the last state.
        change: ``(steps,)`` the mean over samples of ``||z_{t+1} - z_t||_2``: the iteration's
            own convergence curve, which decays like ``rho^t`` near a fixed point.
    """

    states: Tensor
    slots: list[int]
    dmd: DMDResult
    jacobian_radius: Tensor
    change: Tensor
    increments: bool = field(default=True)

    def as_dict(self) -> dict:
        """The scalars, for JSON (the states and modes are left out)."""
        jr = self.jacobian_radius.cpu()
        return {"steps": self.states.shape[0] - 1, "slots": list(self.slots), "increments": self.increments,
                "dmd": self.dmd.as_dict(), "jacobian_radius_mean": float(jr.mean()),
                "jacobian_radius_max": float(jr.max()), "jacobian_radius_min": float(jr.min()),
                "change": [float(c) for c in self.change.cpu()]}


def iteration_spectrum(model, x, steps: int, *, slots: Sequence[int] | None = None, delays: int = 1,
                       rank: int | None = None, increments: bool = True, exact_below: int = 512,
                       krylov: int = 64, **context) -> IterationSpectrum:
    """Record ``steps`` steps of ``model`` from the data batch ``x`` (:func:`record_states`), fit a
    DMD to the ``slots`` (default: the updated ones; :func:`dmd` with ``rank`` and ``delays``) and
    take the Jacobian's spectral radius at the last state (:func:`jacobian_spectral_radius`).

    ``increments=True`` (the default) fits the DMD to ``z_{t+1} - z_t``: with the inputs held,
    ``z_{t+1} = f(z_t; u)``, and for an affine ``f = A z + c(u)`` the increments obey
    ``dz_{t+1} = A dz_t`` whatever the input, so one operator fits every sample of the batch; the
    states themselves carry the per-sample constant ``c(u)``, which a linear fit across samples
    cannot represent. Needs ``steps >= delays + 1`` (``steps >= delays`` for the states).
    """
    if not isinstance(increments, bool):
        raise InvalidType(f"increments must be a bool, got {type(increments).__name__}")
    m = core_of(model)
    slots = _check_slots(m, slots)
    need = delays + 1 if increments else delays
    if not isinstance(steps, bool) and isinstance(steps, int) and isinstance(delays, int) and steps < need:
        raise InvalidValue(f"iteration_spectrum needs steps >= {need} (delays = {delays}"
                           f"{', fitted to the increments' if increments else ''}), got steps = {steps}")
    states = record_states(m, x, steps, **context)
    if states.dim() != 3:
        raise InvalidInput(f"iteration_spectrum takes a batch (B, {m.in_features}) or a state list with one "
                           f"batch dimension, got states of shape {tuple(states.shape)}")
    idx = _columns(m, slots)
    z = states if idx is None else states[..., idx.to(states.device)]
    dz = z.diff(dim=0)
    fit = dmd(dz if increments else z, rank=rank, delays=delays)
    radius = jacobian_spectral_radius(m, states[-1], slots=slots, exact_below=exact_below, krylov=krylov, **context)
    change = dz.to(_F64).norm(dim=-1).mean(dim=-1)
    return IterationSpectrum(states=states, slots=slots, dmd=fit, jacobian_radius=radius, change=change,
                             increments=increments)
