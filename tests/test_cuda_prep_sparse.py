"""CPU checks for the CUDA paths of the block-sparse matrix (no GPU needed).

``device="meta"`` stands in for CUDA where only placement matters: like a CUDA tensor, a
meta tensor refuses an index tensor on the CPU, so a buffer left behind fails here too
(meta tensors hold no values, so whatever reads a value, e.g. ``num_parameters``, cannot
run on them). The Triton kernels are compiled for an sm_90 target (no GPU needed) to check
that their offsets are 64-bit. The peer guards of ``benchmarks/blocksparse.py`` are tested
with stand-in cases.
"""

import importlib.util
import math
import os
import sys
import types
from pathlib import Path

import pytest
import torch

import seq2d
from seq2d.stores import TiledBlock
from seq2d.models.random import _matrix_fan_in, random_tile_matrix
from seq2d.sparse.linear import BlockSparseLinear, Group

META = torch.device("meta")


def _devices(eng) -> dict:
    """Where the matrix's index buffers, tiles and layout live, by name."""
    out = {name: getattr(eng, name).device for name in ("pos_row", "pos_col", "pos_data")}
    return {**out, "data": eng.data.device, "layout": eng.layout.device}


# ---------------------------------------------------------------------------- 1. index buffers on the requested device
def test_random_tile_matrix_puts_index_buffers_on_the_device():
    eng = random_tile_matrix((40, 30, 20), 16, 0.5, generator=torch.Generator().manual_seed(0), device=META)
    assert set(_devices(eng).values()) == {META}, _devices(eng)
    assert eng.tmask.device == META  # 40, 30, 20 are not multiples of 16: padding masks
    assert eng.position_tiles().device == META


def test_tied_matrix_on_the_device_gathers_with_device_indices():
    """What ``model.to(device).to_blocksparse()`` builds for tied LinearBlocks: one group at
    two positions (from_blocks calls this constructor with the weights' device)."""
    pattern = torch.tensor([[True, False], [True, True]])
    eng = BlockSparseLinear([32, 32, 32], 16, [Group((32, 32), pattern)], [(1, 0, 0), (2, 1, 0)],
                            device=META)
    assert eng._layout.tied and not eng._identity
    assert set(_devices(eng).values()) == {META}, _devices(eng)
    wp = eng.position_tiles()  # index_select with pos_data: fails with a CPU index
    assert wp.device == META and wp.shape == (6, 16, 16)
    eng.reset_parameters(torch.Generator().manual_seed(0))


def test_matrix_fan_in_counts_on_the_cpu_for_a_device_matrix():
    eng = random_tile_matrix((32, 32, 32), 16, 0.5, generator=torch.Generator().manual_seed(0), device=META)
    assert eng.tmask is None
    cpu = random_tile_matrix((32, 32, 32), 16, 0.5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(_matrix_fan_in(eng), _matrix_fan_in(cpu))


def test_moved_model_keeps_its_buffers_with_the_tiles():
    m = seq2d.mlp([32, 32, 16]).to_blocksparse(16)
    m.to(META)
    assert set(_devices(m.matrix).values()) == {META}, _devices(m.matrix)


# ---------------------------------------------------------------------------- 3. the identity flag, no tensor compare per forward
def test_identity_flag_is_a_python_bool_set_with_the_layout(monkeypatch):
    m = seq2d.mlp([32, 32, 16], dtype=torch.float64).to_blocksparse(16, kernel="cpu")
    eng = m.matrix
    assert eng._identity is True and not eng._layout.tied
    x = torch.randn(3, 32, dtype=torch.float64)
    y = m(x)  # the first call builds the plan (which may compare tensors once)

    def no_compare(*a, **k):
        raise AssertionError("torch.equal in a forward pass")

    monkeypatch.setattr(torch, "equal", no_compare)
    assert eng.position_tiles() is not None
    torch.testing.assert_close(m(x), y, rtol=0, atol=0)  # bitwise: one model, one input, run twice
    tr = seq2d.create_model("truncated_rnn", input_size=16, hidden_size=16, k=3, dtype=torch.float64)
    monkeypatch.undo()
    tr.core.to_blocksparse(16, kernel="cpu")
    assert tr.core.matrix._identity is False


# ---------------------------------------------------------------------------- 4. per-device index caches
def test_level_indices_are_cached_per_device():
    m = seq2d.mlp([32, 32, 32, 16]).to_blocksparse(16)
    store = m.store
    keys = [k for k in store.boxes_for(store.rows[:1]) if k]
    L, idx = store._layout_for(keys[0])
    assert idx is not None and idx.device.type == "cpu"  # a plan level: a subset of the positions
    m.to(META)
    L1, i1 = store._layout_for(keys[0])
    L2, i2 = store._layout_for(keys[0])
    assert i1.device == META and i1 is i2 and L1 is L2 and L1.device == META
    assert store._sub[keys[0]][1].device.type == "cpu"  # the original stays: moving back copies nothing
    m.to_empty(device="cpu")  # back (meta tensors hold no values to copy)
    assert store._layout_for(keys[0])[1] is idx
    g_idx = m.matrix._group_index(0, torch.device("cpu"))
    assert m.matrix._group_index(0, torch.device("cpu")) is g_idx


# ---------------------------------------------------------------------------- 5. effective_data once per forward
def test_effective_data_once_per_forward_on_the_level_path(monkeypatch):
    m = seq2d.mlp([32, 32, 32, 32, 16], dtype=torch.float64).to_blocksparse(16, kernel="cpu")
    assert m._levels is not None and len(m._level_rows) >= 3  # acyclic: the plan runs level by level
    calls = []
    orig = BlockSparseLinear.effective_data

    def counted(self):
        calls.append(1)
        return orig(self)

    monkeypatch.setattr(BlockSparseLinear, "effective_data", counted)
    m(torch.randn(2, 32, dtype=torch.float64))
    assert len(calls) == 1


# ---------------------------------------------------------------------------- 6. reset_parameters with a CPU generator
def _reset_draws(model, seed=3):
    g = torch.Generator().manual_seed(seed)
    model.reset_parameters(generator=g)
    return g.get_state()


def test_reset_with_a_cpu_generator_draws_on_the_cpu_for_a_device_model():
    """A model elsewhere (meta here, CUDA on a GPU) consumes the CPU generator exactly as the
    CPU model does, so it gets the CPU model's values (before: meta/CUDA drew with the
    generator on their own device: an error on CUDA, nothing drawn on meta)."""
    cpu = seq2d.LinearBlock(20, 12, bias=True)
    dev = seq2d.LinearBlock(20, 12, bias=True, device=META)
    assert torch.equal(_reset_draws(dev), _reset_draws(cpu))  # bitwise: the same draws on the CPU generator
    # the model's own biases (a Sequential2D cannot be built on meta: its store reads values)
    m_cpu = seq2d.mlp([20, 12, 6])
    m_dev = seq2d.mlp([20, 12, 6])
    m_dev.slot_bias.bias = torch.nn.Parameter(torch.empty_like(m_dev.slot_bias.bias, device=META))
    g_cpu, g_dev = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    m_cpu.reset_bias_parameters(generator=g_cpu)
    m_dev.reset_bias_parameters(generator=g_dev)
    assert torch.equal(g_dev.get_state(), g_cpu.get_state())
    eng_cpu = random_tile_matrix((32, 32), 16, 0.5, generator=torch.Generator().manual_seed(0))
    eng_dev = random_tile_matrix((32, 32), 16, 0.5, generator=torch.Generator().manual_seed(0), device=META)
    assert torch.equal(_reset_draws(eng_dev), _reset_draws(eng_cpu))


def test_reset_values_on_the_cpu_are_unchanged():
    """CPU values are those of the draws written out by hand (nn.Linear's rule per block, then
    the model's own biases), as before the device handling."""
    m = seq2d.mlp([20, 12, 6])
    g = torch.Generator().manual_seed(5)
    m.reset_parameters(generator=g)
    g = torch.Generator().manual_seed(5)
    w1 = torch.empty(12, 20)
    torch.nn.init.kaiming_uniform_(w1, a=math.sqrt(5), generator=g)
    w2 = torch.empty(6, 12)
    torch.nn.init.kaiming_uniform_(w2, a=math.sqrt(5), generator=g)
    b1 = torch.empty(12).uniform_(-1 / math.sqrt(20), 1 / math.sqrt(20), generator=g)
    b2 = torch.empty(6).uniform_(-1 / math.sqrt(12), 1 / math.sqrt(12), generator=g)
    # bitwise: the same init calls on the same generator
    assert torch.equal(m.blocks["1_0"].weight, w1) and torch.equal(m.blocks["2_1"].weight, w2)
    assert torch.equal(m.biases["1"], b1) and torch.equal(m.biases["2"], b2)
    eng = random_tile_matrix((32, 32), 16, 1.0, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(7)
    eng.reset_parameters(g)
    u = torch.rand(eng.data.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 2 - 1
    assert torch.equal(eng.data, u.float() * 0.125)  # bitwise (same draws, a power-of-2 scale); fan-in 4 tiles x 16 = 64 for every output unit


# ---------------------------------------------------------------------------- 2. 64-bit offsets in the kernels
def _ttir(kernel) -> str:
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    const = dict(T=64, BLOCK_B=128, INPUT_PRECISION="tf32", UPCAST=False)
    fn = JITFunction(kernel.fn)  # compiled mode, whatever mode the module was imported in
    index = ("row_ptr", "col_ptr", "row_ptr_ptr", "t_pos_ptr", "col_ptr_ptr")
    sig = {n: "constexpr" if n in const else "*i64" if n in index else "*fp16" if n.endswith("_ptr") else "i32"
           for n in fn.arg_names}
    try:
        src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in const.items()})
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=3)).asm["ttir"]
    except Exception as e:  # noqa: BLE001  no CUDA toolchain in this triton build, or another API
        pytest.skip(f"cannot compile for sm_90 here: {type(e).__name__}: {e}"[:200])


@pytest.mark.parametrize("name,strides", [
    ("_dds_t_kernel", ["stride_xb", "stride_xk", "stride_wp", "stride_yb", "stride_ym"]),
    ("_dds_kernel", ["stride_db", "stride_dm", "stride_wp", "stride_xb", "stride_xk"]),
    ("_sdd_t_kernel", ["stride_xb", "stride_xk", "stride_db", "stride_dm", "stride_os", "stride_op"]),
])
def test_kernel_offsets_are_64_bit(name, strides):
    """Every stride that multiplies a batch row, a tile index or a position is widened to i64
    before the multiply (``p * stride_op`` in int32 wraps once P*T*T >= 2^31)."""
    pytest.importorskip("triton")
    from seq2d.sparse.kernels import triton_v1 as tb

    ir = _ttir(getattr(tb, name))
    widened = {s for s in strides if f"arith.extsi %{s} : i32 to i64" in ir}
    assert widened == set(strides)


# ---------------------------------------------------------------------------- 8. benchmark peer guards
def _bench():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "blocksparse.py"
    spec = importlib.util.spec_from_file_location("_bench_blocksparse", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_case(**kw):
    c = dict(device=torch.device("cuda"), T=128, dtype=torch.bfloat16, B=100, P=5)
    c.update(kw)
    return types.SimpleNamespace(**c)


def test_stk_and_torch_triton_batch_guards():
    b = _bench()
    with pytest.raises(b.Unavailable, match=r"batch % 128 == 0, got batch 100"):
        b.build_stk(_fake_case(B=100))
    with pytest.raises(b.Unavailable, match=r"batch % 16 == 0, got batch 100"):
        b.build_torch_bsr_triton(_fake_case(B=100))


def test_refused_dtype_is_na_with_the_reason():
    b = _bench()

    def refuses():
        raise RuntimeError("addmm: computation on CUDA is not implemented for BFloat16\nmore")

    with pytest.raises(b.Unavailable, match="torch BSR refuses bfloat16 on cpu: addmm: .* BFloat16$"):
        b._refused(_fake_case(device=torch.device("cpu")), refuses, "torch BSR")
    b._refused(_fake_case(device=torch.device("cpu"), dtype=torch.float32), refuses, "torch BSR")  # not probed


def test_blksprs_autotune_mode_and_layout_caches(monkeypatch):
    b = _bench()
    monkeypatch.delenv("BLKSPRS_AUTOTUNE", raising=False)
    monkeypatch.setitem(sys.modules, "blksprs", None)  # not installed, whatever this machine has
    with pytest.raises(b.Unavailable, match="not installed"):
        b.build_blksprs(_fake_case(B=256, T=64))
    assert os.environ["BLKSPRS_AUTOTUNE"] == "DEFAULT"  # set before the import, as blksprs requires

    seen = []

    def op(kind):
        def f(*args, layout_cache=None):
            seen.append((kind, id(layout_cache)))
            if kind == "matmul":
                return args[0] @ args[2]
            return args[0]
        return f

    bs = types.SimpleNamespace(ops=types.SimpleNamespace(to_sparse=op("to_sparse"), matmul=op("matmul"),
                                                         to_dense=op("to_dense")))
    c = b.Case(64, 32, 16, 0.5, torch.float64, torch.device("cpu"), 0)
    step, result = b._blksprs_step(c, bs)
    seen.clear()
    step()
    first = list(seen)
    step()
    assert seen[len(first):] == first  # the same cache objects every step
    assert len({i for _, i in first}) == 3  # one per call site
    assert "layout caches on" in step.kernel and "autotune=DEFAULT" in step.kernel
    assert b.max_rel_error(c, result(), c.reference()) < 1e-12


def test_reset_parameters_passes_the_generator_to_tile_matrices():
    """Sequential2D.reset_parameters(generator=g) reaches a tile matrix too: two resets with
    equally seeded generators give the same tiles whatever the global RNG did in between."""
    import seq2d

    m = seq2d.mlp([64, 64, 64, 10]).to_blocksparse(tile=16)
    matrices = [e for e in m.modules() if type(e).__name__ == "BlockSparseLinear"]
    assert matrices, "the model should hold a tile matrix"
    m.reset_parameters(generator=torch.Generator().manual_seed(7))
    first = [e.data.detach().clone() for e in matrices]
    torch.manual_seed(12345)
    torch.rand(1000)  # move the global RNG
    m.reset_parameters(generator=torch.Generator().manual_seed(7))
    assert all(torch.equal(a, e.data) for a, e in zip(first, matrices))  # bitwise: one seeded reset, twice
    m.reset_parameters(generator=torch.Generator().manual_seed(8))
    assert not all(torch.equal(a, e.data) for a, e in zip(first, matrices))
