r"""Stable LSTMs during training: projections of ``nn.LSTM`` weights onto (or towards) the set
that :func:`~seq2d.lab.lstm.certificate.lstm_contraction_bound` certifies, applied after
every optimizer step. ``nn.LSTM`` is not a Sequential2D (its gates multiply slots), so this works
directly on the torch weights (``W_k`` = gate ``k``'s ``(H, H)`` block of ``weight_hh``, torch's
gate order i, f, g, o; the bound and its derivation: :mod:`seq2d.lab.lstm.certificate`).

* :class:`LSTMProjection` -- our variant: the projection (rows whose l1 norm exceeds the bound
  are scaled onto it, nothing else moves; forget biases above the bound are lowered; embeddings
  clipped); a trainer callback (``on_update_end``). It is our own construction, not the author's.
* :class:`AuthorLSTMNormalization` -- the author's normalisation *as described in the audit of
  issue 12* (the author's ``--stabilize`` in his word-language-model fork; not checked against
  the code): every *column* of each gate block of ``weight_hh_l0`` rescaled to l1 norm
  ``c_gate``, the columns of the forget block of ``weight_ih_l0`` to 0.25, embeddings clipped.
  Same interface. Column norms do not bound the row norms the certificate uses, so it certifies
  nothing by itself (:func:`lstm_contraction_bound` says what the resulting weights give).
* :func:`make_lstm_stabilizer` -- ``method="ours" | "author"``.
* :func:`clip_embedding_` -- the embedding clip both use (the certificate's input bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ...errors import InvalidType, InvalidValue
from .certificate import GATES, _check_bound, _check_lstm, _gate, _row_l1, lstm_contraction_bound

__all__ = [
    "PAPER_GATE_BOUNDS",
    "AUTHOR_FORGET_INPUT_SCALE",
    "AuthorLSTMNormalization",
    "LSTMProjection",
    "LSTM_STABILIZERS",
    "clip_embedding_",
    "make_lstm_stabilizer",
]

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


@torch.no_grad()
def clip_embedding_(embedding, bound: float = 1.0, *, count: bool = True) -> int | None:
    """Clip an embedding's entries to ``[-bound, bound]`` in place; return how many moved.

    ``embedding``: an ``nn.Embedding``, a weight tensor, or a module whose ``encoder`` is an
    ``nn.Embedding`` (a :class:`seq2d.lab.lm.RNNLM`). ``count=False`` clamps unconditionally (the
    same values) and returns None: no host read, so no GPU synchronisation. This is the input
    bound the LSTM certificate assumes for the first layer; both :class:`LSTMProjection` and
    :class:`AuthorLSTMNormalization` call it.
    """
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound < 0:
        raise InvalidValue(f"clip_embedding_: bound must be a finite number >= 0, got {bound!r}")
    if isinstance(embedding, nn.Module) and not isinstance(embedding, nn.Embedding):
        embedding = getattr(embedding, "encoder", embedding)
    if isinstance(embedding, nn.Embedding):
        w = embedding.weight
    elif isinstance(embedding, Tensor):
        w = embedding
    else:
        raise InvalidType(f"clip_embedding_: expected an RNNLM, nn.Embedding or tensor, got {type(embedding).__name__}")
    if not count:
        w.clamp_(-bound, bound)
        return None
    n = int((w.abs() > bound).sum())
    if n:
        w.clamp_(-bound, bound)
    return n


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
    :class:`seq2d.train.Trainer` callback (``on_update_end``).

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
        no host read (no GPU synchronisation; what :meth:`on_update_end` uses); returns None."""
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
            clipped = clip_embedding_(self.embedding, self.embedding_clip, count=counts)
        return {"rows": rows, "biases": biases, "embedding": clipped} if counts else None

    __call__ = project

    def on_update_end(self, trainer, update: int) -> None:
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
        return (f"our variant (seq2d.lab.lstm.LSTMProjection: recurrent gate blocks' row l1 norms <= {self.gate_bounds}, "
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
    ``optimizer.step()``, or a :class:`seq2d.train.Trainer` callback (``on_update_end``).
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
            clipped = clip_embedding_(self.embedding, self.embedding_clip, count=counts)
        return {"columns": cols, "embedding": clipped} if counts else None

    __call__ = project

    def on_update_end(self, trainer, update: int) -> None:
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
                f"(seq2d.lab.lstm.AuthorLSTMNormalization: every column of each gate block of weight_hh_l{{{','.join(map(str, self.layers))}}} "
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
