r"""Word-level language models for the stable-RNN experiments (Miller & Hardt, arXiv 1805.10369).

:class:`RNNLM` is the classic PyTorch ``word_language_model``: embedding -> dropout ->
recurrent layers -> dropout -> linear decoder. With ``cell="tanh"`` the recurrent part is a
Sequential2D RNN (:func:`seq2d.rnn`, called like ``nn.RNN``) whose inter-layer dropout is a
module block; with ``cell="lstm"`` it is ``nn.LSTM(dropout=p)``. :meth:`RNNLM.truncated`
gives the feed-forward k-truncation the paper compares against (:class:`TruncatedLM`).

Helpers shared by the experiment and the tests: :func:`evaluate` (full model, hidden state
carried across BPTT segments), :func:`evaluate_truncated` (each prediction sees the last k
tokens of its stream) and :func:`grad_norm_vs_distance` (``||d loss_{t+i} / d x_t||``).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import InvalidInput, InvalidType, InvalidValue
from .models.recurrent import rnn as _seq2d_rnn
from .core import Sequential2D
from .data.wikitext import get_batch
from .models.recurrent import RNN, truncated_rnn

__all__ = ["CELLS", "RNNLM", "TruncatedLM", "clip_embedding_", "evaluate", "evaluate_truncated", "grad_norm_vs_distance", "perplexity"]

CELLS = ("tanh", "lstm")


@torch.no_grad()
def clip_embedding_(embedding, bound: float = 1.0) -> int:
    """Clip an embedding's entries to ``[-bound, bound]`` in place; return how many moved.

    ``embedding``: an :class:`RNNLM` (its ``encoder``), an ``nn.Embedding`` or a weight tensor.
    This is the input bound the LSTM certificate assumes for the first layer
    (``seq2d.lstm``); both ``LSTMProjection`` and ``AuthorLSTMNormalization`` call it.
    """
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound < 0:
        raise InvalidValue(f"clip_embedding_: bound must be a finite number >= 0, got {bound!r}")
    if isinstance(embedding, RNNLM):
        embedding = embedding.encoder
    if isinstance(embedding, nn.Embedding):
        w = embedding.weight
    elif isinstance(embedding, Tensor):
        w = embedding
    else:
        raise InvalidType(f"clip_embedding_: expected an RNNLM, nn.Embedding or tensor, got {type(embedding).__name__}")
    n = int((w.abs() > bound).sum())
    if n:
        w.clamp_(-bound, bound)
    return n


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
    """

    def __init__(self, vocab: int, emb: int = 200, hidden: int = 200, layers: int = 2, dropout: float = 0.2,
                 cell: str = "tanh", tie_weights: bool = False, *, device=None, dtype=None) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        for name, v in (("vocab", vocab), ("emb", emb), ("hidden", hidden), ("layers", layers)):
            _check_pos_int(name, v)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise InvalidValue(f"RNNLM: dropout must be a probability in [0, 1), got {dropout!r}")
        if cell not in CELLS:
            raise InvalidValue(f"Unknown cell {cell!r}. Select from 'tanh' or 'lstm'.")
        if tie_weights and emb != hidden:
            raise InvalidValue(f"RNNLM: tie_weights needs emb == hidden, got emb={emb}, hidden={hidden}")
        self.vocab, self.emb, self.hidden, self.layers = vocab, emb, hidden, layers
        self.dropout, self.cell, self.tie_weights = float(dropout), cell, bool(tie_weights)
        self.encoder = nn.Embedding(vocab, emb, **factory_kwargs)
        self.drop = nn.Dropout(dropout)
        if cell == "tanh":
            self.rnn = _tanh_rnn(emb, hidden, layers, dropout, **factory_kwargs)
        else:
            self.rnn = nn.LSTM(emb, hidden, layers, dropout=dropout if layers > 1 else 0.0, **factory_kwargs)
        self.decoder = nn.Linear(hidden, vocab, **factory_kwargs)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.encoder.weight.uniform_(-0.1, 0.1)
            if not self.tie_weights:
                self.decoder.weight.uniform_(-0.1, 0.1)
            self.decoder.bias.zero_()

    def extra_repr(self) -> str:
        return (f"vocab={self.vocab}, emb={self.emb}, hidden={self.hidden}, layers={self.layers}, "
                f"dropout={self.dropout}, cell={self.cell!r}" + (", tie_weights=True" if self.tie_weights else ""))

    # ------------------------------------------------------------------ forward
    def init_hidden(self, bsz: int):
        ref = self.decoder.weight
        h = ref.new_zeros(self.layers, bsz, self.hidden)
        return (h, h.clone()) if self.cell == "lstm" else h

    def forward_embedded(self, x: Tensor, hidden=None):
        """The model after the embedding lookup: ``x (T, B, emb)`` -> ``(logits, hidden)``.
        (Dropout on ``x`` is the caller's; :meth:`forward` applies it.)"""
        out, hidden = self.rnn(x, hidden)  # (T, B, hidden)
        return self.decoder(self.drop(out)), hidden

    def forward(self, tokens: Tensor, hidden=None):
        if not isinstance(tokens, Tensor) or tokens.dim() != 2:
            raise InvalidInput(f"RNNLM: expected tokens of shape (T, B), got {getattr(tokens, 'shape', type(tokens))}")
        return self.forward_embedded(self.drop(self.encoder(tokens)), hidden)

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
        ref = self.decoder.weight
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
    differ from the full model's by ``O(lambda^k)``.

    * tanh: :func:`seq2d.truncated_rnn` of the RNN -- an acyclic, weight-tied Sequential2D
      evaluated on every full window at once (the first ``k - 1`` positions of a stream use
      its shorter unrollings, one call each: cheap for the k of the experiments, slow for k
      in the hundreds);
    * LSTM: a copy of the ``nn.LSTM`` run from zero over every length-``k`` window, all
      windows batched (``unfold``); the first ``k - 1`` positions of a stream come from one
      run over its first ``k - 1`` inputs (its output at ``t`` has seen ``x_0 .. x_t``).

    ``forward(tokens, context=None)``: ``tokens (T, B)``; ``context (c, B)`` are the ``c <= k - 1``
    tokens preceding them in the stream (so BPTT segments can be evaluated one at a time);
    returns logits ``(T, B, vocab)``. Meant for evaluation (call ``.eval()``).
    """

    def __init__(self, lm: RNNLM, k: int) -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise InvalidValue(f"TruncatedLM: k must be a positive int, got {k!r}")
        self.k = k
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
        if c >= k - 1 and T >= k:
            # every wanted position has a full window: skip the short prefixes
            win = x.unfold(0, k, 1)  # (n, B, E, k): window j covers positions j .. j+k-1
            n = win.shape[0]
            if self.cell == "tanh":
                y = self.rnn.core(win.permute(0, 1, 3, 2).reshape(n, B, k * E))  # oldest input slot first
            else:
                y = self.rnn(win.permute(3, 0, 1, 2).reshape(k, n * B, E))[0][-1].view(n, B, -1)
            return y[c - (k - 1):]
        if self.cell == "tanh":
            return self.rnn(x)[c:]
        outs = []
        m = min(k - 1, T)
        if m > 0:  # positions 0 .. m-1: one run over the prefix gives every shorter window
            outs.append(self.rnn(x[:m])[0])
        if T >= k:
            outs.append(self._features(x, k - 1))
        return torch.cat(outs, dim=0)[c:]

    def forward(self, tokens: Tensor, context: Tensor | None = None) -> Tensor:
        if not isinstance(tokens, Tensor) or tokens.dim() != 2:
            raise InvalidInput(f"TruncatedLM: expected tokens of shape (T, B), got {getattr(tokens, 'shape', type(tokens))}")
        c = 0
        if context is not None and context.numel():
            if context.dim() != 2 or context.shape[1] != tokens.shape[1]:
                raise InvalidInput(f"TruncatedLM: context must be (c, {tokens.shape[1]}), got {tuple(context.shape)}")
            context = context[-(self.k - 1):] if self.k > 1 else context[:0]
            c = context.shape[0]
            tokens = torch.cat([context, tokens], dim=0)
        x = self.drop(self.encoder(tokens))  # (c + T, B, emb)
        return self.decoder(self.drop(self._features(x, c)))


# ---------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(model: RNNLM, source: Tensor, bptt: int = 35) -> float:
    """Mean cross-entropy (nats per token) over a batchified ``source`` (``(N, B)``), the
    hidden state carried across BPTT segments from a zero start. ``exp`` of it is the perplexity."""
    was = model.training
    model.eval()
    hidden = model.init_hidden(source.shape[1])
    total, count = 0.0, 0
    for i in range(0, source.shape[0] - 1, bptt):
        x, y = get_batch(source, i, bptt)
        logits, hidden = model(x, hidden)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
        count += y.numel()
    model.train(was)
    return total / max(count, 1)


@torch.no_grad()
def evaluate_truncated(model: TruncatedLM, source: Tensor, bptt: int = 35) -> float:
    """Like :func:`evaluate` for a :class:`TruncatedLM`: each segment is given the ``k - 1``
    tokens before it, so every prediction sees the last ``k`` tokens of its stream."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, source.shape[0] - 1, bptt):
        x, y = get_batch(source, i, bptt)
        ctx = source[max(0, i - (model.k - 1)):i]
        logits = model(x, ctx)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
        count += y.numel()
    model.train(was)
    return total / max(count, 1)


def grad_norm_vs_distance(model: RNNLM, data: Tensor, max_distance: int = 50, n_seqs: int = 16,
                          burn_in: int = 10) -> list[float]:
    r"""``||d loss_{t+i} / d x_t||_2`` for ``i = 0 .. max_distance`` (the paper's Fig. 2),
    averaged over ``n_seqs`` positions ``t`` spread evenly over the 1-D token tensor ``data``.

    ``x_t`` is the embedding input at position ``t`` (after the lookup); ``loss_{t+i}`` the
    cross-entropy of the prediction made at ``t + i``. Each sequence starts from a zero state
    ``burn_in`` tokens before ``t``. Eval mode (no dropout)."""
    if max_distance < 0 or n_seqs <= 0 or burn_in < 0:
        raise InvalidValue(f"need max_distance >= 0, n_seqs > 0, burn_in >= 0, got {max_distance}, {n_seqs}, {burn_in}")
    length = burn_in + max_distance + 2  # inputs burn_in + max_distance + 1, targets shifted by one
    if data.numel() < length:
        raise InvalidValue(f"grad_norm_vs_distance: {data.numel()} tokens are fewer than the {length} one sequence needs")
    was = model.training
    model.eval()
    starts = torch.linspace(0, data.numel() - length, n_seqs).long().tolist()
    seqs = torch.stack([data[s:s + length] for s in starts], dim=1)  # (length, n_seqs)
    inputs, targets = seqs[:-1], seqs[1:]
    with torch.enable_grad():
        x = model.encoder(inputs).detach().requires_grad_(True)  # (L, n, emb)
        logits, _ = model.forward_embedded(x, model.init_hidden(n_seqs))
        losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                 reduction="none").view(targets.shape)  # (L, n)
        curve = []
        for i in range(max_distance + 1):
            (g,) = torch.autograd.grad(losses[burn_in + i].sum(), x, retain_graph=i < max_distance)
            curve.append(float(g[burn_in].norm(dim=-1).mean()))  # sequences are independent
    model.train(was)
    return curve


def perplexity(loss: float) -> float:
    """``exp(loss)`` (inf when it overflows)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf
