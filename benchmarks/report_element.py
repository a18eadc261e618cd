"""The markdown table of docs/performance.md "Element-sparse peers: torch-sparse", from the JSON
of ``benchmarks/blocksparse.py --mask element`` / ``--mask mnist-random-element``.

    python benchmarks/report_element.py benchmarks/results/blocksparse-cpu-element-2026-11-28-*.json

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="blocksparse.py JSON files (--mask element / mnist-random-element)")
    args = ap.parse_args(argv)
    print(table(args.json))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
