"""WikiText-2 language models, one run folder per (condition, seed): runs that survive a stop.

The models and conditions of ``wikitext.py`` (tanh RNN and LSTM, unstable and stable: tanh-stable
by the spectral projection of every W_hh, lstm-stable by our projection; ``lstm-stable-author``:
the author's normalisation as described in the audit of issue 12), trained by ``seq2d.lab.lm.train_lm``
with an adaptive softmax (torch's ``nn.AdaptiveLogSoftmaxWithLoss``, cutoffs 2000, 10000, div 4;
``--full-softmax`` for the plain decoder), at the ``word_language_model`` example's small
configuration: emb 200, hidden 200, 2 layers, dropout 0.2, BPTT 35, batch 20, gradient clip 0.25,
the lr divided by 4 whenever the validation loss does not improve; training ends after
``--patience`` epochs in a row without a better validation loss, or at the ``--epochs`` cap.

Subcommands::

    # one folder per (condition, seed) under --out; finished ones are skipped, interrupted ones resumed
    python experiments/stable_rnn/wikitext_runs.py train --conditions tanh-unstable,tanh-stable --seeds 0,1,2 \\
        --lr 5 --out runs/stable_rnn/wikitext_main
    # a learning-rate search: each lr its own folder OUT/<condition>/lr<lr>/seed<k> on a short schedule,
    # summarised in OUT/lr_search.json with the lr the stated rule picks
    python experiments/stable_rnn/wikitext_runs.py search --conditions tanh-unstable --lrs 0.5,1,2,5,10 \\
        --epochs 2 --out runs/stable_rnn/wikitext_lr
    # the main runs at the searched lr (each cell's unstable choice, for the stable model too)
    python experiments/stable_rnn/wikitext_runs.py train --conditions tanh-unstable,tanh-stable --seeds 0,1,2 \\
        --lr-from runs/stable_rnn/wikitext_lr/lr_search.json --out runs/stable_rnn/wikitext_main
    # where every run stands
    python experiments/stable_rnn/wikitext_runs.py status --runs runs/stable_rnn/wikitext_main
    # one small JSON per finished run into the repository (never a checkpoint), and lr_search.json
    python experiments/stable_rnn/wikitext_runs.py collect --runs runs/stable_rnn/wikitext_main \\
        --dest experiments/stable_rnn/results/wikitext

A run folder holds ``run.lock`` (``seq2d.train.rundir.RunDir``: a second process is refused, a
dead holder's lock taken over), ``run.json`` (status running / complete / diverged / interrupted /
failed, the config and its hash), ``checkpoint.pt`` (``seq2d.lab.lm.checkpoint.LMCheckpoint``:
saved every ``--checkpoint-every`` batches, at every epoch's end and at the end, then holding the
best-validation weights), ``log.txt`` and, once finished, ``result.json``. A run killed at any
moment continues from its last save when the same command is run again, bitwise on the same
machine and thread count (tests/test_wikitext_runs.py). A folder that holds a run of another
config refuses the whole call before anything is trained. ``--quick``: a slice of the corpus,
tiny models, a few batches (CI).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import math
import os
import platform
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

import torch

from seq2d.lab.wikitext import Corpus, batchify
from seq2d.envinfo import cpu_name
from seq2d.errors import did_you_mean
from seq2d.fileio import atomic_write
from seq2d.lab.lm import divergence, evaluate, migrate_result, perplexity, train_lm
from seq2d.results_page import json_safe
from seq2d.train.errors import RunLockedError
from seq2d.lab.lm.checkpoint import LMCheckpoint
from seq2d.train.rundir import RunDir, pid_alive, read_record
from seq2d.train.datasets import seed_everything


def _load_wikitext():
    spec = importlib.util.spec_from_file_location("stable_rnn_wikitext", Path(__file__).with_name("wikitext.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wx = _load_wikitext()  # the conditions, the models and their projections: one home (wikitext.py)

AUTHOR = "lstm-stable-author"  # lstm-stable with --lstm-projection author: its own folder
CONDITIONS = (*wx.CONDITIONS, AUTHOR)
FINISHED = ("complete", "diverged")
RESULT, RECORD, CHECKPOINT, LOG = "result.json", "run.json", "checkpoint.pt", "log.txt"

# The example's small configuration (the item 1); --quick shrinks it for CI.
FULL = dict(emb=200, hidden=200, layers=2, dropout=0.2, tokens=None, eval_tokens=None, epochs=15, patience=2,
            max_batches=None, checkpoint_every=500)
SEARCH_EPOCHS = 2  # the learning-rate search's short schedule (its --epochs default)
#: The main runs of issue 34 item 1 as planned: three seeds of each of the four models, the author's LSTM
#: normalisation with one (docs/results/stability.md lists each, "pending" until it is collected).
PLAN = {**{c: (0, 1, 2) for c in wx.CONDITIONS}, AUTHOR: (0,)}
QUICK = dict(emb=16, hidden=16, layers=2, dropout=0.2, tokens=20_000, eval_tokens=3_000, epochs=2, patience=2,
             max_batches=8, checkpoint_every=3)


# ---------------------------------------------------------------------- one run
def model_condition(cond: str) -> str:
    """The wikitext.py condition whose model ``cond`` trains (the author's normalisation is lstm-stable's
    model with another projection)."""
    return "lstm-stable" if cond == AUTHOR else cond


def run_config(cond: str, seed: int, lr: float, args, corpus: Corpus, cutoffs) -> dict:
    """Everything that decides what a run computes (hashed; a folder holding another is refused).
    Only the settings a condition uses enter it (the tanh bound does not change an LSTM run)."""
    cell, stable = wx.condition(model_condition(cond))
    cfg = {"condition": cond, "seed": seed, "cell": cell, "stable": stable, "emb": args.emb, "hidden": args.hidden,
           "layers": args.layers, "dropout": args.dropout, "adaptive_cutoffs": cutoffs,
           "div_value": args.div_value if cutoffs else None, "lr": lr, "clip": args.clip, "bptt": args.bptt,
           "batch_size": args.batch_size, "eval_batch_size": args.eval_batch_size, "epochs": args.epochs,
           "patience": args.patience, "max_batches": args.max_batches, "threads": args.threads,
           "corpus": {"tokens": args.tokens, "eval_tokens": args.eval_tokens, "order": corpus.order,
                      "vocab": corpus.vocab_size, "train_tokens": corpus.train.numel(),
                      "valid_tokens": corpus.valid.numel(), "test_tokens": corpus.test.numel()}}
    if stable and cell == "tanh":
        cfg["rnn_lambda"] = args.rnn_lambda
    if stable and cell == "lstm":
        cfg["lstm_projection"] = "author" if cond == AUTHOR else "ours"
        cfg["embedding_clip"] = args.embedding_clip
    return cfg


def config_hash(cfg: dict) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def _diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for k in dict.fromkeys([*old, *new]):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k} {a!r} -> {b!r}")
    return out


def check_folder(folder: Path, cfg: dict) -> str | None:
    """Why ``folder`` cannot hold this run (it holds a run of another config), else None."""
    rec = read_record(folder)
    if rec is None or rec.get("config_hash") == config_hash(cfg):
        return None
    old = rec.get("config") if isinstance(rec.get("config"), dict) else {}
    return (f"{folder} holds a run of another config ({', '.join(_diff(old, cfg)) or 'unreadable config'}; "
            f"status {rec.get('status', '?')}): run it with its own settings, or use another --out")


def _write_record(folder: Path, cfg: dict, status: str, **extra) -> None:
    rec = {"status": status, "config_hash": config_hash(cfg), "pid": os.getpid(),
           "host": socket.gethostname(), "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "torch": torch.__version__,
           **extra, "config": cfg}
    atomic_write(folder / RECORD, json.dumps(json_safe(rec), indent=1) + "\n")


def _env() -> dict:
    try:
        cap = str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 -- informational only
        cap = None
    return {"hardware": f"{cpu_name()}, {torch.get_num_threads()} thread(s)", "threads": torch.get_num_threads(),
            "cpu_capability": cap, "torch": torch.__version__, "python": platform.python_version(),
            "host": socket.gethostname()}


def run_one(folder: Path, cfg: dict, args, data: dict, command: str, log=print) -> dict | None:
    """Train (or continue, or skip) the run of ``cfg`` in ``folder``; its result, or None when
    another live process holds the folder."""
    rel = f"{cfg['condition']}/seed{cfg['seed']}" + (f" (lr {cfg['lr']:g})" if args.cmd == "search" else "")
    rec = read_record(folder)
    if rec and rec.get("status") in FINISHED and (folder / RESULT).is_file():
        log(f"{rel}: finished before ({rec['status']}), skipped")
        return read_result(folder / RESULT)
    rd = RunDir(folder, log=log)
    try:
        rd.acquire()
    except RunLockedError as e:
        log(f"{rel}: skipped: {e}")
        return None
    logfile = open(folder / LOG, "a", encoding="utf-8")

    def say(msg: str) -> None:
        log(msg)
        logfile.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}\n")
        logfile.flush()

    try:
        say(f"{rel}: {'resuming' if (folder / CHECKPOINT).is_file() else 'starting'} in {folder}")
        _write_record(folder, cfg, "running")
        t0 = time.perf_counter()
        result = _train(folder, cfg, args, data, command, say)
        result["session_time_s"] = round(time.perf_counter() - t0, 3)
        atomic_write(folder / RESULT, json.dumps(json_safe(result), indent=1) + "\n")
        _write_record(folder, cfg, result["status"], epoch=len(result["history"]), update=result["updates"])
        say(f"{rel}: {result['status']}: test ppl {_fmt(result['test_ppl'])} (best valid ppl "
            f"{_fmt(result['best_valid_ppl'])} at epoch {result['best_epoch']}, {result['stopped']})")
        return result
    except KeyboardInterrupt:
        _write_record(folder, cfg, "interrupted")
        say(f"{rel}: interrupted; the same command continues it from {CHECKPOINT}")
        raise
    except BaseException as e:
        _write_record(folder, cfg, "failed", error=f"{type(e).__name__}: {e}")
        raise
    finally:
        logfile.close()
        rd.release()


def read_result(path: Path) -> dict:
    """A run's ``result.json`` in today's words: one written before issue 36 (``steps``, and ``step`` in its
    history rows and resumes entries) read as ``updates`` / ``update`` (seq2d.lab.lm.migrate_result); the
    file itself is left as it is (collect copies it byte for byte)."""
    return migrate_result(json.loads(Path(path).read_text()))


def _fmt(v, nd=2) -> str:
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def initial_model(cfg: dict):
    """``(model, stabilize, description)``: the run of ``cfg``'s model at its initial weights, as
    training starts from them (every generator seeded with the run's seed, then the model drawn,
    then projected once for a stable condition); ``stabilize`` is None for an unstable one. Built
    from the config alone, so a finished run's untrained control is its own start (fig2.py)."""
    seed_everything(cfg["seed"])  # torch, random, numpy; a resumed run gets its generators from the checkpoint
    margs = argparse.Namespace(
        emb=cfg["emb"], hidden=cfg["hidden"], layers=cfg["layers"], dropout=cfg["dropout"],
        adaptive_softmax=cfg["adaptive_cutoffs"] is not None, cutoffs=",".join(map(str, cfg["adaptive_cutoffs"] or [])),
        div_value=cfg["div_value"], rnn_lambda=cfg.get("rnn_lambda"), embedding_clip=cfg.get("embedding_clip"),
        lstm_projection=cfg.get("lstm_projection", "ours"))
    model, stable = wx.build_model(model_condition(cfg["condition"]), cfg["corpus"]["vocab"], margs)
    stabilize, desc = None, None
    if stable:
        stabilize, desc = wx.make_stabilizer(model, margs)
        stabilize()  # start feasible
    return model, stabilize, desc


def _train(folder: Path, cfg: dict, args, data: dict, command: str, say) -> dict:
    model, stabilize, desc = initial_model(cfg)
    info = train_lm(model, data["train"], data["valid"], epochs=cfg["epochs"], lr=cfg["lr"], clip=cfg["clip"],
                    bptt=cfg["bptt"], stabilize=stabilize, max_batches=cfg["max_batches"], patience=cfg["patience"],
                    test=data["test"], checkpoint=LMCheckpoint(folder / CHECKPOINT, cfg),
                    checkpoint_every=args.checkpoint_every, name=f"{cfg['condition']}/seed{cfg['seed']}", log=say)
    model.eval()
    test_loss = evaluate(model, data["test"], cfg["bptt"])  # the best-validation weights
    V = cfg["corpus"]["vocab"]
    diverged = divergence(test_loss, V, training=info["diverged"])
    h = info["history"]
    best = min(range(len(h)), key=lambda i: h[i]["valid_loss"]) if h else None
    return {"condition": cfg["condition"], "seed": cfg["seed"], "status": "diverged" if diverged else "complete",
            "diverged": diverged, "stopped": info["stopped"], "test_loss": test_loss, "test_ppl": perplexity(test_loss),
            "best_epoch": None if best is None else h[best]["epoch"],
            "best_valid_ppl": perplexity(info["best_valid_loss"]), "epochs_run": len(h), "updates": info["updates"],
            "lr_history": [r["lr"] for r in h], "history": h, "resumes": info["resumes"],
            "certified_lambda": wx.certified_lambda(model), "stabilizer": desc, "config": cfg,
            "config_hash": config_hash(cfg), "env": _env(), "train_time_s": info["train_time_s"],
            "command": command, "date": datetime.date.today().isoformat()}


# ---------------------------------------------------------------------- many runs
def _list(text: str, kind=str) -> list:
    return [kind(v.strip()) for v in str(text).split(",") if v.strip()]


def _conditions(text: str) -> list[str]:
    names = _list(text)
    for n in names:
        if n not in CONDITIONS:
            raise SystemExit(f"Unknown condition {n!r}{did_you_mean(n, CONDITIONS)}. Select from {', '.join(CONDITIONS)}")
    return names


def _lr_from(path: str, cond: str) -> float:
    """The lr the search chose for ``cond``'s cell (its unstable model's choice: the stable one is
    retrained at the unstable model's settings)."""
    search = json.loads(Path(path).read_text())
    key = f"{wx.condition(model_condition(cond))[0]}-unstable"
    chosen = (search.get("conditions", {}).get(key) or {}).get("chosen_lr")
    if chosen is None:
        raise SystemExit(f"--lr-from {path}: no chosen lr for {key} (searched: {', '.join(search.get('conditions', {}))})")
    return float(chosen)


def plan(args, corpus: Corpus, out: Path) -> list[tuple[Path, dict]]:
    """Every run folder of this call with its config; refuses the call when one holds another config."""
    cutoffs = wx.adaptive_cutoffs(argparse.Namespace(adaptive_softmax=not args.full_softmax, cutoffs=args.cutoffs),
                                  corpus.vocab_size)
    runs = []
    for cond in _conditions(args.conditions):
        for seed in _list(args.seeds, int):
            if args.cmd == "search":
                for lr in _list(args.lrs, float):
                    runs.append((out / cond / f"lr{lr:g}" / f"seed{seed}", run_config(cond, seed, lr, args, corpus, cutoffs)))
            else:
                lr = _lr_from(args.lr_from, cond) if args.lr_from else args.lr
                runs.append((out / cond / f"seed{seed}", run_config(cond, seed, lr, args, corpus, cutoffs)))
    bad = [why for folder, cfg in runs if (why := check_folder(folder, cfg))]
    if bad:
        raise SystemExit("refused (nothing trained):\n  " + "\n  ".join(bad))
    return runs


def search_summary(out: Path) -> dict:
    """``lr_search.json``: every finished search run under ``out`` and, per condition, the lr with the
    lowest best validation perplexity over the short schedule (diverged runs excluded; a tie goes to the
    smaller lr), flagged when it lies at an end of the grid searched."""
    conds: dict = {}
    for res_path in sorted(out.glob(f"*/lr*/seed*/{RESULT}")):
        r = read_result(res_path)
        c = conds.setdefault(r["condition"], {"runs": []})
        c["runs"].append({"lr": r["config"]["lr"], "seed": r["seed"], "best_valid_ppl": r["best_valid_ppl"],
                          "test_ppl": r["test_ppl"], "diverged": r["diverged"], "epochs_run": r["epochs_run"],
                          "valid_ppl_per_epoch": [h["valid_ppl"] for h in r["history"]],
                          "schedule": {k: r["config"][k] for k in ("epochs", "patience", "max_batches")}})
    for name, c in conds.items():
        c["runs"].sort(key=lambda r: (r["lr"], r["seed"]))
        by_lr: dict = {}
        for r in c["runs"]:
            by_lr.setdefault(r["lr"], []).append(r)
        ok = {lr: sum(r["best_valid_ppl"] for r in rs) / len(rs) for lr, rs in by_lr.items()
              if not any(r["diverged"] for r in rs) and all(r["best_valid_ppl"] is not None for r in rs)}
        c["grid"] = sorted(by_lr)
        c["chosen_lr"] = min(ok, key=lambda lr: (ok[lr], lr)) if ok else None
        c["chosen_at_grid_edge"] = c["chosen_lr"] is not None and len(c["grid"]) > 1 and c["chosen_lr"] in (
            c["grid"][0], c["grid"][-1])
    return {"rule": "per condition, the lr with the lowest best validation perplexity (mean over the seeds searched) "
                    "after the short schedule; an lr with a diverged run is excluded; ties go to the smaller lr; "
                    "an lr at an end of the grid is flagged (extend the grid past it)",
            "conditions": conds}


def train_many(args, argv: list[str]) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    corpus = Corpus(args.data_root, limit_tokens=args.tokens, limit_eval_tokens=args.eval_tokens,
                    order="appearance" if args.full_softmax else "frequency")
    print(corpus, flush=True)
    runs = plan(args, corpus, out)
    data = {"train": batchify(corpus.train, args.batch_size), "valid": batchify(corpus.valid, args.eval_batch_size),
            "test": batchify(corpus.test, args.eval_batch_size)}
    command = "python experiments/stable_rnn/wikitext_runs.py " + " ".join(shlex.quote(a) for a in argv)
    results = {}
    for folder, cfg in runs:
        r = run_one(folder, cfg, args, data, command, log=lambda m: print(m, flush=True))
        if r is not None:
            results[str(folder.relative_to(out))] = r
    if args.cmd == "search":
        summary = search_summary(out)
        atomic_write(out / "lr_search.json", json.dumps(json_safe(summary), indent=1) + "\n")
        for name, c in summary["conditions"].items():
            print(f"{name}: chosen lr {c['chosen_lr']} of {c['grid']}"
                  + ("  (at the grid's edge: extend the grid)" if c["chosen_at_grid_edge"] else ""), flush=True)
        print(f"wrote {out / 'lr_search.json'}")
    return results


# ---------------------------------------------------------------------- status and collect
def _run_folders(runs: Path) -> list[Path]:
    return sorted(p.parent for p in runs.rglob(RECORD))


def status(runs: Path, log=print) -> list[dict]:
    rows = []
    for folder in _run_folders(runs):
        rec = read_record(folder) or {}
        st = rec.get("status", "?")
        if st == "running":
            lock = folder / "run.lock"
            try:
                holder = json.loads(lock.read_text())
            except (OSError, ValueError):
                holder = {}
            pid = holder.get("pid") if isinstance(holder, dict) else None
            if not (isinstance(pid, int) and holder.get("host") == socket.gethostname() and pid_alive(pid)):
                st = "stopped (killed; run the same command to continue it)"
        last = ""
        if (folder / LOG).is_file():
            lines = (folder / LOG).read_text(encoding="utf-8").splitlines()
            last = lines[-1] if lines else ""
        rows.append({"run": str(folder.relative_to(runs)), "status": st, "last": last})
        log(f"{folder.relative_to(runs)}: {st}  | {last}")
    return rows


def collect(runs: Path, dest: Path, *, force: bool = False, log=print) -> list[Path]:
    """Copy ``result.json`` of every finished run under ``runs`` to the same place under ``dest``
    (never a checkpoint), and ``lr_search.json``; a copy of another config is kept unless ``force``."""
    copied = []
    for folder in _run_folders(runs):
        rel = folder.relative_to(runs)
        rec = read_record(folder) or {}
        if rec.get("status") not in FINISHED or not (folder / RESULT).is_file():
            log(f"{rel}: not finished ({rec.get('status', 'no run.json')}), left out")
            continue
        res = read_result(folder / RESULT)
        if res.get("config_hash") != rec.get("config_hash"):
            log(f"{rel}: result.json and run.json disagree on the config, left out")
            continue
        target = dest / rel / RESULT
        if target.is_file() and not force:
            old = read_result(target)
            if old.get("config_hash") != res.get("config_hash"):
                log(f"{rel}: {target} holds a run of another config, kept (--force replaces it)")
                continue
            if target.read_bytes() == (folder / RESULT).read_bytes():
                log(f"{rel}: unchanged")
                continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / RESULT, target)
        copied.append(target)
        log(f"{rel}: copied to {target}")
    for summary in sorted(runs.rglob("lr_search.json")):
        target = dest / summary.relative_to(runs)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(summary, target)
        copied.append(target)
        log(f"{summary.relative_to(runs)}: copied to {target}")
    return copied


# ---------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quick", action="store_true", help="a corpus slice, tiny models, a few batches (CI)")
    common.add_argument("--out", default=None, help="the folder of the run folders")
    common.add_argument("--data-root", default=None, help="folder holding wikitext-2/ (default: $SEQ2D_DATA)")
    common.add_argument("--conditions", default=",".join(wx.CONDITIONS), help=f"comma-separated, of {', '.join(CONDITIONS)}")
    common.add_argument("--seeds", default="0", help="comma-separated seeds: one run folder per (condition, seed)")
    common.add_argument("--epochs", type=int, default=None, help="the epoch cap (train: 15, quick 2; search: 2)")
    common.add_argument("--patience", type=int, default=None,
                        help="stop after this many epochs in a row without a better validation loss (full: 2)")
    common.add_argument("--max-batches", type=int, default=None, help="batches per epoch (full: all)")
    common.add_argument("--tokens", type=int, default=None, help="training tokens kept (full: all)")
    common.add_argument("--eval-tokens", type=int, default=None, help="validation/test tokens kept (full: all)")
    for f in ("emb", "hidden", "layers"):
        common.add_argument(f"--{f}", type=int, default=None, help="full: 200, 200, 2")
    common.add_argument("--dropout", type=float, default=None, help="full: 0.2")
    common.add_argument("--full-softmax", action="store_true", help="a full softmax decoder instead of the adaptive one")
    common.add_argument("--cutoffs", default="2000,10000", help="the adaptive softmax's cutoffs")
    common.add_argument("--div-value", type=float, default=4.0, help="the adaptive softmax's size ratio")
    common.add_argument("--clip", type=float, default=0.25)
    common.add_argument("--bptt", type=int, default=35)
    common.add_argument("--batch-size", type=int, default=20)
    common.add_argument("--eval-batch-size", type=int, default=10)
    common.add_argument("--rnn-lambda", type=float, default=0.99, help="tanh-stable: ||W_hh||_2 bound per layer")
    common.add_argument("--embedding-clip", type=float, default=1.0, help="lstm-stable: embeddings clipped to [-c, c]")
    common.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: runs are bitwise reproducible)")
    common.add_argument("--checkpoint-every", type=int, default=None, help="batches between checkpoints (full: 500)")
    t = sub.add_parser("train", parents=[common], help="the main runs")
    t.add_argument("--lr", type=float, default=20.0, help="initial SGD lr (divided by 4 on a validation plateau)")
    t.add_argument("--lr-from", default=None, metavar="LR_SEARCH_JSON",
                   help="take each condition's lr from a search: its cell's unstable model's chosen lr")
    s = sub.add_parser("search", parents=[common], help="a learning-rate search on a short schedule")
    s.add_argument("--lrs", required=True, help="comma-separated lrs, each its own run folder")
    st = sub.add_parser("status", help="where every run under --runs stands")
    st.add_argument("--runs", required=True)
    c = sub.add_parser("collect", help="copy finished runs' result.json (and lr_search.json) into the repository")
    c.add_argument("--runs", required=True)
    c.add_argument("--dest", default="experiments/stable_rnn/results/wikitext")
    c.add_argument("--force", action="store_true", help="replace a collected run of another config")
    return ap


def main(argv: list[str] | None = None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.cmd == "status":
        return status(Path(args.runs))
    if args.cmd == "collect":
        return collect(Path(args.runs), Path(args.dest), force=args.force)
    if args.cmd == "search" and args.epochs is None:
        args.epochs = SEARCH_EPOCHS  # the short schedule
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.cmd == "search":
        args.lr_from = None
    if args.out is None:
        args.out = f"runs/stable_rnn/wikitext_{'lr' if args.cmd == 'search' else 'main'}{'_quick' if args.quick else ''}"
    return train_many(args, argv)


if __name__ == "__main__":
    main()
