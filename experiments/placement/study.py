"""Placement at a length that supports it (issue 33, item 3): the runs behind the next
docs/results/placement.md, with the controls the 1-epoch study lacked.

The question (the summary of Hershey et al., seeds/003_5467b9de8681185d.txt, Open Question 1:
how the placement of trainable parameters affects training across data sets and tasks): at the
trainable-parameter count of the MLP [784, 32, 16, 10] (25,818), spread over a larger block
matrix [784, h, h/2, 10] at density 0.1 or 0.02, does random placement train like the MLP?

Cells (each trained with ``--seeds``, default 5, for ``--epochs``, default 20, with its learning
curve kept):

``mlp``                           the MLP [784, 32, 16, 10] itself
``{element,tile}-d{D}-{region}``  ``seq2d.randomize`` of the MLP's count over [784, h, h/2, 10]
                                  (h for density D), element or 16 x 16 tile placement, over
                                  region ``default`` (every non-input row) or ``no-shortcut``
                                  (without the input -> output block: the prediction must pass
                                  a hidden slot), 3 iterations
``block-d{D}``                    whole blocks at random (default region): trained, and reported
                                  by connectivity, not by a mean over bimodal runs

Block placement is also counted over ``--draws`` seeds without training (:func:`connectivity`):
how many draws have an empty output row and how many have no input -> output walk within the
iterations. The linear baseline (the softmax classifier [784, 10]: the input -> output block alone, the
shortcut) is not trained here: issue 32's 100-epoch ``linear_28`` runs
(experiments/mnist_sparsity/results/full-ours/linear_28/) use this protocol (28x28, normalised,
Adam 1e-3, batch 64, the same seeds), and with a constant learning rate and a data order that
depends only on (seed, epoch), their first 20 epochs are a 20-epoch run; the page reads their
epoch-20 rows. The "fewer parameters" direction of the 1-epoch study is dropped: its bottleneck
MLPs ([784, 1, 1, 10]) confounded width with placement.

    nice -n 10 python experiments/placement/study.py --jobs 2 --out runs/placement_study
    python experiments/placement/study.py --collect runs/placement_study    # small files -> results/study
    python experiments/placement/study_report.py                            # results/study -> docs/results/placement.md
    python experiments/placement/study.py --quick --out /tmp/study_quick     # CI: subset, 1 epoch, 1 seed

A run folder ``OUT/<cell>/seed<k>/`` holds the Trainer's files while it trains (resumed from its
checkpoint when interrupted) and ``row.json`` when finished (then skipped; its checkpoint deleted).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import TILE, mlp_count, mlp_sizes, spread_width, structure  # noqa: E402  (the 1-epoch study's helpers)
import grid  # noqa: E402  (what this study shares with experiments/mnist1d/placement.py)

from seq2d.lab.launch import add_launcher_args, jobs_arg, launcher_from_args  # noqa: E402

BASE_H = 32
DENSITIES = (0.1, 0.02)
REGIONS = ("default", "no-shortcut")
ITERATIONS = 3
RESULTS = HERE / "results" / "study"
KEEP = ("row.json", "metrics.jsonl", "test_predictions.npz")  # what --collect copies (never checkpoints)


def cells(densities=DENSITIES, s0: int = 784) -> list[dict]:
    """Every cell of the study, in training order (cheap first)."""
    base = mlp_count(mlp_sizes(BASE_H, s0))
    out = [{"cell": "mlp", "placement": "mlp", "sizes": mlp_sizes(BASE_H, s0)}]
    for d in densities:
        h = spread_width(d, base, s0)
        for p in ("element", "tile"):
            for region in REGIONS:
                out.append({"cell": f"{p}-d{d:g}-{region}", "placement": p, "density": d, "region": region,
                            "sizes": mlp_sizes(h, s0), "params": base})
        out.append({"cell": f"block-d{d:g}", "placement": "block", "density": d, "region": "default",
                    "sizes": mlp_sizes(h, s0), "params": base})
    return out


def build(cell: dict, seed: int):
    """The model of one run: the MLP / linear classifier, or ``randomize`` of the MLP's count."""
    from seq2d import mlp, randomize

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cell["placement"] == "mlp":
            return mlp(cell["sizes"])
        return randomize(mlp(cell["sizes"]), cell["placement"], region=cell["region"], seed=seed, tile=TILE,
                         steps=ITERATIONS, params=cell["params"])


def connectivity(cell: dict, draws: int) -> dict:
    """Over seeds 0..draws-1 of a random placement (untrained): how many draws leave the output
    row empty and how many have no input -> output walk within the iterations."""
    return grid.connectivity(cell, draws, build)


def run_one(cell: dict, seed: int, out: str, protocol: dict) -> dict:
    """Train one run to the end (resuming its checkpoint) or read its finished row.json."""
    from seq2d.fileio import atomic_write
    from seq2d.train import Trainer, TrainConfig, load_data

    folder = Path(out) / cell["cell"] / f"seed{seed}"
    done = folder / "row.json"
    if done.is_file():
        return json.loads(done.read_text())
    model = build(cell, seed)
    st = structure(model, cell)
    cfg = TrainConfig(model="mlp" if cell["placement"] == "mlp" else "random_model", sizes=list(cell["sizes"]),
                      granularity="element" if cell["placement"] == "mlp" else cell["placement"],
                      region=cell.get("region", "default"), steps=None if cell["placement"] == "mlp" else ITERATIONS,
                      seed=seed, out_dir=str(folder), name=f"{cell['cell']}-s{seed}",
                      allow_constant_output=cell["placement"] != "mlp",  # a draw without a walk is trained, counted
                      **protocol)
    trainer = Trainer(cfg, model, load_data(cfg, "cpu"))
    if st["output_fixed"]:  # nothing can change a constant output: record it untrained (chance)
        folder.mkdir(parents=True, exist_ok=True)  # no fit() made it
        e = trainer.evaluate()
        s = {"params": model.num_parameters(), "final_test_acc": e["acc"], "final_test_loss": e["loss"],
             "best_test_acc": e["acc"], "epochs": 0, "time_per_epoch_s": None}
    else:
        s = trainer.fit(resume=(folder / "checkpoint.pt").is_file())
    row = {**{k: v for k, v in cell.items()}, "seed": seed, "params": s["params"], "test_acc": s["final_test_acc"],
           "test_loss": s["final_test_loss"], "best_test_acc": s["best_test_acc"], "epochs": s["epochs"],
           "time_per_epoch_s": s["time_per_epoch_s"], "trained": not st["output_fixed"],
           **{k: v for k, v in st.items() if k not in ("density",)}}
    if cell["placement"] != "mlp" and row["params"] != cell["params"]:
        raise RuntimeError(f"{cell['cell']} seed {seed}: {row['params']} parameters, expected {cell['params']}")
    atomic_write(done, json.dumps(row, indent=1))
    (folder / "checkpoint.pt").unlink(missing_ok=True)
    return row


def collect(runs: Path, dest: Path) -> int:
    """Copy every finished run's small files (:data:`KEEP`) and the connectivity counts to ``dest``."""
    return grid.collect(runs, dest, KEEP)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--cells", default=None, help="comma-separated cell names (default: all, see the docstring)")
    ap.add_argument("--draws", type=int, default=100, help="untrained draws of the block placement's connectivity count")
    ap.add_argument("--jobs", type=jobs_arg, default=1, metavar="INT|auto")
    ap.add_argument("--out", default="runs/placement_study")
    ap.add_argument("--collect", default=None, metavar="RUNS", help="copy the finished runs' small files to --dest")
    ap.add_argument("--dest", default=str(RESULTS))
    ap.add_argument("--quick", action="store_true", help="CI smoke run: bundled subset, 1 epoch, seed 0, 3 cells")
    add_launcher_args(ap)
    args = ap.parse_args(argv)
    if args.collect:
        collect(Path(args.collect), Path(args.dest))
        return 0
    launcher = launcher_from_args(args, ap.error)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    data = "full"
    todo = cells()
    if args.quick:
        seeds, args.epochs, data, args.draws = [0], 1, "subset", 3
        todo = [c for c in todo if c["cell"] in ("mlp", "element-d0.1-no-shortcut", "block-d0.1")]
    elif args.cells:
        todo = grid.select(todo, args.cells, ap.error)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    grid.write_connectivity(out, [c for c in todo if c["placement"] == "block"], args.draws, build, log=True)
    protocol = {"data": data, "epochs": args.epochs, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                "image_size": 28, "num_threads": 1, "quiet": True}
    tasks = [(c, s, str(out), protocol) for s in seeds for c in todo]
    res = grid.launch(launcher, run_one, tasks, out, done=lambda folder: (folder / "row.json").is_file())
    return grid.failed(res)


if __name__ == "__main__":
    raise SystemExit(main())
