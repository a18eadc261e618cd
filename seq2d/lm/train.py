r"""Training the word-level LMs the classic ``word_language_model`` way, recurrent or
k-truncated, and the distance between two trained models' weights.

:func:`train_lm`: SGD at ``lr``, divided by 4 whenever the validation loss stops improving,
gradient-norm clip, BPTT segments of a batchified stream, the best-validation weights kept.
With ``k=None`` the model is recurrent (hidden state carried across segments and detached);
with ``k`` it is trained as its k-truncated feed-forward version (every position sees only
its last ``k`` tokens, :meth:`RNNLM.window_features`), validation measured the same way. Same
batches, same order, same steps: only the model's view of the past differs, which is the
comparison behind Miller & Hardt's training result (arXiv 1805.10369): for a stable model, gradient
descent on the truncated and on the recurrent model ends at nearby weights.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable

import torch
from torch import Tensor

from ..data.wikitext import get_batch
from ..errors import InvalidValue
from .evaluate import _repackage, evaluate, perplexity
from .model import RNNLM

__all__ = ["recurrent_weights", "train_lm", "weight_distance"]


def train_lm(model: RNNLM, train: Tensor, valid: Tensor, *, epochs: int, lr: float = 20.0, clip: float = 0.25,
             bptt: int = 35, k: int | None = None, stabilize: Callable[[], object] | None = None,
             max_batches: int | None = None, lr_decay: float | None = None, name: str = "model",
             log: Callable[[str], None] | None = print) -> dict:
    """Train ``model`` on the batchified ``train`` stream; returns ``history`` (a row per epoch:
    ``train_loss``, ``valid_loss``, ``lr``, ``epoch_time_s``, perplexities), ``best_valid_loss``,
    ``steps``, ``diverged`` (a reason or None) and ``train_time_s``; ``model`` ends with its
    best-validation weights. ``stabilize()`` runs after every optimizer step (a projection).
    ``lr_decay = T``: step ``t`` (from 0) uses ``lr / (1 + t / T)``, the alpha/t rule of Miller &
    Hardt's weight-closeness result asymptotically (alpha = lr T), on top of the plateau rule.
    A non-finite training loss stops training (the best weights so far are kept); on a GPU the
    loss is checked every 50 steps and at the end of each epoch rather than every step, so the
    loop does not wait for the device at every step (on the CPU: every step)."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
        raise InvalidValue(f"train_lm: epochs must be an int >= 0, got {epochs!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
        raise InvalidValue(f"train_lm: k must be a positive int or None, got {k!r}")
    if lr_decay is not None and (isinstance(lr_decay, bool) or not isinstance(lr_decay, (int, float))
                                 or not math.isfinite(lr_decay) or lr_decay <= 0):
        raise InvalidValue(f"train_lm: lr_decay must be a positive number of steps or None, got {lr_decay!r}")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    best, best_state, history, step, diverged = math.inf, None, [], 0, None
    bsz = train.shape[1]
    check_every = 1 if train.device.type == "cpu" else 50
    t_start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        hidden = model.init_hidden(bsz) if k is None else None
        total, count, t0 = torch.zeros((), dtype=torch.float64, device=train.device), 0, time.perf_counter()
        nonfinite = torch.zeros((), dtype=torch.bool, device=train.device)
        for b, i in enumerate(range(0, train.shape[0] - 1, bptt)):
            if max_batches is not None and b >= max_batches:
                break
            x, y = get_batch(train, i, bptt)
            opt.zero_grad(set_to_none=True)
            if k is None:
                hidden = _repackage(hidden)
                feats, hidden = model.features(x, hidden)
            else:
                feats = model.window_features(x, k, train[max(0, i - (k - 1)):i])
            loss = model.nll(feats, y, "mean")
            nonfinite |= ~torch.isfinite(loss.detach())
            if (b + 1) % check_every == 0 and bool(nonfinite):
                diverged = f"non-finite training loss at epoch {epoch}, by batch {b + 1}"
                break
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if lr_decay is not None:
                for g in opt.param_groups:
                    g["lr"] = lr / (1 + step / lr_decay)
            opt.step()
            step += 1
            if stabilize is not None:
                stabilize()
            total += loss.detach().double() * y.numel()
            count += y.numel()
        if not diverged and bool(nonfinite):  # (also the device sync that ends the epoch's timing)
            diverged = f"non-finite training loss in epoch {epoch}"
        total = float(total)
        epoch_time = time.perf_counter() - t0
        if diverged:
            if log:
                log(f"[{name}] {diverged}: keeping the best weights so far")
            break
        val = evaluate(model, valid, bptt, k=k)
        row = {"epoch": epoch, "step": step, "train_loss": total / max(count, 1), "lr": lr,
               "epoch_time_s": round(epoch_time, 3), "device": str(train.device), "valid_loss": val,
               "valid_ppl": perplexity(val), "train_ppl": perplexity(total / max(count, 1))}
        history.append(row)
        if log:
            log(f"[{name}] epoch {epoch}/{epochs}  lr {lr:g}  train ppl {row['train_ppl']:.2f}  "
                f"valid ppl {row['valid_ppl']:.2f}  ({epoch_time:.1f}s)")
        if val < best:
            best, best_state = val, copy.deepcopy(model.state_dict())
        else:  # validation stopped improving: anneal
            lr /= 4.0
            for g in opt.param_groups:
                g["lr"] = lr
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"history": history, "best_valid_loss": best, "steps": step, "diverged": diverged,
            "train_time_s": round(time.perf_counter() - t_start, 3)}


def recurrent_weights(model: RNNLM) -> dict[str, Tensor]:
    """The recurrent part's parameters by name (``rnn.`` prefix: the tanh RNN's ``W_ih``,
    ``W_hh`` and slot biases, or the ``nn.LSTM``'s weights), detached."""
    return {f"rnn.{n}": p.detach() for n, p in model.rnn.named_parameters()}


def weight_distance(a: RNNLM, b: RNNLM, *, reference: RNNLM | None = None) -> dict:
    r"""``||theta_a - theta_b||_F`` over the recurrent weights (``recurrent``) and over all
    parameters (``all``), each also relative to ``||theta_b||_F`` (``*_rel``); with
    ``reference`` (e.g. the common initialisation) also ``||theta_b - theta_ref||_F``
    (``*_moved``: how far ``b`` travelled, the scale the distance is read against). float64."""
    def flat(ps):
        return torch.cat([p.detach().double().reshape(-1).cpu() for p in ps])

    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    if pa.keys() != pb.keys() or any(pa[n].shape != pb[n].shape for n in pa):
        raise InvalidValue("weight_distance: the two models have different parameters (same constructor arguments needed)")
    out = {}
    for what, names in (("recurrent", [n for n in pa if n.startswith("rnn.")]), ("all", list(pa))):
        va, vb = flat(pa[n] for n in names), flat(pb[n] for n in names)
        out[what] = float((va - vb).norm())
        out[f"{what}_rel"] = float((va - vb).norm() / vb.norm().clamp_min(1e-300))
        if reference is not None:
            pr = dict(reference.named_parameters())
            out[f"{what}_moved"] = float((vb - flat(pr[n] for n in names)).norm())
    return out
