"""The numbers of docs/stability.md's "LSTM stability" part, computed (never typed in).

    python experiments/stable_rnn/lstm_certificate.py --out runs/stable_rnn_lstm_certificate --doc docs/stability.md
    # the section again from the committed JSON (nothing recomputed)
    python experiments/stable_rnn/lstm_certificate.py --from-json docs/results/stability/lstm_certificate.json \
        --doc docs/stability.md

What it computes (float64, one thread, seeds fixed):

1. the certificate at the published gate constants (``seq2d.lab.lstm.PAPER_GATE_BOUNDS``, forget input
   rows 0.25, inputs in [-1, 1], forget bias <= 0): every term of ``seq2d.lab.lstm.certificate`` of
   an LSTM projected onto them (``LSTMProjection`` of ``nn.LSTM(6, 10, 2)`` with weights U(-1, 1),
   whose rows all end at the bounds), and the same weights' bound for inputs up to
   ``1 / (1 - p)`` (dropout ``p`` in training);
2. the author's normalisation as described in the audit of issue 12 (``AuthorLSTMNormalization``)
   of a random ``nn.LSTM(200, 200, 2)``: its row norms and certificate, with and without biases;
3. how conservative the certificate is, for ``nn.LSTM(6, 16, 2)`` (U(-1, 1), seeds 0 and 1,
   projected): the largest secant ratio of 3 x 4,000 random pairs in the certified box (the
   sampling of ``tests/test_lstm.py``), and ``lstm_contraction_sup`` (64 starts, 200 steps, seed 0).

Outputs: ``OUT/lstm_certificate.json``; ``--doc`` writes the ``lstm-certificate`` section of the
page and copies the JSON to ``docs/results/stability/lstm_certificate.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import torch
from torch import nn

from seq2d.lab.lstm import (AuthorLSTMNormalization, LSTMProjection, PAPER_GATE_BOUNDS, lstm_certificate,
                            lstm_contraction_bound, lstm_contraction_sup, lstm_state_map)
from seq2d.results_page import write_section

REGEN = ("python experiments/stable_rnn/lstm_certificate.py --from-json docs/results/stability/lstm_certificate.json "
         "--doc docs/stability.md")


def uniform_lstm(input_size: int, hidden: int, layers: int, seed: int) -> nn.LSTM:
    """``nn.LSTM`` in float64 with every weight and bias drawn U(-1, 1) after ``torch.manual_seed(seed)``
    (``big_lstm`` of tests/test_lstm.py)."""
    torch.manual_seed(seed)
    m = nn.LSTM(input_size, hidden, layers).double()
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-1, 1)
    return m


def sampled_ratio(m: nn.LSTM, seed: int, n: int = 4000) -> list[float]:
    """Per layer: the largest ``||F(s, x) - F(s', x)||_inf / ||s - s'||_inf`` over 3 x ``n`` random pairs
    of states in the certified box (far apart and nearly equal) and inputs in the bound; one
    ``torch.Generator`` seeded with ``seed``, drawn in the order of tests/test_lstm.py."""
    gen = torch.Generator().manual_seed(seed)

    def box(k, d, r):
        return (torch.rand(k, d, generator=gen, dtype=torch.float64) * 2 - 1) * r

    H, out = m.hidden_size, []
    for layer, cert in enumerate(lstm_certificate(m, 1.0)):
        step = lstm_state_map(m, layer)
        C, d_in = cert["c_bound"], m.input_size if layer == 0 else H
        worst = 0.0
        for spread in (1.0, 1e-2, 1e-5):
            c, h, x = box(n, H, C), box(n, H, 1.0), box(n, d_in, cert["input_bound"])
            c2 = (c + box(n, H, spread * C)).clamp(-C, C)
            h2 = (h + box(n, H, spread)).clamp(-1, 1)
            with torch.no_grad():
                a, b = step(c, h, x), step(c2, h2, x)
            num = torch.maximum((a[0] - b[0]).abs().amax(1), (a[1] - b[1]).abs().amax(1))
            den = torch.maximum((c - c2).abs().amax(1), (h - h2).abs().amax(1))
            worst = max(worst, float((num / den).max()))
        out.append(worst)
    return out


def compute(dropout: float = 0.2, *, quick: bool = False) -> dict:
    """Every number of the section; ``quick``: fewer random pairs and ascent starts/steps, and a
    smaller LSTM for the author's normalisation (CI)."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    m = uniform_lstm(6, 10, 2, seed=0)
    LSTMProjection(m).project()
    cert = lstm_certificate(m, 1.0)[0]
    published = {"gate_bounds": dict(PAPER_GATE_BOUNDS), "forget_input_bound": 0.25, "input_bound": 1.0,
                 "lambda_f": cert["lambda_f"], "c_bound": cert["c_bound"], "w_f_c_over_4": cert["w_f"] * cert["c_bound"] / 4,
                 "w_i_over_4": cert["w_i"] / 4, "w_g": cert["w_g"], "w_o_over_4": cert["w_o"] / 4, "lambda": cert["lambda"],
                 "dropout": dropout, "lambda_dropout_inputs": lstm_contraction_bound(m, 1.0 / (1.0 - dropout))}
    torch.manual_seed(0)
    size = 20 if quick else 200
    big = nn.LSTM(size, size, 2).double()
    AuthorLSTMNormalization(big).project()
    c0 = lstm_certificate(big, 1.0)
    nobias = nn.LSTM(size, size, 2, bias=False).double()
    with torch.no_grad():
        for name, p in nobias.named_parameters():
            p.copy_(getattr(big, name))
    author = {"model": f"nn.LSTM({size}, {size}, 2), torch.manual_seed(0), float64, AuthorLSTMNormalization (layers=(0,))",
              "layer0": {k: c0[0][k] for k in ("w_i", "w_f", "w_g", "w_o", "u_f", "b_f", "lambda")},
              "layer0_lambda_zero_bias": lstm_certificate(nobias, 1.0)[0]["lambda"], "layer1_lambda": c0[1]["lambda"]}
    conservative = []
    for s in (0, 1):
        mm = uniform_lstm(6, 16, 2, seed=s)
        LSTMProjection(mm).project()
        sup = lstm_contraction_sup(mm, 1.0, restarts=8 if quick else 64, steps=20 if quick else 200, seed=0)
        conservative.append({"seed": s, "certificate": [c["lambda"] for c in lstm_certificate(mm, 1.0)],
                             "sampled": sampled_ratio(mm, s, n=500 if quick else 4000),
                             "sup": [r["sup"] for r in sup["per_layer"]]})
    return {"mode": "quick" if quick else "full", "published": published, "author": author, "conservative": conservative,
            "torch": torch.__version__, "python": platform.python_version(), "seconds": round(time.perf_counter() - t0, 1)}


def section(res: dict) -> str:
    p, a, cons = res["published"], res["author"], res["conservative"]
    g = p["gate_bounds"]
    fmt = lambda v: ", ".join(f"{x:.5f}" for x in v)  # noqa: E731
    lines = ["### The numbers (computed)", "",
             "<!-- Written by experiments/stable_rnn/lstm_certificate.py; rerun it rather than editing numbers. -->", "",
             f"Command: `{res['command']}`; the section again from the committed JSON: `{REGEN}`; torch {res['torch']}, "
             f"{res['seconds']:.0f} s.", "",
             f"**The published constants** (`w_i = {g['i']}`, `w_f = {g['f']}`, `w_g = {g['g']}`, `w_o = {g['o']}`, "
             f"`u_f = {p['forget_input_bound']}`, inputs in [-{p['input_bound']:g}, {p['input_bound']:g}], forget bias "
             "<= 0; `lstm_certificate` of an LSTM projected onto them):", "",
             "| quantity | value |", "|---|---:|",
             f"| forget gate bound `lambda_f = sigmoid(w_f + u_f B)` | {p['lambda_f']:.5f} |",
             f"| cell bound `C = 1 / (1 - lambda_f)` | {p['c_bound']:.4f} |",
             f"| `w_f C / 4` | {p['w_f_c_over_4']:.5f} |", f"| `w_i / 4` | {p['w_i_over_4']:.5f} |",
             f"| `w_g` | {p['w_g']:.5f} |", f"| `w_o / 4` | {p['w_o_over_4']:.5f} |",
             f"| **lambda** | **{p['lambda']:.5f}** |", "",
             f"With dropout p = {p['dropout']} in training, inputs reach 1 / (1 - p) and the same weights give "
             f"lambda = {p['lambda_dropout_inputs']:.4f}: the certificate is for the model run without dropout.", "",
             f"**The author's normalisation** (as described in the audit of issue 12; {a['model']}): layer 0 has row "
             f"norms `w_i {a['layer0']['w_i']:.3f}, w_f {a['layer0']['w_f']:.3f}, w_g {a['layer0']['w_g']:.3f}, "
             f"w_o {a['layer0']['w_o']:.3f}`, `u_f {a['layer0']['u_f']:.3f}`, and lambda = {a['layer0']['lambda']:.3f} "
             f"({a['layer0_lambda_zero_bias']:.3f} with zero biases); layer 1 is not touched and has lambda = "
             f"{a['layer1_lambda']:.3g}.", "",
             "**How conservative the certificate is** (`nn.LSTM(6, 16, 2)`, U(-1, 1), projected with our variant; per "
             "layer 0 / 1): random sampling (3 x 4,000 pairs) is a lower bound on the Lipschitz constant, "
             "`lstm_contraction_sup` (64 starts, 200 steps, seed 0) a better lower bound, the certificate an upper bound."
             + (" **Quick mode**: fewer pairs and steps, a smaller LSTM." if res.get("mode") == "quick" else ""),
             "", "| seed | random sampling | `lstm_contraction_sup` | certificate |", "|---|---:|---:|---:|"]
    for c in cons:
        lines.append(f"| {c['seed']} | {fmt(c['sampled'])} | {fmt(c['sup'])} | {fmt(c['certificate'])} |")
    sup = [v for c in cons for v in c["sup"]]
    smp = [v for c in cons for v in c["sampled"]]
    cert = [v for c in cons for v in c["certificate"]]
    cert_s = f"{min(cert):.5f}" if f"{min(cert):.5f}" == f"{max(cert):.5f}" else f"{min(cert):.5f} to {max(cert):.5f}"
    lines += ["", f"So the true constant is at least {max(sup):.2f} (a maximiser's value is a lower bound): random "
              f"sampling underestimates it by up to {max(s - m for c in cons for s, m in zip(c['sup'], c['sampled'])):.2f}, "
              f"and the certificate ({cert_s}) is above that lower bound by {max(cert) - max(sup):.2f}, so above the "
              f"true constant by at most that much."]
    return "\n".join(lines)


def verdict(res: dict) -> str:
    """The verdict at the top of docs/stability.md: what holds, what does not, at what scale (numbers from ``res``)."""
    p, a, cons = res["published"], res["author"], res["conservative"]
    sup = max(v for c in cons for v in c["sup"])
    return "\n".join([
        "## Verdict", "",
        "<!-- Written by experiments/stable_rnn/lstm_certificate.py from its JSON; rerun it rather than editing numbers. -->",
        "", f"Command: `{REGEN}`. This page holds notes and derivations; the experiments' verdict is at the top of "
        "[docs/results/stability.md](results/stability.md). The sources (`seeds/`, the slides `002`) give "
        "the stability condition of the classical RNN (`||W|| < 1/L_rho`) and list the LSTM without its condition; "
        "the LSTM condition below is our derivation, not the sources'.", "",
        f"- Holds (small LSTMs, float64): at the published gate constants our row-l1 reading certifies an l-infinity "
        f"contraction of every layer, lambda = {p['lambda']:.5f} < 1, for inputs in [-1, 1] and the model run without "
        f"dropout; on the tested LSTMs the true constant lies between {sup:.2f} (a maximiser's lower bound) and that "
        "certificate.",
        f"- Does not hold: with dropout's scaled inputs the same weights give lambda = {p['lambda_dropout_inputs']:.4f}; "
        f"the author's normalisation as the audit of issue 12 describes it (columns, not rows) certifies nothing "
        f"(layer 0: lambda = {a['layer0']['lambda']:.3f} on a random 200-unit LSTM; layer 1 untouched); a stack of "
        "tanh layers is certified per layer only (a weighted norm for the whole map).",
        "- Not shown here: anything at the paper's model sizes; the WikiText-2 full mode has not been run.",
    ])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/stable_rnn_lstm_certificate")
    ap.add_argument("--doc", default=None, help="write the lstm-certificate section of this page (docs/stability.md)")
    ap.add_argument("--from-json", default=None, help="write --doc from this JSON (nothing recomputed)")
    ap.add_argument("--quick", action="store_true", help="CI: fewer samples and ascent steps, a smaller LSTM")
    args = ap.parse_args(argv)
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
    else:
        threads = torch.get_num_threads()
        try:
            res = compute(quick=args.quick)
        finally:
            torch.set_num_threads(threads)
        res["command"] = "python experiments/stable_rnn/lstm_certificate.py " + " ".join(shlex.quote(a) for a in argv)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "lstm_certificate.json").write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {out / 'lstm_certificate.json'}")
    print(section(res))
    if args.doc:
        doc = Path(args.doc)
        assets = doc.parent / "results" / "stability"
        assets.mkdir(parents=True, exist_ok=True)
        (assets / "lstm_certificate.json").write_text(json.dumps(res, indent=1) + "\n")
        write_section(doc, "lstm-certificate", section(res), title="# Stable recurrent models")
        write_section(doc, "stability-verdict", verdict(res), title="# Stable recurrent models")
        print(f"wrote the lstm-certificate section of {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
