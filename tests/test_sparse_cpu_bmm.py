"""The ``cpu_bmm`` kernel (one batched GEMM per op over padded chunks of tile-rows /
tile-columns) against the masked-dense ``reference`` kernel: outputs, dX and dW over tiles,
densities, dtypes, odd batches, forced chunk sizes (padding), empty rows/columns, tied
tiles, and gradcheck through ``bsmm``. No timings here (benchmarks/blocksparse.py)."""


import pytest
import torch

from seq2d.sparse import BlockSparseLayout, bsmm, get_kernel, layout_from_tile_mask
from seq2d.sparse.kernels.cpu import CPUKernel, _bmm_plan, _chunk_size, _chunks

TOL = {torch.float32: 2e-4, torch.float64: 1e-10}
REF = get_kernel("reference")


def rand_layout(tile, Mt, Kt, density, seed=0):
    g = torch.Generator().manual_seed(seed)
    L = layout_from_tile_mask(tile, torch.rand(Mt, Kt, generator=g) < density)
    if L.nnz == 0:  # a 1 % draw on a small grid can be empty: keep one tile
        L = BlockSparseLayout(tile, (Mt, Kt), [Mt - 1], [0])
    return L


def check_ops(kernel, L, B, dtype, seed=0):
    """dds_t, dds, sdd_t and the fused backward of ``kernel`` against the reference."""
    g = torch.Generator().manual_seed(seed)
    T = L.tile
    wp = torch.randn(L.nnz, T, T, generator=g, dtype=dtype)
    x = torch.randn(B, L.Kt * T, generator=g, dtype=dtype)
    dy = torch.randn(B, L.Mt * T, generator=g, dtype=dtype)
    tol = TOL[dtype] * max(1.0, (max(L.Kt, L.Mt) * T) ** 0.5 / 4)
    y = kernel.dds_t(x, wp, L)
    torch.testing.assert_close(y, REF.dds_t(x, wp, L), rtol=tol, atol=tol)
    assert y.shape == (B, L.Mt * T) and y.is_contiguous()
    dx_ref, dw_ref = REF.dds(dy, wp, L), REF.sdd_t(dy, x, L)
    torch.testing.assert_close(kernel.dds(dy, wp, L), dx_ref, rtol=tol, atol=tol)
    torch.testing.assert_close(kernel.sdd_t(dy, x, L), dw_ref, rtol=tol, atol=tol)
    for need_dx, need_dw in ((True, True), (True, False), (False, True)):
        dx, dw = kernel.backward(dy, x, wp, L, need_dx, need_dw)
        assert (dx is None) != need_dx and (dw is None) != need_dw
        if need_dx:
            torch.testing.assert_close(dx, dx_ref, rtol=tol, atol=tol)
        if need_dw:
            assert dw.shape == (L.nnz, T, T)
            torch.testing.assert_close(dw, dw_ref, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------- registration
def test_registered_and_float_only():
    k = get_kernel("cpu_bmm")
    assert isinstance(k, CPUKernel) and k.strategy == "bmm" and k.chunk is None
    assert k.supports("cpu", torch.float32) and k.supports("cpu", torch.float64)
    assert not k.supports("cpu", torch.bfloat16) and not k.supports("cuda", torch.float32)


@pytest.mark.parametrize("kwargs", [dict(strategy="fast"), dict(strategy="runs", chunk=2), dict(strategy="bmm", chunk=0),
                                    dict(strategy="bmm", chunk=True)])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        CPUKernel(**kwargs)


# ---------------------------------------------------------------------------- against the reference
@pytest.mark.parametrize("chunk", [None, 1, 2, 3, 5, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("density", [0.05, 0.3, 0.7, 1.0])
def test_forced_chunk_sizes(chunk, dtype, density):
    """Every chunk size, so that rows and columns end in padded chunks (or do not)."""
    L = rand_layout(16, 9, 11, density, seed=7)
    check_ops(CPUKernel("bmm", "t", chunk=chunk), L, B=13, dtype=dtype)


@pytest.mark.parametrize("tile", [16, 32, 64, 128])
@pytest.mark.parametrize("density", [0.01, 0.1, 0.25, 1.0])
def test_tiles_and_densities_ops(tile, density):
    Mt = Kt = 512 // tile
    check_ops(get_kernel("cpu_bmm"), rand_layout(tile, Mt, Kt, density, seed=tile), B=17, dtype=torch.float32)


@pytest.mark.parametrize("chunk", [None, 1, 2, 4])
def test_empty_rows_and_columns(chunk):
    L = BlockSparseLayout(16, (5, 6), row=[1, 1, 1, 3, 3], col=[0, 2, 5, 2, 3])  # rows 0, 2, 4 and columns 1, 4 empty
    k = CPUKernel("bmm", "t", chunk=chunk)
    check_ops(k, L, B=3, dtype=torch.float64)
    wp = torch.randn(L.nnz, 16, 16, dtype=torch.float64)
    y = k.dds_t(torch.randn(3, 96, dtype=torch.float64), wp, L)
    assert torch.all(y[:, 0:16] == 0) and torch.all(y[:, 32:48] == 0) and torch.all(y[:, 64:80] == 0)
    dx = k.dds(torch.randn(3, 80, dtype=torch.float64), wp, L)
    assert torch.all(dx[:, 16:32] == 0) and torch.all(dx[:, 64:80] == 0)


def test_no_stored_tiles():
    L = BlockSparseLayout(16, (2, 3), row=[], col=[])
    k = get_kernel("cpu_bmm")
    x, dy, wp = torch.randn(4, 48), torch.randn(4, 32), torch.randn(0, 16, 16)
    assert torch.equal(k.dds_t(x, wp, L), torch.zeros(4, 32))  # exact: no tile, nothing summed
    assert torch.equal(k.dds(dy, wp, L), torch.zeros(4, 48))
    assert k.sdd_t(dy, x, L).shape == (0, 16, 16)


def test_one_chunk_per_row_and_full_layout():
    """Diagonal (every row one tile) and full (no padding: the weights are used without a gather)."""
    for L in (BlockSparseLayout(32, (4, 4), row=[0, 1, 2, 3], col=[3, 2, 1, 0]),
              layout_from_tile_mask(32, torch.ones(3, 4, dtype=torch.bool))):
        for chunk in (None, 1, 2, 4):
            check_ops(CPUKernel("bmm", "t", chunk=chunk), L, B=5, dtype=torch.float64)


def test_padding_ignores_non_finite_inputs_elsewhere():
    """Pad slots are zeroed after the gather: an inf in a column a row does not use stays out of that row."""
    L = BlockSparseLayout(16, (2, 3), row=[0, 0, 0, 1], col=[0, 1, 2, 0])
    k = CPUKernel("bmm", "t", chunk=2)  # row 0 gets chunks [0, 1] [2, pad], row 1 [0, pad]
    x = torch.randn(2, 48, dtype=torch.float64)
    x[:, 40] = float("inf")  # tile-column 2, used by row 0 only
    wp = torch.randn(4, 16, 16, dtype=torch.float64)
    y = k.dds_t(x, wp, L)
    assert torch.isfinite(y[:, 16:]).all()
    torch.testing.assert_close(y[:, 16:], x[:, :16] @ wp[3])


def test_tied_tiles_through_bsmm():
    """Tied positions: the per-position tiles are data.index_select(0, data_index); grads add up."""
    L = BlockSparseLayout(16, (3, 3), row=[0, 0, 1, 2, 2], col=[0, 2, 1, 0, 1], data_index=[0, 1, 0, 1, 0])
    data = torch.randn(L.n_data, 16, 16, dtype=torch.float64, requires_grad=True)
    data_ref = data.detach().clone().requires_grad_(True)
    x = torch.randn(6, 48, dtype=torch.float64)
    y = bsmm(x, data.index_select(0, L.data_index), L, "cpu_bmm")
    y_ref = bsmm(x, data_ref.index_select(0, L.data_index), L, "reference")
    torch.testing.assert_close(y, y_ref)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    torch.testing.assert_close(data.grad, data_ref.grad)


def test_leading_batch_dims_and_non_contiguous_input():
    L = rand_layout(16, 3, 4, 0.5, seed=1)
    wp = torch.randn(L.nnz, 16, 16, dtype=torch.float64)
    x = torch.randn(64, 5, 2, dtype=torch.float64).permute(1, 2, 0)  # (5, 2, 64), not contiguous
    y = bsmm(x, wp, L, "cpu_bmm")
    torch.testing.assert_close(y, bsmm(x.contiguous(), wp, L, "reference"))
    assert y.shape == (5, 2, 48)


@pytest.mark.parametrize("chunk", [None, 2])
def test_gradcheck_float64(chunk):
    L = rand_layout(16, 3, 4, 0.5, seed=3)
    k = get_kernel("cpu_bmm") if chunk is None else CPUKernel("bmm", "t", chunk=chunk)
    wp = torch.randn(L.nnz, 16, 16, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, 64, dtype=torch.float64, requires_grad=True)
    if chunk is None:
        assert torch.autograd.gradcheck(lambda x, w: bsmm(x, w, L, kernel="cpu_bmm"), (x, wp))
    else:
        assert torch.autograd.gradcheck(lambda x, w: bsmm(x, w, L, kernel=k), (x, wp))


def test_needs_input_grad_is_honoured():
    L = rand_layout(16, 3, 3, 0.5)
    wp = torch.randn(L.nnz, 16, 16, requires_grad=True)
    bsmm(torch.randn(4, 48), wp, L, "cpu_bmm").sum().backward()
    assert wp.grad is not None


# ---------------------------------------------------------------------------- plans
def test_chunks_cover_every_entry_once():
    ptr = torch.tensor([0, 3, 3, 4, 9])  # segment lengths 3, 0, 1, 5
    c = _chunks(ptr, 2)
    assert c["C"] == 2 + 0 + 1 + 3 and c["m"].tolist() == [2, 0, 1, 3]
    assert c["seg"].tolist() == [0, 0, 2, 3, 3, 3]
    assert c["slots"][c["real"]].tolist() == list(range(9))
    assert c["npad"] == 12 - 9 and not c["one_per_seg"]
    assert c["slots"][c["pad"]].tolist() == [0, 3, 4]  # a pad repeats its segment's first entry


def test_plan_is_cached_on_the_layout():
    L = rand_layout(32, 6, 6, 0.4)
    p = _bmm_plan(L)
    assert _bmm_plan(L) is p and _bmm_plan(L, 2) is not p
    assert p["rows"]["slots"].numel() == p["rows"]["C"] * p["rows"]["k0"]


def test_chunk_size_model():
    assert _chunk_size(torch.full((8,), 8), 64) == 8  # full rows of 8 tiles: one chunk each
    assert _chunk_size(torch.tensor([1, 1, 1, 1]), 16) == 1
    assert _chunk_size(torch.zeros(3, dtype=torch.long), 64) == 1
    assert 1 <= _chunk_size(torch.randint(0, 40, (64,)), 128) <= 4  # k0 * T <= 512


# ---------------------------------------------------------------------------- scratch buffers
def test_results_do_not_alias_the_scratch_buffers(monkeypatch):
    """Big temporaries are reused between calls; what an op returns must not be one of them."""
    import seq2d.sparse.kernels.cpu as cpu

    monkeypatch.setattr(cpu, "SCRATCH_MIN_BYTES", 0)  # every temporary from the scratch buffers
    k = get_kernel("cpu_bmm")
    for L in (rand_layout(16, 1, 3, 1.0), rand_layout(16, 4, 1, 1.0), rand_layout(16, 5, 6, 0.4, seed=2)):
        wp = torch.randn(L.nnz, 16, 16, dtype=torch.float64)
        x1, x2 = torch.randn(3, L.Kt * 16, dtype=torch.float64), torch.randn(3, L.Kt * 16, dtype=torch.float64)
        dy1, dy2 = torch.randn(3, L.Mt * 16, dtype=torch.float64), torch.randn(3, L.Mt * 16, dtype=torch.float64)
        y1, dx1, dw1 = k.dds_t(x1, wp, L), k.dds(dy1, wp, L), k.sdd_t(dy1, x1, L)
        k.dds_t(x2, wp, L), k.dds(dy2, wp, L), k.sdd_t(dy2, x2, L)  # would overwrite aliases of scratch
        torch.testing.assert_close(y1, REF.dds_t(x1, wp, L))
        torch.testing.assert_close(dx1, REF.dds(dy1, wp, L))
        torch.testing.assert_close(dw1, REF.sdd_t(dy1, x1, L))
    cpu.release_scratch()


def test_threads_use_their_own_scratch(monkeypatch):
    import threading

    import seq2d.sparse.kernels.cpu as cpu

    monkeypatch.setattr(cpu, "SCRATCH_MIN_BYTES", 0)
    L = rand_layout(32, 6, 6, 0.4, seed=5)
    wp = torch.randn(L.nnz, 32, 32, dtype=torch.float64)
    xs = [torch.randn(7 + i, 192, dtype=torch.float64) for i in range(4)]
    want = [REF.dds_t(x, wp, L) for x in xs]
    errors = []

    def work(i):
        for _ in range(20):
            if not torch.allclose(get_kernel("cpu_bmm").dds_t(xs[i], wp, L), want[i]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_an_unregistered_kernel_object_runs_through_the_custom_op():
    """A CPUKernel built with its own settings (not the registry's object) is reached by the
    custom ops seq2d::bsmm / bsmm_backward through its own key, not mistaken for another kernel."""
    L = rand_layout(16, 3, 4, 0.5, seed=5)
    wp = torch.randn(L.nnz, 16, 16, dtype=torch.float64, requires_grad=True)
    x = torch.randn(5, 64, dtype=torch.float64, requires_grad=True)
    k = CPUKernel("bmm", "t", chunk=2)
    y = bsmm(x, wp, L, kernel=k)
    ref = bsmm(x, wp, L, kernel="reference")
    torch.testing.assert_close(y, ref)
    g = torch.autograd.grad(y.square().sum(), (x, wp))
    gr = torch.autograd.grad(ref.square().sum(), (x, wp))
    torch.testing.assert_close(g, gr)
