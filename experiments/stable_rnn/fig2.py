"""Fig. 2 of the slides on the trained WikiText-2 models, with controls that can tell models apart
(issue 34, item 2).

The slides' Fig. 2 (seeds/002_e0ce570a88c4aff3.txt) plots the norm of the gradient of the loss with
respect to the inputs against the distance between input and loss, averaged over the held-out set, and
reads it as: the gradient vanishes for moderate distances, for the unstable RNN and LSTM of the blog's
table; the slides use it as the evidence that real-world RNNs are "effectively stable". The audit of
docs/results/stability.md found that the criterion, as the page read it, is met by a diverged tanh model
too: it told no model apart. This script measures, for every finished run folder of wikitext_runs.py
(one per condition and seed),

* the curve ``g(k) = mean over targets t of ||d loss_t / d x_{t-k}||_2`` for ``k = 0 .. K``
  (``seq2d.lab.lm.grad_norm_windows``: x the embedding input, loss_t the cross-entropy of the prediction at
  row t; the targets are every ``stride``-th row of every column of the batchified test stream, each
  window starting from the model's carried state: a stated uniform subsample of the test positions);
* its **1% distance**: the first k with ``g(k) < 0.01 g(0)`` (``seq2d.lab.lm.vanishing_distance``, the
  fraction ``seq2d.lab.lm.VANISH_FRACTION``), the criterion that has to tell models apart;
* beside it, the data lambda (``seq2d.lab.lm.lm_data_lambda`` over the first ``lambda_rows`` rows of the
  batchified test stream) and the certified contraction constant (wikitext.py's ``certified_lambda``),

for three kinds of model per (condition, seed):

* ``trained``: the run's final weights (its checkpoint.pt after training ended: the best-validation
  weights); their test loss is checked against the run's result.json;
* ``untrained``: the same condition's initial weights at the same seed (wikitext_runs.initial_model:
  what that run started from);
* ``diverged`` (for the conditions in ``--diverged-conditions``, by default the unstable tanh RNN, the
  audit's case): the same initial weights trained at a too-high learning rate (``--diverged-lr``, 20
  by default: the ``word_language_model`` example's lr, at which tanh RNNs diverge) for
  ``--diverged-batches`` batches (200), the run's other settings unchanged, the weights after the last
  step. It counts as a diverged control only when ``seq2d.lab.lm.divergence`` says it diverged (test
  perplexity above the vocabulary size, or a non-finite loss); otherwise it is reported and left out.

The predictions and the tests that decide them (:data:`PREDICTIONS`) were written before any trained
model was measured; :func:`analyse` applies them to the JSON. Everything is recomputed per model and kept
in ``--out/<condition>/seed<k>/<kind>.json`` (and the diverged control's weights, ``diverged.pt``), so an
interrupted call continues where it stopped; the small JSON of all of it goes to ``--json`` (committed:
experiments/stable_rnn/results/fig2.json), and docs/results/stability.md's ``fig2`` section is rendered
from it by report.py. A record already in ``--json`` is extended, not replaced: the entries of runs whose
folders are not under ``--runs`` (measured on another machine, or their folders gone since) are kept, each
entry naming the machine it was measured on (``env``); ``--drop-missing`` writes only the runs found.

    # after the runs of item 1 (wikitext_runs.py train ... --out runs/stable_rnn/wikitext_main)
    python experiments/stable_rnn/fig2.py --runs runs/stable_rnn/wikitext_main --out runs/stable_rnn/fig2 \\
        --json experiments/stable_rnn/results/fig2.json
    python experiments/stable_rnn/report.py --runs docs/results/stability --doc docs/results/stability.md
    # CI: the quick runs of wikitext_runs.py, a short curve, a few rows of data lambda
    python experiments/stable_rnn/fig2.py --quick --runs /tmp/wikitext_runs --out /tmp/fig2

Cost (full mode, 2 x 200 models, 1 thread, a loaded 2-core AMD EPYC): about 1 ms (tanh) and 2.5 ms
(LSTM) per target at K = 50, so about 1 and 2 minutes per model at stride 5 (49,000 targets); the LSTM's
data lambda (exact Jacobian) about 0.3 s per row; a diverged control about a minute of training.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import math
import re
import shlex
import sys
import time
from pathlib import Path

import torch

from seq2d.lab.wikitext import Corpus, batchify
from seq2d.fileio import atomic_write
from seq2d.lab.lm import (VANISH_FRACTION, divergence, evaluate, grad_norm_windows, lm_data_lambda, perplexity, train_lm,
                          vanishing_distance)
from seq2d.renames import migrate_record
from seq2d.results_page import json_safe
from seq2d.train.checkpoint import check_model_state, load_checkpoint
from seq2d.train.rundir import read_record


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"stable_rnn_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wr = _load("wikitext_runs")  # the run folders, their configs and initial models: one home
wx = wr.wx

FULL = dict(max_distance=50, stride=5, lambda_rows=200, diverged_lr=20.0, diverged_batches=200)
QUICK = dict(max_distance=8, stride=2, lambda_rows=20, diverged_lr=200.0, diverged_batches=8)  # not the quick runs' lr
KINDS = ("trained", "untrained", "diverged")
MEASURE_VERSION = 1  # part of every kept measurement's key: raise it when measure() changes what it computes
DEFAULT_JSON = "experiments/stable_rnn/results/fig2.json"

#: What "moderate" means in the test of the source's statement: the BPTT length the models were trained
#: with (each run's own ``bptt``; 35 in the runs of item 1): a gradient that has vanished within it has
#: vanished within the span training itself back-propagates through.
MODERATE = "bptt"

#: The predictions, as stated before any trained model was measured (committed with this file first);
#: the page prints them above the numbers. "source" paraphrases the slides (seeds/002_e0ce570a88c4aff3.txt;
#: the seeds' README asks for their numbers, not their sentences); "ours" marks our reading.
PREDICTIONS = [
    {"id": "F2-vanish",
     "source": "Fig. 2 (the slides): the norm of the gradient with respect to the inputs, averaged over the entire "
               "held-out set, vanishes for moderate distances between input and loss, for the unstable RNN (test "
               f"perplexity {wx.PAPER['tanh'][0]}) and LSTM ({wx.PAPER['lstm'][0]}); the slides' evidence that "
               "real-world RNNs are effectively stable",
     "prediction": "ours, at our threshold: every trained unstable model (tanh-unstable, lstm-unstable; every seed) "
                   "has a 1% distance D (the first k with g(k) < 0.01 g(0)) no longer than the BPTT length it was "
                   "trained with",
     "test": "D per trained unstable model and seed that did not diverge, the curve measured out to K = "
             "max_distance > BPTT (with K <= BPTT a curve that has not fallen by K is undecided)",
     "falsified_if": "some seed's D exceeds the BPTT length, or its curve does not fall below 1% of g(0) within K"},
    {"id": "F2-apart",
     "source": "ours: the audit found the criterion met by a diverged tanh model too; Fig. 2 says something about "
               "trained models only if their D differs from what an untrained or a diverged model gives",
     "prediction": "per cell, the trained unstable models' D differs from the untrained controls' (same condition, "
                   "same seeds) and from the diverged controls' (tanh) by more than the seed-to-seed spread",
     "test": "with D over seeds (at least 2 seeds per group, every D reached within K): separated when "
             "|mean D_trained - mean D_control| > max(range D_trained, range D_control), range = max - min over "
             "seeds",
     "falsified_if": "not separated from a control: the 1% distance cannot tell the trained models from that control "
                     "at this scale (the criterion is met by the control as well)"},
    {"id": "F2-verdict",
     "source": "ours: how the two combine into a reading of the source's statement",
     "prediction": "the statement is supported at this scale when F2-vanish holds and F2-apart separates the trained "
                   "models from every control of their cell",
     "test": "F2-vanish and F2-apart per cell",
     "falsified_if": "F2-vanish falsified: the statement fails; F2-vanish held but a control not separated: met, but "
                     "as uninformative as the audit found (the control meets it too); fewer than 2 seeds or a curve "
                     "that never falls below 1%: undecided"},
]


# ---------------------------------------------------------------------- analysis (pure; tested on synthetic data)
def _group(entries, condition: str, kind: str) -> list[dict]:
    """The entries of one condition and kind that count (``counts``: a trained run that did not
    diverge, a control that is what it claims to be), by seed."""
    out = [e for e in entries if e["condition"] == condition and e["kind"] == kind and e.get("counts")]
    return sorted(out, key=lambda e: e["seed"])


def separation(a: list, b: list) -> dict:
    """F2-apart for two groups of 1% distances (None: the curve never fell below 1% within K)."""
    if len(a) < 2 or len(b) < 2:
        return {"outcome": "undecided", "why": f"fewer than 2 seeds ({len(a)} and {len(b)})"}
    if any(v is None for v in a + b):
        return {"outcome": "undecided", "why": "a curve never falls below 1% of g(0) within K"}
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    spread = max(max(a) - min(a), max(b) - min(b))
    gap = abs(ma - mb)
    return {"outcome": "separated" if gap > spread else "not separated", "mean_trained": ma, "mean_control": mb,
            "gap": gap, "spread": spread}


def analyse(record: dict) -> dict:
    """The pre-stated tests (:data:`PREDICTIONS`) on ``record["entries"]``, per cell."""
    entries = record.get("entries", [])
    out = {}
    for cell in wx.PAPER:
        cond = f"{cell}-unstable"
        trained = _group(entries, cond, "trained")
        if not trained:
            out[cell] = {"verdict": "pending", "why": f"no trained {cond} model measured"}
            continue
        D = [e["vanish_distance"] for e in trained]
        K = len(trained[0]["curve"]) - 1
        bad = [e["seed"] for e in trained if (e["vanish_distance"] is None and K > e["bptt"])
               or (e["vanish_distance"] is not None and e["vanish_distance"] > e["bptt"])]
        short = [e["seed"] for e in trained if e["vanish_distance"] is None and K <= e["bptt"]]
        vanish = {"outcome": "falsified" if bad else ("undecided" if short else "held"), "D": D, "K": K,
                  "seeds": [e["seed"] for e in trained], "moderate": sorted({e["bptt"] for e in trained}),
                  "failing_seeds": bad, "undecided_seeds": short}
        apart = {}
        for kind in ("untrained", "diverged"):
            ctl = _group(entries, cond, kind)
            if not ctl:
                continue
            apart[kind] = {**separation(D, [e["vanish_distance"] for e in ctl]), "D_control": [e["vanish_distance"] for e in ctl],
                           "seeds_control": [e["seed"] for e in ctl]}
        if vanish["outcome"] == "falsified":
            verdict = "falsified"
        elif vanish["outcome"] == "undecided" or not apart or any(a["outcome"] == "undecided" for a in apart.values()):
            verdict = "undecided"
        elif all(a["outcome"] == "separated" for a in apart.values()):
            verdict = "supported"
        else:
            verdict = "met but uninformative"
        out[cell] = {"verdict": verdict, "vanish": vanish, "apart": apart}
    return out


# ---------------------------------------------------------------------- measuring one model
def one_percent_distance(curve: list) -> int | None:
    """The 1% distance D: ``seq2d.lab.lm.vanishing_distance`` (the first k with ``g(k) < 0.01 g(0)``, None when
    the curve never gets there), and 0 for a curve that is 0 from distance 0 on (no gradient reaches the
    loss from any input: a saturated model; the definition's strict inequality would never be met)."""
    if curve and curve[0] == 0 and all(v == 0 for v in curve):
        return 0
    return vanishing_distance(curve)


def measure(model, test: torch.Tensor, cfg: dict, s: dict) -> dict:
    """Test loss, the gradient curve and its 1% distance, data lambda and the certified constant."""
    model.eval()
    loss = evaluate(model, test, cfg["bptt"])
    out = {"test_loss": loss, "test_ppl": perplexity(loss), "bptt": cfg["bptt"]}
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    if not finite:
        return {**out, "curve": None, "sd": None, "vanish_distance": None, "data_lambda": None,
                "certified_lambda": None, "note": "non-finite weights: nothing measured"}
    t0 = time.perf_counter()
    g = grad_norm_windows(model, test, s["max_distance"], stride=s["stride"])
    dl = lm_data_lambda(model, test[:s["lambda_rows"]])
    return {**out, "curve": g["curve"], "sd": g["sd"], "targets": g["targets"], "rows": g["rows"],
            "columns": g["columns"], "vanish_distance": one_percent_distance(g["curve"]),
            "data_lambda": {k: float(dl[k]) for k in ("max", "mean", "max_inf", "mean_inf") if k in dl},
            "certified_lambda": wx.certified_lambda(model), "measure_time_s": round(time.perf_counter() - t0, 2)}


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def trained_model(folder: Path, cfg: dict):
    """The run's final weights in its model: refuses a checkpoint saved before training ended."""
    ckpt = load_checkpoint(folder / wr.CHECKPOINT, map_location="cpu")
    loop = ckpt["extra"].get("loop") or {}
    if loop.get("stopped") is None:
        raise SystemExit(f"{folder / wr.CHECKPOINT}: saved before training ended (no final weights); finish the run first")
    model, _, _ = wr.initial_model(cfg)
    check_model_state(ckpt["model"], model, str(folder / wr.CHECKPOINT))
    model.load_state_dict(ckpt["model"])
    return model


def diverged_model(cfg: dict, data: dict, s: dict, weights: Path):
    """The diverged control: the run's initial weights trained at ``s['diverged_lr']`` for
    ``s['diverged_batches']`` batches (one epoch capped there), the run's other settings; the weights
    after the last step (kept in ``weights``). Returns ``(model, training's divergence reason or None)``."""
    model, stabilize, _ = wr.initial_model(cfg)
    if weights.is_file():
        saved = torch.load(weights, weights_only=True)
        model.load_state_dict(saved["model"])
        return model, saved["training"]
    info = train_lm(model, data["train"], data["valid"], epochs=1, lr=s["diverged_lr"], clip=cfg["clip"],
                    bptt=cfg["bptt"], stabilize=stabilize, max_batches=s["diverged_batches"], log=None)
    torch.save({"model": model.state_dict(), "training": info["diverged"]}, weights)
    return model, info["diverged"]


# ---------------------------------------------------------------------- many models
def run_folders(runs: Path, log=print) -> list[tuple[Path, dict, dict]]:
    """``(folder, run.json record, result.json)`` of every finished main run under ``runs``
    (``<condition>/seed<k>``; learning-rate search folders and unfinished runs are left out, said so)."""
    out = []
    for folder in wr._run_folders(runs):
        rel = folder.relative_to(runs)
        rec = read_record(folder) or {}
        if not re.fullmatch(r"seed\d+", rel.name) or len(rel.parts) != 2:
            log(f"{rel}: not a main run folder (<condition>/seed<k>), left out")
            continue
        if rec.get("status") not in wr.FINISHED or not (folder / wr.RESULT).is_file():
            log(f"{rel}: not finished ({rec.get('status', 'no run.json')}), left out")
            continue
        if not (folder / wr.CHECKPOINT).is_file():
            log(f"{rel}: no {wr.CHECKPOINT} (the final weights), left out")
            continue
        out.append((folder, rec, wr.read_result(folder / wr.RESULT)))  # "steps" before issue 36: read as "updates"
    return out


def _corpus(cfg: dict, data_root, cache: dict) -> dict:
    c = cfg["corpus"]
    key = (c["tokens"], c["eval_tokens"], c["order"], cfg["batch_size"], cfg["eval_batch_size"])
    if key not in cache:
        corpus = Corpus(data_root, limit_tokens=c["tokens"], limit_eval_tokens=c["eval_tokens"], order=c["order"])
        if corpus.vocab_size != c["vocab"] or corpus.test.numel() != c["test_tokens"]:
            raise SystemExit(f"the corpus under {corpus.path} gives vocabulary {corpus.vocab_size} and "
                             f"{corpus.test.numel()} test tokens, the runs had {c['vocab']} and {c['test_tokens']}: "
                             "point --data-root at the data they were trained on")
        cache[key] = {"train": batchify(corpus.train, cfg["batch_size"]),
                      "valid": batchify(corpus.valid, cfg["eval_batch_size"]),
                      "test": batchify(corpus.test, cfg["eval_batch_size"])}
    return cache[key]


def settings_of(args) -> dict:
    return {k: getattr(args, k) for k in FULL}


def entry_key(kind: str, result: dict, s: dict, folder: Path) -> str:
    parts = {"kind": kind, "version": MEASURE_VERSION, "config_hash": result["config_hash"], "threads": torch.get_num_threads(),
             "settings": {k: v for k, v in s.items() if kind == "diverged" or not k.startswith("diverged")}}
    if kind == "trained":
        parts["checkpoint"] = _sha(folder / wr.CHECKPOINT)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _as_today(e: dict) -> dict:
    """A kept measurement in today's words ("steps" before issue 36) with its 1% distance derived by today's rule."""
    e = migrate_record(e)
    e["vanish_distance"] = one_percent_distance(e["curve"]) if e.get("curve") else None
    return e


def kept_entries(previous: dict | None, found: list, s: dict, quick: bool, log=print) -> list[dict]:
    """The entries of the previous record (``--json`` before this call) whose run folder is not under ``--runs``
    any more (a run measured on another machine, or its folder removed after its measurement): kept as they
    were measured, each with the machine it was measured on (the previous record's, for entries from before
    entries carried their own). A previous record of another mode or other settings is not merged: its
    entries are not comparable, and the call says so and stops."""
    if not previous:
        return []
    here = {(r["config"]["condition"], r["config"]["seed"]) for _, _, r in found}
    old_s = {k: v for k, v in previous.get("settings", {}).items() if k in s}
    if previous.get("mode") != ("quick" if quick else "full") or old_s != s:
        raise SystemExit(f"fig2.py: the record in --json was measured with mode {previous.get('mode')} and settings "
                         f"{old_s}, this call uses {s}: give another --json, or --drop-missing to start it afresh")
    kept = []
    for e in previous.get("entries", []):
        if (e["condition"], e["seed"]) in here:
            continue  # measured again, or read from its part file, below
        e = _as_today(dict(e))
        e.setdefault("env", previous.get("env"))
        kept.append(e)
        log(f"{e['condition']}/seed{e['seed']} {e['kind']}: no run folder here, kept from the previous record "
            f"({(e['env'] or {}).get('cpu_capability')})")
    return kept


def measure_all(args, log=print, previous: dict | None = None) -> list[dict]:
    """Every entry of the record: measured (or read back from ``--out``) for each finished run folder under
    ``--runs``, and ``previous``'s entries for the runs whose folders are not there (:func:`kept_entries`)."""
    runs, out = Path(args.runs), Path(args.out)
    s = settings_of(args)
    diverged_conds = wr._list(args.diverged_conditions)
    cache: dict = {}
    found = run_folders(runs, log)
    if not found:
        raise SystemExit(f"fig2.py: no finished run folder under {runs} (wikitext_runs.py train --out {runs})")
    entries = kept_entries(previous, found, s, args.quick, log)
    for folder, rec, result in found:
        cfg = result["config"]
        data = _corpus(cfg, args.data_root, cache)
        cond, seed = cfg["condition"], cfg["seed"]
        kinds = ["trained", "untrained"] + (["diverged"] if cond in diverged_conds else [])
        for kind in kinds:
            part = out / cond / f"seed{seed}" / f"{kind}.json"
            key = entry_key(kind, result, s, folder)
            if part.is_file() and json.loads(part.read_text()).get("key") == key:
                e = _as_today(json.loads(part.read_text()))
                entries.append(e)
                log(f"{cond}/seed{seed} {kind}: measured before, kept")
                continue
            part.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            e = {"condition": cond, "seed": seed, "kind": kind, "cell": cfg["cell"], "stable": cfg["stable"],
                 "key": key, "run": str(folder.relative_to(runs)), "run_status": rec.get("status"),
                 "run_config_hash": result["config_hash"], "lr": cfg["lr"], "env": wr._env()}
            if kind == "trained":
                model = trained_model(folder, cfg)
                e["updates"] = result.get("updates")
                e["result_test_loss"] = result.get("test_loss")
            elif kind == "untrained":
                model, _, _ = wr.initial_model(cfg)
                e["updates"] = 0
            else:
                model, why = diverged_model(cfg, data, s, part.parent / f"diverged-{key}.pt")
                e.update(lr=s["diverged_lr"], updates=s["diverged_batches"], training=why)
            e.update(measure(model, data["test"], cfg, s))
            if kind == "trained" and e["result_test_loss"] is not None:
                if not abs(e["test_loss"] - e["result_test_loss"]) <= 1e-3:
                    raise SystemExit(f"{folder}: the loaded weights give test loss {e['test_loss']:.6f}, the run's "
                                     f"result.json says {e['result_test_loss']:.6f}: not the run's weights or data")
            if kind == "diverged":
                e["diverged"] = divergence(e["test_loss"], cfg["corpus"]["vocab"], training=e.get("training"))
                e["counts"] = e["diverged"] is not None and e["curve"] is not None
            elif kind == "trained":  # a run that diverged is no trained model of the source's kind
                e["diverged"] = result.get("diverged")
                e["counts"] = e["diverged"] is None and e["curve"] is not None
            else:
                e["diverged"], e["counts"] = None, e["curve"] is not None
            e["time_s"] = round(time.perf_counter() - t0, 2)
            atomic_write(part, json.dumps(json_safe(e), indent=1) + "\n")
            entries.append(json.loads(part.read_text()))
            log(f"{cond}/seed{seed} {kind}: test ppl {_fmt(e['test_ppl'])}, 1% distance {e['vanish_distance']}, "
                f"data lambda max {_fmt((e['data_lambda'] or {}).get('max'), 3)}, certified "
                f"{_fmt(e['certified_lambda'], 3)} ({e['time_s']:.0f}s)")
    return entries


def _fmt(v, nd=2) -> str:
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def record_of(args, entries: list[dict], argv: list[str], seconds: float) -> dict:
    s = settings_of(args)
    rec = {"what": "Fig. 2 of the slides on the trained WikiText-2 models with untrained and diverged controls "
                   "(issue 34 item 2)",
           "mode": "quick" if args.quick else "full",
           "command": "python experiments/stable_rnn/fig2.py " + " ".join(shlex.quote(a) for a in argv),
           "settings": {**s, "vanish_fraction": VANISH_FRACTION, "moderate": MODERATE,
                        "diverged_conditions": wr._list(args.diverged_conditions)},
           "sampling": {"function": "seq2d.lab.lm.grad_norm_windows", "stream": "the batchified test stream",
                        "targets": "rows t = K, K + stride, K + 2 stride, ... <= N - 2 of every column",
                        "history": "each window t - K .. t from the model's state carried from the column's start"},
           "predictions": PREDICTIONS, "entries": sorted(entries, key=lambda e: (e["condition"], e["seed"],
                                                                                 KINDS.index(e["kind"]))),
           "env": wr._env(),
           "date": datetime.date.today().isoformat(), "seconds": round(seconds, 1)}
    rec["analysis"] = analyse(rec)
    return json_safe(rec)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a short curve and few data-lambda rows (CI, on quick runs)")
    ap.add_argument("--runs", required=True, help="the folder of wikitext_runs.py's run folders (its train --out)")
    ap.add_argument("--out", default=None, help="per-model results and the diverged controls' weights "
                                                "(default runs/stable_rnn/fig2[_quick])")
    ap.add_argument("--json", default=None, help=f"the record (default {DEFAULT_JSON}; quick: OUT/fig2.json)")
    ap.add_argument("--data-root", default=None, help="folder holding wikitext-2/ (default: $SEQ2D_DATA)")
    ap.add_argument("--max-distance", type=int, default=None, help="K, the largest distance (full 50)")
    ap.add_argument("--stride", type=int, default=None, help="every stride-th row of each column is a target (full 5)")
    ap.add_argument("--lambda-rows", type=int, default=None, help="test rows the data lambda runs over (full 200)")
    ap.add_argument("--diverged-conditions", default="tanh-unstable",
                    help="conditions that get a diverged control (comma-separated)")
    ap.add_argument("--diverged-lr", type=float, default=None, help="the diverged control's lr (20)")
    ap.add_argument("--diverged-batches", type=int, default=None, help="the diverged control's batches (full 200)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--drop-missing", action="store_true",
                    help="write only the runs under --runs; without it the entries of the record already in --json "
                         "whose run folders are not under --runs are kept (each with the machine it was measured on)")
    return ap


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.out is None:
        args.out = f"runs/stable_rnn/fig2{'_quick' if args.quick else ''}"
    if args.json is None:
        args.json = str(Path(args.out) / "fig2.json") if args.quick else DEFAULT_JSON
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    previous = None
    if Path(args.json).is_file() and not args.drop_missing:
        previous = json.loads(Path(args.json).read_text())
    entries = measure_all(args, log=lambda m: print(m, flush=True), previous=previous)
    rec = record_of(args, entries, argv, time.perf_counter() - t0)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(args.json), json.dumps(rec, indent=1) + "\n")
    for cell, a in rec["analysis"].items():
        print(f"{cell}: {a['verdict']}" + (f" ({a['why']})" if "why" in a else ""), flush=True)
    print(f"wrote {args.json}")
    return rec


if __name__ == "__main__":
    main()
