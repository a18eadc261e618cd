"""Step time of the MNIST sparsity models through the trainer, and the hours of the full protocol.

    python benchmarks/mnist_protocol.py [--data full] [--updates 60] [--rounds 3] [--json FILE]

Each (variant, model) trains ``--updates`` optimizer updates through the public path users run
(``seq2d.train.Trainer`` on the ``ours`` protocol's config of ``seq2d mnist --full``: Adam 1e-3,
batch 64, 50x50 inputs, MLP [2500, 500, 200, 100, 10] and the randomized models with its exact
parameter count), one torch thread, then evaluates the test set once. Rounds interleave the
variants and models (A, B, C, A, B, C, ...); a model's update time is the median over rounds of
the median update (the first 5 updates of a round dropped), measured by an ``on_update_end`` callback.
(Before issue 36 the flag was ``--steps`` and a record's key ``steps``: the flag is refused with its
new name, an old record is read through :func:`seq2d.renames.migrate_record`.)

Variants (the same code, two switches):

- ``before``: ``optimizer_impl = "loop"`` (torch's per-tensor Adam, seq2d's default before it
  had the field), ``use_held_products = False`` (every step multiplies every column) and
  ``use_output_demand = False`` (every step computes every row);
- ``after``: the defaults (torch's fused Adam; the input slot's product once per forward, no
  product on the first step's still-empty slots, and on the tiled store a last step that
  computes only the output slot's rows).

The projection: ``5 seeds x sum over models (93,800 updates x s/update + 100 evaluations x
s/evaluation)`` (100 epochs of ceil(60,000 / 64) = 938 updates), on one core, and divided by
``--jobs`` for that many runs in parallel processes (``seq2d mnist --jobs``), which assumes the
jobs do not slow each other: the machine's load during the measurement is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from seq2d.core import core_of
from seq2d.lab.mnist_comparison import configs_for, protocol_config
from seq2d.renames import migrate_model_name, migrate_record
from seq2d.results_page import from_json, write_section
from seq2d.train import Trainer, build_model
from seq2d.train.config import TrainConfig
from seq2d.train.datasets import load_data

VARIANTS = {
    "before": {"optimizer_impl": "loop", "held": False, "demand": False},
    "after": {"optimizer_impl": "fused", "held": True, "demand": True},
}
TARGETS = {"random_element": 4.0, "random_tile": 2.5}  # update time / the MLP's update time (issue 19)
HOURS_TARGET = 6.0  # the full protocol on 2 cores (issue 19)
SEEDS, EPOCHS, TRAIN = 5, 100, 60_000


class _StepTimes:
    def __init__(self):
        self.t = []

    def on_train_start(self, trainer):
        self.t = [time.perf_counter()]

    def on_update_end(self, trainer, update):
        self.t.append(time.perf_counter())


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def measure(models, variants, *, data: str, updates: int, rounds: int, image_size: int, sizes, log=print) -> dict:
    base = dataclasses.replace(TrainConfig(**protocol_config("ours", "full")), data=data, image_size=image_size,
                               sizes=list(sizes), num_threads=1, quiet=True, device="cpu", max_updates=updates,
                               epochs=1)
    cfgs = configs_for(base, models)
    loaded = load_data(next(iter(cfgs.values())), device="cpu")
    step_s = {v: {m: [] for m in models} for v in variants}
    eval_s = {v: {m: [] for m in models} for v in variants}
    loads = [_load()]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for v in variants:
                for name, cfg in cfgs.items():
                    cfg = dataclasses.replace(cfg, optimizer_impl=VARIANTS[v]["optimizer_impl"],
                                              out_dir=str(Path(tmp) / f"{v}-{name}-{r}"), name=f"{v}-{name}")
                    model = build_model(cfg)
                    core = core_of(model, "the benchmark expects")
                    core.use_held_products = VARIANTS[v]["held"]
                    core.use_output_demand = VARIANTS[v]["demand"]
                    timer = _StepTimes()
                    trainer = Trainer(cfg, model, loaded, callbacks=[timer])
                    trainer.fit(overwrite=True)
                    d = [b - a for a, b in zip(timer.t, timer.t[1:])][5:] or [float("nan")]
                    step_s[v][name].append(statistics.median(d))
                    t0 = time.perf_counter()
                    trainer.evaluate()
                    eval_s[v][name].append(time.perf_counter() - t0)
                    log(f"round {r + 1}/{rounds} {v:>6} {name:<15} {1e3 * step_s[v][name][-1]:8.2f} ms/update  "
                        f"eval {eval_s[v][name][-1]:6.2f} s  load {_load():.2f}")
            loads.append(_load())
    med = {v: {m: statistics.median(step_s[v][m]) for m in models} for v in variants}
    ev = {v: {m: statistics.median(eval_s[v][m]) for m in models} for v in variants}
    return {"step_s": med, "eval_s": ev, "step_s_rounds": step_s, "eval_s_rounds": eval_s, "load": loads,
            "data": data, "updates": updates, "rounds": rounds, "n_test": int(loaded["X_test"].shape[0])
            if "X_test" in loaded else None}


def project(res: dict, models, variants, jobs: int) -> dict:
    """Hours of the full protocol on one core and with ``jobs`` parallel runs; per-update ratios."""
    updates = EPOCHS * math.ceil(TRAIN / 64)
    out = {}
    for v in variants:
        one = sum(SEEDS * (updates * res["step_s"][v][m] + EPOCHS * res["eval_s"][v][m]) for m in models) / 3600
        ref = res["step_s"][v].get("mlp")
        out[v] = {"hours_one_core": one, f"hours_{jobs}_jobs": one / jobs,
                  "ratio_to_mlp": {m: (res["step_s"][v][m] / ref if ref else float("nan")) for m in models}}
    return out


def table(res: dict, proj: dict, models, variants, jobs: int) -> str:
    lines = ["| model | " + " | ".join(f"{v}: ms/update (x MLP)" for v in variants) + " | target (after) |",
             "| --- | " + " | ".join("---" for _ in variants) + " | --- |"]
    for m in models:
        cells = [f"{1e3 * res['step_s'][v][m]:.1f} ({proj[v]['ratio_to_mlp'][m]:.2f}x)" for v in variants]
        tgt = TARGETS.get(m)
        met = ""
        if tgt is not None and "after" in proj:
            r = proj["after"]["ratio_to_mlp"][m]
            met = f"<= {tgt}x: {'met' if r <= tgt else 'MISSED'}"
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {met} |")
    if {"random_tile", "random_element"} <= set(models):
        lines.append("")
        lines.append("random_tile / random_element update: " + ", ".join(
            f"{v} {res['step_s'][v]['random_tile'] / res['step_s'][v]['random_element']:.2f}" for v in variants))
    lines.append("")
    lines.append("| variant | full protocol, 1 core | full protocol, " + f"{jobs} parallel jobs | target |")
    lines.append("| --- | --- | --- | --- |")
    for v in variants:
        h1, hj = proj[v]["hours_one_core"], proj[v][f"hours_{jobs}_jobs"]
        met = f"<= {HOURS_TARGET} h on 2 cores: {'met' if hj <= HOURS_TARGET else 'MISSED'}" if v == "after" and jobs == 2 else ""
        lines.append(f"| {v} | {h1:.1f} h | {hj:.1f} h | {met} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,random_element,random_tile")
    ap.add_argument("--variants", default="before,after")
    ap.add_argument("--data", default=None, choices=["full", "subset", "synthetic"],
                    help="default: full when $SEQ2D_DATA is set, else the bundled subset")
    ap.add_argument("--updates", type=int, default=60, help="optimizer updates per (round, variant, model)")
    ap.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)  # the old name: refused below
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2, help="parallel runs assumed by the projection")
    ap.add_argument("--quick", action="store_true", help="CI smoke run (synthetic data, tiny model, 8 updates, 1 round)")
    ap.add_argument("--json", help="write the measurements, projection and machine facts here")
    ap.add_argument("--doc", help="write the tables into this page's 'mnist-protocol' section (docs/performance.md)")
    ap.add_argument("--from-json", help="no measurement: print (and with --doc write) the tables of this JSON")
    ap.add_argument("--section", default="mnist-protocol", help="the page section --doc writes")
    args = ap.parse_args(argv)
    if args.steps is not None:
        ap.error("'--steps' is now called '--updates' (optimizer updates)")
    if args.from_json:
        from_json(args.from_json, report, args.doc, args.section)
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    sizes, image_size = [2500, 500, 200, 100, 10], 50
    data = args.data or ("full" if os.environ.get("SEQ2D_DATA") else "subset")
    if args.quick:
        sizes, image_size, data, args.updates, args.rounds = [64, 32, 16, 10], 8, "synthetic", 8, 1
    torch.set_num_threads(1)
    from seq2d.envinfo import cpu_name

    print(f"# {cpu_name()}, capability {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, "
          f"{os.cpu_count()} cores, data {data}, {args.updates} updates x {args.rounds} rounds, 1 thread")
    res = measure(models, variants, data=data, updates=args.updates, rounds=args.rounds, image_size=image_size,
                  sizes=sizes)
    proj = project(res, models, variants, args.jobs)
    cmd = ["python", "benchmarks/mnist_protocol.py", *(argv if argv is not None else sys.argv[1:])]
    record = {"command": " ".join(cmd), "cpu": cpu_name(), "capability": torch.backends.cpu.get_cpu_capability(),
              "torch": torch.__version__, "cores": os.cpu_count(), "sizes": sizes, "models": models,
              "variants": variants, "jobs": args.jobs, "quick": args.quick, **res, "projection": proj,
              "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    text = report(record)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    if args.doc:
        write_section(args.doc, args.section, text)
    return 0


def _today(record: dict) -> dict:
    """``record`` with the renamed words of :data:`seq2d.renames.OLD_NAMES` read as today's: its
    keys (``migrate_record``) and the model names (``random-element`` -> ``random_element``) in
    ``models`` and in the per-model tables."""
    def name(m):
        return migrate_model_name(m, "mnist_model")

    def per_model(d):
        return {name(k): v for k, v in d.items()}

    r = dict(migrate_record(record))
    r["models"] = [name(m) for m in r["models"]]
    for key in ("step_s", "eval_s", "step_s_rounds", "eval_s_rounds"):
        if key in r:
            r[key] = {v: per_model(d) for v, d in r[key].items()}
    r["projection"] = {v: {**p, "ratio_to_mlp": per_model(p["ratio_to_mlp"])} for v, p in r["projection"].items()}
    return r


def report(record: dict) -> str:
    """The tables of a measurement record and the line saying how it was made (an old record in
    today's words: its ``steps`` read as ``updates``, hyphenated model names as the registry's)."""
    record = _today(record)
    models, variants, jobs = record["models"], record["variants"], record["jobs"]
    loads = [x for x in record["load"] if x == x]
    load = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "n/a"
    return "\n".join([
        f"Measured {record['time_utc']} with `{record['command']}`: {record['cpu']} (CPU capability "
        f"{record['capability']}), {record['cores']} cores, torch {record['torch']}, 1 torch thread per run, data "
        f"{record['data']}, {record['updates']} updates x {record['rounds']} rounds per (variant, model), load average "
        f"(1 min) {load} during the run.",
        "",
        table(record, record["projection"], models, variants, jobs),
    ])


if __name__ == "__main__":
    raise SystemExit(main())
