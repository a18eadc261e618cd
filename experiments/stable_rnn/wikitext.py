"""WikiText-2 word-level language models, stable vs unstable (Miller & Hardt, arXiv 1805.10369, Sec. 4).

Four models, each trained the classic ``word_language_model`` way (SGD lr 20 divided by 4 when
the validation loss stops improving, gradient-norm clip 0.25, batch 20, BPTT 35 with the hidden
state carried and detached, the best-validation weights kept):

    tanh-unstable   a 2-layer tanh RNN in Sequential2D form (seq2d.rnn), free
    tanh-stable     the same, every W_hh projected onto ||W_hh||_2 <= --rnn-lambda after every
                    step (seq2d.stability.SpectralClip on the recurrent core)
    lstm-unstable   nn.LSTM, free
    lstm-stable     nn.LSTM projected after every step; --lstm-projection picks how:
                    ours (default; our variant, seq2d.lab.lstm.LSTMProjection: the published gate
                    constants as row-l1 bounds, forget bias <= 0, embeddings clipped to [-1, 1])
                    or author (seq2d.lab.lstm.AuthorLSTMNormalization: the author's --stabilize as
                    described in the audit of issue 12, not checked against the code: every
                    column of each gate block of weight_hh_l0 rescaled to the constants, the
                    forget block of weight_ih_l0 to 0.25, embeddings clipped to [-1, 1])

Then: test perplexity of each, of its k-truncated feed-forward version for k in --ks, the
certified contraction constant of its weights, and ``||d loss_{t+i} / d x_t||`` for
i = 0 .. --grad-distance (the paper's Fig. 2).

    # quick mode: a slice of the corpus, one epoch, small models (CPU, a few minutes); the run on the page
    python experiments/stable_rnn/wikitext.py --quick --threads 1 --out runs/stable_rnn_wikitext_quick \
        --doc docs/results/stability.md
    # the page section again from the committed JSON (nothing retrained)
    python experiments/stable_rnn/wikitext.py --from-json docs/results/stability/wikitext_quick.json \
        --out runs/stable_rnn_wikitext_quick --doc docs/results/stability.md
    # full mode (GPU): the defaults of PyTorch's word_language_model example (emb 200, hidden 200,
    # 2 layers, dropout 0.2, 40 epochs): our variant, not verified as the author's settings
    python experiments/stable_rnn/wikitext.py --out runs/stable_rnn/wikitext_full --doc docs/results/stability.md

``--adaptive-softmax`` replaces the full softmax over the vocabulary by torch's adaptive softmax
(``--cutoffs``, ``--div-value``; word ids then by frequency). Long runs that must survive a stop (one
folder per condition and seed, checkpoints, resume, a learning-rate search, results collected into
the repository) are ``experiments/stable_rnn/wikitext_runs.py``.

Data: ``--data-root`` (else ``$SEQ2D_DATA``) holding ``wikitext-2/{train,valid,test}.txt``.
Outputs in ``--out``: ``results.json``, ``results.md`` (the tables), ``grad_norm_vs_distance.png``,
``truncation.png``, per model ``<model>/metrics.{jsonl,csv}`` (and ``checkpoint.pt`` with
``--save-checkpoints``, the default in full mode). ``--doc`` writes the WikiText section of a
results page between ``<!-- wikitext:begin -->`` and ``<!-- wikitext:end -->`` (the rest of the
page is left alone; the file is created when absent) and copies ``results.json`` next to the page
(``stability/wikitext_<mode>.json``).

Reproducibility: before each model every random generator the run uses (torch's, Python's
``random``, numpy's) is seeded with ``--seed`` (``seq2d.train.datasets.seed_everything``), and the
torch thread count is set explicitly (``--threads``; the quick mode's default is 1) and recorded
with the CPU's name and the instruction set torch's kernels use. On one machine with one thread
count two runs give bitwise the same numbers (tested); across CPUs (instruction sets) and thread
counts the float32 kernels add in different orders, so the numbers differ, and a model that is
not stable amplifies those differences over training.

A model counts as **diverged** by ``seq2d.lab.lm.divergence`` (training stopped on a non-finite
loss, or its test loss is non-finite, or its test perplexity exceeds the vocabulary size): it is
flagged in ``results.json`` (``diverged``: the reason), in ``results.md`` and on the page, and
left out of the stable-vs-unstable comparison.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import shlex
import shutil
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from seq2d.lab.wikitext import Corpus, batchify  # noqa: E402
from seq2d.envinfo import cpu_name  # noqa: E402
from seq2d.errors import did_you_mean  # noqa: E402
from seq2d.results_page import json_safe as _finite  # noqa: E402
from seq2d.results_page import write_section  # noqa: E402
from seq2d.lab.lm import (CELLS, VANISH_FRACTION, RNNLM, divergence, evaluate, grad_norm_carried, grad_norm_vs_distance,  # noqa: E402
                          lm_data_lambda, perplexity, train_lm, vanishing_distance)
from seq2d.lab.lstm import LSTM_STABILIZERS, lstm_contraction_bound, make_lstm_stabilizer  # noqa: E402
from seq2d.train.checkpoint import save_checkpoint  # noqa: E402
from seq2d.train.datasets import seed_everything  # noqa: E402
from seq2d.train.trainer import write_metrics  # noqa: E402

# The experiment's conditions, named as its results are: CELL-unstable and CELL-stable for each
# recurrent cell seq2d.lab.lm.RNNLM offers (its `cell` argument, seq2d.lab.lm.CELLS); a stable one is projected
# after every optimizer step (make_stabilizer). No model name is defined here: the model is always
# seq2d.lab.lm.RNNLM(cell=CELL), a torch module around a Sequential2D RNN or an nn.LSTM, built by
# build_model below.
CONDITIONS = tuple(f"{cell}-{kind}" for cell in CELLS for kind in ("unstable", "stable"))
#: Test perplexities on WikiText-2, (unstable, stable), as the blog post's table gives them
#: (seeds/001_67665dca4b881617.txt: "TanhRNN 146.7 143.5", "LSTM 92.3 95.1").
PAPER = {"tanh": (146.7, 143.5), "lstm": (92.3, 95.1)}
PAPER_SOURCE = "the blog post's table (seeds 001)"


# The full mode: the defaults of PyTorch's word_language_model example. NOT verified as Miller &
# Hardt's settings: their blog post says a hyperparameter search found the best unstable RNN and
# LSTM, then both were retrained stable, and 92.3 ppl implies a much larger LSTM than 200 units
# (issue 12's audit) ...
FULL = dict(emb=200, hidden=200, layers=2, dropout=0.2, epochs=40, tokens=None, eval_tokens=None,
            ks="2,5,10,20", grad_seqs=32, lambda_tokens=500)
# ... and the quick mode: a slice of the corpus, one epoch, small models (CPU).
QUICK = dict(emb=64, hidden=64, layers=2, dropout=0.2, epochs=1, tokens=20_000, eval_tokens=5_000,
             ks="2,5,10", grad_seqs=8, lambda_tokens=50)
BEGIN, END = "<!-- wikitext:begin -->", "<!-- wikitext:end -->"


# ---------------------------------------------------------------------- models
def condition(name: str) -> tuple[str, bool]:
    """``(cell, stable)`` of a condition name; an unknown name exits naming the valid ones."""
    if name not in CONDITIONS:
        raise SystemExit(f"Unknown model {name!r}{did_you_mean(name, CONDITIONS)}. Select from {', '.join(CONDITIONS)}")
    cell, _, kind = name.rpartition("-")
    return cell, kind == "stable"


def adaptive_cutoffs(args, vocab: int) -> list[int] | None:
    """The adaptive softmax's cutoffs (``--adaptive-softmax``; those below the vocabulary size,
    which a corpus slice may make small), or None: a full softmax."""
    if not getattr(args, "adaptive_softmax", False):
        return None
    cut = [int(c) for c in str(args.cutoffs).split(",") if c.strip()]
    return [c for c in cut if c < vocab] or None


def build_model(name: str, vocab: int, args) -> tuple[RNNLM, bool]:
    """``(model, stable)`` for the condition ``name``: ``RNNLM(cell=CELL)`` at the run's sizes,
    with an adaptive softmax under ``--adaptive-softmax`` (drawn from torch's generator as it
    stands: the caller seeds it)."""
    cell, stable = condition(name)
    cut = adaptive_cutoffs(args, vocab)
    kw = {} if cut is None else {"adaptive_cutoffs": cut, "div_value": args.div_value}
    return RNNLM(vocab, args.emb, args.hidden, args.layers, args.dropout, cell=cell, **kw), stable


# ---------------------------------------------------------------------- stabilizers
def make_stabilizer(model: RNNLM, args):
    """``(project, description)``: ``project()`` is called after every optimizer step."""
    if model.cell == "lstm":
        method = getattr(args, "lstm_projection", "ours")
        kw = {"layers": tuple(range(model.layers)) if getattr(args, "author_all_layers", False) else (0,)} if method == "author" else {}
        proj = make_lstm_stabilizer(model.rnn, method, embedding=model.encoder, embedding_clip=args.embedding_clip, **kw)
        return (lambda: proj.project(counts=False)), proj.describe()  # no host read per step
    from seq2d.stability import SpectralClip  # lazily: the tanh models' projection

    # Every layer's hidden slot is its own recurrent core (its W_hh; W_ih and the dropout
    # block sit between cores), so this bounds ||W_hh^l||_2 <= lam for every layer l.
    clip = SpectralClip(model.rnn, args.rnn_lambda)
    return clip.project, f"seq2d.stability.SpectralClip(lam={args.rnn_lambda}): ||W_hh||_2 <= {args.rnn_lambda} in every layer"


def certified_lambda(model: RNNLM) -> float:
    """tanh: ``seq2d.stability.certified_lambda`` (max over layers of ``||W_hh^l||_2``, tanh being
    1-Lipschitz); LSTM: ``seq2d.lab.lstm.lstm_contraction_bound`` with the embeddings' actual bound."""
    if model.cell == "tanh":
        from seq2d.stability import certified_lambda as rnn_lambda

        return rnn_lambda(model.rnn)["lambda"]
    return lstm_contraction_bound(model.rnn, float(model.encoder.weight.detach().abs().max()))


# ---------------------------------------------------------------------- training
def train(name: str, model: RNNLM, data: dict, args, device, out: Path, stabilize=None) -> dict:
    """``seq2d.lab.lm.train_lm`` (the classic loop, recurrent); writes ``<name>/metrics.*`` and the
    checkpoint; the best-validation weights end in ``model``."""
    info = train_lm(model, data["train"], data["valid"], epochs=args.epochs, lr=args.lr, clip=args.clip,
                    bptt=args.bptt, stabilize=stabilize, max_batches=args.max_batches, name=name,
                    log=lambda m: print(m, flush=True))
    history = info["history"]
    (out / name).mkdir(parents=True, exist_ok=True)
    if history:
        write_metrics(out / name, history)
    if args.save_checkpoints:
        save_checkpoint(out / name / "checkpoint.pt", model=model, optimizer=None, epoch=len(history), update=info["updates"],
                        config={k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool, type(None)))},
                        metrics={"history": history, "best": min(history, key=lambda r: r["valid_loss"]) if history else {},
                                 "last": history[-1] if history else {}})
    return info


# ---------------------------------------------------------------------- outputs
def _fmt(v, nd=1):
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"


def _data_lambda_cell(d) -> str:
    """spectral max / mean (and, for the LSTM, the l-infinity max the certificate bounds)."""
    if not d:
        return "--"
    cell = f"{_fmt(d['max'], 3)} / {_fmt(d['mean'], 3)}"
    return cell + (f" (l-inf max {_fmt(d['max_inf'], 3)})" if "max_inf" in d else "")


def _ppl_cell(r) -> str:
    """A model's test perplexity, flagged when the model diverged (``seq2d.lab.lm.divergence``)."""
    if not r:
        return "--"
    return f"{_fmt(r['test_ppl'])} (diverged)" if r.get("diverged") else _fmt(r["test_ppl"])


def flag_diverged(results: dict) -> dict:
    """Every model's ``diverged`` (``seq2d.lab.lm.divergence``: a reason, or None), computed from its
    test loss and the vocabulary size where a results file predates the flag (train_lm's own
    reason, a non-finite training loss, is kept)."""
    V = results["corpus"]["vocab"]
    for r in results["models"].values():
        if not r.get("diverged"):  # a reason already there (this run's flag, or train_lm's) is kept
            r["diverged"] = divergence(r.get("test_loss"), V)
    return results


def comparisons(results: dict) -> list[str]:
    """Stable minus unstable test perplexity per cell, only between models that did not diverge."""
    out = []
    for cell, label in (("tanh", "tanh RNN"), ("lstm", "LSTM")):
        u, s = results["models"].get(f"{cell}-unstable"), results["models"].get(f"{cell}-stable")
        if not u or not s:
            continue
        bad = [n for n, r in ((f"{cell}-unstable", u), (f"{cell}-stable", s)) if r.get("diverged")]
        paper = PAPER[cell][1] - PAPER[cell][0]
        if bad:
            out.append(f"{label}: not compared, {' and '.join(bad)} diverged "
                       f"({'; '.join(results['models'][n]['diverged'] for n in bad)}); {PAPER_SOURCE}: stable minus "
                       f"unstable {paper:+.1f}")
        else:
            out.append(f"{label}: stable minus unstable {s['test_ppl'] - u['test_ppl']:+.1f} perplexity "
                       f"({PAPER_SOURCE}: {paper:+.1f})")
    return out


def fig2_lines(results: dict) -> list[str]:
    """Each model against the source's stable-regime criterion (Fig. 2 in the slides: the gradient with
    respect to the inputs vanishing with distance, over the held-out set), from its carried-state curve,
    with our Jacobian measure (data lambda) beside it."""
    out = []
    for name, r in results["models"].items():
        c = (results.get("grad_curve_carried", {}).get(name) or {}).get("curve") or []
        if not c:
            continue
        vd = vanishing_distance(c)
        dl = r.get("data_lambda") or {}
        verdict = (f"met: below {VANISH_FRACTION:g} of its distance-0 value from distance {vd} on" if vd is not None else
                   f"not met within {len(c) - 1} tokens (never below {VANISH_FRACTION:g} of its distance-0 value)")
        out.append(f"{name}{' (diverged)' if r.get('diverged') else ''}: gradient norm {c[0]:.2e} at distance 0, "
                   f"{c[-1]:.2e} at {len(c) - 1}; Fig. 2 criterion {verdict}; data lambda (ours) max "
                   f"{_fmt(dl.get('max'), 3)}, mean {_fmt(dl.get('mean'), 3)}")
    return out


def tables(results: dict) -> str:
    models, ks = results["models"], results["ks"]
    lines = [f"Test perplexity (lower is better; \"paper\": {PAPER_SOURCE}, at the authors' settings):", "",
             "| model | unstable | stable | paper unstable | paper stable |", "|---|---:|---:|---:|---:|"]
    for cell, label in (("tanh", "tanh RNN (Sequential2D)"), ("lstm", "LSTM (nn.LSTM)")):
        u, s = models.get(f"{cell}-unstable"), models.get(f"{cell}-stable")
        lines.append(f"| {label} | {_ppl_cell(u)} | {_ppl_cell(s)} | {PAPER[cell][0]} | {PAPER[cell][1]} |")
    lines += ["", "Truncated feed-forward versions (test perplexity; each prediction sees only the last k tokens) "
              "and the certified contraction constant of the trained weights:", "",
              "| model | " + " | ".join(f"k = {k}" for k in ks)
              + " | full | certified lambda | data lambda max / mean | epochs | train time (s) |",
              "|---|" + "---:|" * (len(ks) + 5)]
    for name, r in models.items():
        lam = r["certified_lambda"]
        lines.append(f"| {name}{' (diverged)' if r.get('diverged') else ''} | "
                     + " | ".join(_fmt(r["truncated"].get(str(k))) for k in ks)
                     + f" | {_fmt(r['test_ppl'])} | {_fmt(lam, 4)}{' (stable)' if lam is not None and lam < 1 else ''} | "
                     f"{_data_lambda_cell(r.get('data_lambda'))} | {len(r['history'])} | {r['train_time_s']:.0f} |")
    div = {n: r["diverged"] for n, r in models.items() if r.get("diverged")}
    lines += ["", "Diverged (`seq2d.lab.lm.divergence`: training stopped on a non-finite loss, or the test loss is non-finite, "
              "or the test perplexity exceeds the vocabulary size, the uniform guess's): "
              + ("; ".join(f"{n}: {why}" for n, why in div.items()) if div else "none") + ".",
              "", "Comparison (diverged models left out):", ""] + [f"- {c}" for c in comparisons(results)]
    fig2 = fig2_lines(results)
    if fig2:
        lines += ["", "Stable regime by the source's criterion (Fig. 2, the slides: the gradient with respect to the "
                  f"inputs vanishing with distance over the held-out set; the threshold {VANISH_FRACTION:g} is ours), "
                  "with our per-step Jacobian measure beside it:", ""] + [f"- {c}" for c in fig2]
    return "\n".join(lines)


def plot_grad(results: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    colors = {n: f"C{i}" for i, n in enumerate(results["grad_curve"])}
    for name, r in results.get("grad_curve_carried", {}).items():
        curve = r["curve"]
        ax.semilogy(range(len(curve)), [c if c > 0 else float("nan") for c in curve], color=colors.get(name),
                    lw=2, label=f"{name} (whole test set, state carried)")
    for name, curve in results["grad_curve"].items():
        # exact zeros (float32 underflow through saturated units) cannot be drawn on a log scale
        ax.semilogy(range(len(curve)), [c if c > 0 else float("nan") for c in curve], color=colors[name], lw=1,
                    ls=":", label=f"{name} ({results['config']['grad_seqs']} positions, zero state 10 before)")
    ax.set_xlabel("distance i (tokens)")
    ax.set_ylabel(r"$\|\partial\, \mathrm{loss}_{t+i} / \partial x_t\|_2$")
    ax.set_title(f"WikiText-2: gradient norm vs distance ({results['mode']} mode)\n"
                 "(gaps: gradients exactly 0 in float32)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_truncation(results: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ks = results["ks"]
    for i, (name, r) in enumerate(results["models"].items()):
        ys = [r["truncated"].get(str(k)) for k in ks]
        c = f"C{i}"
        ax.plot(ks, [y if y is not None else float("nan") for y in ys], marker="o", color=c,
                ls=":" if r.get("diverged") else "-", label=name + (" (diverged)" if r.get("diverged") else ""))
        if r["test_ppl"] is not None:
            ax.axhline(r["test_ppl"], color=c, ls=":", lw=1)
    ax.set_xscale("log")
    finite = [v for r in results["models"].values() for v in [*r["truncated"].values(), r["test_ppl"]]
              if v is not None and math.isfinite(v) and v > 0]
    if finite:  # (a diverged run may leave no finite perplexity to draw)
        ax.set_yscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("truncation length k (dotted: the full recurrent model)")
    ax.set_ylabel("test perplexity")
    ax.set_title(f"WikiText-2: truncated feed-forward models ({results['mode']} mode)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def doc_section(results: dict, table: str, images: dict[str, str]) -> str:
    env, c = results["env"], results["corpus"]
    quick = results["mode"] == "quick"
    a = results["config"]
    lines = [BEGIN, "## WikiText-2 word-level language models", "",
             "<!-- Written by experiments/stable_rnn/wikitext.py --doc; rerun it rather than editing numbers. -->", ""]
    if quick:
        lines += [f"**Quick mode, CPU.** These numbers come from the quick mode: the first {c['train_tokens']:,} training "
                  f"tokens (vocabulary {c['vocab']:,} words built from that slice; other words of the first "
                  f"{c['valid_tokens']:,} validation and {c['test_tokens']:,} test tokens count as `<unk>`), "
                  f"{a['epochs']} epoch(s), embedding {a['emb']}, hidden {a['hidden']}. They show the pipeline "
                  "runs end to end and nothing more: they are not comparable with the paper's numbers. The full mode "
                  "(the word_language_model example's defaults on the whole corpus; our variant, not verified as the "
                  "author's settings) needs a GPU, which this run did not have.", ""]
    seeded = (f"every model starts from `seed_everything({a['seed']})` (torch, Python's `random`, numpy)"
              if env.get("seeded") == "seed_everything" else f"every model starts from `torch.manual_seed({a['seed']})`")
    lines += [f"Command: `{results['command']}`", "",
              f"The section again from the committed JSON (nothing retrained): `python experiments/stable_rnn/wikitext.py "
              f"--from-json docs/results/stability/wikitext_{results['mode']}.json --out runs/stable_rnn_wikitext_"
              f"{results['mode']} --doc docs/results/stability.md`", "",
              f"Mode `{results['mode']}`; seed {a['seed']} ({seeded}); "
              f"device {env['device']} ({env['hardware']}"
              + (f", torch CPU capability {env['cpu_capability']}" if env.get("cpu_capability") else "")
              + f"); torch {env['torch']}; {env['date']}.", "",
              "What these numbers depend on: on one machine with one thread count the run is deterministic (two runs "
              "give bitwise the same numbers; `tests/test_stable_rnn_experiments.py`). On another CPU (another "
              "instruction set, hence other float32 kernels) or with another thread count the sums are taken in "
              "another order, the rounding differs, and so do the numbers: slightly for a model that contracts, "
              "and without limit for one that does not, which amplifies every difference over training (issue 20: "
              "a rerun of this mode with `--threads 1` on an AVX2 machine reproduced the LSTM rows of an earlier "
              "version of this page, but not the tanh rows). Compare numbers only between runs on the same "
              "CPU and thread count.", "",
              f"Settings: embedding {a['emb']}, hidden {a['hidden']}, {a['layers']} layers, dropout {a['dropout']}, "
              f"SGD lr {a['lr']} divided by 4 when validation stops improving, gradient clip {a['clip']}, batch "
              f"{a['batch_size']}, BPTT {a['bptt']}, {a['epochs']} epoch(s); corpus {c['train_tokens']:,} / "
              f"{c['valid_tokens']:,} / {c['test_tokens']:,} tokens, vocabulary {c['vocab']:,}.", "",
              "Stable models: " + "; ".join(f"{k}: {_current_names(v)}" for k, v in results["stabilizers"].items()) + ".", "",
              table, "",
              "Reading the tables: \"paper\" columns are the test perplexities of the blog post's table (seeds 001: "
              "the best unstable tanh RNN and LSTM of a hyperparameter search, then retrained with the stability "
              "conditions enforced; their sizes and epochs are not given there); \"full\" is the recurrent model itself (hidden state carried through the test "
              "stream), \"k = ...\" its k-truncated feed-forward version (each prediction sees only the last k "
              "tokens; `RNNLM.truncated`). \"certified lambda\" is a bound on the contraction constant of the "
              "trained weights: for the tanh RNN the largest `||W_hh||_2` over layers (tanh is 1-Lipschitz; a per-layer "
              "rate: the stacked map contracts only in a weighted norm, see [docs/stability.md](../stability.md)), for "
              "the LSTM the l-infinity bound of `seq2d.lab.lstm.lstm_contraction_bound` (derivation in "
              "[docs/stability.md](../stability.md), \"LSTM stability\"); below 1 the model is provably stable, "
              "above 1 nothing is certified (the model may still behave stably on data). The gradient curve is "
              "`||d loss_{t+i} / d x_t||_2` (x_t the embedding input), twice: thick lines average it over a "
              "uniform subsample of the test stream, one position in every "
              f"{a['grad_distance'] + 1} of each column (`seq2d.lab.lm.grad_norm_carried`: the batchified stream cut into "
              f"segments of {a['grad_distance'] + 1} positions, t the first position of every segment of every column, the hidden "
              "state carried from the column's start" + (f", the first {a['carried_segments']} segments only" if
              a.get("carried_segments") else "") + "); dotted lines are the older estimate over "
              f"{a['grad_seqs']} test positions, each from a zero state 10 tokens before t. \"data lambda\" is "
              "`seq2d.stability.data_lambda` of the trained weights along the model's own trajectory over the first "
              f"{a['lambda_tokens']} rows of the batchified test stream ({a['eval_batch_size']} columns, zero initial "
              "state, eval mode): the largest and the mean spectral norm of the per-layer state Jacobian over steps, "
              "columns and layers (tanh: power iteration, a lower bound per step; LSTM: the exact Jacobian of "
              "`(h, c)`, with its l-infinity norm, the norm the LSTM certificate bounds). The source's criterion "
              "for a model in the stable regime is its Fig. 2 (the slides, seeds 002): the gradient with respect to "
              "the inputs vanishing with distance, averaged over the held-out set, i.e. the thick curves; data "
              "lambda is our own, stricter measure (a per-step Jacobian norm below 1), reported beside it.", ""]
    for title, rel in images.items():
        lines += [f"![{title}]({rel})", ""]
    lines += [END]
    return "\n".join(lines)


#: Library paths that moved since a run recorded them (old prefix -> new): a results JSON keeps
#: the description as the run wrote it; the page names where the class lives now (the LSTM
#: projections: seq2d.lstm, then seq2d.stability, now seq2d.lab.lstm; tests/test_lm.py checks that
#: every path the page names imports).
MOVED = {"seq2d.lstm.": "seq2d.lab.lstm.", "seq2d.stability.LSTMProjection": "seq2d.lab.lstm.LSTMProjection",
         "seq2d.stability.AuthorLSTMNormalization": "seq2d.lab.lstm.AuthorLSTMNormalization"}


def _current_names(text: str) -> str:
    for old, new in MOVED.items():
        text = text.replace(old, new)
    return text


def write_doc(doc: Path, section: str) -> None:
    """Replace the text between the markers (or append it); create the page when absent
    (:func:`seq2d.results_page.write_section`)."""
    body = section.replace(BEGIN, "").replace(END, "")
    write_section(doc, "wikitext", body, title="# Stable recurrent models: results")
    print(f"wrote {doc}")


# ---------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a slice of the corpus, one epoch, small models (CPU)")
    ap.add_argument("--out", default=None, help="output folder (default runs/stable_rnn/wikitext[_quick])")
    ap.add_argument("--data-root", default=None, help="folder holding wikitext-2/ (default: $SEQ2D_DATA)")
    ap.add_argument("--models", default=",".join(CONDITIONS), help=f"comma-separated subset of {', '.join(CONDITIONS)}")
    ap.add_argument("--tokens", type=int, default=None, help="training tokens to keep (quick: 20000; full: all)")
    ap.add_argument("--eval-tokens", type=int, default=None, help="validation/test tokens to keep (quick: 5000)")
    ap.add_argument("--epochs", type=int, default=None, help="quick: 1; full: 40")
    ap.add_argument("--emb", type=int, default=None, help="embedding size (quick: 64; full: 200)")
    ap.add_argument("--hidden", type=int, default=None, help="hidden size (quick: 64; full: 200)")
    ap.add_argument("--layers", type=int, default=None, help="recurrent layers (2)")
    ap.add_argument("--dropout", type=float, default=None, help="dropout (0.2)")
    ap.add_argument("--adaptive-softmax", action="store_true",
                    help="decoder: torch's adaptive softmax (word ids by frequency) instead of a full softmax over the "
                         "vocabulary (far cheaper per batch for a 33,278-word vocabulary)")
    ap.add_argument("--cutoffs", default="2000,10000", help="the adaptive softmax's cluster cutoffs (default 2000,10000)")
    ap.add_argument("--div-value", type=float, default=4.0, help="the adaptive softmax's size ratio between clusters (4)")
    ap.add_argument("--lr", type=float, default=20.0, help="initial SGD learning rate (divided by 4 on plateau)")
    ap.add_argument("--clip", type=float, default=0.25, help="gradient-norm clip")
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--eval-batch-size", type=int, default=10)
    ap.add_argument("--bptt", type=int, default=35)
    ap.add_argument("--ks", default=None, help="truncation lengths (quick: 2,5,10; full: 2,5,10,20)")
    ap.add_argument("--rnn-lambda", type=float, default=0.99,
                    help="tanh-stable: bound on ||W_hh||_2 of every layer, the contraction rate (default 0.99)")
    ap.add_argument("--embedding-clip", type=float, default=1.0, help="lstm-stable: embeddings clipped to [-c, c]")
    ap.add_argument("--lstm-projection", choices=LSTM_STABILIZERS, default="ours",
                    help="lstm-stable: 'ours' (default; our variant, seq2d.lab.lstm.LSTMProjection, row-l1 bounds) or "
                         "'author' (seq2d.lab.lstm.AuthorLSTMNormalization: the author's --stabilize as described in the "
                         "audit of issue 12, not checked against the code)")
    ap.add_argument("--author-all-layers", action="store_true",
                    help="with --lstm-projection author: normalise every layer (default: layer 0 only, as described)")
    ap.add_argument("--grad-distance", type=int, default=50, help="largest distance i of the gradient curve")
    ap.add_argument("--grad-seqs", type=int, default=None, help="positions averaged in the gradient curve (quick 8, full 32)")
    ap.add_argument("--carried-segments", type=int, default=None,
                    help="segments of the carried-state gradient curve (default: every segment of the test stream; one position in every grad-distance + 1 is a segment start)")
    ap.add_argument("--lambda-tokens", type=int, default=None,
                    help="test rows (of the batchified stream) the data lambda runs over (quick 50; full 500)")
    ap.add_argument("--seed", type=int, default=1111, help="the classic example's seed")
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:1 ...")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--max-batches", type=int, default=None, help="stop each epoch after this many batches (smoke tests)")
    ap.add_argument("--save-checkpoints", action=argparse.BooleanOptionalAction, default=None,
                    help="write <model>/checkpoint.pt (default: on in full mode, off in quick mode)")
    ap.add_argument("--doc", default=None, help="write the WikiText section of this results page (images next to it)")
    ap.add_argument("--from-json", nargs="+", default=None, metavar="RESULTS_JSON",
                    help="write tables, plots and --doc from these results.json (merged: e.g. one per model; no training)")
    return ap


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.from_json:
        out = Path(args.out or Path(args.from_json[0]).parent)
        out.mkdir(parents=True, exist_ok=True)
        return write_outputs(merge_results(args.from_json), out, args.doc)
    mode = "quick" if args.quick else "full"
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.save_checkpoints is None:
        args.save_checkpoints = not args.quick
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in names:
        condition(m)  # an unknown name exits here, before any data is read
    ks = sorted({int(k) for k in str(args.ks).split(",") if k.strip()})
    if not ks or min(ks) <= 0:
        raise SystemExit(f"--ks must list positive ints, got {args.ks!r}")
    if args.threads is None and args.quick:
        args.threads = 1  # the quick mode's numbers are for one thread count (see the module docstring)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    out = Path(args.out or f"runs/stable_rnn/wikitext{'_quick' if args.quick else ''}")
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    corpus = Corpus(args.data_root, limit_tokens=args.tokens, limit_eval_tokens=args.eval_tokens,
                    order="frequency" if args.adaptive_softmax else "appearance")  # the adaptive softmax needs ids by frequency
    print(corpus, flush=True)
    data = {"train": batchify(corpus.train, args.batch_size).to(device),
            "valid": batchify(corpus.valid, args.eval_batch_size).to(device),
            "test": batchify(corpus.test, args.eval_batch_size).to(device)}
    V = corpus.vocab_size
    results = {
        "mode": mode,
        "command": "python experiments/stable_rnn/wikitext.py " + " ".join(shlex.quote(a) for a in argv),
        "config": {**vars(args), "ks": ks},
        "ks": ks,
        "env": {"device": str(device), "hardware": torch.cuda.get_device_name(device) if device.type == "cuda"
                else f"{cpu_name()}, {torch.get_num_threads()} thread(s)", "threads": torch.get_num_threads(),
                "cpu_capability": _cpu_capability(), "seeded": "seed_everything", "torch": torch.__version__,
                "python": platform.python_version(), "date": datetime.date.today().isoformat()},
        "corpus": {"path": str(corpus.path), "vocab": V, "train_tokens": corpus.train.numel(),
                   "valid_tokens": corpus.valid.numel(), "test_tokens": corpus.test.numel()},
        "paper": {f"{c}-{s}": PAPER[c][j] for c in PAPER for j, s in enumerate(("unstable", "stable"))},
        "stabilizers": {},
        "models": {},
        "grad_curve": {},
        "grad_curve_carried": {},
    }
    for name in names:
        seed_everything(args.seed)  # torch, random, numpy: every generator the run may draw from
        model, stable = build_model(name, V, args)
        model = model.to(device)
        stabilize = None
        if stable:
            stabilize, desc = make_stabilizer(model, args)
            stabilize()  # start feasible
            results["stabilizers"][name] = desc
        info = train(name, model, data, args, device, out, stabilize)
        model.eval()
        test_loss = evaluate(model, data["test"], args.bptt)
        trunc = {}
        for k in ks:
            trunc[str(k)] = perplexity(evaluate(model.truncated(k).to(device), data["test"], args.bptt))
        curve = grad_norm_vs_distance(model, corpus.test.to(device), max_distance=args.grad_distance,
                                      n_seqs=args.grad_seqs)
        results["grad_curve"][name] = curve
        carried = grad_norm_carried(model, data["test"], max_distance=args.grad_distance,
                                    max_segments=args.carried_segments)
        results["grad_curve_carried"][name] = carried
        dl = lm_data_lambda(model, data["test"][:args.lambda_tokens])
        lam_data = {k2: dl[k2] for k2 in ("max", "mean", "max_inf", "mean_inf") if k2 in dl}
        results["models"][name] = {
            "cell": model.cell, "stable": stable, "test_loss": test_loss, "test_ppl": perplexity(test_loss),
            "valid_ppl": perplexity(info["best_valid_loss"]), "truncated": trunc,
            "certified_lambda": certified_lambda(model), "data_lambda": lam_data, **info,
            "diverged": divergence(test_loss, V, training=info["diverged"]),
        }
        print(f"[{name}] test ppl {perplexity(test_loss):.2f}  truncated "
              + ", ".join(f"k={k}: {v:.2f}" for k, v in trunc.items())
              + f"  certified lambda {results['models'][name]['certified_lambda']:.4f}"
              + (f"  DIVERGED: {results['models'][name]['diverged']}" if results["models"][name]["diverged"] else ""),
              flush=True)
    results["total_time_s"] = round(time.perf_counter() - t0, 2)

    (out / "results.json").write_text(json.dumps(_finite(results), indent=2) + "\n")
    return write_outputs(results, out, args.doc)


def _cpu_capability() -> str | None:
    """The instruction set torch's CPU kernels dispatch to (e.g. AVX2, AVX512), where torch says."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 -- informational only
        return None


def merge_results(paths: list[str]) -> dict:
    """One results dict from several ``results.json`` (e.g. one per model, run side by side):
    the first file's settings, every file's models, stabilizers and curves (a model named twice
    is an error); ``commands`` lists every run's command."""
    merged = None
    for path in paths:
        r = json.loads(Path(path).read_text())
        if merged is None:
            merged = dict(r, commands=[r["command"]])
            continue
        for key in ("models", "stabilizers", "grad_curve", "grad_curve_carried"):
            twice = set(merged.get(key, {})) & set(r.get(key, {}))
            if key == "models" and twice:
                raise SystemExit(f"--from-json: model(s) {sorted(twice)} appear in more than one file")
            merged.setdefault(key, {}).update(r.get(key, {}))
        merged["commands"].append(r["command"])
        merged["total_time_s"] = merged.get("total_time_s", 0) + r.get("total_time_s", 0)
    if merged is not None and len(merged["commands"]) > 1:
        merged["command"] = " ; ".join(merged["commands"])
    return merged


def write_outputs(results: dict, out: Path, doc: str | None) -> dict:
    """results.md, the plots and (with ``doc``) the page section, all from ``results``."""
    results = flag_diverged(json.loads(json.dumps(_finite(results))))  # what results.json holds (None for inf/nan)
    table = tables(results)
    (out / "results.md").write_text(f"# WikiText-2 ({results['mode']} mode)\n\n`{results['command']}`\n\n{table}\n")
    plot_grad(results, out / "grad_norm_vs_distance.png")
    plot_truncation(results, out / "truncation.png")
    print(table)
    print(f"wrote {out}/results.json, results.md and plots ({results['total_time_s']:.1f}s)")
    if doc:
        doc = Path(doc)
        img_dir = doc.parent / "stability"
        img_dir.mkdir(parents=True, exist_ok=True)
        images = {}
        for src, dst, title in (("grad_norm_vs_distance.png", "wikitext_grad_norm.png", "gradient norm vs distance"),
                                ("truncation.png", "wikitext_truncation.png", "truncated models")):
            shutil.copyfile(out / src, img_dir / dst)
            images[f"WikiText-2 {title}"] = f"stability/{dst}"
        (img_dir / f"wikitext_{results['mode']}.json").write_text(json.dumps(results, indent=2) + "\n")
        write_doc(doc, doc_section(results, table, images))
    return results


if __name__ == "__main__":
    main()
