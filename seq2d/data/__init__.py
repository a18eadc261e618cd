"""MNIST for the sparsity experiments: device-resident tensors, batched augmentation.

* :func:`load_mnist` / :func:`load_subset` / :func:`get_data`: preprocessed (resized,
  normalised) tensors on the training device, cached in memory; the full data from a data root
  (``--data`` / ``SEQ2D_DATA``, torchvision layout ``ROOT/MNIST/raw``) or the small real subset
  shipped in the package (offline).
* :func:`batches`: minibatches by a device-side ``randperm``, with data-parallel sharding.
* :class:`Augment`: random perspective and random erasing (torchvision semantics), batched.
* :func:`get_mnist1d` / :func:`mnist1d_arrays`: MNIST-1D (:mod:`seq2d.data.mnist1d`), generated
  offline by the optional ``mnist1d`` package once into a user cache, checksummed.
"""

from .augment import Augment, erase, erasing_params, perspective, perspective_coeffs, perspective_params
from .mnist import (
    BLACK,
    ENV_VAR,
    MEAN,
    STD,
    Batches,
    DataRootError,
    IdxError,
    MnistNotFoundError,
    batches,
    clear_cache,
    data_root,
    find_mnist_files,
    get_data,
    load_mnist,
    load_raw,
    load_subset,
    load_subset_raw,
    parse_idx,
    preprocess,
    read_idx,
    subset_info,
)
from .mnist1d import Mnist1dMissing, get_mnist1d, mnist1d_arrays

__all__ = [
    "Augment",
    "BLACK",
    "Batches",
    "DataRootError",
    "ENV_VAR",
    "IdxError",
    "MEAN",
    "Mnist1dMissing",
    "MnistNotFoundError",
    "STD",
    "batches",
    "clear_cache",
    "data_root",
    "erase",
    "erasing_params",
    "find_mnist_files",
    "get_data",
    "get_mnist1d",
    "load_mnist",
    "load_raw",
    "load_subset",
    "load_subset_raw",
    "mnist1d_arrays",
    "parse_idx",
    "perspective",
    "perspective_coeffs",
    "perspective_params",
    "preprocess",
    "read_idx",
    "subset_info",
]
