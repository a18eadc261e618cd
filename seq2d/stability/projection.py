r"""Projections onto the stable set: after each optimizer step (projected gradient descent),
pull a recurrent core's matrix back into ``{||W_rec||_2 <= lambda / L_act}``, so that the core
stays ``lambda``-stable (Miller & Hardt, "Stable Recurrent Models").

=========================  ===========================================================
:func:`project_spectral_`  the in-place projection ``W <- U diag(min(s, bound)) V^T`` of one
                           matrix onto the spectral-norm ball.
:class:`SpectralClip`      the projection ``W <- U diag(min(s, lambda / L_act)) V^T`` of the
                           core's matrix after each optimizer step (a trainer callback:
                           ``on_update_end``), written back into the core's LinearBlocks.
=========================  ===========================================================

The ``nn.LSTM``'s projection (row l1 norms of the gate blocks, ``LSTMProjection``) is the stable-RNN
experiment's, in ``seq2d.lab.lstm``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from ..errors import InvalidValue
from ..activations import activation_name
from ..blocks import Identity, LinearBlock, LinearLike
from ..core import Sequential2D, core_of
from .contraction import _act_lipschitz
from .spectral import _F64, _cheap_cap, _cores, recurrent_matrix

__all__ = ["project_spectral_", "SpectralClip"]


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
        raise InvalidValue(f"{what} must be a positive finite number, got {bound!r}")
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
        raise InvalidValue(f"W must be a 2-D tensor, got {getattr(W, 'shape', type(W).__name__)}")
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

    Use it as a trainer callback (``on_update_end(trainer, update)``, after each optimizer step:
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
            raise InvalidValue(f"Unknown mode {mode!r}. Select from 'svd' or 'scale'.")
        self.mode = mode
        m = core_of(model)
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
            raise InvalidValue(f"cores must name slots of the model (0 .. {m.n - 1}), got {slots}")
        L = _act_lipschitz(m, slots)
        if L is None:
            names = {i: activation_name(m.acts[i]) or type(m.acts[i]).__name__ for i in slots}
            raise InvalidValue(f"SpectralClip: core {slots} has activations {names} without a known Lipschitz constant "
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
                    bad.append(f"F[{i}][{j}] (tiled block of the block-sparse matrix)")
                else:
                    raise InvalidValue(f"SpectralClip: block F[{i}][{j}] of core {slots} is a module "
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
        if model is not None and core_of(model) is not core_of(self.model):
            raise InvalidValue("SpectralClip was built for another model; build one per model")
        m = core_of(self.model)
        reports = []
        for plan in self._plans:
            slots, bound = plan["slots"], self.lam / plan["L"]
            # float64 SVDs on the host: on a GPU they would be slow and sync anyway (one copy
            # of the core's matrix down, and the projected blocks up only when they change)
            W = recurrent_matrix(m, slots).cpu()
            dtype = plan["blocks"][0][2].weight.dtype if plan["blocks"] else _F64
            shrink = _shrink(dtype, W.shape[0])
            before = float(torch.linalg.matrix_norm(W, ord=2)) if W.numel() else 0.0
            projected = False
            if self.mode == "svd":
                new = _clip(W, bound, shrink) if before > bound else None
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
            after = float(torch.linalg.matrix_norm(recurrent_matrix(m, slots).cpu(), ord=2)) if projected else before
            reports.append({"slots": slots, "bound": bound, "norm_before": before, "norm_after": after, "projected": projected})
        self.last = reports
        return reports

    __call__ = project

    def on_update_end(self, trainer, update: int) -> None:
        """Trainer hook: project after each optimizer step (projected gradient descent)."""
        self.project()

    def __repr__(self) -> str:
        return f"SpectralClip(lam={self.lam}, cores={[p['slots'] for p in self._plans]}, mode={self.mode!r})"
