r"""Truncation bounds (Miller & Hardt, Lemma 1): how far the state ``h_t`` of a stable RNN is
from ``h_t^k`` of its k-truncation (:func:`seq2d.truncated_rnn`), and the ``k`` that makes
that gap at most ``eps``.

=================================  ===================================================
:func:`lemma1_bound`,              the gap ``lam^k * sup ||h||`` of one layer, and the
:func:`truncation_length`          smallest ``k`` bringing it to ``eps``.
:func:`stacked_lemma1_bound`,      the same for a stack of layers (each layer's input is
:func:`stacked_truncation_length`  the previous layer's state).
=================================  ===================================================

The constants (``lam``, ``lipschitz_x``, ``f0``, ``state_bound``) of an RNN layer come from
:func:`seq2d.stability.rnn_constants`. Pure arithmetic on floats: nothing here touches a model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import InvalidValue

__all__ = ["lemma1_bound", "truncation_length", "stacked_lemma1_bound", "stacked_truncation_length"]


def _check_lam(lam) -> float:
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
        raise InvalidValue(f"lam must be a finite number >= 0, got {lam!r}")
    if lam >= 1:
        raise InvalidValue(f"no guarantee: lambda = {lam:.6g} >= 1, the model is not certified stable, so its "
                         "truncation gap need not shrink with k (Lemma 1 needs lambda < 1)")
    return float(lam)


def _nonneg(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise InvalidValue(f"{name} must be a finite number >= 0, got {v!r}")
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
    ``f0 = ||rho(b)||`` (see :func:`~seq2d.stability.rnn_constants`); ``state_bound`` optionally caps the
    supremum by an a-priori bound (``sqrt(H)`` for tanh, whose entries lie in (-1, 1)).
    With ``h_0 = 0`` and ``t <= k`` the truncation sees the whole sequence and the gap is 0.

    Raises:
        ValueError: ``lam >= 1`` (no guarantee) or a negative constant.
    """
    lam = _check_lam(lam)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidValue(f"k must be an int >= 0, got {k!r}")
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
        raise InvalidValue(f"eps must be a positive number, got {eps!r}")
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


def _stack_terms(layers: Sequence[dict], input_bound: float) -> list[tuple[float, float, float]]:
    if not layers:
        raise InvalidValue("layers must hold one rnn_constants dict per layer, got none")
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
        raise InvalidValue(f"k must be an int >= 0, got {k!r}")
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
        raise InvalidValue(f"eps must be a positive number, got {eps!r}")
    for j, e in _stack_gaps(_stack_terms(layers, input_bound)):
        if j >= 1 and e <= eps:
            return j
        if j >= k_max:
            raise InvalidValue(f"no k <= {k_max} brings the stacked Lemma 1 bound below eps = {eps}")
    raise AssertionError("unreachable")  # pragma: no cover
