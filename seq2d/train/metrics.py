"""The metrics files of a run: ``metrics.jsonl`` (one JSON object per epoch) and
``metrics.csv`` (the same rows as a table), both rewritten atomically after each epoch."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..fileio import atomic_write

__all__ = ["METRIC_COLUMNS", "write_metrics", "read_metrics"]

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
