"""The GPU machine as found: versions, device facts, and the two ceilings METHOD.md asks for.

Prints one JSON object (also written to ``--json``): python/torch/triton/CUDA/cuDNN/NCCL
versions, the GPU's name, multiprocessors, L2 and memory, whether the GPU benchmark peers
(stanford-stk, blksprs) import, and measured ceilings: a device-to-device copy (bytes read +
written per second) and dense matrix products of 8192^3 on random data in bf16, fp16, tf32
and fp32 (mean of 10 after 3 warm-ups, CUDA events).

    python benchmarks/gpu/env_check.py --json /tmp/env.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys

import torch


def _version(mod: str):
    try:
        m = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - report any import failure as text
        return f"import failed: {type(e).__name__}: {e}"
    return getattr(m, "__version__", "imported (no __version__)")


def _events_ms(fn, warmup=3, reps=10) -> float:
    for _ in range(warmup):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def _copy_tbps(nbytes: int) -> float:
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = _events_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e12


def ceilings() -> dict:
    out = {}
    out["copy_TBps_read_plus_write"] = _copy_tbps(2 ** 30)  # 1 GiB read + 1 GiB written per copy
    M = 8192
    saved = torch.backends.cuda.matmul.allow_tf32
    for name, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                              ("tf32", torch.float32, True), ("fp32", torch.float32, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(M, M, device="cuda").to(dtype)
        b = torch.randn(M, M, device="cuda").to(dtype)
        ms = _events_ms(lambda: a @ b)
        out[f"gemm_{name}_TFLOPs"] = 2 * M ** 3 / (ms * 1e-3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = saved
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-ceilings", action="store_true")
    args = ap.parse_args(argv)
    info = {"python": platform.python_version(), "executable": sys.executable, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "triton": _version("triton"), "stk": _version("stk"), "blksprs": _version("blksprs"),
            "tomli_w": _version("tomli_w"), "seq2d": _version("seq2d")}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                    memory_gib=p.total_memory / 2 ** 30, l2_mib=getattr(p, "L2_cache_size", 0) / 2 ** 20,
                    device_count=torch.cuda.device_count(), cudnn=torch.backends.cudnn.version(),
                    nccl=".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None)
        try:  # the driver (torch does not say it); the first session's env.json lacked it
            import subprocess
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=30).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
        try:
            import seq2d
            info["seq2d_file"] = seq2d.__file__
        except ImportError:
            pass
        if not args.no_ceilings:
            info["ceilings"] = ceilings()
    text = json.dumps(info, indent=1, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
