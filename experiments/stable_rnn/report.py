"""Write the Lemma 1 and gradient/weight-gap sections of docs/results/stability.md from
the JSON that truncation.py and gradient_gaps.py wrote (numbers are never typed in).

    python experiments/stable_rnn/truncation.py --out runs/stable_rnn
    python experiments/stable_rnn/gradient_gaps.py --out runs/stable_rnn
    python experiments/stable_rnn/report.py --runs runs/stable_rnn --doc docs/results/stability.md

Each section goes between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` markers, so the
WikiText section (written by wikitext.py) and these can be regenerated independently. The
plots and JSON are copied next to the page (``docs/results/stability/``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
from pathlib import Path


def write_section(doc: Path, name: str, body: str, title: str = "# Stable recurrent models: results") -> None:
    """Replace (or append) the text between the markers ``<!-- name:begin/end -->``."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = doc.read_text() if doc.is_file() else title + "\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


def truncation_section(d: dict, rel: str) -> str:
    c = d["config"]
    lines = [
        "## Lemma 1: truncation gap of random tanh RNNs",
        "",
        f"Mode `{d['mode']}`, seed {d['seed']}, torch {d['torch']}, {d['machine']} CPU, {d['seconds']:.0f} s. "
        f"Command: `python experiments/stable_rnn/truncation.py --out runs/stable_rnn` "
        f"(hidden {c['hidden']}, input {c['input']}, T = {c['T']}, batch {c['batch']}, ||x_t|| <= {c['input_bound']}).",
        "",
        "`||h_T - h_T^k||` (full RNN vs its k-truncation, `seq2d.truncated_rnn`) against k; the slope of "
        "log gap vs k is fitted where the gap is above float64 noise. `W = lambda Q` (Q orthogonal) has "
        "spectral norm and radius lambda; a Gaussian W scaled to norm lambda has a smaller spectral radius rho.",
        "",
        "| family | lambda = L ||W||_2 | log lambda | log rho | fitted slope | data lambda (max) | max gap / Lemma 1 bound |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in d["rows"]:
        ratio = r.get("max_gap_over_bound")
        if ratio is None and "gaps" in r and "bounds" in r:
            pairs = [(g, b) for g, b in zip(r["gaps"], r["bounds"]) if b and math.isfinite(b)]
            ratio = max((g / b for g, b in pairs), default=None)
        ratio_s = "n/a (lambda >= 1)" if ratio is None else f"{ratio:.3f}"
        lines.append(f"| {r['family']} | {r['lambda']:.2f} | {r['log_lambda']:+.3f} | {r['log_spectral_radius']:+.3f} | "
                     f"{r['slope']:+.3f} | {r.get('data_lambda_max', float('nan')):.3f} | {ratio_s} |")
    lines += ["", f"![truncation gap vs k]({rel}/truncation.png)"]
    return "\n".join(lines)


def gaps_section(g: dict, rel: str) -> str:
    c = g["config"]
    ks = g["ks"]
    rules = g["rules"]
    lines = [
        "## Lemma 2 / Proposition 2: gradient and weight gaps (Fig. 1)",
        "",
        f"Mode `{g['mode']}`, seed {g['seed']}, torch {g['torch']}, {g['machine']} CPU, {g['seconds']:.0f} s. "
        "Command: `python experiments/stable_rnn/gradient_gaps.py --out runs/stable_rnn`. "
        f"A random teacher RNN generates a regression task (input {c['input']}, hidden {c['hidden']}, T = {c['T']}, "
        f"{c['n']} sequences); the recurrent model and its k-truncation start from the same weights "
        f"(certified lambda {g['certified_lambda_init']:.2f}, spectral radius {g['spectral_radius_init']:.3f}) and "
        f"are trained by projected gradient descent (spectral clipping to lambda = {c['lam']}), N = {c['steps']} steps.",
        "",
        f"Gradient gap at the start: fitted slope of log gap vs k = {g['gradient_gap_slope']:+.3f} "
        f"(log lambda = {g['log_lambda']:+.3f}, log rho = {g['log_spectral_radius_init']:+.3f}).",
        "",
        "| k | gradient gap at start | " + " | ".join(f"weight gap after N steps, step {r}" for r in rules) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in rules) + " |",
    ]
    for i, k in enumerate(ks):
        lines.append(f"| {k} | {g['gradient_gap'][i]:.2e} | " + " | ".join(f"{rules[r]['weight_gap'][i]:.2e}" for r in rules) + " |")
    lines += [""] + [f"- step `{r}`: fitted slope {rules[r]['slope']:+.3f}; final loss of the recurrent model "
                     f"{rules[r]['full_final_loss']:.4f}" for r in rules]
    lines += ["", f"![gradient and weight gaps vs k]({rel}/gradient_gaps.png)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="runs/stable_rnn", help="folder holding truncation.json / gradient_gaps.json")
    ap.add_argument("--doc", default="docs/results/stability.md")
    args = ap.parse_args(argv)
    runs, doc = Path(args.runs), Path(args.doc)
    assets = doc.parent / "stability"
    assets.mkdir(parents=True, exist_ok=True)
    done = []
    if (runs / "truncation.json").is_file():
        d = json.loads((runs / "truncation.json").read_text())
        for f in ("truncation.json", "truncation.png"):
            shutil.copy(runs / f, assets / f)
        write_section(doc, "truncation", truncation_section(d, assets.name))
        done.append("truncation")
    if (runs / "gradient_gaps.json").is_file():
        g = json.loads((runs / "gradient_gaps.json").read_text())
        for f in ("gradient_gaps.json", "gradient_gaps.png"):
            shutil.copy(runs / f, assets / f)
        write_section(doc, "gaps", gaps_section(g, assets.name))
        done.append("gaps")
    if not done:
        raise SystemExit(f"report.py: no truncation.json or gradient_gaps.json in {runs}")
    print(f"wrote sections {done} of {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
