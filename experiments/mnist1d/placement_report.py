"""docs/results/mnist1d.md (issue 33, items 2, 4, 5 and 6) from the committed files only:
experiments/mnist1d/results/baselines.json and experiments/mnist1d/results/placement/
(<cell>/seed<k>/{row.json, metrics.jsonl, dynamics.json}, connectivity.json). Nothing is trained here.

The rules are fixed here, before any grid run is read (they are printed on the page):

- :data:`VERDICT_RULE` (item 2): each item-2 random cell against the MLP and the recurrent
  reference (the GRU): a two-sided permutation test of the difference of means (exact when the
  relabellings number at most :data:`RESAMPLES`, else that many seeded random ones) and an
  equivalence test within :data:`MARGIN` points (two one-sided percentile-bootstrap tests,
  :func:`equivalence_p`); Holm across the cells, one family per kind of test.
- :data:`COUNT_RULE`: the seeds at chance (<= :data:`LEARNS` %) counted per cell, with the draws'
  connectivity counts, and a Fisher exact test of each cell's count against the MLP's (Holm): a
  bimodal cell is described by counts, not by a mean alone.
- :data:`ITERATION_RULE` (item 4) and :data:`SPECTRUM_RULE` (item 5).

The permutation tests are ``scipy.stats.permutation_test``'s (since 2026-11-30; before, a pure-Python
sampler of the same tests: the seeded Monte Carlo p-values on the page moved within that noise, e.g.
0.00005 -> 0.00015 where no relabelling comes near, and no verdict changed).

A cell with fewer than :data:`MIN_SEEDS` finished seeds is listed as pending and enters no
verdict; a finished trained run without its metrics.jsonl is an error (never a gap or an empty
plot).

    python experiments/mnist1d/placement_report.py                          # the page and its pictures
    python experiments/mnist1d/placement_report.py --doc /tmp/m1d.md          # elsewhere (CI)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RESULTS = HERE / "results" / "placement"
BASELINES = HERE / "results" / "baselines.json"
DOC = ROOT / "docs" / "results" / "mnist1d.md"
COMMAND = "python experiments/mnist1d/placement_report.py"
SECTION = "mnist1d-placement"
RESAMPLES = 20_000
BOOTSTRAP = 10_000
MIN_SEEDS = 10
ALPHA = 0.05
MARGIN = 2.0  # points: about the test set's binomial SE at the MLP's 66% (1.5) and the MLP's seed sd (1.81)
LEARNS = 20.0  # percent: a run at or below this is "at chance" (chance is 10%)
WITHIN = 1.0  # points: "needs t iterations" = the first t within this of the best (item 4), or of the run's own (item 5)
REFERENCES = ("mlp", "gru")
SETTLE_RHO = 0.5  # item 5: the smallest Spearman correlation called a prediction
VERDICT_RULE = (
    f"A random cell behaves **like the MLP** when its mean test accuracy is equivalent to the MLP's within "
    f"{MARGIN:g} points (two one-sided percentile-bootstrap tests, {BOOTSTRAP:,} seeded resamples of the seeds of "
    f"each cell, Holm-adjusted p < {ALPHA}) and differs from the GRU's (two-sided permutation test of the "
    f"difference of means, Holm-adjusted p < {ALPHA}); **like the recurrent model** the other way round "
    f"(equivalent to the GRU, different from the MLP); **like neither** when it differs from both; "
    f"**undecided** otherwise. Equivalence is checked first. Holm runs over every random item-2 cell, one family for "
    f"the difference tests and one for the equivalence tests (2 per cell each). The recurrent reference is the "
    f"torch.nn GRU (the item's reference); the seq2d RNN forms are listed beside it. A placement's answer is the "
    f"verdict its four item-2 cells (hidden width 100 and 176, region default and no-shortcut) share; "
    f"'mixed' when they differ. Cells with fewer than {MIN_SEEDS} finished seeds are pending and judged nowhere.")
COUNT_RULE = (
    f"A run at or below {LEARNS:g}% test accuracy is at chance. Per random cell: the draws' connectivity counts "
    f"(connectivity.json: of the untrained draws, how many leave the output row empty / have no input -> output "
    f"walk within the iterations), the trained seeds at chance, the mean of the seeds above chance, and a "
    f"two-sided Fisher exact test of the at-chance count against the MLP's (Holm over the cells). A cell with "
    f"seeds on both sides is bimodal: its mean describes neither mode.")
ITERATION_RULE = (
    f"Item 4: per random placement and width (default region) the seed-mean test accuracy at 1..8 iterations, "
    f"and for the RNN form the truncated RNN at k = 1..8 (and, added after the grid's truncated RNNs all stayed at "
    f"chance at lr 0.01, the same windows at lr 0.001: family 'trnn at lr 0.001 (added)'). A family **needs t iterations** when t is the first "
    f"count whose seed-mean is within {WITHIN:g} point of the family's best seed-mean over 1..8; pending "
    f"until all eight cells have {MIN_SEEDS} seeds.")
SPECTRUM_RULE = (
    f"Item 5: each trained Sequential2D run's dynamics.json (experiments/mnist1d/placement.py, seq2d.dynamics on "
    f"a fixed batch of test inputs). A run **needs s steps** when s is the first readout step whose test "
    f"accuracy is within {WITHIN:g} point of its accuracy after its own iteration count t (the "
    f"test_acc_by_steps curve; s <= t). The question 'does the spectral radius predict how many iterations a "
    f"placement needs?' is answered on the random runs trained at t = 8 (the longest: room for s to vary): "
    f"**yes** when the Spearman correlation between the Jacobian's spectral radius at the 16th step (mean over "
    f"the batch) and s is at least {SETTLE_RHO:g} with a one-sided permutation p < {ALPHA} "
    f"({RESAMPLES:,} seeded relabellings); **no** otherwise; pending until every t = 8 random cell has "
    f"{MIN_SEEDS} runs with their dynamics.")


# ---------------------------------------------------------------------- reading
def _placement():
    """experiments/mnist1d/placement.py (the grid's cells and constants) as a module."""
    for d in (str(ROOT), str(HERE)):
        if d not in sys.path:
            sys.path.insert(0, d)
    import placement

    return placement


def load_rows(results: Path) -> dict[str, list[dict]]:
    """Finished rows by cell, seeds in order, each with its test-accuracy curve (``curve``, %) and
    its ``dynamics`` (None when the run has no dynamics.json). A trained run without its
    metrics.jsonl, or with a curve of another length than its epochs, is an error."""
    sys.path.insert(0, str(ROOT))
    from seq2d.train import read_metrics

    out: dict[str, list[dict]] = {}
    for f in sorted(results.glob("*/seed*/row.json")):
        r = json.loads(f.read_text())
        curve = []
        if r["trained"] and r["epochs"]:
            if not (f.parent / "metrics.jsonl").is_file():
                raise FileNotFoundError(f"{f.parent / 'metrics.jsonl'} is missing: the run's row.json is committed "
                                        "without its learning curve (copy the run with experiments/mnist1d/"
                                        "placement.py --collect)")
            curve = [100 * m["test_acc"] for m in read_metrics(f.parent) if "test_acc" in m]
            if len(curve) != r["epochs"]:
                raise ValueError(f"{f.parent / 'metrics.jsonl'} has {len(curve)} test evaluations, its row.json "
                                 f"says {r['epochs']} epochs")
        dyn, mach = f.parent / "dynamics.json", f.parent / "machine.json"
        out.setdefault(r["cell"], []).append({**r, "curve": curve,
                                              "dynamics": json.loads(dyn.read_text()) if dyn.is_file() else None,
                                              "machine": json.loads(mach.read_text()) if mach.is_file() else None})
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in out.items()}


def accs(rows: list[dict]) -> list[float]:
    return [100 * r["test_acc"] for r in rows]


def summary(rows: list[dict]) -> dict:
    a = accs(rows)
    n = len(a)
    return {"n": n, "mean": statistics.fmean(a), "sd": statistics.stdev(a) if n > 1 else None,
            "median": statistics.median(a), "min": min(a), "max": max(a), "params": rows[0]["params"],
            "epochs": sorted({r["epochs"] for r in rows}), "untrained": sum(not r["trained"] for r in rows),
            "diverged": sum(bool(r.get("diverged")) for r in rows), "chance": sum(x <= LEARNS for x in a)}


# ---------------------------------------------------------------------- statistics
def permutation_p(a, b, resamples: int = RESAMPLES, seed: int = 0) -> float:
    """Two-sided p-value of the difference of means of ``a`` and ``b`` under relabelling
    (``scipy.stats.permutation_test`` of ``|mean(a) - mean(b)|``): exact when the relabellings
    number at most ``resamples``, else a seeded Monte Carlo estimate ((hits + 1) / (resamples + 1))."""
    import numpy as np
    from scipy import stats

    def gap(x, y, axis):
        return np.abs(np.mean(x, axis=axis) - np.mean(y, axis=axis))

    return float(stats.permutation_test((np.asarray(a, float), np.asarray(b, float)), gap, vectorized=True,
                                        n_resamples=resamples, alternative="greater", rng=seed).pvalue)


def equivalence_p(a, b, margin: float = MARGIN, resamples: int = BOOTSTRAP, seed: int = 0) -> float:
    """p of "|mean(a) - mean(b)| >= margin" by two one-sided percentile-bootstrap tests (each
    sample resampled with replacement, seeded): the larger of the fractions of resampled
    differences at or below ``-margin`` and at or above ``+margin``, (hits + 1) / (resamples + 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    d = (xa[rng.integers(0, len(xa), (resamples, len(xa)))].mean(1)
         - xb[rng.integers(0, len(xb), (resamples, len(xb)))].mean(1))
    low, high = int((d <= -margin).sum()), int((d >= margin).sum())
    return (max(low, high) + 1) / (resamples + 1)


def holm(p):
    sys.path.insert(0, str(ROOT))
    from seq2d.stats import holm as _holm

    return _holm(p)


def spearman_p(x, y, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Spearman's rank correlation of ``x`` and ``y`` (average ranks for ties) and its one-sided
    (positive) permutation p-value (``scipy.stats.permutation_test`` pairing ``y`` with ``x`` anew;
    exact when the pairings number at most ``resamples``, else seeded Monte Carlo)."""
    import numpy as np
    from scipy import stats

    rx = stats.rankdata(np.asarray(x, float))
    rx = rx - rx.mean()

    def rho(y, axis=-1):
        ry = stats.rankdata(y, axis=axis)
        ry = ry - ry.mean(axis=axis, keepdims=True)
        den = np.sqrt((rx ** 2).sum() * (ry ** 2).sum(axis=axis))
        return np.where(den > 0, (rx * ry).sum(axis=axis) / np.where(den > 0, den, 1), 0.0)

    res = stats.permutation_test((np.asarray(y, float),), rho, permutation_type="pairings", vectorized=True,
                                 n_resamples=resamples, alternative="greater", rng=seed)
    return float(res.statistic), float(res.pvalue)


# ---------------------------------------------------------------------- item 2
def item2_cells(grid: list[dict]) -> list[str]:
    return [c["cell"] for c in grid if c["family"] == "random" and c["iterations"] == _placement().ITERATIONS]


def verdicts(rows: dict[str, list[dict]], judged_cells: list[str]) -> dict:
    """Per item-2 random cell with enough seeds: its tests against the references and its verdict
    (:data:`VERDICT_RULE`); ``pending``: the cells (references included) short of seeds."""
    ready = lambda c: len(rows.get(c, [])) >= MIN_SEEDS  # noqa: E731
    pending = [c for c in (*REFERENCES, *judged_cells) if not ready(c)]
    out: dict = {"cells": {}, "pending": pending}
    if any(not ready(r) for r in REFERENCES):
        return out
    judged = [c for c in judged_cells if ready(c)]
    tests = [(c, ref) for c in judged for ref in REFERENCES]
    a = {c: accs(rows[c]) for c in [*judged, *REFERENCES]}
    p_diff = [permutation_p(a[c], a[ref]) for c, ref in tests]
    p_eq = [equivalence_p(a[c], a[ref]) for c, ref in tests]
    for (c, ref), pd, hd, pe, he in zip(tests, p_diff, holm(p_diff) if tests else [], p_eq,
                                        holm(p_eq) if tests else []):
        out["cells"].setdefault(c, {})[ref] = {"diff": statistics.fmean(a[c]) - statistics.fmean(a[ref]),
                                               "p": pd, "p_holm": hd, "p_eq": pe, "p_eq_holm": he}
    for c, d in out["cells"].items():
        eq_m, eq_g = d["mlp"]["p_eq_holm"] < ALPHA, d["gru"]["p_eq_holm"] < ALPHA
        df_m, df_g = d["mlp"]["p_holm"] < ALPHA, d["gru"]["p_holm"] < ALPHA
        d["verdict"] = ("like the MLP" if eq_m and df_g else "like the recurrent model" if eq_g and df_m
                        else "like neither" if df_m and df_g else "undecided")
    return out


def distances_text(v: dict, rows: dict[str, list[dict]], grid: list[dict], n: int) -> str:
    """The verdict in numbers: per placement the range of its item-2 cells' mean differences from
    the MLP and from the GRU, and the closest any random cell comes to the GRU (``n``: test digits)."""
    from seq2d.stats import binomial_se

    P = _placement()
    parts, gru_gaps = [], []
    for p in P.PLACEMENTS:
        cs = [c["cell"] for c in grid if c["family"] == "random" and c["placement"] == p
              and c["iterations"] == P.ITERATIONS and c["cell"] in v["cells"]]
        if not cs:
            continue
        dm = [v["cells"][c]["mlp"]["diff"] for c in cs]
        dg = [v["cells"][c]["gru"]["diff"] for c in cs]
        gru_gaps += dg
        parts.append(f"{p} {min(dm):+.2f} to {max(dm):+.2f} from the MLP and {min(dg):+.2f} to {max(dg):+.2f} from the GRU")
    mlp, gru = (statistics.fmean(accs(rows[r])) for r in ("mlp", "gru"))
    return (f"In numbers (mean difference in points of the four cells of each placement): " + "; ".join(parts)
            + f". No random cell comes within {-max(gru_gaps):.2f} points of the GRU ({gru:.2f}%); the MLP reaches "
            f"{mlp:.2f}%, where one run's binomial error on the {n:,} test digits is "
            f"{100 * binomial_se(mlp / 100, n):.2f} points.\n")


def answers(v: dict, grid: list[dict]) -> dict[str, str]:
    """Per placement: the verdict its four item-2 cells share, 'mixed', or 'pending'."""
    P = _placement()
    out = {}
    for p in P.PLACEMENTS:
        cs = [c["cell"] for c in grid if c["family"] == "random" and c["placement"] == p and c["iterations"] == P.ITERATIONS]
        got = [v["cells"].get(c, {}).get("verdict") for c in cs]
        out[p] = ("pending" if None in got else got[0] if len(set(got)) == 1
                  else "mixed (" + ", ".join(f"{c}: {g}" for c, g in zip(cs, got)) + ")")
    return out


def counts(rows: dict[str, list[dict]], cells: list[str], connectivity: dict) -> list[dict]:
    """:data:`COUNT_RULE` per random cell with runs."""
    from scipy.stats import fisher_exact

    mlp = summary(rows["mlp"]) if rows.get("mlp") else None
    out = []
    for c in cells:
        if c not in rows:
            continue
        s = summary(rows[c])
        above = [x for x in accs(rows[c]) if x > LEARNS]
        d = {"cell": c, "n": s["n"], "chance": s["chance"], "untrained": s["untrained"],
             "no_walk": sum(not r.get("input_reaches_output", True) for r in rows[c]),
             "mean_above": statistics.fmean(above) if above else None, "conn": connectivity.get(c), "p": None}
        if mlp is not None and s["n"] >= MIN_SEEDS and mlp["n"] >= MIN_SEEDS:
            d["p"] = float(fisher_exact([[s["chance"], s["n"] - s["chance"]], [mlp["chance"], mlp["n"] - mlp["chance"]]])[1])
        out.append(d)
    tested = [d for d in out if d["p"] is not None]
    for d, h in zip(tested, holm([d["p"] for d in tested]) if tested else []):
        d["p_holm"] = h
    return out


# ---------------------------------------------------------------------- items 4 and 5
def iteration_families(grid: list[dict]) -> dict[str, dict[int, str]]:
    """Family label -> {iterations: cell}: each random placement x width (default region), and the
    truncated RNN (k = 1..8)."""
    SWEEP = _placement().SWEEP
    fam: dict[str, dict[int, str]] = {}
    for c in grid:
        if c["family"] == "random" and c["region"] == "default" and c["iterations"] in SWEEP:
            fam.setdefault(f"{c['placement']}-h{c['sizes'][1]}", {})[c["iterations"]] = c["cell"]
        elif c["family"] == "trnn" and c["iterations"] in SWEEP:
            label = f"trnn at lr {c['lr']:g} (added)" if c.get("added") else "trnn (RNN form, window k)"
            fam.setdefault(label, {})[c["iterations"]] = c["cell"]
    return {k: dict(sorted(v.items())) for k, v in fam.items()}


def needs(means: dict[int, float]) -> int:
    best = max(means.values())
    return min(t for t, m in means.items() if m >= best - WITHIN)


def run_needs(dyn: dict) -> int | None:
    """Item 5: the first readout step within WITHIN of the run's accuracy after its own count."""
    curve = dyn.get("test_acc_by_steps")
    if not curve:
        return None
    t = dyn["iterations"]
    own = 100 * curve[t - 1]
    return min(s for s in range(1, t + 1) if abs(100 * curve[s - 1] - own) <= WITHIN)


def spectrum_rows(rows: dict[str, list[dict]], fams: dict[str, dict[int, str]]) -> list[dict]:
    """Per random item-4 cell: the medians over its runs' dynamics."""
    out = []
    for fam, by_t in fams.items():
        for t, c in by_t.items():
            runs = rows.get(c, [])
            dyn = [r["dynamics"] for r in runs if r["dynamics"] is not None]
            d = {"family": fam, "t": t, "cell": c, "runs": len(runs), "with": len(dyn)}
            if dyn and "jacobian_radius_at_horizon" in dyn[0]:
                d.update(rho=statistics.median(x["jacobian_radius_at_horizon"]["mean"] for x in dyn),
                         rho_t=statistics.median(x["jacobian_radius_at_iterations"]["mean"] for x in dyn),
                         dmd=statistics.median(x["dmd_spectral_radius"] for x in dyn),
                         err=statistics.median(x["dmd_reconstruction_error"] for x in dyn),
                         s=statistics.median(run_needs(x) for x in dyn))
            elif dyn and dyn[0].get("family") in ("rnn", "trnn"):
                r = [x["recurrent_jacobian_radius"]["mean"] for x in dyn if x["recurrent_jacobian_radius"]]
                d.update(rho=statistics.median(r) if r else None)
            out.append(d)
    return out


def spectrum_verdict(rows: dict[str, list[dict]], fams: dict[str, dict[int, str]]) -> dict:
    SWEEP = _placement().SWEEP
    cells = [by_t[max(SWEEP)] for fam, by_t in fams.items() if not fam.startswith("trnn")]
    ready = [c for c in cells if sum(r["dynamics"] is not None for r in rows.get(c, [])) >= MIN_SEEDS]
    if len(ready) < len(cells):
        return {"pending": [c for c in cells if c not in ready]}
    pts = [(r["dynamics"]["jacobian_radius_at_horizon"]["mean"], run_needs(r["dynamics"]))
           for c in cells for r in rows[c] if r["dynamics"] is not None]
    rho, p = spearman_p([x for x, _ in pts], [y for _, y in pts])
    return {"pending": [], "n": len(pts), "spearman": rho, "p": p,
            "answer": "yes" if rho >= SETTLE_RHO and p < ALPHA else "no"}


# ---------------------------------------------------------------------- pictures
def plot_iterations(rows, fams, path: Path) -> bool:
    """Seed-mean test accuracy against iterations, one line per family whose eight cells are all
    complete (>= MIN_SEEDS seeds); nothing is drawn (False) when no family is."""
    sys.path.insert(0, str(ROOT))
    from seq2d.plot.common import new_figure, save_figure

    full = {f: by_t for f, by_t in fams.items() if all(len(rows.get(c, [])) >= MIN_SEEDS for c in by_t.values())}
    if not full:
        return False
    fig, ax = new_figure((7, 4.5))
    for i, (fam, by_t) in enumerate(full.items()):
        ts = list(by_t)
        m = [statistics.fmean(accs(rows[by_t[t]])) for t in ts]
        sd = [statistics.stdev(accs(rows[by_t[t]])) for t in ts]
        ax.errorbar(ts, m, yerr=sd, marker="o", capsize=3, label=fam, color=f"C{i}")
    ax.set_xlabel("iterations t (truncation window k for the RNN form)")
    ax.set_ylabel("test accuracy (%), seed mean ± sd")
    ax.set_title(f"MNIST-1D: accuracy vs iterations ({MIN_SEEDS}+ seeds per point)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, 110)
    return True


# ---------------------------------------------------------------------- the page
def machines_text(rows: dict[str, list[dict]]) -> str:
    """The "Trained on ..." line (experiments/placement/grid.py, shared with the MNIST study's page)."""
    return _placement().grid.machines_text(rows)


def _pm(s: dict) -> str:
    return f"{s['mean']:.2f}" + (f" ± {s['sd']:.2f}" if s["sd"] is not None else "")


def _p(p) -> str:
    return "" if p is None else f"{p:.3g}"


def baselines_text(base: dict) -> str:
    from seq2d.stats import binomial_se

    n = base["data"]["n_test"]
    lines = ["| model | sizes | parameters | seeds | test accuracy, mean ± sd (%) | published | binomial SE of one run |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, m in base["models"].items():
        lines.append(f"| {name} | {m['sizes']} | {m['params']:,} | {len(m['seeds'])} | {m['mean']:.2f} ± {m['std']:.2f} | "
                     f"~{m['published']:g} | {100 * binomial_se(m['mean'] / 100, n):.2f} |")
    se = ", ".join(f"{100 * binomial_se(a / 100, n):.2f} points at {a}%" for a in (32, 66, 91))
    return ("\n".join(lines) + "\n\n"
            f"From experiments/mnist1d/results/baselines.json ({base['epochs']} epochs, Adam lr "
            f"{base['protocol']['lr']:g}, batch {base['protocol']['batch_size']}; the published numbers: "
            f"{base['published_source']}). The test set holds {n:,} digits: one run's accuracy carries a binomial "
            f"standard error sqrt(p (1 - p) / {n}) of {se}. Every run is scored on the same {n:,} digits, so a seed "
            f"mean does not average that error away: differences between cells below about 2 points are within "
            f"what another draw of the test set could move.\n")


def render(rows: dict[str, list[dict]], grid: list[dict], connectivity: dict, base: dict, pictures: Path,
           rel: str) -> str:
    order = [c["cell"] for c in grid]
    i2 = item2_cells(grid)
    v = verdicts(rows, i2)
    ans = answers(v, grid)
    fams = iteration_families(grid)
    sv = spectrum_verdict(rows, fams)
    out = ["## Verdict\n"]
    if v["pending"]:
        out.append(f"**No verdict yet.** Item 2 asks whether random placement at the MLP's trainable-parameter count "
                   f"behaves like the MLP, like the recurrent model, or like neither; the answer needs "
                   f">= {MIN_SEEDS} finished seeds in the MLP, the GRU and each of the {len(i2)} random item-2 cells. "
                   f"Pending ({len(v['pending'])} cells): {', '.join(v['pending'])}.\n")
    else:
        out.append("**Item 2: does random placement at equal parameter count behave like the MLP, like the recurrent "
                   "model, or like neither?** " + "; ".join(f"{p}: **{a}**" for p, a in ans.items()) + ".\n")
        out.append(distances_text(v, rows, grid, base["data"]["n_test"]))
    if sv["pending"]:
        out.append(f"**Item 5: no answer yet** on whether the spectral radius predicts the iterations a placement "
                   f"needs (pending: {', '.join(sv['pending'])}).\n")
    else:
        out.append(f"**Item 5: does the spectral radius predict how many iterations a placement needs?** "
                   f"**{sv['answer']}** (Spearman {sv['spearman']:+.2f} over {sv['n']} runs, one-sided permutation "
                   f"p {_p(sv['p'])}).\n")
    out.append("## The rules (fixed before the grid ran)\n\n- " + "\n- ".join(
        [VERDICT_RULE, COUNT_RULE, ITERATION_RULE, SPECTRUM_RULE]) + "\n")
    out.append("## Baselines (item 1)\n\n" + baselines_text(base))
    # item 2 table
    out.append("## Item 2: every cell\n")
    if not rows:
        out.append("No finished MNIST-1D placement runs are committed yet (experiments/mnist1d/placement.py).\n")
    else:
        lines = ["| cell | parameters | seeds | epochs | test accuracy, mean ± sd (%) | median | range | at chance | diverged | "
                 "verdict |", "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | --- |"]
        for c in [c for c in order if c in rows] + sorted(set(rows) - set(order)):
            s = summary(rows[c])
            verdict = v["cells"].get(c, {}).get("verdict", "pending" if c in v["pending"] else "")
            lines.append(f"| {c} | {s['params']:,} | {s['n']} | {'/'.join(map(str, s['epochs']))} | {_pm(s)} | "
                         f"{s['median']:.2f} | {s['min']:.1f} to {s['max']:.1f} | {s['chance']} | {s['diverged']} | "
                         f"{verdict} |")
        out.append("\n".join(lines) + "\n")
        div = [(c, r) for c in rows for r in rows[c] if r.get("diverged")]
        if div:
            import dataclasses

            from seq2d.train import TrainConfig

            factor = next(f.default for f in dataclasses.fields(TrainConfig) if f.name == "divergence_factor")
            out.append(f"Diverged ({len(div)} run(s): " + ", ".join(f"{c} seed {r['seed']} after {r['epochs']} epochs"
                                                                for c, r in div) +
                       f"): the Trainer's divergence check (smoothed training loss above {factor:g} x its lowest) stopped "
                       "them; placement.py records such a run as it stopped, not retried, and scores it with the "
                       "weights it had then (mid-epoch, not its last good checkpoint); its accuracy counts in its "
                       "cell like any other seed.\n")
        out.append(machines_text(rows))
        out.append(_placement().grid.training_time_text(rows))
        missing = [c for c in order if c not in rows]
        if missing:
            out.append(f"Cells with no finished run ({len(missing)}): {', '.join(missing)}.\n")
    if v["cells"]:
        t = ["| cell | vs MLP (points) | p, Holm | equivalent within ±{m:g}, Holm p | vs GRU (points) | p, Holm | "
             "equivalent, Holm p | verdict |".format(m=MARGIN), "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for c, d in v["cells"].items():
            m, g = d["mlp"], d["gru"]
            t.append(f"| {c} | {m['diff']:+.2f} | {_p(m['p_holm'])} | {_p(m['p_eq_holm'])} | {g['diff']:+.2f} | "
                     f"{_p(g['p_holm'])} | {_p(g['p_eq_holm'])} | {d['verdict']} |")
        out.append("\n".join(t) + "\n")
    # counts
    rand = [c["cell"] for c in grid if c["family"] == "random"]
    cnt = counts(rows, i2, connectivity)
    conn_text = ", ".join(f"{c}: {d['empty_output_row']}/{d['no_input_output_walk']} of {d['draws']}"
                          for c, d in connectivity.items() if c in i2)
    out.append("## Counts (bimodal cells)\n")
    if cnt:
        out.append(_placement().grid.counts_table(cnt, "p_holm", "Fisher p vs MLP, Holm", _p))
    else:
        out.append("No random item-2 cell has a finished run yet.\n")
    if conn_text:
        out.append(f"Connectivity of the untrained draws (empty output row / no input -> output walk): {conn_text}. "
                   f"All random cells' counts: experiments/mnist1d/results/placement/connectivity.json "
                   f"({len([c for c in rand if c in connectivity])} cells).\n")
    # item 4
    out.append("## Item 4: accuracy against iterations\n")
    head = "| family | " + " | ".join(f"t = {t}" for t in range(1, 9)) + " | needs |"
    t = [head, "| --- |" + " ---: |" * 9]
    for fam, by_t in fams.items():
        cellsum = {tt: summary(rows[c]) for tt, c in by_t.items() if rows.get(c)}
        complete = all(len(rows.get(c, [])) >= MIN_SEEDS for c in by_t.values())
        need = needs({tt: s["mean"] for tt, s in cellsum.items()}) if complete else "pending"
        t.append(f"| {fam} | " + " | ".join(f"{_pm(cellsum[tt])} ({cellsum[tt]['n']})" if tt in cellsum else "pending"
                                          for tt in by_t) + f" | {need} |")
    out.append("Seed-mean test accuracy ± sd (seeds) per iteration count.\n\n" + "\n".join(t) + "\n")
    if plot_iterations(rows, fams, pictures / "iterations.png"):
        out.append(f"![accuracy vs iterations]({rel}/iterations.png)\n")
    else:
        out.append(f"No plot yet: no family has all eight cells with {MIN_SEEDS} seeds.\n")
    # item 5
    out.append("## Item 5: the trained iteration map\n")
    sr = spectrum_rows(rows, fams)
    t = ["| family | t | runs | with dynamics.json | Jacobian radius, step 16 | at step t | DMD radius | "
         "DMD reconstruction error | needs s steps (median) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    f4 = lambda x: "" if x is None else f"{x:.3g}"  # noqa: E731
    any_dyn = False
    for d in sr:
        if not d["runs"]:
            continue
        any_dyn |= d["with"] > 0
        t.append(f"| {d['family']} | {d['t']} | {d['runs']} | {d['with']} | {f4(d.get('rho'))} | {f4(d.get('rho_t'))} | "
                 f"{f4(d.get('dmd'))} | {f4(d.get('err'))} | {f4(d.get('s'))} |")
    out.append("Medians over each cell's runs (for the RNN form, the hidden-to-hidden Jacobian's radius at the last "
               "transition; no DMD of a driven system). The DMD reconstruction error is seq2d.dynamics.dmd's "
               "||Z_hat - Z||_F / ||Z||_F: the fitted linear model run from each trajectory's first state against "
               "every state of the iterations; at 1 or more that rollout is no closer to the states than zero is, "
               "so the map is far from linear over those steps and its DMD radius describes the fit, not the "
               "map.\n\n" + ("\n".join(t) if len(t) > 2 else
                                                                  "No item-4 cell has a finished run yet.") + "\n")
    if not any_dyn and len(t) > 2:
        out.append("No committed run has its dynamics.json yet (runs finished before item 5 get one when "
                   "placement.py meets them again with their checkpoint).\n")
    out.append(f"Regenerate: `{COMMAND}`.\n")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--baselines", default=str(BASELINES))
    ap.add_argument("--doc", default=str(DOC))
    a = ap.parse_args(argv)
    cells = _placement().cells
    from seq2d.results_page import write_section

    rows = load_rows(Path(a.results))
    conn_file = Path(a.results) / "connectivity.json"
    connectivity = {d["cell"]: d for d in json.loads(conn_file.read_text())} if conn_file.is_file() else {}
    base = json.loads(Path(a.baselines).read_text())
    doc = Path(a.doc)
    pictures = doc.parent / doc.stem
    body = render(rows, cells(), connectivity, base, pictures, doc.stem)
    write_section(doc, SECTION, body, title="# MNIST-1D: placement and iterations where structure matters (issue 33)")
    print(f"{sum(map(len, rows.values()))} run(s) in {len(rows)} cell(s) -> {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
