"""Why the model step of ``kernel_probe.py`` is far from its kernel even replayed from a CUDA
graph: the operators each step launches, counted (no timing, so any machine answers).

A replayed CUDA graph removes the host's launch cost but not the device's: every small kernel
still takes a few microseconds, so a step of a few hundred small operators costs about a
millisecond whatever its bytes. This script counts the ATen operators (forward and backward, by
name, through a ``TorchDispatchMode``) of the four steps the probe compares, on the probe's model
(``model_step_cuda.Setting``: ``--slots`` slots of ``N / slots`` features, block density
``--density``, tile ``--tile``, relu, bias, one Jacobi step):

- ``probe step``: ``model.step`` on the list state and the benchmark's loss, one term per
  reached slot (what ``kernel_probe.py``'s ``graph_ms`` replays);
- ``loss alone``: that per-slot loss on ready outputs;
- ``flat step``: ``model.step_flat`` on a flat state with one loss term (``flat_graph_ms``);
- ``kernel``: ``bsmm`` with one loss term (``kernel_graph_ms``).

The operator count does not depend on the batch or the device (the Triton kernels are one
``bsmm`` / ``bsmm_backward`` operator each, as the CPU kernel is), so a CPU answers for the GPU.

    python benchmarks/gpu/step_ops.py --json benchmarks/results/step_ops-cpu-2026-11-29.json --doc docs/performance.md
    python benchmarks/gpu/step_ops.py --from-json benchmarks/results/step_ops-cpu-2026-11-29.json --doc docs/performance.md
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from seq2d.results_page import from_json, write_section  # noqa: E402

SECTION = "gpu-step-ops"
# operators that only make views, metadata or allocations (no kernel on a GPU)
NO_KERNEL = {"detach", "expand", "select", "slice", "split_with_sizes", "view", "t", "transpose", "unsqueeze",
             "squeeze", "as_strided", "_unsafe_view", "alias", "split", "reshape", "empty", "empty_like",
             "empty_strided", "new_empty", "new_empty_strided"}


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def count(step, params) -> dict:
    """Operators of one call of ``step`` (after a warm-up call that builds the model's plans)."""
    for _ in range(2):
        for p in params:
            p.grad = None
        with _Count() as c:
            step()
    ops = dict(c.ops.most_common())
    return {"ops": ops, "total": sum(ops.values()), "kernels": sum(v for k, v in ops.items() if k not in NO_KERNEL)}


def measure(N: int, batch: int, slots: int, density: float, tile: int, seed: int = 0) -> dict:
    from model_step_cuda import Setting

    t0 = time.perf_counter()
    s = Setting(N, batch, slots, density, seed, torch.float32, torch.device("cpu"), tile)
    build = time.perf_counter() - t0
    outs = [torch.randn(batch, s.S, requires_grad=True) if i in s.reached else None for i in range(s.n)]
    loss_alone = (lambda: s._loss(outs).backward(), [o for o in outs if o is not None])
    steps = {"probe step": s.impl("tiled"), "loss alone": loss_alone, "flat step": s.impl("tiled_flat"),
             "kernel": s.impl("kernel")}
    return {"setting": {"N": N, "batch": batch, "slots": slots, "density": density, "tile": s.tile,
                        "reached_slots": len(s.reached), "stored_tiles": s.layout.nnz, "kernel": s.matrix.kernel,
                        "build_s": round(build, 1)},
            "steps": {name: count(*fn) for name, fn in steps.items()}}


def report(record: dict) -> str:
    st, steps = record["setting"], record["steps"]
    top = lambda d: ", ".join(f"`{k}` {v}" for k, v in list(d["ops"].items())[:6])  # noqa: E731
    lines = [f"Counted by `{record['command']}` ({record['torch']}, {record['date']}): the probe's model, "
             f"{st['slots']} slots of {st['N'] // st['slots']} features ({st['reached_slots']} with a block in their "
             f"row), block density {st['density']:g}, tile {st['tile']}, {st['stored_tiles']} stored tiles; ATen "
             "operators of one forward + backward, by name (views, metadata and allocations launch no kernel on a "
             "GPU: the kernels column leaves them out).", "",
             "| step | operators | of them kernels | most frequent |", "| --- | ---: | ---: | --- |"]
    for name, d in steps.items():
        lines.append(f"| {name} | {d['total']} | {d['kernels']} | {top(d)} |")
    p, l, f, k = (steps[n] for n in ("probe step", "loss alone", "flat step", "kernel"))
    lines += ["", f"The probe's step launches {p['kernels']} kernels where the kernel's harness launches {k['kernels']}; "
              f"{l['kernels']} of them are the benchmark's own per-slot loss, and the model on a flat state with one "
              f"loss term launches {f['kernels']}. The model step target (<= 1.2x the kernel) compares a step of "
              f"{p['kernels']} kernels with one of {k['kernels']}: the next GPU session times the flat step "
              "(`kernel_probe.py`'s `flat_graph_ms`), the comparison the target means."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64, help="the count does not depend on it (default 64: quick)")
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--density", type=float, default=0.25)
    ap.add_argument("--tile", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="a small model (N 256, 8 slots, tile 16): CI's plumbing run")
    ap.add_argument("--json", help="write the counts here")
    ap.add_argument("--doc", help=f"write the '{SECTION}' section of this page")
    ap.add_argument("--from-json", help="no counting: render (and with --doc write) this JSON")
    args = ap.parse_args(argv)
    if args.from_json:
        from_json(args.from_json, report, args.doc, SECTION)
        return 0
    if args.quick:
        args.N, args.slots, args.tile, args.batch = 256, 8, 16, 4
    torch.set_num_threads(1)
    record = {"command": " ".join(["python", "benchmarks/gpu/step_ops.py", *(argv if argv is not None else sys.argv[1:])]),
              "torch": f"torch {torch.__version__}", "date": time.strftime("%Y-%m-%d", time.gmtime()),
              **measure(args.N, args.batch, args.slots, args.density, args.tile)}
    text = report(record)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    if args.doc:
        write_section(args.doc, SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
