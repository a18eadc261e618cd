r"""The state Jacobian of an ``nn.LSTM`` along real trajectories (:func:`lstm_data_lambda`: what
:func:`seq2d.stability.data_lambda` measures for a Sequential2D, for an ``nn.LSTM``).

Layer ``l``'s state is ``s = (h, c)``. With its input ``x`` (the layer below's ``h`` at the
same step, or the model input) held at its trajectory value, one step is::

    z  = W_ih x + b_ih + W_hh h + b_hh          (gates i, f, g, o: torch's row order)
    c' = f * c + i * g,    h' = o * tanh(c'),   i, f, o = sigmoid(.),  g = tanh(.)

and its Jacobian ``J = d(h', c') / d(h, c)`` is, with ``W_* = W_hh``'s gate blocks,
``D(v) = diag(v)`` and ``tc = tanh(c')``::

    dc'/dh = D(c f (1 - f)) W_f + D(g i (1 - i)) W_i + D(i (1 - g^2)) W_g,   dc'/dc = D(f)
    dh'/dh = D(o (1 - o) tc) W_o + D(o (1 - tc^2)) dc'/dh,                   dh'/dc = D(o (1 - tc^2) f)

formed exactly (``2H x 2H`` per sequence and step, in float64), so both its spectral norm and
its l-infinity norm (max row l1 sum: the norm :func:`~seq2d.lab.lstm.certificate.lstm_contraction_bound`
certifies) are exact, not power-iteration estimates. The tests check ``J`` against
``torch.func.jacrev`` of the step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import InvalidInput, InvalidType, InvalidValue
from ...stability.result import DataLambda

__all__ = ["lstm_data_lambda", "lstm_step_jacobian"]

_F64 = torch.float64


def _layer_weights(lstm: nn.LSTM, l: int):
    w_ih = getattr(lstm, f"weight_ih_l{l}").detach().to(_F64)
    w_hh = getattr(lstm, f"weight_hh_l{l}").detach().to(_F64)
    b = torch.zeros(w_ih.shape[0], dtype=_F64, device=w_ih.device)
    if lstm.bias:
        b = b + getattr(lstm, f"bias_ih_l{l}").detach().to(_F64) + getattr(lstm, f"bias_hh_l{l}").detach().to(_F64)
    return w_ih, w_hh, b


def lstm_step_jacobian(w_ih: Tensor, w_hh: Tensor, b: Tensor, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One LSTM step from ``(h, c)`` (``(B, H)``) on input ``x (B, I)``: ``(h', c', J)`` with
    ``J (B, 2H, 2H)`` the Jacobian of ``(h', c')`` with respect to ``(h, c)`` (formula in the
    module docstring)."""
    H = h.shape[-1]
    z = x @ w_ih.T + h @ w_hh.T + b
    i, f, g, o = z.split(H, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c2 = f * c + i * g
    tc = torch.tanh(c2)
    h2 = o * tc
    Wi, Wf, Wg, Wo = w_hh.split(H, dim=0)
    dc_dh = ((c * f * (1 - f)).unsqueeze(-1) * Wf + (g * i * (1 - i)).unsqueeze(-1) * Wi
             + (i * (1 - g * g)).unsqueeze(-1) * Wg)  # (B, H, H)
    a = o * (1 - tc * tc)
    dh_dh = (o * (1 - o) * tc).unsqueeze(-1) * Wo + a.unsqueeze(-1) * dc_dh
    dh_dc = torch.diag_embed(a * f)
    dc_dc = torch.diag_embed(f)
    J = torch.cat([torch.cat([dh_dh, dh_dc], dim=-1), torch.cat([dc_dh, dc_dc], dim=-1)], dim=-2)
    return h2, c2, J


@torch.no_grad()
def lstm_data_lambda(lstm: nn.LSTM, xs: Tensor) -> DataLambda:
    """Per layer, the spectral (``max``, ``mean``) and l-infinity (``max_inf``, ``mean_inf``)
    norms of the state Jacobian ``d (h_t, c_t) / d (h_{t-1}, c_{t-1})`` along the LSTM's
    trajectory on ``xs (T, B, input_size)`` (time first; ``(T, input_size)`` is one sequence)
    from a zero state, every step and sequence. ``max``/``mean``/``max_inf``/``mean_inf`` at the
    top level are over layers too. Dropout between layers is off (evaluation). Returned as a
    :class:`~seq2d.stability.result.DataLambda`, as :func:`seq2d.stability.data_lambda` answers."""
    if not isinstance(lstm, nn.LSTM):
        raise InvalidType(f"lstm_data_lambda measures an nn.LSTM, got {type(lstm).__name__}: "
                          "measure a Sequential2D with seq2d.stability.data_lambda")
    if not isinstance(xs, Tensor):
        raise InvalidType(f"xs must be a tensor of shape (T, B, {lstm.input_size}), got {type(xs).__name__}")
    if lstm.proj_size:
        raise InvalidValue("lstm_data_lambda: an nn.LSTM with proj_size > 0 is not supported")
    if lstm.bidirectional:
        raise InvalidValue("lstm_data_lambda: a bidirectional nn.LSTM has no single forward state map")
    if xs.dim() == 2:
        xs = xs.unsqueeze(1)
    if xs.dim() != 3 or xs.shape[-1] != lstm.input_size:
        raise InvalidInput(f"xs must have shape (T, B, {lstm.input_size}) (time first), got {tuple(xs.shape)}")
    x = xs.detach().to(_F64)
    T, B = x.shape[0], x.shape[1]
    H = lstm.hidden_size
    cores = []
    for l in range(lstm.num_layers):
        w_ih, w_hh, b = _layer_weights(lstm, l)
        w_ih, w_hh, b = w_ih.to(x.device), w_hh.to(x.device), b.to(x.device)
        h = x.new_zeros(B, H)
        c = x.new_zeros(B, H)
        two, inf, outs = [], [], []
        for t in range(T):
            h, c, J = lstm_step_jacobian(w_ih, w_hh, b, x[t], h, c)
            two.append(torch.linalg.matrix_norm(J, ord=2))
            inf.append(J.abs().sum(dim=-1).amax(dim=-1))
            outs.append(h)
        two, inf = torch.stack(two).cpu(), torch.stack(inf).cpu()  # (T, B)
        cores.append({"layer": l, "max": float(two.max()), "mean": float(two.mean()),
                      "max_inf": float(inf.max()), "mean_inf": float(inf.mean()), "per_step": two, "per_step_inf": inf})
        x = torch.stack(outs)  # the next layer's input
    return DataLambda(cores=cores, max=max(r["max"] for r in cores), mean=sum(r["mean"] for r in cores) / len(cores),
                      max_inf=max(r["max_inf"] for r in cores), mean_inf=sum(r["mean_inf"] for r in cores) / len(cores),
                      norm="spectral (max, mean) and l-infinity (max_inf, mean_inf), exact")
