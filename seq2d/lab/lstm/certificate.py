r"""The certified l-infinity contraction constant of an ``nn.LSTM`` and a search for its actual one.

``nn.LSTM`` is not a Sequential2D (its gates multiply slots), so its stability is handled
here, directly on the torch weights. One layer maps the state ``s = (c, h)`` and an input
``x`` to (torch's gate order i, f, g, o; ``W_k`` = the gate's ``(H, H)`` block of
``weight_hh``, ``U_k`` its block of ``weight_ih``, ``b_k = b_ih + b_hh``)::

    i = sigmoid(W_i h + U_i x + b_i)       f = sigmoid(W_f h + U_f x + b_f)
    g = tanh   (W_g h + U_g x + b_g)       o = sigmoid(W_o h + U_o x + b_o)
    c' = f * c + i * g                     h' = o * tanh(c')

With ``w_k = ||W_k||_inf`` (the largest l1 norm of a *row*: rows are outputs in torch),
``|x|_inf <= B`` and ``lambda_f = sigmoid(w_f + ||U_f||_inf B + max b_f)`` (an upper bound on
every forget gate, since ``|h|_inf <= 1``), the box ``|c|_inf <= 1 / (1 - lambda_f)``,
``|h|_inf <= 1`` is invariant and on it the state map is Lipschitz in
``||(c, h)||_inf = max(|c|_inf, |h|_inf)`` with constant::

    lambda = lambda_f + w_f / (4 (1 - lambda_f)) + w_i / 4 + w_g + w_o / 4

(derivation in ``docs/stability.md``, "LSTM stability"). The published constants
(``w_i = w_o = 0.395``, ``w_f = 0.155``, ``w_g = 0.099``, ``||U_f||_inf = 0.25``, inputs in
``[-1, 1]``) give ``lambda_f = sigmoid(0.405) = 0.600`` and make each of the four terms about
``(1 - lambda_f) / 4 = 0.1``: ``lambda = 0.9933`` -- provided ``max b_f <= 0``, which
:class:`~seq2d.lab.lstm.projection.LSTMProjection` enforces (``forget_bias_bound``).

* :func:`lstm_certificate` / :func:`lstm_contraction_bound` -- the certified ``lambda`` of the
  current weights (per layer / the largest).
* :func:`lstm_state_map` -- one layer's map ``(c, h, x) -> (c', h')``, for tests.
* :func:`lstm_contraction_sup` -- a lower bound on the *actual* Lipschitz constant on the box:
  the largest ``||d(c', h')/d(c, h)||_inf`` found by projected gradient ascent over states and
  inputs (random restarts). It lies between random sampling and the certificate.

The projections that keep the weights inside the certified set are in
:mod:`seq2d.lab.lstm.projection`; the exact state Jacobian along data, in
:mod:`seq2d.lab.lstm.jacobian`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ...errors import InvalidValue

__all__ = ["GATES", "lstm_certificate", "lstm_contraction_bound", "lstm_contraction_sup", "lstm_state_map"]

#: torch's gate order in ``weight_ih_l*``/``weight_hh_l*``/``bias_*`` (chunks of H rows).
GATES = ("i", "f", "g", "o")


def _check_lstm(lstm: nn.LSTM) -> None:
    if getattr(lstm, "proj_size", 0):
        raise InvalidValue(f"LSTMs with proj_size={lstm.proj_size} are not supported (h is then W_hr o tanh(c); "
                         "the bound below assumes h = o * tanh(c))")
    if lstm.bidirectional:
        raise InvalidValue("bidirectional LSTMs are not supported: the state map runs forward in time")


def _gate(t: Tensor, k: str, H: int) -> Tensor:
    """The rows of gate ``k`` (a view)."""
    j = GATES.index(k)
    return t[j * H:(j + 1) * H]


def _row_l1(w: Tensor) -> Tensor:
    return w.abs().sum(dim=1)


def _check_bound(name: str, v, *, allow_none: bool = True, allow_negative: bool = False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (v < 0 and not allow_negative):
        kind = "a finite number" if allow_negative else "a finite number >= 0"
        raise InvalidValue(f"{name} must be {kind}{' or None' if allow_none else ''}, got {v!r}")
    return float(v)

@torch.no_grad()
def lstm_certificate(lstm: nn.LSTM, input_bound: float = 1.0) -> list[dict]:
    r"""Per layer: the norms the bound uses and the certified Lipschitz constant ``lambda``.

    Layer 0 reads inputs with ``|x|_inf <= input_bound``; layer ``l > 0`` reads ``h`` of the
    layer below (``|x|_inf <= 1``). Each dict holds ``w_i, w_f, w_g, w_o`` (row-l1 norms of
    the recurrent gate blocks), ``u_f`` (of the forget input block), ``b_f`` (largest forget
    bias ``b_ih + b_hh``, 0 without biases), ``input_bound``, ``lambda_f`` (bound on every
    forget gate), ``c_bound`` (``1 / (1 - lambda_f)``: the invariant box of ``c``) and
    ``lambda``. A stack of layers each with ``lambda < 1`` is a contraction too, in a weighted
    max norm (see docs/stability.md).
    """
    _check_lstm(lstm)
    B = _check_bound("input_bound", input_bound, allow_none=False)
    H = lstm.hidden_size
    out = []
    for l in range(lstm.num_layers):
        whh = getattr(lstm, f"weight_hh_l{l}").detach().double()
        wih = getattr(lstm, f"weight_ih_l{l}").detach().double()
        w = {k: float(_row_l1(_gate(whh, k, H)).max()) for k in GATES}
        u_f = float(_row_l1(_gate(wih, "f", H)).max())
        if lstm.bias:
            b_f = float((_gate(getattr(lstm, f"bias_ih_l{l}"), "f", H) + _gate(getattr(lstm, f"bias_hh_l{l}"), "f", H)).max())
        else:
            b_f = 0.0
        xb = B if l == 0 else 1.0
        lam_f = 1.0 / (1.0 + math.exp(-(w["f"] + u_f * xb + b_f)))
        c_bound = 1.0 / (1.0 - lam_f) if lam_f < 1.0 else math.inf
        lam = lam_f + w["f"] * c_bound / 4 + w["i"] / 4 + w["g"] + w["o"] / 4
        out.append({**{f"w_{k}": w[k] for k in GATES}, "u_f": u_f, "b_f": b_f, "input_bound": xb,
                    "lambda_f": lam_f, "c_bound": c_bound, "lambda": lam})
    return out


def lstm_contraction_bound(lstm: nn.LSTM, input_bound: float = 1.0) -> float:
    r"""The certified contraction constant of ``lstm``'s state map: the largest per-layer
    ``lambda = lambda_f + w_f / (4 (1 - lambda_f)) + w_i / 4 + w_g + w_o / 4`` (see
    :func:`lstm_certificate`), in ``||(c, h)||_inf`` on the invariant box
    ``|c|_inf <= 1 / (1 - lambda_f)``, ``|h|_inf <= 1``, for inputs ``|x|_inf <= input_bound``.
    ``lambda < 1`` certifies a contraction; ``>= 1`` certifies nothing."""
    return max(r["lambda"] for r in lstm_certificate(lstm, input_bound))


def lstm_state_map(lstm: nn.LSTM, layer: int = 0) -> Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]:
    """One step of layer ``layer`` as a function ``(c, h, x) -> (c', h')`` (batched over the
    leading dims, eval semantics), using the module's current weights (torch's equations)."""
    _check_lstm(lstm)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < lstm.num_layers:
        raise InvalidValue(f"layer must be an int in [0, {lstm.num_layers}), got {layer!r}")
    H = lstm.hidden_size

    def step(c: Tensor, h: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        wih = getattr(lstm, f"weight_ih_l{layer}")
        whh = getattr(lstm, f"weight_hh_l{layer}")
        a = x @ wih.T + h @ whh.T
        if lstm.bias:
            a = a + getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")
        i, f, g, o = a.split(H, dim=-1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return c_new, torch.sigmoid(o) * torch.tanh(c_new)

    return step


def lstm_contraction_sup(lstm: nn.LSTM, input_bound: float = 1.0, *, layer: int | None = None, restarts: int = 64,
                         steps: int = 200, lr: float = 0.05, seed: int = 0) -> dict:
    r"""The largest Lipschitz constant of the state map found by an optimiser: the maximum of
    ``||d(c', h') / d(c, h)||_inf`` (the induced l-infinity norm, i.e. the largest row l1 norm
    of the ``(2H, 2H)`` Jacobian: the norm ``||(c, h)||_inf`` of :func:`lstm_contraction_bound`)
    over states in the certificate's box ``|c|_inf <= 1 / (1 - lambda_f)``, ``|h|_inf <= 1`` and
    inputs ``|x|_inf <= input_bound`` (``<= 1`` for layers above the first).

    On the (convex) box the supremum of that Jacobian norm *is* the Lipschitz constant of the
    map, so the value found is a lower bound on it (gradient ascent can miss the global max),
    hence ``random-pair ratios <= result <= certified lambda`` (when the certificate is finite).
    Method: ``restarts`` random starting points (uniform in the box, ``torch.Generator`` seeded
    with ``seed``); start ``k`` ascends the l1 norm of Jacobian row ``k mod 2H`` (the norm is the
    max over rows, and ascending the max directly tends to stay on the row that starts largest,
    so ``restarts >= 2H`` targets every row at least once); ``steps`` Adam steps (``lr`` in
    box-normalised coordinates), projected back onto the box after every step; float64; the
    largest full norm ``max_rows`` seen at any point is kept.

    Returns ``{"sup", "layer", "per_layer": [{"layer", "sup", "lambda" (the certificate),
    "c", "h", "x" (the maximiser)}], "restarts", "steps", "seed"}``; ``layer=None`` covers all layers.
    """
    import copy

    from torch.func import jacrev, vmap

    _check_lstm(lstm)
    B = _check_bound("input_bound", input_bound, allow_none=False)
    for name, v in (("restarts", restarts), ("steps", steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "restarts" else 0):
            raise InvalidValue(f"{name} must be a positive int, got {v!r}")
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < lstm.num_layers):
        raise InvalidValue(f"layer must be an int in [0, {lstm.num_layers}) or None, got {layer!r}")
    m = copy.deepcopy(lstm).double().cpu().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    certs = lstm_certificate(m, B)
    gen = torch.Generator().manual_seed(seed)
    H, per_layer = m.hidden_size, []
    for l in (range(m.num_layers) if layer is None else [layer]):
        cert = certs[l]
        C, xb = cert["c_bound"], cert["input_bound"]
        if not math.isfinite(C):
            raise InvalidValue(f"layer {l}: lambda_f = 1, the certificate's box is unbounded (no sup to search)")
        d_in = m.input_size if l == 0 else H
        step = lstm_state_map(m, l)

        def f(s: Tensor, x: Tensor) -> Tensor:
            c1, h1 = step(s[:H], s[H:], x)
            return torch.cat([c1, h1])

        jac = vmap(jacrev(f, argnums=0))
        scale = torch.cat([torch.full((H,), C, dtype=torch.float64), torch.ones(H, dtype=torch.float64)])

        def row_norms(u: Tensor, v: Tensor) -> Tensor:  # u in [-1, 1]^(2H) -> state, v -> input
            return jac(u * scale, v * xb).abs().sum(-1)

        target = torch.arange(restarts) % (2 * H)

        u = (torch.rand(restarts, 2 * H, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_(True)
        v = (torch.rand(restarts, d_in, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_(True)
        opt = torch.optim.Adam([u, v], lr=lr)
        best, best_u, best_v = -math.inf, None, None
        for it in range(steps + 1):
            rows = row_norms(u, v)
            val = rows.detach().amax(-1)
            j = int(val.argmax())
            if float(val[j]) > best:
                best, best_u, best_v = float(val[j]), u[j].detach().clone(), v[j].detach().clone()
            if it == steps:
                break
            opt.zero_grad()
            (-rows[torch.arange(restarts), target].sum()).backward()
            opt.step()
            with torch.no_grad():
                u.clamp_(-1, 1)
                v.clamp_(-1, 1)
        s = best_u * scale
        per_layer.append({"layer": l, "sup": best, "lambda": cert["lambda"], "c": s[:H], "h": s[H:], "x": best_v * xb})
    top = max(per_layer, key=lambda r: r["sup"])
    return {"sup": top["sup"], "layer": top["layer"], "per_layer": per_layer, "restarts": restarts, "steps": steps,
            "seed": seed}
