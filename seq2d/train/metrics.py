"""The metrics files of a run: ``metrics.jsonl`` (one JSON object per epoch) and
``metrics.csv`` (the same rows as a table), both rewritten atomically after each epoch; and
``test_predictions.npz``, the per-example test results of the last epoch (:func:`predict`,
:func:`write_predictions`), the input of paired comparisons between runs on the same test
examples (McNemar, a bootstrap over examples: :mod:`seq2d.stats`)."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..fileio import atomic_write

__all__ = ["METRIC_COLUMNS", "PREDICTIONS_FILE", "write_metrics", "read_metrics", "classification_loss", "predict",
           "write_predictions"]

PREDICTIONS_FILE = "test_predictions.npz"

METRIC_COLUMNS = ("epoch", "step", "train_loss", "train_acc", "test_loss", "test_acc", "epoch_time_s", "lr", "device", "world_size",
                  "num_threads")


def write_metrics(out_dir: str | os.PathLike, rows: Sequence[Mapping]) -> None:
    """Write ``metrics.jsonl`` (one JSON object per row) and ``metrics.csv`` (the columns of
    :data:`METRIC_COLUMNS`, then any extra keys in order of appearance), each atomically."""
    out = Path(out_dir)
    cols = list(METRIC_COLUMNS)
    for r in rows:
        cols += [k for k in r if k not in cols]
    atomic_write(out / "metrics.jsonl", "".join(json.dumps(dict(r)) + "\n" for r in rows))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in cols})
    atomic_write(out / "metrics.csv", buf.getvalue())


def read_metrics(out_dir: str | os.PathLike) -> list[dict]:
    """The rows of ``metrics.jsonl``."""
    with open(Path(out_dir) / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def classification_loss(out, y):
    """(summed cross-entropy, number of correct argmax predictions) over the last dimension: the
    Trainer's default criterion (``(B, C)`` classification and ``(B, T, V)`` language modelling)."""
    import torch.nn.functional as F

    logits = out.reshape(-1, out.shape[-1])
    t = y.reshape(-1)
    return F.cross_entropy(logits, t, reduction="sum"), (logits.argmax(-1) == t).sum()


def predict(model, X, y, batch_size: int = 1000) -> dict | None:
    """Per-example results of ``model`` (in eval mode, no gradients) on ``X, y``: ``pred`` (argmax
    class), ``nll`` (cross-entropy, computed in float64) and ``target``, as CPU tensors; None when
    the output is not one row of class scores per sample (``(B, C)`` against ``(B,)`` targets)."""
    import torch
    import torch.nn.functional as F

    if y.dim() != 1:
        return None
    was_training = model.training
    model.eval()
    preds, nlls = [], []
    try:
        with torch.no_grad():
            for i in range(0, X.shape[0], batch_size):
                out = model(X[i:i + batch_size])
                if not isinstance(out, torch.Tensor) or out.dim() != 2:  # e.g. an RNN's (output, h_n)
                    return None
                preds.append(out.argmax(-1).cpu())
                nlls.append(F.cross_entropy(out.double(), y[i:i + out.shape[0]], reduction="none").cpu())
    finally:
        model.train(was_training)
    return {"pred": torch.cat(preds), "nll": torch.cat(nlls), "target": y.cpu()}


def write_predictions(out_dir: str | os.PathLike, p: Mapping | None, epoch: int) -> Path | None:
    """Write :func:`predict`'s result to ``out_dir/test_predictions.npz`` (``pred`` and ``target`` as
    int16, ``nll`` as float32, ``epoch``; a few tens of kB for MNIST's 10,000 digits); nothing
    (None) for a model that is not a classifier."""
    import numpy as np

    if p is None:
        return None
    buf = io.BytesIO()
    np.savez_compressed(buf, pred=p["pred"].numpy().astype(np.int16), target=p["target"].numpy().astype(np.int16),
                        nll=p["nll"].numpy().astype(np.float32), epoch=np.int64(epoch))
    return atomic_write(Path(out_dir) / PREDICTIONS_FILE, buf.getvalue())
