"""The results of experiments/placement/run.py: tables, verdict, plots and the page, all computed
from the rows (``results.json``), so ``run.py --from-json`` rewrites the page without training."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
from pathlib import Path

from seq2d.results_page import value_range

PLACEMENTS = ("element", "tile", "block")
#: test digits per data set (MNIST's test set; the bundled subset's 1,000)
TEST_DIGITS = {"full": 10_000, "subset": 1_000}
#: a placement "matters" at a density when its mean differs from its matched MLP's by more than
#: this (accuracy, 1 point) and the 95% Welch interval of the difference excludes zero
MARGIN = 0.01
SOURCE = "seeds/003_5467b9de8681185d.txt"
TRAIN = ("nice -n 10 python experiments/placement/run.py --jobs 2 --out runs/placement --doc docs/results/placement-1epoch.md "
         "--results experiments/placement/results")
REGEN = ("python experiments/placement/run.py --from-json experiments/placement/results/results.json "
         "--doc docs/results/placement-1epoch.md")
CSV_FIELDS = ("key", "placement", "h_params", "h_slots", "iterations", "seed", "params", "density", "test_acc",
              "test_loss", "path_length", "slot_distance", "fraction_on_path", "on_path", "weights", "biases",
              "input_reaches_output", "epochs", "time_per_epoch_s", "wall_s")


def _mean(v):
    return statistics.fmean(v) if v else float("nan")


def _std(v):
    return statistics.stdev(v) if len(v) > 1 else float("nan")


def _cell(rows) -> dict:
    acc = [r["test_acc"] for r in rows]
    frac = [r["fraction_on_path"] for r in rows]
    paths = [r["path_length"] for r in rows]
    dens = [r["density"] for r in rows if r.get("density") is not None]
    return {"n": len(rows), "seeds": sorted(r["seed"] for r in rows), "acc": acc, "mean": _mean(acc), "std": _std(acc),
            "params": rows[0]["params"], "sizes": rows[0]["sizes"], "density": _mean(dens) if dens else None,
            "fraction": _mean(frac), "fraction_std": _std(frac),
            "path_min": min((p for p in paths if p is not None), default=None),
            "path_max": max((p for p in paths if p is not None), default=None),
            "no_path": sum(1 for r in rows if not r["input_reaches_output"]),
            "output_fixed": sum(1 for r in rows if r.get("output_fixed"))}


def _compare(ref: dict | None, cell: dict) -> dict:
    """cell - ref: the mean difference and its 95% Welch interval (seq2d.stats.welch)."""
    from seq2d.stats import welch

    nan = float("nan")
    if ref is None or cell["n"] < 2 or ref["n"] < 2:
        return {"diff": (cell["mean"] - ref["mean"]) if ref else nan, "lo": nan, "hi": nan, "matters": None}
    w = welch(ref["acc"], cell["acc"])
    matters = abs(w.diff) > MARGIN and (w.high < 0 or w.low > 0)
    return {"diff": w.diff, "lo": w.low, "hi": w.high, "matters": matters}


def summarize(rows: list[dict], base_h: int) -> dict:
    """The three groups: spread (the base count over wider slots), fewer (smaller counts over the base
    slots), iterations (the base random models at 1-8 iterations); each cell with its matched MLP."""
    def pick(**kw):
        return [r for r in rows if all(r[k] == v for k, v in kw.items())]

    mlp = {h: _cell(pick(placement="mlp", h_params=h)) for h in sorted({r["h_params"] for r in rows
                                                                       if r["placement"] == "mlp"})}
    groups = {"spread": [], "fewer": [], "iterations": []}
    for w in sorted({r["h_slots"] for r in rows if r["placement"] != "mlp" and r["h_params"] == base_h}):
        for p in PLACEMENTS:
            rs = pick(placement=p, h_params=base_h, h_slots=w, iterations=3)
            if rs:
                c = _cell(rs)
                groups["spread"].append({"h_slots": w, "h_params": base_h, "placement": p, **c,
                                         **_compare(mlp.get(base_h), c)})
    for h in sorted({r["h_params"] for r in rows if r["placement"] != "mlp" and r["h_slots"] == base_h}, reverse=True):
        for p in PLACEMENTS:
            rs = pick(placement=p, h_params=h, h_slots=base_h, iterations=3)
            if rs:
                c = _cell(rs)
                groups["fewer"].append({"h_slots": base_h, "h_params": h, "placement": p, **c, **_compare(mlp.get(h), c)})
    for it in sorted({r["iterations"] for r in rows if r["placement"] != "mlp"}):
        for p in PLACEMENTS:
            rs = pick(placement=p, h_params=base_h, h_slots=base_h, iterations=it)
            if rs:
                c = _cell(rs)
                groups["iterations"].append({"iterations": it, "placement": p, **c, **_compare(mlp.get(base_h), c)})
    return {"mlp": {str(h): c for h, c in mlp.items()}, **groups}


def write_outputs(rows: list[dict], env: dict, out: Path) -> dict:
    """results.json (env, rows, summary) and results.csv (one line per run) in ``out``."""
    res = {"env": env, "rows": sorted(rows, key=lambda r: r["key"]), "summary": summarize(rows, env["base_h"])}
    (out / "results.json").write_text(json.dumps(res, indent=1))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(res["rows"])
    print(f"wrote {out / 'results.json'} and {out / 'results.csv'} ({len(rows)} runs)")
    return res


# ---------------------------------------------------------------------- text
def _pm(m, s) -> str:
    return f"{100 * m:.2f}" + ("" if math.isnan(s) else f" +- {100 * s:.2f}")


def _ci(c) -> str:
    if math.isnan(c["lo"]):
        return "n/a"
    return f"{100 * c['diff']:+.2f} [{100 * c['lo']:+.2f}, {100 * c['hi']:+.2f}]"


def _path(c) -> str:
    if c["path_min"] is None:
        return "none"
    p = value_range((c["path_min"], c["path_max"]), "d")
    return p + (f" ({c['no_path']} of {c['n']} runs without a walk within the steps" if c["no_path"] else "") + (
        f"; {c['output_fixed']} with an empty output row)" if c.get("output_fixed") else ")" if c["no_path"] else "")


def _sizes(s) -> str:
    return "[" + ", ".join(map(str, s)) + "]"


def density_table(res: dict, group: str) -> str:
    mlp = res["summary"]["mlp"]
    head = ("| slots (block matrix) | trainable params | density | placement | runs | test accuracy % (mean +- std) | "
            "- matched MLP, points [95% Welch] | path length (steps) | fraction of parameters on an input-output walk |")
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    last = None
    for c in res["summary"][group]:
        ref = mlp.get(str(c["h_params"]))
        key = c["h_params"]
        if key != last and ref is not None:
            lines.append(f"| MLP {_sizes(ref['sizes'])} | {ref['params']:,} | (dense layers) | mlp | {ref['n']} | "
                         f"{_pm(ref['mean'], ref['std'])} | | {ref['path_min']} | 1.000 |")
            last = key
        lines.append(f"| {_sizes(c['sizes'])} | {c['params']:,} | {c['density']:.3f} | {c['placement']} | {c['n']} | "
                     f"{_pm(c['mean'], c['std'])} | {_ci(c)} | {_path(c)} | "
                     f"{c['fraction']:.3f}" + ("" if math.isnan(c["fraction_std"]) else f" +- {c['fraction_std']:.3f}")
                     + " |")
    return "\n".join(lines)


def iterations_table(res: dict) -> str:
    cells = res["summary"]["iterations"]
    its = sorted({c["iterations"] for c in cells})
    lines = ["| placement | " + " | ".join(f"{i} it." for i in its) + " |", "| --- |" + " --- |" * len(its),
             "| runs per cell | " + " | ".join("/".join(str(c["n"]) for c in cells if c["iterations"] == i) for i in its)
             + " |"]
    for p in PLACEMENTS:
        row = {c["iterations"]: c for c in cells if c["placement"] == p}
        if row:
            lines.append(f"| {p}: accuracy % | " + " | ".join(_pm(row[i]["mean"], row[i]["std"]) if i in row else ""
                                                           for i in its) + " |")
            lines.append(f"| {p}: on a walk | " + " | ".join(f"{row[i]['fraction']:.3f}" if i in row else ""
                                                         for i in its) + " |")
    return "\n".join(lines)


def _where(cells) -> dict:
    """Per placement: the densities (high to low) where it matters, and the highest of them."""
    out = {}
    for p in PLACEMENTS:
        cs = sorted((c for c in cells if c["placement"] == p), key=lambda c: -c["density"])
        hit = [c for c in cs if c["matters"]]
        out[p] = {"cells": cs, "matters_at": [c["density"] for c in hit],
                  "first": hit[0]["density"] if hit else None, "tested": [c["density"] for c in cs]}
    return out


def gaps(cells) -> list[dict]:
    """Per density (same count, same block matrix): the best and the worst placement, the difference
    worst - best with its 95% Welch interval, and whether placement matters there (as for the MLP)."""
    out = []
    for key in sorted({(c["h_slots"], c["h_params"]) for c in cells}):
        cs = [c for c in cells if (c["h_slots"], c["h_params"]) == key]
        if len(cs) < 2:
            continue
        best, worst = max(cs, key=lambda c: c["mean"]), min(cs, key=lambda c: c["mean"])
        d = _compare(best, worst)
        out.append({"h_slots": key[0], "h_params": key[1], "density": min(c["density"] for c in cs),
                    "best": best["placement"], "worst": worst["placement"], **d})
    return sorted(out, key=lambda g: -g["density"])


def verdict(res: dict) -> str:
    env, s = res["env"], res["summary"]
    p = env["protocol"]
    mlp_base = s["mlp"].get(str(env["base_h"]))
    lines = ["## Verdict", "", "<!-- Written by experiments/placement/run.py from experiments/placement/results/results.json; "
             "rerun it rather than editing numbers. -->", "",
             f"Scale (our variant): {'full MNIST (60,000 / 10,000 digits)' if p['data'] == 'full' else p['data']} at "
             f"{p['image_size']}x{p['image_size']}, {p['epochs']} epoch{'s' if p['epochs'] > 1 else ''}, "
             f"Adam lr {p['lr']:g}, batch {p['batch_size']}; "
             f"seeds {env['seeds']} per density cell, {env['iteration_seeds']} per iteration cell; "
             f"{env['finished_runs']} of {env['grid_runs']} planned runs finished. \"Matters\" below: the mean differs from "
             f"the MLP with the same trainable-parameter count by more than {100 * MARGIN:g} point and the 95% Welch "
             "interval of the difference excludes zero.", ""]
    for group, what in (("spread", "same count (the MLP's), larger block matrix"),
                        ("fewer", "fewer parameters, same block matrix")):
        cells = s[group]
        if not cells:
            continue
        gs = gaps(cells)
        hit = [g for g in gs if g["matters"]]
        if gs:
            lines.append(f"- **{what}**: the placements differ from each other (worst - best, same count and block matrix) "
                         + (f"from density {hit[0]['density']:.3f} down: at {len(hit)} of {len(gs)} densities ("
                            + ", ".join(f"{g['density']:.3f}: {g['worst']} - {g['best']} {100 * g['diff']:+.2f} "
                                        f"[{100 * g['lo']:+.2f}, {100 * g['hi']:+.2f}]" for g in hit) + ")"
                            if hit else f"at none of the {len(gs)} densities (down to {gs[-1]['density']:.3f})"
                            if any(g["matters"] is not None for g in gs) else "(not tested: fewer than 2 seeds per cell)")
                         + ".")
        w = _where(cells)
        parts = []
        for pl, x in w.items():
            if not x["cells"]:
                continue
            lo = x["cells"][-1]
            if all(c["matters"] is None for c in x["cells"]):
                parts.append(f"{pl} not tested (fewer than 2 seeds per cell; at density {lo['density']:.3f} it scores "
                             f"{100 * lo['mean']:.2f}% against the MLP's {100 * (lo['mean'] - lo['diff']):.2f}%)")
            elif x["first"] is None:
                parts.append(f"{pl} at no tested density (down to {lo['density']:.3f}, where it scores "
                             f"{100 * lo['mean']:.2f}% against the MLP's {100 * (lo['mean'] - lo['diff']):.2f}%)")
            else:
                c = next(c for c in x["cells"] if c["density"] == x["first"])
                parts.append(f"{pl} from density {x['first']:.3f} down, at {len(x['matters_at'])} of "
                             f"{len(x['tested'])} tested densities ({', '.join(f'{c2:.3f}' for c2 in x['matters_at'])}; "
                             f"at {x['first']:.3f} {100 * c['diff']:+.2f} points [{100 * c['lo']:+.2f}, "
                             f"{100 * c['hi']:+.2f}])")
        lines.append("  Against the MLP with the same count: " + "; ".join(parts) + ".")
        worst = min((c for c in cells if not math.isnan(c["diff"])), key=lambda c: c["diff"], default=None)
        if worst is not None:
            lines.append(f"  Lowest difference to the matched MLP: {worst['placement']} at density {worst['density']:.3f} "
                         f"({worst['params']:,} parameters over {_sizes(worst['sizes'])}), {100 * worst['diff']:+.2f} "
                         f"points; its parameters on an input-output walk: {worst['fraction']:.3f}.")
    allc = s["spread"] + [c for c in s["fewer"] if c["h_params"] != env["base_h"]]
    # the runs below the base density: without the base cells (h_slots == h_params == base_h)
    below = [c for c in allc if not (c["h_slots"] == env["base_h"] and c["h_params"] == env["base_h"])]
    if allc:
        paths = sorted({c["path_min"] for c in allc if c["path_min"] is not None} |
                       {c["path_max"] for c in allc if c["path_max"] is not None})
        nop = sum(c["no_path"] for c in below)
        fixed = sum(c.get("output_fixed", 0) for c in below)
        nruns = sum(c["n"] for c in below)
        lines.append(f"- Path length: where a walk exists, the random models' shortest input-to-output walk has "
                     f"{' or '.join(map(str, paths))} step(s) (the MLP's: {mlp_base['path_min'] if mlp_base else '?'}; "
                     "the region includes the input -> output "
                     f"block). {nop} of the {nruns} random runs below the base density have no walk within their 3 steps"
                     + (f", {fixed} of them because no block and no bias lands in the output row (a constant output: "
                        "nothing to train, scored untrained)" if fixed else "")
                     + ". The fraction of parameters on an input-output walk, per placement (cell means): "
                     + "; ".join(f"{pl} {value_range([c['fraction'] for c in allc if c['placement'] == pl], '.3f')}"
                                 for pl in PLACEMENTS if any(c['placement'] == pl for c in allc)) + ".")
        xs = [c["fraction"] for c in allc]
        ys = [c["diff"] for c in allc if not math.isnan(c["diff"])]
        if len(ys) == len(xs) and len(xs) > 2:
            r = statistics.correlation(xs, ys)
            lines.append(f"- Across the {len(xs)} random cells, the correlation of the fraction on a walk with the "
                         f"difference to the matched MLP is {r:+.2f} (Pearson, cell means).")
    it = s["iterations"]
    if it:
        parts = []
        for pl in PLACEMENTS:
            cs = [c for c in it if c["placement"] == pl]
            if not cs:
                continue
            best = max(cs, key=lambda c: c["mean"])
            one = next((c for c in cs if c["iterations"] == 1), None)
            last = max(cs, key=lambda c: c["iterations"])
            sat = min((c for c in cs if c["mean"] >= best["mean"] - MARGIN), key=lambda c: c["iterations"])
            parts.append(f"{pl} best at {best['iterations']} ({100 * best['mean']:.2f}%), within {100 * MARGIN:g} point "
                         f"of that from {sat['iterations']} iteration{'s' if sat['iterations'] > 1 else ''} on"
                         + (f", {100 * one['mean']:.2f}% at 1" if one else "")
                         + f", {100 * last['mean']:.2f}% at {last['iterations']}")
        ref = f" (MLP {100 * mlp_base['mean']:.2f}%)" if mlp_base else ""
        lines.append(f"- **Iterations** (the base block matrix, the MLP's count{ref}): " + "; ".join(parts) + ".")
    n_test = TEST_DIGITS.get(p["data"])
    se = (f", {100 * math.sqrt(mlp_base['mean'] * (1 - mlp_base['mean']) / n_test):.2f} point (binomial, "
          f"sqrt(p (1 - p) / n)) for {n_test:,} digits at the MLP's {100 * mlp_base['mean']:.2f}%"
          if n_test and mlp_base else "")
    lines.append("- Not tested: the source's 50x50 inputs, its MLP [2500, 500, 200, 100, 10] and 100 epochs; other "
                 "data sets; more seeds. The Welch intervals see only the spread over seeds, not the test set's own "
                 f"sampling error{se}.")
    return "\n".join(lines)


def setting(res: dict) -> str:
    env, p = res["env"], res["env"]["protocol"]
    load = lambda v: "/".join(f"{x:.2f}" for x in v) if v else "n/a"  # noqa: E731
    return "\n".join([
        "## Setting, against the source's", "",
        f"| aspect | the summary of Hershey et al. ({SOURCE}) | this page (our variant) |", "| --- | --- | --- |",
        "| question | how the placement of trainable parameters affects training performance (Open Question 1, our "
        "paraphrase); how the number of iterations relates to training performance (Open Question 2, our paraphrase) "
        "| accuracy vs the density of the random placement, lowered two ways; accuracy vs iterations 1-8 |",
        "| data | MNIST resized to 50x50, normalised with (0.1307, 0.3081); optional random erasing and perspective "
        f"transformations | {'full MNIST' if p['data'] == 'full' else p['data']}, {p['image_size']}x{p['image_size']}, "
        "normalised, no augmentation |",
        f"| MLP | [2500, 500, 200, 100, 10] | [{p['image_size'] ** 2}, h, h/2, 10]: h = {env['base_h']} (the spread "
        "direction and the iterations), smaller h for the fewer direction |",
        f"| training | Adam, learning rate 1e-3, batch size 64, 100 epochs | Adam, lr {p['lr']:g}, batch "
        f"{p['batch_size']}, {p['epochs']} epoch(s), {p['num_threads']} torch thread per run |",
        "| randomized models | the MLP's trainable-parameter count with a different sparsity pattern (the density is "
        "not stated; about half is our own audit's reading of the MS-thesis scripts, 0.5108 per block) | exactly the stated count (`seq2d.randomize(..., params=)`), over every non-input row x every "
        f"column; element, tile ({env['tile']}x{env['tile']}) and block granularity; 3 iterations unless stated |",
        "| result | 92.7% final test accuracy for both the standard and the randomized architectures (Key Results) "
        "| the tables below |", "",
        "## Runs", "",
        f"- trained by `{TRAIN}` (resumable: finished runs are skipped); this JSON written by `{env['command']}`; "
        f"the page again from the JSON: `{REGEN}`",
        f"- every run: [results.json](../../experiments/placement/results/results.json), "
        "[results.csv](../../experiments/placement/results/results.csv)",
        f"- date: {env['date']} to {env['finished']}; machine: {env['nproc']} cores ({env['cpu']}), torch "
        f"{env['torch']}, CPU ({env.get('capability', '?')} kernels); load average {load(env.get('loadavg_start'))} at the start, "
        f"{load(env.get('loadavg_end'))} at the end (a shared machine: times are rough)",
        f"- seeds: {env['seeds']} (density grid), {env['iteration_seeds']} (iterations); the seed sets the data "
        "order, the initial values and the placement",
        "- path length: the shortest input-to-output walk through the trainable entries, in steps "
        "(`seq2d.graph.unit_paths`); fraction on a walk: the trainable parameters (weights and biases) through which "
        "the input can reach the output within the model's steps, over all its trainable parameters (1 for an MLP).",
        "- density: trainable weights / (non-input rows x all columns) of the block matrix."])


def write_plots(res: dict, folder: Path) -> list[str]:
    from seq2d.plot.common import new_figure, save_figure

    folder.mkdir(parents=True, exist_ok=True)
    s, names = res["summary"], []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        save_figure(fig, folder / name, dpi=100)
        names.append(name)

    fig, axes = new_figure((11, 4.4), ncols=2)
    for ax, group, title in ((axes[0], "spread", "same count (the MLP's), larger block matrix"),
                             (axes[1], "fewer", "fewer parameters, same block matrix")):
        for k, pl in enumerate(PLACEMENTS):
            cs = sorted((c for c in s[group] if c["placement"] == pl), key=lambda c: c["density"])
            if cs:
                shift = 1.0 + 0.04 * (k - 1)  # placements side by side
                ax.plot([c["density"] * shift for c in cs], [100 * c["mean"] for c in cs], marker="os^"[k],
                        label=f"{pl} (mean; dots: seeds)", color=f"C{k}")
                for c in cs:
                    ax.scatter([c["density"] * shift] * len(c["acc"]), [100 * a for a in c["acc"]], s=9,
                               color=f"C{k}", alpha=0.45)
        if group == "spread":
            m = s["mlp"].get(str(res["env"]["base_h"]))
            if m is not None:
                sd = 0 if math.isnan(m["std"]) else 100 * m["std"]
                ax.axhline(100 * m["mean"], color="k", ls="--", label="MLP, same count (mean +- std)")
                ax.axhspan(100 * m["mean"] - sd, 100 * m["mean"] + sd, color="k", alpha=0.1)
        else:
            pts = {}
            for c in s[group]:
                m = s["mlp"].get(str(c["h_params"]))
                if m is not None:
                    pts.setdefault(c["h_params"], (min(x["density"] for x in s[group] if x["h_params"] == c["h_params"]), m))
            pts = sorted(pts.values(), key=lambda x: x[0])
            if pts:
                ax.errorbar([d for d, _ in pts], [100 * m["mean"] for _, m in pts],
                            yerr=[0 if math.isnan(m["std"]) else 100 * m["std"] for _, m in pts], marker="D", ls="--",
                            color="k", capsize=3, label="MLP, same count (mean +- std)")
        ax.set_xscale("log")
        ticks = sorted({float(f"{c['density']:.2g}") for c in s[group] if c["placement"] == PLACEMENTS[0]})
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks], rotation=45)
        ax.minorticks_off()
        ax.set_xlabel("density of the random placement (log scale)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, "accuracy_vs_density.png")

    fig, ax = new_figure((6.5, 4.4))
    for k, pl in enumerate(PLACEMENTS + ("mlp",)):
        rs = [r for r in res["rows"] if r["placement"] == pl and r["iterations"] == 3 and r["on_path"] > 0]
        ax.scatter([r["on_path"] for r in rs], [100 * r["test_acc"] for r in rs], s=14, marker="os^D"[k],
                   color=f"C{k}" if pl != "mlp" else "k", label=pl, alpha=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters on an input-output walk (log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("every run of the density grid at 3 iterations (one point per run)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    save(fig, "accuracy_vs_parameters_on_a_walk.png")

    if s["iterations"]:
        fig, ax = new_figure((6, 4.2))
        for k, pl in enumerate(PLACEMENTS):
            cs = sorted((c for c in s["iterations"] if c["placement"] == pl), key=lambda c: c["iterations"])
            ax.errorbar([c["iterations"] for c in cs], [100 * c["mean"] for c in cs],
                        yerr=[0 if math.isnan(c["std"]) else 100 * c["std"] for c in cs], marker="os^"[k], capsize=3,
                        label=pl, color=f"C{k}")
        m = s["mlp"].get(str(res["env"]["base_h"]))
        if m:
            ax.axhline(100 * m["mean"], color="k", ls="--", label="MLP (3 layers)")
        ax.set_xlabel("iterations")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("the MLP's count over its own block matrix", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "accuracy_vs_iterations.png")
    return names


def write_page(res: dict, doc: Path, src: Path, results: Path | None = None) -> None:
    """The page ``doc`` (written whole: every line is generated), its plots in ``<doc stem>/``; with
    ``results``, results.json/csv copied there from ``src`` first."""
    if results is not None and results.resolve() != src.resolve():
        results.mkdir(parents=True, exist_ok=True)
        for f in ("results.json", "results.csv"):
            if (src / f).is_file():
                shutil.copy(src / f, results / f)
    img = doc.parent / doc.stem
    names = write_plots(res, img)
    text = ["# The 1-epoch placement study (issue 20), superseded by [placement.md](placement.md)", "",
            "<!-- placement-verdict:begin -->", verdict(res), "<!-- placement-verdict:end -->", "",
            "Superseded by [placement.md](placement.md) (issue 33: 20 epochs, the linear and no-shortcut controls, "
            "block placement by counts) and, for the number of iterations, by [mnist1d.md](mnist1d.md)'s item 4. "
            "Kept as the record of what was run; its 1-epoch verdict above is not the project's answer.", "",
            "Issue 20, items 5 and 6: the step beyond the paper. Every line of this page is generated by "
            "`experiments/placement/run.py` from the committed JSON; do not edit by hand.", "", setting(res), "",
            "## Same count, larger block matrix (spread)", "",
            f"The MLP's trainable-parameter count over [784, h, h/2, 10] with wider hidden slots; every row is "
            "compared with that one MLP.", "", density_table(res, "spread"), "",
            "## Fewer parameters, same block matrix (fewer)", "",
            "A smaller MLP's count over the base block matrix; each random model is compared with that smaller MLP.", "",
            density_table(res, "fewer"), "",
            "## The number of iterations", "",
            "The base random models (the MLP's count over its own block matrix) at 1-8 iterations; accuracy "
            "(mean +- std over seeds) and the fraction of parameters on an input-output walk within that many steps. "
            "Runs per cell in the order element/tile/block (3 iterations is the density grid's base cell, with its seeds).",
            "", iterations_table(res), ""]
    text += [f"![{n[:-4].replace('_', ' ')}]({doc.stem}/{n})" for n in names]
    text += ["", "(Density plot: lines join the means over seeds, dots are the seeds; iterations plot: mean +- 1 std.)",
             ""]
    doc.write_text("\n".join(text))
    print(f"wrote {doc} and {len(names)} plots in {img}")
