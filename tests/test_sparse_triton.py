"""The Triton kernel against the masked-dense reference, op by op.

Without a GPU the kernels run on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1``): slow, so every problem here is tiny. With a GPU the same
tests run the compiled kernels on CUDA tensors.
"""

import os

import torch

# Switch the interpreter on before triton is imported, so that even triton's own
# library functions are built for it. It is put back right after the imports and
# switched on only while this module's tests run (fixture below), so other test
# modules never see it; the kernel reads the mode at launch time.
_CUDA = torch.cuda.is_available()
_PREV = os.environ.get("TRITON_INTERPRET")
if not _CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

try:
    pytest.importorskip("triton")
    from seq2d.sparse.kernels import available_kernels, get_kernel  # noqa: E402
    from seq2d.sparse.kernels import triton_v1 as tb  # noqa: E402
    from seq2d.sparse.layout import BlockSparseLayout, layout_from_tile_mask  # noqa: E402
finally:
    if _PREV is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = _PREV

DEVICE = torch.device("cuda" if _CUDA else "cpu")
LOW = (torch.float16, torch.bfloat16)
OPS = ("dds_t", "dds", "sdd_t")


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


def _triton():
    return get_kernel("triton")


def _operands(layout, B, dtype):
    T = layout.tile
    x = torch.randn(B, layout.Kt * T, device=DEVICE).to(dtype)
    dy = torch.randn(B, layout.Mt * T, device=DEVICE).to(dtype)
    wp = (torch.randn(layout.nnz, T, T, device=DEVICE) / T**0.5).to(dtype)
    return x, dy, wp


def _run(kernel, op, x, dy, wp, layout):
    if op == "dds_t":
        return kernel.dds_t(x, wp, layout)
    if op == "dds":
        return kernel.dds(dy, wp, layout)
    return kernel.sdd_t(dy, x, layout)


def _assert_matches(out, x, dy, wp, layout, op):
    """``out`` (the triton result) against the reference computed in fp32 from the same inputs."""
    ref = _run(get_kernel("reference"), op, x.float(), dy.float(), wp.float(), layout)
    assert out.dtype == x.dtype
    assert out.shape == ref.shape
    assert torch.isfinite(out).all()
    if x.dtype == torch.float32:
        scale = max(1.0, ref.abs().max().item())
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4 * scale)
    else:
        err = (out.float() - ref).norm().item()
        norm = ref.norm().item()
        assert err <= 1e-2 * norm or (norm == 0 and err == 0), f"{op}: relative error {err / max(norm, 1e-30):.3e}"


def _layout(T, Mt, Kt, density):
    return layout_from_tile_mask(T, torch.rand(Mt, Kt) < density).to(DEVICE)


# ---------------------------------------------------------------------------- ops vs reference
@pytest.mark.parametrize("dtype", [torch.float32, *LOW], ids=str)
@pytest.mark.parametrize("B", [5, 33])
@pytest.mark.parametrize("density", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("T", [16, 32])
@pytest.mark.parametrize("op", OPS)
def test_op_matches_reference(op, T, density, B, dtype):
    layout = _layout(T, 3, 4, density)
    x, dy, wp = _operands(layout, B, dtype)
    _assert_matches(_run(_triton(), op, x, dy, wp, layout), x, dy, wp, layout, op)


@pytest.mark.parametrize("op", OPS)
def test_tile_64(op):
    layout = _layout(64, 2, 3, 0.5)
    x, dy, wp = _operands(layout, 21, torch.float32)
    _assert_matches(_run(_triton(), op, x, dy, wp, layout), x, dy, wp, layout, op)


# ---------------------------------------------------------------------------- structure edge cases
@pytest.mark.parametrize("op", OPS)
def test_empty_layout(op):
    layout = BlockSparseLayout(16, (2, 3), [], []).to(DEVICE)
    x, dy, wp = _operands(layout, 7, torch.float32)
    out = _run(_triton(), op, x, dy, wp, layout)
    expected = {"dds_t": (7, 32), "dds": (7, 48), "sdd_t": (0, 16, 16)}[op]
    assert out.shape == expected
    assert (out == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_empty_rows_and_columns(op, dtype):
    mask = torch.tensor([[1, 0, 1, 0],
                         [0, 0, 0, 0],   # an empty tile-row: y there must be exactly 0
                         [1, 0, 0, 1]], dtype=torch.bool)  # column 1 empty: dx there must be 0
    layout = layout_from_tile_mask(16, mask).to(DEVICE)
    x, dy, wp = _operands(layout, 19, dtype)
    out = _run(_triton(), op, x, dy, wp, layout)
    _assert_matches(out, x, dy, wp, layout, op)
    if op == "dds_t":
        assert (out[:, 16:32] == 0).all()
    if op == "dds":
        assert (out[:, 16:32] == 0).all()


@pytest.mark.parametrize("op", OPS)
def test_tied_tiles(op):
    # positions 0, 2, 3 share data tile 0; the kernel only sees per-position tiles
    layout = BlockSparseLayout(16, (2, 3), [0, 0, 1, 1], [0, 2, 1, 2], data_index=[0, 1, 0, 0]).to(DEVICE)
    assert layout.tied
    data = torch.randn(layout.n_data, 16, 16, device=DEVICE)
    wp = data.index_select(0, layout.data_index)
    x, dy, _ = _operands(layout, 17, torch.float32)
    _assert_matches(_run(_triton(), op, x, dy, wp, layout), x, dy, wp, layout, op)


@pytest.mark.parametrize("op", OPS)
def test_empty_batch(op):
    layout = _layout(16, 2, 2, 1.0)
    x, dy, wp = _operands(layout, 0, torch.float32)
    out = _run(_triton(), op, x, dy, wp, layout)
    assert out.shape == {"dds_t": (0, 32), "dds": (0, 32), "sdd_t": (4, 16, 16)}[op]
    assert (out == 0).all()


@pytest.mark.parametrize("op", OPS)
def test_strided_operands(op):
    """Non-contiguous x / dy / wp are read through their strides, not copied."""
    layout = _layout(16, 2, 3, 0.7)
    x0, dy0, wp0 = _operands(layout, 9, torch.float32)
    x = torch.randn(9, 2 * x0.shape[1], device=DEVICE)[:, ::2].copy_(x0)
    dy = torch.randn(dy0.shape[1], 9, device=DEVICE).T.copy_(dy0)
    wp = wp0.transpose(1, 2).contiguous().transpose(1, 2)
    assert not (x.is_contiguous() or dy.is_contiguous() or wp.is_contiguous())
    _assert_matches(_run(_triton(), op, x, dy, wp, layout), x, dy, wp, layout, op)


@pytest.mark.parametrize("kind", ["transposed", "sliced"])
def test_bsmm_with_strided_tiles_and_gradients(kind):
    """bsmm (the autograd op) given tiles as a strided view: output and both gradients equal
    the reference's, and dW reaches the tensor the view was taken from."""
    from seq2d.sparse import bsmm

    layout = _layout(16, 2, 3, 0.7)
    x0, dy, wp0 = _operands(layout, 9, torch.float32)
    if kind == "transposed":
        leaf = wp0.transpose(1, 2).contiguous().requires_grad_(True)
        wp = leaf.transpose(1, 2)
    else:
        leaf = torch.zeros(2 * layout.nnz, 16, 16, device=DEVICE)
        leaf[::2] = wp0
        leaf.requires_grad_(True)
        wp = leaf[::2]
    assert not wp.is_contiguous()
    x, xr = x0.clone().requires_grad_(True), x0.clone().requires_grad_(True)
    wr = wp0.clone().requires_grad_(True)
    y, yr = bsmm(x, wp, layout, _triton()), bsmm(xr, wr, layout, "reference")
    y.backward(dy)
    yr.backward(dy)
    tol = dict(rtol=1e-4, atol=1e-4 * max(1.0, yr.abs().max().item()))
    torch.testing.assert_close(y, yr, **tol)
    torch.testing.assert_close(x.grad, xr.grad, **tol)
    back = leaf.grad.transpose(1, 2) if kind == "transposed" else leaf.grad[::2]
    torch.testing.assert_close(back, wr.grad, rtol=1e-4, atol=1e-4 * max(1.0, wr.grad.abs().max().item()))


@pytest.mark.parametrize("splits", [2, 3, 50])
def test_sdd_t_batch_split(splits):
    """dW with the batch split over several programs per tile (fp32 workspace + sum)."""
    layout = _layout(16, 2, 3, 0.6)
    x, dy, wp = _operands(layout, 40, torch.bfloat16)
    out = torch.full((layout.nnz, 16, 16), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    tb.sdd_t(dy, x, layout, out, splits=splits)
    _assert_matches(out, x, dy, wp, layout, "sdd_t")


# ---------------------------------------------------------------------------- kernel object
def test_registered_and_supports():
    assert "triton" in available_kernels()
    k = _triton()
    assert k.name == "triton"
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert k.supports(torch.device("cuda"), dtype)
        assert k.supports(DEVICE, dtype)
    assert not k.supports(torch.device("cuda"), torch.float64)
    assert not k.supports(DEVICE, torch.int32)


@pytest.mark.skipif(_CUDA, reason="interpreter mode only")
def test_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not _triton().supports(torch.device("cpu"), torch.float32)


@pytest.mark.skipif(_CUDA, reason="interpreter mode only")
def test_kernels_follow_the_current_mode():
    """Kernels decorated before TRITON_INTERPRET was set are re-wrapped for the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    for kernel in (tb._dds_t_kernel, tb._dds_kernel, tb._sdd_t_kernel):
        assert isinstance(tb._launchable(kernel), InterpretedFunction)


def test_shape_and_dtype_errors():
    layout = _layout(16, 2, 3, 1.0)
    x, dy, wp = _operands(layout, 4, torch.float32)
    k = _triton()
    with pytest.raises(RuntimeError, match="48 columns"):
        k.dds_t(x[:, :40], wp, layout)
    with pytest.raises(RuntimeError, match="wp of shape"):
        k.dds(dy, wp[:-1], layout)
    with pytest.raises(TypeError, match="must match"):
        k.dds_t(x, wp.half(), layout)
    with pytest.raises(RuntimeError, match="batch size"):
        k.sdd_t(dy[:3], x, layout)


# ---------------------------------------------------------------------------- many batch blocks, T = 64 / 128, 16-bit
def _gpu_block_b(monkeypatch):
    """Under the interpreter, launch with the GPU table's BLOCK_B (64 or 128) instead of 16."""
    if _CUDA:
        return
    orig = tb._config

    def config(T, dtype, device, kernel=None):
        cfg = orig(T, dtype, device, kernel)
        cfg["BLOCK_B"] = tb._GPU_CONFIGS[(T, dtype == torch.float32)][0]
        return cfg

    monkeypatch.setattr(tb, "_config", config)


def _rel16(got, ref) -> float:
    """Relative error of a 16-bit result against the fp32 reference (inf when the result is
    not 16-bit or not finite)."""
    if got.dtype not in LOW or not bool(torch.isfinite(got).all()):
        return float("inf")
    return (got.float() - ref).norm().item() / max(ref.norm().item(), 1e-30)


@pytest.mark.parametrize("blocks", ["interp", "gpu"], ids=["block_b_16", "block_b_gpu"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("T", [64, 128])
@pytest.mark.parametrize("B", [130, 1000])
def test_many_batch_blocks_16bit(B, T, dtype, blocks, monkeypatch):
    """y, dX and dW through autograd (``bsmm``) with the batch over several blocks (B > BLOCK_B,
    a ragged last block), T = 64 and 128, in fp16 and bf16, against the fp32 reference from the
    same inputs; dW also with the batch split over 3 programs per tile (fp32 workspace + sum)."""
    from seq2d.sparse import bsmm

    if blocks == "gpu":
        _gpu_block_b(monkeypatch)
    elif _CUDA:
        pytest.skip("the GPU runs its own blocking")
    g = torch.Generator().manual_seed(B + T)
    layout = layout_from_tile_mask(T, torch.tensor([[1, 1], [0, 1]], dtype=torch.bool)).to(DEVICE)  # 2x2 tiles, 3 stored
    x = torch.randn(B, 2 * T, generator=g).to(DEVICE, dtype)
    dy = torch.randn(B, 2 * T, generator=g).to(DEVICE, dtype)
    wp = (torch.randn(layout.nnz, T, T, generator=g) / T**0.5).to(DEVICE, dtype)
    ref = get_kernel("reference")
    y_ref = ref.dds_t(x.float(), wp.float(), layout)
    dx_ref = ref.dds(dy.float(), wp.float(), layout)
    dw_ref = ref.sdd_t(dy.float(), x.float(), layout)

    xl, wl = x.clone().requires_grad_(), wp.clone().requires_grad_()
    y = bsmm(xl, wl, layout, _triton())
    y.backward(dy)
    assert _rel16(y, y_ref) <= 1e-2, ("y", _rel16(y, y_ref))
    assert _rel16(xl.grad, dx_ref) <= 1e-2, ("dX", _rel16(xl.grad, dx_ref))
    assert _rel16(wl.grad, dw_ref) <= 1e-2, ("dW", _rel16(wl.grad, dw_ref))
    for splits in (1, 3):
        out = torch.full((layout.nnz, T, T), float("nan"), device=DEVICE, dtype=dtype)
        tb.sdd_t(dy, x, layout, out, splits=splits)
        assert _rel16(out, dw_ref) <= 1e-2, (f"dW, {splits} splits", _rel16(out, dw_ref))


def test_per_kernel_configs_win_and_stay_correct(monkeypatch):
    """``_GPU_KERNEL_CONFIGS`` (what benchmarks/gpu/triton_configs.py sets while it sweeps, and
    where measured winners go) overrides the blocking of one kernel only; the results still equal
    the reference."""
    T, B = 16, 70
    monkeypatch.setitem(tb._GPU_KERNEL_CONFIGS, ("dds_t", T, False), (32, 4, 2))
    monkeypatch.setitem(tb._GPU_KERNEL_CONFIGS, ("sdd_t", T, False), (64, 8, 3))
    dev = DEVICE
    assert tb._config(T, torch.float16, dev, "dds_t")["BLOCK_B"] == 32
    assert tb._config(T, torch.float16, dev, "sdd_t")["num_warps"] == 8
    assert tb._config(T, torch.float16, dev, "dds") == tb._config(T, torch.float16, dev)  # untouched
    assert tb._config(T, torch.float32, dev, "dds_t") == tb._config(T, torch.float32, dev)  # other dtype group
    g = torch.Generator().manual_seed(5)
    layout = layout_from_tile_mask(T, torch.tensor([[1, 0, 1], [1, 1, 0]], dtype=torch.bool)).to(dev)
    x = torch.randn(B, 3 * T, generator=g).to(dev, torch.float16)
    dy = torch.randn(B, 2 * T, generator=g).to(dev, torch.float16)
    wp = (torch.randn(layout.nnz, T, T, generator=g) / T**0.5).to(dev, torch.float16)
    ref = get_kernel("reference")
    k = _triton()
    for got, want in ((k.dds_t(x, wp, layout), ref.dds_t(x.float(), wp.float(), layout)),
                      (k.sdd_t(dy, x, layout), ref.sdd_t(dy.float(), x.float(), layout))):
        assert (got.float() - want).norm() / want.norm() < 2e-3
