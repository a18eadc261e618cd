"""The MNIST-1D placement section of docs/results/mnist1d.md, from the committed runs only
(experiments/mnist1d/results/placement/<cell>/seed<k>/row.json; nothing is trained here).

The verdict (issue 33, item 2): each item-2 random cell's seed accuracies against the MLP's and
against the recurrent reference's (the GRU), by a two-sided permutation test of the difference of
means (exact over every relabelling when there are at most ``RESAMPLES`` of them, else that many
random relabellings, seeded), Holm-adjusted across every comparison the verdict rests on (each
random cell x {MLP, GRU}). A cell "behaves like the MLP" when it differs from the GRU (adjusted
p < 0.05) and not from the MLP; "like the recurrent model" the other way round; "like neither"
when it differs from both; "undecided" when it differs from neither. Cells with fewer than
``MIN_SEEDS`` finished seeds are listed, not judged.

    python experiments/mnist1d/placement_report.py                      # writes the section
    python experiments/mnist1d/placement_report.py --doc /tmp/m1d.md      # elsewhere (CI)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RESULTS = HERE / "results" / "placement"
DOC = ROOT / "docs" / "results" / "mnist1d.md"
SECTION = "mnist1d-placement"
RESAMPLES = 20_000
MIN_SEEDS = 10
ALPHA = 0.05
REFERENCES = ("mlp", "gru")


def load_rows(results: Path) -> dict[str, list[dict]]:
    """Finished rows by cell, seeds in order."""
    out: dict[str, list[dict]] = {}
    for f in sorted(results.glob("*/seed*/row.json")):
        r = json.loads(f.read_text())
        out.setdefault(r["cell"], []).append(r)
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in out.items()}


def permutation_p(a, b, resamples: int = RESAMPLES, seed: int = 0) -> float:
    """Two-sided p-value of the difference of means of ``a`` and ``b`` under relabelling: exact
    when the relabellings number at most ``resamples``, else a seeded Monte Carlo estimate
    ((hits + 1) / (resamples + 1))."""
    pooled, na = list(a) + list(b), len(a)
    obs = abs(sum(a) / na - sum(b) / len(b))
    total = sum(pooled)

    def diff(idx):
        sa = sum(pooled[i] for i in idx)
        return abs(sa / na - (total - sa) / (len(pooled) - na))

    eps = 1e-12 * max(1.0, obs)
    if math.comb(len(pooled), na) <= resamples:
        hits = n = 0
        for idx in itertools.combinations(range(len(pooled)), na):
            hits += diff(idx) >= obs - eps
            n += 1
        return hits / n
    rng = random.Random(seed)
    hits = sum(diff(rng.sample(range(len(pooled)), na)) >= obs - eps for _ in range(resamples))
    return (hits + 1) / (resamples + 1)


def holm(p):
    sys.path.insert(0, str(ROOT))
    from seq2d.stats import holm as _holm

    return _holm(p)


def summary(rows: list[dict]) -> dict:
    acc = [100 * r["test_acc"] for r in rows]
    n = len(acc)
    mean = sum(acc) / n
    sd = (sum((x - mean) ** 2 for x in acc) / (n - 1)) ** 0.5 if n > 1 else None
    med = sorted(acc)[n // 2] if n % 2 else sum(sorted(acc)[n // 2 - 1:n // 2 + 1]) / 2
    return {"n": n, "mean": mean, "sd": sd, "median": med, "min": min(acc), "max": max(acc), "acc": acc,
            "params": rows[0]["params"], "epochs": sorted({r["epochs"] for r in rows}),
            "untrained": sum(not r["trained"] for r in rows), "diverged": sum(bool(r.get("diverged")) for r in rows)}


def verdicts(rows: dict[str, list[dict]]) -> dict:
    """Per item-2 random cell: its comparisons with the references and the verdict."""
    judged = [c for c, r in rows.items() if c.endswith("-i3") and len(r) >= MIN_SEEDS]
    refs = [c for c in REFERENCES if len(rows.get(c, [])) >= MIN_SEEDS]
    if len(refs) < len(REFERENCES):
        return {"cells": {}, "missing_references": [c for c in REFERENCES if c not in refs]}
    tests = [(c, ref) for c in judged for ref in refs]
    acc = {c: [100 * r["test_acc"] for r in rows[c]] for c in judged + refs}
    p = [permutation_p(acc[c], acc[ref]) for c, ref in tests]
    adj = holm(p) if p else []
    out: dict = {"cells": {}, "missing_references": []}
    for (c, ref), pi, ai in zip(tests, p, adj):
        d = out["cells"].setdefault(c, {})
        d[ref] = {"diff": sum(acc[c]) / len(acc[c]) - sum(acc[ref]) / len(acc[ref]), "p": pi, "p_holm": ai}
    for c, d in out["cells"].items():
        m, g = d["mlp"]["p_holm"] < ALPHA, d["gru"]["p_holm"] < ALPHA
        d["verdict"] = {(False, True): "like the MLP", (True, False): "like the recurrent model",
                        (True, True): "like neither", (False, False): "undecided"}[(m, g)]
    return out


def render(rows: dict[str, list[dict]], order: list[str]) -> str:
    if not rows:
        return "No finished MNIST-1D placement runs are committed yet (experiments/mnist1d/placement.py).\n"
    s = {c: summary(r) for c, r in rows.items()}
    v = verdicts(rows)
    lines = ["| cell | parameters | seeds | epochs | test accuracy, mean ± sd (%) | median | range | verdict |",
             "| --- | ---: | ---: | --- | ---: | ---: | --- | --- |"]
    for c in [c for c in order if c in s] + sorted(set(s) - set(order)):
        x = s[c]
        sd = f" ± {x['sd']:.2f}" if x["sd"] is not None else ""
        verdict = v["cells"].get(c, {}).get("verdict", "")
        note = f" ({x['untrained']} untrained: empty output row)" if x["untrained"] else ""
        lines.append(f"| {c}{note} | {x['params']:,} | {x['n']} | {'/'.join(map(str, x['epochs']))} | {x['mean']:.2f}{sd} | "
                     f"{x['median']:.2f} | {x['min']:.1f} to {x['max']:.1f} | {verdict} |")
    out = "\n".join(lines) + "\n"
    if v["cells"]:
        out += ("\nComparisons (difference of means in points; two-sided permutation p, Holm-adjusted over "
                f"{2 * len(v['cells'])} comparisons):\n\n| cell | vs MLP | p (Holm) | vs GRU | p (Holm) |\n"
                "| --- | ---: | ---: | ---: | ---: |\n")
        for c, d in v["cells"].items():
            out += (f"| {c} | {d['mlp']['diff']:+.2f} | {d['mlp']['p_holm']:.3g} | {d['gru']['diff']:+.2f} | "
                    f"{d['gru']['p_holm']:.3g} |\n")
    else:
        out += (f"\nNo verdict yet: it needs >= {MIN_SEEDS} seeds in the MLP, the GRU and each random cell "
                f"(missing references: {', '.join(v['missing_references']) or 'none'}).\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--doc", default=str(DOC))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    from placement import cells

    from seq2d.results_page import write_section

    rows = load_rows(Path(a.results))
    write_section(a.doc, SECTION, render(rows, [c["cell"] for c in cells()]), title="# MNIST-1D")
    print(f"{sum(map(len, rows.values()))} run(s) in {len(rows)} cell(s) -> {a.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
