"""Parameter budget sweep: test accuracy vs trainable-parameter count, per placement.

For each budget an MLP ``[s0, h, h/2, 10]`` (``s0 = image_size**2``) is trained, and three
randomized Sequential2Ds with **exactly** that MLP's trainable-parameter count
(:func:`seq2d.randomize` at element, tile and block granularity; ``len(sizes) - 1``
iterations, the MLP's depth), each for several seeds with one shared protocol (Adam, lr 1e-3,
batch 64, ``--epochs`` epochs on the bundled 2,500/1,000-digit MNIST subset at 28x28).
The question (Hershey et al., arXiv 2404.00880 suggest placement matters little compared
with the number of parameters): do the placements' curves lie on the MLP's?

    # the sweep of docs/results/param_budget.md
    python experiments/param_budget/run.py --budgets 32,64,128,192,320 --seeds 0,1,2 --epochs 3 \\
        --out runs/param_budget --doc docs/results/param_budget.md
    # CI smoke run (2 budgets, 1 seed, 1 epoch)
    python experiments/param_budget/run.py --quick --out /tmp/param_budget_quick
    # the page's generated sections again from the committed JSON (nothing retrained)
    python experiments/param_budget/run.py --from-json docs/results/param_budget/results.json \
        --doc docs/results/param_budget.md

A budget is given by its first hidden width ``h``. Runs land in ``OUT/h<h>/<model>/seed<k>/``
(finished runs are reused). By default they train one after the other in this process; ``--jobs
N`` trains them N at once in worker processes, and ``--launcher slurm --partition P --time T``
sends every run to SLURM as one task of a single job array (through submitit, ``seq2d.lab.launch``;
``--launcher submitit-local``: the same on this machine); the tables are then merged from the run
folders as after a run in this process. Outputs: ``OUT/results.json`` (every run: model, budget, seed,
params, accuracy, time; and per budget the Welch interval and TOST of each placement vs the
MLP), ``OUT/results.md`` (tables) and ``OUT/accuracy_vs_params.png`` (log x; mean +- std over
seeds, one line per placement).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from seq2d.envinfo import cpu_name  # noqa: E402
from seq2d.lab.launch import add_launcher_args, jobs_arg, launcher_from_args  # noqa: E402
from seq2d.lab.mnist_comparison import EQUIVALENCE_MARGIN, MODELS, compare, difference, plan_runs, run_plan  # noqa: E402
from seq2d.stats import binomial_se, holm  # noqa: E402
from seq2d.train.config import TrainConfig  # noqa: E402

PLACEMENTS = ["mlp", "random_element", "random_tile", "random_block"]
DEFAULT_BUDGETS = "32,64,128,192,320"


def sizes_for(h: int, image_size: int) -> list[int]:
    return [image_size * image_size, h, max(1, h // 2), 10]


def _round(load):
    return None if load is None else [round(x, 2) for x in load]


def budget_rows(rows, h):
    return [r for r in rows if r["budget"] == h]


def stats_for(rows, budgets, margin=EQUIVALENCE_MARGIN):
    """Per budget and placement: Welch 95% interval and TOST (+-margin) of placement - mlp."""
    out = []
    for h in budgets:
        rs = budget_rows(rows, h)
        for m in PLACEMENTS[1:]:
            if not any(r["model"] == m for r in rs):
                continue
            d = difference(rs, m, "mlp", margin)
            out.append({"budget": h, "params": next((r["params"] for r in rs if r["model"] == "mlp"), None), **d})
    return out


def summary(rows, budgets):
    out = []
    for h in budgets:
        for m in PLACEMENTS:
            rs = [r for r in budget_rows(rows, h) if r["model"] == m and r.get("test_acc") is not None]
            if not rs:
                continue
            accs = [r["test_acc"] for r in rs]
            out.append({"budget": h, "model": m, "n": len(accs), "params": rs[0]["params"],
                        "mean": statistics.fmean(accs), "std": statistics.stdev(accs) if len(accs) > 1 else float("nan"),
                        "time_s": statistics.fmean(r["time_s"] for r in rs)})
    return out


def format_tables(summ, diffs) -> str:
    lines = ["| hidden h (sizes) | trainable params | placement | runs | test accuracy (mean +- std) | train time / run |",
             "| --- | --- | --- | --- | --- | --- |"]
    for s in summ:
        std = "n/a" if math.isnan(s["std"]) else f"{100 * s['std']:.2f}"
        lines.append(f"| {s['budget']} | {s['params']:,} | {s['model']} | {s['n']} | {100 * s['mean']:.2f} +- {std} % | "
                     f"{s['time_s']:.1f} s |")
    lines += ["", f"| hidden h | trainable params | placement - mlp | mean (points) | 95% interval (Welch) | "
              f"equivalent within +-{100 * EQUIVALENCE_MARGIN:g} points (TOST, alpha 0.05) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for d in diffs:
        ci = "n/a (one run each)" if math.isnan(d["lo"]) else f"[{100 * d['lo']:+.2f}, {100 * d['hi']:+.2f}]"
        eq = "n/a" if d["equivalent"] is None else f"{'yes' if d['equivalent'] else 'no'} (p = {d['tost_p']:.3f})"
        params = f"{d['params']:,}" if d["params"] is not None else "?"
        lines.append(f"| {d['budget']} | {params} | {d['a']} - mlp | {100 * d['diff']:+.2f} | {ci} | {eq} |")
    return "\n".join(lines)


def plot(summ, path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = {"mlp": "o", "random_element": "s", "random_tile": "^", "random_block": "D"}
    for k, m in enumerate(PLACEMENTS):
        ss = sorted((s for s in summ if s["model"] == m), key=lambda s: s["params"])
        if not ss:
            continue
        # a small multiplicative offset per placement so the error bars do not hide each other
        x = [s["params"] * (1.0 + 0.025 * (k - 1.5)) for s in ss]
        y = [100 * s["mean"] for s in ss]
        e = [0.0 if math.isnan(s["std"]) else 100 * s["std"] for s in ss]
        ax.errorbar(x, y, yerr=e, marker=markers[m], ms=5, capsize=4, label=m, color=f"C{k}")
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters (log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ the page's generated sections
#: Hershey et al.'s MNIST protocol and result as the summary of the paper states them
#: (seeds/003_5467b9de8681185d.txt, "Method Summary" and "Key Results").
SOURCE = "the summary of Hershey et al. (seeds 003)"
SOURCE_PROTOCOL = {
    "data": "MNIST resized to 50x50 pixels, normalised with N(0.1307, 0.3081); optional random erasing and perspective "
            "transformations",
    "MLP": "[2500, 500, 200, 100, 10]",
    "training": "Adam, learning rate 1e-3, batch size 64, 100 epochs",
    "randomized models": "the MLP's trainable-parameter count with a different sparsity pattern",
    "result": "final testing accuracy 92.7% for both the standard and the randomized architecture",
}
REGEN = "python experiments/param_budget/run.py --from-json docs/results/param_budget/results.json --doc docs/results/param_budget.md"


def test_set_size(data: str) -> int | None:
    """How many test digits the runs were scored on (the bundled subset's count; None when unknown)."""
    if data != "subset":
        return None
    from seq2d.data.mnist import load_subset_raw

    return int(load_subset_raw("test")[1].numel())


def train_set_size(data: str) -> int | None:
    if data != "subset":
        return None
    from seq2d.data.mnist import load_subset_raw

    return int(load_subset_raw("train")[1].numel())


def output_sources(res: dict, h: int, seed: int, model: str = "random_block") -> set[int]:
    """The slots the output row of that run's randomized model reads (rebuilt from its config: the
    placement is a function of the seed). Without a hidden slot among them the hidden slots cannot
    influence the prediction; with only the input slot the model is a linear classifier."""
    from seq2d.core import core_of
    from seq2d.train.builder import build_model

    env = res["env"]
    row = next(r for r in res["rows"] if r["budget"] == h and r["model"] == model and r["seed"] == seed)
    p = env["protocol"]
    cfg = TrainConfig(data=p["data"], epochs=p["epochs"], batch_size=p["batch_size"], lr=p["lr"], optimizer=p["optimizer"],
                      image_size=p["image_size"], num_threads=p["num_threads"], quiet=True)
    cfg = dataclasses.replace(cfg, **MODELS[model], sizes=row["sizes"], steps=row["iterations"], seed=seed)
    with torch.random.fork_rng(devices=[]):
        core = core_of(build_model(cfg))
    out = core.n - 1
    return {j for i, j, _, _ in core.positions() if i == out}


def output_reads_hidden(res: dict, h: int, seed: int, model: str = "random_block") -> bool:
    """Whether the output row of that run's randomized model reads a hidden slot (:func:`output_sources`)."""
    out = len(next(r for r in res["rows"] if r["budget"] == h and r["model"] == model)["sizes"]) - 1
    return any(0 < j < out for j in output_sources(res, h, seed, model))


def _pts(v) -> str:
    return f"{100 * v:.2f}"


def verdict_section(res: dict, blk: dict | None = None) -> str:
    """What holds, what does not, at what scale: every number read from ``res`` (results.json)."""
    env, summ, diffs = res["env"], res["summary"], res["differences"]
    p = env["protocol"]
    n_test, n_train = test_set_size(p["data"]), train_set_size(p["data"])
    mlp = sorted((x for x in summ if x["model"] == "mlp"), key=lambda x: x["params"])
    iters = sorted({r["iterations"] for r in res["rows"] if r.get("iterations")})
    eq = {}
    for d in diffs:
        eq.setdefault(d["a"], []).append(d)
    worst = min(diffs, key=lambda d: d["diff"])
    data = (f"the bundled MNIST subset, {n_train:,} training / {n_test:,} test digits" if n_test else f"MNIST ({p['data']})")
    lines = ["## Verdict", "",
             "<!-- Written by experiments/param_budget/run.py from docs/results/param_budget/results.json; rerun it "
             "rather than editing numbers. -->", "",
             f"Command: `{REGEN}`. Scale: {data} at {p['image_size']}x{p['image_size']}, {p['epochs']} epochs, "
             f"{len(env['seeds'])} seeds per cell; MLP [{p['image_size'] ** 2}, h, h/2, 10] at {len(mlp)} budgets, "
             f"{mlp[0]['params']:,} to {mlp[-1]['params']:,} trainable parameters; each randomized model has exactly its "
             f"MLP's count and runs {', '.join(map(str, iters))} iterations. Not the paper's setting ({SOURCE}: "
             f"{SOURCE_PROTOCOL['MLP']}, {SOURCE_PROTOCOL['training']}).", ""]
    lines.append(f"- The MLP's accuracy rises with the budget, {_pts(mlp[0]['mean'])}% at {mlp[0]['params']:,} to "
                 f"{_pts(mlp[-1]['mean'])}% at {mlp[-1]['params']:,} parameters (means over seeds).")
    tested = [d for d in diffs if d["equivalent"] is not None]
    adjusted = dict(zip(map(id, tested), holm([d["tost_p"] for d in tested])))
    lines.append(f"- Equivalence claims are made for {len(tested)} (placement, budget) cells at once, so each TOST "
                 "p-value is Holm-adjusted across all of them (family-wise alpha 0.05); unadjusted results in the "
                 "tables below.")
    for m, ds in eq.items():
        yes = [f"{d['params']:,}" for d in ds if d["equivalent"]]
        held = [f"{d['params']:,}" for d in ds if id(d) in adjusted and adjusted[id(d)] < 0.05]
        lines.append(f"- {m} vs the MLP: equivalent within +-{100 * EQUIVALENCE_MARGIN:g} point (TOST, alpha 0.05) at "
                     + (f"{', '.join(yes)} parameters" if yes else "no budget")
                     + f" of {len(ds)}; after Holm at " + (f"{', '.join(held)} parameters" if held else "no budget")
                     + f"; mean differences {_rng_pts([d['diff'] for d in ds])} points.")
    lines.append(f"- Largest mean shortfall against the MLP: {worst['a']} at {worst['params']:,} parameters, "
                 f"{100 * worst['diff']:+.2f} points (95% Welch interval [{100 * worst['lo']:+.2f}, {100 * worst['hi']:+.2f}]).")
    blk = block_placement(res) if blk is None else blk
    if blk:
        lines.append(f"- random_block: in {blk['cut']} of {blk['runs']} runs the output row reads no hidden slot (the "
                     "hidden slots cannot reach the prediction); those runs average "
                     f"{_pts(blk['acc_cut'])}% against {_pts(blk['acc_ok'])}% for the others (per-seed table below). "
                     f"They are seeds {blk['cut_seeds']}"
                     + (" at every budget: the block draw's connectivity follows the seed, so they are "
                        f"{len(blk['cut_seeds'])} independent draws, not {blk['cut']}" if blk["cut_every_budget"] else "")
                     + (f"; in {blk['cut_linear']} of them the output row reads the input slot and no hidden slot "
                        "(at most itself, and the output slot has no activation): those runs are linear classifiers, "
                        "not a test of placement." if blk["cut_linear"] else "."))
    if n_test:
        se = [binomial_se(x["mean"], n_test) for x in mlp]
        lines.append(f"- The test set has {n_test:,} digits: the binomial standard error of one accuracy, "
                     f"sqrt(p (1 - p) / n), is {_rng_pts(se, signed=False)} points at the MLP's accuracies, close to the "
                     f"+-{100 * EQUIVALENCE_MARGIN:g}-point margin. Averaging seeds does not reduce it (every run is "
                     "scored on the same digits), so an \"equivalent\" here holds for these digits; on another test "
                     "set of this size the accuracies could move by about that much.")
    lines.append("- Not tested here: full MNIST, the paper's sizes and epochs. Low densities of the random placement "
                 "and the number of iterations are on [placement.md](placement.md) (full MNIST at 28x28, 20 epochs) and [mnist1d.md](mnist1d.md).")
    return "\n".join(lines)


def _rng_pts(v, signed=True) -> str:
    f = "+.2f" if signed else ".2f"
    a, b = format(100 * min(v), f), format(100 * max(v), f)
    return a if a == b else f"{a} to {b}"


def block_placement(res: dict) -> dict | None:
    """Per random_block run: whether its output row reads a hidden slot, its accuracy and its MLP's;
    with the counts and mean accuracies of the two groups."""
    rows = [r for r in res["rows"] if r["model"] == "random_block"]
    if not rows:
        return None
    mlp = {(r["budget"], r["seed"]): r["test_acc"] for r in res["rows"] if r["model"] == "mlp"}
    per = []
    for r in rows:
        src, out = output_sources(res, r["budget"], r["seed"]), len(r["sizes"]) - 1
        per.append({"budget": r["budget"], "params": r["params"], "seed": r["seed"], "acc": r["test_acc"],
                    "mlp": mlp.get((r["budget"], r["seed"])), "reads_hidden": any(0 < j < out for j in src),
                    "linear": 0 in src and src <= {0, out}})
    cut, ok = [x["acc"] for x in per if not x["reads_hidden"]], [x["acc"] for x in per if x["reads_hidden"]]
    cut_seeds = sorted({x["seed"] for x in per if not x["reads_hidden"]})
    return {"per_run": per, "runs": len(per), "cut": len(cut), "cut_seeds": cut_seeds,
            "cut_linear": sum(1 for x in per if not x["reads_hidden"] and x["linear"]),
            "cut_every_budget": all(sum(1 for x in per if x["seed"] == sd and not x["reads_hidden"])
                                    == sum(1 for x in per if x["seed"] == sd) for sd in cut_seeds),
            "acc_cut": statistics.fmean(cut) if cut else float("nan"), "acc_ok": statistics.fmean(ok) if ok else float("nan")}


def results_section(res: dict, blk: dict | None = None) -> str:
    """The setting against the source's, the provenance, the tables (with the test set's standard error
    next to the equivalence test) and the random_block per-seed table."""
    env, p = res["env"], res["env"]["protocol"]
    n_test, n_train = test_set_size(p["data"]), train_set_size(p["data"])
    budgets = env["budgets"]
    mlp = sorted((x for x in res["summary"] if x["model"] == "mlp"), key=lambda x: x["params"])
    iters = sorted({r["iterations"] for r in res["rows"] if r.get("iterations")})
    load = lambda v: "n/a" if not v else "/".join(f"{x:.2f}" for x in v)  # noqa: E731
    data = f"bundled subset, {n_train:,} training / {n_test:,} test digits" if n_test else p["data"]
    lines = ["## Setting, against the source's", "",
             "<!-- Written by experiments/param_budget/run.py from its results.json; rerun it rather than editing numbers. -->",
             "", f"The source column quotes {SOURCE}; it has no parameter-budget experiment, and its MNIST comparison is "
             "the nearest experiment.", "",
             f"| aspect | {SOURCE} | this page (our variant) |", "| --- | --- | --- |",
             f"| question | one budget (the MLP's), MLP vs a randomized architecture | {len(budgets)} budgets, MLP vs "
             f"{', '.join(m for m in env['models'] if m != 'mlp')} placement |",
             f"| data | {SOURCE_PROTOCOL['data']} | {data}, {p['image_size']}x{p['image_size']}, normalised, no augmentation |",
             f"| MLP | {SOURCE_PROTOCOL['MLP']} | [{p['image_size'] ** 2}, h, h/2, 10], h in {budgets} |",
             f"| training | {SOURCE_PROTOCOL['training']} | {p['optimizer'].title()}, learning rate {p['lr']:g}, batch size "
             f"{p['batch_size']}, {p['epochs']} epochs |",
             f"| randomized models | {SOURCE_PROTOCOL['randomized models']} | exactly the MLP's count (weights + biases) "
             f"over every non-input row x every column (`seq2d.randomize`); {', '.join(map(str, iters))} iterations |",
             f"| result | {SOURCE_PROTOCOL['result']} | {len(env['seeds'])} seeds per cell; Welch interval and TOST within "
             f"+-{100 * EQUIVALENCE_MARGIN:g} point (our margin) |", "",
             "## Runs", "",
             "- every run (model, budget, seed, parameters, accuracy, times) and the per-budget Welch/TOST numbers: "
             "[param_budget/results.json](param_budget/results.json) (a copy of the run's `results.json`)",
             f"- command: `{env['command']}`; this page's generated sections again from the JSON: `{REGEN}`",
             f"- date: {env['date']} to {env['finished']}",
             f"- hardware: {env['nproc']} cores ({env['cpu']}); torch {env['torch']}, CPU only, {p['num_threads']} torch "
             f"thread(s) per run; load average (1/5/15 min) {load(env.get('loadavg_start'))} at the start, "
             f"{load(env.get('loadavg_end'))} at the end (a shared machine)",
             f"- protocol (the same for every run): {p['optimizer'].title()}, lr {p['lr']:g}, batch {p['batch_size']}, "
             f"{p['epochs']} epochs; final test accuracy after the last epoch; seeds {env['seeds']} (the seed sets the "
             "data order, the initial values and, for the randomized models, the placement)",
             f"- budgets: {mlp[0]['params']:,} to {mlp[-1]['params']:,} trainable parameters; every randomized model "
             "has exactly its MLP's count (checked by the script)",
             f"- statistics: per budget, placement - MLP difference of mean accuracy with a 95% Welch interval "
             f"(`seq2d.stats.welch`) and a TOST equivalence test within +-{100 * EQUIVALENCE_MARGIN:g} point, alpha 0.05 "
             f"(`seq2d.stats.tost`); \"equivalent\" only when the 90% interval lies inside the margin. With "
             f"{len(env['seeds'])} seeds per cell the tests are weak: \"no\" mostly means \"not shown\", not \"different\".",
             "- train time / run: the sum of the epoch times (training only), wall-clock on a shared machine: rough.",
             "", format_tables(res["summary"], res["differences"]), ""]
    if n_test:
        se = [binomial_se(x["mean"], n_test) for x in mlp]
        lines += [f"**The test set's own noise, next to the equivalence claims.** Every run is scored on the same "
                  f"{n_test:,} test digits. An accuracy p measured on n = {n_test:,} digits has a binomial standard error "
                  f"sqrt(p (1 - p) / n): {_rng_pts(se, signed=False)} points at the MLP's mean accuracies here "
                  + "(" + ", ".join(f"{x['params']:,} parameters: {100 * binomial_se(x['mean'], n_test):.2f}" for x in mlp)
                  + f"), close to the +-{100 * EQUIVALENCE_MARGIN:g}-point margin of the TOST column. The Welch interval "
                  "and TOST see only the spread over seeds; they do not include this sampling error of the test set, "
                  "which averaging seeds does not reduce. An \"equivalent\" above is equivalence on these digits.", ""]
    blk = block_placement(res) if blk is None else blk
    if blk:
        lines += ["Random-block runs, per seed: does the output row read a hidden slot? (rebuilt from each run's config: "
                  "the placement is a function of the seed)", "",
                  "| hidden h | trainable params | seed | output reads a hidden slot | random_block accuracy | MLP accuracy, same seed |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for x in blk["per_run"]:
            lines.append(f"| {x['budget']} | {x['params']:,} | {x['seed']} | {'yes' if x['reads_hidden'] else 'no'} | "
                         f"{_pts(x['acc'])} % | {'n/a' if x['mlp'] is None else _pts(x['mlp']) + ' %'} |")
        lines.append("")
    lines += ["![accuracy vs parameters](param_budget/accuracy_vs_params.png)", "",
              "(Points: mean over the seeds; bars: +- 1 std; the placements are shifted slightly along x so the bars do "
              "not overlap.)"]
    return "\n".join(lines)


def todays_names(res):
    """``res`` (a results.json) with every model name (``model``, ``models``, a difference's ``a`` and ``b``) in
    today's spelling: results saved
    before the rename say ``random-block`` (seq2d.renames.OLD_NAMES["mnist_model"])."""
    from seq2d.renames import migrate_model_name

    if isinstance(res, dict):
        return {k: migrate_model_name(v, "mnist_model") if k in ("model", "a", "b")
                else [migrate_model_name(m, "mnist_model") for m in v] if k == "models" else todays_names(v)
                for k, v in res.items()}
    return [todays_names(v) for v in res] if isinstance(res, list) else res


def write_page(res: dict, doc: Path) -> None:
    """The generated sections of the page (verdict, results), the rest of the page left as it is."""
    from seq2d.results_page import write_section

    res = todays_names(res)

    title = "# Parameter budget: test accuracy vs trainable parameters, per placement"
    blk = block_placement(res)  # rebuilds the random_block models once, for both sections
    write_section(doc, "param-budget-verdict", verdict_section(res, blk), title=title)
    write_section(doc, "param-budget-results", results_section(res, blk), title=title)
    print(f"wrote the generated sections of {doc}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--budgets", default=DEFAULT_BUDGETS,
                    help=f"comma-separated first hidden widths h of the MLP [s0, h, h/2, 10] (default {DEFAULT_BUDGETS})")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run (default 3)")
    ap.add_argument("--models", default=",".join(PLACEMENTS), help="comma-separated subset of " + ", ".join(PLACEMENTS))
    ap.add_argument("--data", choices=("subset", "full", "synthetic"), default="subset", help="data set (default subset)")
    ap.add_argument("--image-size", type=int, default=28, help="inputs resized to this edge (default 28)")
    ap.add_argument("--num-threads", type=int, default=1, help="torch threads per run (default 1)")
    ap.add_argument("--jobs", type=jobs_arg, default=1, metavar="INT|auto",
                    help="runs trained at once (default 1: one after the other in this process); with --launcher "
                         "slurm: tasks of the job array at once (auto: no limit)")
    add_launcher_args(ap)
    ap.add_argument("--out", default="runs/param_budget", help="output folder")
    ap.add_argument("--doc", default=None, help="also write the results page (markdown) here, the plot next to it")
    ap.add_argument("--quick", action="store_true", help="CI smoke run: 2 budgets, 1 seed, 1 epoch on the subset")
    ap.add_argument("--fresh", action="store_true", help="retrain finished runs")
    ap.add_argument("--from-json", default=None, metavar="RESULTS_JSON",
                    help="write the --doc page's generated sections from this results.json (nothing retrained)")
    args = ap.parse_args(argv)
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        if not args.doc:
            ap.error("--from-json needs --doc")
        write_page(res, Path(args.doc))
        return 0

    budgets = [int(b) for b in args.budgets.split(",") if b]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.quick:
        # the two smallest budgets given (default: h = 8 and 16), one seed, one epoch
        budgets = sorted(budgets)[:2] if args.budgets != DEFAULT_BUDGETS else [8, 16]
        seeds, args.epochs = [0], 1
    models = [m for m in args.models.split(",") if m]
    bad = [m for m in models if m not in PLACEMENTS]
    if bad or "mlp" not in models:
        ap.error(f"models must include mlp and be among {PLACEMENTS}; got {models}")
    launcher = launcher_from_args(args, ap.error)
    torch.set_num_threads(args.num_threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None

    protocol = {"data": args.data, "epochs": args.epochs, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                "image_size": args.image_size, "num_threads": args.num_threads, "quiet": True}
    base = TrainConfig(**protocol)
    configs = {}
    for h in budgets:
        sizes = sizes_for(h, args.image_size)
        for m in models:
            extra = {"steps": len(sizes) - 1} if m != "mlp" else {}
            configs[h, m] = dataclasses.replace(base, **MODELS[m], sizes=sizes, **extra)
    resume = not args.fresh
    if launcher.submitit or args.jobs != 1:
        # every run at once through the launcher (one job array on SLURM); the loop below then reuses them
        plan, tags = [], []
        for seed in seeds:
            for (h, m), cfg in configs.items():
                plan += plan_runs({m: cfg}, [seed], out / f"h{h}")
                tags.append(f"[h={h}] [{m} seed {seed}]")
        run_plan(plan, folder=out, resume=resume, jobs=args.jobs, launcher=launcher, tags=tags,
                 log=lambda s: print(s, flush=True))
        resume = True
    rows = []
    # seeds outermost: a sweep stopped early still has every budget and placement for its first seeds
    for seed in seeds:
        for (h, m), cfg in configs.items():
            t0 = time.perf_counter()
            (r,) = compare({m: cfg}, [seed], out / f"h{h}", resume=resume,
                           log=lambda s, h=h: print(f"[h={h}] {s}", flush=True))
            wall = time.perf_counter() - t0
            tpe = r.get("time_per_epoch_s")
            rows.append({"model": m, "budget": h, "sizes": cfg.sizes, "seed": seed, "params": r["params"],
                         "test_acc": r["test_acc"], "epochs": r["epochs"],
                         "time_s": (tpe * r["epochs"]) if tpe is not None else wall,
                         "time_per_epoch_s": tpe, "wall_s_this_call": wall, "granularity": r["granularity"],
                         "iterations": r["model_steps"], "complete": r["complete"], "run_dir": r["run_dir"]})
            print(f"[h={h}] {m} seed {seed}: params {r['params']:,}, test acc {100 * r['test_acc']:.2f}%, "
                  f"{rows[-1]['time_s']:.1f} s", flush=True)

    # the randomized models must carry exactly their MLP's trainable-parameter count
    for h in budgets:
        counts = {r["model"]: r["params"] for r in budget_rows(rows, h)}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"parameter counts differ at h={h}: {counts}")

    summ = summary(rows, budgets)
    diffs = stats_for(rows, budgets)
    tables = format_tables(summ, diffs)
    title = (f"MNIST {args.data} ({args.image_size}x{args.image_size}), {args.epochs} epoch(s), "
             f"seeds {seeds}: mean +- std")
    plot(summ, out / "accuracy_vs_params.png", title)
    env = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
           "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
           "nproc": os.cpu_count(), "cpu": cpu_name(), "torch": torch.__version__,
           "loadavg_start": _round(load_start), "loadavg_end": _round(os.getloadavg() if hasattr(os, "getloadavg") else None),
           "seeds": seeds, "budgets": budgets, "models": models,
           "protocol": {k: v for k, v in protocol.items() if k != "quiet"}}
    (out / "results.json").write_text(json.dumps({"env": env, "rows": rows, "summary": summ, "differences": diffs},
                                                 indent=1))
    (out / "results.md").write_text(tables + "\n")
    print(tables)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'accuracy_vs_params.png'}")
    if args.doc:
        write_doc(Path(args.doc), out, env, tables)
    return 0


def write_doc(doc: Path, out: Path, env: dict, tables: str) -> None:
    """The plot and results.json copied next to the page (``<page stem>/``), then the page's generated
    sections from that JSON (:func:`write_page`; the hand-written text outside the markers is kept)."""
    import shutil

    img_dir = doc.parent / doc.stem
    img_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "accuracy_vs_params.png", img_dir / "accuracy_vs_params.png")
    shutil.copy(out / "results.json", img_dir / "results.json")
    write_page(json.loads((img_dir / "results.json").read_text()), doc)


if __name__ == "__main__":
    raise SystemExit(main())
