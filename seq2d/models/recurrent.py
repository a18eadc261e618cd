"""Recurrent models: the ``rnn`` constructor, the interfaces ``RNN`` (called like ``nn.RNN``) and
``TruncatedRNN`` (the feed-forward model that sees only the last k inputs), and ``from_rnn``
(an ``nn.RNN`` with its weights, for ``from_torch``)."""

from __future__ import annotations

import math
import numbers
import warnings

import torch
from torch import Tensor, nn

from ..errors import InvalidInput, InvalidType, InvalidValue
from ..arguments import check_factory
from ..core.checks import unexpected_keywords
from ..blocks import LinearBlock
from ..core import Sequential2D
from .feedforward import SUPPORTED
from .registry import register_model
from .wrapper import CoreModel

__all__ = ["rnn", "RNN", "TruncatedRNN", "truncated_rnn", "from_rnn"]


class RNN(CoreModel):
    r"""An Elman RNN whose cell is a Sequential2D ``core`` (slots ``[x, h_1, ..., h_L]``).

    Called exactly like ``nn.RNN``: ``output, h_n = rnn(input, hx=None)`` with
    ``input`` of shape ``(L, N, H_in)`` (``(N, L, H_in)`` when ``batch_first``) or
    unbatched ``(L, H_in)``, ``hx`` of shape ``(num_layers, N, H)`` or ``(num_layers, H)``.
    ``output`` holds the last layer's state for every time step, ``h_n`` every layer's
    final state. Internally this is :meth:`Sequential2D.sequence` with pipelining.

    ``nn.RNN``'s attributes read the same: ``input_size``, ``hidden_size``, ``num_layers``,
    ``nonlinearity``, ``bias``, ``batch_first``, and ``dropout = 0.0``, ``bidirectional = False``,
    ``proj_size = 0`` (the only values seq2d models; see :func:`rnn`).
    """

    dropout = 0.0
    bidirectional = False
    proj_size = 0

    def __init__(self, core: Sequential2D, *, batch_first: bool = False, nonlinearity: str = "tanh") -> None:
        super().__init__()
        if not isinstance(core, Sequential2D):
            raise InvalidType(f"core must be a Sequential2D, got {type(core).__name__}")
        self.core = core
        self.batch_first = batch_first
        self.nonlinearity = nonlinearity
        self.input_size = core.sizes[core.inputs[0]]
        self.hidden_size = core.sizes[core.outputs[0]]
        self.num_layers = core.n - 1
        self.bias = core.bias(1) is not None

    def layer_blocks(self, layer: int) -> tuple[LinearBlock, LinearBlock]:
        """(W_ih, W_hh) blocks of layer ``layer`` (1-based, as the slot index)."""
        return self.core.block(layer, layer - 1), self.core.block(layer, layer)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
        if self.nonlinearity != "tanh":
            s += f", nonlinearity={self.nonlinearity!r}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        return s

    def forward(self, input: Tensor, hx: Tensor | None = None, **unexpected) -> tuple[Tensor, Tensor]:
        if unexpected:
            raise InvalidType(unexpected_keywords("RNN.forward", unexpected, (), ("input", "hx"),
                                                  takes="it takes input and hx, as nn.RNN"))
        if not isinstance(input, Tensor):
            raise InvalidType(f"RNN: input must be a tensor, got {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise InvalidInput(f"RNN: expected input of 2 (unbatched) or 3 dims, got shape {tuple(input.shape)}")
        unbatched = input.dim() == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)  # (T, B, in)
        if x.shape[0] == 0:  # nn.RNN: "Expected sequence length to be larger than 0 in RNN"
            raise InvalidInput(f"RNN: input has sequence length 0 (shape {tuple(input.shape)}); it must be at least 1, "
                               "as for nn.RNN")
        if x.shape[-1] != self.input_size:
            raise InvalidInput(f"RNN: input must have {self.input_size} features (input_size), got shape {tuple(input.shape)}")
        ref = next(self.core.parameters(), None)
        if ref is not None and x.dtype != ref.dtype and x.is_floating_point():
            raise InvalidType(f"RNN: input has dtype {input.dtype}, but the RNN's parameters are {ref.dtype}; convert "
                              f"one of them (input.to({ref.dtype}) or rnn.to({input.dtype}))")
        if hx is not None and not isinstance(hx, Tensor):
            raise InvalidType(f"RNN: hx must be a tensor or None, got {type(hx).__name__}")
        L, B = self.num_layers, x.shape[1]
        state: list[Tensor | None] = [None] * self.core.n
        if hx is not None:
            h = hx.unsqueeze(1) if unbatched else hx
            if h.dim() != 3 or tuple(h.shape) != (L, B, self.hidden_size):
                raise InvalidInput(
                    f"RNN: expected hx of shape {(L, self.hidden_size) if unbatched else (L, B, self.hidden_size)}, "
                    f"got {tuple(hx.shape)}"
                )
            if h.dtype != x.dtype:
                raise InvalidType(f"RNN: hx must have the input's dtype {x.dtype} (shape {tuple(hx.shape)}), got hx of "
                                  f"dtype {hx.dtype}; convert it with hx.to(input.dtype)")
            if h.device != x.device:
                raise InvalidInput(f"RNN: hx must be on the input's device {x.device}, got hx on {hx.device}; move it "
                                   "with hx.to(input.device)")
            for l in range(L):
                state[l + 1] = h[l]
        ys, state = self.core.sequence(x, state)  # ys: (T, B, H)
        like = ys.new_zeros(B, self.hidden_size)
        h_n = torch.stack([state[l + 1] if state[l + 1] is not None else like for l in range(L)], dim=0)
        if unbatched:
            return ys.squeeze(1), h_n.squeeze(1)
        return (ys.transpose(0, 1) if self.batch_first else ys), h_n


def _rnn_params(rnn) -> tuple[list[tuple[Tensor, Tensor, Tensor | None]], int, int, str, bool]:
    """Per layer (W_ih, W_hh, bias) from an ``nn.RNN`` or a seq2d ``RNN``."""
    if isinstance(rnn, RNN):
        layers = []
        for l in range(1, rnn.num_layers + 1):
            wih, whh = rnn.layer_blocks(l)
            layers.append((wih.effective_weight(), whh.effective_weight(), rnn.core.bias(l)))
        return layers, rnn.input_size, rnn.hidden_size, rnn.nonlinearity, rnn.batch_first
    if isinstance(rnn, nn.RNN):
        if rnn.bidirectional:
            raise InvalidValue("truncated_rnn: bidirectional RNNs are not supported")
        layers = []
        for l in range(rnn.num_layers):
            b = None
            if rnn.bias:
                b = getattr(rnn, f"bias_ih_l{l}") + getattr(rnn, f"bias_hh_l{l}")
            layers.append((getattr(rnn, f"weight_ih_l{l}"), getattr(rnn, f"weight_hh_l{l}"), b))
        return layers, rnn.input_size, rnn.hidden_size, rnn.nonlinearity, rnn.batch_first
    raise InvalidType(f"truncated_rnn expects an nn.RNN or a seq2d.RNN, got {type(rnn).__name__}")


def _truncated_core(blocks_ih, blocks_hh, biases, input_size, H, m, nonlinearity) -> Sequential2D:
    """The depth ``m`` unrolled core with the given (tied) blocks and bias Parameters."""
    L = len(blocks_ih)
    sizes = [input_size] * m + [H] * (L * m)
    hid = lambda l, t: m + l * m + t  # slot of layer l (0-based), position t (0-based)
    grid = {}
    for l in range(L):
        for t in range(m):
            src = t if l == 0 else hid(l - 1, t)
            grid[(hid(l, t), src)] = blocks_ih[l]
            if t > 0:
                grid[(hid(l, t), hid(l, t - 1))] = blocks_hh[l]
    bias = [None] * m + [biases[l] for l in range(L) for _ in range(m)]
    acts = [None] * m + [nonlinearity] * (L * m)
    return Sequential2D(sizes, grid, bias=bias, activations=acts, inputs=list(range(m)), outputs=[hid(L - 1, m - 1)])


class TruncatedRNN(CoreModel):
    r"""The k-truncation of an RNN: a feed-forward, acyclic, weight-tied Sequential2D.

    ``core`` has input slots ``x_1 .. x_k`` (oldest first) and, per layer, hidden slots
    ``h_1 .. h_k``; ``F[h_t][x_t] = W_ih`` and ``F[h_t][h_{t-1}] = W_hh`` are the *same*
    LinearBlock objects at every position (tied), with one shared bias per layer. There is
    no ``W_hh`` into ``h_1``: the window starts from a zero state. ``core(window)`` with a
    window ``(*batch, k * input_size)`` gives ``h_k`` after ``depth = k + L - 1`` steps.

    ``forward(input)`` applies it at every position of a sequence (``nn.RNN`` layout):
    ``output[t]`` is the RNN run from a zero state over ``x_{max(0, t-k+1)} .. x_t``
    (positions ``t < k - 1`` run the same core with the first ``k - 1 - t`` positions held
    at zero: the shorter unrolling).
    """

    def __init__(self, blocks_ih, blocks_hh, biases, input_size: int, hidden_size: int, k: int,
                 nonlinearity: str = "tanh", batch_first: bool = False) -> None:
        super().__init__()
        self.k = k
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = len(blocks_ih)
        self.nonlinearity = nonlinearity
        self.batch_first = batch_first
        self.core = _truncated_core(blocks_ih, blocks_hh, biases, input_size, hidden_size, k, nonlinearity)

    def _prefix(self, window: Tensor) -> Tensor:
        """The shorter unrolling for a window of m < k inputs: the same core with the first
        k - m positions held at zero (input slots None, hidden slots held), which is exactly
        the RNN run from a zero state over the m inputs."""
        k, L, n_in = self.k, self.num_layers, self.input_size
        m = window.shape[-1] // n_in
        state: list[Tensor | None] = [None] * self.core.n
        for t, part in enumerate(window.split(n_in, dim=-1)):
            state[k - m + t] = part
        hold = [k + l * k + t for l in range(L) for t in range(k - m)]
        return self.core(state, hold=hold)[self.core.outputs[0]]

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, k={self.k}"

    def forward(self, input: Tensor, **unexpected) -> Tensor:
        if unexpected:
            raise InvalidType(unexpected_keywords("TruncatedRNN.forward", unexpected, (), ("input",),
                                                  takes="it takes only input"))
        if not isinstance(input, Tensor):
            raise InvalidType(f"TruncatedRNN: input must be a tensor, got {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise InvalidInput(f"TruncatedRNN: expected input of 2 (unbatched) or 3 dims, got shape {tuple(input.shape)}")
        unbatched = input.dim() == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)  # (T, B, in)
        if x.shape[0] == 0:  # as nn.RNN
            raise InvalidInput(f"TruncatedRNN: input has sequence length 0 (shape {tuple(input.shape)}); it must be at "
                               "least 1, as for nn.RNN")
        if x.shape[-1] != self.input_size:
            raise InvalidInput(f"TruncatedRNN: input must have {self.input_size} features (input_size), got shape "
                               f"{tuple(input.shape)}")
        T, k = x.shape[0], self.k
        outs = []
        for t in range(min(k - 1, T)):  # short prefixes: the first k-1-t positions held at zero
            win = x[: t + 1].permute(1, 0, 2).reshape(x.shape[1], -1)  # (B, (t+1)*in), oldest first
            outs.append(self._prefix(win).unsqueeze(0))
        if T >= k:
            win = x.unfold(0, k, 1)  # (T-k+1, B, in, k)
            win = win.permute(0, 1, 3, 2).reshape(T - k + 1, x.shape[1], k * self.input_size)
            outs.append(self.core(win))  # every full window in one batch
        y = torch.cat(outs, dim=0)  # (T, B, H)
        if unbatched:
            return y.squeeze(1)
        return y.transpose(0, 1) if self.batch_first else y


@register_model
def truncated_rnn(rnn=None, k: int = 4, *, input_size: int | None = None, hidden_size: int | None = None,
                  num_layers: int | None = None, nonlinearity: str | None = None, bias: bool | None = None,
                  device=None, dtype=None) -> TruncatedRNN:
    """The k-truncated, feed-forward, weight-tied Sequential2D of ``rnn`` (``nn.RNN`` or
    ``seq2d.RNN``), with weights copied. See :class:`TruncatedRNN`.

    Without ``rnn``: the k-truncation of a freshly initialised :func:`rnn` built from the size
    keywords (defaults ``input_size=8``, ``hidden_size=16``, ``num_layers=1``,
    ``nonlinearity="tanh"``, ``bias=True``); this is the registry entry ``truncated_rnn`` and
    the ``truncated_rnn:`` preset. With ``rnn``, those keywords come from it and may not be given."""
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidValue(f"truncated_rnn: k must be a positive int, got {k!r}")
    sized = {"input_size": input_size, "hidden_size": hidden_size, "num_layers": num_layers,
             "nonlinearity": nonlinearity, "bias": bias, "device": device, "dtype": dtype}
    if rnn is None:
        fresh = {"input_size": 8, "hidden_size": 16, "num_layers": 1, "nonlinearity": "tanh", "bias": True,
                 **{key: v for key, v in sized.items() if v is not None}}
        return truncated_rnn(_fresh_rnn(**fresh), k)
    given = [key for key, v in sized.items() if v is not None]
    if given:
        raise InvalidValue(f"truncated_rnn: {', '.join(given)} given with an rnn; the truncation takes its sizes, "
                           "device and dtype from the rnn (give either an rnn or the size keywords)")
    layers, input_size, H, nonlinearity, batch_first = _rnn_params(rnn)
    blocks_ih, blocks_hh, biases = [], [], []
    with torch.no_grad():
        for wih, whh, b in layers:
            bih = LinearBlock(wih.shape[1], H, device=wih.device, dtype=wih.dtype)
            bih.weight.copy_(wih)
            bhh = LinearBlock(H, H, device=whh.device, dtype=whh.dtype)
            bhh.weight.copy_(whh)
            blocks_ih.append(bih)
            blocks_hh.append(bhh)
            biases.append(None if b is None else nn.Parameter(b.detach().clone()))
    return TruncatedRNN(blocks_ih, blocks_hh, biases, input_size, H, k, nonlinearity, batch_first)


def check_rnn_arguments(what, input_size, hidden_size, num_layers, nonlinearity, bias, batch_first, dropout=0.0,
                        bidirectional=False, proj_size=0) -> None:
    """``nn.RNN``'s constructor arguments: typed errors naming the argument, and an
    :class:`InvalidValue` for the values seq2d does not model (see :func:`rnn`)."""
    for name, v in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidType(f"{what}: {name} must be a positive int, got {type(v).__name__} {v!r}")
        if v <= 0:
            raise InvalidValue(f"{what}: {name} must be a positive int, got {v!r}")
    if nonlinearity not in ("tanh", "relu"):
        raise InvalidValue(f"{what}: Unknown nonlinearity {nonlinearity!r}. Select from 'tanh' or 'relu'.")
    for name, v in (("bias", bias), ("batch_first", batch_first), ("bidirectional", bidirectional)):
        if not isinstance(v, bool):
            raise InvalidType(f"{what}: {name} must be a bool, got {type(v).__name__} {v!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
        raise InvalidType(f"{what}: dropout must be a number in [0, 1], got {type(dropout).__name__} {dropout!r}")
    if not 0 <= dropout <= 1:
        raise InvalidValue(f"{what}: dropout must be a number in [0, 1] (the probability of zeroing an element), "
                           f"got {dropout!r}")
    if isinstance(proj_size, bool) or not isinstance(proj_size, int):
        raise InvalidType(f"{what}: proj_size must be an int, got {type(proj_size).__name__} {proj_size!r}")
    if bidirectional:
        raise InvalidValue(f"{what}: bidirectional=True is not supported: a Sequential2D RNN runs forward in time "
                           "only; use bidirectional=False (the default)")
    if proj_size != 0:
        raise InvalidValue(f"{what}: proj_size={proj_size} is not supported (projections are an nn.LSTM feature, "
                           "which nn.RNN refuses too); use proj_size=0 (the default)")
    if dropout > 0 and num_layers > 1:
        raise InvalidValue(f"{what}: dropout={dropout} between the {num_layers} layers is not supported (seq2d's RNN has "
                           "no dropout); use dropout=0.0 (the default), or add dropout outside the RNN")
    if dropout > 0:  # as nn.RNN: dropout acts between layers only, so with one layer it does nothing
        warnings.warn(f"{what}: dropout={dropout} has no effect with num_layers=1 (dropout acts after all but the last "
                      "layer, as in nn.RNN)", UserWarning, stacklevel=3)


@register_model
def rnn(
    input_size: int = 8,
    hidden_size: int = 16,
    num_layers: int = 1,
    nonlinearity: str = "tanh",
    bias: bool = True,
    batch_first: bool = False,
    dropout: float = 0.0,
    bidirectional: bool = False,
    proj_size: int = 0,
    *,
    device=None,
    dtype=None,
) -> RNN:
    r"""An Elman RNN (``nn.RNN``) as a Sequential2D run in sequence mode.

    Slots ``[x, h_1, ..., h_L]``; ``F[l][l-1] = W_ih^l`` and ``F[l][l] = W_hh^l``;
    one bias per hidden slot (``b_ih + b_hh`` of ``nn.RNN``)::

        F = [[ .      .      .    ]     x: input, refilled each step
             [ W_ih1  W_hh1  .    ]     h1 = tanh(W_ih1 x + W_hh1 h1 + b1)
             [ .      W_ih2  W_hh2]]    h2 = tanh(W_ih2 h1 + W_hh2 h2 + b2)

    Layer ``l`` sits at pipeline delay ``l - 1``; :meth:`Sequential2D.sequence` aligns
    the outputs. Returns an :class:`~seq2d.RNN` called exactly like ``nn.RNN``.
    Weights start U(-1/sqrt(H), 1/sqrt(H)) like ``nn.RNN``'s; the single slot bias too.

    Takes ``nn.RNN``'s arguments in ``nn.RNN``'s order, so code written for ``nn.RNN`` runs
    unchanged. ``dropout``, ``bidirectional`` and ``proj_size`` are accepted at their defaults
    (``0.0``, ``False``, ``0``) only: a bidirectional RNN, dropout between layers
    (``dropout > 0`` with ``num_layers > 1``) and projections (``nn.LSTM`` only) are not modelled
    and raise :class:`~seq2d.errors.InvalidValue` naming the argument. ``dropout > 0`` with one
    layer has no effect, and warns, as in ``nn.RNN``. A size that is not an int (``3.0``,
    ``"10"``) raises :class:`~seq2d.errors.InvalidType`, as ``nn.RNN`` raises ``TypeError``.
    """
    check_rnn_arguments("rnn", input_size, hidden_size, num_layers, nonlinearity, bias, batch_first, dropout,
                        bidirectional, proj_size)
    check_factory(device, dtype, "rnn")
    kw = {"device": device, "dtype": dtype}
    H = hidden_size
    sizes = [input_size] + [H] * num_layers
    blocks = {}
    for l in range(1, num_layers + 1):
        blocks[(l, l - 1)] = LinearBlock(sizes[l - 1], H, **kw)
        blocks[(l, l)] = LinearBlock(H, H, **kw)
    core = Sequential2D(
        sizes, blocks, bias=bias, activations=[None] + [nonlinearity] * num_layers,
        inputs=[0], outputs=[num_layers], steps=None, **kw,
    )
    bound = 1.0 / math.sqrt(H)
    with torch.no_grad():
        for p in core.parameters():
            p.uniform_(-bound, bound)
    return RNN(core, batch_first=batch_first, nonlinearity=nonlinearity)


def from_rnn(m: nn.RNN) -> RNN:
    if m.mode not in ("RNN_TANH", "RNN_RELU"):
        raise InvalidType(f"from_torch: unsupported recurrent mode {m.mode}. Supported: {SUPPORTED}")
    if m.bidirectional:
        raise InvalidValue("from_torch: bidirectional nn.RNN is not supported (a Sequential2D runs forward in time)")
    if m.dropout > 0 and m.num_layers > 1:  # with one layer nn.RNN's dropout does nothing (it warned)
        raise InvalidValue(
            f"from_torch: nn.RNN with dropout={m.dropout} between its {m.num_layers} layers is not supported: seq2d's "
            "RNN runs the layers pipelined, so dropout between them cannot be drawn as nn.RNN draws it; build it with "
            "dropout=0 (eval-mode behaviour is identical)"
        )
    ref = m.weight_ih_l0
    out = rnn(m.input_size, m.hidden_size, num_layers=m.num_layers, nonlinearity=m.nonlinearity, bias=m.bias,
               batch_first=m.batch_first, device=ref.device, dtype=ref.dtype)
    with torch.no_grad():
        for l in range(m.num_layers):
            wih, whh = out.layer_blocks(l + 1)
            wih.weight.copy_(getattr(m, f"weight_ih_l{l}"))
            whh.weight.copy_(getattr(m, f"weight_hh_l{l}"))
            if m.bias:
                out.core.bias(l + 1).copy_(getattr(m, f"bias_ih_l{l}") + getattr(m, f"bias_hh_l{l}"))
    return out


def _fresh_rnn(**kwargs) -> RNN:
    """:func:`rnn` by another name, for :func:`truncated_rnn`, whose ``rnn`` argument hides it."""
    return rnn(**kwargs)
