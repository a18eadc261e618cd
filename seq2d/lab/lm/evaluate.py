r"""Evaluation of the word-level LMs on a batchified token stream (``seq2d.lab.wikitext``).

* :func:`evaluate`: mean cross-entropy of an :class:`~seq2d.lab.lm.RNNLM`, recurrent (hidden
  state carried across BPTT segments) or k-truncated (``k=``; each prediction sees only the
  last ``k`` tokens of its stream), or of a :class:`~seq2d.lab.lm.TruncatedLM`.
* :func:`grad_norm_vs_distance`: ``||d loss_{t+i} / d x_t||`` at a few positions, each from a
  zero state ``burn_in`` tokens before ``t``.
* :func:`grad_norm_carried`: the same curve averaged over a whole stream, the hidden state
  carried from the stream's start (Miller & Hardt's Fig. 2 over a whole held-out set), with
  ``t`` one input position in every ``max_distance + 1``.
* :func:`grad_norm_windows`: ``||d loss_t / d x_{t-k}||`` for ``k = 0 .. K`` over a stated
  uniform sample of target positions ``t`` (every ``stride``-th; ``stride=1``: every position),
  each with its real carried history, every distance averaged over the same targets.
* :func:`lm_data_lambda`: :func:`seq2d.stability.data_lambda` of the recurrent part along the
  model's own trajectory on a stream.
* :func:`vanishing_distance`: where a gradient-vs-distance curve has fallen below a fraction of
  its start (our reading of the source's Fig. 2 criterion, "the gradient vanishes").
* :func:`divergence`: whether a trained LM counts as diverged (the one definition the
  experiments use to flag a run and leave it out of comparisons).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..wikitext import get_batch
from ...errors import InvalidValue
from .model import RNNLM, TruncatedLM

__all__ = ["VANISH_FRACTION", "divergence", "evaluate", "evaluate_truncated", "grad_norm_carried", "grad_norm_vs_distance",
           "grad_norm_windows", "lm_data_lambda", "perplexity", "vanishing_distance"]

#: Our threshold for "the gradient has vanished" when a gradient-vs-distance curve is read against
#: the source's stable-regime criterion (Fig. 2 in the slides: the gradient with respect to the
#: inputs vanishes for moderate distances): below this fraction of its value at distance 0.
VANISH_FRACTION = 1e-2


def _input_grads():
    """Autograd through the recurrent layers in eval mode. cuDNN's RNN backward refuses eval mode
    ("cudnn RNN backward can only be called in training mode", seen on an H200, 2026-11-26), so
    cuDNN is switched off here and torch's native RNN kernels (the CPU's too) compute it."""
    from contextlib import ExitStack

    stack = ExitStack()
    stack.enter_context(torch.enable_grad())
    stack.enter_context(torch.backends.cudnn.flags(enabled=False))
    return stack


def _repackage(h):
    return tuple(x.detach() for x in h) if isinstance(h, tuple) else h.detach()


@torch.no_grad()
def evaluate(model: RNNLM | TruncatedLM, source: Tensor, bptt: int = 35, *, k: int | None = None) -> float:
    """Mean cross-entropy (nats per token) over a batchified ``source`` (``(N, B)``); ``exp`` of
    it is the perplexity. An :class:`RNNLM` runs recurrently, the hidden state carried across
    BPTT segments from a zero start, or k-truncated with ``k=`` (:meth:`RNNLM.window_features`);
    a :class:`TruncatedLM` always runs truncated at its own ``k``. Eval mode."""
    if isinstance(model, TruncatedLM):
        if k is not None and k != model.k:
            raise InvalidValue(f"evaluate: a TruncatedLM runs at its own k={model.k}, got k={k}")
        k = model.k
    was = model.training
    model.eval()
    hidden = model.init_hidden(source.shape[1]) if k is None else None
    total, count = torch.zeros((), dtype=torch.float64, device=source.device), 0
    for i in range(0, source.shape[0] - 1, bptt):
        x, y = get_batch(source, i, bptt)
        if k is None:
            feats, hidden = model.features(x, hidden)
        else:
            ctx = source[max(0, i - (k - 1)):i]
            feats = model.features(x, ctx) if isinstance(model, TruncatedLM) else model.window_features(x, k, ctx)
        total += model.nll(feats, y, "sum").double()  # on the device: one sync at the end
        count += y.numel()
    model.train(was)
    return float(total) / max(count, 1)


def evaluate_truncated(model: TruncatedLM, source: Tensor, bptt: int = 35) -> float:
    """:func:`evaluate` of a :class:`TruncatedLM`: each segment is given the ``k - 1`` tokens
    before it, so every prediction sees the last ``k`` tokens of its stream."""
    return evaluate(model, source, bptt)


def grad_norm_vs_distance(model: RNNLM, data: Tensor, max_distance: int = 50, n_seqs: int = 16,
                          burn_in: int = 10) -> list[float]:
    r"""``||d loss_{t+i} / d x_t||_2`` for ``i = 0 .. max_distance`` (the paper's Fig. 2),
    averaged over ``n_seqs`` positions ``t`` spread evenly over the 1-D token tensor ``data``.

    ``x_t`` is the embedding input at position ``t`` (after the lookup); ``loss_{t+i}`` the
    cross-entropy of the prediction made at ``t + i``. Each sequence starts from a zero state
    ``burn_in`` tokens before ``t``. Eval mode (no dropout). :func:`grad_norm_carried` averages
    over a whole stream with the state carried instead."""
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
    with _input_grads():
        x = model.encoder(inputs).detach().requires_grad_(True)  # (L, n, emb)
        out, _ = model.rnn(x, model.init_hidden(n_seqs))
        losses = model.nll(model.drop(out), targets, "none")  # (L, n)
        curve = []
        for i in range(max_distance + 1):
            (g,) = torch.autograd.grad(losses[burn_in + i].sum(), x, retain_graph=i < max_distance)
            curve.append(float(g[burn_in].norm(dim=-1).mean()))  # sequences are independent
    model.train(was)
    return curve


def grad_norm_carried(model: RNNLM, source: Tensor, max_distance: int = 50, *,
                      max_segments: int | None = None) -> dict:
    r"""``||d loss_{t+i} / d x_t||_2`` for ``i = 0 .. max_distance``, averaged over a whole
    batchified stream ``source (N, B)`` with the hidden state carried.

    The stream is cut into consecutive segments of ``max_distance + 1`` positions; ``t`` is the
    first position of each segment in each column, and the hidden state entering it is the
    model's state after everything before it in its column (carried, detached, from a zero
    state at the column's start), so every segment sees its real history. A segment too short
    for a distance contributes to the shorter distances only. ``max_segments`` keeps the first
    segments (quick runs). Eval mode.

    Returns ``{"curve": [mean over (segment, column) per i], "count": [terms per i],
    "segments": n, "columns": B}``."""
    if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 0:
        raise InvalidValue(f"grad_norm_carried: max_distance must be an int >= 0, got {max_distance!r}")
    was = model.training
    model.eval()
    D = max_distance + 1
    B = source.shape[1]
    sums = torch.zeros(D, dtype=torch.float64)
    counts = [0] * D
    hidden = model.init_hidden(B)
    n = 0
    for i in range(0, source.shape[0] - 1, D):
        if max_segments is not None and n >= max_segments:
            break
        inputs, targets = get_batch(source, i, D)
        L = inputs.shape[0]
        with _input_grads():
            x = model.encoder(inputs).detach().requires_grad_(True)  # (L, B, emb)
            out, new_hidden = model.rnn(x, hidden)
            losses = model.nll(model.drop(out), targets, "none")  # (L, B)
            for d in range(L):
                (g,) = torch.autograd.grad(losses[d].sum(), x, retain_graph=d < L - 1)
                sums[d] += float(g[0].norm(dim=-1).double().sum())
                counts[d] += B
        hidden = _repackage(new_hidden)
        n += 1
    model.train(was)
    curve = [float(sums[d] / counts[d]) if counts[d] else math.nan for d in range(D)]
    return {"curve": curve, "count": counts, "segments": n, "columns": B}


def _cat_states(hs: list):
    """Hidden states (``(layers, B, H)`` or the LSTM's ``(h, c)``) side by side in the batch."""
    if isinstance(hs[0], tuple):
        return tuple(torch.cat([h[i] for h in hs], dim=1) for i in range(len(hs[0])))
    return torch.cat(hs, dim=1)


def grad_norm_windows(model: RNNLM, source: Tensor, max_distance: int = 50, *, stride: int = 1,
                      chunk: int = 256) -> dict:
    r"""``||d loss_t / d x_{t-k}||_2`` for ``k = 0 .. K`` (``K = max_distance``; the paper's Fig. 2
    read from the loss's side), averaged over a uniform sample of target positions of a
    batchified stream ``source (N, B)``, the hidden state carried.

    ``x_s`` is the embedding input at row ``s`` of a column, ``loss_t`` the cross-entropy of the
    prediction made at row ``t`` (of the token at ``t + 1``). The targets are the rows
    ``t = K, K + stride, K + 2 stride, ... <= N - 2`` of every column (``stride = 1``: every row
    that has ``K`` rows before it; the first ``K`` rows of a column are never targets). Each
    target's window, rows ``t - K .. t``, starts from the model's state after every row before it
    in its column (carried, detached, from a zero state at the column's start, as
    :func:`evaluate` runs the stream), so every gradient is the full model's: ``x_{t-k}`` reaches
    ``loss_t`` only through the rows ``t - k .. t`` of the window. Every distance is averaged over
    the same targets (unlike :func:`grad_norm_carried`, whose longer distances have fewer terms).
    The windows run ``chunk`` at a time (rounded to whole window starts of ``B`` columns) as one
    batch, one backward pass each. Eval mode.

    Returns ``{"curve": [mean over targets per k], "sd": [standard deviation over targets per
    k], "targets": n, "stride", "first_row": K, "rows": N, "columns": B}``."""
    for what, v, least in (("max_distance", max_distance, 0), ("stride", stride, 1), ("chunk", chunk, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise InvalidValue(f"grad_norm_windows: {what} must be an int >= {least}, got {v!r}")
    if not isinstance(source, Tensor) or source.dim() != 2:
        raise InvalidValue(f"grad_norm_windows: expected a batchified stream (N, B), got {getattr(source, 'shape', type(source))}")
    K, D = max_distance, max_distance + 1
    N, B = source.shape
    if N - 2 < K:
        raise InvalidValue(f"grad_norm_windows: a stream of {N} rows has no target with {K} rows before it "
                           f"(needs N >= max_distance + 2 = {K + 2}); lower max_distance or give a longer stream")
    starts = list(range(0, N - 1 - K, stride))  # window starts b: target row b + K <= N - 2
    was = model.training
    model.eval()
    sums = torch.zeros(D, dtype=torch.float64)
    sq = torch.zeros(D, dtype=torch.float64)
    offs = torch.arange(D, device=source.device)
    hidden, pos = model.init_hidden(B), 0  # the carried state, at row pos of every column
    per = max(1, chunk // B)  # window starts per batch: chunk windows (at least one start's B columns)
    for c0 in range(0, len(starts), per):
        bs = starts[c0:c0 + per]
        states = []
        with torch.no_grad():  # the carried state at each window start: one pass over the stream, cut there
            for b in bs:
                if b > pos:
                    _, hidden = model.rnn(model.encoder(source[pos:b]), hidden)
                    pos = b
                states.append(hidden)
        rows = torch.tensor(bs, device=source.device)[:, None] + offs  # (n, D)
        inputs = source[rows.T.reshape(-1)].view(D, len(bs) * B)  # window j's column c at j * B + c
        targets = source[rows[:, -1] + 1].reshape(-1)  # (n * B,)
        h0 = _cat_states(states)
        with _input_grads():
            x = model.encoder(inputs).detach().requires_grad_(True)  # (D, n * B, emb)
            out, _ = model.rnn(x, h0)
            loss = model.nll(model.drop(out[-1]), targets, "none")  # (n * B,)
            (g,) = torch.autograd.grad(loss.sum(), x)
        norms = g.norm(dim=-1).double().flip(0)  # (D, n * B): row k is distance k
        sums += norms.sum(dim=1).cpu()
        sq += (norms ** 2).sum(dim=1).cpu()
    model.train(was)
    n = len(starts) * B
    mean = sums / n
    var = (sq / n - mean ** 2).clamp_min(0) * (n / (n - 1)) if n > 1 else torch.zeros(D, dtype=torch.float64)
    return {"curve": mean.tolist(), "sd": var.sqrt().tolist(), "targets": n, "stride": stride, "first_row": K,
            "rows": N, "columns": B}


@torch.no_grad()
def lm_data_lambda(model: RNNLM, tokens: Tensor, *, iters: int = 20) -> dict:
    r""":func:`seq2d.stability.data_lambda` of the model's recurrent part (the tanh RNN's
    layers; for the LSTM :func:`seq2d.lab.lstm.lstm_data_lambda`, its ``(h, c)`` per layer) along
    its own trajectory on ``tokens (T, B)``
    (time first; a zero state at the start), the inputs being the embeddings. Eval mode.
    Returns its dict (``max``, ``mean`` and per-core details)."""
    from ...stability import data_lambda  # the stability floor: imported when used
    from ..lstm.jacobian import lstm_data_lambda

    was = model.training
    model.eval()
    try:
        xs = model.encoder(tokens)
        with torch.enable_grad():
            if isinstance(model.rnn, torch.nn.LSTM):  # not a Sequential2D: its exact (h, c) Jacobian per step
                return lstm_data_lambda(model.rnn, xs)
            return data_lambda(model.rnn, xs, iters=iters)
    finally:
        model.train(was)


def perplexity(loss: float) -> float:
    """``exp(loss)`` (inf when it overflows)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def divergence(loss: float | None, vocab_size: int, *, training: str | None = None) -> str | None:
    """Why a trained language model counts as **diverged**, or None when it does not.

    The definition every stable-RNN experiment uses (flag the run, leave it out of comparisons):

    * training stopped on a non-finite loss (``training``: the ``diverged`` reason that
      :func:`seq2d.lab.lm.train_lm` returns), or
    * its mean loss ``loss`` (nats per token; None stands for a non-finite value, as the results
      JSON stores it) is not finite, or
    * its perplexity ``exp(loss)`` exceeds ``vocab_size``: worse than the uniform guess over the
      vocabulary, whose perplexity is exactly ``vocab_size`` (a model that learned anything is
      far below it).
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise InvalidValue(f"divergence: vocab_size must be a positive int, got {vocab_size!r}")
    if training:
        return f"training stopped: {training}"
    if loss is None or not math.isfinite(loss):
        return "non-finite loss"
    if loss > math.log(vocab_size):
        return f"perplexity {perplexity(loss):.6g} above the vocabulary size {vocab_size:,} (worse than a uniform guess)"
    return None


def vanishing_distance(curve: list, fraction: float = VANISH_FRACTION) -> int | None:
    """The first distance ``i`` with ``curve[i] < fraction * curve[0]`` (``curve`` as
    :func:`grad_norm_carried` returns it), or None when the curve never gets there. The source's
    criterion is qualitative (the gradient "vanishes for moderate values of i"); the fraction
    (:data:`VANISH_FRACTION` by default) is ours."""
    if not curve or curve[0] is None or not curve[0] > 0:
        return None
    return next((i for i, v in enumerate(curve) if v is not None and v < fraction * curve[0]), None)
