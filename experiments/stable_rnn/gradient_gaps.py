"""Gradient and weight gaps between a stable RNN and its truncation during training
(Miller & Hardt, "Stable Recurrent Models": Lemma 2, Proposition 2, Fig. 1).

    python experiments/stable_rnn/gradient_gaps.py                          # full
    python experiments/stable_rnn/gradient_gaps.py --quick --out /tmp/gaps  # CI (seconds)
    python experiments/stable_rnn/gradient_gaps.py --steps-list 30,100,300,1000 --sweep-ks 2,5,10 \
        --out runs/stable_rnn --doc docs/results/stability.md       # + weight gap vs N, doc section

What the sources state (the slides, ``seeds/002_e0ce570a88c4aff3.txt``; constants
suppressed there): the gradients of the recurrent model's loss and of its k-truncation's loss
with the same parameters differ by ``gamma k lambda^k`` (Lemma 2); and, under the assumptions of
Lemmas 2 and 3, after N steps of projected gradient descent with step size ``alpha_t = alpha/t``,
Proposition 2::

    ||w_recurr^N - w_trunc^N|| <= alpha * gamma * k * lambda^k * N^(alpha*beta + 1)

Ours (a re-derivation, not the source's; the projection is non-expansive, the gradient
beta-Lipschitz): the per-step recursion::

    d_{t+1} <= (1 + a_t beta) d_t + a_t gamma k lambda^k,   d_t = ||w_t^recurrent - w_t^truncated||

gives ``d_N <= alpha gamma k lambda^k N^{alpha beta} (1 + 1/(alpha beta))`` for ``a_t = alpha/t``
(a smaller exponent than the slides' ``alpha*beta + 1``), and
``((1 + alpha beta)^N - 1) gamma k lambda^k / beta`` (exponential in ``N``) for a constant step
``a_t = alpha``, for which the slides state no bound. Both stay geometric in k. The page
(report.py) quotes the slides' form and labels this one as ours.

The instance (random, Gaussian, as in the paper's Fig. 1): inputs ``x_t ~ N(0, I)``; targets
``y_t = c . h*_t + noise`` from a random teacher tanh RNN (``||W*||_2 = teacher_lambda``); the
student is ``seq2d.rnn`` (tanh) with a linear readout, squared loss on the last ``n_out``
positions of each sequence. The truncated student is ``seq2d.truncated_rnn(student, k)`` (the
feed-forward, weight-tied model that sees the last k inputs) with a copy of the readout. Both
are trained full-batch by projected gradient descent: after each step the recurrent matrix is
projected onto ``||W_hh||_2 <= lambda`` (:class:`seq2d.stability.SpectralClip` for the RNN,
:func:`seq2d.stability.project_spectral_` for the truncated model's tied block).

Measured: (a) the gradient gap ``||grad_full - grad_trunc||`` at the shared initialisation,
against k; (b) the weight gap after N steps, against k, for steps ``alpha/t`` and a constant
``alpha``. Outputs in ``--out``: ``gradient_gaps.json`` (config, seed, all numbers, fitted
slopes of log gap against k compared with log lambda) and ``gradient_gaps.png``.

With ``--steps-list N1,N2,...`` (c): for a few fixed k (``--sweep-ks``), the weight gap after each
N of the list, for both step rules (each model is trained once, to the largest N, and the gap
is recorded at every N of the list), the fitted log-log slope of gap vs N, and a third plot
panel. ``--quick`` uses a tiny list by default. ``--doc PATH`` writes the ``gaps`` section of
PATH (report.py's text plus the N table and a paragraph worded from the numbers).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch
from torch import nn

import seq2d
from seq2d.stability import SpectralClip, certified_lambda, data_lambda, project_spectral_

# ----------------------------------------------------------------------------- defaults
FULL = dict(
    input=8,              # input features d
    hidden=32,            # student hidden size H
    teacher_hidden=32,
    teacher_lambda=0.8,   # ||W*||_2 of the teacher
    noise=0.1,            # target noise std
    T=64,                 # sequence length
    n_out=16,             # loss on the last n_out positions (each needs k <= T - n_out + 1)
    n=64,                 # sequences (full batch)
    lam=0.8,              # projection radius: ||W_hh||_2 <= lam (tanh: L = 1)
    ks=[1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 18, 22, 26, 30, 35, 40, 45],
    steps=300,            # N
    alpha=0.2,            # step alpha / t, and the constant step alpha for contrast
    noise_floor=1e-13,    # gaps below this (relative to the gradient / weight norm) are rounding noise
    seed=0,
)
QUICK = dict(FULL, input=4, hidden=12, teacher_hidden=12, T=32, n_out=8, n=32, ks=[1, 2, 3, 4, 6, 8, 12, 16, 20, 25],
             steps=25)
SWEEP_KS = [2, 5, 10]            # fixed k for the weight gap vs N (--sweep-ks)
QUICK_STEPS_LIST = [5, 10, 25]   # --quick's default --steps-list (full mode: none unless given)

NAMES = ["W_ih", "W_hh", "b", "readout.weight", "readout.bias"]


def make_data(cfg: dict, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """X (T, n, d) ~ N(0, 1); Y (n_out, n): the teacher's readout of its last n_out states + noise."""
    d, Ht, T, n = cfg["input"], cfg["teacher_hidden"], cfg["T"], cfg["n"]
    W = torch.randn(Ht, Ht, generator=g, dtype=torch.float64)
    W = W * (cfg["teacher_lambda"] / torch.linalg.matrix_norm(W, ord=2))
    U = torch.randn(Ht, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    c = torch.randn(Ht, generator=g, dtype=torch.float64) / math.sqrt(Ht) * 2
    X = torch.randn(T, n, d, generator=g, dtype=torch.float64)
    h = torch.zeros(n, Ht, dtype=torch.float64)
    ys = []
    for t in range(T):
        h = torch.tanh(h @ W.T + X[t] @ U.T)
        ys.append(h @ c)
    Y = torch.stack(ys)[T - cfg["n_out"]:] + cfg["noise"] * torch.randn(cfg["n_out"], n, generator=g, dtype=torch.float64)
    return X, Y


class Full:
    """The student RNN (seq2d.rnn) + readout; loss on the last n_out positions."""

    def __init__(self, rnn: seq2d.RNN, readout: nn.Linear, n_out: int):
        self.rnn, self.readout, self.n_out = rnn, readout, n_out
        self.params = [rnn.core.block(1, 0).weight, rnn.core.block(1, 1).weight, rnn.core.bias(1),
                       readout.weight, readout.bias]
        self.whh = rnn.core.block(1, 1).weight
        self.leaves = [*rnn.parameters(), *readout.parameters()]

    def predict(self, X):
        hs = self.rnn(X)[0][-self.n_out:]  # (n_out, n, H)
        return self.readout(hs).squeeze(-1)


class Truncated:
    """seq2d.truncated_rnn(rnn, k) + a copy of the readout, applied to the last n_out windows."""

    def __init__(self, rnn: seq2d.RNN, readout: nn.Linear, k: int, n_out: int):
        self.tr, self.readout, self.k, self.n_out = seq2d.truncated_rnn(rnn, k), copy.deepcopy(readout), k, n_out
        core = self.tr.core  # slots: x_1..x_k, then h_1..h_k (see seq2d.TruncatedRNN)
        # k = 1 has no W_hh position (one step from a zero state): it keeps its initial value
        whh = core.block(k + 1, k).weight if k > 1 else nn.Parameter(rnn.core.block(1, 1).weight.detach().clone())
        self.params = [core.block(k, 0).weight, whh, core.bias(k), self.readout.weight, self.readout.bias]
        self.whh = whh if k > 1 else None
        self.leaves = [*self.tr.parameters(), *self.readout.parameters()]

    def predict(self, X):
        T, n, d = X.shape
        win = X.unfold(0, self.k, 1)[-self.n_out:]  # (n_out, n, d, k): the last n_out windows
        win = win.permute(0, 1, 3, 2).reshape(self.n_out, n, self.k * d)  # oldest input first
        return self.readout(self.tr.core(win)).squeeze(-1)


def loss_fn(model, X, Y):
    return 0.5 * ((model.predict(X) - Y) ** 2).mean()


def grads(model, X, Y) -> list[torch.Tensor]:
    """The loss's gradient at each of ``model.params``.

    The block weights and the bias are views of seq2d's parameter store (``StoreView``): one
    ``backward`` fills the leaves (the store's Parameters and the readout's) and each view's
    ``.grad`` reads its region of the store's gradient (``torch.autograd.grad`` with respect to
    the views gives the same numbers, docs/concepts.md "Autograd with a handle as input"). A
    position absent from the model (W_hh of a k = 1 truncation) gets zeros."""
    for q in model.leaves:
        q.grad = None
    loss_fn(model, X, Y).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in model.params]


def flat(ts) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in ts])


def train(model, X, Y, cfg: dict, rule: str, project) -> float:
    """N steps of projected gradient descent; returns the final loss."""
    return train_recording(model, X, Y, cfg, rule, project, [cfg["steps"]])[1][-1]


def train_recording(model, X, Y, cfg: dict, rule: str, project, steps_list) -> tuple[list[torch.Tensor], list[float]]:
    """Projected gradient descent (step alpha/t or constant alpha) to max(steps_list); returns the flat
    weights and the loss after each N in steps_list."""
    want, ws, losses = set(steps_list), [], []
    for t in range(1, max(steps_list) + 1):
        a = cfg["alpha"] / t if rule == "alpha/t" else cfg["alpha"]
        gs = grads(model, X, Y)
        with torch.no_grad():
            for p, g in zip(model.params, gs):
                p.sub_(a * g)
        project()
        if t in want:
            ws.append(flat(model.params).clone())
            with torch.no_grad():
                losses.append(float(loss_fn(model, X, Y)))
    return ws, losses


def loglog_slope(xs, ys):
    """Least-squares slope of log y against log x (None if fewer than 2 positive points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if y > 0 and math.isfinite(y)]
    if len(pts) < 2:
        return None
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def steps_sweep(rnn0, readout0, X, Y, cfg: dict, steps_list: list[int], ks: list[int]) -> dict:
    """(c) weight gap vs N for fixed k: one training run per (model, rule) to max N, gap read at each N."""
    out = {"steps_list": steps_list, "ks": ks, "rules": {}}
    for rule in ("alpha/t", "constant"):
        t0 = time.perf_counter()
        full = Full(copy.deepcopy(rnn0), copy.deepcopy(readout0), cfg["n_out"])
        clip = SpectralClip(full.rnn, cfg["lam"])
        w_full, loss_full = train_recording(full, X, Y, cfg, rule, clip.project, steps_list)
        per_k = {}
        for k in ks:
            tr = Truncated(rnn0, readout0, k, cfg["n_out"])
            proj = (lambda tr=tr: project_spectral_(tr.whh.data, cfg["lam"])) if tr.whh is not None else (lambda: None)
            w_tr, _ = train_recording(tr, X, Y, cfg, rule, proj, steps_list)
            gap = [float((a - b).norm()) for a, b in zip(w_full, w_tr)]
            local = [loglog_slope(steps_list[i:i + 2], gap[i:i + 2]) for i in range(len(steps_list) - 1)]
            per_k[str(k)] = {"weight_gap": gap, "loglog_slope": loglog_slope(steps_list, gap), "local_loglog_slopes": local}
        out["rules"][rule] = {"by_k": per_k, "full_loss": loss_full, "seconds": time.perf_counter() - t0}
    return out


def fit_slope(ks, ys, floor):
    pts = [(k, math.log(v)) for k, v in zip(ks, ys) if v > floor]
    if len(pts) < 3:
        return None
    n = len(pts)
    mk, my = sum(k for k, _ in pts) / n, sum(v for _, v in pts) / n
    return sum((k - mk) * (v - my) for k, v in pts) / sum((k - mk) ** 2 for k, _ in pts)


def run(cfg: dict, steps_list: list[int] | None = None, sweep_ks: list[int] | None = None) -> dict:
    if max(cfg["ks"] + (sweep_ks or [])) > cfg["T"] - cfg["n_out"] + 1:
        raise ValueError(f"every k must be <= T - n_out + 1 = {cfg['T'] - cfg['n_out'] + 1}, got {max(cfg['ks'])}")
    g = torch.Generator().manual_seed(cfg["seed"])
    X, Y = make_data(cfg, g)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg["seed"])
        rnn0 = seq2d.rnn(cfg["input"], cfg["hidden"], dtype=torch.float64)
        readout0 = nn.Linear(cfg["hidden"], 1, dtype=torch.float64)
    SpectralClip(rnn0, cfg["lam"]).project()  # start inside the constraint set
    lam_cert = certified_lambda(rnn0)["lambda"]
    # the gaps decay at the rate of products of state Jacobians: at most lambda per step, and
    # for a generic (non-normal) W_hh closer to its spectral radius than to its norm
    rho = float(torch.linalg.eigvals(rnn0.core.block(1, 1).weight.detach()).abs().max())
    dl = data_lambda(rnn0, X, iters=20, generator=torch.Generator().manual_seed(cfg["seed"]))

    # (a) gradient gap at the shared initialisation
    full0 = Full(copy.deepcopy(rnn0), copy.deepcopy(readout0), cfg["n_out"])
    gf = grads(full0, X, Y)
    g_full = flat(gf)
    w0 = flat(full0.params)
    grad_gap, grad_gap_parts = [], []
    for k in cfg["ks"]:
        g_tr = grads(Truncated(rnn0, readout0, k, cfg["n_out"]), X, Y)
        grad_gap.append(float((g_full - flat(g_tr)).norm()))
        grad_gap_parts.append({nm: float((a - b).norm()) for nm, a, b in zip(NAMES, gf, g_tr)})

    # (b) weight gap after N steps of projected gradient descent, two step rules
    rules = {}
    for rule in ("alpha/t", "constant"):
        t0 = time.perf_counter()
        full = Full(copy.deepcopy(rnn0), copy.deepcopy(readout0), cfg["n_out"])
        clip = SpectralClip(full.rnn, cfg["lam"])
        full_loss = train(full, X, Y, cfg, rule, clip.project)
        w_full = flat(full.params)
        w_gap, tr_loss, moved = [], [], float((w_full - w0).norm())
        for k in cfg["ks"]:
            tr = Truncated(rnn0, readout0, k, cfg["n_out"])
            proj = (lambda tr=tr: project_spectral_(tr.whh.data, cfg["lam"])) if tr.whh is not None else (lambda: None)
            tr_loss.append(train(tr, X, Y, cfg, rule, proj))
            w_gap.append(float((w_full - flat(tr.params)).norm()))
        rules[rule] = {"weight_gap": w_gap, "full_final_loss": full_loss, "truncated_final_loss": tr_loss,
                       "distance_travelled_full": moved, "final_certified_lambda": certified_lambda(full.rnn)["lambda"],
                       "slope": fit_slope(cfg["ks"], w_gap, cfg["noise_floor"] * max(1.0, float(w_full.norm()))),
                       "seconds": time.perf_counter() - t0}
    sweep = steps_sweep(rnn0, readout0, X, Y, cfg, steps_list, sweep_ks) if steps_list else None
    with torch.no_grad():
        init_loss = float(loss_fn(full0, X, Y))
    return {"steps_sweep": sweep,
        "ks": cfg["ks"], "certified_lambda_init": lam_cert, "log_lambda": math.log(cfg["lam"]),
        "spectral_radius_init": rho, "log_spectral_radius_init": math.log(rho),
        "data_lambda_init": {"max": dl["max"], "mean": dl["mean"]}, "initial_loss": init_loss,
        "grad_norm_full": float(g_full.norm()), "gradient_gap": grad_gap, "gradient_gap_by_parameter": grad_gap_parts,
        "gradient_gap_slope": fit_slope(cfg["ks"], grad_gap, cfg["noise_floor"] * max(1.0, float(g_full.norm()))),
        "rules": rules,
    }


def plot(res: dict, cfg: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks, lam, lam_d = res["ks"], cfg["lam"], res["data_lambda_init"]["mean"]
    sw = res.get("steps_sweep")
    fig, axes = plt.subplots(1, 3 if sw else 2, figsize=(18 if sw else 12, 4.6))
    a, b = axes[0], axes[1]
    gg = res["gradient_gap"]
    a.semilogy(ks, gg, "o-", label="||∇ full − ∇ truncated|| at init")
    for lm, ls, name in ((lam, "--", "certified λ"), (lam_d, ":", "data λ (mean)"),
                         (res["spectral_radius_init"], "-.", "ρ(W_hh)")):
        ref = [k * lm ** k for k in ks]
        a.semilogy(ks, [gg[0] * r / ref[0] for r in ref], ls, color="gray", label=f"∝ k r^k, r = {name} = {lm:.3f}")
    a.set_xlabel("truncation length k")
    a.set_ylabel("gradient gap")
    s = res["gradient_gap_slope"]
    a.set_title(f"(a) gradient gap (Lemma 2): slope {'n/a' if s is None else f'{s:.3f}'} vs log λ {math.log(lam):.3f}",
                fontsize=10)
    a.legend(fontsize=8)
    for rule, mk in (("alpha/t", "o-"), ("constant", "s-")):
        r = res["rules"][rule]
        lab = f"step α/t (α={cfg['alpha']})" if rule == "alpha/t" else f"constant step α={cfg['alpha']}"
        sl = "n/a" if r["slope"] is None else f"{r['slope']:.3f}"
        b.semilogy(ks, [max(v, 1e-17) for v in r["weight_gap"]], mk, label=f"{lab}: slope {sl}")
    b.set_xlabel("truncation length k")
    b.set_ylabel(f"||w_full − w_trunc|| after N = {cfg['steps']} steps")
    b.set_title("(b) weight gap after projected gradient descent (Prop. 2)", fontsize=10)
    b.legend(fontsize=8)
    if sw:
        c = axes[2]
        for rule, ls in (("alpha/t", "-"), ("constant", "--")):
            for i, k in enumerate(sw["ks"]):
                r = sw["rules"][rule]["by_k"][str(k)]
                sl = "n/a" if r["loglog_slope"] is None else f"{r['loglog_slope']:.2f}"
                c.loglog(sw["steps_list"], [max(v, 1e-17) for v in r["weight_gap"]], ls, marker="os"[rule == "constant"],
                         color=f"C{i}", label=f"k={k}, step {'α/t' if rule == 'alpha/t' else 'const α'}: slope {sl}")
        c.set_xlabel("training steps N")
        c.set_ylabel("||w_full − w_trunc|| after N steps")
        c.set_title("(c) weight gap vs N (log-log; slope = fitted exponent)", fontsize=10)
        c.legend(fontsize=7)
    fig.suptitle(f"random Gaussian instances: d={cfg['input']}, H={cfg['hidden']}, T={cfg['T']}, n={cfg['n']}, "
                 f"||W_hh|| ≤ λ = {lam}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small CI run (H=12, T=32, 10 values of k, 25 steps)")
    ap.add_argument("--out", default="runs/stable_rnn", help="output folder (default runs/stable_rnn)")
    ap.add_argument("--seed", type=int, default=None, help="override the seed (default 0)")
    ap.add_argument("--steps", type=int, default=None, help="override N, the number of training steps")
    ap.add_argument("--alpha", type=float, default=None, help="override the step alpha")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--steps-list", default=None,
                    help="comma-separated N (e.g. 30,100,300,1000): also record the weight gap after each N for the "
                         f"--sweep-ks, both step rules (default: none; {','.join(map(str, QUICK_STEPS_LIST))} with --quick; "
                         "'none' turns it off)")
    ap.add_argument("--sweep-ks", default=",".join(map(str, SWEEP_KS)),
                    help=f"comma-separated k for --steps-list (default {','.join(map(str, SWEEP_KS))})")
    ap.add_argument("--doc", default=None,
                    help="also write the 'gaps' section of this markdown file (e.g. docs/results/stability.md) and "
                         "copy the JSON and plot next to it")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _main(args)
    finally:
        torch.set_num_threads(threads)  # main() may run in-process (tests): leave torch as it was


def _main(args) -> int:
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("seed", "steps", "alpha"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.steps_list is None:
        steps_list = list(QUICK_STEPS_LIST) if args.quick else None
    elif args.steps_list.strip().lower() in ("", "none"):
        steps_list = None
    else:
        steps_list = sorted({int(v) for v in args.steps_list.split(",") if v.strip()})
        if steps_list[0] < 1:
            raise SystemExit("--steps-list: every N must be >= 1")
    sweep_ks = [int(v) for v in args.sweep_ks.split(",") if v.strip()] if steps_list else None
    load0 = _loadavg()
    t0 = time.perf_counter()
    res = run(cfg, steps_list, sweep_ks)
    plot(res, cfg, out / "gradient_gaps.png")
    doc = {"experiment": "gradient and weight gaps (Lemma 2, Proposition 2)", "mode": "quick" if args.quick else "full",
           "config": cfg, "seed": cfg["seed"], "torch": torch.__version__, "python": sys.version.split()[0],
           "machine": platform.machine(), "seconds": time.perf_counter() - t0,
           "command": "python experiments/stable_rnn/gradient_gaps.py " + " ".join(args.argv),
           "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": _cpu_name(),
           "nproc": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "loadavg_start": load0, "loadavg_end": _loadavg(), **res}
    (out / "gradient_gaps.json").write_text(json.dumps(doc, indent=1))
    print(f"gradient / weight gaps, RNN vs k-truncation: d={cfg['input']}, H={cfg['hidden']}, T={cfg['T']}, n={cfg['n']}, "
          f"lambda={cfg['lam']}, N={cfg['steps']}, alpha={cfg['alpha']}, seed {cfg['seed']} ({doc['mode']} mode, "
          f"{doc['seconds']:.1f} s)")
    print(f"init: certified lambda {res['certified_lambda_init']:.4f}, data lambda max {res['data_lambda_init']['max']:.4f} "
          f"mean {res['data_lambda_init']['mean']:.4f}, loss {res['initial_loss']:.4f}, ||grad|| {res['grad_norm_full']:.3g}")
    head = f"{'k':>4}{'grad gap':>12}{'w gap a/t':>12}{'w gap const':>13}{'loss a/t':>10}{'loss const':>12}"
    print(head)
    ra, rc = res["rules"]["alpha/t"], res["rules"]["constant"]
    for i, k in enumerate(res["ks"]):
        print(f"{k:>4}{res['gradient_gap'][i]:>12.3e}{ra['weight_gap'][i]:>12.3e}{rc['weight_gap'][i]:>13.3e}"
              f"{ra['truncated_final_loss'][i]:>10.4f}{rc['truncated_final_loss'][i]:>12.4f}")
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"full RNN final loss: a/t {ra['full_final_loss']:.4f}, constant {rc['full_final_loss']:.4f}; "
          f"fitted slopes of log gap vs k: gradient {fmt(res['gradient_gap_slope'])}, weight a/t {fmt(ra['slope'])}, "
          f"weight constant {fmt(rc['slope'])}; log(lambda) = {math.log(cfg['lam']):.3f}, "
          f"log(data lambda mean) = {math.log(res['data_lambda_init']['mean']):.3f}, "
          f"log(spectral radius of W_hh at init) = {res['log_spectral_radius_init']:.3f}")
    sw = res["steps_sweep"]
    if sw:
        print(f"weight gap vs N (steps list {sw['steps_list']}; {sw['rules']['alpha/t']['seconds']:.1f} s + "
              f"{sw['rules']['constant']['seconds']:.1f} s):")
        print(f"{'rule':>9}{'k':>4}" + "".join(f"{'N=' + str(n):>11}" for n in sw["steps_list"]) + f"{'slope':>8}")
        for rule in ("alpha/t", "constant"):
            for k in sw["ks"]:
                r = sw["rules"][rule]["by_k"][str(k)]
                print(f"{rule:>9}{k:>4}" + "".join(f"{v:>11.3e}" for v in r["weight_gap"]) + f"{fmt(r['loglog_slope']):>8}")
    print(f"wrote {out / 'gradient_gaps.json'} and {out / 'gradient_gaps.png'}")
    if args.doc:
        write_doc(doc, out, Path(args.doc))
        print(f"wrote the gaps section of {args.doc}")
    return 0


def _loadavg() -> list[float] | None:
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def _cpu_name() -> str:
    try:
        from seq2d.envinfo import cpu_name
        return cpu_name()
    except Exception:  # noqa: BLE001 -- informational only
        return platform.processor() or platform.machine()


def _report_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("stable_rnn_report", Path(__file__).with_name("report.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_doc(g: dict, out: Path, doc: Path) -> None:
    """The 'gaps' section of doc: report.py's gaps_section, then (c) if it was run; JSON and plot copied next to it."""
    import shutil

    rep = _report_module()
    assets = doc.parent / "stability"
    assets.mkdir(parents=True, exist_ok=True)
    for f in ("gradient_gaps.json", "gradient_gaps.png"):
        shutil.copy(out / f, assets / f)
    rep.write_section(doc, "gaps", rep.gaps_body(g, assets.name))


if __name__ == "__main__":
    raise SystemExit(main())
