"""The markdown table of docs/performance.md "Element-sparse peers: torch-sparse", from the JSON
of ``benchmarks/blocksparse.py --mask element`` / ``--mask mnist-random-element``.

    python benchmarks/report_element.py benchmarks/results/blocksparse-cpu-element-2026-11-28-*.json
    python benchmarks/report_element.py --mnist-blocks    # element density of each block of that model

Every time printed is a median read from the JSON (interleaved rounds); the ratios are
computed here from those medians. Ratios below 1: the row is faster than the one it is
divided by.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

IMPLS = ("dense", "masked_dense", "torch_csr", "torch_csr_autograd", "torch_sparse", "seq2d[cpu]")
RATIOS = (("torch_sparse", "masked_dense"), ("torch_sparse", "dense"), ("torch_sparse", "torch_csr"),
          ("torch_csr_autograd", "masked_dense"), ("torch_csr", "masked_dense"))


def _ms(rows: dict, name: str) -> float | None:
    r = rows.get(name)
    return r.get("median_ms") if r and r.get("status") == "ok" else None


def _f(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def table(paths) -> str:
    head = (["threads", "W (rows x cols), batch", "element density", "tiles touched (tile)"]
            + [f"{n} ms" for n in IMPLS] + [f"{a} / {b}" for a, b in RATIOS] + ["other processes", "load (1 min)"])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cases = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        for c in data["cases"]:
            cases.append((data["environment"]["threads"], c))
    cases.sort(key=lambda tc: (tc[0], tc[1].get("mask") != "element", tc[1]["density_actual"]))
    for threads, c in cases:
        t = {n: _ms(c["rows"], n) for n in IMPLS}
        shares = [r["others"] for r in c["rounds"] if r.get("used") and r.get("others") is not None]
        cells = [str(threads), f"{c.get('R', c['N'])} x {c['N']}, {c['batch']}", f"{c['density_actual']:.4f}",
                 f"{c['tile_density']:.4f} ({c['tile']})" if c.get("tile_density") is not None else "no tile layout"]
        cells += [_f(t[n], ".1f") for n in IMPLS]
        cells += [_f(t[a] / t[b] if t[a] and t[b] else None, ".2f") for a, b in RATIOS]
        cells += [f"{100 * statistics.median(shares):.0f}%" if shares else "–", c["loadavg_after"][0]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def mnist_blocks(seed: int = 0) -> str:
    """Element density of each block (output slot x input slot) of the paper's random_element MNIST
    model's dense-store box: the mask blocksparse.py ``--mask mnist-random-element`` times."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from blocksparse import mnist_random_element_box  # noqa: E402
    from seq2d.lab.mnist_comparison import SCALES

    M = mnist_random_element_box(seed)
    sizes = SCALES["full"]["sizes"]
    off = [0]
    for s in sizes:
        off.append(off[-1] + s)
    rows = sizes[1:]  # the box's rows: every slot but the input
    out = [f"| rows \\ columns | " + " | ".join(f"slot {j} ({s})" for j, s in enumerate(sizes)) + " | row |",
           "|" + "---|" * (len(sizes) + 2)]
    r0 = 0
    for i, r in enumerate(rows, start=1):
        blk = [M[r0:r0 + r, off[j]:off[j + 1]].float().mean().item() for j in range(len(sizes))]
        out.append(f"| slot {i} ({r}) | " + " | ".join(f"{d:.3f}" for d in blk)
                   + f" | {M[r0:r0 + r].float().mean().item():.3f} |")
        r0 += r
    out.append(f"\nbox {tuple(M.shape)}: {int(M.sum())} entries, density {M.float().mean().item():.4f}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="*", help="blocksparse.py JSON files (--mask element / mnist-random-element)")
    ap.add_argument("--mnist-blocks", action="store_true",
                    help="print the element density of every block of the random_element MNIST model (seed 0)")
    args = ap.parse_args(argv)
    if args.json:
        print(table(args.json))
    if args.mnist_blocks:
        print(mnist_blocks())
    if not args.json and not args.mnist_blocks:
        ap.error("give JSON files and/or --mnist-blocks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
