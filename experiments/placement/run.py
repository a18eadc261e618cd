"""Placement at low density, and the number of iterations (issue 20, items 5 and 6).

The open questions of Hershey et al. as the summary of the paper states them
(seeds/003_5467b9de8681185d.txt, "Open Questions"): how the placement of trainable parameters
affects training, and how the number of iterations relates to training performance. The
randomized models of the MS-thesis scripts sit at about half density (our audit's reading, 0.5108 per
block; the summary states no density); here the density of the random
placement is lowered in two ways, kept apart:

``spread``  the trainable-parameter count of the MLP [784, 32, 16, 10] (25,818) over a larger
            block matrix [784, h, h/2, 10] (wider hidden slots), h chosen for each target
            density; compared with that one MLP;
``fewer``   fewer parameters over the same block matrix [784, 32, 16, 10]: the count of a
            smaller MLP [784, h', h'/2, 10], compared with that smaller MLP.

Each random model is :func:`seq2d.randomize` (``params=``) at element, tile (16 x 16) or block
granularity, 3 iterations (the MLP's depth); next to its accuracy the page reports its
input-to-output path length and the fraction of its parameters on an input-output walk
(:func:`seq2d.graph.unit_paths`). ``iterations``: the [784, 32, 16, 10] random models at 1-8
iterations.

    # the grid of docs/results/placement-1epoch.md (trains what is missing, then writes the results)
    python experiments/placement/run.py --jobs 2 --out runs/placement --doc docs/results/placement-1epoch.md \\
        --results experiments/placement/results
    # CI smoke run (tiny grid, synthetic data)
    python experiments/placement/run.py --quick --out /tmp/placement_quick
    # the page again from the committed JSON (nothing trained)
    python experiments/placement/run.py --from-json experiments/placement/results/results.json \\
        --doc docs/results/placement-1epoch.md

Runs land in ``OUT/<run key>/`` (``row.json`` when finished: finished runs are skipped).
``--launcher slurm --partition P --time T`` sends each run to SLURM as one task of a job array
(:mod:`seq2d.lab.launch`, as for ``seq2d mnist``); ``--launcher submitit-local`` tries that here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path

import torch

from seq2d.lab.launch import add_launcher_args, jobs_arg, launcher_from_args

IMAGE = 28
BASE_H = 32
PLACEMENTS = ("element", "tile", "block")
SPREAD_DENSITIES = (0.2, 0.1, 0.05, 0.02)
FEWER_H = (16, 8, 4, 2, 1)
ITERATIONS = tuple(range(1, 9))
TILE = 16


def mlp_sizes(h: int, s0: int = IMAGE * IMAGE) -> list[int]:
    return [s0, h, max(1, h // 2), 10]


def mlp_count(sizes) -> int:
    """Trainable parameters of the MLP ``sizes`` (weights + biases)."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def density_of(slots, params: int) -> float:
    """The random placement's density over every non-input row x every column: (params - biases) / area
    (every non-input slot has a bias; exact unless a slot draws no entry at all)."""
    rows, n = sum(slots[1:]), sum(slots)
    return (params - rows) / (rows * n)


def spread_width(target: float, params: int, s0: int = IMAGE * IMAGE) -> int:
    """The hidden width h of [s0, h, h/2, 10] whose density for ``params`` is closest to ``target``."""
    return min(range(BASE_H, 4096), key=lambda h: abs(density_of(mlp_sizes(h, s0), params) - target))


# ---------------------------------------------------------------------- the grid
def run_key(r: dict) -> str:
    if r["placement"] == "mlp":
        return f"mlp-h{r['h_params']}/seed{r['seed']}"
    return f"{r['placement']}-p{r['h_params']}-w{r['h_slots']}-i{r['iterations']}/seed{r['seed']}"


def grid(seeds5, seeds3, spread=SPREAD_DENSITIES, fewer=FEWER_H, iterations=ITERATIONS, base_h=BASE_H,
         s0=IMAGE * IMAGE) -> list[dict]:
    """Every run once (the base random model is shared by the three groups), in the order they are
    trained: item 5 for every seed (but the lowest spread density), item 6, then the lowest spread
    density (its wide block matrix makes those runs the slowest)."""
    base_params = mlp_count(mlp_sizes(base_h, s0))
    widths = [base_h] + [spread_width(d, base_params, s0) for d in spread]

    def item5(seed, ws):
        out = [dict(placement="mlp", h_params=base_h, h_slots=base_h, iterations=3, seed=seed)]
        for w in ws:
            out += [dict(placement=p, h_params=base_h, h_slots=w, iterations=3, seed=seed) for p in PLACEMENTS]
        if ws[0] != base_h:  # the lowest spread density alone (the most expensive runs: trained last)
            return out[1:]
        for h in fewer:
            out.append(dict(placement="mlp", h_params=h, h_slots=h, iterations=3, seed=seed))
            out += [dict(placement=p, h_params=h, h_slots=base_h, iterations=3, seed=seed) for p in PLACEMENTS]
        return out

    def item6(seed):
        return [dict(placement=p, h_params=base_h, h_slots=base_h, iterations=it, seed=seed)
                for it in iterations for p in PLACEMENTS]

    early, late = widths[:-1] if len(widths) > 2 else widths, widths[-1:] if len(widths) > 2 else []
    runs = [r for s in seeds5 for r in item5(s, early)] + [r for s in seeds3 for r in item6(s)]
    runs += [r for s in seeds5 for r in (item5(s, late) if late else [])]
    seen, out = set(), []
    for r in runs:
        if run_key(r) not in seen:
            seen.add(run_key(r))
            out.append(r)
    return out


def build(spec: dict, s0: int):
    """The model of a run: the MLP, or ``randomize`` of the MLP count ``h_params`` over the slots ``h_slots``."""
    from seq2d import randomize
    from seq2d.models.feedforward import mlp

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec["seed"])
        if spec["placement"] == "mlp":
            return mlp(mlp_sizes(spec["h_params"], s0))
        return randomize(mlp(mlp_sizes(spec["h_slots"], s0)), spec["placement"], seed=spec["seed"], tile=TILE,
                         steps=spec["iterations"], params=mlp_count(mlp_sizes(spec["h_params"], s0)))


def structure(model, spec: dict) -> dict:
    """Path length and reach of a built model (seq2d.graph), its density over the region."""
    from seq2d.core import core_of
    from seq2d.graph import distances, unit_paths

    core = core_of(model)
    u = unit_paths(core)
    rows, n = sum(core.sizes[1:]), sum(core.sizes)
    out_slot = core.outputs[0]
    return {"path_length": u["path_length"], "slot_distance": distances(core)[out_slot], "fraction_on_path": u["fraction"],
            "on_path": u["on_path"], "weights": u["weights"], "biases": u["biases"],
            "density": u["weights"] / (rows * n) if spec["placement"] != "mlp" else None,
            "input_reaches_output": u["path_length"] is not None and u["path_length"] <= u["steps"],
            "output_fixed": not any(i in core.outputs for i, _, _, _ in core.positions())
            and all(core.bias(o) is None for o in core.outputs)}


_DATA: dict = {}


def run_one(spec: dict, out: str, protocol: dict) -> dict:
    """Train one run (or read its finished row.json) and return its row."""
    from seq2d.fileio import atomic_write
    from seq2d.train import Trainer, TrainConfig, load_data

    folder = Path(out) / run_key(spec)
    done = folder / "row.json"
    if done.is_file():
        return json.loads(done.read_text())
    s0 = protocol["image_size"] ** 2
    model = build(spec, s0)
    st = structure(model, spec)
    cfg = TrainConfig(model="mlp" if spec["placement"] == "mlp" else "random_model",
                      granularity="element" if spec["placement"] == "mlp" else spec["placement"],
                      sizes=list(model.sizes) if hasattr(model, "sizes") else mlp_sizes(spec["h_slots"], s0),
                      steps=None if spec["placement"] == "mlp" else spec["iterations"],
                      seed=spec["seed"], out_dir=str(folder), name=run_key(spec).replace("/", "-"),
                      allow_constant_output=True, **protocol)  # the sweep measures models that cannot see x too
    key = (cfg.data, cfg.image_size)
    if key not in _DATA:
        _DATA.clear()
        _DATA[key] = load_data(cfg, "cpu")
    t0 = time.perf_counter()
    trainer = Trainer(cfg, model, _DATA[key])
    if st["output_fixed"]:
        # no block and no bias in the output row: the output is constant (zero) and no parameter can
        # change it, so there is nothing to train; the row records the untrained accuracy (chance)
        e = trainer.evaluate()
        s = {"params": model.num_parameters(), "final_test_acc": e["acc"], "final_test_loss": e["loss"], "epochs": 0,
             "time_per_epoch_s": None}
    else:
        s = trainer.fit(overwrite=True)
    row = {**spec, "key": run_key(spec), "params": s["params"], "test_acc": s["final_test_acc"],
           "test_loss": s["final_test_loss"], "epochs": s["epochs"], "time_per_epoch_s": s["time_per_epoch_s"],
           "wall_s": time.perf_counter() - t0, "sizes": cfg.sizes, "trained": not st["output_fixed"], **st}
    if spec["placement"] != "mlp" and row["params"] != mlp_count(mlp_sizes(spec["h_params"], s0)):
        raise RuntimeError(f"{run_key(spec)}: {row['params']} parameters, expected the MLP's count")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(done, json.dumps(row, indent=1))
    for f in ("checkpoint.pt",):
        (folder / f).unlink(missing_ok=True)  # 1-epoch runs are never continued; keep the folder small
    return row


# ---------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="seeds of the density grid (item 5; default 0-4)")
    ap.add_argument("--iteration-seeds", default="0,1,2", help="seeds of the iteration sweep (item 6; default 0-2)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run (default 1)")
    ap.add_argument("--data", choices=("full", "subset", "synthetic"), default="full", help="data set (default full MNIST)")
    ap.add_argument("--jobs", type=jobs_arg, default=1, metavar="INT|auto",
                    help="runs trained at once (default 1: one after the other in this process); with --launcher "
                         "slurm: tasks of the job array at once (auto: no limit)")
    ap.add_argument("--out", default="runs/placement", help="run folders and results go here")
    ap.add_argument("--doc", default=None, help="also write the results page here (plots and JSON next to it)")
    ap.add_argument("--results", default=None, help="with --doc: copy results.json/csv here too "
                                                     "(the committed copy: experiments/placement/results)")
    ap.add_argument("--no-train", action="store_true", help="only collect the finished runs and write the results")
    ap.add_argument("--quick", action="store_true", help="CI smoke run: 1 seed, 1 low density per direction, "
                                                         "iterations 1-2, the bundled MNIST subset")
    ap.add_argument("--from-json", default=None, metavar="RESULTS_JSON", help="write --doc from this results.json")
    add_launcher_args(ap)
    args = ap.parse_args(argv)
    launcher = launcher_from_args(args, ap.error)
    if args.from_json:
        from placement_report import write_page  # the results and page code, next to this script

        if not args.doc:
            ap.error("--from-json needs --doc")
        write_page(json.loads(Path(args.from_json).read_text()), Path(args.doc), Path(args.from_json).parent)
        return 0
    seeds5 = [int(s) for s in args.seeds.split(",") if s]
    seeds3 = [int(s) for s in args.iteration_seeds.split(",") if s]
    kw = {}
    if args.quick:
        seeds5, seeds3, args.data, args.epochs = [0], [0], "subset", 1
        kw = dict(spread=(0.1,), fewer=(4,), iterations=(1, 2))
    runs = grid(seeds5, seeds3, **kw)
    torch.set_num_threads(1)
    protocol = {"data": args.data, "epochs": args.epochs, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                "image_size": IMAGE, "num_threads": 1, "quiet": True}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()
    todo = [r for r in runs if not (out / run_key(r) / "row.json").is_file()]
    print(f"{len(runs)} runs in the grid, {len(runs) - len(todo)} finished, {len(todo)} to train", flush=True)
    if todo and not args.no_train:
        res = launcher.run(run_one, [(r, str(out), protocol) for r in todo], tags=[f"[{run_key(r)}]" for r in todo],
                           folder=out, threads=1, log=lambda s: print(s, flush=True))
        for row in res:
            if isinstance(row, dict):
                print(f"{row['key']}: {100 * row['test_acc']:.2f}% ({row['wall_s']:.1f} s)", flush=True)
        bad = [x for x in res if not isinstance(x, dict)]
        if bad:
            print(f"{len(bad)} runs failed: " + "; ".join(str(getattr(b, 'line', lambda: b)()) for b in bad))
    rows = [json.loads((out / run_key(r) / "row.json").read_text()) for r in runs
            if (out / run_key(r) / "row.json").is_file()]
    env = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
           "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "loadavg_start": [round(x, 2) for x in load0],
           "loadavg_end": [round(x, 2) for x in os.getloadavg()], "seeds": seeds5, "iteration_seeds": seeds3,
           "protocol": {k: v for k, v in protocol.items() if k != "quiet"}, "tile": TILE, "base_h": BASE_H,
           "grid_runs": len(runs), "finished_runs": len(rows)}
    from seq2d.envinfo import machine

    env.update(machine())  # cpu, capability, torch, nproc
    from placement_report import write_outputs, write_page

    res = write_outputs(rows, env, out)
    if args.doc:
        write_page(res, Path(args.doc), out, Path(args.results) if args.results else None)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
