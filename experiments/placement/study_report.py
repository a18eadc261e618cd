"""docs/results/placement.md from the committed runs of experiments/placement/study.py (issue 33,
item 3): does random placement of the MLP's trainable parameters over a larger block matrix train
like the MLP, at 20 epochs, against the linear classifier and with the input -> output shortcut
removed? Nothing is trained here; every number comes from the committed JSON.

    python experiments/placement/study_report.py            # results/study -> docs/results/placement.md

The rules below (:data:`RULES`) were written before any study run was read (the first run, the
MLP's seed 0, was only checked to have finished).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results" / "study"
LINEAR = ROOT / "experiments" / "mnist_sparsity" / "results" / "full-ours" / "linear_28"
DOC = ROOT / "docs" / "results" / "placement.md"
COMMAND = "python experiments/placement/study_report.py"
SECTION = "placement-verdict"

ALPHA = 0.05
MARGIN = 0.5     # points: "like the MLP" means within +-0.5 of its mean (about 3 binomial errors of the test set)
AT_CHANCE = 20.0  # % test accuracy at or below which a run learned nothing (10 classes: 10% by guessing)
TEST_N = 10_000
RULES = [
    f"**Against the MLP** (each element / tile cell): Welch's t test of the seeds' epoch-{{epochs}} test "
    f"accuracies (two-sided) and two one-sided Welch tests for equivalence within +-{MARGIN:g} points (TOST); "
    f"Holm over the cells, one family for each. A cell trains **like the MLP** when the Holm-adjusted TOST p < "
    f"{ALPHA}, **differs** (below or above) when the Holm-adjusted difference p < {ALPHA}, **undecided** "
    f"otherwise. The smallest margin the data support is the largest distance of the 90% Welch interval of the "
    f"difference from 0.",
    f"**Controls**: each cell against the linear classifier [784, 10] at the same epoch (issue 32's linear_28 "
    f"runs, same protocol and seeds; Welch, Holm over the cells); each placement's default region against its "
    f"no-shortcut region (the input -> output block excluded: the prediction must pass a hidden slot; Welch, "
    f"Holm over the pairs).",
    f"**Bimodal cells**: a cell with a run at or below {AT_CHANCE:g}% is reported by counts, not by the tests "
    f"above (Welch assumes roughly normal seeds; the Shapiro-Wilk p of each tested cell is shown as a check). "
    f"Block placement is always reported by counts: of the untrained draws, how many leave the output row "
    f"empty and how many have no input -> output walk within the iterations; of the trained seeds, how many "
    f"are at chance, with the mean of the others; a two-sided Fisher exact test of the at-chance count "
    f"against the MLP's.",
    "**Pending** while a cell has fewer than its seeds (5).",
]
SEEDS = 5


# ---------------------------------------------------------------------- reading
def load_rows(results: Path) -> dict[str, list[dict]]:
    """Finished rows by cell, seeds in order, each with its test-accuracy curve (``curve``, %)
    and its machine record (``machine``, None when absent)."""
    out: dict[str, list[dict]] = {}
    for f in sorted(results.glob("*/seed*/row.json")):
        r = json.loads(f.read_text())
        m = f.parent / "metrics.jsonl"
        curve = [100 * json.loads(line)["test_acc"] for line in m.read_text().splitlines()
                 if line.strip() and "test_acc" in json.loads(line)] if m.is_file() else []
        if r["trained"] and len(curve) != r["epochs"]:
            raise ValueError(f"{m}: {len(curve)} test evaluations, its row.json says {r['epochs']} epochs")
        mach = f.parent / "machine.json"
        out.setdefault(r["cell"], []).append({**r, "curve": curve,
                                              "machine": json.loads(mach.read_text()) if mach.is_file() else None})
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in out.items()}


def linear_at(epoch: int, linear: Path = LINEAR) -> list[float]:
    """The linear classifier's test accuracy (%) at ``epoch``, one value per committed seed."""
    out = []
    for m in sorted(linear.glob("seed*/metrics.jsonl")):
        rows = [json.loads(line) for line in m.read_text().splitlines() if line.strip()]
        hit = [r["test_acc"] for r in rows if r.get("epoch") == epoch and "test_acc" in r]
        if hit:
            out.append(100 * hit[-1])
    return out


def accs(rows: list[dict]) -> list[float]:
    return [100 * r["test_acc"] for r in rows]


# ---------------------------------------------------------------------- statistics (seq2d.stats: Welch, TOST, Holm)
def welch(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """mean(a) - mean(b), its Welch interval at ``level`` and the two-sided p (:func:`seq2d.stats.welch`)."""
    from seq2d.stats import welch as _welch

    w = _welch(b, a, level)  # seq2d.stats: mean(second) - mean(first)
    return {"diff": w.diff, "lo": w.low, "hi": w.high, "p": w.p, "df": w.df}


def tost(a: list[float], b: list[float], margin: float = MARGIN) -> float:
    """p of equivalence within +-margin (the larger of the two one-sided Welch tests; :func:`seq2d.stats.tost`)."""
    from seq2d.stats import tost as _tost

    return _tost(b, a, margin).p


def holm(p: list[float]) -> list[float]:
    """Holm-adjusted p values, in the order given (:func:`seq2d.stats.holm`)."""
    from seq2d.stats import holm as _holm

    return _holm(p)


def shapiro_p(a: list[float]) -> float | None:
    from scipy import stats

    return float(stats.shapiro(a).pvalue) if len(a) >= 3 and len(set(a)) > 1 else None


# ---------------------------------------------------------------------- the verdict
def analyse(rows: dict[str, list[dict]], cells: list[dict], linear: list[float]) -> dict:
    """Every test of :data:`RULES` on the committed rows."""
    tested = [c for c in cells if c["placement"] in ("element", "tile")]
    pending = [c["cell"] for c in cells if len(rows.get(c["cell"], [])) < SEEDS]
    res: dict = {"pending": pending, "cells": {}, "shortcut": {}, "bimodal": []}
    if pending:
        return res
    mlp = accs(rows["mlp"])
    normal = [c["cell"] for c in tested if min(accs(rows[c["cell"]])) > AT_CHANCE]
    res["bimodal"] = [c["cell"] for c in tested if c["cell"] not in normal]
    d = {c: welch(accs(rows[c]), mlp) for c in normal}
    p_h = holm([d[c]["p"] for c in normal])
    eq = holm([tost(accs(rows[c]), mlp) for c in normal])
    lin = holm([welch(accs(rows[c]), linear)["p"] for c in normal]) if len(linear) > 1 else [None] * len(normal)
    for i, c in enumerate(normal):
        w90 = welch(accs(rows[c]), mlp, 0.90)
        verdict = ("like the MLP" if eq[i] < ALPHA else
                   ("differs: below" if d[c]["diff"] < 0 else "differs: above") if p_h[i] < ALPHA else "undecided")
        res["cells"][c] = {**d[c], "p_holm": p_h[i], "p_eq_holm": eq[i], "margin_supported": max(abs(w90["lo"]), abs(w90["hi"])),
                           "vs_linear": welch(accs(rows[c]), linear) if len(linear) > 1 else None,
                           "vs_linear_p_holm": lin[i], "shapiro_p": shapiro_p(accs(rows[c])), "verdict": verdict}
    pairs = [(c["cell"], c["cell"].replace("-default", "-no-shortcut")) for c in tested
             if c["cell"].endswith("-default") and c["cell"] in normal and c["cell"].replace("-default", "-no-shortcut") in normal]
    ps = holm([welch(accs(rows[b]), accs(rows[a]))["p"] for a, b in pairs])
    for (a, b), p in zip(pairs, ps):
        res["shortcut"][f"{a} -> {b}"] = {**welch(accs(rows[b]), accs(rows[a])), "p_holm": p}
    return res


def counts(rows: dict[str, list[dict]], cells: list[dict], connectivity: dict) -> list[dict]:
    """Block cells and bimodal cells by counts (:data:`RULES`), with Fisher's test against the MLP."""
    from scipy import stats

    mlp_chance = sum(a <= AT_CHANCE for a in accs(rows.get("mlp", [])))
    n_mlp = len(rows.get("mlp", []))
    out = []
    for c in cells:
        rs = rows.get(c["cell"], [])
        if c["placement"] != "block" and not (rs and min(accs(rs)) <= AT_CHANCE):
            continue
        a = accs(rs)
        chance = sum(x <= AT_CHANCE for x in a)
        above = [x for x in a if x > AT_CHANCE]
        p = float(stats.fisher_exact([[chance, len(a) - chance], [mlp_chance, n_mlp - mlp_chance]]).pvalue) if rs and n_mlp else None
        out.append({"cell": c["cell"], "conn": connectivity.get(c["cell"]), "n": len(a),
                    "untrained": sum(not r["trained"] for r in rs), "no_walk": sum(not r["input_reaches_output"] for r in rs),
                    "chance": chance, "mean_above": statistics.fmean(above) if above else None, "p": p})
    return out


# ---------------------------------------------------------------------- the page
def _pm(a: list[float]) -> str:
    return f"{statistics.fmean(a):.2f} ± {statistics.stdev(a):.2f}" if len(a) > 1 else f"{a[0]:.2f}"


def _p(p) -> str:
    return "" if p is None else ("< 0.001" if p < 0.001 else f"{p:.3f}")


def plot_curves(rows: dict[str, list[dict]], cells: list[dict], linear_curve: list[float], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c["cell"] for c in cells if c["placement"] != "block" and rows.get(c["cell"])
             and all(r["curve"] for r in rows[c["cell"]])]
    if not shown:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, dens in zip(axes, ("0.1", "0.02")):
        for c in shown:
            if c != "mlp" and f"-d{dens}" not in c:
                continue
            curves = [r["curve"] for r in rows[c]]
            n = min(map(len, curves))
            mean = [statistics.fmean(cv[i] for cv in curves) for i in range(n)]
            low = max(mean) < 85  # under the axis: said in the legend, the numbers are in the table
            ax.plot(range(1, n + 1), mean, label=c + (" (below 85%: the table)" if low else ""),
                    lw=2 if c == "mlp" else 1, color="k" if c == "mlp" else None)
        if linear_curve:
            ax.plot(range(1, len(linear_curve) + 1), linear_curve, ls="--", color="grey", label="linear [784, 10]")
        ax.set_title(f"density {dens} (seed means)")
        ax.set_xlabel("epoch")
        ax.set_ylim(85, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("test accuracy (%)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return True


def linear_curve(epochs: int, linear: Path = LINEAR) -> list[float]:
    """The linear classifier's seed-mean test accuracy (%) at epochs 1..epochs."""
    per = [linear_at(e, linear) for e in range(1, epochs + 1)]
    return [statistics.fmean(v) for v in per if v]


def render(rows: dict[str, list[dict]], cells: list[dict], connectivity: dict, linear: list[float], epochs: int,
           pictures: Path, rel: str) -> str:
    from seq2d.stats import binomial_se

    a = analyse(rows, cells, linear)
    cnt = counts(rows, cells, connectivity)  # the verdict's count sentence and the counts table
    out = ["## Verdict\n"]
    mlp = accs(rows["mlp"]) if rows.get("mlp") else []
    binom = 100 * binomial_se(statistics.fmean(mlp) / 100, TEST_N) if mlp else None
    if a["pending"]:
        out.append(f"**No verdict yet**: cells with fewer than {SEEDS} finished seeds: {', '.join(a['pending'])}.\n")
    else:
        like = [c for c, d in a["cells"].items() if d["verdict"] == "like the MLP"]
        diff = [f"{c} ({d['diff']:+.2f} points)" for c, d in a["cells"].items() if d["verdict"].startswith("differs")]
        und = [f"{c} (within ±{d['margin_supported']:.2f} at most)" for c, d in a["cells"].items() if d["verdict"] == "undecided"]
        out.append(f"**Does random placement of the MLP's {rows['mlp'][0]['params']:,} trainable parameters over a larger "
                   f"block matrix train like the MLP, at {epochs} epochs on full MNIST?** "
                   f"Like the MLP (within ±{MARGIN:g} points): {', '.join(like) or 'none'}. "
                   f"Differs: {', '.join(diff) or 'none'}. Undecided: {', '.join(und) or 'none'}.\n")
        if cnt:
            ph = holm([d["p"] for d in cnt])
            by = [f"{d['cell']} {d['chance']} of {d['n']} seeds at chance (Fisher p {_p(d['p'])}, Holm {_p(h)}"
                  + (f"; {d['conn']['no_input_output_walk']} of {d['conn']['draws']} untrained draws without an "
                     f"input -> output walk" if d["conn"] else "") + ")" for d, h in zip(cnt, ph)]
            out.append(f"By counts (block placement and the cells with a seed at chance; the MLP: "
                       f"{sum(x <= AT_CHANCE for x in mlp)} of {len(mlp)} at chance): " + "; ".join(by)
                       + f". Holm over these {len(cnt)} Fisher tests was added after the runs were read (the rules "
                       "above name no family for them); the draws' connectivity is a property of the sampler, "
                       "counted before any training.\n")
        sc = [f"{k}: {d['diff']:+.2f} points, Holm p {_p(d['p_holm'])}" for k, d in a["shortcut"].items()]
        out.append("Removing the input -> output shortcut (no-shortcut minus default): " + "; ".join(sc) + ".\n")
        if linear:
            out.append(f"The linear classifier [784, 10] at epoch {epochs}: {_pm(linear)}% ({len(linear)} seeds); the MLP "
                       f"{_pm(mlp)}%. The test set's binomial error at the MLP's accuracy: {binom:.2f} point.\n")
    out.append("## The rules (fixed before the runs were read)\n\n- " + "\n- ".join(r.format(epochs=epochs) for r in RULES) + "\n")
    out.append("## Setting\n")
    out.append("The source: `seeds/003_5467b9de8681185d.txt` (the project's shared seed documents), a machine-written summary of Hershey et al. "
               "(arXiv 2404.00880), not the paper. Its MNIST result: \"Final testing accuracy was virtually "
               "indistinguishable at 92.7% between standard and randomized architectures\", for the MLP [2500, 500, 200, "
               "100, 10] on 50x50 MNIST, 100 epochs. Its Open Question 1: \"How does the placement of trainable parameters "
               "in a neural network affect its training performance, especially when comparing traditional layer-wise "
               "architectures to randomized architectures?\"\n")
    out.append(f"Here (our variant, smaller): full MNIST at 28x28, normalised, no augmentation; Adam lr 0.001, batch 64, "
               f"{epochs} epochs, seeds 0-{SEEDS - 1}; the MLP [784, 32, 16, 10]; each random cell puts the MLP's count over "
               f"[784, h, h/2, 10] with h chosen for density 0.1 or 0.02, 3 iterations, element or 16 x 16 tile placement, "
               f"region `default` (every non-input row, the input -> output block included) or `no-shortcut` (without it). "
               f"The 1-epoch study of issue 20 and its \"fewer parameters\" direction (bottleneck MLPs that confound width "
               f"with placement) are on [placement-1epoch.md](placement-1epoch.md), superseded by this page.\n")
    # every cell
    out.append("## Every cell\n")
    t = ["| cell | block matrix | trainable | seeds | test accuracy at the last epoch, mean ± sd (%) | median | range | "
         "at chance | Shapiro-Wilk p | s per epoch (median) |", "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for c in cells:
        rs = rows.get(c["cell"])
        if not rs:
            t.append(f"| {c['cell']} | {c['sizes']} | | 0 | pending | | | | | |")
            continue
        x = accs(rs)
        sec = [r["time_per_epoch_s"] for r in rs if r.get("time_per_epoch_s")]
        t.append(f"| {c['cell']} | {c['sizes']} | {rs[0]['params']:,} | {len(rs)} | {_pm(x)} | {statistics.median(x):.2f} | "
                 f"{min(x):.2f} to {max(x):.2f} | {sum(v <= AT_CHANCE for v in x)} | {_p(shapiro_p(x))} | "
                 f"{statistics.median(sec) if sec else 0:.1f} |")
    out.append("\n".join(t) + "\n")
    out.append(_study().grid.training_time_text(rows))
    if rows:
        out.append(_study().grid.machines_text(rows))
    if a["cells"]:
        t = [f"| cell | vs MLP (points) | 95% Welch interval | Holm p | TOST ±{MARGIN:g}, Holm p | equivalent within "
             "(90% interval) | vs linear (points) | Holm p | verdict |", "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for c, d in a["cells"].items():
            lin = d["vs_linear"]
            t.append(f"| {c} | {d['diff']:+.2f} | [{d['lo']:+.2f}, {d['hi']:+.2f}] | {_p(d['p_holm'])} | {_p(d['p_eq_holm'])} | "
                     f"±{d['margin_supported']:.2f} | {'' if lin is None else format(lin['diff'], '+.2f')} | "
                     f"{_p(d['vs_linear_p_holm'])} | {d['verdict']} |")
        out.append("## Against the MLP and the linear classifier\n\n" + "\n".join(t) + "\n")
    if a["shortcut"]:
        t = ["| default -> no-shortcut | difference (points) | 95% Welch interval | Holm p |", "| --- | ---: | --- | ---: |"]
        for k, d in a["shortcut"].items():
            t.append(f"| {k} | {d['diff']:+.2f} | [{d['lo']:+.2f}, {d['hi']:+.2f}] | {_p(d['p_holm'])} |")
        out.append("## The shortcut removed\n\n" + "\n".join(t) + "\n")
    if cnt:
        out.append("## Block placement and bimodal cells, by counts\n\n" + _study().grid.counts_table(cnt, "p", "Fisher p vs MLP", _p))
    # learning curves
    lc = linear_curve(epochs)
    out.append("## Learning curves\n")
    t = ["| cell | " + " | ".join(f"epoch {e}" for e in (1, 5, 10, 15, 20) if e <= epochs) + " |",
         "| --- |" + " ---: |" * len([e for e in (1, 5, 10, 15, 20) if e <= epochs])]
    for c in cells:
        rs = [r for r in rows.get(c["cell"], []) if len(r["curve"]) >= epochs]
        if not rs:
            continue
        t.append(f"| {c['cell']} ({len(rs)}) | " + " | ".join(f"{statistics.fmean(r['curve'][e - 1] for r in rs):.2f}"
                                                            for e in (1, 5, 10, 15, 20) if e <= epochs) + " |")
    if lc:
        t.append("| linear [784, 10] | " + " | ".join(f"{lc[e - 1]:.2f}" for e in (1, 5, 10, 15, 20) if e <= len(lc)) + " |")
    out.append("Seed-mean test accuracy (%) during training, over the trained seeds (in brackets; a block draw with an "
               "empty output row is not trained and has no curve; the block rows mix seeds with and without a walk). "
               "The plot leaves block placement out.\n\n" + "\n".join(t) + "\n")
    if plot_curves(rows, cells, lc, pictures / "curves.png"):
        out.append(f"![learning curves]({rel}/curves.png)\n")
    out.append(f"Regenerate: `{COMMAND}`.\n")
    return "\n".join(out)


def _study():
    for d in (str(ROOT), str(HERE)):
        if d not in sys.path:
            sys.path.insert(0, d)
    import study

    return study


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--linear", default=str(LINEAR))
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--doc", default=str(DOC))
    a = ap.parse_args(argv)
    from seq2d.results_page import write_section

    results = Path(a.results)
    rows = load_rows(results)
    conn = results / "connectivity.json"
    connectivity = {d["cell"]: d for d in json.loads(conn.read_text())} if conn.is_file() else {}
    doc = Path(a.doc)
    body = render(rows, _study().cells(), connectivity, linear_at(a.epochs, Path(a.linear)), a.epochs,
                  doc.parent / doc.stem, doc.stem)
    write_section(doc, SECTION, body, title="# Placement at the MLP's count over larger block matrices (MNIST, issue 33)")
    print(f"{sum(map(len, rows.values()))} run(s) in {len(rows)} cell(s) -> {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
