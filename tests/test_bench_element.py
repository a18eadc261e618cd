"""``benchmarks/blocksparse.py --mask element``: the element-mask case and its element-sparse rows
(torch's CSR with autograd, PyG's torch_sparse when installed) against the float64 masked-dense
reference. No timings here."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch


def _bench():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "blocksparse.py"
    spec = importlib.util.spec_from_file_location("_bench_blocksparse_element", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _bench()


def _case(b, density=0.05, N=64, tile=16):
    return b.Case(N, 8, tile, density, torch.float32, torch.device("cpu"), seed=0, mask="element")


def test_element_case_counts_entries_and_touched_tiles(bench):
    c = _case(bench)
    assert c.M.shape == (64, 64) and c.nnz == int(c.M.sum())
    assert c.density_actual == pytest.approx(c.nnz / 64 ** 2)
    assert bool((c.W[~c.M] == 0).all()) and bool((c.W[c.M] != 0).all())
    touched = torch.tensor([[bool(c.M[16 * i:16 * i + 16, 16 * j:16 * j + 16].any()) for j in range(4)] for i in range(4)])
    assert torch.equal(c.tile_mask, touched)
    assert c.useful_flops == 6 * 8 * c.nnz


@pytest.mark.parametrize("name", ["torch_csr_autograd", "torch_csr", "torch_sparse", "seq2d[cpu]", "masked_dense"])
def test_element_rows_match_the_reference(bench, name):
    if name == "torch_sparse":
        pytest.importorskip("torch_sparse")
    c = _case(bench)
    step, result = bench.implementations(c.device)[name](c)
    step()
    step()  # a second step: gradients are reset, not accumulated
    assert bench.max_rel_error(c, result(), c.reference()) < 1e-5


def test_torch_sparse_row_is_na_with_a_reason_when_absent(bench, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_sparse", None)  # not installed, whatever this machine has
    with pytest.raises(bench.Unavailable, match="torch_sparse not installed"):
        bench.build_torch_sparse(_case(bench))


def test_no_tile_layout_is_na_for_the_tile_rows(bench):
    c = _case(bench, N=72)  # 72 is not a multiple of the tile 16
    assert c.layout is None and c.tile_density is None
    for name in ("torch_bsr", "seq2d[cpu]"):
        with pytest.raises(bench.Unavailable, match="no tile layout"):
            bench.implementations(c.device)[name](c)
    step, result = bench.build_torch_csr_autograd(c)  # the element rows still run
    step()
    assert bench.max_rel_error(c, result(), c.reference()) < 1e-5
