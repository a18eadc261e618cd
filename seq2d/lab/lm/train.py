r"""Training the word-level LMs the classic ``word_language_model`` way, recurrent or
k-truncated, and the distance between two trained models' weights.

:func:`train_lm`: SGD at ``lr``, divided by 4 whenever the validation loss stops improving,
gradient-norm clip, BPTT segments of a batchified stream, the best-validation weights kept.
With ``k=None`` the model is recurrent (hidden state carried across segments and detached);
with ``k`` it is trained as its k-truncated feed-forward version (every position sees only
its last ``k`` tokens, :meth:`RNNLM.window_features`), validation measured the same way. Same
batches, same order, same updates: only the model's view of the past differs, which is the
comparison behind Miller & Hardt's training result (arXiv 1805.10369): for a stable model, gradient
descent on the truncated and on the recurrent model ends at nearby weights. ``patience`` stops
a run whose validation loss has stopped improving; ``checkpoint`` (a :class:`LoopCheckpoint`,
e.g. :class:`seq2d.lab.lm.checkpoint.LMCheckpoint`) makes a run survive a stop: it continues
from its last save, bitwise on the same machine and thread count.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor, nn

from ..wikitext import get_batch
from ...errors import InvalidValue
from ...renames import migrate_record
from .evaluate import _repackage, evaluate, perplexity
from .model import RNNLM

__all__ = ["LoopCheckpoint", "migrate_result", "recurrent_weights", "train_lm", "weight_distance"]


class LoopCheckpoint(Protocol):
    """Where :func:`train_lm` keeps its state so that a stopped run continues (``checkpoint=``);
    :class:`seq2d.lab.lm.checkpoint.LMCheckpoint` is the file-backed one (one atomic file)."""

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, settings: dict) -> dict | None:
        """The saved loop state (``None``: nothing saved yet), after putting the saved weights in
        ``model``, the optimizer state in ``optimizer`` and the process's random generators back
        as they were at the save; refuses a state saved under other ``settings``."""

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, settings: dict) -> None:
        """Keep ``state`` with the weights, the optimizer state, the random generators' states and
        ``settings``, atomically (a crash leaves the previous save or this one)."""


def train_lm(model: RNNLM, train: Tensor, valid: Tensor, *, epochs: int, lr: float = 20.0, clip: float = 0.25,
             bptt: int = 35, k: int | None = None, stabilize: Callable[[], object] | None = None,
             max_batches: int | None = None, lr_decay: float | None = None, patience: int | None = None,
             test: Tensor | None = None, checkpoint: LoopCheckpoint | None = None,
             checkpoint_every: int | None = None, name: str = "model",
             log: Callable[[str], None] | None = print) -> dict:
    """Train ``model`` on the batchified ``train`` stream; returns ``history`` (a row per epoch:
    ``train_loss``, ``valid_loss``, ``lr``, ``epoch_time_s``, perplexities; ``test_loss`` and
    ``test_ppl`` too when ``test`` is given, measured only, never used for a decision),
    ``best_valid_loss``, ``updates`` (optimizer updates taken), ``diverged`` (a reason or None),
    ``stopped`` (why training ended: ``"epochs"``, ``"patience"`` or ``"diverged"``), ``resumes``
    (where a stopped run was continued: ``{"epoch", "batch", "update"}`` each) and ``train_time_s``;
    each history row also holds ``epoch`` and ``update`` (updates so far); ``model`` ends with its
    best-validation weights. ``stabilize()`` runs after every optimizer update (a projection).
    ``lr_decay = T``: update ``t`` (from 0) uses ``lr / (1 + t / T)``, the alpha/t rule of Miller &
    Hardt's weight-closeness result asymptotically (alpha = lr T), on top of the plateau rule.
    ``patience = P``: stop once ``P`` epochs in a row have ended without a new best validation
    loss (each of them has already divided the lr by 4); ``epochs`` is the cap either way.
    A non-finite training loss stops training (the best weights so far are kept); on a GPU the
    loss is checked every 50 updates and at the end of each epoch rather than after every update,
    so the loop does not wait for the device at every update (on the CPU: after every update).

    ``checkpoint`` (a :class:`LoopCheckpoint`): the loop's state is saved at the end of every
    epoch, every ``checkpoint_every`` batches within one (when given) and once more when
    training ends (then with the best-validation weights), and a run finds there what to continue
    from: the epoch and batch reached, the hidden state carried to that batch, the epoch's running
    sums, the lr after plateau annealing, the best validation loss and its weights, the epochs
    since it, the history, and (the store's part) the weights, the optimizer and every random
    generator (dropout masks). A run continued this way on the same machine and thread count
    computes bitwise what the uninterrupted run computes; a finished one returns at once."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
        raise InvalidValue(f"train_lm: epochs must be an int >= 0, got {epochs!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
        raise InvalidValue(f"train_lm: k must be a positive int or None, got {k!r}")
    if lr_decay is not None and (isinstance(lr_decay, bool) or not isinstance(lr_decay, (int, float))
                                 or not math.isfinite(lr_decay) or lr_decay <= 0):
        raise InvalidValue(f"train_lm: lr_decay must be a positive number of updates or None, got {lr_decay!r}")
    for what, v in (("patience", patience), ("checkpoint_every", checkpoint_every)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise InvalidValue(f"train_lm: {what} must be a positive int or None, got {v!r}")
    if checkpoint_every is not None and checkpoint is None:
        raise InvalidValue("train_lm: checkpoint_every needs a checkpoint to save to (checkpoint=LMCheckpoint(path))")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    # what the run computes, beyond the model and the data's values: a saved state is continued only under these
    settings = {"epochs": epochs, "lr": lr, "clip": clip, "bptt": bptt, "k": k, "max_batches": max_batches,
                "lr_decay": lr_decay, "patience": patience, "train_shape": list(train.shape),
                "valid_shape": list(valid.shape), "test_shape": None if test is None else list(test.shape)}
    s, finished_before = _fresh_state(lr), False
    if checkpoint is not None:
        saved = checkpoint.load(model, opt, settings)
        if saved is not None:
            s, finished_before = saved, saved["stopped"] is not None
            if not finished_before:
                s["resumes"].append({"epoch": s["epoch"] + 1, "batch": s["batch"], "update": s["update"]})
                if log:
                    log(f"[{name}] resuming at epoch {s['epoch'] + 1}, batch {s['batch']} (update {s['update']})")
            elif log:
                log(f"[{name}] finished before ({s['stopped']}, {len(s['history'])} epochs): nothing to train")
    bsz = train.shape[1]
    starts = range(0, train.shape[0] - 1, bptt)
    n_batches = len(starts) if max_batches is None else min(len(starts), max_batches)
    check_every = 1 if train.device.type == "cpu" else 50
    t_start = time.perf_counter() - s["train_time_s"]

    def save(final: bool = False) -> None:
        s["train_time_s"] = round(time.perf_counter() - t_start, 3)
        checkpoint.save(model, opt, {**s, "best_state": None if final else s["best_state"]}, settings)

    while s["stopped"] is None and s["epoch"] < epochs:
        epoch = s["epoch"] + 1
        model.train()
        if s["batch"]:  # continuing inside an epoch
            hidden, p = s["hidden"], s["partial"]
            total, count, nonfinite = p["total"], p["count"], p["nonfinite"]
            t0 = time.perf_counter() - p["time_s"]
        else:
            hidden = model.init_hidden(bsz) if k is None else None
            total, count, t0 = torch.zeros((), dtype=torch.float64, device=train.device), 0, time.perf_counter()
            nonfinite = torch.zeros((), dtype=torch.bool, device=train.device)
        diverged = None
        for b in range(s["batch"], n_batches):
            i = starts[b]
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
                    g["lr"] = s["lr"] / (1 + s["update"] / lr_decay)
            opt.step()
            s["update"] += 1
            if stabilize is not None:
                stabilize()
            total += loss.detach().double() * y.numel()
            count += y.numel()
            if (checkpoint_every is not None and (b + 1) % checkpoint_every == 0 and b + 1 < n_batches
                    and not bool(nonfinite) and _finite_weights(model)):  # never save a state that could only diverge
                s["batch"], s["hidden"] = b + 1, None if hidden is None else _repackage(hidden)
                s["partial"] = {"total": total, "count": count, "nonfinite": nonfinite,
                                "time_s": time.perf_counter() - t0}
                save()
        s["batch"], s["hidden"], s["partial"] = 0, None, None
        if not diverged and bool(nonfinite):  # (also the device sync that ends the epoch's timing)
            diverged = f"non-finite training loss in epoch {epoch}"
        total = float(total)
        epoch_time = time.perf_counter() - t0
        if diverged:
            s["stopped"], s["diverged"] = "diverged", diverged
            if log:
                log(f"[{name}] {diverged}: keeping the best weights so far")
            break
        val = evaluate(model, valid, bptt, k=k)
        row = {"epoch": epoch, "update": s["update"], "train_loss": total / max(count, 1), "lr": s["lr"],
               "epoch_time_s": round(epoch_time, 3), "device": str(train.device), "valid_loss": val,
               "valid_ppl": perplexity(val), "train_ppl": perplexity(total / max(count, 1))}
        if test is not None:
            row["test_loss"] = evaluate(model, test, bptt, k=k)
            row["test_ppl"] = perplexity(row["test_loss"])
        s["history"].append(row)
        s["epoch"] = epoch
        if log:
            log(f"[{name}] epoch {epoch}/{epochs}  lr {s['lr']:g}  train ppl {row['train_ppl']:.2f}  "
                f"valid ppl {row['valid_ppl']:.2f}  ({epoch_time:.1f}s)")
        if val < s["best"]:
            s["best"], s["best_state"], s["since_best"] = val, copy.deepcopy(model.state_dict()), 0
        else:  # validation stopped improving: anneal
            s["since_best"] += 1
            s["lr"] /= 4.0
            for g in opt.param_groups:
                g["lr"] = s["lr"]
            if patience is not None and s["since_best"] >= patience:
                s["stopped"] = "patience"
                if log:
                    log(f"[{name}] stopping: {patience} epoch(s) without a better validation loss")
        if checkpoint is not None and s["stopped"] is None and epoch < epochs:
            save()
    if not finished_before:
        if s["stopped"] is None:
            s["stopped"] = "epochs"
        if s["best_state"] is not None:
            model.load_state_dict(s["best_state"])
        if checkpoint is not None and _finite_weights(model):  # (a run that diverged before its first
            save(final=True)                                    # validation has no weights worth keeping)
        else:
            s["train_time_s"] = round(time.perf_counter() - t_start, 3)
    return {"history": s["history"], "best_valid_loss": s["best"], "updates": s["update"], "diverged": s["diverged"],
            "stopped": s["stopped"], "resumes": s["resumes"], "train_time_s": s["train_time_s"]}


def _fresh_state(lr: float) -> dict:
    """The loop's state before its first batch (what :class:`LoopCheckpoint` keeps)."""
    return {"epoch": 0, "batch": 0, "update": 0, "lr": lr, "best": math.inf, "best_state": None, "since_best": 0,
            "history": [], "hidden": None, "partial": None, "stopped": None, "diverged": None, "resumes": [],
            "train_time_s": 0.0}


def migrate_result(record):
    """A :func:`train_lm` result read from a file, or a record that holds its keys (a checkpoint's loop
    state, a results file's run or model row), in today's words: ``updates`` for ``steps`` at its top
    level, ``update`` for ``step`` in each ``history`` row and ``resumes`` entry (files written before
    issue 36; :func:`seq2d.renames.migrate_record`, the one table); a copy, anything else unchanged."""
    record = migrate_record(record)
    if isinstance(record, dict):
        for key in ("history", "resumes"):
            if isinstance(record.get(key), list):
                record[key] = [migrate_record(r) for r in record[key]]
    return record


def _finite_weights(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


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
