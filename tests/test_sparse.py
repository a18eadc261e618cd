"""Block-sparse matrix: the layout type, every CPU-side kernel vs the masked-dense
reference (outputs and both gradients), gradcheck, the matrix inside Sequential2D for
every registered constructor, padding, element masks, tying, and memory."""

import copy
import subprocess
import sys
import textwrap

import pytest
import torch

import seq2d
from seq2d import Sequential2D
from seq2d.models.random import random_tile_matrix
from seq2d.testing import example_input
from seq2d.sparse import BlockSparseLayout, bsmm, layout_from_tile_mask

CPU_KERNELS = ["cpu", "cpu_gather", "cpu_bmm", "cpu_panels", "cpu_fmruns", "dense"]
TOL = {torch.float32: 2e-4, torch.float64: 1e-10}


def rand_layout(tile, Mt, Kt, density, seed=0):
    g = torch.Generator().manual_seed(seed)
    return layout_from_tile_mask(tile, torch.rand(Mt, Kt, generator=g) < density)


# ---------------------------------------------------------------------------- the type
def test_layout_sorts_and_builds_transpose_metadata():
    L = BlockSparseLayout(16, (3, 4), row=[2, 0, 1, 0], col=[1, 3, 1, 0])
    assert L.row.tolist() == [0, 0, 1, 2] and L.col.tolist() == [0, 3, 1, 1]
    assert L.row_ptr.tolist() == [0, 2, 3, 4]
    assert L.col_ptr.tolist() == [0, 1, 3, 3, 4]
    # t_pos groups positions by column, then row
    assert [(int(L.col[p]), int(L.row[p])) for p in L.t_pos] == [(0, 0), (1, 1), (1, 2), (3, 0)]
    assert L.nnz == 4 and abs(L.density - 4 / 12) < 1e-12 and not L.tied


def test_layout_dense_round_trip():
    L = rand_layout(16, 3, 5, 0.5)
    wp = torch.randn(L.nnz, 16, 16, dtype=torch.float64)
    W = L.to_dense(wp)
    assert W.shape == (48, 80)
    torch.testing.assert_close(L.from_dense(W), wp)
    p = 0
    r, c = int(L.row[p]), int(L.col[p])
    torch.testing.assert_close(W[r * 16:(r + 1) * 16, c * 16:(c + 1) * 16], wp[p].T)  # transposed storage


@pytest.mark.parametrize("kwargs,match", [
    (dict(tile=24, shape_tiles=(2, 2), row=[0], col=[0]), "tile must be one of"),
    (dict(tile=16, shape_tiles=(2, 2), row=[0, 0], col=[1, 1]), r"tile \(0, 1\) is stored twice"),
    (dict(tile=16, shape_tiles=(2, 2), row=[2], col=[0]), r"row: tile rows must lie in \[0, 2\)"),
    (dict(tile=16, shape_tiles=(2, 2), row=[0], col=[5]), r"col: tile columns must lie in \[0, 2\)"),
    (dict(tile=16, shape_tiles=(2, 2), row=[0], col=[0], data_index=[3], n_data=2), r"data_index: must lie in \[0, 2\)"),
    (dict(tile=16, shape_tiles=(0, 2), row=[], col=[]), "Mt must be a positive int"),
])
def test_layout_validation_names_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BlockSparseLayout(**kwargs)


# ---------------------------------------------------------------------------- kernels vs reference
@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("density", [0.01, 0.1, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("tile,Mt,Kt,B", [(16, 5, 7, 9), (32, 3, 4, 33), (64, 2, 3, 5), (128, 2, 2, 7)])
def test_kernel_matches_reference(kernel, dtype, density, tile, Mt, Kt, B):
    L = rand_layout(tile, Mt, Kt, density, seed=int(density * 100) + tile)
    if L.nnz == 0:  # a 1% draw on a small grid can be empty: keep one tile
        L = BlockSparseLayout(tile, (Mt, Kt), [Mt - 1], [0])
    wp = torch.randn(L.nnz, tile, tile, dtype=dtype, requires_grad=True)
    x = torch.randn(B, Kt * tile, dtype=dtype, requires_grad=True)
    w_dense = L.to_dense(wp.detach()).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = bsmm(x, wp, L, kernel=kernel)
    y_ref = x_ref @ w_dense.T
    tol = TOL[dtype] * max(1.0, (Kt * tile) ** 0.5 / 4)
    torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=tol, atol=tol)
    # the weight gradient is the dense gradient sampled on the stored tiles
    torch.testing.assert_close(wp.grad, L.from_dense(w_dense.grad), rtol=tol, atol=tol)


@pytest.mark.parametrize("path", ["runs", "rows", "panels", "fmruns"])
@pytest.mark.parametrize("density", [0.3, 0.5, 1.0])
def test_cpu_kernel_paths_match_reference(monkeypatch, path, density):
    """The ``cpu`` kernel computes a layout of short runs row by row over gathered tiles when
    the copies are small (ROWS_MAX_VALUES), else by feature-major panels, feature-major runs or
    batch-major runs by tile and run length (PANELS_*, FMRUNS_*): each path against the
    dense reference (float64, output and both gradients) and gradcheck, forced each way through
    the rule's constants; a full layout (one run per row) never takes the rows or panels path."""
    from seq2d.sparse.kernels import cpu, get_kernel

    monkeypatch.setattr(cpu, "ROWS_MAX_VALUES", 1 << 40 if path == "rows" else 0)
    monkeypatch.setattr(cpu, "PANELS_MAX_TILE", 16 if path == "panels" else 0)
    monkeypatch.setattr(cpu, "PANELS_SMALL_TILE", 16 if path == "panels" else 0)
    monkeypatch.setattr(cpu, "FMRUNS_MIN_TILE", 16 if path == "fmruns" else 1 << 10)
    monkeypatch.setattr(cpu, "FMRUNS_MAX_TILE", 1 << 10)
    monkeypatch.setattr(cpu, "FMRUNS_MIN_BATCH", 1)
    monkeypatch.setattr(cpu, "FMRUNS_MIN_DENSITY", 0.0)
    kernel = get_kernel("cpu")
    T, Mt, Kt, B = 16, 6, 9, 5
    L = rand_layout(T, Mt, Kt, density, seed=8)
    full = {"rows": "runs", "panels": "runs"}
    assert kernel._path(L, B) == (path if density < 1.0 else full.get(path, path))
    assert kernel._by_rows(L, B) == (path == "rows" and density < 1.0)
    wp = torch.randn(L.nnz, T, T, dtype=torch.float64, requires_grad=True)
    x = torch.randn(B, Kt * T, dtype=torch.float64, requires_grad=True)
    w_dense = L.to_dense(wp.detach()).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = bsmm(x, wp, L, kernel=kernel)
    y_ref = x_ref @ w_dense.T
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(wp.grad, L.from_dense(w_dense.grad), rtol=1e-10, atol=1e-10)
    # each op on its own (the trainer's backward fuses them; dds / sdd_t are public too)
    dy = torch.randn(B, Mt * T, dtype=torch.float64)
    torch.testing.assert_close(kernel.dds(dy, wp.detach(), L), dy @ w_dense.detach(), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(kernel.sdd_t(dy, x.detach(), L), L.from_dense(dy.T @ x.detach()), rtol=1e-10, atol=1e-10)
    small = rand_layout(T, 2, 3, density, seed=3)
    if small.nnz:
        xs = torch.randn(3, 3 * T, dtype=torch.float64, requires_grad=True)
        ws = torch.randn(small.nnz, T, T, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a, w: bsmm(a, w, small, kernel=kernel), (xs, ws))


@pytest.mark.parametrize("tile,slot,batch,path", [
    (16, 16, 256, "panels"),  # random 16-tiles (the 256-slot model of benchmarks/model_step.py)
    (16, 64, 64, "panels"),  # runs of about 4 tiles of 16
    (16, 256, 256, "runs"),  # runs of about 20 tiles of 16
    (32, 32, 256, "panels"),
    (64, 64, 256, "fmruns"),  # random 64-tiles, large copies
    (64, 64, 16, "rows"),  # random 64-tiles, small copies
    (64, 256, 256, "fmruns"),  # runs of about 5 tiles of 64, density 0.25, batch 256
    (64, 256, 64, "runs"),  # the same at batch 64
    (128, 128, 256, "runs"),  # fmruns lost to runs at tile 128
])
def test_cpu_kernel_path_rule(tile, slot, batch, path):
    """The ``cpu`` kernel's choice on the kinds of layout its rule was measured on
    (benchmarks/tile_paths.py): N = 4096, random blocks of ``slot`` features at density 0.25."""
    from seq2d.sparse.kernels import get_kernel

    n, k = 4096 // slot, slot // tile
    blocks = torch.rand(n, n, generator=torch.Generator().manual_seed(0)) < 0.25
    L = layout_from_tile_mask(tile, blocks.repeat_interleave(k, 0).repeat_interleave(k, 1))
    assert get_kernel("cpu")._path(L, batch) == path


@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_empty_rows_and_columns(kernel):
    L = BlockSparseLayout(16, (4, 4), row=[1, 1, 3], col=[0, 2, 2])  # rows 0, 2 and column 1, 3 empty
    wp = torch.randn(3, 16, 16, dtype=torch.float64)
    x = torch.randn(3, 64, dtype=torch.float64)
    y = bsmm(x, wp, L, kernel)
    torch.testing.assert_close(y, x @ L.to_dense(wp).T)
    assert torch.all(y[:, 0:16] == 0) and torch.all(y[:, 32:48] == 0)


@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_gradcheck_float64(kernel):
    L = rand_layout(16, 3, 3, 0.5, seed=3)
    wp = torch.randn(L.nnz, 16, 16, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 48, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: bsmm(x, w, L, kernel), (x, wp))


def strided_tiles(kind: str, nnz: int, T: int, dtype=torch.float64, seed=0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(leaf, wp)``: a non-contiguous ``(nnz, T, T)`` view ``wp`` of the leaf ``leaf``."""
    g = torch.Generator().manual_seed(seed)
    if kind == "transposed":  # each tile a transposed view
        leaf = torch.randn(nnz, T, T, generator=g, dtype=dtype, requires_grad=True)
        return leaf, leaf.transpose(1, 2)
    if kind == "permuted":  # the tile index innermost
        leaf = torch.randn(T, T, nnz, generator=g, dtype=dtype, requires_grad=True)
        return leaf, leaf.permute(2, 0, 1)
    leaf = torch.randn(2 * nnz, T, 2 * T, generator=g, dtype=dtype, requires_grad=True)  # "sliced": steps
    return leaf, leaf[::2, :, ::2]


@pytest.mark.parametrize("kernel", CPU_KERNELS + ["reference"])
@pytest.mark.parametrize("kind", ["transposed", "permuted", "sliced"])
@pytest.mark.parametrize("density", [0.5, 1.0])
def test_non_contiguous_tiles_match_the_reference(kernel, kind, density):
    """Tiles given as any strided view: the output and both gradients equal the reference's on
    a contiguous copy, and the tile gradient reaches the tensor the view was taken from."""
    L = rand_layout(16, 3, 4, density, seed=5)
    leaf, wp = strided_tiles(kind, L.nnz, 16)
    assert not wp.is_contiguous()
    x = torch.randn(2, 5, 64, dtype=torch.float64, requires_grad=True)
    y = bsmm(x, wp, L, kernel)
    w_ref = wp.detach().clone().requires_grad_(True)  # contiguous
    x_ref = x.detach().clone().requires_grad_(True)
    y_ref = bsmm(x_ref, w_ref, L, "reference")
    tol = dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y, y_ref, **tol)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    torch.testing.assert_close(x.grad, x_ref.grad, **tol)
    assert leaf.grad is not None and leaf.grad.shape == leaf.shape
    grad_view = {"transposed": lambda t: t.transpose(1, 2), "permuted": lambda t: t.permute(2, 0, 1),
                 "sliced": lambda t: t[::2, :, ::2]}[kind](leaf.grad)
    torch.testing.assert_close(grad_view, w_ref.grad, **tol)
    if kind == "sliced":  # the entries the view skips get no gradient
        rest = leaf.grad.clone()
        rest[::2, :, ::2] = 0
        assert not rest.any()


def test_needs_input_grad_is_honoured():
    L = rand_layout(16, 3, 3, 0.5)
    wp = torch.randn(L.nnz, 16, 16, requires_grad=True)
    x = torch.randn(4, 48)  # no grad
    bsmm(x, wp, L, "cpu").sum().backward()
    assert wp.grad is not None and x.grad is None


def test_bsmm_shape_errors():
    L = rand_layout(16, 2, 2, 1.0)
    with pytest.raises(RuntimeError, match=r"last dimension 32 \(Kt \* T\)"):
        bsmm(torch.randn(2, 30), torch.randn(L.nnz, 16, 16), L)
    with pytest.raises(ValueError, match="Unknown block-sparse kernel 'fast'"):
        bsmm(torch.randn(2, 32), torch.randn(L.nnz, 16, 16), L, "fast")


# ---------------------------------------------------------------------------- the matrix in Sequential2D
SMALL = {
    "mlp": dict(sizes=(37, 20, 33, 10)),
    "rnn": dict(input_size=5, hidden_size=18, num_layers=2),
    "truncated_rnn": dict(input_size=5, hidden_size=18, num_layers=2, k=3),
    "from_mask": dict(sizes=(21, 17, 19, 5)),
    "transformer_layer": dict(d_model=8, nhead=2, dim_feedforward=24),
    "transformer_encoder": dict(d_model=8, nhead=2, dim_feedforward=24, num_layers=2),
}


def _grads_as_tiles(dense_model, matrix):
    """The dense model's LinearBlock gradients packed into the matrix's tile order."""
    blocks = {}
    for i, j, kind, blk in dense_model.positions():
        if kind == "linear":
            blocks.setdefault(id(blk), blk)
    fake = []
    for blk in blocks.values():
        f = copy.deepcopy(blk)
        with torch.no_grad():
            f.weight.copy_(blk.grad if blk.grad is not None else torch.zeros_like(blk.weight))
        fake.append(f)
    eng = copy.deepcopy(matrix)
    eng.load_blocks(fake)
    return eng.data.detach()


@pytest.mark.parametrize("kernel", CPU_KERNELS + ["reference"])
@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("tile", [16, 32])
def test_registered_models_equal_with_every_kernel(name, kernel, tile):
    torch.manual_seed(0)
    dense = seq2d.create_model(name, **SMALL[name], dtype=torch.float64)
    sparse = copy.deepcopy(dense)
    core = sparse if isinstance(sparse, Sequential2D) else sparse.core
    core.to_blocksparse(tile, kernel=kernel)
    assert core.matrix is not None
    assert sparse.num_parameters() == dense.num_parameters()
    x = example_input(dense, dtype=torch.float64)
    xs = x[0].detach().clone().requires_grad_(True)
    xd = x[0].detach().clone().requires_grad_(True)
    yd, ys = dense(xd), sparse(xs)
    yd, ys = (yd[0], ys[0]) if isinstance(yd, tuple) else (yd, ys)
    torch.testing.assert_close(ys, yd, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(yd)
    yd.backward(g)
    ys.backward(g)
    torch.testing.assert_close(xs.grad, xd.grad, rtol=1e-10, atol=1e-10)
    dcore = dense if isinstance(dense, Sequential2D) else dense.core
    torch.testing.assert_close(core.matrix.data.grad, _grads_as_tiles(dcore, core.matrix), rtol=1e-10, atol=1e-10)


def test_padding_and_element_masks_are_not_trainable():
    torch.manual_seed(0)
    mask = torch.rand(60, 60) < 0.3
    mask[:13] = False
    m = seq2d.from_mask([13, 22, 25], mask, dtype=torch.float64, steps=2)
    n = m.num_parameters()
    m.to_blocksparse(16, kernel="cpu")
    assert m.num_parameters() == n
    eng = m.matrix
    assert eng.tmask is not None
    m(torch.randn(4, 13, dtype=torch.float64)).pow(2).sum().backward()
    assert torch.all(eng.data.grad[~eng.tmask] == 0)
    assert torch.all(eng.data[~eng.tmask] == 0)


def test_tied_blocks_share_tiles():
    tr = seq2d.create_model("truncated_rnn", input_size=16, hidden_size=16, k=4, dtype=torch.float64)
    n = tr.num_parameters()
    tr.core.to_blocksparse(16, kernel="cpu")
    L = tr.core.matrix._layout
    assert L.tied and L.n_data < L.nnz  # W_ih at 4 positions, W_hh at 3, stored once each
    assert L.n_data == 2  # one 16x16 tile each
    assert tr.num_parameters() == n


def test_matrix_state_is_proportional_to_stored_tiles():
    eng = random_tile_matrix([256] * 8, 32, 0.05, generator=torch.Generator().manual_seed(0))
    m = Sequential2D(eng.sizes, {(i, j): seq2d.stores.TiledBlock(eng, g) for i, j, g in eng.placements},
                     bias=True, activations="tanh", inputs=[0], steps=3)
    P = eng.nnz_tiles
    assert eng.data.numel() == P * 32 * 32
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    m(torch.randn(4, 256)).sum().backward()
    opt.step()
    state = opt.state[eng.data]
    assert state["exp_avg"].numel() == state["exp_avg_sq"].numel() == P * 32 * 32
    assert m.num_parameters() == P * 32 * 32 + 7 * 256


def test_state_errors_for_mixed_matrices():
    eng = random_tile_matrix([32, 32], 16, 0.5, generator=torch.Generator().manual_seed(0))
    views = {(i, j): seq2d.stores.TiledBlock(eng, g) for i, j, g in eng.placements}
    views[(1, 1) if (1, 0) in views else (1, 0)] = seq2d.LinearBlock(32, 32)
    with pytest.raises(ValueError, match="live in one store.*dense store.*tiled store"):
        Sequential2D([32, 32], views)
    m = seq2d.mlp([8, 4])
    m.to_blocksparse(16)
    with pytest.raises(ValueError, match="already block-sparse"):
        m.to_blocksparse(16)


def test_huge_sparse_state_never_allocates_n_by_n():
    """N = 65,536 at tile density 0.001: forward + backward in a fresh process whose peak
    resident memory stays far below one N x N float32 matrix (16 GiB)."""
    code = textwrap.dedent("""
        import resource, torch, seq2d
        from seq2d.models.random import random_tile_matrix
        from seq2d.stores import TiledBlock
        torch.set_num_threads(2)
        sizes = [4096] * 16
        eng = random_tile_matrix(sizes, 64, 0.001, generator=torch.Generator().manual_seed(0), kernel="cpu")
        m = seq2d.Sequential2D(sizes, {(i, j): TiledBlock(eng, g) for i, j, g in eng.placements},
                               bias=True, activations="tanh", inputs=[0], steps=2)
        x = torch.randn(8, 4096)
        out = m([x] + [None] * 15)
        loss = sum(t.sum() for t in out[1:])
        loss.backward()
        assert eng.data.grad is not None and eng.data.grad.abs().sum() > 0
        print(sum(sizes), eng.nnz_tiles, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    N, tiles, peak_mib = map(int, res.stdout.split())
    assert N == 65536 and tiles == round(0.001 * 1024 * 1024 * 15 / 16)
    assert peak_mib < 2048, f"peak RSS {peak_mib} MiB"
