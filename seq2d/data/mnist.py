"""MNIST as device-resident tensors.

The data follow torchvision's conventions: a *data root* holds ``MNIST/raw/`` with the four
original IDX files (``train-images-idx3-ubyte`` ... , gzipped or not).  The root comes from an
explicit argument (the CLI's ``--data``), else the ``SEQ2D_DATA`` environment variable, else
``~/.cache/seq2d`` (:func:`data_root`).  When the files are absent and ``download=True``,
``torchvision.datasets.MNIST(root, download=True)`` fetches them into ``root/MNIST/raw``
(torchvision is only needed for that); otherwise a :class:`MnistNotFoundError` says where we
looked and how to fix it.

Preprocessing happens once, on the target device, and the result is cached in memory for the
life of the process (:func:`clear_cache` drops it):

* resize 28x28 -> ``size`` x ``size`` with ``torch.nn.functional.interpolate(mode="bilinear",
  align_corners=False, antialias=False)``.  ``align_corners=False`` is the half-pixel-centre
  convention of PIL and ``torchvision.transforms.functional.resize``; for upsampling (28 -> 50)
  antialiasing does nothing (the triangle filter already covers < 1 source pixel), so this is
  the same computation as torchvision's tensor resize (max difference ~1e-7 on [0, 1] images,
  float rounding) and differs from PIL's uint8 resize only by PIL's rounding to integers
  (<= 0.5/255).  For ``size < 28`` (downsampling) ``antialias=True`` is used, as torchvision
  does, because plain bilinear downsampling aliases;
* normalise ``(x / 255 - 0.1307) / 0.3081`` (the usual MNIST mean / std), unless
  ``normalize=False`` (then ``x / 255`` in [0, 1]).  This is done on the 28x28 pixels before
  resizing (cheaper; the same up to float rounding since bilinear weights sum to 1), so at
  ``size=28`` every value is exactly that float32 expression of its pixel.

The cached tensors are shared between calls: treat them as read-only (augmentation in
:mod:`seq2d.data.augment` returns new tensors).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import os
import struct
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InvalidValue, Seq2DError

__all__ = [
    "MEAN",
    "STD",
    "BLACK",
    "ENV_VAR",
    "DataRootError",
    "IdxError",
    "MnistNotFoundError",
    "Batches",
    "batches",
    "clear_cache",
    "data_root",
    "find_mnist_files",
    "get_data",
    "load_mnist",
    "load_raw",
    "load_subset",
    "load_subset_raw",
    "parse_idx",
    "preprocess",
    "read_idx",
    "subset_info",
]

MEAN = 0.1307
STD = 0.3081
#: The normalised value of a black (0) pixel: ``(0 - MEAN) / STD``.
BLACK = (0.0 - MEAN) / STD
ENV_VAR = "SEQ2D_DATA"
SUBSET_FILE = "mnist_subset.pt"
SUBSET_FORMAT = "seq2d-mnist-subset/1"

_SPLITS = {"train": "train", "test": "t10k"}


class DataRootError(Seq2DError, ValueError):
    """No usable data root (the given path is not a directory, or no home directory)."""


class IdxError(Seq2DError, ValueError):
    """An IDX file is malformed: bad magic number, truncated, trailing bytes, bad gzip."""


class MnistNotFoundError(Seq2DError, FileNotFoundError):
    """The MNIST IDX files are not under ``root/MNIST/raw`` and downloading was not allowed."""


# --------------------------------------------------------------------------- data root


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """The data root: ``explicit``, else ``$SEQ2D_DATA``, else ``~/.cache/seq2d``.

    ``~`` is expanded.  The directory need not exist yet (a download creates it), but a path
    that exists and is not a directory raises :class:`DataRootError`, as does the fallback when
    no home directory can be determined.  An empty ``SEQ2D_DATA`` counts as unset.
    """
    if explicit is not None and str(explicit) != "":
        root, origin = Path(explicit), "the explicit data root"
    elif os.environ.get(ENV_VAR):
        root, origin = Path(os.environ[ENV_VAR]), f"${ENV_VAR}"
    else:
        try:
            root, origin = Path.home() / ".cache" / "seq2d", "the default data root"
        except (RuntimeError, KeyError) as e:  # no HOME / no passwd entry
            raise DataRootError(
                f"no data root: pass one (--data ROOT) or set {ENV_VAR}; "
                f"the default ~/.cache/seq2d is unusable ({e})"
            ) from e
    root = root.expanduser()
    if root.exists() and not root.is_dir():
        raise DataRootError(f"{origin} {str(root)!r} exists but is not a directory")
    return root


# --------------------------------------------------------------------------- IDX files

# IDX type code -> (numpy big-endian dtype, torch dtype)
_IDX_TYPES = {
    0x08: (np.dtype(">u1"), torch.uint8),
    0x09: (np.dtype(">i1"), torch.int8),
    0x0B: (np.dtype(">i2"), torch.int16),
    0x0C: (np.dtype(">i4"), torch.int32),
    0x0D: (np.dtype(">f4"), torch.float32),
    0x0E: (np.dtype(">f8"), torch.float64),
}


def parse_idx(data: bytes, source: str = "<bytes>") -> torch.Tensor:
    """Parse the bytes of an (uncompressed) IDX file; see :func:`read_idx`."""
    if len(data) < 4:
        raise IdxError(f"{source}: {len(data)} bytes, too short for an IDX header (truncated?)")
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or code not in _IDX_TYPES:
        raise IdxError(
            f"{source}: bad IDX magic number 0x{data[:4].hex()} (expected 0x0000 then a type code "
            f"in {sorted(hex(c) for c in _IDX_TYPES)} and the number of dimensions)"
        )
    if ndim == 0:
        raise IdxError(f"{source}: IDX header declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IdxError(f"{source}: truncated IDX header ({len(data)} of {header} bytes)")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    np_dtype, torch_dtype = _IDX_TYPES[code]
    expected = math.prod(dims) * np_dtype.itemsize
    got = len(data) - header
    if got < expected:
        raise IdxError(
            f"{source}: truncated IDX file: shape {tuple(dims)} needs {expected} data bytes, found {got}"
        )
    if got > expected:
        raise IdxError(
            f"{source}: {got - expected} unexpected trailing bytes after the IDX data of shape {tuple(dims)}"
        )
    arr = np.frombuffer(data, dtype=np_dtype, count=math.prod(dims), offset=header)
    arr = arr.astype(np_dtype.newbyteorder("="), copy=True).reshape(dims)
    out = torch.from_numpy(arr)
    assert out.dtype == torch_dtype
    return out


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """Read an IDX file (gzipped or not, detected from the content) into a CPU tensor.

    The dtype is the file's own (``torch.uint8`` for MNIST images and labels); the shape is the
    declared dimensions.  A wrong magic number, a truncated file (header, data or gzip stream) or
    trailing bytes raise :class:`IdxError`.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, gzip.BadGzipFile) as e:
            raise IdxError(f"{path}: corrupt or truncated gzip stream ({e})") from e
    return parse_idx(raw, str(path))


# --------------------------------------------------------------------------- locating files


def _candidates(raw_dir: Path, split: str, kind: str) -> list[Path]:
    n = 3 if kind == "images" else 1
    stem = f"{_SPLITS[split]}-{kind}-idx{n}-ubyte"
    return [raw_dir / stem, raw_dir / (stem + ".gz")]


def find_mnist_files(root: str | os.PathLike, split: str) -> tuple[Path, Path] | None:
    """``(images, labels)`` paths under ``root/MNIST/raw`` (uncompressed preferred), or None."""
    _check_split(split)
    raw_dir = Path(root) / "MNIST" / "raw"
    found = []
    for kind in ("images", "labels"):
        hit = next((p for p in _candidates(raw_dir, split, kind) if p.is_file()), None)
        if hit is None:
            return None
        found.append(hit)
    return found[0], found[1]


def _check_split(split: str) -> None:
    if split not in _SPLITS:
        raise InvalidValue(f"split must be 'train' or 'test', got {split!r}")


def _not_found(root: Path, split: str) -> MnistNotFoundError:
    raw_dir = root / "MNIST" / "raw"
    names = " and ".join(_candidates(raw_dir, split, kind)[0].name + "[.gz]" for kind in ("images", "labels"))
    hint = ""
    for other in (root, root / "raw", root / "MNIST"):
        if any(p.is_file() for kind in ("images", "labels") for p in _candidates(other, split, kind)):
            hint = f" (but {other} holds MNIST files: the data root is the folder that contains MNIST/raw)"
            break
    return MnistNotFoundError(
        f"MNIST {split} files not found: looked for {names} in {raw_dir}{hint}. "
        f"Point to a data root containing MNIST/raw with --data ROOT or the {ENV_VAR} environment "
        f"variable, or allow downloading (--download, download=True) to fetch MNIST through "
        f"torchvision into {raw_dir}."
    )


def _download(root: Path, split: str) -> None:
    try:
        import torchvision  # noqa: F401
        from torchvision.datasets import MNIST
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"downloading MNIST needs torchvision (pip install torchvision); or place the four IDX "
            f"files in {root / 'MNIST' / 'raw'}"
        ) from e
    root.mkdir(parents=True, exist_ok=True)
    MNIST(str(root), train=(split == "train"), download=True)


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=2)
def _raw_cached(root: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    found = find_mnist_files(root, split)
    if found is None:  # deleted since we looked
        raise _not_found(Path(root), split)
    images, labels = read_idx(found[0]), read_idx(found[1])
    if images.dim() != 3 or tuple(images.shape[1:]) != (28, 28) or images.dtype != torch.uint8:
        raise IdxError(f"{found[0]}: expected uint8 images of shape (N, 28, 28), got {images.dtype} {tuple(images.shape)}")
    if labels.dim() != 1 or labels.dtype != torch.uint8:
        raise IdxError(f"{found[1]}: expected uint8 labels of shape (N,), got {labels.dtype} {tuple(labels.shape)}")
    if images.shape[0] != labels.shape[0]:
        raise IdxError(f"{found[0].parent}: {images.shape[0]} images but {labels.shape[0]} labels")
    if labels.numel() and int(labels.max()) > 9:
        raise IdxError(f"{found[1]}: label {int(labels.max())} out of range 0..9")
    return images, labels


def load_raw(split: str = "train", root: str | os.PathLike | None = None, *, download: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The original ``(images uint8 (N, 28, 28), labels uint8 (N,))`` on the CPU (cached)."""
    _check_split(split)
    root = data_root(root)
    if find_mnist_files(root, split) is None:
        if not download:
            raise _not_found(root, split)
        _download(root, split)
        if find_mnist_files(root, split) is None:
            raise MnistNotFoundError(f"torchvision's download did not produce the MNIST {split} files in {root / 'MNIST' / 'raw'}")
    return _raw_cached(str(root.resolve()), split)


# --------------------------------------------------------------------------- preprocessing


def _device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def preprocess(
    images: torch.Tensor,
    *,
    size: int = 50,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    normalize: bool = True,
    chunk: int = 8192,
) -> torch.Tensor:
    """uint8 images ``(N, 28, 28)`` -> ``(N, 1, size, size)`` of ``dtype`` on ``device``.

    Normalise and resize (bilinear, ``align_corners=False``; antialias only when downsampling) as
    described in the module docstring; normalising first is cheaper and the same up to float
    rounding, since bilinear weights sum to 1.  Works in float32 (float64 when ``dtype`` is float64) on
    the target device, ``chunk`` images at a time to bound the peak memory.
    """
    if images.dim() == 3:
        images = images.unsqueeze(1)
    if images.dim() != 4:
        raise InvalidValue(f"expected images (N, H, W) or (N, 1, H, W), got shape {tuple(images.shape)}")
    if size < 1:
        raise InvalidValue(f"size must be >= 1, got {size}")
    dev = _device(device)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    n, c, h, w = images.shape
    out = torch.empty((n, c, size, size), dtype=dtype, device=dev)
    for s in range(0, n, chunk):
        x = images[s : s + chunk].to(dev, non_blocking=True).to(work) / 255.0
        if normalize:  # before resizing: cheaper on 28x28, and equal (bilinear weights sum to 1)
            x = (x - MEAN) / STD
        if (size, size) != (h, w):
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=size < min(h, w))
        out[s : s + chunk].copy_(x)
    return out


def _finish(X: torch.Tensor, y: torch.Tensor, flatten: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return (X.view(X.shape[0], -1) if flatten else X), y


@functools.lru_cache(maxsize=6)
def _mnist_cached(root: str, split: str, size: int, device: torch.device, dtype: torch.dtype, normalize: bool, limit: int | None):
    images, labels = _raw_cached(root, split)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    X = preprocess(images, size=size, device=device, dtype=dtype, normalize=normalize)
    return X, labels.to(device=device, dtype=torch.int64)


def load_mnist(
    split: str = "train",
    root: str | os.PathLike | None = None,
    *,
    download: bool = False,
    size: int = 50,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    normalize: bool = True,
    flatten: bool = True,
    limit: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The full MNIST ``split`` as ``(X, y)`` on ``device``.

    ``X``: ``(N, size*size)`` when ``flatten`` else ``(N, 1, size, size)``, of ``dtype``,
    preprocessed as in the module docstring; ``y``: int64 ``(N,)``.  ``limit`` keeps the first
    ``limit`` examples (only those are preprocessed).  ``root`` as in :func:`data_root`.  Files
    absent: downloaded through torchvision when ``download`` else :class:`MnistNotFoundError`.

    Results are cached per (root, split, size, device, dtype, normalize, limit): repeated calls
    return the same (read-only!) tensors without work.
    """
    _check_split(split)
    if limit is not None and limit < 0:
        raise InvalidValue(f"limit must be >= 0, got {limit}")
    root_path = data_root(root)
    load_raw(split, root_path, download=download)  # locate / download / validate (cached)
    X, y = _mnist_cached(str(root_path.resolve()), split, int(size), _device(device), dtype, bool(normalize), limit)
    return _finish(X, y, flatten)


# --------------------------------------------------------------------------- bundled subset


@functools.lru_cache(maxsize=1)
def _subset_raw() -> dict:
    ref = resources.files(__package__).joinpath(SUBSET_FILE)
    with ref.open("rb") as f:
        blob = torch.load(f, weights_only=True, map_location="cpu")
    if blob.get("format") != SUBSET_FORMAT:
        raise InvalidValue(f"{SUBSET_FILE}: unknown format {blob.get('format')!r}, expected {SUBSET_FORMAT!r}")
    return blob


def subset_info() -> dict:
    """Metadata of the bundled subset: seed, source md5s, counts, original indices (CPU tensors)."""
    blob = _subset_raw()
    info = {k: v for k, v in blob.items() if k not in ("train", "test")}
    for split in ("train", "test"):
        info[f"n_{split}"] = int(blob[split]["labels"].numel())
        info[f"{split}_indices"] = blob[split]["indices"]
    return info


def load_subset_raw(split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """The bundled subset's ``(images uint8 (n, 28, 28), labels uint8 (n,))`` on the CPU."""
    _check_split(split)
    part = _subset_raw()[split]
    return part["images"], part["labels"]


@functools.lru_cache(maxsize=6)
def _subset_cached(split: str, size: int, device: torch.device, dtype: torch.dtype, normalize: bool, limit: int | None):
    images, labels = load_subset_raw(split)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    X = preprocess(images, size=size, device=device, dtype=dtype, normalize=normalize)
    return X, labels.to(device=device, dtype=torch.int64)


def load_subset(
    split: str = "train",
    *,
    size: int = 50,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    normalize: bool = True,
    flatten: bool = True,
    limit: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`load_mnist` for the small real-MNIST subset shipped in the package (offline).

    The subset (``mnist_subset.pt``, made by :mod:`seq2d.data.make_subset`) is class balanced;
    :func:`subset_info` gives its composition and the indices of its digits in the full sets.
    """
    _check_split(split)
    if limit is not None and limit < 0:
        raise InvalidValue(f"limit must be >= 0, got {limit}")
    X, y = _subset_cached(split, int(size), _device(device), dtype, bool(normalize), limit)
    return _finish(X, y, flatten)


def clear_cache() -> None:
    """Forget every cached (raw and preprocessed) tensor."""
    for f in (_raw_cached, _mnist_cached, _subset_raw, _subset_cached):
        f.cache_clear()


# --------------------------------------------------------------------------- both splits


def get_data(
    source: str = "subset",
    root: str | os.PathLike | None = None,
    download: bool = False,
    size: int = 50,
    device: str | torch.device = "cpu",
    *,
    dtype: torch.dtype = torch.float32,
    normalize: bool = True,
    flatten: bool = True,
) -> dict:
    """Train and test tensors from ``source`` ``"subset"`` (bundled, offline) or ``"full"``.

    Returns ``{"train": (X, y), "test": (X, y), "source": source, "n_train": int, "n_test": int,
    "size": size, "root": Path | None}``.
    """
    kw = dict(size=size, device=device, dtype=dtype, normalize=normalize, flatten=flatten)
    if source == "subset":
        train, test, root_path = load_subset("train", **kw), load_subset("test", **kw), None
    elif source == "full":
        root_path = data_root(root)
        train = load_mnist("train", root_path, download=download, **kw)
        test = load_mnist("test", root_path, download=download, **kw)
    else:
        raise InvalidValue(f"source must be 'subset' or 'full', got {source!r}")
    return {
        "train": train,
        "test": test,
        "source": source,
        "n_train": int(train[1].shape[0]),
        "n_test": int(test[1].shape[0]),
        "size": size,
        "root": root_path,
    }


# --------------------------------------------------------------------------- batches


@dataclass(eq=False, repr=False)
class Batches:
    """Minibatches of ``(X, y)`` on their device; iterate once per epoch, ``len()`` = batch count.

    Each iteration with ``shuffle`` draws a fresh ``torch.randperm(N, generator=generator)`` (on
    the generator's device, moved to the data's device), so the order is a deterministic function
    of the generator's state, for CPU and CUDA tensors alike (a CPU and a CUDA generator give
    different orders).  Batches are ``index_select`` copies; without shuffling on a single rank
    they are slices (views).

    Data parallel: with ``world_size > 1`` every rank must use an identically seeded generator;
    rank ``r`` takes ``perm[r : world_size * (N // world_size) : world_size]``, so shards are
    disjoint and equally long (all ranks have the same number of batches) and the last
    ``N % world_size`` examples of each epoch's permutation are skipped.
    """

    X: torch.Tensor
    y: torch.Tensor
    batch_size: int
    shuffle: bool = True
    generator: torch.Generator | None = None
    drop_last: bool = False
    rank: int = 0
    world_size: int = 1

    def __post_init__(self):
        if self.X.shape[0] != self.y.shape[0]:
            raise InvalidValue(f"X has {self.X.shape[0]} rows but y has {self.y.shape[0]}")
        if self.batch_size < 1:
            raise InvalidValue(f"batch_size must be >= 1, got {self.batch_size}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise InvalidValue(f"need 0 <= rank < world_size, got rank={self.rank}, world_size={self.world_size}")
        if self.X.device != self.y.device:
            raise InvalidValue(f"X is on {self.X.device} but y on {self.y.device}")

    def __repr__(self) -> str:
        return (
            f"Batches(N={self.X.shape[0]}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"drop_last={self.drop_last}, rank={self.rank}, world_size={self.world_size}, device={self.X.device})"
        )

    @property
    def n_examples(self) -> int:
        """Examples this rank sees per epoch."""
        return self.X.shape[0] // self.world_size

    def __len__(self) -> int:
        n, b = self.n_examples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def _indices(self) -> torch.Tensor | None:
        N, dev = self.X.shape[0], self.X.device
        if self.shuffle:
            gdev = self.generator.device if self.generator is not None else dev
            perm = torch.randperm(N, generator=self.generator, device=gdev)
            perm = perm.to(dev, non_blocking=True)
        elif self.world_size == 1:
            return None
        else:
            perm = torch.arange(N, device=dev)
        if self.world_size > 1:
            perm = perm[self.rank : self.world_size * self.n_examples : self.world_size]
        return perm

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        idx = self._indices()
        n, b = self.n_examples, self.batch_size
        for i in range(len(self)):
            s, e = i * b, min((i + 1) * b, n)
            if idx is None:
                yield self.X[s:e], self.y[s:e]
            else:
                j = idx[s:e]
                yield self.X.index_select(0, j), self.y.index_select(0, j)


def batches(
    X: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    *,
    shuffle: bool = True,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
    rank: int = 0,
    world_size: int = 1,
) -> Batches:
    """Iterate minibatches of ``(X, y)`` on their device; see :class:`Batches`."""
    return Batches(X, y, batch_size, shuffle, generator, drop_last, rank, world_size)
