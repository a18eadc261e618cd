"""Truncation of stable RNNs (Miller & Hardt, "Stable Recurrent Models", Lemma 1).

    python experiments/stable_rnn/truncation.py                    # full: H=128, T=200, k = 1..150
    python experiments/stable_rnn/truncation.py --quick --out /tmp/trunc   # CI: H=64, T=100, k = 1..60

Random tanh RNNs ``h_t = tanh(W h_{t-1} + U x_t + b)`` with ``||W||_2 = lambda`` for
lambda in {0.5, 0.8, 0.9, 0.99} and an unstable 1.5, run on random inputs with
``||x_t|| <= B``. For each truncation length ``k`` the gap ``||h_T - h_T^k||`` between the
RNN and its k-truncation (:func:`seq2d.truncated_rnn`: the feed-forward, weight-tied model that
sees only the last k inputs) is measured and plotted against ``k`` on a log scale, with the
Lemma 1 bound ``lambda^k sup||h||`` (:func:`seq2d.stability.lemma1_bound`) for the stable ones.
The slope of ``log gap`` against ``k`` is fitted where the gap is above float64 noise and
compared with ``log(lambda)``.

Two families of W (both with ``||W||_2 = lambda``):

- ``orthogonal``: ``W = lambda Q`` (Q random orthogonal), so every singular value and every
  eigenvalue modulus is lambda: the rate of Lemma 1 is attained (up to tanh' < 1).
- ``gaussian`` (full mode): a Gaussian matrix scaled to norm lambda; its spectral radius is
  about lambda / 2, and the gap decays at that faster rate: the certified rate is a bound,
  not the rate.

Outputs in ``--out``: ``truncation.json`` (config, seeds, per-model gaps, bounds, fitted
slopes, data-dependent lambda) and ``truncation.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

import seq2d
from seq2d.stability import certified_lambda, data_lambda, lemma1_bound, rnn_constants

# ----------------------------------------------------------------------------- defaults
FULL = dict(
    hidden=128,          # H
    input=32,            # input features
    T=200,               # sequence length
    batch=8,             # sequences; the gap reported is the max over them
    k_max=150,           # k = 1 .. k_max
    lams=[0.5, 0.8, 0.9, 0.99, 1.5],
    input_bound=0.5,     # ||x_t|| <= B (uniform in the ball); small enough that tanh stays near-linear
    bias_std=0.05,       # b ~ N(0, bias_std^2)
    families=["orthogonal", "gaussian"],
    noise_floor=1e-12,   # gaps below this are float64 rounding noise (states are O(1)) and not fitted
    data_iters=30,       # power-iteration rounds for the data-dependent lambda
    seed=0,
)
QUICK = dict(FULL, hidden=64, input=16, T=100, batch=4, k_max=60, families=["orthogonal"], data_iters=10)


def make_rnn(lam: float, family: str, H: int, d: int, bias_std: float, g: torch.Generator) -> seq2d.RNN:
    """A float64 seq2d tanh RNN with ||W_hh||_2 = lam and ||W_ih||_2 = 1."""
    r = seq2d.rnn(d, H, dtype=torch.float64)
    with torch.no_grad():
        if family == "orthogonal":
            Q, R = torch.linalg.qr(torch.randn(H, H, generator=g, dtype=torch.float64))
            W = Q * torch.sign(torch.diagonal(R))  # Haar-distributed orthogonal
        elif family == "gaussian":
            W = torch.randn(H, H, generator=g, dtype=torch.float64)
        else:
            raise ValueError(f"Unknown family {family!r}. Select from 'orthogonal' or 'gaussian'.")
        W = W * (lam / torch.linalg.matrix_norm(W, ord=2))
        U = torch.randn(H, d, generator=g, dtype=torch.float64)
        U = U / torch.linalg.matrix_norm(U, ord=2)
        r.core.block(1, 1).weight.copy_(W)
        r.core.block(1, 0).weight.copy_(U)
        r.core.bias(1).copy_(bias_std * torch.randn(H, generator=g, dtype=torch.float64))
    return r


def bounded_inputs(T: int, B: int, d: int, bound: float, g: torch.Generator) -> torch.Tensor:
    """(T, B, d), each x_t uniform in the ball of radius ``bound``."""
    x = torch.randn(T, B, d, generator=g, dtype=torch.float64)
    r = bound * torch.rand(T, B, 1, generator=g, dtype=torch.float64) ** (1.0 / d)
    return x / x.norm(dim=-1, keepdim=True) * r


@torch.no_grad()
def gaps(r: seq2d.RNN, xs: torch.Tensor, ks: list[int]) -> torch.Tensor:
    """(len(ks), B): ||h_T - h_T^k|| for each k, h^k from seq2d.truncated_rnn on the last k inputs."""
    T, B, d = xs.shape
    full = r(xs)[0][-1]  # (B, H)
    out = []
    for k in ks:
        window = xs[T - k:].permute(1, 0, 2).reshape(B, k * d)  # oldest first
        out.append((full - seq2d.truncated_rnn(r, k).core(window)).norm(dim=-1))
    return torch.stack(out)


def fit_slope(ks: list[int], y: list[float], floor: float) -> tuple[float | None, list[int]]:
    """Least-squares slope of log(y) against k over the points with y > floor."""
    pts = [(k, math.log(v)) for k, v in zip(ks, y) if v > floor]
    if len(pts) < 3:
        return None, []
    n = len(pts)
    mk = sum(k for k, _ in pts) / n
    my = sum(v for _, v in pts) / n
    sxx = sum((k - mk) ** 2 for k, _ in pts)
    slope = sum((k - mk) * (v - my) for k, v in pts) / sxx
    return slope, [pts[0][0], pts[-1][0]]


def run(cfg: dict) -> dict:
    g = torch.Generator().manual_seed(cfg["seed"])
    ks = list(range(1, cfg["k_max"] + 1))
    rows = []
    for family in cfg["families"]:
        for lam in cfg["lams"]:
            t0 = time.perf_counter()
            r = make_rnn(lam, family, cfg["hidden"], cfg["input"], cfg["bias_std"], g)
            xs = bounded_inputs(cfg["T"], cfg["batch"], cfg["input"], cfg["input_bound"], g)
            gp = gaps(r, xs, ks)  # (K, B)
            gmax = gp.max(dim=1).values.tolist()
            geo = gp.clamp_min(1e-300).log().mean(dim=1).exp().tolist()  # geometric mean over sequences
            slope, rng = fit_slope(ks, geo, cfg["noise_floor"])
            c = rnn_constants(r)
            bound = [lemma1_bound(k=k, input_bound=cfg["input_bound"], **c) for k in ks] if c["lam"] < 1 else None
            # a violation: a gap above the bound that is not float64 rounding noise (below noise_floor
            # the measured gap is rounding, ~1e-16, while the bound keeps shrinking)
            viol = None if bound is None else sum(1 for a, b in zip(gmax, bound) if a > b and a > cfg["noise_floor"])
            ratio = None if bound is None else max(a / b for a, b in zip(gmax, bound) if a > cfg["noise_floor"])
            dl = data_lambda(r, xs, iters=cfg["data_iters"], generator=torch.Generator().manual_seed(cfg["seed"]))
            rho = float(torch.linalg.eigvals(r.core.block(1, 1).weight.detach()).abs().max())
            rows.append({
                "family": family, "lambda": lam, "certified_lambda": certified_lambda(r)["lambda"],
                "log_lambda": math.log(lam), "spectral_radius": rho, "log_spectral_radius": math.log(rho),
                "slope": slope, "slope_minus_log_lambda": None if slope is None else slope - math.log(lam),
                "fit_range_k": rng, "data_lambda_max": dl["max"], "data_lambda_mean": dl["mean"],
                "constants": c, "ks": ks, "gap_max": gmax, "gap_geomean": geo, "bound": bound,
                "bound_violations": viol, "max_gap_over_bound": ratio, "seconds": time.perf_counter() - t0,
            })
    return {"rows": rows}


def plot(rows: list[dict], path: Path, cfg: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = list(dict.fromkeys(r["family"] for r in rows))
    fig, axes = plt.subplots(1, len(fams), figsize=(6.2 * len(fams), 4.6), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, fam in zip(axes[0], fams):
        for n, r in enumerate(x for x in rows if x["family"] == fam):
            col = colors[n % len(colors)]
            s = "n/a" if r["slope"] is None else f"{r['slope']:.3f}"
            ax.semilogy(r["ks"], [max(v, 1e-17) for v in r["gap_max"]], color=col,
                        label=f"λ={r['lambda']}: slope {s} vs log λ {r['log_lambda']:.3f}")
            if r["bound"] is not None:
                ax.semilogy(r["ks"], r["bound"], color=col, ls="--", lw=0.9)
        ax.axhline(cfg["noise_floor"], color="gray", lw=0.6, ls=":")
        ax.set_ylim(1e-17, None)
        ax.set_xlabel("truncation length k")
        ax.set_ylabel("||h_T − h_T^k||  (max over sequences)")
        ax.set_title(f"{fam} W, ||W||₂ = λ; dashed: Lemma 1 bound")
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"tanh RNN, H={cfg['hidden']}, T={cfg['T']}, ||x_t|| ≤ {cfg['input_bound']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(rows: list[dict]) -> str:
    head = (f"{'family':<11}{'lambda':>7}{'log lam':>9}{'slope':>9}{'diff':>8}{'fit k':>10}"
            f"{'log rho':>9}{'data max':>10}{'data mean':>10}{'viol':>6}{'gap/bound':>11}")
    lines = [head]
    for r in rows:
        s = "n/a" if r["slope"] is None else f"{r['slope']:.3f}"
        dif = "n/a" if r["slope_minus_log_lambda"] is None else f"{r['slope_minus_log_lambda']:+.3f}"
        rng = "-" if not r["fit_range_k"] else f"{r['fit_range_k'][0]}-{r['fit_range_k'][1]}"
        viol = "-" if r["bound_violations"] is None else str(r["bound_violations"])
        ratio = "-" if r["max_gap_over_bound"] is None else f"{r['max_gap_over_bound']:.3f}"
        lines.append(f"{r['family']:<11}{r['lambda']:>7}{r['log_lambda']:>9.3f}{s:>9}{dif:>8}{rng:>10}"
                     f"{r['log_spectral_radius']:>9.3f}{r['data_lambda_max']:>10.4f}{r['data_lambda_mean']:>10.4f}{viol:>6}{ratio:>11}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small CI run (H=64, T=100, k <= 60, orthogonal W only)")
    ap.add_argument("--out", default="runs/stable_rnn", help="output folder (default runs/stable_rnn)")
    ap.add_argument("--seed", type=int, default=None, help="override the seed (default 0)")
    ap.add_argument("--k-max", dest="k_max", type=int, default=None, help="override the largest k")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _main(args)
    finally:
        torch.set_num_threads(threads)  # main() may run in-process (tests): leave torch as it was


def _main(args) -> int:
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("seed", "k_max"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if cfg["k_max"] >= cfg["T"]:
        raise SystemExit(f"--k-max must be below T = {cfg['T']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    res = run(cfg)
    rows = res["rows"]
    plot(rows, out / "truncation.png", cfg)
    doc = {"experiment": "truncation (Lemma 1)", "mode": "quick" if args.quick else "full", "config": cfg,
           "seed": cfg["seed"], "torch": torch.__version__, "python": sys.version.split()[0],
           "machine": platform.machine(), "seconds": time.perf_counter() - t0, "rows": rows}
    (out / "truncation.json").write_text(json.dumps(doc, indent=1))
    print(f"Lemma 1: ||h_T - h_T^k|| vs k, tanh RNN H={cfg['hidden']}, T={cfg['T']}, ||x_t|| <= {cfg['input_bound']}, "
          f"seed {cfg['seed']} ({doc['mode']} mode, {doc['seconds']:.1f} s)")
    print("slope = fitted d log(gap) / dk (geometric mean over sequences, gaps above "
          f"{cfg['noise_floor']:g}); diff = slope - log(lambda); viol = k with gap > Lemma 1 bound "
          "(above the noise floor); gap/bound = its largest ratio")
    print(table(rows))
    print(f"wrote {out / 'truncation.json'} and {out / 'truncation.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
