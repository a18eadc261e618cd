"""seq2d.data: IDX parsing, MNIST loading/preprocessing, the bundled subset, augmentation, batches.

The IDX loading tests run twice: on the bundled subset's real digits written as IDX files (always)
and on the full MNIST from ``$SEQ2D_DATA`` (CI points it at the shared data). Tests that need the
full data are skipped when it is absent, with a one-line reason naming the variable and a value
(``python -m pytest -rs`` shows it).  Comparisons with
torchvision are skipped when torchvision is not installed (it is not a dependency of seq2d).
"""

from __future__ import annotations

import gzip
import os
import struct
import sys
import types
from pathlib import Path

import pytest
import torch

from seq2d.data import (
    BLACK,
    MEAN,
    STD,
    Augment,
    DataRootError,
    IdxError,
    MnistNotFoundError,
    batches,
    data_root,
    erasing_params,
    find_mnist_files,
    get_data,
    load_mnist,
    load_raw,
    load_subset,
    load_subset_raw,
    perspective,
    perspective_coeffs,
    read_idx,
    subset_info,
)
from seq2d.data import mnist as mnist_mod

TRAIN_HIST = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_HIST = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
HAS_CUDA = torch.cuda.is_available()


def write_idx(path: Path, t: torch.Tensor, code: int = 0x08, gz: bool = False, cut: int = 0, extra: bytes = b"") -> Path:
    fmt = {0x08: ">u1", 0x0C: ">i4"}[code]
    header = struct.pack(">HBB", 0, code, t.dim()) + struct.pack(f">{t.dim()}I", *t.shape)
    data = header + t.numpy().astype(fmt).tobytes() + extra
    if cut:
        data = data[:-cut]
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# --------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_roundtrip(tmp_path, gz):
    imgs = torch.randint(0, 256, (5, 28, 28), dtype=torch.uint8)
    labels = torch.tensor([3, 1, 4, 1, 5], dtype=torch.uint8)
    ints = torch.tensor([[1, -2, 70000], [0, 5, -1]], dtype=torch.int32)
    r = read_idx(write_idx(tmp_path / "i", imgs, gz=gz))
    assert r.dtype == torch.uint8 and torch.equal(r, imgs)
    assert torch.equal(read_idx(write_idx(tmp_path / "l", labels, gz=gz)), labels)
    r = read_idx(write_idx(tmp_path / "n", ints, code=0x0C, gz=gz))
    assert r.dtype == torch.int32 and torch.equal(r, ints)


def test_read_idx_errors(tmp_path):
    imgs = torch.zeros(4, 3, 3, dtype=torch.uint8)
    with pytest.raises(IdxError, match="truncated IDX file: shape \\(4, 3, 3\\) needs 36 data bytes, found 31"):
        read_idx(write_idx(tmp_path / "a", imgs, cut=5))
    with pytest.raises(IdxError, match="truncated IDX file"):
        read_idx(write_idx(tmp_path / "b.gz", imgs, cut=5, gz=True))
    with pytest.raises(IdxError, match="trailing bytes"):
        read_idx(write_idx(tmp_path / "c", imgs, extra=b"xx"))
    (tmp_path / "d").write_bytes(b"\x00\x00\x08\x03\x00\x00")
    with pytest.raises(IdxError, match="truncated IDX header"):
        read_idx(tmp_path / "d")
    (tmp_path / "e").write_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(IdxError, match="bad IDX magic number"):
        read_idx(tmp_path / "e")
    good = gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x02ab")
    (tmp_path / "f.gz").write_bytes(good[:-6])  # gzip stream cut short
    with pytest.raises(IdxError, match="corrupt or truncated gzip"):
        read_idx(tmp_path / "f.gz")


# --------------------------------------------------------------------------- data root and missing files


def test_data_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQ2D_DATA", str(tmp_path / "env"))
    assert data_root(tmp_path / "x") == tmp_path / "x"
    assert data_root() == tmp_path / "env"
    monkeypatch.setenv("SEQ2D_DATA", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_root() == tmp_path / "home" / ".cache" / "seq2d"
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DataRootError, match="not a directory"):
        data_root(tmp_path / "file")


def test_missing_files_without_download(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQ2D_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        load_mnist("train")
    msg = str(info.value)
    assert isinstance(info.value, MnistNotFoundError)
    for needle in (str(tmp_path / "MNIST" / "raw"), "train-images-idx3-ubyte", "--data", "SEQ2D_DATA", "--download"):
        assert needle in msg, needle
    # files in the wrong folder: the message says where they are
    (tmp_path / "raw").mkdir()
    write_idx(tmp_path / "raw" / "t10k-images-idx3-ubyte", torch.zeros(1, 28, 28, dtype=torch.uint8))
    with pytest.raises(MnistNotFoundError, match="holds MNIST files"):
        load_mnist("test", tmp_path)
    with pytest.raises(ValueError, match="split"):
        load_mnist("valid", tmp_path)


def test_download_goes_through_torchvision(tmp_path, monkeypatch):
    """Files absent + download=True: torchvision.datasets.MNIST(root, train, download=True) is
    called and its root/MNIST/raw output is read (a stand-in writes tiny files: no network)."""
    calls = []

    class FakeMNIST:
        def __init__(self, root, train=True, download=False):
            calls.append((root, train, download))
            raw = Path(root) / "MNIST" / "raw"
            raw.mkdir(parents=True, exist_ok=True)
            for prefix, n in (("train", 12), ("t10k", 7)):
                write_idx(raw / f"{prefix}-images-idx3-ubyte", torch.full((n, 28, 28), 255, dtype=torch.uint8))
                write_idx(raw / f"{prefix}-labels-idx1-ubyte", torch.arange(n, dtype=torch.uint8) % 10)

    tv = types.ModuleType("torchvision")
    tv.datasets = types.ModuleType("torchvision.datasets")
    tv.datasets.MNIST = FakeMNIST
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", tv.datasets)
    root = tmp_path / "cache"
    X, y = load_mnist("test", root, download=True, size=28)
    assert calls == [(str(root), False, True)]
    assert X.shape == (7, 784) and y.tolist() == [0, 1, 2, 3, 4, 5, 6] and y.dtype == torch.int64
    assert torch.allclose(X, torch.tensor((1.0 - MEAN) / STD))
    assert find_mnist_files(root, "train") is not None


# --------------------------------------------------------------------------- MNIST IDX roots

# One line, shown by `pytest -rs`: why a full-MNIST test skipped and how to enable it.
FULL_MNIST_HOW = ("run `SEQ2D_DATA=DIR python -m pytest` with DIR/MNIST/raw holding the 4 MNIST IDX files "
                  "(.ci/run: DIR=../shared/data; torchvision.datasets.MNIST(DIR, download=True) fetches them)")


def full_mnist_root() -> Path:
    """``$SEQ2D_DATA`` when it holds full MNIST, else skip with the one-line reason above."""
    env = os.environ.get("SEQ2D_DATA")
    if not env:
        pytest.skip(f"needs full MNIST, SEQ2D_DATA is unset: {FULL_MNIST_HOW}")
    root = Path(env)
    if find_mnist_files(root, "train") is None or find_mnist_files(root, "test") is None:
        pytest.skip(f"needs full MNIST, SEQ2D_DATA={env} has no MNIST/raw IDX files: {FULL_MNIST_HOW}")
    return root


@pytest.fixture(scope="module")
def mnist_root():
    return full_mnist_root()


@pytest.fixture(scope="module")
def subset_idx_root(tmp_path_factory):
    """A data root whose MNIST/raw holds the bundled subset's real digits as IDX files (train
    gzipped, test plain), so the file-reading path runs without the full data set."""
    root = tmp_path_factory.mktemp("subset-root")
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, prefix, gz in (("train", "train", True), ("test", "t10k", False)):
        images, labels = load_subset_raw(split)
        ext = ".gz" if gz else ""
        write_idx(raw / f"{prefix}-images-idx3-ubyte{ext}", images, gz=gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte{ext}", labels, gz=gz)
    return root


@pytest.fixture(scope="module", params=["subset-as-idx", "full"])
def idx_data(request):
    """``(root, {split: (n, class histogram)})``: the bundled subset written as IDX files (always
    runs), and full MNIST from ``$SEQ2D_DATA`` (skipped, with the reason, when absent)."""
    if request.param == "full":
        return full_mnist_root(), {"train": (60000, TRAIN_HIST), "test": (10000, TEST_HIST)}
    root = request.getfixturevalue("subset_idx_root")
    return root, {"train": (2500, [250] * 10), "test": (1000, [100] * 10)}


def test_mnist_idx_shapes_labels_and_normalisation(idx_data):
    root, expect = idx_data
    for split, (n, hist) in expect.items():
        X, y = load_mnist(split, root, size=28)
        assert X.shape == (n, 784) and X.dtype == torch.float32 and y.dtype == torch.int64
        assert torch.bincount(y, minlength=10).tolist() == hist
    X, y = load_mnist("train", root, size=28)
    assert abs(X.mean().item()) < 0.01 and abs(X.std().item() - 1) < 0.01
    raw, raw_labels = load_raw("train", root)
    assert torch.equal(raw_labels.long(), y)
    # the formula, pixel by pixel, on an image with many grey levels
    i = 7
    expect32 = (raw[i].flatten().float() / 255 - MEAN) / STD
    assert torch.equal(X[i], expect32)  # the same elementwise IEEE ops (correctly rounded on any CPU): bitwise
    expect64 = (raw[i].flatten().double() / 255 - 0.1307) / 0.3081
    assert torch.allclose(X[i].double(), expect64, atol=1e-6, rtol=0)
    assert X[i].min().item() == pytest.approx(-0.1307 / 0.3081, abs=1e-6)


def test_mnist_idx_size50_and_cache(idx_data):
    root, expect = idx_data
    n = expect["test"][0]
    X, y = load_mnist("test", root)
    assert X.shape == (n, 2500) and y.shape == (n,)
    X4, y4 = load_mnist("test", root, flatten=False)
    assert X4.shape == (n, 1, 50, 50)
    assert X4.data_ptr() == X.data_ptr() and y4 is y  # cached: no second preprocessing
    assert torch.equal(X4.flatten(1), X)
    # limit preprocesses (and returns) the first examples only, identically
    Xl, yl = load_mnist("test", root, limit=100)
    assert torch.allclose(Xl, X[:100], atol=1e-6) and torch.equal(yl, y[:100])
    # the normalisation commutes with the resize (up to float rounding)
    Xu, _ = load_mnist("test", root, normalize=False, limit=100)
    assert 0 <= Xu.min() and Xu.max() <= 1
    assert torch.allclose((Xu - MEAN) / STD, Xl, atol=1e-5)


def test_resize_matches_torchvision(idx_data):
    """interpolate(bilinear, align_corners=False, antialias=False) vs torchvision's resize:
    identical up to float rounding for tensors (max ~3e-7 on [0, 1]), and within PIL's uint8
    rounding (max 1/255) for PIL images."""
    TF = pytest.importorskip("torchvision.transforms.functional")
    root, _ = idx_data
    raw, _ = load_raw("train", root)
    imgs = raw[:32].unsqueeze(1)
    ours = load_mnist("train", root, normalize=False, flatten=False, limit=32)[0]
    tv = TF.resize(imgs.float() / 255, [50, 50], antialias=True)
    assert (ours - tv).abs().max().item() < 1e-6
    normed = load_mnist("train", root, flatten=False, limit=32)[0]
    assert (normed - TF.normalize(tv, [MEAN], [STD])).abs().max().item() < 1e-5
    pil = pytest.importorskip("PIL.Image")
    via_pil = torch.stack([TF.pil_to_tensor(TF.resize(pil.fromarray(im[0].numpy()), [50, 50])) for im in imgs])
    assert (ours - via_pil.float() / 255).abs().max().item() <= 1 / 255 + 1e-6


# --------------------------------------------------------------------------- bundled subset


def test_subset_file_and_composition():
    path = Path(mnist_mod.__file__).with_name("mnist_subset.pt")
    assert path.stat().st_size <= 3_000_000
    info = subset_info()
    assert info["n_train"] == 2500 and info["n_test"] == 1000 and info["seed"] == 0
    assert info["source_md5"]["train-images-idx3-ubyte.gz"] == "f68b3c2dcbeaaa9fbdd348bbdeb94873"
    for split, n in (("train", 2500), ("test", 1000)):
        X, y = load_subset(split)
        assert X.shape == (n, 2500) and X.dtype == torch.float32 and y.dtype == torch.int64
        assert torch.bincount(y, minlength=10).tolist() == [n // 10] * 10
        idx = info[f"{split}_indices"]
        assert idx.dtype == torch.int64 and torch.equal(idx, idx.unique())  # sorted, distinct
        images, labels = load_subset_raw(split)
        assert images.shape == (n, 28, 28) and images.dtype == torch.uint8
        # the same elementwise IEEE ops (correctly rounded on any CPU): bitwise
        assert torch.equal(load_subset(split, size=28)[0], ((images.float() / 255 - MEAN) / STD).flatten(1))
    d = get_data("subset")
    assert d["source"] == "subset" and d["n_train"] == 2500 and d["n_test"] == 1000
    assert d["train"][0].shape == (2500, 2500)
    with pytest.raises(ValueError, match="source"):
        get_data("bogus")


def test_subset_indices_point_at_the_real_digits(mnist_root):
    info = subset_info()
    for split in ("train", "test"):
        images, labels = load_subset_raw(split)
        full_images, full_labels = load_raw(split, mnist_root)
        idx = info[f"{split}_indices"]
        assert torch.equal(full_images[idx], images) and torch.equal(full_labels[idx], labels)
    d = get_data("full", mnist_root, size=28)
    assert d["n_train"] == 60000 and d["n_test"] == 10000 and d["root"] == mnist_root


# --------------------------------------------------------------------------- augmentation


def digits(n=64, size=50):
    return load_subset("train", size=size, flatten=False, limit=n)[0]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_augment_identity_and_changes():
    x = digits()
    assert Augment()(x, gen(0)) is x
    out = Augment(erasing_p=1.0)(x, gen(0))
    assert out.shape == x.shape and out is not x
    assert ((out != x).flatten(1).any(1) | (x == 0).flatten(1).all(1)).all()
    out = Augment(perspective_p=1.0)(x, gen(0))
    assert (out != x).flatten(1).any(1).float().mean() > 0.9
    assert torch.equal(x, digits())  # input untouched
    half = Augment(erasing_p=0.5, perspective_p=0.5)(x, gen(1))
    changed = (half != x).flatten(1).any(1).float().mean().item()
    assert 0.5 < changed < 0.95


def test_augment_deterministic_per_generator():
    x = digits()
    aug = Augment(erasing_p=0.5, perspective_p=0.5)
    a, b, c = aug(x, gen(3)), aug(x, gen(3)), aug(x, gen(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    flat = aug(x.flatten(1), gen(3))  # flattened input: same result, same shape
    assert flat.shape == (64, 2500) and torch.equal(flat, a.flatten(1))


def test_erasing_area_and_shape():
    x = torch.ones(400, 1, 50, 50)
    lo, hi = 0.02, 0.33
    g = gen(0)
    out = Augment(erasing_p=1.0, erasing_scale=(lo, hi), erasing_value=0.0)(x, g)
    erased = out[:, 0] == 0
    rows, cols = erased.any(2), erased.any(1)
    h, w = rows.sum(1), cols.sum(1)
    count = erased.sum((1, 2))
    assert torch.equal(count, h * w)  # one solid rectangle per image
    assert (h < 50).all() and (w < 50).all() and (count > 0).all()
    # the rounding of h and w to integers moves the area by at most (h + w) / 2 + 1/4 pixels
    slack = (h + w) / 2 + 0.25
    assert (count >= lo * 2500 - slack).all() and (count <= hi * 2500 + slack).all()
    assert count.float().std() > 50  # the area is really sampled
    # fixed area and ratio: h = w = round(sqrt(0.1 * 2500)) = 16 for every image
    out = Augment(erasing_p=1.0, erasing_scale=(0.1, 0.1), erasing_ratio=(1.0, 1.0), erasing_value=-1.0)(x, g)
    assert ((out == -1).sum((1, 2, 3)) == 256).all()
    p = erasing_params(1000, 50, 50, p=0.3, generator=g)
    assert 0.2 < p["apply"].float().mean() < 0.4
    assert ((p["top"] >= 0) & (p["top"] + p["h"] <= 50) & (p["left"] + p["w"] <= 50)).all()


def test_perspective_scale0_identity_and_fill():
    x = digits()
    out = Augment(perspective_p=1.0, perspective_scale=0.0)(x, gen(0))
    assert out.shape == x.shape and (out - x).abs().max() < 1e-5
    # the region outside the source is filled with exactly the fill value (black by default)
    black = torch.full((8, 1, 50, 50), BLACK)
    out = Augment(perspective_p=1.0, perspective_scale=1.0)(black, gen(0))
    assert (out - BLACK).abs().max() < 1e-6
    ones = torch.ones(8, 1, 50, 50)
    end = torch.tensor([[[10, 10], [39, 10], [39, 39], [10, 39]]]).expand(8, 4, 2)
    out = perspective(ones, end, fill=BLACK)  # shrink to the centre: the corners are background
    assert out[:, 0, 0, 0].sub(BLACK).abs().max() < 1e-6 and out[:, 0, 25, 25].sub(1).abs().max() < 1e-6
    # three collinear corners: singular system -> identity coefficients instead of NaNs
    bad = torch.tensor([[[0, 0], [10, 0], [20, 0], [0, 49]]])
    c = perspective_coeffs(torch.tensor([[0, 0], [49, 0], [49, 49], [0, 49]]), bad)
    assert torch.equal(c, torch.tensor([[1.0, 0, 0, 0, 1, 0, 0, 0]], dtype=torch.float64))


def test_perspective_matches_torchvision():
    TF = pytest.importorskip("torchvision.transforms.functional")
    x = digits(8, size=28) * STD + MEAN  # back to [0, 1]: torchvision fills with 0 by default
    start = [[0, 0], [27, 0], [27, 27], [0, 27]]
    from seq2d.data.augment import perspective_params

    end, _ = perspective_params(8, 28, 28, p=1.0, distortion_scale=0.6, generator=gen(5))
    ours = perspective(x, end, fill=0.0)
    for i in range(8):
        ref = TF.perspective(x[i : i + 1], start, end[i].tolist(), interpolation=TF.InterpolationMode.BILINEAR)
        assert (ours[i : i + 1] - ref).abs().max() < 1e-4


# --------------------------------------------------------------------------- batches


def test_batches_cover_every_index_once_and_are_deterministic():
    N = 103
    X, y = torch.arange(N).float()[:, None].repeat(1, 3), torch.arange(N)
    it = batches(X, y, 10, shuffle=True, generator=gen(0))
    assert len(it) == 11
    epoch1 = list(it)
    assert [len(b[1]) for b in epoch1] == [10] * 10 + [3]
    seen = torch.cat([b[1] for b in epoch1])
    assert torch.equal(seen.sort().values, y) and not torch.equal(seen, y)
    assert all(torch.equal(bx[:, 0].long(), by) for bx, by in epoch1)
    epoch2 = torch.cat([b[1] for b in it])
    assert torch.equal(epoch2.sort().values, y) and not torch.equal(epoch2, seen)  # fresh order per epoch
    again = torch.cat([b[1] for b in batches(X, y, 10, shuffle=True, generator=gen(0))])
    assert torch.equal(again, seen)
    assert len(batches(X, y, 10, drop_last=True, generator=gen(0))) == 10
    assert sum(len(b[1]) for b in batches(X, y, 10, drop_last=True, generator=gen(0))) == 100
    ordered = list(batches(X, y, 50, shuffle=False))
    assert [b[1][0].item() for b in ordered] == [0, 50, 100] and ordered[0][0]._base is not None  # views
    with pytest.raises(ValueError, match="rank"):
        batches(X, y, 10, rank=2, world_size=2)


def test_batches_shards_are_disjoint_with_equal_counts():
    N, ws = 100, 3
    X, y = torch.zeros(N, 2), torch.arange(N)
    shards = [batches(X, y, 8, shuffle=True, generator=gen(7), rank=r, world_size=ws) for r in range(ws)]
    lens = {len(s) for s in shards}
    assert lens == {5}  # 33 examples per rank -> 4 full batches + 1
    got = [torch.cat([b[1] for b in s]) for s in shards]
    assert all(g.numel() == 33 for g in got)
    union = torch.cat(got)
    assert union.unique().numel() == 99  # disjoint; one example skipped this epoch
    for shuffle in (False,):
        plain = [torch.cat([b[1] for b in batches(X, y, 8, shuffle=shuffle, rank=r, world_size=ws)]) for r in range(ws)]
        assert torch.cat(plain).unique().numel() == 99 and plain[1][:3].tolist() == [1, 4, 7]


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_cuda_batches_and_augment():
    dev = torch.device("cuda")
    X, y = load_subset("train", device=dev, limit=256)
    assert X.device.type == "cuda" and y.device.type == "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    seen = torch.cat([b[1] for b in batches(X, torch.arange(256, device=dev), 32, generator=g)])
    assert seen.device.type == "cuda" and torch.equal(seen.sort().values.cpu(), torch.arange(256))
    aug = Augment(erasing_p=0.5, perspective_p=0.5)
    a = aug(X, torch.Generator(device=dev).manual_seed(1))
    b = aug(X, torch.Generator(device=dev).manual_seed(1))
    assert a.device.type == "cuda" and torch.equal(a, b)
    # a CPU generator drives CUDA data too, and matches the CPU computation
    c = aug(X, gen(1))
    d = aug(X.cpu(), gen(1))
    assert (c.cpu() - d).abs().max() < 1e-4


def test_perspective_on_tiny_images_never_gives_nan():
    """On 4 x 4 images a strong warp can send pixel centres past the projective horizon
    (denominator <= 0); those pixels are outside the source and get the fill, not NaN."""
    from seq2d.data.augment import perspective, perspective_params

    g = torch.Generator().manual_seed(0)
    x = torch.rand(2000, 1, 4, 4)
    end, apply = perspective_params(2000, 4, 4, p=1.0, distortion_scale=0.5, generator=g)
    y = perspective(x, end, apply, fill=-0.5)
    assert torch.isfinite(y).all()
    assert bool((y == -0.5).any())  # some pixels were outside the source
