"""The Triton kernels as the ops ``seq2d::triton_bsmm`` / ``seq2d::triton_bsmm_backward``
(``torch.library.triton_op``, issue 35 item 2): ``torch.library.opcheck``, fake and meta calls,
and ``torch.compile(fullgraph=True)`` tracing into them, for ``kernel="triton"`` and
``"triton_v2"``.

Without a GPU the kernels run through Triton's interpreter on CPU tensors. A trace records each
launch as a ``triton_kernel_wrapper`` node (``torch.library.wrap_triton``) holding a kernel that
launches through the interpreter too (``triton_v1._InterpretedJIT``), so every one of
opcheck's default checks runs here, ``test_aot_dispatch_dynamic`` included: it executes the
traced graphs and compares them with the eager op. The GPU's own launch path (the ``@triton.jit``
kernels recorded as they are, v2's autotuner) is traced here on fake tensors with the interpreter
off, and v1's ops on the meta device (v2 needs its layout's values: a meta layout is refused).
Three things need a GPU (tests/test_cuda.py, ``-k tritonop``): inductor's code generation for the
recorded kernels (on the CPU it stops at "triton not built with the 'cpu' backend"), CUDA-graph
capture of the compiled step, and triton's mutation analysis of the launches (it needs a driver;
without one torch assumes every tensor argument is written, logs a warning and clones them all,
which costs copies but not correctness).
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
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

    from seq2d.errors import InvalidInput  # noqa: E402
    from seq2d.sparse import bsmm  # noqa: E402
    from seq2d.sparse.kernels import get_kernel  # noqa: E402
    from seq2d.sparse.kernels import triton_v1 as v1  # noqa: E402
    from seq2d.sparse.kernels import triton_v2 as v2  # noqa: E402
    from seq2d.sparse.layout import layout_from_tile_mask  # noqa: E402
finally:
    if _PREV is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = _PREV

DEVICE = torch.device("cuda" if _CUDA else "cpu")
KERNELS = ("triton", "triton_v2")
NEEDS = ((True, True), (True, False), (False, True))


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


@pytest.fixture
def graph_launches(monkeypatch):
    """The names of the kernels launched from traced graphs (under the interpreter)."""
    names = []
    run = v1._InterpretedJIT.run

    def counted(self, *args, **kwargs):
        names.append(self.fn.__name__)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(v1._InterpretedJIT, "run", counted)
    return names


def _problem(dtype, seed=0, tile=16, shape=(3, 4), B=5, device=DEVICE):
    """A layout with an empty tile-row and tile-column, and operands."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) < 0.7
    mask[0] = False
    mask[:, 1] = False
    mask[1, 0] = mask[2, 2] = True
    L = layout_from_tile_mask(tile, mask)
    T = tile
    x = torch.randn(B, L.Kt * T, generator=g).to(device, dtype)
    dy = torch.randn(B, L.Mt * T, generator=g).to(device, dtype)
    wp = (torch.randn(L.nnz, T, T, generator=g) / T**0.5).to(device, dtype)
    return L.to(device), x, dy, wp


def _reference(x, wp, L):
    """``x @ W.T`` and its gradients in float64 from the same (rounded) inputs."""
    x64 = x.detach().double().cpu().requires_grad_()
    w64 = wp.detach().double().cpu().requires_grad_()
    y = x64 @ L.to("cpu").to_dense(w64).T
    return y, x64, w64


def _tol(dtype):
    return dict(rtol=2e-3, atol=2e-3) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- opcheck
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_triton_ops_pass_opcheck(kernel, dtype, graph_launches):
    """Every default check of ``opcheck`` (schema, autograd registration, fake tensors, the
    AOTAutograd trace run against the eager op with dynamic shapes) on both ops; fp16 runs v2's
    own kernels for ``triton_v2``, fp32 v1's."""
    L, x, dy, wp = _problem(dtype)
    x.requires_grad_()
    wp.requires_grad_()
    torch.library.opcheck(torch.ops.seq2d.triton_bsmm, (x, wp, L.handle, kernel))
    for need in NEEDS:
        torch.library.opcheck(torch.ops.seq2d.triton_bsmm_backward,
                              (dy, x.detach(), wp.detach(), L.handle, kernel, *need))
    if not _CUDA:  # the traced graphs ran their own kernel nodes, the right ones
        own = {"dds_t": "_dds_t_kernel", "dds": "_dds_kernel", "sdd_t": "_sdd_t_kernel"}
        if kernel == "triton_v2" and dtype == torch.float16:
            own = {"dds_t": "_gather_gemm_kernel", "dds": "_gather_gemm_kernel", "sdd_t": "_sdd_grouped_kernel"}
        assert set(graph_launches) == set(own.values()), graph_launches


# ---------------------------------------------------------------------------- the op against the reference
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_bsmm_runs_the_triton_op_and_matches_the_reference(kernel, dtype):
    L, x, dy, wp = _problem(dtype, seed=1, B=7)
    x.requires_grad_()
    wp.requires_grad_()
    y = bsmm(x, wp, L, kernel)
    assert "seq2d_triton_bsmm" in type(y.grad_fn).__name__  # the op's autograd, not BlockSparseMatmul
    dx, dw = torch.autograd.grad(y, (x, wp), dy)
    ref, x64, w64 = _reference(x, wp, L)
    dx_ref, dw_ref = torch.autograd.grad(ref, (x64, w64), dy.double().cpu())
    tol = _tol(dtype)
    torch.testing.assert_close(y.double().cpu(), ref, **tol)
    torch.testing.assert_close(dx.double().cpu(), dx_ref, **tol)
    torch.testing.assert_close(dw.double().cpu(), dw_ref, **tol)


# ---------------------------------------------------------------------------- fake and meta calls
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_cold_fake_call_matches_the_real_one_and_leaves_no_fake_in_the_caches(kernel):
    """Under FakeTensorMode with a layout no kernel has seen: the outputs' shapes, dtypes and
    strides are the real call's, and a real call afterwards still matches the reference (v2's
    per-layout metadata is built from the real index tensors even inside the fake mode)."""
    L, x, dy, wp = _problem(torch.float16, seed=2)
    assert L not in v2._META
    with FakeTensorMode() as mode:
        fx, fdy, fwp = (mode.from_tensor(t) for t in (x, dy, wp))
        fy = torch.ops.seq2d.triton_bsmm(fx, fwp, L.handle, kernel)
        fdx, fdw = torch.ops.seq2d.triton_bsmm_backward(fdy, fx, fwp, L.handle, kernel, True, True)
    if kernel == "triton_v2":
        assert not any(isinstance(t, FakeTensor) for t in vars(v2._META[L]).values())
    y = torch.ops.seq2d.triton_bsmm(x, wp, L.handle, kernel)
    dx, dw = torch.ops.seq2d.triton_bsmm_backward(dy, x, wp, L.handle, kernel, True, True)
    for fake, real in ((fy, y), (fdx, dx), (fdw, dw)):
        assert isinstance(fake, FakeTensor)
        assert (fake.shape, fake.dtype, fake.stride()) == (real.shape, real.dtype, real.stride())
    ref, _, _ = _reference(x, wp, L)
    torch.testing.assert_close(y.double().cpu(), ref, **_tol(torch.float16))


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_gpu_launch_path_traces_on_fake_tensors(kernel, monkeypatch):
    """With the interpreter off (the GPU's launch path: ``@triton.jit`` kernels recorded as they
    are, v2's through its autotuner) both ops run on fake CPU tensors and give the real shapes;
    nothing launches (no GPU here)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(v2, "_TUNERS", {})
    L, x, dy, wp = _problem(torch.float16, seed=6, device="cpu")
    with FakeTensorMode() as mode:
        fx, fdy, fwp = (mode.from_tensor(t) for t in (x, dy, wp))
        fy = torch.ops.seq2d.triton_bsmm(fx, fwp, L.handle, kernel)
        fdx, fdw = torch.ops.seq2d.triton_bsmm_backward(fdy, fx, fwp, L.handle, kernel, True, True)
    assert (fy.shape, fdx.shape, fdw.shape) == (dy.shape, x.shape, wp.shape)
    if kernel == "triton_v2":
        assert set(v2._TUNERS) == {("gather", 16), ("sdd", 16)}


def test_v1_ops_on_the_meta_device():
    """kernel 'triton' on meta tensors and a meta layout: shapes through forward and backward, and
    opcheck's checks (nothing runs: each launch is a node whose meta implementation does nothing)."""
    L, _, _, _ = _problem(torch.bfloat16, tile=32, device="cpu")
    Lm = L.to("meta")
    x = torch.empty(9, L.Kt * 32, dtype=torch.bfloat16, device="meta", requires_grad=True)
    wp = torch.empty(L.nnz, 32, 32, dtype=torch.bfloat16, device="meta", requires_grad=True)
    y = bsmm(x, wp, Lm, get_kernel("triton"))
    assert (y.shape, y.device) == ((9, L.Mt * 32), torch.device("meta"))
    dx, dw = torch.autograd.grad(y.sum(), (x, wp))
    assert (dx.shape, dw.shape) == (x.shape, wp.shape)
    torch.library.opcheck(torch.ops.seq2d.triton_bsmm, (x, wp, Lm.handle, "triton"))


def test_v2_on_a_meta_layout_says_why_not():
    L, _, _, _ = _problem(torch.float16, device="cpu")
    Lm = L.to("meta")
    x = torch.empty(5, L.Kt * 16, dtype=torch.float16, device="meta")
    wp = torch.empty(L.nnz, 16, 16, dtype=torch.float16, device="meta")
    with pytest.raises(InvalidInput, match="meta device has none: trace with fake tensors"):
        torch.ops.seq2d.triton_bsmm(x, wp, Lm.handle, "triton_v2")


# ---------------------------------------------------------------------------- torch.compile
def _aot_graphs(graphs):
    """A torch.compile backend that keeps AOTAutograd's forward and backward graphs and runs
    them as they are (what ``aot_eager`` does)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=keep, bw_compiler=keep)


@pytest.mark.parametrize("kernel", KERNELS)
def test_compile_traces_into_the_kernels_in_one_graph(kernel, graph_launches):
    """Dynamo: one graph, no break, cold. AOTAutograd: the op is decomposed into its kernel
    launches (``triton_kernel_wrapper_functional`` nodes, no opaque ``seq2d.triton_bsmm``), and
    the compiled forward and gradients equal the eager ones (the same kernels, here run from
    the graphs) and the float64 reference."""
    L, x, dy, wp = _problem(torch.float16, seed=3, B=6)
    k = get_kernel(kernel)

    def f(x, wp):
        return bsmm(x, wp, L, k)

    torch._dynamo.reset()
    e = torch._dynamo.explain(f)(x, wp)
    assert (e.graph_count, e.graph_break_count) == (1, 0), [r.reason for r in e.break_reasons]
    torch._dynamo.reset()
    graphs = []
    cf = torch.compile(f, fullgraph=True, backend=_aot_graphs(graphs))
    xs, ws = x.clone().requires_grad_(), wp.clone().requires_grad_()
    y = cf(xs, ws)
    dx, dw = torch.autograd.grad(y, (xs, ws), dy)
    assert len(graphs) == 2  # forward, backward
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert sum("triton_kernel_wrapper_functional" in t for t in targets) == 3, targets  # y; dX, dW
    assert not any("seq2d" in t for t in targets), targets
    if not _CUDA:
        assert len(graph_launches) == 3
    xe, we = x.clone().requires_grad_(), wp.clone().requires_grad_()
    ye = f(xe, we)
    dxe, dwe = torch.autograd.grad(ye, (xe, we), dy)
    for a, b in ((y, ye), (dx, dxe), (dw, dwe)):  # one path against itself
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    ref, x64, w64 = _reference(x, wp, L)
    torch.testing.assert_close(y.double().cpu(), ref, **_tol(torch.float16))
    torch._dynamo.reset()


def test_a_traced_dw_split_allocates_its_own_counters(monkeypatch, graph_launches):
    """v2's dW with a batch split (the GPU's path, forced to 3 splits here) compiled cold: the
    graph allocates its zeroed group counters itself (a CUDA graph then owns them), the eager
    cache never holds a stand-in, and dW equals the eager one after."""
    monkeypatch.setattr(v2, "n_splits", lambda B, n_groups, T, device: 3)
    monkeypatch.setattr(v2, "_COUNTERS", {})
    L, x, dy, wp = _problem(torch.float16, seed=4, B=40)
    k = get_kernel("triton_v2")

    def f(x, wp):
        return bsmm(x, wp, L, k)

    torch._dynamo.reset()
    graphs = []
    cf = torch.compile(f, fullgraph=True, backend=_aot_graphs(graphs))
    xs, ws = x.clone().requires_grad_(), wp.clone().requires_grad_()
    dw = torch.autograd.grad(cf(xs, ws), ws, dy)[0]
    assert not any(isinstance(t, FakeTensor) for t in v2._COUNTERS.values())
    sdd = [n for n in graphs[1].graph.nodes if "triton_kernel_wrapper_functional" in str(n.target)
           and n.kwargs["kwargs"].get("SPLIT")]
    assert len(sdd) == 1
    made = sdd[0].kwargs["kwargs"]["count_ptr"]
    assert made.op == "call_function" and "lift_fresh" not in str(made.target), made.format_node()  # not a constant
    if not _CUDA:
        assert "_sdd_grouped_kernel" in graph_launches
    we = wp.clone().requires_grad_()
    dw_eager = torch.autograd.grad(f(x, we), we, dy)[0]
    torch.testing.assert_close(dw, dw_eager, rtol=0, atol=0)  # one path against itself
    torch._dynamo.reset()


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_tile_sparse_model_compiles_to_one_graph_through_the_triton_ops(kernel):
    """A ``random_tiles`` model on the Triton kernel (fp16), compiled cold: one graph, no break
    (tests/test_compile.py does this for the CPU kernels), its products recorded as kernel
    launches, and the compiled loss and gradients equal the eager ones."""
    import seq2d

    torch.manual_seed(5)
    m = seq2d.create_model("random_tiles", sizes=[40, 36, 10], density=0.5, tile=16, kernel=kernel,
                           dtype=torch.float16).to(DEVICE)
    x = torch.randn(5, 40, dtype=torch.float16, device=DEVICE)

    def f(x):
        return m(x).float().square().mean()

    torch._dynamo.reset()
    e = torch._dynamo.explain(f)(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), [r.reason for r in e.break_reasons]
    torch._dynamo.reset()
    graphs = []
    cf = torch.compile(f, fullgraph=True, backend=_aot_graphs(graphs))

    def run(fn):
        m.zero_grad(set_to_none=True)
        loss = fn(x)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]

    loss, grads = run(cf)
    assert any("triton_kernel_wrapper_functional" in str(n.target) for n in graphs[0].graph.nodes)
    loss_ref, grads_ref = run(f)
    assert len(grads) == len(grads_ref) == sum(1 for p in m.parameters() if p.requires_grad)
    torch.testing.assert_close(loss, loss_ref, rtol=0, atol=0)  # the same kernels: one path against itself
    torch.testing.assert_close(grads, grads_ref, rtol=0, atol=0)
    torch._dynamo.reset()
