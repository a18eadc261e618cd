"""Proposition 2 / Fig. 1 over seeds, lambdas, both step rules and a step-size grid: the weight gap
between a stable RNN and its k-truncation against the number of steps N, up to the largest N of the steps list.

    python experiments/stable_rnn/gap_sweep.py --out runs/stable_rnn              # full (minutes)
    python experiments/stable_rnn/gap_sweep.py --quick --out /tmp/sweep           # CI (seconds)
    # the page section, the plot and the JSON next to the page (--doc); again from the JSON alone:
    python experiments/stable_rnn/gap_sweep.py --from-json docs/results/stability/gap_sweep.json \\
        --out runs/stable_rnn --doc docs/results/stability.md

The instance is gradient_gaps.py's (random Gaussian inputs, targets from a random teacher tanh RNN,
squared loss on the last n_out positions, full-batch projected gradient descent with
``||W_hh||_2 <= lambda`` after every step), at a smaller size, for every seed x lambda x step rule
x step size of the grid at once: the models are batched along a leading configuration axis
(plain torch, ``torch.bmm``), one Python step per gradient step for all of them. Every
configuration starts from ``seq2d.rnn``'s initialisation for its seed, projected onto its lambda.
The batched model is checked against gradient_gaps.py's ``Full`` / ``Truncated`` (seq2d.rnn and
seq2d.truncated_rnn): the loss of two configurations, at the start and at randomly perturbed weights;
the largest relative difference is recorded in the JSON (``check``) and the run stops if it exceeds
1e-9. Every weight is trained here (the batched tensors are the leaves autograd differentiates).

The step size alpha is chosen per (rule, lambda) from the grid, by the mean final training loss
(at the largest N) of the recurrent model alone over the tuning seeds (``tune_seeds``): for ``alpha/t`` the alpha with the lowest loss (diverged
ones excluded); for the constant step the alpha whose loss is closest (in log) to that one, so that
both rules are compared at a comparable training loss. The grid, every alpha's losses and the choice
are in the JSON (``selection``).

Measured per configuration: the weight gap ``||w_recurr^N - w_trunc^N||`` (all parameters) at every
N of the list; the fitted log-log slope of gap against N for N >= ``fit_from``; the local slopes;
and ``beta_hat``, the largest eigenvalue of the recurrent model's loss Hessian (power iteration with
Hessian-vector products) at the start and at the end: a lower bound on the Lipschitz constant beta of
the gradient, so ``alpha * beta_hat + 1`` is a lower bound on the slides' exponent ``alpha*beta + 1``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

#: The rule that picks alpha, fixed in this file before the run whose numbers it picks from (issue 34, item 3: the
#: run before it chose alpha = 2, the top of its alpha/t grid). The page quotes it above the grid's numbers.
CHOICE_RULE = (
    "For each lambda, the recurrent model alone is trained to the largest N on the tuning seed(s) for every alpha of "
    "the grid. alpha/t takes the alpha with the lowest mean final training loss (alphas that diverge on a tuning seed "
    "excluded); the constant step takes the alpha whose final loss is closest, in log, to that one. If the alpha/t "
    "choice is the grid's largest (smallest) alpha, the grid is extended by doubling (halving) it and the rule is "
    "applied again; likewise for the constant step when its choice is at an edge of the grid and the loss it must "
    "match lies beyond that edge; at most `max_extensions` times per (lambda, rule); a choice still at an edge after "
    "that is reported as such. A seed of the sweep that then diverges at the chosen alpha sends that (lambda, rule) to "
    "the next smaller alpha of the grid, on every seed.")
FULL = dict(input=4, hidden=16, teacher_hidden=16, teacher_lambda=0.8, noise=0.1, T=16, n_out=8, n=16,
            lams=[0.5, 0.8, 0.95], k=5, seeds=[0, 1, 2, 3, 4], tune_seeds=[0],
            alphas={"alpha/t": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0], "constant": [0.001, 0.002, 0.005, 0.01, 0.02, 0.05]},
            steps_list=[1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 3000],
            curve_points=12,  # per decade: the gap, the distance moved and the loss recorded on this log grid of N too
            fit_from=10, beta_iters=20, diverged_loss=1e3, max_extensions=3)
QUICK = dict(FULL, hidden=8, teacher_hidden=8, T=12, n_out=4, n=16, lams=[0.5, 0.9], k=3, seeds=[0, 1],
             alphas={"alpha/t": [0.5, 2.0], "constant": [0.01, 0.05]}, steps_list=[1, 3, 10, 30, 60], fit_from=3,
             beta_iters=3, curve_points=6, max_extensions=1)
RULES = ("alpha/t", "constant")


def _gaps_module():
    spec = importlib.util.spec_from_file_location("stable_rnn_gradient_gaps", Path(__file__).with_name("gradient_gaps.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _project(W: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Batched SpectralClip: singular values above lam[c] become lam[c] (1 - a few eps), as
    seq2d.stability.project_spectral_ does; matrices within their bound are left as they are."""
    U, S, Vh = torch.linalg.svd(W)
    bound = lam[:, None]
    over = S[:, :1] > bound
    S2 = torch.where(S > bound, bound * (1 - 64 * W.shape[-1] * torch.finfo(torch.float64).eps), S)
    return torch.where(over[:, :, None], (U * S2[:, None, :]) @ Vh, W)


class Batch:
    """Every configuration's recurrent model (``full``) or k-truncation (``trunc``) as batched tensors:
    W_ih (C, H, d), W_hh (C, H, H), b (C, H), readout r (C, H), r0 (C,)."""

    def __init__(self, params: list[torch.Tensor], X: torch.Tensor, Y: torch.Tensor, n_out: int, k: int | None):
        self.p = [q.clone().requires_grad_(True) for q in params]
        self.X, self.Y, self.n_out, self.k = X, Y, n_out, k  # X (C, T, n, d), Y (C, n_out, n)

    def losses(self) -> torch.Tensor:
        Wih, Whh, b, r, r0 = self.p
        X = self.X
        C, T, n, d = X.shape
        if self.k is None:
            h = X.new_zeros(C, n, Whh.shape[1])
            hs = []
            for t in range(T):
                h = torch.tanh(torch.bmm(h, Whh.transpose(1, 2)) + torch.bmm(X[:, t], Wih.transpose(1, 2)) + b[:, None])
                if t >= T - self.n_out:
                    hs.append(h)
            H = torch.stack(hs, 1)  # (C, n_out, n, H)
        else:
            win = X[:, T - self.n_out - self.k + 1:]  # the inputs the last n_out windows see
            h = None
            for j in range(self.k):
                xj = win[:, j:j + self.n_out].reshape(C, self.n_out * n, d)
                pre = torch.bmm(xj, Wih.transpose(1, 2)) + b[:, None]
                h = torch.tanh(pre if h is None else pre + torch.bmm(h, Whh.transpose(1, 2)))
            H = h.reshape(C, self.n_out, n, -1)
        pred = (H * r[:, None, None]).sum(-1) + r0[:, None, None]
        return 0.5 * ((pred - self.Y) ** 2).mean(dim=(1, 2))

    def flat(self) -> torch.Tensor:
        return torch.cat([q.detach().reshape(q.shape[0], -1) for q in self.p], 1)


def init_params(cfg: dict, gg, seeds: list[int], combos: list[tuple]) -> tuple:
    """Per seed x (lambda, rule, alpha) of ``combos``: the seq2d.rnn start for the seed projected onto lambda,
    and the seed's data. Returns the stacked parameters, X, Y, the configurations' labels, and per seed
    (X, Y, rnn, readout)."""
    import seq2d

    per_seed = {}
    for s in seeds:
        X, Y = gg.make_data(dict(cfg, seed=s), torch.Generator().manual_seed(s))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            rnn0 = seq2d.rnn(cfg["input"], cfg["hidden"], dtype=torch.float64)
            readout0 = torch.nn.Linear(cfg["hidden"], 1, dtype=torch.float64)
        per_seed[s] = (X, Y, rnn0, readout0)
    labels, params, Xs, Ys = [], [[] for _ in range(5)], [], []
    for s in seeds:
        X, Y, rnn0, readout0 = per_seed[s]
        core = rnn0.core
        base_p = [core.block(1, 0).weight, core.block(1, 1).weight, core.bias(1), readout0.weight[0], readout0.bias[0]]
        for lam, rule, a in combos:
            labels.append({"seed": s, "lam": lam, "rule": rule, "alpha": a})
            for i, q in enumerate(base_p):
                params[i].append(q.detach().clone())
            Xs.append(X)
            Ys.append(Y)
    P = [torch.stack(q) for q in params]
    lam = torch.tensor([c["lam"] for c in labels], dtype=torch.float64)
    P[1] = _project(P[1], lam)
    return P, torch.stack(Xs), torch.stack(Ys), labels, per_seed


def check(cfg: dict, gg, P, X, Y, labels, per_seed) -> float:
    """Largest relative difference of the loss between the batched model and gradient_gaps.py's seq2d-based
    ``Full`` / ``Truncated`` (seq2d.rnn, seq2d.truncated_rnn), for the first and the last configuration, at the
    start and after a random perturbation of every weight (the gradients are autograd's of the same forward)."""
    import copy

    from seq2d.stability import SpectralClip

    worst = 0.0
    for c in (0, len(labels) - 1):
        lab = labels[c]
        Xs, Ys, rnn0, readout0 = per_seed[lab["seed"]]
        for shake in (0.0, 0.1):
            rnn, ro = copy.deepcopy(rnn0), copy.deepcopy(readout0)
            g = torch.Generator().manual_seed(c)
            with torch.no_grad():
                for q in list(rnn.parameters()) + list(ro.parameters()):
                    q.add_(shake * torch.randn(q.shape, generator=g, dtype=q.dtype))
            SpectralClip(rnn, lab["lam"]).project()
            core = rnn.core
            mine = [core.block(1, 0).weight, core.block(1, 1).weight, core.bias(1), ro.weight[0], ro.bias[0]]
            mine = [q.detach().clone()[None] for q in mine]
            for k in (None, cfg["k"]):
                ref = gg.Full(rnn, ro, cfg["n_out"]) if k is None else gg.Truncated(rnn, ro, k, cfg["n_out"])
                with torch.no_grad():
                    l_ref = float(gg.loss_fn(ref, Xs, Ys))
                    loss = float(Batch(mine, X[c:c + 1], Y[c:c + 1], cfg["n_out"], k).losses()[0])
                worst = max(worst, abs(loss - l_ref) / abs(l_ref))
    return worst


def top_hessian_eig(model: Batch, iters: int, seed: int = 0) -> torch.Tensor:
    """Per configuration, the power-iteration estimate of the loss Hessian's largest |eigenvalue|."""
    g = torch.Generator().manual_seed(seed)
    v = [torch.randn(q.shape, generator=g, dtype=q.dtype) for q in model.p]
    lam = None
    for _ in range(iters):
        nrm = torch.sqrt(sum((u.reshape(u.shape[0], -1) ** 2).sum(1) for u in v)).clamp_min(1e-300)
        v = [u / nrm.view(-1, *([1] * (u.dim() - 1))) for u in v]
        grads = torch.autograd.grad(model.losses().sum(), model.p, create_graph=True)
        hv = torch.autograd.grad(grads, model.p, grad_outputs=v)
        lam = sum((a * b).reshape(a.shape[0], -1).sum(1) for a, b in zip(hv, v))
        v = [h.detach() for h in hv]
    return lam.detach().abs()


def curve_grid(cfg: dict) -> list[int]:
    """The N at which every configuration's curve (gap, distance moved, loss) is recorded: ``curve_points`` per decade,
    log-spaced from 1 to max(steps_list), rounded, plus the steps list itself."""
    top, per = max(cfg["steps_list"]), cfg.get("curve_points", 0)
    grid = {round(10 ** (i / per)) for i in range(int(math.log10(top) * per) + 1)} if per else set()
    return sorted({n for n in grid if 1 <= n <= top} | set(cfg["steps_list"]))


def train(cfg: dict, P, X, Y, labels, log=print, truncated: bool = True) -> dict:
    """The recurrent model (and, with ``truncated``, its k-truncation) of every configuration to
    max(steps_list); the gap and the losses at each N of the steps list, and on :func:`curve_grid` the gap, the
    distance each model moved from the common start and the recurrent model's loss (``curve``)."""
    Ns, C = cfg["steps_list"], len(labels)
    grid = curve_grid(cfg)
    lam = torch.tensor([c["lam"] for c in labels], dtype=torch.float64)
    alpha = torch.tensor([c["alpha"] for c in labels], dtype=torch.float64)
    decay = torch.tensor([c["rule"] == "alpha/t" for c in labels])
    full = Batch(P, X, Y, cfg["n_out"], None)
    trunc = Batch(P, X, Y, cfg["n_out"], cfg["k"]) if truncated else None
    models = (full, trunc) if truncated else (full,)
    alive = torch.ones(C, dtype=torch.bool)
    w0 = full.flat()
    beta0 = top_hessian_eig(full, cfg["beta_iters"]) if truncated else None
    with torch.no_grad():
        loss0 = full.losses()
    gap, lf, lt = [], [], []
    cv = {"gap": [], "moved": [], "moved_trunc": [], "loss": []}
    want, t0 = set(Ns), time.perf_counter()
    for t in range(1, max(Ns) + 1):
        step = torch.where(decay, alpha / t, alpha) * alive
        for m in models:
            loss = m.losses()
            gs = torch.autograd.grad(loss.sum(), m.p)
            with torch.no_grad():
                for q, gq in zip(m.p, gs):
                    q.sub_(step.view(-1, *([1] * (q.dim() - 1))) * torch.nan_to_num(gq, nan=0.0, posinf=0.0, neginf=0.0))
                bad = ~torch.isfinite(m.flat()).all(1) | ~torch.isfinite(loss) | (loss > cfg["diverged_loss"])
                if bad.any():
                    alive &= ~bad
                    for q in m.p:  # a diverged configuration is frozen at zero (and excluded from every result)
                        q[bad] = 0.0
                m.p[1].copy_(_project(m.p[1], lam))
        if t in grid:
            with torch.no_grad():
                wf = full.flat()
                cv["moved"].append((wf - w0).norm(dim=1).tolist())
                cv["loss"].append(full.losses().tolist())
                if truncated:
                    wt = trunc.flat()
                    cv["gap"].append((wf - wt).norm(dim=1).tolist())
                    cv["moved_trunc"].append((wt - w0).norm(dim=1).tolist())
        if t in want:
            with torch.no_grad():
                if truncated:
                    gap.append((full.flat() - trunc.flat()).norm(dim=1).tolist())
                    lt.append(trunc.losses().tolist())
                lf.append(full.losses().tolist())
            if t * 10 >= max(Ns) or t == Ns[-1]:
                log(f"  N = {t}: {time.perf_counter() - t0:.1f} s, {int(alive.sum())}/{C} configurations alive")
    beta1 = top_hessian_eig(full, cfg["beta_iters"]) if truncated else None
    moved = (full.flat() - w0).norm(dim=1)
    n_rec = sum(q[0].numel() for q in full.p[:3])  # W_ih, W_hh, b come first in flat()
    moved_rec = (full.flat() - w0)[:, :n_rec].norm(dim=1)
    out = []
    for c, lab in enumerate(labels):
        ok = bool(alive[c])
        row = dict(lab, diverged=not ok, full_loss=[v[c] for v in lf] if ok else None, initial_loss=float(loss0[c]),
                   moved=float(moved[c]) if ok else None, moved_recurrent=float(moved_rec[c]) if ok else None)
        if ok:
            row["curve"] = {"N": grid, **{key: [v[c] for v in vals] for key, vals in cv.items() if vals}}
        if truncated:
            gaps = [g[c] for g in gap]
            fit = [(n, v) for n, v in zip(Ns, gaps) if n >= cfg["fit_from"]]
            row.update(weight_gap=gaps if ok else None, trunc_loss=[v[c] for v in lt] if ok else None,
                       slope=_slope([n for n, _ in fit], [v for _, v in fit]) if ok else None,
                       local_slopes=[_slope(Ns[i:i + 2], gaps[i:i + 2]) for i in range(len(Ns) - 1)] if ok else None,
                       beta_hat_start=float(beta0[c]), beta_hat_end=float(beta1[c]) if ok else None)
        out.append(row)
    return {"configs": out, "train_seconds": time.perf_counter() - t0}


def _slope(xs, ys):
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if y is not None and y > 0 and math.isfinite(y)]
    if len(pts) < 2:
        return None
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def select(cfg: dict, configs: list[dict]) -> dict:
    """Per lambda: alpha/t's alpha by the lowest mean final loss over the tuning seeds; the constant step's alpha by the
    mean final loss closest (in log) to that one. Diverged (in any seed) alphas are excluded. The grid of a (lambda,
    rule) is every alpha tuned for it (the configured grid and its extensions, :func:`extensions`)."""
    sel = {}
    for lam in cfg["lams"]:
        table = {}
        for rule in RULES:
            rows = {}
            for a in sorted({c["alpha"] for c in configs if c["lam"] == lam and c["rule"] == rule}):
                cs = [c for c in configs if c["lam"] == lam and c["rule"] == rule and c["alpha"] == a]
                div = any(c["diverged"] for c in cs)
                rows[str(a)] = {"diverged_seeds": sum(c["diverged"] for c in cs),
                                "mean_final_loss": None if div else sum(c["full_loss"][-1] for c in cs) / len(cs)}
            table[rule] = rows
        ok_t = {a: r["mean_final_loss"] for a, r in table["alpha/t"].items() if r["mean_final_loss"] is not None}
        ok_c = {a: r["mean_final_loss"] for a, r in table["constant"].items() if r["mean_final_loss"] is not None}
        if not ok_t or not ok_c:
            sel[str(lam)] = {"grid": table, "alpha": None}
            continue
        a_t = min(ok_t, key=ok_t.get)
        a_c = min(ok_c, key=lambda a: abs(math.log(ok_c[a]) - math.log(ok_t[a_t])))
        sel[str(lam)] = {"grid": table, "alpha": {"alpha/t": float(a_t), "constant": float(a_c)},
                         "final_loss": {"alpha/t": ok_t[a_t], "constant": ok_c[a_c]}}
    return sel


def extensions(sel: dict) -> list[tuple]:
    """The (lambda, rule, alpha) that :data:`CHOICE_RULE` adds to the grid: the alpha beyond an edge at which a choice
    sits (alpha/t: the lowest loss at the largest or smallest alpha tried; constant: the closest loss at an edge while
    the loss to match lies beyond it). An edge whose next alpha diverged is not extended (the divergence bounds it)."""
    out = []
    for lam, s in sel.items():
        ch = s.get("alpha")
        if not ch:
            continue
        for rule in RULES:
            grid = s["grid"][rule]
            tried = sorted(float(a) for a in grid)
            a, loss = ch[rule], grid[str(ch[rule])]["mean_final_loss"]
            target = s["final_loss"]["alpha/t"]
            up = a == tried[-1] and (rule == "alpha/t" or loss > target)
            down = a == tried[0] and (rule == "alpha/t" or loss < target)
            if up:
                out.append((float(lam), rule, a * 2))
            elif down:
                out.append((float(lam), rule, a / 2))
    return out


def summarise(cfg: dict, configs: list[dict], sel: dict) -> list[dict]:
    """One row per (lambda, rule) at the chosen alpha: per-seed slopes, exponent bounds, growth signs."""
    rows = []
    for lam in cfg["lams"]:
        ch = sel[str(lam)].get("alpha")
        if not ch:
            continue
        for rule in RULES:
            every = [c for c in configs if c["lam"] == lam and c["rule"] == rule and c["alpha"] == ch[rule]]
            cs = [c for c in every if not c["diverged"]]
            if not cs:
                continue
            last = [c["local_slopes"][-1] for c in cs]
            rows.append({"lam": lam, "rule": rule, "alpha": ch[rule], "seeds": [c["seed"] for c in cs],
                         "diverged_seeds": [c["seed"] for c in every if c["diverged"]],
                         "slope": [c["slope"] for c in cs], "last_local_slope": last,
                         "gap_at_max_N": [c["weight_gap"][-1] for c in cs],
                         "final_loss": [c["full_loss"][-1] for c in cs], "moved": [c["moved"] for c in cs],
                         "exponent_lower_bound": [ch[rule] * max(c["beta_hat_start"], c["beta_hat_end"]) + 1 for c in cs],
                         "step_sum": ch[rule] * (sum(1 / t for t in range(1, max(cfg["steps_list"]) + 1))
                                                 if rule == "alpha/t" else max(cfg["steps_list"])),
                         "local_slopes_rising": [sum(b > a for a, b in zip(c["local_slopes"][-4:], c["local_slopes"][-3:]))
                                                 == 3 for c in cs]})
    return rows


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg, Ns = doc["config"], doc["config"]["steps_list"]
    lams = cfg["lams"]
    fig, axes = plt.subplots(1, len(lams), figsize=(5.2 * len(lams), 4.2), squeeze=False)
    for ax, lam in zip(axes[0], lams):
        ch = doc["selection"][str(lam)].get("alpha") or {}
        for rule, col in zip(RULES, ("C0", "C3")):
            cs = [c for c in doc["configs"] if c["lam"] == lam and c["rule"] == rule and c["alpha"] == ch.get(rule)]
            for i, c in enumerate(cs):
                ax.loglog(Ns, c["weight_gap"], "-", color=col, alpha=0.35, lw=1)
                ax.loglog(Ns, c["weight_gap"], ".", color=col, ms=3)
            if cs:
                gm = [math.exp(sum(math.log(c["weight_gap"][i]) for c in cs) / len(cs)) for i in range(len(Ns))]
                sl = [c["slope"] for c in cs]
                ax.loglog(Ns, gm, "-", color=col, lw=2,
                          label=f"{'α/t' if rule == 'alpha/t' else 'constant α'}, α = {ch[rule]:g}: slope "
                                f"{min(sl):.2f}..{max(sl):.2f} ({len(cs)} seeds)")
        ax.axvline(cfg["fit_from"], color="gray", ls=":", lw=1)
        ax.set_title(f"λ = {lam}, k = {cfg['k']}", fontsize=10)
        ax.set_xlabel("training steps N (fit from the dotted line)")
        ax.set_ylabel("‖w_recurr^N − w_trunc^N‖")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle("weight gap vs N, every seed (thin) and the geometric mean (thick); α chosen per λ for a comparable "
                 "final training loss", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small grid, N up to 100 (CI)")
    ap.add_argument("--out", default="runs/stable_rnn", help="output folder (gap_sweep.json, gap_sweep.png)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--doc", default=None, help="also write the 'gap-sweep' section of this page, JSON and plot next to it")
    ap.add_argument("--resume", default=None, metavar="JSON",
                    help="a finished gap_sweep.json: retry every (lambda, rule) with a diverged seed at the next smaller "
                         "alpha of the grid (what a fresh run does at its end), then write the outputs")
    ap.add_argument("--from-json", default=None, help="the plot and --doc from this gap_sweep.json (nothing rerun)")
    args = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        doc = json.loads(Path(args.from_json).read_text())
    elif args.resume:
        doc = json.loads(Path(args.resume).read_text())
        torch.set_num_threads(args.threads)
        doc["retry_seconds"] = retry_diverged(doc["config"], _gaps_module(), doc["configs"], doc["selection"],
                                              lambda m: print(m, flush=True))
        doc["summary"] = summarise(doc["config"], doc["configs"], doc["selection"])
        doc["resumed"] = {"command": "python experiments/stable_rnn/gap_sweep.py " + " ".join(argv),
                          "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "loadavg_end": _loadavg()}
        doc["seconds"] += doc["retry_seconds"]
        (out / "gap_sweep.json").write_text(json.dumps(doc, indent=1) + "\n")
    else:
        threads = torch.get_num_threads()
        torch.set_num_threads(args.threads)
        try:
            doc = run(args, argv)
        finally:
            torch.set_num_threads(threads)
        (out / "gap_sweep.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, out / "gap_sweep.png")
    rep, seeds = _report("report"), _report("report_seeds")
    print(seeds.sweep_table(doc))
    if args.doc:
        import shutil

        page = Path(args.doc)
        assets = page.parent / "stability"
        assets.mkdir(parents=True, exist_ok=True)
        (assets / "gap_sweep.json").write_text(json.dumps(doc, indent=1) + "\n")
        if (assets / "gap_sweep.png").resolve() != (out / "gap_sweep.png").resolve():
            shutil.copy(out / "gap_sweep.png", assets / "gap_sweep.png")
        rep.write_section(page, "gap-sweep", seeds.gap_sweep_section(doc, assets.name))
        verdict = rep.verdict_section(assets)
        if verdict:
            rep.write_section(page, "verdict", verdict)
        print(f"wrote the gap-sweep section of {page}")
    return 0


def run(args, argv) -> dict:
    cfg = json.loads(json.dumps(QUICK if args.quick else FULL))
    gg = _gaps_module()
    load0 = _loadavg()
    t0 = time.perf_counter()
    log = lambda m: print(m, flush=True)  # noqa: E731
    # 1. the step size: every alpha of the grid, the recurrent model only, on the tuning seeds
    grid = [(lam, rule, a) for lam in cfg["lams"] for rule in RULES for a in cfg["alphas"][rule]]
    P, X, Y, labels, _ = init_params(cfg, gg, cfg["tune_seeds"], grid)
    log(f"tuning: {len(labels)} configurations (seeds {cfg['tune_seeds']}), recurrent model only")
    tune = train(cfg, P, X, Y, labels, log=log, truncated=False)
    tuned, tune_seconds, extended = tune["configs"], tune["train_seconds"], []
    sel = select(cfg, tuned)
    for _ in range(cfg.get("max_extensions", 0)):  # CHOICE_RULE: a choice at an edge of its grid extends the grid
        more = extensions(sel)
        if not more:
            break
        log(f"a choice at the edge of its grid: tuning {more}")
        extended += [list(m) for m in more]
        P, X, Y, labels, _ = init_params(cfg, gg, cfg["tune_seeds"], more)
        part = train(cfg, P, X, Y, labels, log=log, truncated=False)
        tuned += part["configs"]
        tune_seconds += part["train_seconds"]
        sel = select(cfg, tuned)
    for lam, rule, a in extensions(sel):
        sel[str(lam)].setdefault("at_edge", []).append(rule)
    # 2. the chosen alphas, every seed, both models; with each, the next smaller alpha of its grid (the rule's
    # fallback when a seed diverges at the chosen one: batched with it, so no second pass is needed)
    chosen = []
    for lam in cfg["lams"]:
        for rule in RULES if sel[str(lam)]["alpha"] else ():
            a = sel[str(lam)]["alpha"][rule]
            smaller = [float(x) for x in sel[str(lam)]["grid"][rule] if float(x) < a]
            chosen += [(lam, rule, a)] + ([(lam, rule, max(smaller))] if smaller else [])
    P, X, Y, labels, per_seed = init_params(cfg, gg, cfg["seeds"], chosen)
    err = check(cfg, gg, P, X, Y, labels, per_seed)
    if not err < 1e-9:
        raise SystemExit(f"gap_sweep.py: the batched model differs from seq2d's by {err:.2e} (relative), expected < 1e-9")
    log(f"{len(labels)} configurations; batched model vs seq2d.rnn / truncated_rnn: largest relative difference "
        f"{err:.1e}")
    res = train(cfg, P, X, Y, labels, log=log)
    retry = retry_diverged(cfg, gg, res["configs"], sel, log)
    return {"experiment": "weight gap vs N over seeds, lambdas and step rules (Proposition 2, Fig. 1)",
            "mode": "quick" if args.quick else "full", "config": cfg, "check": err, "selection": sel,
            "summary": summarise(cfg, res["configs"], sel), "configs": res["configs"],
            "command": "python experiments/stable_rnn/gap_sweep.py " + " ".join(argv),
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": gg._cpu_name(),
            "nproc": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": sys.version.split()[0], "machine": platform.machine(), "loadavg_start": load0,
            "loadavg_end": _loadavg(), "tune_seconds": tune_seconds, "train_seconds": res["train_seconds"],
            "choice_rule": CHOICE_RULE, "extended": extended, "tune_configs": [_small(c) for c in tuned],
            "retry_seconds": retry, "seconds": time.perf_counter() - t0}


def _small(c: dict) -> dict:
    """A tuning configuration for the JSON: its label, its loss curve and the distance it moved (no gap)."""
    return {key: c.get(key) for key in ("seed", "lam", "rule", "alpha", "diverged", "initial_loss", "moved", "curve")}


def retry_diverged(cfg: dict, gg, configs: list[dict], sel: dict, log) -> float:
    """While a (lambda, rule) has a seed that diverged at its chosen alpha, take the next smaller alpha of the grid
    and train it on every seed (both models); the new configurations are appended to ``configs`` (the diverged
    ones stay, marked), ``sel`` records the alphas given up (``diverged_in_sweep``). Returns the seconds spent."""
    t0 = time.perf_counter()
    while True:
        redo, changed = [], False
        for lam in cfg["lams"]:
            s = sel[str(lam)]
            ch = s.get("alpha")
            for rule in RULES if ch else ():
                cs = [c for c in configs if c["lam"] == lam and c["rule"] == rule and c["alpha"] == ch[rule]]
                smaller = [float(a) for a in s["grid"][rule] if float(a) < ch[rule]]
                if any(c["diverged"] for c in cs) and smaller:
                    s.setdefault("diverged_in_sweep", {}).setdefault(rule, []).append(ch[rule])
                    ch[rule] = max(smaller)
                    s["final_loss"][rule] = s["grid"][rule][str(ch[rule])]["mean_final_loss"]
                    if not any(c["lam"] == lam and c["rule"] == rule and c["alpha"] == ch[rule] for c in configs):
                        redo.append((lam, rule, ch[rule]))
                    else:
                        changed = True
        if not redo and not changed:
            return time.perf_counter() - t0
        if not redo:
            continue
        log(f"retry with the next smaller alpha on every seed: {redo}")
        P, X, Y, labels, _ = init_params(cfg, gg, cfg["seeds"], redo)
        configs += train(cfg, P, X, Y, labels, log=log)["configs"]


def _loadavg():
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def _report(name: str):
    spec = importlib.util.spec_from_file_location(f"stable_rnn_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    raise SystemExit(main())
