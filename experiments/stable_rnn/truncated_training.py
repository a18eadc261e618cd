"""Training truncated (feed-forward) language models against the recurrent one on WikiText-2.

Miller & Hardt (arXiv 1805.10369) prove that for a stable recurrent model, gradient descent on
the k-truncated feed-forward model and on the recurrent model end at nearby weights, the distance
shrinking as k grows (the summary ``000`` and the slides ``002`` in seeds/; the slides'
Proposition 2 is for projected gradient descent with step alpha/t, see gradient_gaps.py); for
unstable models nothing is promised. This script trains,
from one initialisation, on the same batches in the same order with the same optimizer:

    recurrent   the RNN LM, hidden state carried across BPTT segments (seq2d.lab.lm.train_lm, k=None)
    k = 2, 5, ...   the same LM trained as its k-truncated version: each position sees only its
                last k tokens, from a zero state (RNNLM.window_features, the same parameters)

for a stable model (||W_hh||_2 <= --rnn-lambda after every step, seq2d.stability.SpectralClip)
and an unstable one (free). It reports, per model: test perplexity in its own mode and in the
other one (a truncated model run recurrently, the recurrent model truncated at its k), the
distance of its weights to the recurrent model's (recurrent part and all parameters, absolute and
relative, next to how far the recurrent model moved from the common initialisation), the
certified and data contraction constants (seq2d.stability), and for the two recurrent models
||d loss_{t+i} / d x_t|| with the hidden state carried, t every (grad_distance + 1)-th position of each column of
the batchified test stream (seq2d.lab.lm.grad_norm_carried; the paper's Fig. 2; ``carried_sampling`` states it exactly).

Our variant (CPU scale), not the paper's protocol: a one-layer tanh RNN (the contraction is then
certified in the plain 2-norm), embedding/hidden 64, dropout 0 (so the distance reflects the
truncation, not dropout noise), an adaptive softmax (cutoffs 2000, 10000; ids by frequency), the
whole token stream, a few epochs.

    # the run in docs/results/stability.md (CPU, about 45 minutes with --jobs 2)
    python experiments/stable_rnn/truncated_training.py --jobs 2 --out runs/stable_rnn/truncated_training \\
        --doc docs/results/stability.md
    # quick mode (CI): a slice of the corpus, a few batches
    python experiments/stable_rnn/truncated_training.py --quick --out /tmp/tt
    # tables, plots and the doc section again from a run's results.json (nothing retrained)
    python experiments/stable_rnn/truncated_training.py --from-json runs/stable_rnn/truncated_training/results.json \
        --out runs/stable_rnn/truncated_training --doc docs/results/stability.md

Outputs in --out: results.json, results.md, truncated_ppl.png, weight_distance.png,
grad_carried.png, per model <stability>/<model>/metrics.{jsonl,csv}.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import multiprocessing as mp
import platform
import shlex
import shutil
import sys
import time
from pathlib import Path

import torch

from seq2d.lab.wikitext import Corpus, batchify
from seq2d.envinfo import cpu_name
from seq2d.lab.lm import (VANISH_FRACTION, RNNLM, evaluate, grad_norm_carried, lm_data_lambda, perplexity, train_lm,
                          vanishing_distance, weight_distance)
from seq2d.renames import migrate_record
from seq2d.results_page import json_safe as _finite
from seq2d.stability import SpectralClip, certified_lambda
from seq2d.train.trainer import write_metrics

FULL = dict(tokens=None, eval_tokens=None, epochs=2, max_batches=None, ks="2,5,10,20", carried_segments=None,
            lambda_rows=200)
QUICK = dict(tokens=30_000, eval_tokens=6_000, epochs=1, max_batches=12, ks="2,5", carried_segments=4, lambda_rows=20)


def _report():
    spec = importlib.util.spec_from_file_location("stable_rnn_report", Path(__file__).with_name("report.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CONTROL = "recurrent, init perturbed"  # the first control's name; the i-th (i >= 2) is f"{CONTROL} #{i}"


def controls(models: dict) -> list[dict]:
    """The perturbed-initialisation controls of one run (one or more), in order."""
    return [m for n, m in models.items() if n == CONTROL or n.startswith(CONTROL + " #")]


def _report_seeds():
    spec = importlib.util.spec_from_file_location("stable_rnn_report_seeds", Path(__file__).with_name("report_seeds.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_model(args, vocab: int, seed: int | None = None) -> RNNLM:
    torch.manual_seed(args.seed if seed is None else seed)
    return RNNLM(vocab, args.emb, args.hidden, args.layers, args.dropout, cell="tanh",
                 adaptive_cutoffs=[c for c in args.cutoffs if c < vocab] or None)


def run_stability(stable: bool, args, out: Path, seed: int | None = None) -> dict:
    """Every model (recurrent, the controls, then each k) of one stability setting and one seed; one process.
    With ``args.parts`` the result is also written to ``out/parts/<tag>_s<seed>.json`` and read back from there
    on a rerun with the same configuration (a long run can be resumed or split)."""
    seed = args.seed if seed is None else seed
    tag = "stable" if stable else "unstable"
    part = out / "parts" / f"{tag}_s{seed}.json"
    key = {k: v for k, v in vars(args).items() if k in PART_KEYS}
    if part.is_file():
        old = json.loads(part.read_text())
        if old.get("key") == key:
            print(f"[{tag} seed {seed}] read from {part}", flush=True)
            res = old["result"]  # its model rows in today's words ("steps" before issue 36: "updates")
            return {**res, "models": {n: migrate_record(m) for n, m in res["models"].items()}}
    if args.threads:
        torch.set_num_threads(args.threads)
    sub = out if len(args.seeds) == 1 else out / f"seed{seed}"
    corpus = Corpus(args.data_root, limit_tokens=args.tokens, limit_eval_tokens=args.eval_tokens, order="frequency")
    train, valid = batchify(corpus.train, args.batch_size), batchify(corpus.valid, args.eval_batch_size)
    test = batchify(corpus.test, args.eval_batch_size)
    V = corpus.vocab_size
    init = make_model(args, V, seed)
    models, rows = {}, {}
    ctl = [CONTROL] + [f"{CONTROL} #{i}" for i in range(2, args.controls + 1)] if args.control_eps > 0 else []
    plan = [("recurrent", None)] + [(c, None) for c in ctl]
    for name, k in plan + [(f"k={k}", k) for k in args.ks]:
        lm = make_model(args, V, seed)
        if name in ctl:  # a control: how far SGD alone carries a tiny difference (control i: generator seed + i)
            g = torch.Generator().manual_seed(seed + 1 + ctl.index(name))
            with torch.no_grad():
                for prm in lm.parameters():
                    prm.add_(torch.randn(prm.shape, generator=g) * (args.control_eps * prm.norm() / prm.numel() ** 0.5))
        clip = SpectralClip(lm.rnn, args.rnn_lambda) if stable else None
        if clip is not None:
            clip.project()  # start feasible (the same projected start for every model)
        info = train_lm(lm, train, valid, epochs=args.epochs, lr=args.lr, clip=args.clip, bptt=args.bptt, k=k,
                        stabilize=clip.project if clip else None, max_batches=args.max_batches, name=f"{tag} {name}",
                        lr_decay=args.lr_decay,
                        log=lambda m: print(m, flush=True))
        if info["history"]:
            (sub / tag / name).mkdir(parents=True, exist_ok=True)
            write_metrics(sub / tag / name, info["history"])
        lm.eval()
        t0 = time.perf_counter()
        row = {"k": k, "updates": info["updates"], "diverged": info["diverged"], "train_time_s": info["train_time_s"],
               "epochs": len(info["history"]), "valid_ppl": perplexity(info["best_valid_loss"]),
               "test_ppl_recurrent": perplexity(evaluate(lm, test, args.bptt)),
               "certified_lambda": certified_lambda(lm.rnn)["lambda"]}
        if k is not None:
            row["test_ppl_truncated"] = perplexity(evaluate(lm, test, args.bptt, k=k))
        elif name == "recurrent":
            row["test_ppl_truncated_at"] = {str(kk): perplexity(evaluate(lm, test, args.bptt, k=kk)) for kk in args.ks}
            row["grad_carried"] = grad_norm_carried(lm, test, max_distance=args.grad_distance,
                                                    max_segments=args.carried_segments)
        dl = lm_data_lambda(lm, test[:args.lambda_rows])
        row["data_lambda"] = {"max": dl["max"], "mean": dl["mean"]}
        if args.tensorboard:  # the epochs' rows, then the lambda estimates and test perplexities just computed
            from seq2d.train.tensorboard import write_rows

            write_rows(Path(args.tensorboard) / (tag if len(args.seeds) == 1 else f"{tag}_s{seed}") / name.replace(", ", "_").replace(" ", "_"), info["history"],
                       final={"lambda/certified": row["certified_lambda"], "lambda/data_max": dl["max"],
                              "lambda/data_mean": dl["mean"], "ppl/test_recurrent": row["test_ppl_recurrent"],
                              "ppl/test_truncated": row.get("test_ppl_truncated")})
        row["eval_time_s"] = round(time.perf_counter() - t0, 2)
        models[name], rows[name] = lm, row
        print(f"[{tag} {name}] test ppl (own mode) "
              f"{row.get('test_ppl_truncated', row['test_ppl_recurrent']):.2f}  certified lambda "
              f"{row['certified_lambda']:.3f}  data lambda {dl['max']:.3f}", flush=True)
    rec = models["recurrent"]
    for name, lm in models.items():
        rows[name]["distance"] = weight_distance(lm, rec, reference=init)
    res = {"stable": stable, "seed": seed, "models": rows,
           "corpus": {"vocab": V, "train_tokens": corpus.train.numel(), "valid_tokens": corpus.valid.numel(),
                      "test_tokens": corpus.test.numel()}}
    if args.parts:
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps({"key": key, "result": _finite(res)}, indent=1) + "\n")
    return res


#: the arguments a saved part must match to be reused
PART_KEYS = ("tokens", "eval_tokens", "epochs", "max_batches", "ks", "emb", "hidden", "layers", "dropout", "cutoffs",
             "lr", "clip", "lr_decay", "batch_size", "eval_batch_size", "bptt", "rnn_lambda", "grad_distance",
             "control_eps", "controls", "carried_segments", "lambda_rows", "data_root")


def _run(args_out):
    stable, args, out, seed = args_out
    return run_stability(stable, args, out, seed)


def run_name(tag: str, seed: int, seeds: list[int]) -> str:
    """The key of one run in results.json: the setting alone for one seed (as before), else with its seed."""
    return tag if len(seeds) == 1 else f"{tag}, seed {seed}"


# ---------------------------------------------------------------------- outputs
def _f(v, nd=1):
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def tables(res: dict) -> str:
    lines = []
    for tag, r in res["runs"].items():
        rec = r["models"]["recurrent"]
        lam = res["config"]["rnn_lambda"]
        lines += [f"**{tag}** ({'||W_hh||_2 <= ' + str(lam) + ' after every step' if r['stable'] else 'free'}); "
                  f"the recurrent model moved {_f(rec['distance']['recurrent_moved'], 2)} (recurrent weights) / "
                  f"{_f(rec['distance']['all_moved'], 2)} (all) from the common initialisation:", "",
                  "| trained as | test ppl, own mode | test ppl, run recurrently | recurrent model truncated at k | "
                  "distance to recurrent: W_rnn (rel.) | all params (rel.) | certified lambda | data lambda max / mean |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, m in r["models"].items():
            d = m["distance"]
            own = m.get("test_ppl_truncated", m["test_ppl_recurrent"])
            at = "--" if m["k"] is None else _f(rec["test_ppl_truncated_at"].get(str(m["k"])))
            dist = ("0 (itself)", "0 (itself)") if name == "recurrent" else (
                f"{_f(d['recurrent'], 3)} ({_f(100 * d['recurrent_rel'], 1)} %)",
                f"{_f(d['all'], 3)} ({_f(100 * d['all_rel'], 1)} %)")
            lines.append(f"| {name} | {_f(own)} | {_f(m['test_ppl_recurrent'])} | {at} | {dist[0]} | {dist[1]} | "
                         f"{_f(m['certified_lambda'], 3)} | {_f(m['data_lambda']['max'], 3)} / "
                         f"{_f(m['data_lambda']['mean'], 3)} |")
        lines.append("")
    return "\n".join(lines)


def plots(res: dict, out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ks = res["config"]["ks"]
    files = {}
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (tag, r) in enumerate(res["runs"].items()):
        ys = [r["models"][f"k={k}"].get("test_ppl_truncated") for k in ks]
        ax.plot(ks, [y if y is not None else math.nan for y in ys], "o-", color=f"C{i}", label=f"{tag}: trained truncated")
        at = r["models"]["recurrent"]["test_ppl_truncated_at"]
        ax.plot(ks, [at.get(str(k)) or math.nan for k in ks], "s--", color=f"C{i}", alpha=0.6,
                label=f"{tag}: recurrent model, truncated at k")
        ax.axhline(r["models"]["recurrent"]["test_ppl_recurrent"], color=f"C{i}", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("k (dotted: the recurrent model)")
    ax.set_ylabel("test perplexity")
    ax.set_title(f"WikiText-2: truncated training ({res['mode']} mode)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "truncated_ppl.png", dpi=110)
    plt.close(fig)
    files["test perplexity vs k"] = "truncated_ppl.png"

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (tag, r) in enumerate(res["runs"].items()):
        for what, ls in (("recurrent_rel", "o-"), ("all_rel", "s--")):
            ys = [r["models"][f"k={k}"]["distance"][what] for k in ks]
            ax.plot(ks, ys, ls, color=f"C{i}", label=f"{tag}: {'W_rnn' if what == 'recurrent_rel' else 'all parameters'}")
        ctl = r["models"].get("recurrent, init perturbed")
        if ctl is not None:
            ax.axhline(ctl["distance"]["recurrent_rel"], color=f"C{i}", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("k (dotted: the recurrent model from a perturbed initialisation, W_rnn)")
    ax.set_ylabel(r"$\|\theta_k - \theta_{rec}\|_F / \|\theta_{rec}\|_F$")
    ax.set_title("distance between truncated-trained and recurrent weights", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "weight_distance.png", dpi=110)
    plt.close(fig)
    files["weight distance vs k"] = "weight_distance.png"

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (tag, r) in enumerate(res["runs"].items()):
        c = r["models"]["recurrent"]["grad_carried"]["curve"]
        ax.semilogy(range(len(c)), [v if v > 0 else math.nan for v in c], color=f"C{i}", label=f"{tag} recurrent")
    ax.set_xlabel("distance i (tokens)")
    ax.set_ylabel(r"$\|\partial\, \mathrm{loss}_{t+i} / \partial x_t\|_2$")
    g0 = next(iter(res["runs"].values()))["models"]["recurrent"]["grad_carried"]
    ax.set_title(f"t = 1 test position in {res['config']['grad_distance'] + 1} per column ({g0['count'][0]:,} "
                 f"of {res['corpus']['test_tokens']:,}), hidden state carried", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "grad_carried.png", dpi=110)
    plt.close(fig)
    files["gradient norm vs distance (carried state)"] = "grad_carried.png"
    rows = _report_seeds().noise_floor(res)
    if rows and len(rows[0]["seeds"]) > 1:
        fig, axes = plt.subplots(1, len(rows), figsize=(5.5 * len(rows), 4), squeeze=False)
        for ax, o in zip(axes[0], rows):
            ks_o = sorted(int(k) for k in o["by_k"])
            ax.axhspan(min(o["controls"]), max(o["controls"]), color="gray", alpha=0.3,
                       label=f"controls - recurrent: range of {len(o['controls'])}")
            for i, k in enumerate(ks_o):
                d = o["by_k"][str(k)]["diff"]
                ax.plot([i] * len(d), d, "o", color="C0", alpha=0.7, label="truncated - recurrent, per seed" if i == 0 else None)
                ax.plot([i], [sum(d) / len(d)], "_", color="k", ms=20, label="mean over seeds" if i == 0 else None)
            ax.axhline(0, color="k", lw=0.5)
            ax.set_xticks(range(len(ks_o)), [f"k={k}" for k in ks_o])
            ax.set_ylabel("test perplexity difference")
            ax.set_title(f"{o['setting']}: {len(o['seeds'])} seeds", fontsize=10)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "noise_floor.png", dpi=110)
        plt.close(fig)
        files["truncated minus recurrent against the controls"] = "noise_floor.png"
    return files


def _decay_rate(curve: list, start: int = 5) -> float | None:
    """Least-squares slope of log(curve[i]) against i for i >= start (positive values only)."""
    pts = [(i, math.log(v)) for i, v in enumerate(curve) if i >= start and v is not None and v > 0]
    if len(pts) < 2:
        return None
    mx = sum(i for i, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((i - mx) * (y - my) for i, y in pts) / sum((i - mx) ** 2 for i, _ in pts)


def summary(res: dict) -> str:
    """The measured facts a reader wants from the tables, computed (never typed in)."""
    lines = []
    for tag, r in res["runs"].items():
        ms = r["models"]
        rec = ms["recurrent"]
        ks = [m for n, m in ms.items() if n.startswith("k=")]
        ctl = ms.get("recurrent, init perturbed")
        own = [m.get("test_ppl_truncated") for m in ks]
        diffs = [o - rec["test_ppl_recurrent"] for o in own if o is not None and rec["test_ppl_recurrent"] is not None]
        dist = [m["distance"]["recurrent_rel"] for m in ks]
        lam_max = [m["data_lambda"]["max"] for m in ms.values()]
        lam_mean = [m["data_lambda"]["mean"] for m in ms.values()]
        g = rec.get("grad_carried") or {}
        curve = g.get("curve") or []
        rate = _decay_rate(curve)
        parts = [f"**{tag}**: truncated models minus the recurrent model, test perplexity "
                 + ", ".join(f"k={m['k']}: {o - rec['test_ppl_recurrent']:+.1f}" for m, o in zip(ks, own) if o is not None)
                 + f" (recurrent {_f(rec['test_ppl_recurrent'])})" if diffs else f"**{tag}**"]
        cs = [m for m in controls(ms) if m.get("test_ppl_recurrent") is not None]
        if diffs and len(cs) > 1:
            nz = [m["test_ppl_recurrent"] - rec["test_ppl_recurrent"] for m in cs]
            beyond = [m["k"] for m, o in zip(ks, own) if o is not None and not min(nz) <= o - rec["test_ppl_recurrent"] <= max(nz)]
            parts.append(f"its {len(cs)} perturbed-initialisation controls differ from the recurrent model by "
                         f"{min(nz):+.1f} to {max(nz):+.1f}; outside that range: "
                         + (f"k in {beyond}" if beyond else "no truncated model"))
        elif diffs and ctl and ctl.get("test_ppl_recurrent") is not None:
            noise = ctl["test_ppl_recurrent"] - rec["test_ppl_recurrent"]
            beyond = [m["k"] for m, o in zip(ks, own) if o is not None and abs(o - rec["test_ppl_recurrent"]) > abs(noise)]
            parts.append(f"the perturbed-initialisation control alone differs from the recurrent model by {noise:+.1f} "
                         "(one seed, one control: the only noise estimate here); "
                         + (f"differences larger than that: k in {beyond}" if beyond else
                            "no truncated model differs by more than that"))
        if dist:
            cd = [m["distance"]["recurrent_rel"] for m in controls(ms)]
            parts.append(f"relative W_rnn distance to the recurrent model {min(dist) * 100:.1f} to {max(dist) * 100:.1f} %"
                         + (f", against {min(cd) * 100:.1f} to {max(cd) * 100:.1f} % for the {len(cd)} "
                            f"perturbed-initialisation controls" if len(cd) > 1 else
                            f", against {ctl['distance']['recurrent_rel'] * 100:.1f} % for the perturbed-initialisation "
                            f"control (ratio {min(dist) / ctl['distance']['recurrent_rel']:.2f} to "
                            f"{max(dist) / ctl['distance']['recurrent_rel']:.2f})" if ctl else ""))
        parts.append(f"data lambda of its models: max {min(lam_max):.3f} to {max(lam_max):.3f}, mean "
                     f"{min(lam_mean):.3f} to {max(lam_mean):.3f}")
        if curve:
            vd = vanishing_distance(curve)
            parts.append(f"carried-state gradient norm {curve[0]:.2e} at distance 0, {curve[-1]:.2e} at {len(curve) - 1}"
                         + (f" (fitted decay {rate:+.3f} per token in log over distances 5 to {len(curve) - 1}, a factor "
                            f"{math.exp(rate):.3f} per token)" if rate is not None else "")
                         + "; the source's stable-regime criterion (Fig. 2: the gradient vanishing with distance over the "
                         + (f"held-out set): met, below {VANISH_FRACTION:g} of its distance-0 value from distance {vd} on (our "
                            "threshold)" if vd is not None else
                            f"held-out set): not met within {len(curve) - 1} tokens (never below {VANISH_FRACTION:g} of its "
                            "distance-0 value, our threshold)"))
        lines.append("- " + "; ".join(parts) + ".")
    return "\n".join(lines)


def carried_sampling(res: dict) -> str:
    """Which test positions the carried-state gradient curve averages over, exactly, from the JSON."""
    a, c = res["config"], res["corpus"]
    g = next(iter(res["runs"].values()))["models"]["recurrent"].get("grad_carried") or {}
    if not g.get("count"):
        return ""
    D, B = a["grad_distance"] + 1, g["columns"]
    rows = c["test_tokens"] // B
    return (f"The carried-state gradient curve (`seq2d.lab.lm.grad_norm_carried`) is not taken at every test position: the "
            f"batchified test stream ({B} columns of {rows:,} positions) is cut into consecutive segments of {D} "
            f"positions and t is the first position of each segment, i.e. one position in every {D} of a column; "
            f"{g['segments']} segments x {B} columns = {g['count'][0]:,} positions t of the {c['test_tokens']:,} test "
            "tokens" + (f" (`--carried-segments {a['carried_segments']}`: the first {g['segments'] * D:,} positions of "
                        "each column only)" if a.get("carried_segments") else " (the whole stream, every segment)")
            + ". The hidden state entering each segment is carried from the column's start; the value at distance i "
            "averages over the t whose segment reaches t + i.")


def _model_minutes(res: dict) -> float:
    return sum((m.get("train_time_s") or 0) + (m.get("eval_time_s") or 0)
               for r in res["runs"].values() for m in r["models"].values()) / 60


def doc_section(res: dict, table: str, images: dict[str, str], longer: list[dict] = ()) -> str:
    a, env, c = res["config"], res["env"], res["corpus"]
    decay = a.get("lr_decay")
    rule = f", step lr / (1 + t / {decay:g})" if decay else ""
    n_seeds = len(a.get("seeds") or [a["seed"]])
    over = f", {n_seeds} seeds x {a.get('controls', 1)} controls" if n_seeds > 1 else ""
    lines = [f"## Truncated (feed-forward) LMs trained against the recurrent one{rule}{over}", "",
             "<!-- Written by experiments/stable_rnn/truncated_training.py --doc; rerun it rather than editing numbers. -->", ""]
    if res["mode"] == "quick":
        lines += ["**Quick mode**: a slice of the corpus and a few batches; the numbers only show the pipeline runs.", ""]
    prefix = a.get("section", "truncated-training").replace("-", "_")
    lines += [f"Command: `{res['command']}`", "",
              "The section again from the committed JSON (nothing retrained): `python "
              f"experiments/stable_rnn/truncated_training.py --from-json docs/results/stability/{prefix}.json --out "
              f"runs/stable_rnn_{prefix} --doc docs/results/stability.md`", "",
              f"Mode `{res['mode']}`; "
              + (f"seed {a['seed']} (one initialisation shared by every model of the page); "
                 if len(a.get("seeds") or [a["seed"]]) == 1 else
                 f"seeds {a['seeds']} (each seed one initialisation shared by the models of its run), "
                 f"{a.get('controls', 1)} perturbed-initialisation controls per run; ")
              + 
              f"{env['hardware']}; torch {env['torch']}; {env['date']}; wall time {res['total_time_s'] / 60:.1f} min"
              + (f" (this invocation; with --parts it may have read runs saved earlier), the models' own training "
                 f"and evaluation time summed: {_model_minutes(res):.1f} min" if a.get("parts") else "") + ".", "",
              "Our variant (not the paper's protocol, which we have not read; it tests Miller & Hardt's result that "
              "gradient descent on a stable model and on its truncation ends at nearby weights): one-layer tanh "
              f"RNN in Sequential2D form, embedding {a['emb']}, hidden {a['hidden']}, dropout {a['dropout']}, adaptive "
              f"softmax (cutoffs {a['cutoffs']}, ids ordered by training frequency), SGD lr {a['lr']}"
              + (f" scaled by 1 / (1 + t / {decay:g}) at step t (the alpha/t rule asymptotically, alpha = "
                 f"{a['lr'] * decay:g})" if decay else "") + " divided by 4 "
              f"when validation stops improving, gradient clip {a['clip']}, batch {a['batch_size']}, BPTT {a['bptt']}, "
              f"{a['epochs']} epoch(s) over {c['train_tokens']:,} training tokens (vocabulary {c['vocab']:,}); test "
              f"{c['test_tokens']:,} tokens. Every model starts from the same weights and sees the same batches in the "
              "same order; a truncated model's batch positions each see their last k tokens (the k - 1 before a "
              "segment come from the stream), the recurrent model carries its hidden state. Stable: "
              f"`SpectralClip(lam={a['rnn_lambda']})` after every step, for every model of that run.", "",
              table,
              "Measured (computed from the JSON by the script):", "", summary(res), "",
              _report_seeds().noise_floor_text(res, longer), "", carried_sampling(res), "",
              "Columns: \"own mode\" is how the model was trained (truncated at its k, or recurrent); \"run "
              "recurrently\" runs the same weights with the hidden state carried through the test stream; \"recurrent "
              "model truncated at k\" is the recurrent model's weights evaluated as a k-truncation. Distances are "
              "Frobenius norms of the parameter difference to the recurrent model of the same run (`seq2d.lab.lm.weight_distance`), "
              "relative to the recurrent model's norm; \"recurrent, init perturbed\" is the recurrent model trained "
              f"from the common initialisation plus Gaussian noise of relative size {a['control_eps']:g} per tensor: "
              "the distance that SGD's own sensitivity makes of a tiny difference, the floor a truncation "
              "distance is read against. Data lambda: `seq2d.stability.data_lambda` over the first "
              f"{a['lambda_rows']} rows of the batchified test stream ({a['eval_batch_size']} columns).", ""]
    for title, rel in images.items():
        lines += [f"![{title}]({rel})", ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a corpus slice and a few batches (CI)")
    ap.add_argument("--out", default=None, help="output folder (default runs/stable_rnn/truncated_training[_quick])")
    ap.add_argument("--data-root", default=None, help="folder holding wikitext-2/ (default $SEQ2D_DATA)")
    ap.add_argument("--runs", default="unstable,stable", help="which of unstable, stable")
    ap.add_argument("--ks", default=None, help="truncation lengths (full: 2,5,10,20; quick: 2,5)")
    ap.add_argument("--epochs", type=int, default=None, help="full: 3; quick: 1")
    ap.add_argument("--tokens", type=int, default=None, help="training tokens to keep (full: all)")
    ap.add_argument("--eval-tokens", type=int, default=None, help="validation/test tokens to keep (full: all)")
    ap.add_argument("--max-batches", type=int, default=None, help="batches per epoch (full: all; quick: 12)")
    ap.add_argument("--emb", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--cutoffs", default="2000,10000", help="adaptive softmax cutoffs ('' for a full softmax)")
    ap.add_argument("--lr", type=float, default=5.0,
                    help="initial SGD lr (5: the best of 1, 2, 5 for both runs in a 600-batch pilot; 20 diverges unstable)")
    ap.add_argument("--clip", type=float, default=0.25)
    ap.add_argument("--lr-decay", type=float, default=None, metavar="T",
                    help="step t uses lr / (1 + t / T): the alpha/t rule asymptotically (default: constant lr)")
    ap.add_argument("--section", default="truncated-training",
                    help="name of the page section --doc writes (a second run can have its own)")
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--eval-batch-size", type=int, default=10)
    ap.add_argument("--bptt", type=int, default=35)
    ap.add_argument("--rnn-lambda", type=float, default=0.99, help="stable run: ||W_hh||_2 bound")
    ap.add_argument("--grad-distance", type=int, default=50)
    ap.add_argument("--control-eps", type=float, default=1e-4,
                    help="also train the recurrent model from the initialisation perturbed by this relative amount "
                         "per tensor (the distance SGD alone makes of it; 0: no control)")
    ap.add_argument("--carried-segments", type=int, default=None, help="full: the whole test stream")
    ap.add_argument("--lambda-rows", type=int, default=None, help="test rows for data lambda (full 200)")
    ap.add_argument("--seed", type=int, default=1111)
    ap.add_argument("--seeds", default=None,
                    help="comma-separated initialisation seeds, each a full run of every model (default: --seed); "
                         "the page then reports differences against the spread of the controls over all seeds")
    ap.add_argument("--controls", type=int, default=1,
                    help="perturbed-initialisation controls per run (control i perturbs with generator seed + i)")
    ap.add_argument("--parts", action="store_true",
                    help="save each (setting, seed) to OUT/parts/ and reuse a saved one with the same configuration "
                         "(resume a long run, or run it in pieces)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per process (default: 1 with --jobs 2)")
    ap.add_argument("--jobs", type=int, default=1, choices=(1, 2), help="run the two stability settings in parallel")
    ap.add_argument("--doc", default=None, help="write the section of this results page (images next to it)")
    ap.add_argument("--tensorboard", default=None, metavar="DIR",
                    help="also write TensorBoard events, each model to DIR/<stable|unstable>/<model>: its epochs, then "
                         'its lambda estimates and test perplexities (pip install -e ".[tensorboard]")')
    ap.add_argument("--from-json", default=None, help="write tables, plots and --doc from this results.json (no training)")
    return ap


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        out = Path(args.out or Path(args.from_json).parent)
        out.mkdir(parents=True, exist_ok=True)
        return write_outputs(res, out, args.doc)
    mode = "quick" if args.quick else "full"
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.ks = sorted({int(k) for k in str(args.ks).split(",") if k.strip()})
    args.cutoffs = [int(c) for c in str(args.cutoffs).split(",") if c.strip()]
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not runs or any(r not in ("stable", "unstable") for r in runs) or not args.ks or min(args.ks) < 1:
        raise SystemExit("--runs must list stable/unstable and --ks positive ints")
    args.seeds = [int(v) for v in str(args.seeds).split(",") if v.strip()] if args.seeds else [args.seed]
    if len(set(args.seeds)) != len(args.seeds) or args.controls < 1:
        raise SystemExit(f"--seeds must be distinct ints (got {args.seeds}) and --controls >= 1 (got {args.controls})")
    if args.jobs == 2 and args.threads is None:
        args.threads = 1
    if args.tensorboard:
        from seq2d.train.tensorboard import TensorBoardMissing, require_tensorboard

        try:
            require_tensorboard("--tensorboard")  # one clear error before any model is trained
        except TensorBoardMissing as e:
            raise SystemExit(f"truncated_training.py: error: {e}") from None
    out = Path(args.out or f"runs/stable_rnn/truncated_training{'_quick' if args.quick else ''}")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    jobs = [(r == "stable", args, out, s) for s in args.seeds for r in runs]
    if args.jobs == 2 and len(jobs) >= 2:
        with mp.get_context("spawn").Pool(2) as pool:
            done = pool.map(_run, jobs, chunksize=1)
    else:
        done = [_run(j) for j in jobs]
    names = [run_name(r, s, args.seeds) for s in args.seeds for r in runs]
    res = {"mode": mode, "command": "python experiments/stable_rnn/truncated_training.py " + " ".join(shlex.quote(a) for a in argv),
           "config": {k: v for k, v in vars(args).items()}, "corpus": done[0]["corpus"],
           "env": {"hardware": f"{cpu_name()}, {args.jobs} process(es) x {args.threads or torch.get_num_threads()} thread(s)",
                   "torch": torch.__version__, "python": platform.python_version(),
                   "date": datetime.date.today().isoformat()},
           "runs": {r: d for r, d in zip(names, done)}, "total_time_s": round(time.perf_counter() - t0, 1)}
    (out / "results.json").write_text(json.dumps(_finite(res), indent=2) + "\n")
    return write_outputs(res, out, args.doc)


def write_outputs(res: dict, out: Path, doc: str | None) -> dict:
    """results.md, the plots and (with ``doc``) the page section, all from ``res``."""
    res = json.loads(json.dumps(_finite(res)))  # the same numbers as results.json holds (None for inf/nan)
    table = tables(res)
    files = plots(res, out)
    (out / "results.md").write_text(f"# Truncated training ({res['mode']} mode)\n\n`{res['command']}`\n\n{table}\n")
    print(table)
    print(f"wrote results.md and plots in {out} (run time {res['total_time_s']:.0f}s)")
    if doc:
        doc = Path(doc)
        img = doc.parent / "stability"
        img.mkdir(parents=True, exist_ok=True)
        images = {}
        for title, f in files.items():
            prefix = res["config"].get("section", "truncated-training").replace("-", "_")
            shutil.copyfile(out / f, img / f"{prefix}_{f}")
            images[title] = f"stability/{prefix}_{f}"
        (img / f"{res['config'].get('section', 'truncated-training').replace('-', '_')}.json").write_text(
            json.dumps(res, indent=2) + "\n")
        prefix = res["config"].get("section", "truncated-training").replace("-", "_")
        n_seeds = len(res["config"].get("seeds") or [res["config"]["seed"]])
        # several seeds on a slice of the corpus: read against the page's longer runs (the full training stream)
        longer = [json.loads(f.read_text()) for f in (img / "truncated_training.json", img / "truncated_training_decay.json")
                  if n_seeds > 1 and f.is_file() and f.stem != prefix]
        _report().write_section(doc, res["config"].get("section", "truncated-training"),
                                doc_section(res, table, images, longer))
        print(f"wrote {doc}")
    return res


if __name__ == "__main__":
    main()
