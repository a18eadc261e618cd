r"""Spectral norms of matrices and of a recurrent core's block matrix (the state map's
linear part).

Spectral norms are computed in float64 by an SVD (``torch.linalg.matrix_norm(ord=2)``) up
to ``exact_below`` rows/columns; beyond that the *certified* number is the rigorous cap
``min(sqrt(||W||_1 ||W||_inf), ||W||_F)`` (never smaller than ``||W||_2``, usually larger)
and :func:`spectral_norm` gives the power-iteration *estimate* (a lower bound). Each core's
report says which one it used (``norm_method``).

:func:`recurrent_matrix` assembles ``W_rec``, the block matrix of a recurrent core (a strongly
connected component of the block graph with a cycle, :func:`seq2d.graph.recurrent_cores`)
over its concatenated slots: the matrix whose norm the contraction constants and the
projections of this package measure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from ..errors import InvalidType, InvalidValue
from ..blocks import Identity, LinearLike
from ..core import Sequential2D, core_of

__all__ = ["spectral_norm", "spectral_norm_bound", "recurrent_matrix"]

_F64 = torch.float64


def _cores(m: Sequential2D) -> list[list[int]]:
    """The recurrent cores of ``m`` as sorted slot lists, sorted by first slot."""
    from ..graph import recurrent_cores

    return [sorted(c) for c in sorted(recurrent_cores(m), key=min)]


def _check_matrix(W) -> Tensor:
    if not isinstance(W, Tensor):
        raise InvalidType(f"expected a 2-D tensor, got {type(W).__name__}")
    if W.dim() != 2:
        raise InvalidValue(f"expected a 2-D tensor (a matrix), got shape {tuple(W.shape)}")
    return W.detach().to(_F64)


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


def recurrent_matrix(model, core: Iterable[int]) -> Tensor:
    """The block matrix of the recurrent ``core`` (slot indices) over its concatenated slots
    (in increasing slot order), in float64: ``F[i][j]``'s effective weight for a linear block,
    the identity for an identity block, zero where absent.

    Raises:
        ValueError: a module block sits inside the core (its Lipschitz constant is unknown, so
            the core's contraction cannot be certified), or ``core`` names a bad slot.
    """
    m = core_of(model)
    slots = sorted(set(core))
    if not slots or any(not (0 <= i < m.n) for i in slots):
        raise InvalidValue(f"core must name slots of the model (0 .. {m.n - 1}), got {sorted(set(core))}")
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
                raise InvalidValue(
                    f"block F[{i}][{j}] is a module ({type(blk).__name__}) inside the recurrent core {slots}: its "
                    "Lipschitz constant is unknown, so the core's contraction cannot be certified. Only linear and "
                    "identity blocks are certifiable")
    return W
