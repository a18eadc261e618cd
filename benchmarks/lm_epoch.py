"""Time per 100 batches of the WikiText-2 language models of experiments/stable_rnn/wikitext_runs.py,
and the epoch and CPU-hours it projects (no full epoch is run).

    nice -n 10 python benchmarks/lm_epoch.py [--conditions lstm-unstable,...] [--batches 100] [--json FILE]

Each condition is built exactly as ``wikitext_runs.py train`` builds it (the example's small
configuration: emb 200, hidden 200, 2 layers, dropout 0.2, BPTT 35, batch 20, clip 0.25; adaptive
softmax, cutoffs 2000, 10000, div 4, unless ``--full-softmax``; the stable ones projected after every
step) and trained by ``seq2d.lab.lm.train_lm`` for ``--warmup`` + ``--batches`` batches (one epoch capped
by ``max_batches``; the row's ``epoch_time_s`` is the training loop alone); the warm-up's own time
is measured the same way and subtracted. Validation and test (eval batch 10) are timed once each
with ``seq2d.lab.lm.evaluate``: every epoch of a run evaluates both. Wall time and the process's CPU time
are both reported: on a loaded machine (the load average is printed at the start and the end) the
wall time grows and the CPU time much less; CPU-hours are projected from the CPU time.

Projection: ``epoch = batches_per_epoch / 100 x t_100 + t_valid + t_test``; the budget line
multiplies by ``--epochs`` (the cap) and ``--seeds``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from seq2d.lab.wikitext import Corpus, batchify
from seq2d.envinfo import cpu_name
from seq2d.lab.lm import RNNLM, evaluate, train_lm
from seq2d.train.datasets import seed_everything

ROOT = Path(__file__).resolve().parents[1]


def _runs_module():
    spec = importlib.util.spec_from_file_location("stable_rnn_wikitext_runs",
                                                  ROOT / "experiments" / "stable_rnn" / "wikitext_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _clocks():
    return time.perf_counter(), time.process_time()


def measure(cond: str, corpus: Corpus, data: dict, args, runs) -> dict:
    """Seconds (wall, CPU) of ``args.batches`` training batches and of one validation and one test pass."""
    ns = argparse.Namespace(**vars(args), adaptive_softmax=not args.full_softmax, lstm_projection="ours",
                            rnn_lambda=0.99, embedding_clip=1.0)
    if cond == runs.AUTHOR:
        ns.lstm_projection = "author"
    out = {}
    for n in (args.warmup, args.warmup + args.batches):
        seed_everything(0)
        model, stable = runs.wx.build_model(runs.model_condition(cond), corpus.vocab_size, ns)
        stabilize = runs.wx.make_stabilizer(model, ns)[0] if stable else None
        w, c = _clocks()
        train_lm(model, data["train"], data["valid"][:2], epochs=1, lr=1.0, max_batches=n, stabilize=stabilize,
                 log=None)  # (a 2-row validation stream: the evaluations are timed below)
        w2, c2 = _clocks()
        out[n] = (w2 - w, c2 - c)
    res = {"train_100_wall_s": (out[args.warmup + args.batches][0] - out[args.warmup][0]) * 100 / args.batches,
           "train_100_cpu_s": (out[args.warmup + args.batches][1] - out[args.warmup][1]) * 100 / args.batches}
    model.eval()
    for split in ("valid", "test"):
        w, c = _clocks()
        evaluate(model, data[split], 35)
        w2, c2 = _clocks()
        res[f"{split}_wall_s"], res[f"{split}_cpu_s"] = w2 - w, c2 - c
    nb = (data["train"].shape[0] - 1 + 34) // 35
    for clock in ("wall", "cpu"):
        res[f"epoch_{clock}_min"] = (nb / 100 * res[f"train_100_{clock}_s"] + res[f"valid_{clock}_s"]
                                     + res[f"test_{clock}_s"]) / 60
    res["batches_per_epoch"] = nb
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conditions", default="lstm-unstable,lstm-stable,tanh-unstable,tanh-stable")
    ap.add_argument("--batches", type=int, default=100, help="timed batches (the time is scaled to 100)")
    ap.add_argument("--warmup", type=int, default=10, help="batches whose time is subtracted")
    ap.add_argument("--full-softmax", action="store_true")
    ap.add_argument("--cutoffs", default="2000,10000")
    ap.add_argument("--div-value", type=float, default=4.0)
    ap.add_argument("--emb", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=200)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=15, help="the epoch cap the budget line assumes")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per condition the budget line assumes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--quick", action="store_true", help="a corpus slice, 5 batches (CI: the script runs)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.warmup, tokens, eval_tokens = 5, 2, 20_000, 2_000
    else:
        tokens = eval_tokens = None
    torch.set_num_threads(args.threads)
    runs = _runs_module()
    load0 = os.getloadavg()
    corpus = Corpus(args.data_root, limit_tokens=tokens, limit_eval_tokens=eval_tokens,
                    order="appearance" if args.full_softmax else "frequency")
    data = {"train": batchify(corpus.train, 20), "valid": batchify(corpus.valid, 10), "test": batchify(corpus.test, 10)}
    print(corpus, f"| load average at start {load0[0]:.2f}, {load0[1]:.2f}, {load0[2]:.2f}", flush=True)
    # torch's first optimizer imports torch._dynamo (seconds): once here, outside every timing
    train_lm(RNNLM(50, 4, 4, 1, 0.0), data["train"][:40] % 50, data["valid"][:2] % 50, epochs=1, max_batches=1,
             log=None)
    rows = {}
    for cond in [c.strip() for c in args.conditions.split(",") if c.strip()]:
        r = rows[cond] = measure(cond, corpus, data, args, runs)
        print(f"{cond:20s} 100 batches {r['train_100_wall_s']:6.1f} s wall / {r['train_100_cpu_s']:6.1f} s CPU;  "
              f"valid {r['valid_wall_s']:5.1f} / {r['valid_cpu_s']:5.1f} s, test {r['test_wall_s']:5.1f} / "
              f"{r['test_cpu_s']:5.1f} s;  epoch ({r['batches_per_epoch']} batches) {r['epoch_wall_min']:5.1f} min wall, "
              f"{r['epoch_cpu_min']:5.1f} min CPU", flush=True)
    load1 = os.getloadavg()
    total = sum(r["epoch_cpu_min"] for r in rows.values()) * args.epochs * args.seeds / 60
    print(f"load average at end {load1[0]:.2f}, {load1[1]:.2f}, {load1[2]:.2f}; at most {args.epochs} epochs x "
          f"{args.seeds} seeds of these conditions: {total:.1f} CPU-hours (CPU time)", flush=True)
    result = {"rows": rows, "cpu_hours_at_cap": total, "epochs": args.epochs, "seeds": args.seeds,
              "loadavg_start": load0, "loadavg_end": load1, "threads": args.threads,
              "hardware": f"{cpu_name()}, {args.threads} thread(s)", "torch": torch.__version__,
              "python": platform.python_version(), "adaptive_softmax": not args.full_softmax,
              "command": "python benchmarks/lm_epoch.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
