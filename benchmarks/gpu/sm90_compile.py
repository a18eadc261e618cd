"""Compile seq2d's Triton kernels for an H100/H200 (sm_90) here, without a GPU, and report what
the binary will do: shared memory, registers, spills, TMA and wgmma instructions, and the depth
of the software pipeline (the number of buffers of the loads' shared-memory ring).

Uses the installed triton's own toolchain (its ptxas: ``ptxas -v`` prints registers and spills),
so it checks the triton version it runs under: ``/tmp/venv-triton36/bin/python
benchmarks/gpu/sm90_compile.py`` checks the GPU image's triton 3.6 (README.md of this folder).

    python benchmarks/gpu/sm90_compile.py                      # the v2 candidates, one line each
    python benchmarks/gpu/sm90_compile.py --json out.json      # and every report as JSON

Used by ``tests/test_triton_v2_compile.py`` (CI) and ``triton_v2_tune.py`` (which times only
candidates that pass here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SMEM_LIMIT = 232_448  # bytes per program on sm_90 (227 KiB)
ARCH = 90


@dataclass
class Report:
    kernel: str
    tile: int
    config: list
    shared: int  # bytes of shared memory the launch reserves
    registers: int
    spill_bytes: int  # spill stores + spill loads (ptxas -v)
    tma: bool  # cp.async.bulk.tensor in the PTX
    wgmma: bool  # wgmma.mma_async in the PTX
    buffers: int  # depth of the deepest multi-buffered shared-memory ring (1: not pipelined)
    cubin_sha1: str  # equal hashes: the same binary (e.g. a num_stages the pipeliner could not use)
    triton: str
    seconds: float

    def problems(self, want_buffers: int = 3) -> list[str]:
        out = []
        if self.shared > SMEM_LIMIT:
            out.append(f"shared memory {self.shared} B > {SMEM_LIMIT}")
        if self.spill_bytes:
            out.append(f"{self.spill_bytes} B of register spills")
        if not self.tma:
            out.append("no TMA load/store")
        if not self.wgmma:
            out.append("no wgmma")
        if self.buffers < want_buffers:
            out.append(f"{self.buffers} pipeline buffers < {want_buffers}")
        return out


def _ptxas_verbose(ptx: str) -> tuple[int, int]:
    """(registers, spill bytes) from ``ptxas -v`` of triton's own ptxas."""
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(ARCH) if "arch" in get_ptxas.__code__.co_varnames else get_ptxas()
    path = ptxas.path if hasattr(ptxas, "path") else ptxas[0]
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        res = subprocess.run([path, "-v", f"--gpu-name=sm_{ARCH}a", str(src), "-o", str(Path(d) / "k.cubin")],
                             capture_output=True, text=True, check=True)
    log = res.stdout + res.stderr
    regs = max((int(m) for m in re.findall(r"Used (\d+) registers", log)), default=0)
    spills = sum(int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log))
    return regs, spills


def _buffers(ttgir: str) -> int:
    """The deepest ring: the leading dimension of a rank-3 shared-memory allocation of a 2-D tile."""
    depth = 1
    for m in re.finditer(r"ttg\.local_alloc[^\n]*?!ttg\.memdesc<(\d+)x(\d+)x(\d+)x", ttgir):
        depth = max(depth, int(m.group(1)))
    return depth


def compile_kernel(fn, signature: dict, constexprs: dict, num_warps: int, num_stages: int):
    """``fn`` (a ``@triton.jit`` function, whatever mode it was built in) compiled for sm_90."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    jit = JITFunction(fn.fn if hasattr(fn, "fn") else fn)
    sig = {n: "constexpr" if n in constexprs else signature[n] for n in jit.arg_names}
    # what the launcher specialises on a GPU: 16-byte aligned pointers and strides
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(jit.arg_names)
             if n not in constexprs and (sig[n].startswith("*") or n.startswith("stride"))}
    src = ASTSource(fn=jit, signature=sig, constexprs=dict(constexprs), attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", ARCH, 32), options=dict(num_warps=num_warps, num_stages=num_stages))


def v2_signature(kernel: str, dtype: str = "bf16") -> dict:
    """Argument types of the v2 kernels as the launcher passes them (int32 metadata)."""
    from seq2d.sparse.kernels import triton_v2_kernels as k

    fn = k._gather_gemm_kernel if kernel == "gather" else k._sdd_grouped_kernel
    ptr = {"a_ptr", "wp_ptr", "out_ptr", "x_ptr", "dy_ptr"}
    return {n: f"*{dtype}" if n in ptr else "*fp32" if n == "ws_ptr" else "*i32" if n.endswith("_ptr") else "i32"
            for n in fn.arg_names}


def check_v2(kernel: str, tile: int, cfg: tuple, transposed: bool = False, split: bool = False,
             ints_constexpr: bool = False) -> Report:
    """Compile one v2 candidate (``kernel`` 'gather' or 'sdd'; ``cfg`` as in triton_v2's tables).
    ``ints_constexpr``: every integer argument a constexpr too (as torch 2.11's mutation analysis
    of a ``wrap_triton`` launch hands them over: the GPU run of 2026-11-29 failed there on a
    ``.to`` of one)."""
    import time

    import triton

    from seq2d.sparse.kernels import triton_v2 as v2
    from seq2d.sparse.kernels import triton_v2_kernels as k

    kw = v2._as_kwargs(kernel, cfg)
    nw, ns = kw.pop("num_warps"), kw.pop("num_stages")
    if kernel == "gather":
        fn, const = k._gather_gemm_kernel, dict(T=tile, TRANS_W=transposed, UPCAST=False, **kw)
    else:
        fn, const = k._sdd_grouped_kernel, dict(T=tile, G=v2.GROUP_TILES[tile], SPLIT=split, UPCAST=False, **kw)
    if ints_constexpr:
        const.update({n: 7 for n, t in v2_signature(kernel).items() if t == "i32" and n not in const})
    t0 = time.perf_counter()
    c = compile_kernel(fn, v2_signature(kernel), const, nw, ns)
    regs, spills = _ptxas_verbose(c.asm["ptx"])
    ptx = c.asm["ptx"]
    name = kernel + ("_dx" if transposed else "") + ("_split" if split else "")
    return Report(name, tile, list(cfg), int(c.metadata.shared), regs, spills,
                  "cp.async.bulk.tensor" in ptx, "wgmma.mma_async" in ptx, _buffers(c.asm["ttgir"]),
                  hashlib.sha1(c.asm["cubin"]).hexdigest(), triton.__version__, round(time.perf_counter() - t0, 2))


def v2_candidates(tiles=(128, 64)) -> list[tuple[str, int, tuple, bool, bool]]:
    """Every configured v2 variant: (kernel, tile, config, transposed, split)."""
    from seq2d.sparse.kernels import triton_v2 as v2

    out = []
    for T in tiles:
        for cfg in v2._GATHER_CONFIGS[T]:
            out += [("gather", T, cfg, False, False), ("gather", T, cfg, True, False)]
        for cfg in v2._SDD_CONFIGS[T]:
            out += [("sdd", T, cfg, False, False), ("sdd", T, cfg, False, True)]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--first", action="store_true", help="only the first config of each table (the quick check)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    reports, bad = [], 0
    seen = set()
    for kernel, T, cfg, tr, sp in v2_candidates(tuple(args.tiles)):
        if args.first and (kernel, T, tr, sp) in seen:
            continue
        seen.add((kernel, T, tr, sp))
        r = check_v2(kernel, T, cfg, tr, sp)
        reports.append(r)
        probs = r.problems()
        bad += bool(probs)
        print(f"{r.kernel:12s} T={T:3d} {cfg}: shared {r.shared:6d} B, {r.registers} regs, spills {r.spill_bytes} B, "
              f"tma {r.tma}, wgmma {r.wgmma}, buffers {r.buffers}, {r.seconds:.1f} s  "
              f"{'; '.join(probs) or 'ok'}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in reports], indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
