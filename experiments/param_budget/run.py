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

A budget is given by its first hidden width ``h``. Runs land in ``OUT/h<h>/<model>/seed<k>/``
(finished runs are reused). Outputs: ``OUT/results.json`` (every run: model, budget, seed,
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
from seq2d.mnist_comparison import EQUIVALENCE_MARGIN, MODELS, compare, difference  # noqa: E402
from seq2d.train.config import TrainConfig  # noqa: E402

PLACEMENTS = ["mlp", "random-element", "random-tile", "random-block"]
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
    markers = {"mlp": "o", "random-element": "s", "random-tile": "^", "random-block": "D"}
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
    ap.add_argument("--out", default="runs/param_budget", help="output folder")
    ap.add_argument("--doc", default=None, help="also write the results page (markdown) here, the plot next to it")
    ap.add_argument("--quick", action="store_true", help="CI smoke run: 2 budgets, 1 seed, 1 epoch on the subset")
    ap.add_argument("--fresh", action="store_true", help="retrain finished runs")
    args = ap.parse_args(argv)

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
            extra = {"iterations": len(sizes) - 1} if m != "mlp" else {}
            configs[h, m] = dataclasses.replace(base, **MODELS[m], sizes=sizes, **extra)
    rows = []
    # seeds outermost: a sweep stopped early still has every budget and placement for its first seeds
    for seed in seeds:
        for (h, m), cfg in configs.items():
            t0 = time.perf_counter()
            (r,) = compare({m: cfg}, [seed], out / f"h{h}", resume=not args.fresh,
                           log=lambda s, h=h: print(f"[h={h}] {s}", flush=True))
            wall = time.perf_counter() - t0
            tpe = r.get("time_per_epoch_s")
            rows.append({"model": m, "budget": h, "sizes": cfg.sizes, "seed": seed, "params": r["params"],
                         "test_acc": r["test_acc"], "epochs": r["epochs"],
                         "time_s": (tpe * r["epochs"]) if tpe is not None else wall,
                         "time_per_epoch_s": tpe, "wall_s_this_call": wall, "granularity": r["granularity"],
                         "iterations": r["iterations"], "complete": r["complete"], "run_dir": r["run_dir"]})
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
    """A bare results page (the numbers; the discussion is written by hand below the marker)."""
    import shutil

    img_dir = doc.parent / doc.stem
    img_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "accuracy_vs_params.png", img_dir / "accuracy_vs_params.png")
    p = env["protocol"]
    lines = [
        "# Parameter budget: test accuracy vs trainable parameters, per placement",
        "",
        f"- command: `{env['command']}`",
        f"- date: {env['date']} to {env['finished']}; hardware: {env['nproc']} cores ({env['cpu']}); torch {env['torch']}",
        f"- load average (1/5/15 min) at start {env['loadavg_start']}, at end {env['loadavg_end']}",
        f"- protocol: data={p['data']}, {p['epochs']} epochs, batch {p['batch_size']}, {p['optimizer']} lr {p['lr']}, "
        f"{p['image_size']}x{p['image_size']} inputs, {p['num_threads']} torch thread(s); seeds {env['seeds']}",
        "",
        "train time / run: the sum of the runs' epoch times (training only, wall-clock, 1 thread on a shared "
        "machine: rough).",
        "",
        tables,
        "",
        f"![accuracy vs parameters]({doc.stem}/accuracy_vs_params.png)",
    ]
    doc.write_text("\n".join(lines) + "\n")
    print(f"wrote {doc}")


if __name__ == "__main__":
    raise SystemExit(main())
