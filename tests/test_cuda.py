"""CUDA-only checks: they run where ``torch.cuda.is_available()``, and are skipped elsewhere
(CI has no GPU and never needs them). benchmarks/gpu/README.md says how a session with a
lent GPU runs them (``benchmarks/gpu/suite.sh install-and-test``).

(a) the Triton kernels of the block-sparse product against the masked-dense reference in
    float64, at real sizes, for every tile size and every dtype it supports (fp32 with
    IEEE dots, fp32 with tf32 dots, fp16, bf16): forward, dX and dW, through the kernel
    entry points (outputs poisoned with NaN first, so an unwritten element fails) and
    through ``bsmm``'s autograd;
(b) every registered model, after ``.cuda()`` and ``to_blocksparse(kernel="triton")``
    where it has linear blocks, against its float64 CPU output and input gradient;
(c) one trainer epoch on CUDA on the bundled MNIST subset (a dense MLP, and a tile-sparse
    randomized model on the Triton kernel), against the same run on the CPU;
(d) DistributedDataParallel: nccl in a one-rank process group, and the gloo path
    (``torchrun --nproc_per_node=2``, both ranks on one GPU) against one process;
(e) issue 35: the recipe of docs/training.md (run from the page): ``torch.compile(mode=
    "reduce-overhead", fullgraph=True)`` against eager, and a training step captured with
    ``torch.cuda.graph`` (capturable Adam) against an eager loop, on the dense store and the
    tiled store (``kernel="auto"`` and ``"triton"``); a mask edited after capture is refused,
    and a compiled step sees it.

Tolerances are relative Frobenius errors ``||out - ref|| / ||ref||`` against a float64
reference computed from the *same* (already rounded) inputs, so only accumulation and the
rounding of the output count: fp32 (IEEE) 1e-5, tf32 2e-3, fp16 2e-3, bf16 1e-2.
Every test is meant to take seconds on an H100. None of this has run on a GPU yet.
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

import seq2d
from seq2d import Sequential2D
from seq2d.sparse import bsmm, get_kernel, layout_from_tile_mask
from seq2d.sparse.layout import TILE_SIZES

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

DEVICE = torch.device("cuda") if CUDA else torch.device("cpu")

# (a) sizes: N x N matrix, batch B (not a multiple of any BLOCK_B, so the batch masks run),
# tile density 0.3 (some tile-rows and -columns forced empty below).
N, B, DENSITY = 2048, 777, 0.3
DTYPES = {  # name -> (storage dtype, allow tf32 for fp32 dots, max relative error)
    "fp32": (torch.float32, False, 1e-5),
    "tf32": (torch.float32, True, 2e-3),
    "fp16": (torch.float16, False, 2e-3),
    "bf16": (torch.bfloat16, False, 1e-2),
}


@pytest.fixture
def precision():
    """Set torch's tf32 switches for the test and put them back after (the Triton kernel
    reads ``torch.backends.cuda.matmul.allow_tf32`` to pick tf32 or IEEE fp32 dots)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)

    def set_tf32(on: bool) -> None:
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on

    set_tf32(False)
    yield set_tf32
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")  # NaN never passes (also: an element the kernel never wrote)
    norm = ref.norm().item()
    err = (out - ref).norm().item()
    return err / norm if norm > 0 else err


def random_layout(tile: int, n: int, density: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n // tile, n // tile, generator=g) < density
    mask[1, :] = False  # an empty tile-row: y there must be exactly 0
    mask[:, 2] = False  # an empty tile-column: dX there must be exactly 0
    return layout_from_tile_mask(tile, mask).to(DEVICE)


def operands(layout, batch: int, dtype: torch.dtype, seed: int):
    """x, dy, wp drawn fresh on the device (never zeros), rounded to ``dtype``."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    T = layout.tile
    x = torch.randn(batch, layout.Kt * T, device=DEVICE, generator=g).to(dtype)
    dy = torch.randn(batch, layout.Mt * T, device=DEVICE, generator=g).to(dtype)
    wp = (torch.randn(layout.nnz, T, T, device=DEVICE, generator=g) / (T * layout.nnz / layout.Mt) ** 0.5).to(dtype)
    return x, dy, wp


def reference(x, dy, wp, layout):
    """y, dX, dW (stored tiles) in float64 from the same rounded inputs."""
    ref = get_kernel("reference")
    x64, dy64, wp64 = x.double(), dy.double(), wp.double()
    return ref.dds_t(x64, wp64, layout), ref.dds(dy64, wp64, layout), ref.sdd_t(dy64, x64, layout)


# ---------------------------------------------------------------------------- (a) kernels
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("tile", TILE_SIZES)
def test_triton_ops_match_reference_at_real_size(tile, dtype_name, precision):
    from seq2d.sparse.kernels import triton_v1 as tb

    dtype, tf32, tol = DTYPES[dtype_name]
    precision(tf32)
    layout = random_layout(tile, N, DENSITY, seed=tile)
    x, dy, wp = operands(layout, B, dtype, seed=tile + 1)
    y_ref, dx_ref, dw_ref = reference(x, dy, wp, layout)
    T = tile

    # kernel entry points, writing into NaN-poisoned outputs
    y = tb.dds_t(x, wp, layout, torch.full((B, layout.Mt * T), float("nan"), device=DEVICE, dtype=dtype))
    dx = tb.dds(dy, wp, layout, torch.full((B, layout.Kt * T), float("nan"), device=DEVICE, dtype=dtype))
    dw = tb.sdd_t(dy, x, layout, torch.full((layout.nnz, T, T), float("nan"), device=DEVICE, dtype=dtype))
    torch.cuda.synchronize()
    errs = {"y": rel_err(y, y_ref), "dX": rel_err(dx, dx_ref), "dW": rel_err(dw, dw_ref)}
    assert max(errs.values()) <= tol, f"T={tile} {dtype_name}: relative errors {errs} (tolerance {tol})"
    assert (y[:, T:2 * T] == 0).all(), "the empty tile-row of W must give exact zeros in y"
    assert (dx[:, 2 * T:3 * T] == 0).all(), "the empty tile-column of W must give exact zeros in dX"

    # the same through bsmm's autograd (what models use)
    xg = x.clone().requires_grad_(True)
    wg = wp.clone().requires_grad_(True)
    out = bsmm(xg, wg, layout, "triton")
    out.backward(dy)
    errs = {"y": rel_err(out.detach(), y_ref), "dX": rel_err(xg.grad, dx_ref), "dW": rel_err(wg.grad, dw_ref)}
    assert max(errs.values()) <= tol, f"T={tile} {dtype_name} (bsmm autograd): relative errors {errs}"
    assert out.dtype == xg.grad.dtype == wg.grad.dtype == dtype


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("tile", TILE_SIZES)
def test_triton_dw_with_batch_splits(tile, dtype_name, precision):
    """Few stored tiles and a long batch: dW splits the batch over many programs per tile
    (fp32 workspace, then a sum), the path the big-N benchmark case takes."""
    from seq2d.sparse.kernels import triton_v1 as tb

    dtype, tf32, tol = DTYPES[dtype_name]
    precision(tf32)
    layout = random_layout(tile, 4 * tile, 0.7, seed=7)  # 4 x 4 tiles, rows 1 and column 2 empty
    x, dy, wp = operands(layout, 8192 + 5, dtype, seed=8)
    _, _, dw_ref = reference(x, dy, wp, layout)
    splits = tb._n_splits(x.shape[0], layout.nnz, tb._config(tile, dtype, x.device)["BLOCK_B"], x.device)
    assert splits > 1, "this case is meant to exercise the split path"
    dw = tb.sdd_t(dy, x, layout, torch.full((layout.nnz, tile, tile), float("nan"), device=DEVICE, dtype=dtype))
    assert rel_err(dw, dw_ref) <= tol


def test_triton_is_what_auto_picks_on_cuda():
    from seq2d.sparse import dense_crossover, resolve_kernel

    for tile in (32, 64, 128):
        assert resolve_kernel("auto", DEVICE, torch.bfloat16, 0.1, tile).name == "triton"
        at = dense_crossover(DEVICE, torch.bfloat16, tile)
        assert resolve_kernel("auto", DEVICE, torch.bfloat16, at, tile).name == "dense"
    assert get_kernel("triton").supports(DEVICE, torch.float32)


# ---------------------------------------------------------------------------- (a') the Triton ops compiled
# seq2d::triton_bsmm / _backward (torch.library.triton_op; tests/test_triton_ops.py runs opcheck and
# the AOTAutograd trace on the CPU through Triton's interpreter): what only a GPU can show.
TRITON_KERNELS = ("triton", "triton_v2")
OUTPUT_ARGS = {"y_ptr", "dx_ptr", "out_ptr", "ws_ptr", "count_ptr"}  # what the kernels write


def _op_case():
    """N = 1024, tile 64, batch 777, bf16: v2's own kernels, and a dW batch split (its counters)."""
    layout = random_layout(64, 1024, DENSITY, seed=11)
    x, dy, wp = operands(layout, B, torch.bfloat16, seed=12)
    return layout, x, dy, wp


@pytest.mark.parametrize("kernel", TRITON_KERNELS)
def test_tritonop_opcheck_on_cuda(kernel):
    layout, x, dy, wp = _op_case()
    torch.library.opcheck(torch.ops.seq2d.triton_bsmm,
                          (x.requires_grad_(), wp.requires_grad_(), layout.handle, kernel))
    for need in ((True, True), (True, False), (False, True)):
        torch.library.opcheck(torch.ops.seq2d.triton_bsmm_backward,
                              (dy, x.detach(), wp.detach(), layout.handle, kernel, *need))


@pytest.mark.parametrize("kernel", TRITON_KERNELS)
def test_tritonop_launches_clone_only_what_they_write(kernel):
    """Triton's mutation analysis of each recorded launch (it needs a GPU driver; on the CPU torch
    assumes every tensor argument is written and clones them all): the graph copies no input."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    layout, x, dy, wp = _op_case()
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    f = torch.compile(lambda x, wp: bsmm(x, wp, layout, kernel), fullgraph=True,
                      backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    f(x.clone().requires_grad_(), wp.clone().requires_grad_()).backward(dy)
    launches = [n for g in graphs for n in g.graph.nodes if "triton_kernel_wrapper_functional" in str(n.target)]
    assert len(launches) == 3, [str(n.target) for g in graphs for n in g.graph.nodes]
    for n in launches:
        assert set(n.kwargs["tensors_to_clone"]) <= OUTPUT_ARGS, n.kwargs["tensors_to_clone"]
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("kernel", TRITON_KERNELS)
def test_tritonop_compiles_with_inductor(kernel, mode):
    """``torch.compile(fullgraph=True)`` with inductor through ``bsmm``: the generated code launches
    seq2d's kernels itself, y, dX and dW match the float64 reference in each of three steps, and
    with ``mode="reduce-overhead"`` inductor keeps its CUDA graphs (no cudagraph skip)."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    layout, x, dy, wp = _op_case()
    y_ref, dx_ref, dw_ref = reference(x, dy, wp, layout)
    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(lambda x, wp: bsmm(x, wp, layout, kernel), fullgraph=True, mode=mode)

    def step():
        xg, wg = x.clone().requires_grad_(), wp.clone().requires_grad_()
        y = f(xg, wg)
        y.backward(dy)
        return {"y": rel_err(y.detach(), y_ref), "dX": rel_err(xg.grad, dx_ref), "dW": rel_err(wg.grad, dw_ref)}

    errs, codes = run_and_get_code(step)
    names = ("_gather_gemm_kernel", "_sdd_grouped_kernel") if kernel == "triton_v2" else ("_dds_t_kernel", "_sdd_t_kernel")
    assert all(any(name in c for c in codes) for name in names), f"inductor's code does not launch {names}"
    for i in range(3):
        assert max(errs.values()) <= DTYPES["bf16"][2], f"step {i}: {errs}"
        errs = step()
    if mode == "reduce-overhead":
        assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    torch._dynamo.reset()


# ---------------------------------------------------------------------------- (b) every registered model
# Moderate sizes (several tiles per slot at tile 16) for constructors whose defaults are tiny
# or need arguments; the others use their defaults.
MODEL_KW = {
    "mlp": dict(sizes=(300, 128, 64, 10)),
    "from_mask": dict(sizes=(64, 48, 40, 10)),
    "rnn": dict(input_size=16, hidden_size=64, num_layers=2),
    "truncated_rnn": dict(input_size=16, hidden_size=64, num_layers=2, k=3),
    "transformer_layer": dict(d_model=64, nhead=4, dim_feedforward=128),
    "transformer_encoder": dict(d_model=64, nhead=4, dim_feedforward=128, num_layers=2),
    "random_tiles": dict(sizes=(128, 64, 64, 10), density=0.5, tile=16),
}


def _core(model):
    return model if isinstance(model, Sequential2D) else model.core


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("tile", [16, 64])
@pytest.mark.parametrize("name", seq2d.list_models())
def test_registered_model_on_cuda_matches_cpu(name, tile, precision):
    from seq2d.sparse.linear import BlockSparseLinear
    from seq2d.testing import example_input

    torch.manual_seed(0)
    cpu = seq2d.create_model(name, **MODEL_KW.get(name, {}), dtype=torch.float64)
    gpu = copy.deepcopy(cpu).to(torch.float32).to(DEVICE)
    x = example_input(cpu, batch=4, dtype=torch.float64)[0]
    xc = x.clone().requires_grad_(True)
    y_ref = _first(cpu(xc))
    g = torch.randn_like(y_ref)
    y_ref.backward(g)

    core = _core(gpu)
    if isinstance(getattr(core, "matrix", None), BlockSparseLinear):
        core.matrix.kernel = "triton"  # already block-sparse (random_tiles): pin the kernel under test
    elif any(kind == "linear" for _, _, kind, _ in core.positions()):
        core.to_blocksparse(tile, kernel="triton")
    else:  # pragma: no cover - every registered model has linear blocks today
        pytest.skip(f"{name}: no linear blocks to convert")
    assert core.matrix is not None and core.matrix.data.device.type == DEVICE.type
    xg = x.to(DEVICE, torch.float32).requires_grad_(True)
    y = _first(gpu(xg))
    y.backward(g.to(DEVICE, torch.float32))
    torch.cuda.synchronize()
    assert rel_err(y.detach().cpu(), y_ref.detach()) <= 1e-5, f"{name}: output"
    assert rel_err(xg.grad.cpu(), xc.grad) <= 1e-5, f"{name}: input gradient"
    for pname, p in gpu.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"{name}: {pname} has no finite gradient on CUDA"


@pytest.mark.parametrize("name", seq2d.list_models())
def test_registered_model_dense_store_on_cuda_matches_cpu(name, precision):
    """Without to_blocksparse: the dense store on CUDA, parameter gradients compared by name."""
    from seq2d.testing import example_input

    torch.manual_seed(0)
    cpu = seq2d.create_model(name, **MODEL_KW.get(name, {}), dtype=torch.float64)
    gpu = copy.deepcopy(cpu).to(torch.float32).to(DEVICE)
    x = example_input(cpu, batch=4, dtype=torch.float64)[0]
    y_ref = _first(cpu(x))
    g = torch.randn_like(y_ref)
    y_ref.backward(g)
    y = _first(gpu(x.to(DEVICE, torch.float32)))
    y.backward(g.to(DEVICE, torch.float32))
    assert rel_err(y.detach().cpu(), y_ref.detach()) <= 1e-5
    grads = dict(cpu.named_parameters())
    for pname, p in gpu.named_parameters():
        ref = grads[pname].grad
        if ref is None:
            assert p.grad is None or not p.grad.any(), f"{name}: {pname}"
            continue
        assert rel_err(p.grad.cpu(), ref) <= 1e-4, f"{name}: gradient of {pname}"


# ---------------------------------------------------------------------------- (c) a trainer epoch
def _train_cfg(tmp_path, label, device, **kw):
    from seq2d.train import TrainConfig

    base = dict(model="mlp", sizes=[2500, 64, 10], data="subset", epochs=1, batch_size=64, lr=1e-3,
                device=device, num_threads=1, quiet=True, out_dir=str(tmp_path / label))
    base.update(kw)
    return TrainConfig(**base)


def test_one_epoch_on_cuda_matches_cpu(tmp_path, precision):
    from seq2d.train import load_checkpoint, read_metrics, run

    gpu = run(_train_cfg(tmp_path, "cuda", "cuda"))
    cpu = run(_train_cfg(tmp_path, "cpu", "cpu"))
    assert gpu["device"].startswith("cuda") and cpu["device"] == "cpu"
    rows = read_metrics(tmp_path / "cuda")
    assert len(rows) == 1 and str(rows[0]["device"]).startswith("cuda")
    assert gpu["updates"] == cpu["updates"]
    # same seed, same batches: only float rounding differs (cuBLAS vs MKL sums, ~1e-7 per step)
    a = load_checkpoint(tmp_path / "cuda" / "checkpoint.pt")["model"]
    b = load_checkpoint(tmp_path / "cpu" / "checkpoint.pt")["model"]
    worst = max((a[k].cpu() - b[k]).abs().max().item() for k in b)
    assert worst <= 1e-3, f"CUDA weights differ from the CPU run by {worst:.3g} after one epoch"
    assert abs(gpu["final_test_acc"] - cpu["final_test_acc"]) <= 0.01
    assert gpu["final_test_acc"] > 0.5


def test_one_epoch_of_a_tile_sparse_model_on_cuda(tmp_path, precision):
    from seq2d.train import read_metrics, run

    kw = dict(model="random_model", granularity="tile", tile=64, steps=2, sizes=[2500, 128, 10])
    gpu = run(_train_cfg(tmp_path, "cuda", "cuda", kernel="triton", **kw))
    cpu = run(_train_cfg(tmp_path, "cpu", "cpu", kernel="cpu", **kw))
    rows = read_metrics(tmp_path / "cuda")
    assert len(rows) == 1 and torch.isfinite(torch.tensor(rows[0]["train_loss"]))
    assert abs(gpu["final_test_acc"] - cpu["final_test_acc"]) <= 0.02
    assert gpu["final_test_acc"] > 0.3


@pytest.mark.parametrize("cell", ["tanh", "lstm"])
def test_lm_gradient_curves_on_cuda_match_cpu(cell):
    """The WikiText experiment's gradient-vs-distance curves run autograd through ``model.rnn``
    in eval mode. cuDNN's RNN backward refuses that (the probe of 2026-11-26 on an H200 died
    with "cudnn RNN backward can only be called in training mode" for both LSTMs); seq2d.lab.lm
    switches cuDNN off there. The CUDA curves must equal the CPU ones."""
    from seq2d.lab.wikitext import batchify
    from seq2d.lab.lm import RNNLM, grad_norm_carried, grad_norm_vs_distance

    torch.manual_seed(0)
    lm = RNNLM(50, emb=16, hidden=24, layers=2, dropout=0.2, cell=cell).double()
    data = torch.randint(0, 50, (400,))
    cpu = grad_norm_vs_distance(lm, data, max_distance=8, n_seqs=4, burn_in=3)
    cpu_c = grad_norm_carried(lm, batchify(data, 4), max_distance=8, max_segments=3)["curve"]
    lm.cuda()
    gpu = grad_norm_vs_distance(lm, data.cuda(), max_distance=8, n_seqs=4, burn_in=3)
    gpu_c = grad_norm_carried(lm, batchify(data, 4).cuda(), max_distance=8, max_segments=3)["curve"]
    assert lm.training  # mode restored
    torch.testing.assert_close(torch.tensor(gpu), torch.tensor(cpu), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(torch.tensor(gpu_c), torch.tensor(cpu_c), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------- (d) DDP
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


NCCL_ONE_RANK = textwrap.dedent("""
    import copy, dataclasses, torch, torch.distributed as dist, seq2d
    from torch.nn.parallel import DistributedDataParallel as DDP
    from seq2d.train.distributed import DistContext, wrap_model
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", device_id=dev)        # one rank: WORLD_SIZE=1 from the env
    ctx = DistContext.current("cuda")
    assert ctx.backend == "nccl" and ctx.world_size == 1 and ctx.device == dev, ctx
    t = torch.arange(4.0, device=dev)
    dist.all_reduce(t)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    torch.manual_seed(0)
    model = seq2d.mlp([64, 32, 10]).to(dev)
    plain = copy.deepcopy(model)
    x = torch.randn(16, 64, device=dev)
    # world_size=2 in the context only makes wrap_model wrap; the group has one rank, so
    # DDP's gradient average is over one rank and must equal the plain model's gradient
    ddp = wrap_model(model, dataclasses.replace(ctx, world_size=2), example=x)
    assert isinstance(ddp, DDP), type(ddp)
    for m in (ddp, plain):
        m(x).square().sum().backward()
    for (n, p), q in zip(model.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-6, msg=n)
    dist.destroy_process_group()
    print("nccl one-rank ok")
""")


def test_ddp_nccl_one_rank():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("torch.distributed with nccl is not available")
    env = _clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    proc = subprocess.run([sys.executable, "-c", NCCL_ONE_RANK], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "nccl one-rank ok" in proc.stdout


@pytest.mark.parametrize("backend,nproc", [("gloo", 2), ("nccl", 2)])
def test_ddp_torchrun_on_cuda_matches_one_process(tmp_path, backend, nproc, precision):
    """The test_ddp.py comparison on CUDA. gloo: both ranks share GPU 0 (gloo reduces CUDA
    tensors). nccl refuses two ranks on one GPU, so it needs two GPUs."""
    import torch.distributed as dist

    from seq2d.train import load_checkpoint, read_metrics, run, save_config

    if backend == "nccl" and torch.cuda.device_count() < nproc:
        pytest.skip(f"nccl with {nproc} ranks needs {nproc} GPUs, this machine has {torch.cuda.device_count()}")
    if not (dist.is_available() and (dist.is_gloo_available() if backend == "gloo" else dist.is_nccl_available())):
        pytest.skip(f"torch.distributed with {backend} is not available")
    cfg = _train_cfg(tmp_path, "ddp", "cuda", dist_backend=backend)
    save_config(cfg, tmp_path / "ddp.toml")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "seq2d.train", "--config", str(tmp_path / "ddp.toml")]
    proc = subprocess.run(cmd, env=_clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"torchrun failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    single = run(_train_cfg(tmp_path, "single", "cuda"))
    rows = read_metrics(tmp_path / "ddp")
    assert len(rows) == 1 and rows[0]["world_size"] == nproc and rows[0]["update"] == single["updates"]
    ck = load_checkpoint(tmp_path / "ddp" / "checkpoint.pt")["model"]
    ref = load_checkpoint(tmp_path / "single" / "checkpoint.pt")["model"]
    worst = max((ck[k].cpu() - ref[k].cpu()).abs().max().item() for k in ref)
    assert worst <= 1e-4, f"DDP ({backend}) weights differ from the single-process run by {worst:.3g}"
    assert abs(rows[0]["test_acc"] - single["final_test_acc"]) <= 0.005



# ---------------------------------------------------------------------------- (e) compiled and captured steps
# What is expected (issue 35, 2026-11-28; nothing here has run on a GPU yet): every case passes on
# the dense store, and raw capture passes on the tiled store (it records the Triton launches like
# any kernel). torch.compile(fullgraph=True) of a tiled model whose kernel resolves to Triton needs
# the Triton kernels as torch.library.triton_op (under way): until the triton backend defines its
# own ``product`` (as the CPU kernels' custom ops do), those cases are marked xfail (not strict),
# and their report names the tracing failure.
GRAPH_STORES = ["dense", "tiled-auto", "tiled-triton"]
GRAPH_B, GRAPH_CLASSES = 16, 32


def _recipe():
    from doc_code import graph_step_recipe

    return graph_step_recipe()


def _graph_model(store):
    """A cyclic model with element masks (so a tiled store keeps a tile mask), float32 on CUDA."""
    torch.manual_seed(0)
    m = seq2d.create_model("random_mask", sizes=[64, 128, 128, GRAPH_CLASSES], density=0.3, device=DEVICE)
    if store != "dense":
        m.to_blocksparse(32, kernel=store.removeprefix("tiled-"))
    return m


def _graph_batch(k):
    g = torch.Generator(device=DEVICE).manual_seed(100 + k)
    return (torch.randn(GRAPH_B, 64, device=DEVICE, generator=g),
            torch.randint(0, GRAPH_CLASSES, (GRAPH_B,), device=DEVICE, generator=g))


def _expect_compile(request, m):
    """xfail (not strict) a compiled tiled model whose kernel is Triton while Triton is no torch op."""
    from seq2d.sparse import resolve_kernel
    from seq2d.sparse.kernels.base import Kernel

    eng = getattr(m, "matrix", None)
    if eng is None:
        return
    L = eng.layout
    k = resolve_kernel(eng.kernel, DEVICE, eng.data.dtype, L.density, L.tile)
    if k.name.startswith("triton") and type(k).product is Kernel.product:
        request.applymarker(pytest.mark.xfail(strict=False, reason=(
            f"kernel {k.name!r} runs inside an autograd.Function: fullgraph compile needs it as a "
            "torch.library.triton_op (issue 35, under way)")))


def _mask_of(m):
    return m.matrix.tmask if getattr(m, "matrix", None) is not None else m.block(1, 0).mask


@pytest.mark.parametrize("store", GRAPH_STORES)
def test_graph_step_compiled_equals_eager_and_sees_a_mask_edit(store, precision, request):
    """compiled_loss (reduce-overhead, fullgraph): loss and gradients equal eager ones over calls
    that warm up, record and replay, each on a new batch, with no CUDA graph skipped; then a mask
    edited in place is seen by the next replay (one compile per store: the GPU session's time)."""
    import torch.nn.functional as F
    from torch._dynamo.utils import counters

    m = _graph_model(store)
    _expect_compile(request, m)
    ref = copy.deepcopy(m)
    torch._dynamo.reset()
    skips = counters["inductor"]["cudagraph_skips"]
    loss_of = _recipe()["compiled_loss"](m)
    for k in range(5):
        x, y = _graph_batch(k)
        torch.compiler.cudagraph_mark_step_begin()
        m.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        loss.backward()
        loss_ref = F.cross_entropy(ref(x), y)
        loss_ref.backward()
        assert rel_err(loss.detach(), loss_ref.detach()) <= 1e-5, f"call {k}: loss"
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            assert rel_err(p.grad, q.grad) <= 1e-4, f"call {k}: gradient of {name}"
    assert counters["inductor"]["cudagraph_skips"] == skips, "inductor skipped CUDA graphs (see its log)"

    x, y = _graph_batch(0)  # grad mode as above: no guard fails, the recorded graph replays
    before = F.cross_entropy(m(x), y).item()
    with torch.no_grad():
        _mask_of(m)[:, :8] = False
    eager = F.cross_entropy(m(x), y).item()  # eager, the edited mask
    torch.compiler.cudagraph_mark_step_begin()
    compiled = loss_of(x, y).item()
    assert eager != before, "the edit must change the loss (else this test checks nothing)"
    assert compiled == pytest.approx(eager, rel=1e-5), f"compiled {compiled}, eager {eager}, before the edit {before}"


def _eager_steps(model, batches, capturable, state=None):
    """Adam over ``batches``, eagerly, on ``model`` (in place); the losses."""
    import torch.nn.functional as F

    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)
    if state is not None:
        opt.load_state_dict(state)
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _assert_like_eager(m, ref, ref2, what):
    """Each parameter of ``m`` equals the eager run's (``ref``) within rtol 1e-5 and an atol of
    1e-6 or 4x the spread between ``ref`` and a control eager run ``ref2`` (Adam turns a rounding
    difference in a gradient near zero into a step of up to ``lr``), the failure naming the
    parameter, the spread and torch's own mismatch report (the 2026-11-29 GPU run said only
    "slot_bias.bias": the first parameter compared)."""
    for (name, p), q, q2 in zip(m.named_parameters(), ref.parameters(), ref2.parameters()):
        spread = (q - q2).abs().max().item()
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=max(1e-6, 4 * spread),
                                   msg=lambda s, n=name, e=spread: f"{n} {what} (eager-vs-eager spread {e:.3g}): {s}")


@pytest.mark.parametrize("store", GRAPH_STORES)
def test_graph_step_captured_equals_eager_loop(store, precision):
    m = _graph_model(store)
    ref, ref2 = copy.deepcopy(m), copy.deepcopy(m)
    start = [p.detach().clone() for p in m.parameters()]
    batches = [_graph_batch(k) for k in range(6)]
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=True)
    step = _recipe()["CapturedStep"](m, opt, *batches[0], warmup=3)  # 3 steps on batch 0
    losses = [step(x, y).item() for x, y in batches[1:]]
    eager = [batches[0]] * 3 + batches[1:]
    losses_ref = _eager_steps(ref, eager, capturable=False)  # the ordinary (not capturable) Adam
    _eager_steps(ref2, eager, capturable=True)  # the control: the captured step's Adam, eagerly
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(losses_ref[3:]), rtol=1e-5, atol=1e-6)
    for (name, p), p0 in zip(m.named_parameters(), start):
        assert not torch.equal(p.detach(), p0), f"{name} did not train"
    _assert_like_eager(m, ref, ref2, "after 5 replays")


@pytest.mark.parametrize("store", GRAPH_STORES)
def test_graph_step_capture_refuses_a_mask_edit_then_recaptures(store, precision):
    recipe = _recipe()
    m = _graph_model(store)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=True)
    (x0, y0), (x1, y1) = _graph_batch(0), _graph_batch(1)
    step = recipe["CapturedStep"](m, opt, x0, y0, warmup=1)
    step(x1, y1)
    with torch.no_grad():
        _mask_of(m)[:, :8] = False
    with pytest.raises(RuntimeError, match="build a new CapturedStep"):
        step(x1, y1)  # a replay would multiply by the float copy of the old mask
    with pytest.raises(ValueError, match="takes batches of shapes"):
        step(x1[:4], y1[:4])
    # a new capture uses the edited mask: one warm-up step and one replay equal two eager steps.
    # The dense store's compact box changed size with the edit (docs/concepts.md): the optimizer
    # is built again, as the docs say; the tiled store keeps its tiles, and its optimizer state.
    if store == "dense":
        opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=True)
    state = copy.deepcopy(opt.state_dict())
    ref, ref2 = copy.deepcopy(m), copy.deepcopy(m)
    step = recipe["CapturedStep"](m, opt, x0, y0, warmup=1)
    step(x1, y1)
    for r in (ref, ref2):  # two identical eager runs: their spread is the control
        _eager_steps(r, [(x0, y0), (x1, y1)], capturable=True, state=copy.deepcopy(state))
    _assert_like_eager(m, ref, ref2, "after a recapture")
