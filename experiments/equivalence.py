"""Measured max abs errors of every seq2d constructor against its torch.nn reference.

    python experiments/equivalence.py [--seeds 5] [--json out.json]

Runs the case table of seq2d.equivalence (outputs, input gradient, parameter gradients;
float32 and float64) over several seeds and prints the worst error per case. The
tolerances the test suite enforces are 1e-5 (float32) and 1e-10 (float64).
"""

from __future__ import annotations

import argparse
import json
import platform

import torch

from seq2d.equivalence import CASES, TOLERANCE, compare


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="seeds per case (default 5)")
    ap.add_argument("--quick", action="store_true", help="one seed (CI)")
    ap.add_argument("--json", help="write the table as JSON here")
    args = ap.parse_args(argv)
    seeds = 1 if args.quick else args.seeds
    rows = []
    ok = True
    for case in CASES:
        row = {"case": case.name}
        for dtype, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
            worst = max(max(compare(case, dtype, s).values()) for s in range(seeds))
            row[tag] = worst
            ok &= worst <= TOLERANCE[dtype]
        rows.append(row)
    print(f"max abs error vs torch.nn (outputs and gradients), worst of {seeds} seed(s); "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}")
    print(f"{'case':<46}{'float32':>12}{'float64':>12}")
    for r in rows:
        print(f"{r['case']:<46}{r['f32']:>12.2e}{r['f64']:>12.2e}")
    print(f"tolerance: float32 {TOLERANCE[torch.float32]:.0e}, float64 {TOLERANCE[torch.float64]:.0e}: {'all within' if ok else 'EXCEEDED'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seeds": seeds, "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
