"""The data a run trains on: the data set a config names (:func:`load_data`, with the
deterministic :func:`synthetic_data`), its augmentation (:func:`make_augment`), the
check of the data protocol (:func:`split_data`: ``data["train"] = (X, y)``,
``data["test"] = (X, y)``, or an object with ``.train``/``.test``), and the seeds and data order
that depend only on ``(seed, keys)`` (:func:`derive_seed`, :func:`epoch_permutation`,
:func:`seed_everything`): the same on every rank, in every process and after any resume (what
makes a resumed run bitwise exact)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from ..errors import InvalidType, InvalidValue
from .builder import resolve_device
from .config import TrainConfig

__all__ = ["synthetic_data", "load_data", "make_augment", "split_data", "derive_seed", "epoch_permutation",
           "augment_generator", "seed_everything"]


def synthetic_data(features: int = 16, classes: int = 4, *, n_train: int = 512, n_test: int = 256,
                   seed: int = 1234, spread: float = 0.5, device=None) -> dict:
    """Gaussian clusters: class centres ~ N(0, spread^2), unit within-class noise. A
    deterministic data set in the data protocol's layout (hard enough that accuracy stays
    below 100%), for tests and smoke runs. It does not depend on the training seed."""
    g = torch.Generator().manual_seed(seed)
    centres = spread * torch.randn(classes, features, generator=g)

    def draw(n):
        y = torch.randint(0, classes, (n,), generator=g)
        x = centres[y] + torch.randn(n, features, generator=g)
        return x.to(device=device, dtype=torch.float32), y.to(device)

    return {"train": draw(n_train), "test": draw(n_test), "classes": classes, "source": "synthetic"}


def load_data(cfg: TrainConfig, device=None) -> dict:
    """The data set ``cfg.data`` names, on ``device``: "synthetic" here, "subset"/"full" from
    :func:`seq2d.data.get_data`, "mnist1d" from :func:`seq2d.data.mnist1d.get_mnist1d` (flat
    ``(N, 40)`` signals; generated into ``$SEQ2D_CACHE`` on first use, where every rank of a
    torchrun job writes the same bytes atomically). Under torchrun with ``download``,
    :func:`seq2d.train.run` lets rank 0 fetch first.

    ``device=None`` means the run's device, resolved as the :class:`~seq2d.train.Trainer`
    resolves it: ``cfg.device`` (``"auto"``: cuda when available; this process's GPU while a
    process group runs)."""
    if device is None:
        device = resolve_device(cfg.device)
    if cfg.data == "synthetic":
        return _augment_test(cfg, synthetic_data(cfg.sizes[0], cfg.sizes[-1], device=device))
    if cfg.data == "mnist1d":
        from ..data.mnist1d import get_mnist1d

        return get_mnist1d(device=device)
    try:
        from ..data import get_data
    except ImportError as e:
        raise ModuleNotFoundError(f"data={cfg.data!r} needs seq2d.data (MNIST loading), which failed to import: {e}") from e
    kw = dict(source=cfg.data, root=cfg.data_root, download=cfg.download, size=cfg.image_size, device=device,
              normalize=cfg.normalize)
    return _augment_test(cfg, _get(cfg, get_data, kw))


def _augment_test(cfg: TrainConfig, data):
    """``data`` with its test images augmented as the training batches are (``augment_test``):
    one draw, from a generator seeded with ``(seed, "augment-test")``, so every epoch (and
    every rank) evaluates the same images. (torchvision would draw anew on every pass.)
    A new dict: the cached data of :func:`seq2d.data.get_data` is left as it is."""
    if not cfg.augment_test:
        return data
    aug = make_augment(cfg)
    X, y = data["test"]
    g = torch.Generator(device=X.device).manual_seed(derive_seed(cfg.seed, "augment-test"))
    X = torch.cat([aug(X[k:k + 1000], g) for k in range(0, X.shape[0], 1000)])
    return {**data, "test": (X, y)}


def _get(cfg: TrainConfig, get_data, kw: dict) -> dict:
    """``get_data(**kw)``, its missing-data errors reworded for a training run: the data
    module's hint names its own ``--data ROOT`` flag; a run's flag is ``--data-root``."""
    from ..data.mnist import DataRootError, MnistNotFoundError

    try:
        return get_data(**kw)
    except (MnistNotFoundError, DataRootError) as e:
        msg = str(e).replace("--data ROOT", "--data-root ROOT (config field 'data_root')")
        if cfg.data == "full":
            msg += (" (config field 'data' is 'full'; --data subset trains on the bundled MNIST subset instead, "
                    "offline)")
        try:
            again = type(e)(msg)
        except Exception:  # pragma: no cover - a subclass with another signature
            raise e from None
        raise again from None


def make_augment(cfg: TrainConfig) -> Callable | None:
    """:class:`seq2d.data.augment.Augment` when erasing or perspective is on, else None;
    torchvision's defaults (perspective distortion 0.5, erasing scale (0.02, 0.33), ratio
    (0.3, 3.3), value 0). The perspective border is black: the normalised black pixel, or 0
    when ``normalize`` is off (``ToTensor`` only); erasing writes 0 in either space, as
    ``RandomErasing(value=0)`` after the same transforms does."""
    if cfg.erasing_p == 0 and cfg.perspective_p == 0:
        return None
    from ..data.augment import BLACK, Augment

    return Augment(erasing_p=cfg.erasing_p, perspective_p=cfg.perspective_p,
                   perspective_fill=BLACK if cfg.normalize else 0.0)


def split_data(data) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(X_train, y_train, X_test, y_test)`` from ``data``, checked against the data protocol."""
    def get(key):
        if isinstance(data, Mapping):
            if key not in data:
                raise InvalidValue(f"data must hold {key!r}: (X, y); it has keys {sorted(map(str, data))}")
            v = data[key]
        else:
            v = getattr(data, key, None)
            if v is None:
                raise InvalidType(f"data must be a dict with 'train' and 'test', or an object with .train/.test, got {type(data).__name__}")
        if not (isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(t, Tensor) for t in v)):
            raise InvalidType(f"data[{key!r}] must be a pair (X, y) of tensors, got {type(v).__name__}")
        X, y = v
        if X.shape[0] != y.shape[0]:
            raise InvalidValue(f"data[{key!r}]: X has {X.shape[0]} samples but y has {y.shape[0]}")
        if X.shape[0] == 0:
            raise InvalidValue(f"data[{key!r}] is empty")
        return X, y

    return (*get("train"), *get("test"))


# ---------------------------------------------------------------------- seeds and data order
def derive_seed(seed: int, *keys) -> int:
    """A 63-bit seed from ``seed`` and ``keys`` (stable across runs, platforms, processes)."""
    h = hashlib.blake2b(repr((int(seed),) + tuple(keys)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def epoch_permutation(n: int, seed: int, epoch: int) -> Tensor:
    """The order of the ``n`` training samples in epoch ``epoch`` (CPU int64): a function of
    ``(seed, epoch)`` only, identical on every rank and after any resume."""
    g = torch.Generator().manual_seed(derive_seed(seed, "shuffle", epoch))
    return torch.randperm(n, generator=g)


def augment_generator(seed: int, epoch: int, rank: int = 0, device=None) -> torch.Generator:
    """The generator that augments the training batches of epoch ``epoch`` on rank ``rank``: seeded
    with ``(seed, "augment", epoch, rank)``, so it does not depend on what ran before."""
    return torch.Generator(device=device).manual_seed(derive_seed(seed, "augment", epoch, rank))


def seed_everything(seed: int) -> None:
    """Seed torch (every device), :mod:`random` and numpy's global generator."""
    torch.manual_seed(seed)  # also seeds every CUDA device
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass
