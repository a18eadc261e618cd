"""``benchmarks/blocksparse.py`` with tf32 matrix products switched on (the "tf32 row").

blocksparse.py has no precision flag: float32 there means IEEE fp32 everywhere (torch's
default ``allow_tf32 = False`` for cuBLAS, and seq2d's Triton kernels follow the same switch).
This wrapper turns tf32 on for cuBLAS (``dense``, ``masked_dense``, ``seq2d[dense]``) and for
seq2d's Triton kernels, then runs blocksparse.py's ``main`` with the same arguments; run it
with ``--dtype float32``. The JSON's environment does not say tf32: name the file so.

    python benchmarks/gpu/blocksparse_tf32.py --device cuda --dtype float32 --N 8192 --batch 8192 \
        --tile 64 --json /tmp/blocksparse-cuda-tf32.json
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import blocksparse  # noqa: E402

if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print("# tf32: torch.backends.cuda.matmul.allow_tf32 = True (cuBLAS and seq2d's Triton fp32 dots)")
    raise SystemExit(blocksparse.main())
