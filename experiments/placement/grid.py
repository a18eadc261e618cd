"""What the placement grids share: experiments/placement/study.py (MNIST, issue 33 item 3) and
experiments/mnist1d/placement.py (MNIST-1D, items 2 and 4) pick cells by name, count the
connectivity of untrained random draws, launch one task per (cell, seed) that is not finished
yet, and copy the finished runs' small files into the repository. Each script keeps its own
cells, models, protocol and ``run_one``; this module holds only the steps that are the same.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from run import structure  # the 1-epoch study's path-length / reach measure of a built model


def select(todo: list[dict], names: str, error: Callable[[str], None]) -> list[dict]:
    """The cells named in the comma-separated ``names``, in grid order; an unknown name is an
    error (``error``: argparse's ``ap.error``) that lists the valid ones."""
    wanted = names.split(",")
    unknown = sorted(set(wanted) - {c["cell"] for c in todo})
    if unknown:
        error(f"unknown cell(s) {unknown}; choose from {', '.join(c['cell'] for c in todo)}")
    return [c for c in todo if c["cell"] in wanted]


def connectivity(cell: dict, draws: int, build: Callable[[dict, int], object]) -> dict:
    """Over seeds 0..draws-1 of a random cell (untrained, ``build(cell, seed)``): how many draws
    leave the output row empty and how many have no input -> output walk within the cell's
    iterations."""
    empty = no_walk = 0
    for seed in range(draws):
        st = structure(build(cell, seed), {"placement": cell["placement"]})
        empty += bool(st["output_fixed"])
        no_walk += not st["input_reaches_output"]
    return {"cell": cell["cell"], "draws": draws, "empty_output_row": empty, "no_input_output_walk": no_walk}


def write_connectivity(out: Path, cells: list[dict], draws: int, build, *, log: bool = False) -> None:
    """``out/connectivity.json`` for ``cells`` (kept when it exists: the counts depend only on the
    seeds); ``log``: one line per cell on stdout."""
    if not cells or (out / "connectivity.json").is_file():
        return
    counts = [connectivity(c, draws, build) for c in cells]
    (out / "connectivity.json").write_text(json.dumps(counts, indent=1))
    if log:
        for c in counts:
            print(f"{c['cell']}: of {c['draws']} draws, {c['empty_output_row']} leave the output row empty, "
                  f"{c['no_input_output_walk']} have no input -> output walk", flush=True)


def launch(launcher, run_one: Callable, tasks: list[tuple], out: Path, done: Callable[[Path], bool]) -> list:
    """Run ``run_one(cell, seed, *rest)`` for every task ``(cell, seed, *rest)`` whose folder
    ``out/<cell>/seed<k>`` is not ``done``, through ``launcher`` (seq2d.lab.launch, one thread per
    run); print each finished run's test accuracy. Returns the launcher's results (a row dict per
    finished run, anything else for a failed one)."""
    tasks = [t for t in tasks if not done(out / t[0]["cell"] / f"seed{t[1]}")]
    print(f"{len(tasks)} run(s) to train", flush=True)
    res = launcher.run(run_one, tasks, tags=[f"[{c['cell']} seed {s}]" for c, s, *_ in tasks], folder=out, threads=1,
                       log=lambda s: print(s, flush=True)) if tasks else []
    for row in res:
        if isinstance(row, dict):
            print(f"{row['cell']} seed {row['seed']}: {100 * row['test_acc']:.2f}%", flush=True)
    return res


def failed(results: Iterable) -> int:
    """1 when some run of :func:`launch` failed, else 0 (the script's exit status)."""
    return 1 if any(not isinstance(r, dict) for r in results) else 0


MACHINE = "machine.json"  # per run: the machine that trained it (:func:`seq2d.envinfo.machine`)


def collect(runs: Path, dest: Path, keep: Iterable[str], extra: Iterable[str] = ("connectivity.json",)) -> int:
    """Copy every finished run's (``row.json``) small files ``keep`` (never a checkpoint) and the
    grid-level files ``extra`` that exist to ``dest``; returns the number of runs copied. A
    ``connectivity.json`` already in ``dest`` is merged by cell, not replaced (calls on a subset of
    the cells write only theirs).

    Each copied run gets ``machine.json``, the record of the machine collecting it, which is the
    machine that trained it: run folders are collected where they were trained, never moved. A run
    collected before (its ``row.json`` already in ``dest``, byte for byte) keeps the record it has."""
    from seq2d.envinfo import machine

    record = json.dumps(machine(), indent=1) + "\n"
    n = 0
    for row in sorted(runs.glob("*/seed*/row.json")):
        target = dest / row.parent.relative_to(runs)
        seen = (target / "row.json").is_file() and (target / "row.json").read_bytes() == row.read_bytes()
        target.mkdir(parents=True, exist_ok=True)
        for f in keep:
            if (row.parent / f).is_file():
                shutil.copy2(row.parent / f, target / f)
        if not (seen and (target / MACHINE).is_file()):
            (target / MACHINE).write_text(record)
        n += 1
    for f in extra:
        if (runs / f).is_file():
            dest.mkdir(parents=True, exist_ok=True)
            if f == "connectivity.json" and (dest / f).is_file():  # merged by cell: a call's file holds only its cells
                merged = {d["cell"]: d for d in json.loads((dest / f).read_text())}
                merged.update({d["cell"]: d for d in json.loads((runs / f).read_text())})
                (dest / f).write_text(json.dumps(list(merged.values()), indent=1))
            else:
                shutil.copy2(runs / f, dest / f)
    print(f"{n} finished run(s) copied to {dest}")
    return n


def machines_text(rows: dict[str, list[dict]]) -> str:
    """Which machines trained the collected runs (each run's ``machine`` record, from its
    machine.json, None when absent), as the line a results page prints: a number is bitwise
    reproducible only on its own CPU kind."""
    by: dict[str, list[str]] = {}
    for c, rs in rows.items():
        for r in rs:
            m = r.get("machine")
            key = (f"{m['cpu']} (torch CPU capability {m['capability']}, torch {m['torch']}, {m['nproc']} cores)"
                   if m else "no machine record")
            by.setdefault(key, []).append(c)
    parts = [f"{k}: {len(cs)} run(s) in {len(set(cs))} cell(s)" for k, cs in sorted(by.items())]
    return ("Trained on " + "; ".join(parts) + ". Each run on one thread; seeds on different CPUs are independent "
            "draws, not bitwise repeats.\n") if parts else ""


def training_time_text(rows: dict[str, list[dict]]) -> str:
    """The budget the collected runs spent training, as the line a results page prints (epochs x
    each run's seconds per epoch: evaluation and untrained draws excluded)."""
    spent = sum(r["time_per_epoch_s"] * r["epochs"] for rs in rows.values() for r in rs if r.get("time_per_epoch_s"))
    return (f"Training time of the committed runs: {spent / 3600:.1f} CPU-hours (epochs x seconds per epoch, "
            f"evaluation excluded; 1 thread each).\n") if spent else ""


def counts_table(rows: list[dict], p_key: str, p_label: str, p_text: Callable[[float | None], str]) -> str:
    """The counts table of a placement page (block placement and bimodal cells): per cell its untrained
    draws' connectivity (``conn``: empty output row / no walk of the draws), the trained seeds, those
    untrained, without a walk and at chance, the mean of the others and the Fisher p (``p_key``, written
    by the page's own ``p_text``)."""
    t = ["| cell | untrained draws: empty output row / no walk | seeds | untrained (empty output row) | no walk | "
         f"at chance | mean of the others (%) | {p_label} |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for d in rows:
        cd = d["conn"]
        drawn = f"{cd['empty_output_row']} / {cd['no_input_output_walk']} of {cd['draws']}" if cd else ""
        mean = "" if d["mean_above"] is None else format(d["mean_above"], ".2f")
        t.append(f"| {d['cell']} | {drawn} | {d['n']} | {d['untrained']} | {d['no_walk']} | {d['chance']} | {mean} | "
                 f"{p_text(d.get(p_key))} |")
    return "\n".join(t) + "\n"
