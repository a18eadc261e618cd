"""Copy the small results of finished MNIST runs into the repository (never checkpoints).

    python experiments/mnist_sparsity/collect.py --runs runs/mnist_full_ours \
        --dest experiments/mnist_sparsity/results/full-ours

A long ``seq2d mnist --full`` takes hours and may outlive a machine; each run that has
finished is copied as soon as it has, so nothing already computed is lost. For every
``RUNS/<model>/seed<k>/`` whose ``run.json`` says ``complete`` (and whose ``summary.json``, when
``seq2d mnist`` wrote one, agrees) this copies ``summary.json``, ``run.json`` (config, its hash,
status), ``metrics.csv``, ``metrics.jsonl`` and ``test_predictions.npz`` (per-example test results,
when the run wrote them), and writes ``machine.json`` (this machine's CPU, capability and torch: run
folders are collected on the machine that trained them), to ``DEST/<model>/seed<k>/``. Runs still going,
partial runs (``--max-updates``) and checkpoints are left where they are. A run folder named with
an old spelling (``random-element``, seq2d.renames.OLD_NAMES) is copied under today's name. A copy already in DEST
is replaced only by a run with the same config hash (``--force`` replaces any). Prints one line
per run: copied, unchanged, skipped and why.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from seq2d.renames import migrate_model_name

FILES = ("summary.json", "run.json", "metrics.csv", "metrics.jsonl", "test_predictions.npz")


def _json(path: Path) -> dict | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


MACHINE = "machine.json"


def _write_machine(target: Path) -> None:
    """``target/machine.json``: :func:`seq2d.envinfo.machine` of the machine collecting the run, which
    is the machine that trained it (run folders are collected where they were trained; they are never
    moved)."""
    from seq2d.envinfo import machine

    (target / MACHINE).write_text(json.dumps(machine(), indent=1) + "\n")


def collect(runs: Path, dest: Path, *, force: bool = False, log=print) -> list[Path]:
    """Copy every finished run under ``runs`` to ``dest``; returns the run folders copied."""
    copied = []
    for run_dir in sorted(p.parent for p in runs.glob("*/seed*/run.json")):
        rel = run_dir.relative_to(runs)
        record = _json(run_dir / "run.json") or {}
        summary = _json(run_dir / "summary.json")
        if record.get("status") != "complete":
            log(f"{rel}: skipped ({record.get('status', 'no run.json')}, epoch {record.get('epoch', '?')})")
            continue
        if summary is not None and (summary.get("complete") is not True
                                    or summary.get("config_hash") != record.get("config_hash")):
            log(f"{rel}: skipped (summary.json is partial or of another config)")
            continue
        target = dest / migrate_model_name(rel.parts[0], "mnist_model") / rel.parts[1]  # today's spelling of the name
        old = _json(target / "run.json")
        if old is not None and not force:
            if old.get("config_hash") != record.get("config_hash"):
                log(f"{rel}: skipped (DEST holds a run of another config {old.get('config_hash')}; --force replaces it)")
                continue
            if all((target / f).read_bytes() == (run_dir / f).read_bytes()
                   for f in FILES if (run_dir / f).is_file() and (target / f).is_file()):
                if not (target / MACHINE).is_file():
                    _write_machine(target)  # copied before machine.json existed; its run folder is on this machine
                log(f"{rel}: unchanged")
                continue
        target.mkdir(parents=True, exist_ok=True)
        for f in FILES:
            if (run_dir / f).is_file():
                shutil.copy2(run_dir / f, target / f)
        _write_machine(target)
        log(f"{rel}: copied to {target}")
        copied.append(target)
    return copied


def status(dest: Path) -> str:
    """A markdown table of every run copied to ``dest``: model, seed, epochs, final and best test
    accuracy, time per epoch; and how many of the protocol's runs are in."""
    rows = []
    for f in sorted(dest.glob("*/seed*/summary.json")):
        d = _json(f) or {}
        rows.append((f.parent.parent.name, f.parent.name, d))
    lines = ["| model | seed | epochs | final test accuracy | best test accuracy | time / epoch |",
             "| --- | --- | --- | --- | --- | --- |"]
    for model, seed, d in rows:
        acc, best = d.get("test_acc"), d.get("best_test_acc")
        lines.append(f"| {model} | {seed.removeprefix('seed')} | {d.get('epochs', '?')} | "
                     f"{'n/a' if acc is None else f'{100 * acc:.2f} %'} | {'n/a' if best is None else f'{100 * best:.2f} %'} | "
                     f"{d.get('time_per_epoch_s', float('nan')):.1f} s |")
    return "\n".join(lines) + f"\n\n{len(rows)} finished run(s) in `{dest.as_posix()}`."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="the --out folder of seq2d mnist / run.py")
    ap.add_argument("--dest", required=True, help="where the small files go (a folder in the repository)")
    ap.add_argument("--force", action="store_true", help="replace copies of another config")
    ap.add_argument("--doc", help="write the table of every run in DEST into this page's SECTION section")
    ap.add_argument("--section", default="mnist-full-status", help="marker name of --doc's section")
    args = ap.parse_args(argv)
    runs = Path(args.runs)
    if not runs.is_dir():
        print(f"collect.py: error: --runs {runs} is not a folder", file=sys.stderr)
        return 2
    collect(runs, Path(args.dest), force=args.force)
    if args.doc:
        from seq2d.results_page import write_section

        cmd = " ".join(["python", "experiments/mnist_sparsity/collect.py", *(argv if argv is not None else sys.argv[1:])])
        write_section(args.doc, args.section, f"Generated by `{cmd}` from the committed run files.\n\n"
                      + status(Path(args.dest)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
