r"""Stable LSTMs: a certified l-infinity contraction condition and the projection onto it.

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
:class:`LSTMProjection` enforces (``forget_bias_bound``).

* :class:`LSTMProjection` -- our variant: the projection (rows whose l1 norm exceeds the bound
  are scaled onto it, nothing else moves; forget biases above the bound are lowered; embeddings
  clipped); a trainer callback (``on_step_end``). It is our own construction, not the author's.
* :class:`AuthorLSTMNormalization` -- the author's normalisation *as described in the audit of
  issue 12* (the author's ``--stabilize`` in his word-language-model fork; not checked against
  the code): every *column* of each gate block of ``weight_hh_l0`` rescaled to l1 norm
  ``c_gate``, the columns of the forget block of ``weight_ih_l0`` to 0.25, embeddings clipped.
  Same interface. Column norms do not bound the row norms the certificate uses, so it certifies
  nothing by itself (:func:`lstm_contraction_bound` says what the resulting weights give).
* :func:`make_lstm_stabilizer` -- ``method="ours" | "author"``.
* :func:`lstm_contraction_bound` / :func:`lstm_certificate` -- the certified ``lambda`` of the
  current weights.
* :func:`lstm_state_map` -- one layer's map ``(c, h, x) -> (c', h')``, for tests.
* :func:`lstm_contraction_sup` -- a lower bound on the *actual* Lipschitz constant on the box:
  the largest ``||d(c', h')/d(c, h)||_inf`` found by projected gradient ascent over states and
  inputs (random restarts). It lies between random sampling and the certificate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from .errors import InvalidType, InvalidValue

__all__ = [
    "GATES",
    "PAPER_GATE_BOUNDS",
    "AUTHOR_FORGET_INPUT_SCALE",
    "AuthorLSTMNormalization",
    "LSTMProjection",
    "LSTM_STABILIZERS",
    "lstm_certificate",
    "lstm_contraction_bound",
    "lstm_contraction_sup",
    "lstm_state_map",
    "make_lstm_stabilizer",
]

#: torch's gate order in ``weight_ih_l*``/``weight_hh_l*``/``bias_*`` (chunks of H rows).
GATES = ("i", "f", "g", "o")
#: The per-gate constants of Miller & Hardt's stable-LSTM code (the audit of issue 12 describes
#: them as column l1 norms of the gate blocks of ``weight_hh_l0``); :class:`LSTMProjection`
#: (our variant) uses them as row-l1 bounds, :class:`AuthorLSTMNormalization` as column norms.
PAPER_GATE_BOUNDS = {"i": 0.395, "f": 0.155, "g": 0.099, "o": 0.395}
#: The forget gate's input-weight scale of the author's ``--stabilize`` (audit of issue 12).
AUTHOR_FORGET_INPUT_SCALE = 0.25
#: The ``method`` names of :func:`make_lstm_stabilizer`.
LSTM_STABILIZERS = ("ours", "author")


def _lstms(obj) -> list[nn.LSTM]:
    if isinstance(obj, nn.LSTM):
        found = [obj]
    elif isinstance(obj, nn.Module):
        found = [m for m in obj.modules() if isinstance(m, nn.LSTM)]
        if not found:
            raise InvalidType(f"expected an nn.LSTM or a module containing one, got {type(obj).__name__} with no nn.LSTM inside")
    else:
        raise InvalidType(f"expected an nn.LSTM or a module containing one, got {type(obj).__name__}")
    for m in found:
        _check_lstm(m)
    return found


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


def _tol(t: Tensor) -> float:
    # Rescaling a row to norm b leaves it at b (1 +- a few ulps); rows within this relative
    # tolerance count as feasible, so a second projection changes nothing (idempotence).
    return 64 * torch.finfo(t.dtype).eps


@torch.no_grad()
def _clip_rows_(w: Tensor, bound: float, count: bool = True) -> int:
    """Scale the rows of ``w`` whose l1 norm exceeds ``bound`` onto it; return how many
    (``count=False``: always multiply, by exactly 1 where nothing changes, and return 0
    without reading anything on the host)."""
    norms = _row_l1(w)
    over = norms > bound * (1 + _tol(w))
    n = int(over.sum()) if count else 0
    if n or not count:
        scale = torch.where(over, bound / norms.clamp_min(torch.finfo(w.dtype).tiny), torch.ones_like(norms))
        w.mul_(scale.unsqueeze(1))
    return n


def _check_bound(name: str, v, *, allow_none: bool = True, allow_negative: bool = False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (v < 0 and not allow_negative):
        kind = "a finite number" if allow_negative else "a finite number >= 0"
        raise InvalidValue(f"{name} must be {kind}{' or None' if allow_none else ''}, got {v!r}")
    return float(v)


class LSTMProjection:
    r"""Our variant: project ``nn.LSTM`` weights onto the certified-stable set, after every
    optimizer step. (Our own construction; the author's normalisation, as the audit of issue 12
    describes it, is :class:`AuthorLSTMNormalization`.)

    For every layer of every ``nn.LSTM`` in ``lstm_or_model`` (``norm="inf"``: rows of torch's
    ``(4H, H)`` / ``(4H, in)`` weights are the outputs, so a row's l1 norm is the gate block's
    infinity operator norm):

    * each row of gate ``k``'s recurrent block ``weight_hh[k]`` whose l1 norm exceeds
      ``gate_bounds[k]`` is scaled to exactly that norm (other rows are not touched);
    * each row of the forget gate's input block ``weight_ih[f]`` likewise, to ``forget_input_bound``;
    * each forget-gate bias ``b_ih[f] + b_hh[f]`` above ``forget_bias_bound`` is lowered to it
      (the excess taken half from each, the Euclidean projection onto the half-space);
    * ``embedding.weight`` (when given) is clipped to ``[-embedding_clip, embedding_clip]``,
      the input bound the certificate assumes for the first layer (later layers read
      ``h`` of the layer below, in ``[-1, 1]``).

    Only what exceeds a bound moves, so feasible weights are left bit for bit and projecting
    twice equals projecting once. With the defaults (the published constants) every layer is
    certified ``lambda <= 0.9933`` in eval mode (:func:`lstm_contraction_bound`). During
    training, dropout scales inputs by ``1 / (1 - p)``, which the certificate does not cover.

    Use it as ``proj()`` / ``proj.project()`` after ``optimizer.step()``, or as a
    :class:`seq2d.train.Trainer` callback (``on_step_end``).

    Args:
        lstm_or_model: an ``nn.LSTM`` or a module holding one or more (all are projected).
        gate_bounds: ``{gate: bound or None}`` for gates ``i, f, g, o`` (default: the
            published constants); a missing or ``None`` gate is not constrained.
        forget_input_bound: row-l1 bound of the forget gate's input weights (None: free).
        forget_bias_bound: upper bound on ``b_ih[f] + b_hh[f]`` (default 0; None: free).
        embedding: an ``nn.Embedding`` (or a tensor/Parameter) whose entries are clipped.
        embedding_clip: the clip value (the certificate's input bound ``B``).
        norm: ``"inf"`` (the only one: it is the norm the l-infinity contraction needs).
    """

    method = "ours"

    def __init__(
        self,
        lstm_or_model,
        *,
        gate_bounds: Mapping[str, float | None] | None = None,
        forget_input_bound: float | None = 0.25,
        forget_bias_bound: float | None = 0.0,
        embedding=None,
        embedding_clip: float | None = 1.0,
        norm: str = "inf",
    ) -> None:
        self.lstms = _lstms(lstm_or_model)
        if norm != "inf":
            raise InvalidValue(f"Unknown norm {norm!r}. Select from 'inf' (row l1 norms of torch's gate blocks: the "
                             "operator norm an l-infinity contraction bound needs)")
        self.norm = norm
        bounds = dict(PAPER_GATE_BOUNDS if gate_bounds is None else gate_bounds)
        for k in bounds:
            if k not in GATES:
                raise InvalidValue(f"Unknown gate {k!r} in gate_bounds. Select from {', '.join(map(repr, GATES))}")
        self.gate_bounds = {k: _check_bound(f"gate_bounds[{k!r}]", bounds.get(k)) for k in GATES}
        self.forget_input_bound = _check_bound("forget_input_bound", forget_input_bound)
        self.forget_bias_bound = _check_bound("forget_bias_bound", forget_bias_bound, allow_negative=True)
        self.embedding_clip = _check_bound("embedding_clip", embedding_clip)
        if embedding is not None and not isinstance(embedding, (nn.Embedding, Tensor)):
            raise InvalidType(f"embedding must be an nn.Embedding or a tensor, got {type(embedding).__name__}")
        self.embedding = embedding

    # ------------------------------------------------------------------ projection
    @torch.no_grad()
    def project(self, model=None, *, counts: bool = True) -> dict | None:
        """Project in place; returns counts ``{"rows": rows rescaled, "biases": biases
        lowered, "embedding": entries clipped}``. ``model`` is accepted (and ignored) so the
        call matches ``SpectralClip.project(model)``. ``counts=False``: the same result with
        no host read (no GPU synchronisation; what :meth:`on_step_end` uses); returns None."""
        rows = biases = 0
        for lstm in self.lstms:
            H = lstm.hidden_size
            for l in range(lstm.num_layers):
                whh = getattr(lstm, f"weight_hh_l{l}")
                for k, b in self.gate_bounds.items():
                    if b is not None:
                        rows += _clip_rows_(_gate(whh, k, H), b, counts)
                if self.forget_input_bound is not None:
                    rows += _clip_rows_(_gate(getattr(lstm, f"weight_ih_l{l}"), "f", H), self.forget_input_bound, counts)
                if self.forget_bias_bound is not None and lstm.bias:
                    bi = _gate(getattr(lstm, f"bias_ih_l{l}"), "f", H)
                    bh = _gate(getattr(lstm, f"bias_hh_l{l}"), "f", H)
                    beta = self.forget_bias_bound
                    excess = bi + bh - beta
                    over = excess > _tol(bi) * max(1.0, abs(beta))
                    n = int(over.sum()) if counts else 0
                    if n or not counts:
                        half = torch.where(over, excess / 2, torch.zeros_like(excess))
                        bi.sub_(half)
                        bh.sub_(half)
                        biases += n
        clipped = 0
        if self.embedding is not None and self.embedding_clip is not None:
            from .lm import clip_embedding_

            clipped = clip_embedding_(self.embedding, self.embedding_clip, count=counts)
        return {"rows": rows, "biases": biases, "embedding": clipped} if counts else None

    __call__ = project

    def on_step_end(self, trainer, step: int) -> None:
        """Trainer callback: project after every optimizer step (no host read)."""
        self.project(counts=False)

    @property
    def input_bound(self) -> float | None:
        """The first layer's input bound the projection guarantees (``embedding_clip`` when an
        embedding is clipped, else None: the caller must bound the inputs)."""
        return self.embedding_clip if self.embedding is not None else None

    def certified_lambda(self, input_bound: float | None = None) -> float:
        """The largest certified ``lambda`` over all LSTMs (see :func:`lstm_contraction_bound`);
        ``input_bound`` defaults to :attr:`input_bound`, else 1."""
        B = input_bound if input_bound is not None else (self.input_bound if self.input_bound is not None else 1.0)
        return max(lstm_contraction_bound(m, B) for m in self.lstms)

    def describe(self) -> str:
        return (f"our variant (seq2d.lstm.LSTMProjection: recurrent gate blocks' row l1 norms <= {self.gate_bounds}, "
                f"forget-gate input rows <= {self.forget_input_bound}, forget bias <= {self.forget_bias_bound}, "
                f"embeddings clipped to [-{self.embedding_clip}, {self.embedding_clip}])")

    def __repr__(self) -> str:
        return (f"LSTMProjection(gate_bounds={self.gate_bounds}, forget_input_bound={self.forget_input_bound}, "
                f"forget_bias_bound={self.forget_bias_bound}, embedding_clip={self.embedding_clip}, norm={self.norm!r})")


class AuthorLSTMNormalization:
    r"""The author's stable-LSTM normalisation, *as described in the audit of issue 12* (the
    author's ``--stabilize`` in his fork of PyTorch's word-language-model example; not checked
    against the code -- we have only that description).

    For every layer ``l`` in ``layers`` (default ``(0,)``: the description names
    ``weight_hh_l0`` only) of every ``nn.LSTM`` in ``lstm_or_model``:

    * every *column* of gate ``k``'s ``(H, H)`` block of ``weight_hh_l{l}`` (torch layout
      ``(4H, H)``, gate order i, f, g, o) is rescaled to l1 norm exactly ``gate_scales[k]``
      (default ``i 0.395, f 0.155, g 0.099, o 0.395``) -- small columns are scaled *up*;
    * every column of the forget block of ``weight_ih_l{l}`` is rescaled to l1 norm
      ``forget_input_scale`` (0.25). The description says "the forget-gate input weights'
      scale is set to 0.25"; reading that as column l1 norms of the forget block is ours;
    * ``embedding`` (when given) is clipped to ``[-embedding_clip, embedding_clip]``.

    Nothing else moves (no bias constraint; an all-zero column stays zero). Column l1 norms are
    the operator 1-norm of each block, not the row norms (operator inf-norm) the l-infinity
    certificate of :func:`lstm_contraction_bound` needs, so this normalisation does not by itself
    certify a contraction; :meth:`certified_lambda` reports what the current weights give.

    Same interface as :class:`LSTMProjection`: ``proj()`` / ``proj.project()`` after
    ``optimizer.step()``, or a :class:`seq2d.train.Trainer` callback (``on_step_end``).
    """

    method = "author"

    def __init__(
        self,
        lstm_or_model,
        *,
        gate_scales: Mapping[str, float | None] | None = None,
        forget_input_scale: float | None = AUTHOR_FORGET_INPUT_SCALE,
        layers=(0,),
        embedding=None,
        embedding_clip: float | None = 1.0,
    ) -> None:
        self.lstms = _lstms(lstm_or_model)
        scales = dict(PAPER_GATE_BOUNDS if gate_scales is None else gate_scales)
        for k in scales:
            if k not in GATES:
                raise InvalidValue(f"Unknown gate {k!r} in gate_scales. Select from {', '.join(map(repr, GATES))}")
        self.gate_scales = {k: _check_bound(f"gate_scales[{k!r}]", scales.get(k)) for k in GATES}
        self.forget_input_scale = _check_bound("forget_input_scale", forget_input_scale)
        if layers is None:
            layers = tuple(range(max(m.num_layers for m in self.lstms)))
        layers = tuple(layers)
        for l in layers:
            if isinstance(l, bool) or not isinstance(l, int) or not all(0 <= l < m.num_layers for m in self.lstms):
                raise InvalidValue(f"layers must be layer indices of every LSTM (or None: all), got {layers!r}")
        self.layers = layers
        self.embedding_clip = _check_bound("embedding_clip", embedding_clip)
        if embedding is not None and not isinstance(embedding, (nn.Embedding, Tensor)):
            raise InvalidType(f"embedding must be an nn.Embedding or a tensor, got {type(embedding).__name__}")
        self.embedding = embedding

    @staticmethod
    @torch.no_grad()
    def _normalize_columns_(w: Tensor, scale: float, count: bool = True) -> int:
        norms = w.abs().sum(dim=0)
        nz = norms > 0
        w.mul_(torch.where(nz, scale / norms.clamp_min(torch.finfo(w.dtype).tiny), torch.ones_like(norms)))
        return int(nz.sum()) if count else 0

    @torch.no_grad()
    def project(self, model=None, *, counts: bool = True) -> dict | None:
        """Normalise in place; returns ``{"columns": columns rescaled, "embedding": entries
        clipped}`` (``model`` is ignored, as in :meth:`LSTMProjection.project`; ``counts=False``:
        no host read, returns None)."""
        cols = 0
        for lstm in self.lstms:
            H = lstm.hidden_size
            for l in self.layers:
                whh = getattr(lstm, f"weight_hh_l{l}")
                for k, c in self.gate_scales.items():
                    if c is not None:
                        cols += self._normalize_columns_(_gate(whh, k, H), c, counts)
                if self.forget_input_scale is not None:
                    cols += self._normalize_columns_(_gate(getattr(lstm, f"weight_ih_l{l}"), "f", H),
                                                     self.forget_input_scale, counts)
        clipped = 0
        if self.embedding is not None and self.embedding_clip is not None:
            from .lm import clip_embedding_

            clipped = clip_embedding_(self.embedding, self.embedding_clip, count=counts)
        return {"columns": cols, "embedding": clipped} if counts else None

    __call__ = project

    def on_step_end(self, trainer, step: int) -> None:
        """Trainer callback: normalise after every optimizer step (no host read)."""
        self.project(counts=False)

    @property
    def input_bound(self) -> float | None:
        """The embedding clip when an embedding is clipped, else None."""
        return self.embedding_clip if self.embedding is not None else None

    def certified_lambda(self, input_bound: float | None = None) -> float:
        """:func:`lstm_contraction_bound` of the current weights (largest over LSTMs); it need
        not be below 1 after this normalisation (see the class docstring)."""
        B = input_bound if input_bound is not None else (self.input_bound if self.input_bound is not None else 1.0)
        return max(lstm_contraction_bound(m, B) for m in self.lstms)

    def describe(self) -> str:
        return (f"author's normalisation as described in the audit of issue 12, not checked against the code "
                f"(seq2d.lstm.AuthorLSTMNormalization: every column of each gate block of weight_hh_l{{{','.join(map(str, self.layers))}}} "
                f"rescaled to l1 norm {self.gate_scales}, forget-gate input columns to {self.forget_input_scale}, "
                f"embeddings clipped to [-{self.embedding_clip}, {self.embedding_clip}])")

    def __repr__(self) -> str:
        return (f"AuthorLSTMNormalization(gate_scales={self.gate_scales}, forget_input_scale={self.forget_input_scale}, "
                f"layers={self.layers}, embedding_clip={self.embedding_clip})")


def make_lstm_stabilizer(lstm_or_model, method: str = "ours", **kw):
    """``method="ours"``: :class:`LSTMProjection` (our variant); ``"author"``:
    :class:`AuthorLSTMNormalization` (the author's, as described in the audit of issue 12).
    ``kw`` go to the class."""
    if method == "ours":
        return LSTMProjection(lstm_or_model, **kw)
    if method == "author":
        return AuthorLSTMNormalization(lstm_or_model, **kw)
    raise InvalidValue(f"Unknown method {method!r}. Select from {', '.join(map(repr, LSTM_STABILIZERS))}")


# ---------------------------------------------------------------------- certificate
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
