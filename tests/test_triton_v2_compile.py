"""The v2 Triton kernels compiled for sm_90 (H100/H200) here, without a GPU (issue 37, item 2).

For the first autotune candidate of each kernel variant at tiles 128 and 64 (the forward,
dX, dW and dW with the fused split): shared memory within an H100's 232,448 bytes per program,
no register spills (``ptxas -v``), TMA loads/stores and wgmma in the PTX, and the pipeline depth
the config table promises (three buffers in the gather kernel, ``num_stages`` in dW's).
``python benchmarks/gpu/sm90_compile.py`` checks every candidate (about 2 minutes); run it under
the GPU image's triton 3.6 too (benchmarks/gpu/README.md): ``SEQ2D_TRITON36_PYTHON`` names that
interpreter, and the last test here then runs the quick check with it.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent


def _sm90():
    if "_sm90_compile" not in sys.modules:  # registered first: its dataclass looks itself up there
        spec = importlib.util.spec_from_file_location("_sm90_compile", ROOT / "benchmarks" / "gpu" / "sm90_compile.py")
        sys.modules[spec.name] = mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    return sys.modules["_sm90_compile"]


def _variants():
    from seq2d.sparse.kernels import triton_v2 as v2

    out = []
    for T in (128, 64):
        g, s = v2._GATHER_CONFIGS[T][0], v2._SDD_CONFIGS[T][0]
        out += [("gather", T, g, False, False), ("gather", T, g, True, False),
                ("sdd", T, s, False, False), ("sdd", T, s, False, True)]
    return out


@pytest.mark.parametrize("kernel,T,cfg,transposed,split", _variants(),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_v2_compiles_well_for_sm90(kernel, T, cfg, transposed, split):
    sm90 = _sm90()
    try:
        r = sm90.check_v2(kernel, T, cfg, transposed, split)
    except (ImportError, FileNotFoundError, RuntimeError) as e:  # a triton without its CUDA toolchain
        pytest.skip(f"cannot compile for sm_90 here: {type(e).__name__}: {e}"[:200])
    want = 3 if kernel == "gather" else cfg[-1]
    assert r.problems(want_buffers=want) == [], r
    assert r.buffers == want, f"{r.kernel} T={T} {cfg}: {r.buffers} buffers, the table promises {want}"


@pytest.mark.parametrize("kernel,T,cfg,transposed,split", [v for v in _variants() if v[1] == 64],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_v2_compiles_with_its_integer_arguments_as_constexprs(kernel, T, cfg, transposed, split):
    """torch's mutation analysis of a recorded launch (``torch.compile`` through the triton ops)
    compiles the kernel with its integer arguments as constants, under torch 2.11 at least: on
    the H200 of 2026-11-29 dW's split branch failed there (``n_groups.to``: an int has no
    ``.to``), torch then assumed every argument written, cloned the weight and stopped with "a
    leaf Variable that requires grad is being used in an in-place operation"."""
    sm90 = _sm90()
    try:
        sm90.check_v2(kernel, T, cfg, transposed, split, ints_constexpr=True)
    except (ImportError, FileNotFoundError, RuntimeError) as e:
        pytest.skip(f"cannot compile for sm_90 here: {type(e).__name__}: {e}"[:200])


@pytest.mark.skipif(not os.environ.get("SEQ2D_TRITON36_PYTHON"), reason="SEQ2D_TRITON36_PYTHON not set")
def test_v2_compiles_with_the_gpu_images_triton():
    py = os.environ["SEQ2D_TRITON36_PYTHON"]
    res = subprocess.run([py, str(ROOT / "benchmarks" / "gpu" / "sm90_compile.py"), "--first"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stdout + res.stderr
