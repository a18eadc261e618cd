"""MNIST-1D (Greydanus 2020): 40-sample 1-D signals of ten digit templates, generated offline.

The ``mnist1d`` package (an optional extra: ``pip install -e ".[mnist1d]"``) builds the set from
templates in its code with ``mnist1d.data.make_dataset(args)``: each template is padded,
stretched, scaled, shifted, given correlated and i.i.d. noise, sheared and resampled to 40
points, under ``numpy``'s global seed ``args.seed``. Nothing is downloaded (the package's
``get_dataset`` may fetch a pickle from GitHub; it is never called here).

* **Arguments.** :data:`DEFAULT_ARGS` are the package's ``get_dataset_args()`` (mnist1d
  0.0.2.post1) without ``url`` (a download address ``make_dataset`` never reads): 5,000 samples,
  ``train_split`` 0.8 (4,000 train / 1,000 test), ``seed`` 42. :func:`generation_args` applies
  overrides (``{"shuffle_seq": True}``, ``{"num_samples": 10_000}``); a test checks that the
  package's defaults are still these.
* **Cache.** Generated once into ``<cache>/mnist1d/mnist1d-<key>.npz`` (the arrays ``x``, ``y``,
  ``x_test``, ``y_test``, ``t`` as the package returns them: float64 and int64), ``<key>`` a hash
  of the arguments, with a sidecar ``.json``: the arguments, the mnist1d / numpy / scipy versions
  that generated it and :func:`arrays_sha256` of the arrays. ``<cache>`` is :func:`cache_dir`: an
  explicit folder, else ``$SEQ2D_CACHE``, else ``$XDG_CACHE_HOME/seq2d``, else ``~/.cache/seq2d``;
  never the data root (``$SEQ2D_DATA``, which may be read-only). Both files are written
  atomically. A load recomputes the checksum; a file that does not match its sidecar (or does
  not parse) is generated again, with a warning, or, without the package, raises
  :class:`Mnist1dMissing` saying so. Reading the cache does not need the package.
* **Checksum.** :data:`DEFAULT_SHA256` is the checksum of the default set as mnist1d 0.0.2.post1
  generates it with numpy 2.4 and scipy 1.17 (constraints.txt), taken over the arrays rounded to
  float32 (:func:`data_sha256`: what the models see): the float64 bytes differ in their last bits
  between CPUs (:data:`FLOAT64_SHA256_SEEN`). A default set that comes out different (another
  package or numpy version) is used, with a warning that it is not the set the committed baselines
  (experiments/mnist1d/) were measured on. The sidecar's ``sha256`` (the float64 bytes) checks the
  cached file itself.
* **Normalisation.** The package's own, nothing more: ``make_dataset`` standardises the whole
  set with one mean and one standard deviation over all 5,000 x 40 values, train and test
  together (so the test set enters the scale, as in the paper). seq2d applies no further
  scaling; the training set's mean and std come out near 0 and 1 (experiments/mnist1d/
  records them).
* **Layouts.** ``layout="flat"``: ``X`` of shape ``(N, 40)``, for Sequential2D models whose
  input slot has 40 features; ``layout="sequence"``: ``(N, 40, 1)``, a batch-first sequence of
  40 steps with one feature each, for ``seq2d.rnn(..., batch_first=True)`` or
  ``torch.nn.GRU(1, H, batch_first=True)``. ``y`` is int64 ``(N,)`` in 0..9.

    data = get_mnist1d()                     # {"train": (X, y), "test": (X, y), "info": {...}, ...}
    data = get_mnist1d(layout="sequence")    # X: (N, 40, 1)
    arrays, info = mnist1d_arrays()          # the package's numpy arrays and the sidecar record
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import warnings
import zipfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from ..errors import InvalidType, InvalidValue, Seq2DError, did_you_mean, show_value
from ..fileio import atomic_write

__all__ = [
    "ARRAYS",
    "CACHE_ENV_VAR",
    "DEFAULT_ARGS",
    "DEFAULT_SHA256",
    "FLOAT64_SHA256_SEEN",
    "INSTALL_HINT",
    "LAYOUTS",
    "Mnist1dMissing",
    "arrays_sha256",
    "cache_dir",
    "data_sha256",
    "generate_mnist1d",
    "generation_args",
    "get_mnist1d",
    "mnist1d_arrays",
]

CACHE_ENV_VAR = "SEQ2D_CACHE"
INSTALL_HINT = 'pip install -e ".[mnist1d]" (or pip install mnist1d)'
FORMAT = "seq2d-mnist1d/1"
LAYOUTS = ("flat", "sequence")
#: the arrays kept (and checksummed), in this order: train signals, train labels, test signals,
#: test labels, and the package's resampled time axis ``t`` (not used for training)
ARRAYS = ("x", "y", "x_test", "y_test", "t")

#: mnist1d 0.0.2.post1's ``get_dataset_args()`` without ``url``
DEFAULT_ARGS: dict = {
    "num_samples": 5000,
    "train_split": 0.8,
    "template_len": 12,
    "padding": [36, 60],
    "scale_coeff": 0.4,
    "max_translation": 48,
    "corr_noise_scale": 0.25,
    "iid_noise_scale": 2e-2,
    "shear_scale": 0.75,
    "shuffle_seq": False,
    "final_seq_length": 40,
    "seed": 42,
}
#: :func:`data_sha256` of the default set (mnist1d 0.0.2.post1, numpy 2.4.6, scipy 1.17.1): the set's identity,
#: the arrays as the models see them (float32). Taken on the AMD AVX2 machine; on the Intel AVX512 one (whose float64
#: bytes differ, :data:`FLOAT64_SHA256_SEEN`) the float32 training set's mean and std agree to every digit, its
#: float32 checksum itself is still to be taken there (tests/test_mnist1d.py does it on whatever CPU runs it)
DEFAULT_SHA256 = "3395dc1ca7745e14113c7390280dcade60ee0df77521a71b5ef076cf80d6a8e2"
#: :func:`arrays_sha256` of the package's float64 arrays of the default set, per CPU it was generated on: the
#: generator's float64 arithmetic differs in the last bits between CPUs (numpy/scipy kernels chosen by the
#: instruction set), so these bytes name the machine as much as the set; rounded to float32 they agree
FLOAT64_SHA256_SEEN = {
    "85d8f10641408ede4a075be958c3ac5848b90a88187e96621a5754fdd82b7a14": "Intel Xeon, torch CPU capability AVX512",
    "35894718c995a34f02ca731d3942172d6cef9c5d87430bfa89dc0af9fbb3c617": "AMD EPYC, torch CPU capability AVX2",
}


class Mnist1dMissing(Seq2DError, ImportError):
    """MNIST-1D has to be generated, but the ``mnist1d`` package is not installed."""


# --------------------------------------------------------------------------- arguments


def generation_args(overrides: Mapping | None = None) -> dict:
    """:data:`DEFAULT_ARGS` with ``overrides`` (keys among them; values of the default's type)."""
    args = json.loads(json.dumps(DEFAULT_ARGS))  # a deep copy
    if overrides is None:
        return args
    if not isinstance(overrides, Mapping):
        raise InvalidType(f"MNIST-1D generation arguments: expected a dict of overrides, got {show_value(overrides)}")
    for k, v in overrides.items():
        if k not in DEFAULT_ARGS:
            raise InvalidValue(f"MNIST-1D generation arguments: unknown key {k!r}{did_you_mean(k, DEFAULT_ARGS)}. "
                               f"Valid keys: {', '.join(DEFAULT_ARGS)}")
        want = type(DEFAULT_ARGS[k])
        ok = isinstance(v, want) and not (want is int and isinstance(v, bool))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v, ok = float(v), True
        if want is list:  # padding: (low, high)
            ok = isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(p, int) and not isinstance(p, bool) for p in v)
        if not ok:
            raise InvalidType(f"MNIST-1D generation argument {k!r}: expected {want.__name__} like "
                              f"{DEFAULT_ARGS[k]!r}, got {show_value(v)}")
        args[k] = list(v) if want is list else v
    return args


def _key(args: dict) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- generation


def _require_package(why: str):
    try:
        from mnist1d.data import make_dataset
    except ImportError as e:
        raise Mnist1dMissing(f"{why} needs the mnist1d package, an optional extra of seq2d: {INSTALL_HINT}. "
                             f"The import said: {e}") from None
    return make_dataset


@contextlib.contextmanager
def _global_rng_kept():
    """``make_dataset`` seeds numpy's and Python's global generators: give the caller theirs back."""
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


def generate_mnist1d(args: Mapping | None = None) -> dict[str, np.ndarray]:
    """The arrays :data:`ARRAYS` of ``mnist1d.data.make_dataset`` for :func:`generation_args`
    ``(args)``, uncached (a few seconds). numpy's and Python's global random states are left as
    they were. Raises :class:`Mnist1dMissing` without the package."""
    args = generation_args(args)
    make_dataset = _require_package("generating MNIST-1D")
    from mnist1d.utils import ObjectView

    with _global_rng_kept():
        out = make_dataset(ObjectView(dict(args)))
    return {k: np.ascontiguousarray(out[k]) for k in ARRAYS}


def arrays_sha256(arrays: Mapping[str, np.ndarray], float_dtype=None) -> str:
    """SHA-256 over :data:`ARRAYS` in order: each one's name, dtype, shape and little-endian bytes (the float
    arrays first rounded to ``float_dtype`` when given)."""
    h = hashlib.sha256()
    for k in ARRAYS:
        a = np.ascontiguousarray(arrays[k])
        if float_dtype is not None and a.dtype.kind == "f":
            a = a.astype(float_dtype)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def data_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """The set's identity: :func:`arrays_sha256` of the arrays rounded to float32, what :func:`get_mnist1d` gives
    the models by default. Unlike the float64 bytes (:data:`FLOAT64_SHA256_SEEN`) it does not depend on the CPU
    that generated the set, as far as seen: the default set's float64 checksums differ between an Intel AVX512
    and an AMD AVX2 machine, its float32 training-set mean and std agree to every printed digit."""
    return arrays_sha256(arrays, np.float32)


def _versions() -> dict:
    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"mnist1d_version": version("mnist1d"), "numpy_version": np.__version__, "scipy_version": version("scipy")}


# --------------------------------------------------------------------------- the cache


def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Where generated data sets go: ``explicit``, else ``$SEQ2D_CACHE``, else
    ``$XDG_CACHE_HOME/seq2d``, else ``~/.cache/seq2d`` (empty variables count as unset). Never
    the data root ``$SEQ2D_DATA``. A path that exists and is not a folder is an error."""
    if explicit is not None and str(explicit) != "":
        root = Path(explicit)
    elif os.environ.get(CACHE_ENV_VAR):
        root = Path(os.environ[CACHE_ENV_VAR])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]) / "seq2d"
    else:
        root = Path.home() / ".cache" / "seq2d"
    root = root.expanduser()
    if root.exists() and not root.is_dir():
        raise InvalidValue(f"the cache folder {str(root)!r} exists but is not a folder; pass another (cache=..., "
                           f"${CACHE_ENV_VAR})")
    return root


def _read_cached(npz: Path, side: Path, args: dict) -> tuple[dict | None, dict | None, str]:
    """``(arrays, record, "")`` from a cache entry that checks out, else ``(None, None, why)``."""
    if not npz.is_file() or not side.is_file():
        return None, None, ""
    try:
        record = json.loads(side.read_text())
        with np.load(npz, allow_pickle=False) as f:
            arrays = {k: f[k] for k in ARRAYS}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        return None, None, f"it does not read ({type(e).__name__}: {e})"
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return None, None, f"its sidecar {side.name} is not a {FORMAT} record"
    if record.get("args") != args:
        return None, None, f"its sidecar records other generation arguments ({record.get('args')})"
    sha = arrays_sha256(arrays)
    if sha != record.get("sha256"):
        return None, None, f"its arrays hash to {sha[:16]}..., the sidecar says {str(record.get('sha256'))[:16]}..."
    return arrays, record, ""


def _check_arrays(arrays: dict, args: dict, where: str) -> None:
    n_train = int(args["num_samples"] // 10 * 10 * args["train_split"])
    length = args["final_seq_length"]
    for name, n in (("x", n_train), ("x_test", None)):
        a = arrays[name]
        if a.ndim != 2 or a.shape[1] != length or (n is not None and a.shape[0] != n) or a.dtype.kind != "f":
            raise InvalidValue(f"{where}: {name} should be floats of shape ({n or 'N'}, {length}), got {a.dtype} "
                               f"{a.shape}")
    for xs, ys in (("x", "y"), ("x_test", "y_test")):
        y = arrays[ys]
        if y.shape != (arrays[xs].shape[0],) or y.dtype.kind not in "iu" or y.min() < 0 or y.max() > 9:
            raise InvalidValue(f"{where}: {ys} should be {arrays[xs].shape[0]} labels in 0..9, got {y.dtype} {y.shape}")


def mnist1d_arrays(args: Mapping | None = None, *, cache: str | os.PathLike | None = None,
                   regenerate: bool = False) -> tuple[dict[str, np.ndarray], dict]:
    """The package's arrays (:data:`ARRAYS`, numpy, as generated) and their record, from the cache
    (see the module docstring) or generated into it (``regenerate``: always).

    The record is the sidecar's: ``format``, ``args``, ``sha256``, the versions that generated the
    arrays, plus ``path`` (the ``.npz``) and ``from_cache`` (whether this call read it)."""
    args = generation_args(args)
    folder = cache_dir(cache) / "mnist1d"
    npz = folder / f"mnist1d-{_key(args)}.npz"
    side = npz.with_suffix(".json")
    arrays, record, why = (None, None, "") if regenerate else _read_cached(npz, side, args)
    from_cache = arrays is not None
    if arrays is None:
        if why:
            try:
                _require_package("regenerating MNIST-1D")
            except Mnist1dMissing as e:
                raise Mnist1dMissing(f"the cached MNIST-1D set {str(npz)!r} is unusable: {why}; {e}") from None
            warnings.warn(f"the cached MNIST-1D set {str(npz)!r} is unusable ({why}): generating it again",
                          stacklevel=2)
        arrays = generate_mnist1d(args)
        record = {"format": FORMAT, "args": args, "sha256": arrays_sha256(arrays), **_versions()}
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(npz, lambda f: np.savez(f, **arrays))
        atomic_write(side, json.dumps(record, indent=1) + "\n")
    _check_arrays(arrays, args, str(npz))
    record = {**record, "data_sha256": data_sha256(arrays)}  # computed on every load: older sidecars lack it
    if args == DEFAULT_ARGS and record["data_sha256"] != DEFAULT_SHA256:
        warnings.warn(f"the default MNIST-1D set in {str(npz)!r} (made by mnist1d {record.get('mnist1d_version')}, "
                      f"numpy {record.get('numpy_version')}, scipy {record.get('scipy_version')}) has checksum "
                      f"{record['data_sha256'][:16]}... (as float32), not {DEFAULT_SHA256[:16]}...: it is not the set "
                      "the committed baselines (experiments/mnist1d/) were measured on", stacklevel=2)
    return arrays, {**record, "path": str(npz), "from_cache": from_cache}


def get_mnist1d(args: Mapping | None = None, *, cache: str | os.PathLike | None = None, layout: str = "flat",
                device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> dict:
    """Train and test tensors of MNIST-1D in the data protocol's layout::

        {"train": (X, y), "test": (X, y), "source": "mnist1d", "classes": 10,
         "n_train": 4000, "n_test": 1000, "length": 40, "layout": layout, "info": record}

    ``X``: ``(N, 40)`` for ``layout="flat"``, ``(N, 40, 1)`` for ``"sequence"``, of ``dtype``
    (the float64 arrays rounded) on ``device``; ``y``: int64 ``(N,)``. ``info`` is the record of
    :func:`mnist1d_arrays` (arguments, checksum, versions, path). No scaling beyond the
    package's (module docstring)."""
    if layout not in LAYOUTS:
        raise InvalidValue(f"layout: unknown value {layout!r}{did_you_mean(layout, LAYOUTS)}. Select from "
                           + ", ".join(map(repr, LAYOUTS)))
    arrays, info = mnist1d_arrays(args, cache=cache)

    def split(xs, ys):
        X = torch.from_numpy(arrays[xs]).to(device=device, dtype=dtype)
        return (X.unsqueeze(-1) if layout == "sequence" else X), torch.from_numpy(arrays[ys]).to(device, torch.int64)

    train, test = split("x", "y"), split("x_test", "y_test")
    return {"train": train, "test": test, "source": "mnist1d", "classes": 10, "n_train": int(train[1].numel()),
            "n_test": int(test[1].numel()), "length": int(arrays["x"].shape[1]), "layout": layout, "info": info}
