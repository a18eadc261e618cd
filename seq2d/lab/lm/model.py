r"""The word-level LMs: :class:`RNNLM` (recurrent, or k-truncated with its own parameters) and
:class:`TruncatedLM` (a weight copy in feed-forward form); the decoder helpers
:func:`output_scores` / :func:`output_nll` (``nn.Linear`` or adaptive softmax)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...arguments import check_factory
from ...core import Sequential2D
from ...errors import InvalidInput, InvalidType, InvalidValue
from ...models.recurrent import RNN, truncated_rnn
from ...models.recurrent import rnn as _seq2d_rnn
from ..lstm.projection import clip_embedding_  # the LSTM projections' input bound

__all__ = ["CELLS", "RNNLM", "TruncatedLM", "clip_embedding_", "output_nll", "output_scores"]

CELLS = ("tanh", "lstm")


def _check_pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise InvalidValue(f"RNNLM: {name} must be a positive int, got {v!r}")
    return v


def _tanh_rnn(emb: int, hidden: int, layers: int, dropout: float, **kw) -> RNN:
    r"""``seq2d.rnn`` with dropout on the input of every layer above the first, as a module
    block ``F[l][l-1] = Sequential(Dropout(p), W_ih^l)``::

        F = [[ .      .            .    ]
             [ W_ih1  W_hh1        .    ]     h1 = tanh(W_ih1 x + W_hh1 h1 + b1)
             [ .      D(W_ih2)     W_hh2]]    h2 = tanh(W_ih2 dropout(h1) + W_hh2 h2 + b2)

    which is what ``nn.RNN(dropout=p)`` computes (a fresh mask per step and layer). The graph
    is unchanged, so the pipeline delays of sequence mode are too."""
    r = _seq2d_rnn(emb, hidden, layers, "tanh", **kw)
    if dropout == 0 or layers == 1:
        return r
    core = r.core
    blocks = {(i, j): blk for i, j, _, blk in core.positions()}
    for l in range(2, layers + 1):
        blocks[(l, l - 1)] = nn.Sequential(nn.Dropout(dropout), blocks[(l, l - 1)])
    new = Sequential2D(
        core.sizes, blocks, bias=[None] + [core.bias(l) for l in range(1, layers + 1)],
        activations=[None] + ["tanh"] * layers, inputs=[0], outputs=[layers], steps=None, **kw,
    )
    return RNN(new, nonlinearity="tanh")


def output_scores(decoder: nn.Module, features: Tensor) -> Tensor:
    """Scores over the vocabulary from last-layer ``features (..., hidden)``: logits of an
    ``nn.Linear`` decoder, log-probabilities of an ``nn.AdaptiveLogSoftmaxWithLoss`` (both give
    the same cross-entropy)."""
    if isinstance(decoder, nn.AdaptiveLogSoftmaxWithLoss):
        return decoder.log_prob(features.reshape(-1, features.shape[-1])).view(*features.shape[:-1], -1)
    return decoder(features)


def output_nll(decoder: nn.Module, features: Tensor, targets: Tensor, reduction: str = "sum") -> Tensor:
    """Negative log-likelihood of ``targets`` (``features.shape[:-1]``) under the decoder:
    ``"sum"``, ``"mean"`` or ``"none"`` (shaped like ``targets``). The adaptive softmax never
    forms the full vocabulary's scores (only the clusters the targets fall in)."""
    if reduction not in ("sum", "mean", "none"):
        raise InvalidValue(f"reduction must be 'sum', 'mean' or 'none', got {reduction!r}")
    flat_f, flat_t = features.reshape(-1, features.shape[-1]), targets.reshape(-1)
    if isinstance(decoder, nn.AdaptiveLogSoftmaxWithLoss):
        nll = -decoder(flat_f, flat_t).output
    else:
        nll = F.cross_entropy(decoder(flat_f), flat_t, reduction="none")
    if reduction == "none":
        return nll.view(targets.shape)
    return nll.sum() if reduction == "sum" else nll.mean()


def _windows(rnn: nn.Module, x: Tensor, c: int, k: int) -> Tensor:
    """The k-truncation of ``rnn`` (called like ``nn.RNN``/``nn.LSTM``, time first) on
    ``x (T, B, E)``: last-layer outputs for positions ``c .. T-1``, each from a zero state over
    the last ``k`` inputs up to it (fewer at the start of ``x``, which is the start of a stream
    unless ``c >= k - 1``). All full windows run as one batch (``unfold``); the positions before
    the first full window come from one run over the first ``k - 1`` inputs (its output at
    ``t`` has seen ``x_0 .. x_t``, which is that position's whole window)."""
    T, B, E = x.shape
    outs = []
    if c < k - 1:
        m = min(k - 1, T)
        outs.append(rnn(x[:m])[0][c:])
    if T >= k:
        win = x.unfold(0, k, 1)  # (n, B, E, k): window j covers positions j .. j+k-1
        n = win.shape[0]
        y = rnn(win.permute(3, 0, 1, 2).reshape(k, n * B, E))[0][-1].view(n, B, -1)
        outs.append(y[max(0, c - (k - 1)):])
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)


def _check_k(k, who: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidValue(f"{who}: k must be a positive int, got {k!r}")
    return k


def _with_context(tokens: Tensor, context: Tensor | None, k: int, who: str) -> tuple[Tensor, int]:
    """``tokens`` with the last ``k - 1`` context tokens put in front, and how many that is."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 2:
        raise InvalidInput(f"{who}: expected tokens of shape (T, B), got {getattr(tokens, 'shape', type(tokens))}")
    if context is None or not context.numel() or k == 1:
        return tokens, 0
    if context.dim() != 2 or context.shape[1] != tokens.shape[1]:
        raise InvalidInput(f"{who}: context must be (c, {tokens.shape[1]}), got {tuple(context.shape)}")
    context = context[-(k - 1):]
    return torch.cat([context, tokens], dim=0), context.shape[0]


class RNNLM(nn.Module):
    r"""Embedding -> dropout -> recurrent (``layers`` deep) -> dropout -> decoder.

    ``forward(tokens, hidden=None)`` with ``tokens`` of shape ``(T, B)`` (time first) returns
    ``(logits (T, B, vocab), hidden)``; ``hidden`` is ``(layers, B, hidden)`` for the tanh RNN
    and ``(h, c)`` for the LSTM, as ``nn.RNN``/``nn.LSTM`` return it (``init_hidden(B)``
    gives zeros). Initialisation as in the classic example: embedding and decoder weights
    U(-0.1, 0.1), decoder bias 0, recurrent weights torch's default.

    Args:
        vocab: vocabulary size.
        emb: embedding size (default 200).
        hidden: hidden size per layer (default 200).
        layers: recurrent layers (default 2).
        dropout: on the embeddings, between layers and on the output (default 0.2).
        cell: ``"tanh"`` (a Sequential2D RNN) or ``"lstm"`` (``nn.LSTM``).
        tie_weights: share the embedding and decoder weights (needs ``emb == hidden``).
        adaptive_cutoffs: when given, the decoder is ``nn.AdaptiveLogSoftmaxWithLoss(hidden,
            vocab, adaptive_cutoffs, div_value=div_value)`` (Grave et al.; torch's own
            initialisation) instead of ``nn.Linear``: word ids must then be ordered by
            decreasing frequency (``Corpus(order="frequency")``), and ``forward`` returns
            log-probabilities instead of logits. Use :meth:`nll` for losses: it never forms the
            full vocabulary's scores.
        div_value: the adaptive softmax's size ratio between clusters (default 4.0).

    Two ways to run it on a token stream (both differentiable, same parameters):
    :meth:`forward` / :meth:`features` (recurrent, the hidden state carried by the caller) and
    :meth:`window_features` (the k-truncated feed-forward model of Miller & Hardt: each position
    from a zero state over its last ``k`` tokens). Training with the second trains the
    truncated model (``experiments/stable_rnn/truncated_training.py``).
    """

    def __init__(self, vocab: int, emb: int = 200, hidden: int = 200, layers: int = 2, dropout: float = 0.2,
                 cell: str = "tanh", tie_weights: bool = False, *, adaptive_cutoffs=None, div_value: float = 4.0,
                 device=None, dtype=None) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        check_factory(device, dtype, "RNNLM")
        for name, v in (("vocab", vocab), ("emb", emb), ("hidden", hidden), ("layers", layers)):
            _check_pos_int(name, v)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise InvalidValue(f"RNNLM: dropout must be a probability in [0, 1), got {dropout!r}")
        if cell not in CELLS:
            raise InvalidValue(f"Unknown cell {cell!r}. Select from 'tanh' or 'lstm'.")
        if tie_weights and emb != hidden:
            raise InvalidValue(f"RNNLM: tie_weights needs emb == hidden, got emb={emb}, hidden={hidden}")
        if adaptive_cutoffs is not None:
            cut = list(adaptive_cutoffs)
            if (not cut or any(isinstance(c, bool) or not isinstance(c, int) for c in cut)
                    or cut != sorted(set(cut)) or cut[0] <= 0 or cut[-1] >= vocab):
                raise InvalidValue(f"RNNLM: adaptive_cutoffs must be increasing ints in (0, vocab={vocab}), got {adaptive_cutoffs!r}")
            if tie_weights:
                raise InvalidValue("RNNLM: tie_weights cannot be used with an adaptive softmax decoder")
            small = [i + 1 for i in range(len(cut)) if int(hidden // (div_value ** (i + 1))) < 1]
            if small:
                raise InvalidValue(f"RNNLM: an adaptive softmax with hidden={hidden}, div_value={div_value} gives tail "
                                   f"cluster {small[0]} a projection of size 0 (hidden // div_value**{small[0]}); "
                                   "use fewer cutoffs, a smaller div_value or a larger hidden size")
            adaptive_cutoffs = cut
        self.adaptive_cutoffs = adaptive_cutoffs
        self.vocab, self.emb, self.hidden, self.layers = vocab, emb, hidden, layers
        self.dropout, self.cell, self.tie_weights = float(dropout), cell, bool(tie_weights)
        self.encoder = nn.Embedding(vocab, emb, **factory_kwargs)
        self.drop = nn.Dropout(dropout)
        if cell == "tanh":
            self.rnn = _tanh_rnn(emb, hidden, layers, dropout, **factory_kwargs)
        else:
            self.rnn = nn.LSTM(emb, hidden, layers, dropout=dropout if layers > 1 else 0.0, **factory_kwargs)
        if adaptive_cutoffs is None:
            self.decoder = nn.Linear(hidden, vocab, **factory_kwargs)
        else:
            self.decoder = nn.AdaptiveLogSoftmaxWithLoss(hidden, vocab, adaptive_cutoffs, div_value=div_value,
                                                         **factory_kwargs)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.encoder.weight.uniform_(-0.1, 0.1)
            if self.adaptive_cutoffs is not None:
                self.decoder.reset_parameters()  # torch's own initialisation
                return
            if not self.tie_weights:
                self.decoder.weight.uniform_(-0.1, 0.1)
            self.decoder.bias.zero_()

    def extra_repr(self) -> str:
        return (f"vocab={self.vocab}, emb={self.emb}, hidden={self.hidden}, layers={self.layers}, "
                f"dropout={self.dropout}, cell={self.cell!r}" + (", tie_weights=True" if self.tie_weights else "")
                + (f", adaptive_cutoffs={self.adaptive_cutoffs}" if self.adaptive_cutoffs is not None else ""))

    # ------------------------------------------------------------------ forward
    def init_hidden(self, bsz: int):
        ref = self.encoder.weight
        h = ref.new_zeros(self.layers, bsz, self.hidden)
        return (h, h.clone()) if self.cell == "lstm" else h

    def forward_embedded(self, x: Tensor, hidden=None):
        """The model after the embedding lookup: ``x (T, B, emb)`` -> ``(scores, hidden)``.
        (Dropout on ``x`` is the caller's; :meth:`forward` applies it.)"""
        out, hidden = self.rnn(x, hidden)  # (T, B, hidden)
        return output_scores(self.decoder, self.drop(out)), hidden

    def forward(self, tokens: Tensor, hidden=None):
        """``(scores (T, B, vocab), hidden)``: logits, or log-probabilities with an adaptive softmax."""
        out, hidden = self.features(tokens, hidden)
        return output_scores(self.decoder, out), hidden

    def features(self, tokens: Tensor, hidden=None) -> tuple[Tensor, object]:
        """``(features (T, B, hidden), hidden)``: the last layer's outputs after the output
        dropout, what the decoder reads; :meth:`nll` turns them into losses."""
        if not isinstance(tokens, Tensor) or tokens.dim() != 2:
            raise InvalidInput(f"RNNLM: expected tokens of shape (T, B), got {getattr(tokens, 'shape', type(tokens))}")
        out, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        return self.drop(out), hidden

    def window_features(self, tokens: Tensor, k: int, context: Tensor | None = None) -> Tensor:
        r"""The k-truncated (feed-forward) model with this model's own parameters: features
        ``(T, B, hidden)`` where position ``t`` is the recurrent part run from a zero state over
        the last ``k`` tokens up to ``t`` only. ``context (c, B)``: the tokens just before
        ``tokens`` in the stream (the last ``k - 1`` are used), so a stream can be processed in
        BPTT segments; without it the segment is the stream's start. Equal to :class:`TruncatedLM`
        (which copies the weights into a Sequential2D feed-forward form) and differentiable:
        training through it trains the truncated model."""
        k = _check_k(k, "RNNLM.window_features")
        tokens, c = _with_context(tokens, context, k, "RNNLM.window_features")
        return self.drop(_windows(self.rnn, self.drop(self.encoder(tokens)), c, k))

    def nll(self, features: Tensor, targets: Tensor, reduction: str = "sum") -> Tensor:
        """Negative log-likelihood of ``targets (T, B)`` given :meth:`features` /
        :meth:`window_features` output (:func:`output_nll`)."""
        return output_nll(self.decoder, features, targets, reduction)

    # ------------------------------------------------------------------ recurrent weights
    def recurrent_layers(self) -> list[tuple[Tensor, Tensor, Tensor | None]]:
        """Per layer ``(W_ih, W_hh, bias)`` of the tanh RNN (the live parameters; the bias is
        the one slot bias, ``b_ih + b_hh`` of ``nn.RNN``)."""
        if self.cell != "tanh":
            raise InvalidType("recurrent_layers() is for cell='tanh'; read the nn.LSTM's weight_*_l* directly")
        out = []
        for l in range(1, self.layers + 1):
            wih, whh = self.rnn.layer_blocks(l)
            if isinstance(wih, nn.Sequential):  # Dropout -> LinearBlock
                wih = wih[-1]
            out.append((wih.weight, whh.weight, self.rnn.core.bias(l)))
        return out

    def plain_rnn(self) -> RNN:
        """A dropout-free copy of the tanh RNN (``seq2d.rnn`` layout, weights copied)."""
        ref = self.encoder.weight
        r = _seq2d_rnn(self.emb, self.hidden, self.layers, "tanh", device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            for l, (wih, whh, b) in enumerate(self.recurrent_layers(), start=1):
                bih, bhh = r.layer_blocks(l)
                bih.weight.copy_(wih)
                bhh.weight.copy_(whh)
                r.core.bias(l).copy_(b)
        return r

    def truncated(self, k: int) -> "TruncatedLM":
        """The feed-forward k-truncation (weights copied, nothing shared): see :class:`TruncatedLM`."""
        return TruncatedLM(self, k)


class TruncatedLM(nn.Module):
    r"""The k-truncated, feed-forward version of an :class:`RNNLM` (weights copied).

    The prediction at position ``t`` is the recurrent model run from a zero state over the
    last ``k`` inputs ``x_{t-k+1} .. x_t`` only (fewer at the start of a stream). This is the
    feed-forward model of the paper's truncation results: for a stable model its outputs
    differ from the full model's by ``O(lambda^k)``. :meth:`RNNLM.window_features` computes the
    same thing with the model's own (trainable) parameters; the tests prove the two equal.

    * tanh: :func:`seq2d.truncated_rnn` of the RNN -- an acyclic, weight-tied Sequential2D
      evaluated on every full window at once (the first ``k - 1`` positions of a stream use
      its shorter unrollings, one call each: cheap for the k of the experiments, slow for k
      in the hundreds);
    * LSTM: a copy of the ``nn.LSTM`` run from zero over every length-``k`` window, all
      windows batched (``unfold``); the first ``k - 1`` positions of a stream come from one
      run over its first ``k - 1`` inputs (its output at ``t`` has seen ``x_0 .. x_t``).

    ``forward(tokens, context=None)``: ``tokens (T, B)``; ``context (c, B)`` are the ``c <= k - 1``
    tokens preceding them in the stream (so BPTT segments can be evaluated one at a time);
    returns scores ``(T, B, vocab)`` (logits, or log-probabilities with an adaptive softmax);
    :meth:`features` and :meth:`nll` as for :class:`RNNLM`. Meant for evaluation (call ``.eval()``).
    """

    def __init__(self, lm: RNNLM, k: int) -> None:
        super().__init__()
        self.k = _check_k(k, "TruncatedLM")
        self.cell = lm.cell
        self.encoder = copy.deepcopy(lm.encoder)
        self.decoder = copy.deepcopy(lm.decoder)
        if lm.tie_weights:
            self.decoder.weight = self.encoder.weight
        self.drop = nn.Dropout(lm.dropout)
        if lm.cell == "tanh":
            self.rnn = truncated_rnn(lm.plain_rnn(), k)
        else:
            self.rnn = copy.deepcopy(lm.rnn)
        self.train(lm.training)

    def extra_repr(self) -> str:
        return f"k={self.k}, cell={self.cell!r}"

    def _features(self, x: Tensor, c: int) -> Tensor:
        """Last-layer states for positions ``c .. T-1`` of ``x (T, B, emb)``."""
        T, B, E = x.shape
        k = self.k
        if self.cell != "tanh":
            return _windows(self.rnn, x, c, k)
        if c >= k - 1 and T >= k:  # every wanted position has a full window: the feed-forward core on all at once
            win = x.unfold(0, k, 1)  # (n, B, E, k)
            n = win.shape[0]
            y = self.rnn.core(win.permute(0, 1, 3, 2).reshape(n, B, k * E))  # oldest input slot first
            return y[c - (k - 1):]
        return self.rnn(x)[c:]

    def features(self, tokens: Tensor, context: Tensor | None = None) -> Tensor:
        tokens, c = _with_context(tokens, context, self.k, "TruncatedLM")
        return self.drop(self._features(self.drop(self.encoder(tokens)), c))

    def nll(self, features: Tensor, targets: Tensor, reduction: str = "sum") -> Tensor:
        return output_nll(self.decoder, features, targets, reduction)

    def forward(self, tokens: Tensor, context: Tensor | None = None) -> Tensor:
        return output_scores(self.decoder, self.features(tokens, context))
