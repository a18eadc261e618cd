"""The WikiText-2 sections of docs/results/stability.md for issue 34 (items 1, 2 and 4), from committed JSON only
(report.py writes them; nothing here trains or measures):

* ``wikitext-runs``: the four-model table from the ``result.json`` files that ``wikitext_runs.py collect`` copies
  into ``experiments/stable_rnn/results/wikitext/<condition>/seed<k>/``, every planned run
  (``wikitext_runs.PLAN``) listed, "pending" while it is not collected; the learning-rate search
  (``lr_search.json``); stable minus unstable test perplexity per cell with its Welch interval
  (``seq2d.stats.welch``) next to the blog's difference;
* ``fig2``: fig2.py's record (``experiments/stable_rnn/results/fig2.json``): its pre-stated tests, the 1% distance
  per model and seed with the untrained and diverged controls, data lambda and the certified constant beside it,
  the sampling of test positions as the record states it, the figure, and the slides' own caveats quoted.

A missing file is never an empty table or plot: the section says "pending" and names the command that writes it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from pathlib import Path

from seq2d.results_page import value_range

#: The slides (the seeds' 002 file): where the caveats below are written.
SLIDES = "seeds/002_e0ce570a88c4aff3.txt"
#: The slides' own caveats on the real-data evidence, quoted exactly (tests/test_fig2.py checks each quote and
#: the slide text it annotates against the file when the seeds are at hand). ``on``: the slide's lines it
#: stands next to, quoted; ``slide``: that slide's title.
CAVEATS = [
    {"quote": "sketchy", "slide": "Stability Is OK",
     "on": ["same performance on Wikitext-2 benchmark", "arbitrary RNN are effectively stable"]},
    {"quote": "needs more backup", "slide": "Summary", "on": ["Real-world RNNs are effectively stable"]},
]
DEFAULT_RESULTS = "experiments/stable_rnn/results/wikitext"
DEFAULT_FIG2 = "experiments/stable_rnn/results/fig2.json"
FIG2_PNG = "fig2_gradient_distance.png"
LABELS = {"tanh": "tanh RNN (Sequential2D)", "lstm": "LSTM (nn.LSTM)"}


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"stable_rnn_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_MODS: dict = {}


def _mod(name: str):
    if name not in _MODS:
        _MODS[name] = _module(name)
    return _MODS[name]


def _f(v, fmt=".1f") -> str:
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def _ppl(v) -> str:
    """A perplexity: one decimal, or three significant digits once it is huge (a diverged model's)."""
    return _f(v, ".1f" if v is None or not math.isfinite(v) or abs(v) < 1e5 else ".3g")


# ---------------------------------------------------------------------- the table (item 1)
def load_results(results: Path) -> dict:
    """``{"runs": {condition: [result, ...] by seed}, "lr_search": dict or None}`` from a collect destination
    (a folder that does not exist holds nothing yet)."""
    runs: dict = {}
    read_result = _mod("wikitext_runs").read_result  # "steps" before issue 36: read as "updates"
    for f in sorted(results.glob("*/seed*/result.json")) if results.is_dir() else []:
        r = read_result(f)
        runs.setdefault(r["condition"], []).append(r)
    for v in runs.values():
        v.sort(key=lambda r: r["seed"])
    search = results / "lr_search.json"
    return {"runs": runs, "lr_search": json.loads(search.read_text()) if search.is_file() else None}


def load_fig2(path) -> dict | None:
    """fig2.py's record at ``path`` (None when there is none), each entry in today's words (``steps`` before
    issue 36, read as ``updates``: seq2d.renames.migrate_record)."""
    from seq2d.renames import migrate_record

    path = Path(path)
    if not path.is_file():
        return None
    rec = json.loads(path.read_text())
    rec["entries"] = [migrate_record(e) for e in rec.get("entries", [])]
    return rec


def _ok(rs: list) -> list:
    return [r for r in rs if not r.get("diverged") and r.get("test_ppl") is not None]


def _settings(results: dict) -> str:
    """The scale, from the collected configs (or the plan's, wikitext_runs.FULL, before any run is collected)."""
    cfgs = [r["config"] for rs in results["runs"].values() for r in rs]
    wr = _mod("wikitext_runs")
    if not cfgs:
        p = wr.FULL
        return (f"planned (wikitext_runs.py's full mode; nothing collected yet): {p['layers']} layers x {p['hidden']} "
                f"units, embedding {p['emb']}, dropout {p['dropout']}, an epoch cap of {p['epochs']} with a stop after "
                f"{p['patience']} epochs without a better validation loss, the whole training set")

    def one(key, fmt=str):
        vals = sorted({json.dumps(c.get(key)) for c in cfgs})
        return " / ".join(fmt(json.loads(v)) for v in vals)

    return (f"{one('layers')} layers x {one('hidden')} units, embedding {one('emb')}, dropout {one('dropout')}, "
            f"adaptive softmax cutoffs {one('adaptive_cutoffs')} (div {one('div_value')}), BPTT {one('bptt')}, batch "
            f"{one('batch_size')}, gradient clip {one('clip')}, SGD with the lr divided by 4 after an epoch without a "
            f"better validation loss, stopped after {one('patience')} such epochs or at {one('epochs')} epochs; "
            f"{one('threads')} thread(s); training tokens {one('corpus', lambda c: format(c['train_tokens'], ','))}, "
            f"vocabulary {one('corpus', lambda c: format(c['vocab'], ','))}")


def machines(envs: list) -> str | None:
    """Where the items were run, as "<hardware> (torch CPU capability <cap>): <count>; ...", or None when all ran
    on one machine (or say nothing about it): float32 kernels differ between CPUs, so a number is bitwise
    reproducible only on the CPU that produced it."""
    counts: dict = {}
    for env in envs:
        if env:
            key = (env.get("hardware"), env.get("cpu_capability"))
            counts[key] = counts.get(key, 0) + 1
    if len(counts) <= 1:
        return None
    return "; ".join(f"{hw} (torch CPU capability {cap}): {n}" for (hw, cap), n in sorted(counts.items(), key=str))


def differences(results: dict) -> list[dict]:
    """Stable minus unstable test perplexity per cell (our projection), Welch's 95% interval over the seeds that
    did not diverge, next to the blog's difference."""
    from seq2d.stats import welch

    wx = _mod("wikitext_runs").wx
    out = []
    for cell in wx.PAPER:
        u, s = _ok(results["runs"].get(f"{cell}-unstable", [])), _ok(results["runs"].get(f"{cell}-stable", []))
        paper = wx.PAPER[cell][1] - wx.PAPER[cell][0]
        row = {"cell": cell, "paper": paper, "n_unstable": len(u), "n_stable": len(s)}
        if len(u) >= 2 and len(s) >= 2:
            w = welch([r["test_ppl"] for r in u], [r["test_ppl"] for r in s])
            row.update(diff=w.diff, low=w.low, high=w.high, df=w.df, contains_zero=w.low <= 0 <= w.high,
                       contains_paper=w.low <= paper <= w.high)
        out.append(row)
    return out


def progress(results: dict) -> tuple[int, int]:
    """(planned runs collected, planned runs): wikitext_runs.PLAN against the collected results."""
    plan = _mod("wikitext_runs").PLAN
    runs = results["runs"]
    done = sum(1 for c, seeds in plan.items() for s in seeds if any(r["seed"] == s for r in runs.get(c, [])))
    return done, sum(len(s) for s in plan.values())


def _machines_note(envs: list, what: str) -> str:
    m = machines(envs)
    return "" if m is None else (f" The {what} ran on more than one machine ({what} per machine: {m}); a number is "
                                 "bitwise reproducible only on the CPU that produced it (its record's `env`).")


def table_section(results: dict, source: str) -> str:
    wr = _mod("wikitext_runs")
    wx = wr.wx
    runs = results["runs"]
    done, planned = progress(results)
    lines = ["## WikiText-2 at the example's small configuration: the blog's table (issue 34 item 1)", "",
             "<!-- Written by experiments/stable_rnn/report.py from the collected results; rerun it rather than "
             "editing numbers. -->", "",
             f"Source of the numbers: `{source}/<condition>/seed<k>/result.json` (`wikitext_runs.py collect`). "
             f"**{done} of the {planned} planned runs are collected**"
             + ("; the rest are pending (their rows say so)." if done < planned else "."), "",
             f"Scale: {_settings(results)}. The blog's models (`001`) came from a hyperparameter search for the best "
             "unstable RNN and LSTM; their sizes are not given in the sources, and the audit of issue 12 judges that "
             "the LSTM's test perplexity needs a much larger model than this one: the absolute perplexities are not "
             "comparable, the claim tested is the stable minus unstable difference."
             + _machines_note([r.get("env") for rs in runs.values() for r in rs], "runs"), "",
             "| model | seeds collected | test perplexity per seed | mean +- sd | the blog's | epochs run | lr | "
             "certified lambda |", "|---|---|---|---:|---:|---|---|---|"]
    for cond, seeds in wr.PLAN.items():
        rs = runs.get(cond, [])
        cell, stable = wx.condition(wr.model_condition(cond))
        paper = _f(wx.PAPER[cell][1 if stable else 0])
        extra = sorted({r["seed"] for r in rs} - set(seeds))
        have = [s for s in seeds if any(r["seed"] == s for r in rs)]
        if not rs:
            lines.append(f"| {cond} | pending (0 of {len(seeds)}: seed{'s' if len(seeds) > 1 else ''} "
                         f"{', '.join(map(str, seeds))} not run or not collected) | -- | -- | {paper} | -- | -- | -- |")
            continue
        ok = [r["test_ppl"] for r in _ok(rs)]
        per = ", ".join(f"{_ppl(r['test_ppl'])}" + (" (diverged)" if r.get("diverged") else "") for r in rs)
        ms = (f"{statistics.fmean(ok):.1f} +- {statistics.stdev(ok):.1f}" if len(ok) >= 2 else
              (f"{ok[0]:.1f} (one seed)" if ok else "--"))
        pend = [s for s in seeds if s not in have]
        lines.append(f"| {cond} | {', '.join(map(str, sorted(r['seed'] for r in rs)))}"
                     + (f"; pending {', '.join(map(str, pend))}" if pend else "")
                     + (f" (beyond the plan: {', '.join(map(str, extra))})" if extra else "")
                     + f" | {per} | {ms} | {paper} | {value_range([r['epochs_run'] for r in rs], 'd')} | "
                     f"{value_range([r['config']['lr'] for r in rs], 'g')} | "
                     f"{value_range([r.get('certified_lambda') for r in rs], '.3f')} |")
    lines += ["", "\"the blog's\": `001`'s table (the stable LSTM there was made with the authors' own stability "
              "conditions; ours are the rows lstm-stable, our projection, and lstm-stable-author, the audit's "
              "description of the author's normalisation). A diverged run (`seq2d.lab.lm.divergence`) is listed and left "
              "out of the mean and the differences.", "", "Stable minus unstable test perplexity (Welch's 95% "
              "interval over the seeds that did not diverge):", ""]
    for d in differences(results):
        head = f"- {LABELS[d['cell']]}: the blog's {d['paper']:+.1f}; ours "
        if "diff" not in d:
            lines.append(head + f"pending ({d['n_unstable']} unstable and {d['n_stable']} stable seeds collected; "
                         "2 of each needed for an interval).")
        else:
            lines.append(head + f"{d['diff']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}] (df {d['df']:.1f}; "
                         f"{d['n_unstable']} and {d['n_stable']} seeds): the interval "
                         + ("contains" if d["contains_paper"] else "excludes") + " the blog's difference and "
                         + ("contains" if d["contains_zero"] else "excludes") + " 0.")
    lines += ["", "Learning-rate search (each unstable model's; the stable model is retrained at its cell's choice):", ""]
    ls = results["lr_search"]
    if not ls:
        lines.append(f"- pending: no `{source}/lr_search.json` collected yet (`wikitext_runs.py search`, then `collect`).")
    else:
        lines.append(f"- rule: {ls['rule']}.")
        for name, c in ls["conditions"].items():
            by_lr: dict = {}
            for r in c["runs"]:
                by_lr.setdefault(r["lr"], []).append(r)
            cells = "; ".join(f"lr {lr:g}: " + ", ".join("diverged" if r["diverged"] else _f(r["best_valid_ppl"])
                                                         for r in rs) for lr, rs in sorted(by_lr.items()))
            sched = c["runs"][0]["schedule"] if c["runs"] else {}
            lines.append(f"- {name} (best validation perplexity after {sched.get('epochs')} epoch(s)): {cells}; chosen "
                         f"lr {_f(c['chosen_lr'], 'g')}" + (" (at the grid's edge)" if c["chosen_at_grid_edge"] else "")
                         + ".")
    return "\n".join(lines)


# ---------------------------------------------------------------------- Fig. 2 (item 2)
def caveats_text() -> str:
    parts = []
    for c in CAVEATS:
        on = " and ".join(f"\"{o}\"" for o in c["on"])
        parts.append(f"\"{c['quote']}\" (next to {on}, the slide \"{c['slide']}\")")
    return (f"The slides' own caveats on this evidence (`{SLIDES}`, quoted exactly): " + "; ".join(parts) + ".")


def predictions_lines(preds: list) -> list[str]:
    out = []
    for p in preds:
        out.append(f"- **{p['id']}**. Source: {p['source']}. Prediction: {p['prediction']}. Test: {p['test']}. "
                   f"Falsified if: {p['falsified_if']}.")
    return out


def _sampling(rec: dict) -> str:
    s = rec["settings"]
    K, m = s["max_distance"], s["stride"]
    shapes = sorted({(e["rows"], e["columns"], e["targets"]) for e in rec["entries"] if e.get("targets")})
    desc = "; ".join(f"{n:,} targets of the {N * B:,} test positions ({100 * n / (N * B):.1f}%) in a stream of "
                     f"{N:,} rows x {B} columns" for N, B, n in shapes)
    return (f"g(k) = mean over the targets t of `||d loss_t / d x_(t-k)||_2`, k = 0 .. {K} (`{rec['sampling']['function']}`: "
            f"x the embedding input, loss_t the cross-entropy of the prediction at row t). The targets are the rows t = "
            f"{K}, {K + m}, {K + 2 * m}, ... (one row in every {m} from row {K} on, up to the last row that has a next "
            f"token) of every column of the batchified test stream, the same targets for every k: {desc}. "
            + ("Every test position is a target " if m == 1 else f"Not every test position: a uniform (systematic) "
               f"subsample, one row in every {m} of each column, ") + f"except the first {K} rows of each column "
            f"(and its last, which has no next token). Each target's window, rows t - {K} .. t, starts from the "
            "model's state "
            "carried from its column's start (a zero state there, as the test perplexity is computed), so every "
            "gradient is the full model's.")


def _planned_sampling(p: dict) -> str:
    K, m = p["max_distance"], p["stride"]
    return (f"g(k) for k = 0 .. {K} over the targets t = {K}, {K + m}, {K + 2 * m}, ... (one row in every {m} from row {K} on) "
            "of every column of the batchified test stream, each window from the model's carried state; the record "
            "will state the counts.")


def unmeasured(results: dict, rec: dict) -> list[str]:
    """The collected runs (``condition/seed<k>``) that have no trained entry in fig2.py's record."""
    have = {(e["condition"], e["seed"]) for e in rec["entries"] if e["kind"] == "trained"}
    return [f"{c}/seed{r['seed']}" for c, rs in results["runs"].items() for r in rs if (c, r["seed"]) not in have]


def fig2_section(rec: dict | None, fig2_path: str, png_rel: str, results: dict | None = None) -> str:
    f2 = _mod("fig2")
    lines = ["## Fig. 2 on the trained models, with controls (issue 34 item 2)", "",
             "<!-- Written by experiments/stable_rnn/report.py from fig2.py's record; rerun it rather than editing "
             "numbers. -->", ""]
    if rec is None:
        lines += [f"**Pending**: `{fig2_path}` does not exist yet. It is written after the runs of item 1 by "
                  "`python experiments/stable_rnn/fig2.py --runs runs/stable_rnn/wikitext_main --out runs/stable_rnn/fig2 "
                  f"--json {fig2_path}`; nothing is plotted until then. Planned sampling (fig2.py's full mode): "
                  + _planned_sampling(f2.FULL), "",
                  "The tests, stated before any trained model is measured (`fig2.py`'s `PREDICTIONS`):", ""]
        lines += predictions_lines(f2.PREDICTIONS) + ["", caveats_text()]
        return "\n".join(lines)
    s = rec["settings"]
    a = f2.analyse(rec)
    where = machines([e.get("env") or rec["env"] for e in rec["entries"]])
    where = (f"{rec['env']['hardware']} (torch {rec['env']['torch']}, CPU capability {rec['env']['cpu_capability']})"
             if where is None else f"measured on more than one machine (entries per machine: {where}; the last call: torch "
                                  f"{rec['env']['torch']})")
    lines += [f"Record: `{fig2_path}`, mode `{rec['mode']}`, {rec['date']}, {where}, "
              f"{sum(e.get('time_s') or 0 for e in rec['entries']):.0f} s over the models (the last call "
              f"{rec['seconds']:.0f} s: each call measures only the models not measured before). "
              f"Command: `{rec['command']}`.", "",
              "Sampling: " + _sampling(rec), ""]
    missing = unmeasured(results, rec) if results is not None else []
    if missing:
        lines += [f"Not measured: {', '.join(missing)} (collected, but the run's final weights were not at hand when "
                  "fig2.py ran: the run folders live outside the repository, which keeps no checkpoints).", ""]
    lines += [f"Models per (condition, seed): **trained** (the run's final weights, the best-validation ones; their test "
              "loss checked against the run's result.json), **untrained** (the same condition's initial weights at the "
              "same seed, what the run started from) and, for "
              f"{', '.join(s['diverged_conditions'])}, **diverged**: those initial weights trained at lr "
              f"{s['diverged_lr']:g} for {s['diverged_batches']} batches (the run's other settings), the weights after "
              "the last step, counted as a diverged control only when `seq2d.lab.lm.divergence` says so (test perplexity "
              "above the vocabulary size, or a non-finite loss). The 1% distance D is the first k with g(k) < "
              f"{s['vanish_fraction']:g} g(0) (`seq2d.lab.lm.vanishing_distance`; the threshold is ours). Data lambda: "
              f"`seq2d.lab.lm.lm_data_lambda` over the first {s['lambda_rows']} rows of the batchified test stream (max / "
              "mean spectral norm of the per-step state Jacobian; our measure, not the source's); certified lambda: "
              "the bound of wikitext.py's `certified_lambda` (below 1: provably contracting).", "",
              "The tests, as stated before the runs (the record's copy of `fig2.py`'s `PREDICTIONS`):", ""]
    lines += predictions_lines(rec["predictions"])
    lines += ["", "| model | kind | seed | test ppl | D (1%) | g(0) | data lambda max / mean | certified lambda | "
              "counted |", "|---|---|---:|---:|---:|---:|---|---:|---|"]
    order = list(_mod("wikitext_runs").PLAN)
    for e in sorted(rec["entries"], key=lambda e: (order.index(e["condition"]) if e["condition"] in order else len(order),
                                                   e["condition"], e["seed"], f2.KINDS.index(e["kind"]))):
        dl = e.get("data_lambda") or {}
        why = "" if e.get("counts") else (" (diverged run)" if e["kind"] == "trained" else
                                          (" (did not diverge)" if e["kind"] == "diverged" else ""))
        D = e["vanish_distance"]
        D = str(D) if D is not None else (f"> {len(e['curve']) - 1}" if e.get("curve") else "--")
        lines.append(f"| {e['condition']} | {e['kind']} | {e['seed']} | {_ppl(e['test_ppl'])} | {D} | "
                     f"{_f((e.get('curve') or [None])[0], '.3g')} | {_f(dl.get('max'), '.3f')} / "
                     f"{_f(dl.get('mean'), '.3f')} | {_f(e.get('certified_lambda'), '.3f')} | "
                     f"{'yes' if e.get('counts') else 'no' + why} |")
    lines += ["", "Outcomes (per cell, the unstable models and their controls):", ""]
    for cell, r in a.items():
        if r["verdict"] == "pending":
            lines.append(f"- {LABELS[cell]}: pending ({r['why']}).")
            continue
        v = r["vanish"]
        txt = (f"- {LABELS[cell]}: F2-vanish {v['outcome']} (D = {distances(v['D'], v['K'])}"
               f" for seeds {', '.join(map(str, v['seeds']))}; BPTT {', '.join(map(str, v['moderate']))}, K = {v['K']})")
        for kind, ap in r["apart"].items():
            dc = distances(ap["D_control"], v["K"])
            txt += f"; F2-apart against the {kind} controls (D = {dc}): {ap['outcome']}"
            txt += (f" (|mean difference| {ap['gap']:.2f} against a spread of {ap['spread']:.0f})" if "gap" in ap
                    else f" ({ap['why']})")
        if not r["apart"]:
            txt += "; no control counted"
        lines.append(txt + f". **Verdict: {r['verdict']}.**")
    lines += ["", f"![Fig. 2: gradient norm against distance, relative to distance 0]({png_rel})", "",
              "Curves are g(k) / g(0) per model and seed (log scale; a zero value leaves a gap) with the 1% line; "
              "solid: trained, dotted: untrained, dash-dot: diverged control; the unstable models in blue, the stable "
              "ones in green; a model that does not count (a diverged run, a control that did not diverge) is drawn "
              "faint. D = 0 marks a curve that is 0 at every distance (no gradient reaches the loss: a saturated "
              "model).", "",
              caveats_text()]
    return "\n".join(lines)


def plot_fig2(rec: dict, path: Path) -> None:
    from seq2d.plot.common import new_figure, save_figure

    cells = list(_mod("wikitext_runs").wx.PAPER)
    fig, axes = new_figure((10, 3.8), ncols=len(cells))
    style = {"trained": "-", "untrained": ":", "diverged": "-."}
    frac = rec["settings"]["vanish_fraction"]
    for ax, cell in zip(axes, cells):
        for e in rec["entries"]:
            c = e.get("curve")
            if e["cell"] != cell or not c or not c[0] or not c[0] > 0:
                continue
            color = "C3" if e["kind"] == "diverged" else ("C2" if e["stable"] else "C0")
            ax.plot(range(len(c)), [v / c[0] if v > 0 else math.nan for v in c], style[e["kind"]], color=color,
                    lw=1.2, alpha=1.0 if e.get("counts") else 0.35)
        ax.axhline(frac, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_title(LABELS[cell])
        ax.set_xlabel("distance k (tokens)")
        ax.set_ylabel("g(k) / g(0)")
        ax.grid(alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="C0", ls="-", label="trained, unstable"), Line2D([], [], color="C2", ls="-", label="trained, stable"),
               Line2D([], [], color="0.4", ls=":", label="untrained"), Line2D([], [], color="C3", ls="-.", label="diverged control"),
               Line2D([], [], color="k", ls="--", lw=0.8, label=f"{frac:g} of g(0)")]
    axes[-1].legend(handles=handles, fontsize=8, loc="upper right")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


# ---------------------------------------------------------------------- the verdict lines

def distances(ds, K) -> str:
    """The 1% distances of several seeds: a curve that never fell below the threshold up to
    distance ``K`` (``None``) is written ``> K``."""
    return ", ".join(f"> {K}" if d is None else str(d) for d in ds)

def verdict_lines(results: dict, rec: dict | None) -> tuple[list[str], list[str]]:
    """(holds, fails) for the page's verdict: the table's differences and Fig. 2's outcomes, or "pending"."""
    holds, fails = [], []
    done, planned = progress(results)
    for d in differences(results):
        if "diff" not in d:
            fails.append(f"**WikiText-2 table at the example's small configuration, {LABELS[d['cell']]}** (issue 34 "
                         f"item 1): pending ({done} of {planned} planned runs collected).")
            continue
        line = (f"**WikiText-2, {LABELS[d['cell']]}, stable minus unstable** ({d['n_unstable']} and {d['n_stable']} "
                f"seeds): {d['diff']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}] perplexity against the blog's "
                f"{d['paper']:+.1f}; the interval {'contains' if d['contains_paper'] else 'excludes'} it.")
        (holds if d["contains_paper"] else fails).append(line)
    if rec is None:
        fails.append("**Fig. 2 on the trained models with controls** (issue 34 item 2): pending (no fig2.json yet).")
        return holds, fails
    for cell, r in _mod("fig2").analyse(rec).items():
        line = f"**Fig. 2 with controls, {LABELS[cell]}** (1% distance, pre-stated tests F2-vanish / F2-apart): {r['verdict']}"
        if r["verdict"] == "pending":
            fails.append(line + f" ({r['why']}).")
            continue
        line += (f"; D = {distances(r['vanish']['D'], r['vanish']['K'])} for the trained model"
                 + "".join(f", {distances(ap['D_control'], r['vanish']['K'])} for the {k} controls"
                           for k, ap in r["apart"].items()) + ".")
        (holds if r["verdict"] == "supported" else fails).append(line)
    return holds, fails
