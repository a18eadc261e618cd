"""``kernel="triton_v2"`` (issue 37) against the masked-dense reference.

Without a GPU the kernels run through Triton's interpreter (``TRITON_INTERPRET=1``, tiny
problems, fixed blocking: BLOCK_B 16, a K split at T = 32, bands of 2 batch blocks, 3 persistent
programs), so the structure cases run here: odd batches, empty rows and columns, tied tiles,
fewer programs than work items, partial dW groups and the fused split reduction. fp16 and
fp32 (v1's kernels) are compared tightly; bf16 dots are upcast under the interpreter. With a
GPU the same tests run the compiled kernels. Whether they compile well for sm_90 (TMA, wgmma,
buffers, spills) is tests/test_triton_v2_compile.py.
"""

import os

import torch

_CUDA = torch.cuda.is_available()
_PREV = os.environ.get("TRITON_INTERPRET")
if not _CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton's import: see tests/test_sparse_triton.py

import pytest  # noqa: E402

try:
    pytest.importorskip("triton")
    from seq2d.sparse import bsmm, resolve_kernel  # noqa: E402
    from seq2d.sparse.kernels import available_kernels, get_kernel  # noqa: E402
    from seq2d.sparse.kernels import triton_v1 as v1  # noqa: E402
    from seq2d.sparse.kernels import triton_v2 as v2  # noqa: E402
    from seq2d.sparse.layout import BlockSparseLayout, layout_from_tile_mask  # noqa: E402
finally:
    if _PREV is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = _PREV

DEVICE = torch.device("cuda" if _CUDA else "cpu")
OPS = ("dds_t", "dds", "sdd_t")
ENTRY = {"dds_t": v2.dds_t, "dds": v2.dds, "sdd_t": v2.sdd_t}


@pytest.fixture(autouse=True, scope="module")
def _interpreter():
    if _CUDA:
        yield
        return
    prev = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if prev is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev


def _operands(layout, B, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = layout.tile
    x = torch.randn(B, layout.Kt * T, generator=g).to(DEVICE, dtype)
    dy = torch.randn(B, layout.Mt * T, generator=g).to(DEVICE, dtype)
    wp = (torch.randn(layout.nnz, T, T, generator=g) / T**0.5).to(DEVICE, dtype)
    return x, dy, wp


def _run(op, x, dy, wp, layout, **kw):
    """v2's entry point writing into a NaN-poisoned output (an unwritten element fails)."""
    T = layout.tile
    shape = {"dds_t": dy.shape, "dds": x.shape, "sdd_t": (layout.nnz, T, T)}[op]
    out = torch.full(shape, float("nan"), device=DEVICE, dtype=x.dtype)
    if op == "dds_t":
        return v2.dds_t(x, wp, layout, out)
    if op == "dds":
        return v2.dds(dy, wp, layout, out)
    return v2.sdd_t(dy, x, layout, out, **kw)


def _reference(op, x, dy, wp, layout):
    ref = get_kernel("reference")
    x, dy = x.double(), dy.double()
    wp = wp.double() if wp is not None else None
    return {"dds_t": lambda: ref.dds_t(x, wp, layout), "dds": lambda: ref.dds(dy, wp, layout),
            "sdd_t": lambda: ref.sdd_t(dy, x, layout)}[op]()


def _check(op, out, x, dy, wp, layout):
    ref = _reference(op, x, dy, wp, layout)
    assert out.dtype == x.dtype and out.shape == ref.shape
    assert torch.isfinite(out).all(), f"{op}: an element was not written"
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[x.dtype]
    err = (out.double() - ref).norm().item()
    assert err <= tol * max(ref.norm().item(), 1e-30), f"{op}: relative error {err / max(ref.norm().item(), 1e-30):.2e}"


def _mask(rows):
    return torch.tensor(rows, dtype=torch.bool)


@pytest.fixture(autouse=True)
def _one_config_on_cuda(monkeypatch):
    """On a GPU: the first config of each table, so each kernel variant compiles once (the
    autotuner would compile and time every candidate for every new key)."""
    if _CUDA:
        for T in v2._GATHER_CONFIGS:
            for op in ("dds_t", "dds"):
                monkeypatch.setitem(v2._OVERRIDE, (op, T), v2._GATHER_CONFIGS[T][0])
            monkeypatch.setitem(v2._OVERRIDE, ("sdd_t", T), v2._SDD_CONFIGS[T][0])


# ---------------------------------------------------------------------------- ops vs reference
# rows 0: 3 tiles, 1: empty, 2: 5 tiles (a full dW group of 4 and a partial one), 3: 2 tiles;
# column 1 empty; columns of very different lengths (the longest-first order matters)
STRUCTURE = [[1, 0, 1, 1, 0, 0],
             [0, 0, 0, 0, 0, 0],
             [1, 0, 1, 1, 1, 1],
             [0, 0, 1, 0, 1, 0]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("T,B", [(16, 37), (32, 5)], ids=["T16-B37", "T32-B5"])
@pytest.mark.parametrize("op", OPS)
def test_ops_match_reference(op, T, B, dtype):
    if _CUDA and dtype == torch.bfloat16:
        pytest.skip("bf16 on the GPU: test_real_size_on_cuda")
    """Odd batches (a ragged last batch block, and one smaller than a block), an empty tile-row
    (y there exactly 0) and tile-column (dX there exactly 0), partial dW groups; T = 32 walks
    each tile in two K slices. B = 37 gives 3 batch blocks: 12 work items (18 for dX), more
    than the 3 persistent programs, and a last L2 band one block wide."""
    layout = layout_from_tile_mask(T, _mask(STRUCTURE)).to(DEVICE)
    x, dy, wp = _operands(layout, B, dtype, seed=T + B)
    out = _run(op, x, dy, wp, layout)
    _check(op, out, x, dy, wp, layout)
    if op == "dds_t":
        assert (out[:, T:2 * T] == 0).all()
    if op == "dds":
        assert (out[:, T:2 * T] == 0).all()


@pytest.mark.parametrize("op", OPS)
def test_tied_tiles(op):
    layout = BlockSparseLayout(16, (2, 3), [0, 0, 1, 1], [0, 2, 1, 2], data_index=[0, 1, 0, 0]).to(DEVICE)
    assert layout.tied
    data = torch.randn(layout.n_data, 16, 16, device=DEVICE).half()
    wp = data.index_select(0, layout.data_index)
    x, dy, _ = _operands(layout, 17, torch.float16)
    _check(op, _run(op, x, dy, wp, layout), x, dy, wp, layout)


@pytest.mark.skipif(_CUDA, reason="the interpreter's program count")
@pytest.mark.parametrize("programs", [1, 2])
def test_fewer_programs_than_work_items(programs, monkeypatch):
    """One or two persistent programs walk every (column, batch block) item."""
    monkeypatch.setattr(v2, "INTERP_PROGRAMS", programs)
    layout = layout_from_tile_mask(16, _mask(STRUCTURE)).to(DEVICE)
    x, dy, wp = _operands(layout, 50, torch.float16, seed=3)
    for op in ("dds_t", "dds"):
        _check(op, _run(op, x, dy, wp, layout), x, dy, wp, layout)


@pytest.mark.parametrize("splits", [2, 3, 4])
def test_sdd_t_fused_split(splits, monkeypatch):
    """dW with the batch split over several programs per group, summed by the last one in the
    same launch; the counters are zero again afterwards (the next launch relies on it)."""
    seen = []
    launch = v2._launch

    def spy(op, T, grid, args, consts, device):
        seen.append(consts["SPLIT"])
        return launch(op, T, grid, args, consts, device)

    monkeypatch.setattr(v2, "_launch", spy)
    layout = layout_from_tile_mask(16, _mask(STRUCTURE)).to(DEVICE)
    B = 700 if _CUDA else 61  # several BLOCK_B chunks per split (16 under the interpreter, 64 on a GPU)
    x, dy, wp = _operands(layout, B, torch.float16, seed=splits)
    _check("sdd_t", _run("sdd_t", x, dy, wp, layout, splits=splits), x, dy, wp, layout)
    assert seen == [True]
    assert all(int(c.abs().sum()) == 0 for c in v2._COUNTERS.values())
    # and again, reusing the counters
    x2, dy2, _ = _operands(layout, B, torch.float16, seed=splits + 10)
    _check("sdd_t", _run("sdd_t", x2, dy2, wp, layout, splits=splits), x2, dy2, wp, layout)


@pytest.mark.parametrize("op", OPS)
def test_empty_layout_and_batch(op):
    layout = BlockSparseLayout(16, (2, 3), [], []).to(DEVICE)
    x, dy, wp = _operands(layout, 7, torch.float16)
    out = _run(op, x, dy, wp, layout)
    assert (out == 0).all() and out.shape == {"dds_t": (7, 32), "dds": (7, 48), "sdd_t": (0, 16, 16)}[op]
    layout = layout_from_tile_mask(16, _mask([[1, 1], [0, 1]])).to(DEVICE)
    x, dy, wp = _operands(layout, 0, torch.float16)
    k = get_kernel("triton_v2")
    assert k.dds_t(x, wp, layout).shape == (0, 32) and k.dds(dy, wp, layout).shape == (0, 32)
    assert (k.sdd_t(dy, x, layout) == 0).all()


@pytest.mark.parametrize("op", OPS)
def test_strided_operands(op):
    """Operands TMA cannot read (a column stride of 2, a transposed dy) are copied first."""
    layout = layout_from_tile_mask(16, _mask([[1, 0, 1], [1, 1, 0]])).to(DEVICE)
    x0, dy0, wp = _operands(layout, 9, torch.float16)
    x = torch.zeros(9, 2 * x0.shape[1], device=DEVICE, dtype=torch.float16)[:, ::2].copy_(x0)
    dy = torch.zeros(dy0.shape[1], 9, device=DEVICE, dtype=torch.float16).T.copy_(dy0)
    assert not (x.is_contiguous() or dy.is_contiguous())
    _check(op, _run(op, x, dy, wp, layout), x, dy, wp, layout)


# ---------------------------------------------------------------------------- metadata, dispatch
def test_metadata_is_int32_cached_and_ordered():
    layout = layout_from_tile_mask(16, _mask(STRUCTURE))
    m = v2.metadata(layout)
    assert v2.metadata(layout) is m
    for name in ("row_ptr", "col", "row_order", "col_ptr", "t_row", "t_pos", "col_order", "row", "gstart", "gcount"):
        assert getattr(m, name).dtype == torch.int32, name
    rows = (layout.row_ptr[1:] - layout.row_ptr[:-1])[m.row_order.long()]
    assert (rows[:-1] >= rows[1:]).all()  # longest first
    assert torch.equal(m.t_row.long(), layout.row[layout.t_pos])
    # groups of <= 4 same-row tiles (T = 16) covering every position once: rows of 3, 5, 2
    assert m.gcount.tolist() == [3, 4, 1, 2] and m.gstart.tolist() == [0, 3, 7, 8] and m.n_groups == 4


def test_float32_runs_v1_and_auto_keeps_v1(monkeypatch):
    calls = []
    monkeypatch.setattr(v1, "dds_t", lambda *a, **k: calls.append("v1") or a[3].zero_())
    layout = layout_from_tile_mask(16, _mask([[1, 1]])).to(DEVICE)
    x, _, wp = _operands(layout, 4, torch.float32)
    get_kernel("triton_v2").dds_t(x, wp, layout)
    assert calls == ["v1"]
    assert "triton_v2" in available_kernels()
    assert resolve_kernel("auto", torch.device("cuda"), torch.bfloat16, 0.1, 128).name == "triton"


@pytest.mark.skipif(_CUDA, reason="the interpreter stands in for the GPU's autotuned launch")
def test_autotuned_launch_path(monkeypatch):
    """The GPU's launch path (``triton.autotune`` keyed on tile, variant, batch and tiles per
    column; the grid from the chosen config), under the interpreter with one-candidate tables
    (the autotuner times nothing then)."""
    T = 16
    monkeypatch.setattr(v2, "_fixed_config", lambda op, T: None)
    monkeypatch.setitem(v2._GATHER_CONFIGS, T, [v2._INTERP["gather"](T)])
    monkeypatch.setitem(v2._SDD_CONFIGS, T, [v2._INTERP["sdd"](T)])
    monkeypatch.setattr(v2, "_TUNERS", {})
    layout = layout_from_tile_mask(T, _mask(STRUCTURE)).to(DEVICE)
    x, dy, wp = _operands(layout, 37, torch.float16, seed=4)
    for op in OPS:
        _check(op, _run(op, x, dy, wp, layout, **({"splits": 2} if op == "sdd_t" else {})), x, dy, wp, layout)
    assert set(v2._TUNERS) == {("gather", T), ("sdd", T)}


def test_bsmm_autograd_matches_reference():
    layout = layout_from_tile_mask(32, _mask([[1, 0, 1], [0, 1, 1]])).to(DEVICE)
    x0, dy, wp0 = _operands(layout, 21, torch.float16, seed=9)
    x, w = x0.clone().requires_grad_(), wp0.clone().requires_grad_()
    y = bsmm(x, w, layout, "triton_v2")
    y.backward(dy)
    _check("dds_t", y.detach(), x0, dy, wp0, layout)
    _check("dds", x.grad, x0, dy, wp0, layout)
    _check("sdd_t", w.grad, x0, dy, wp0, layout)


# ---------------------------------------------------------------------------- GPU: real sizes
@pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("T", [128, 64])
def test_real_size_on_cuda(T, dtype):
    """N = 2048, batch 777 (no multiple of a block), density 0.3 with an empty tile-row and
    -column: y, dX and dW into NaN-poisoned outputs, dW also split 5 ways (fused reduction),
    and twice bitwise equal (the split sum is deterministic: one path against itself)."""
    g = torch.Generator().manual_seed(T)
    mask = torch.rand(2048 // T, 2048 // T, generator=g) < 0.3
    mask[1, :] = False
    mask[:, 2] = False
    layout = layout_from_tile_mask(T, mask).to(DEVICE)
    x, dy, wp = _operands(layout, 777, dtype, seed=T)
    for op in OPS:
        out = _run(op, x, dy, wp, layout)
        _check(op, out, x, dy, wp, layout)
    assert (_run("dds_t", x, dy, wp, layout)[:, T:2 * T] == 0).all()
    assert (_run("dds", x, dy, wp, layout)[:, 2 * T:3 * T] == 0).all()
    few = layout_from_tile_mask(T, mask[:4, :4].clone()).to(DEVICE)  # few tiles, long batch: the split path
    xs, dys, _ = _operands(few, 8192 + 5, dtype, seed=1)
    a = _run("sdd_t", xs, dys, None, few, splits=5)
    _check("sdd_t", a, xs, dys, None, few)
    assert torch.equal(a, _run("sdd_t", xs, dys, None, few, splits=5))
