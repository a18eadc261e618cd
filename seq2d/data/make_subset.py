"""Make ``mnist_subset.pt``: a class-balanced random subset of the real MNIST train and test sets.

    python -m seq2d.data.make_subset --data ROOT [--train 2500 --test 1000 --seed 0] [--out FILE]

``ROOT`` is a data root with ``MNIST/raw`` (default: ``$SEQ2D_DATA``, see
:func:`seq2d.data.mnist.data_root`).  Each class gets ``n // 10`` digits (the first ``n % 10``
classes one more), drawn without replacement by :func:`seq2d.sampling.choose` (``torch.randperm``) with a generator seeded by
``--seed``; the chosen indices are kept in increasing order.  The file is a ``torch.save`` of::

    {"format": "seq2d-mnist-subset/1", "seed": int,
     "source_md5": {file name: md5 of the IDX file read},
     "train": {"images": uint8 (n, 28, 28), "labels": uint8 (n,), "indices": int64 (n,)},
     "test":  {...}}

where ``indices`` are the positions in the original files; it loads with
``torch.load(weights_only=True)``.  Raw 28x28 uint8 images take 784 bytes each (the file is
stored uncompressed), so the default 2500 + 1000 digits make ~2.8 MB; the script refuses to write
more than ``--max-bytes`` (3,000,000).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import torch

from ..errors import InvalidValue
from ..sampling import choose
from .mnist import SUBSET_FILE, SUBSET_FORMAT, MnistNotFoundError, _md5, data_root, find_mnist_files, read_idx


def balanced_indices(labels: torch.Tensor, n: int, generator: torch.Generator, n_classes: int = 10) -> torch.Tensor:
    """``n`` indices, ``n // n_classes`` per class (remainder to the first classes), sorted."""
    picks = []
    for c in range(n_classes):
        k = n // n_classes + (1 if c < n % n_classes else 0)
        idx = torch.nonzero(labels == c).flatten()
        if k > idx.numel():
            raise InvalidValue(f"class {c} has only {idx.numel()} examples, {k} requested")
        picks.append(idx[choose(idx.numel(), k, generator)])
    return torch.cat(picks).sort().values


def make_subset(root: str | Path, n_train: int, n_test: int, seed: int = 0) -> dict:
    """The subset dictionary (see the module docstring) from the MNIST files under ``root``."""
    root = Path(root)
    g = torch.Generator().manual_seed(seed)
    blob: dict = {"format": SUBSET_FORMAT, "seed": int(seed), "source_md5": {}}
    for split, n in (("train", n_train), ("test", n_test)):
        found = find_mnist_files(root, split)
        if found is None:
            raise MnistNotFoundError(f"no MNIST {split} files under {root / 'MNIST' / 'raw'}")
        images, labels = read_idx(found[0]), read_idx(found[1])
        idx = balanced_indices(labels, n, g)
        blob[split] = {
            "images": images[idx].clone(),
            "labels": labels[idx].clone(),
            "indices": idx.to(torch.int64),
        }
        for path in found:
            blob["source_md5"][path.name] = _md5(path)
    return blob


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m seq2d.data.make_subset", description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="data root containing MNIST/raw (default: $SEQ2D_DATA)")
    ap.add_argument("--train", type=int, default=2500, help="train digits (default 2500)")
    ap.add_argument("--test", type=int, default=1000, help="test digits (default 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).with_name(SUBSET_FILE)), help="output file (default: the packaged one)")
    ap.add_argument("--max-bytes", type=int, default=3_000_000, help="refuse to write a larger file")
    args = ap.parse_args(argv)

    blob = make_subset(data_root(args.data), args.train, args.test, args.seed)
    buf = io.BytesIO()
    torch.save(blob, buf)
    size = buf.getbuffer().nbytes
    if size > args.max_bytes:
        print(f"error: the subset would take {size} bytes > --max-bytes {args.max_bytes}; use fewer digits", file=sys.stderr)
        return 1
    Path(args.out).write_bytes(buf.getvalue())
    counts = {s: torch.bincount(blob[s]["labels"].long(), minlength=10).tolist() for s in ("train", "test")}
    print(f"wrote {args.out}: {size} bytes, train {args.train} {counts['train']}, test {args.test} {counts['test']}, seed {args.seed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
