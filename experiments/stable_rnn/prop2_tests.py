"""Lemma 2, Proposition 2 and Fig. 1 of the slides as tests that can fail (issue 34, item 3).

    # the k-dependence runs (minutes), then the page section from them and gap_sweep.py's JSON
    python experiments/stable_rnn/prop2_tests.py --gap-sweep docs/results/stability/gap_sweep.json \\
        --out runs/stable_rnn --doc docs/results/stability.md
    python experiments/stable_rnn/prop2_tests.py --quick --gap-sweep /tmp/sweep/gap_sweep.json --out /tmp/p2   # CI
    # the section again from the committed JSON (nothing rerun)
    python experiments/stable_rnn/prop2_tests.py --from-json docs/results/stability/prop2_tests.json \\
        --gap-sweep docs/results/stability/gap_sweep.json --out runs/stable_rnn --doc docs/results/stability.md

The earlier checks on the page could not fail: a slope of the weight gap in N below the slides' exponent
``alpha*beta + 1 >= 1`` lets any sublinear growth pass. This script states each prediction, its test and the
outcome that would falsify it (:data:`PREDICTIONS`, written to the JSON and to the page above the numbers), then
measures:

* **k-dependence at the start (Lemma 2)**: ``||grad p_T(w) - grad p_T^k(w)||`` for k = 1..15 at a shared start,
  5 seeds x 4 lambdas, for two families of recurrent matrix: ``projected`` (seq2d.rnn's initialisation with
  ``||W_hh||_2`` clipped to lambda, the start of every other run on the page; its spectral radius is below lambda)
  and ``orthogonal`` (``W_hh = lambda Q``, Q a random orthogonal matrix: norm and spectral radius both lambda).
* **k-dependence after training (Proposition 2)**: the weight gap after N projected gradient steps, k = 1..15,
  ``projected`` family, step ``alpha/t`` and a constant step chosen so that both sum to the same ``sum_t alpha_t``.
* **the cumulative step (Proposition 2 against Fig. 1's reading)**, from gap_sweep.py's JSON: its runs' weight gap
  against ``S_N = sum_{t <= N} alpha_t`` and against the distance moved, the two step rules compared at matched S.

The instance is gap_sweep.py's (its batched models, checked there against seq2d.rnn / seq2d.truncated_rnn) with
T = 24 so that k reaches 15 (a window of k inputs ends at each of the last ``n_out`` positions).
The statistics (``seq2d.stats.slope_interval``, ``seq2d.stats.mean_interval``) are scipy's t intervals.
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

from seq2d.results_page import value_range
from seq2d.stats import mean_interval, slope_interval

FULL = dict(input=4, hidden=16, teacher_hidden=16, teacher_lambda=0.8, noise=0.1, T=24, n_out=8, n=16,
            lams=[0.5, 0.65, 0.8, 0.95], seeds=[0, 1, 2, 3, 4], ks=list(range(1, 16)),
            families=["projected", "orthogonal"],
            train_N=100, record_N=[30, 100], alpha_t=1.0, level=0.95, factor=2.0, s_points=20)
QUICK = dict(FULL, hidden=8, teacher_hidden=8, T=12, n_out=4, lams=[0.5, 0.9], seeds=[0, 1, 2], ks=[1, 2, 3, 4, 5, 6],
             train_N=20, record_N=[10, 20])
RULES = ("alpha/t", "constant")

#: Each prediction as stated before the runs it is tested on (committed with this file before they ran); the page
#: prints them above the numbers. "source" quotes the slides (seeds/002_e0ce570a88c4aff3.txt); "ours" marks our
#: reading or derivation.
PREDICTIONS = [
    {"id": "L2-bound",
     "source": "Lemma 2 (the slides): `||grad_w p_T - grad_w p_T^k|| = gamma k lambda^k`, gamma = O(B_x (1 - lambda)^-2), "
               "for a lambda-contractive phi_w",
     "prediction": "ours: read as an upper bound, log(gap_k / k) falls in k at least as fast as k log lambda",
     "test": "per (family, lambda, seed) the least-squares slope b of log(gap_k / k) on k = 1..15 at the shared start, "
             "lambda the measured ||W_hh||_2 (tanh is 1-Lipschitz, so the state map is ||W_hh||_2-contractive); the "
             "mean of b - log lambda over the seeds with its 95% t interval",
     "falsified_if": "the interval lies entirely above 0 for some (family, lambda): the gap decays more slowly than "
                     "k lambda^k"},
    {"id": "L2-rate",
     "source": "Lemma 2's form at face value (an equality): the gap decays exactly as k lambda^k",
     "prediction": "b = log lambda; across lambdas, b against log lambda has slope 1. Expected (ours, from Lemma 1's "
                   "section): to hold for W_hh = lambda Q (spectral radius = norm = lambda) and to fail, b below log "
                   "lambda, for the projected start, whose spectral radius is below its norm",
     "test": "the same interval; and the least-squares slope of b on log lambda over all (lambda, seed) of a family "
             "with its 95% interval",
     "falsified_if": "the interval of b - log lambda excludes 0 (per family and lambda); the slope of b on log lambda "
                     "has an interval excluding 1"},
    {"id": "P2-k",
     "source": "Proposition 2 (the slides): `||w_recurr^N - w_trunc^N|| <= alpha gamma k lambda^k N^(alpha beta + 1)` "
               "after N steps of projected gradient descent, step alpha/t",
     "prediction": "ours: at a fixed N the bound's k-dependence is Lemma 2's, so the weight gap falls in k at least "
                   "as fast as k lambda^k, lambda the projection radius (it bounds ||W_hh||_2 at every step)",
     "test": "the weight gap after N = train_N steps for k = 1..15 (projected start; step alpha/t and a constant "
             "step with the same sum of steps); b and its interval as in L2-bound, against the projection radius",
     "falsified_if": "the interval of b - log lambda lies entirely above 0 for some (rule, lambda)"},
    {"id": "P2-S",
     "source": "ours, derived from the slides' Lemmas 2 and 3 (beta-Lipschitz gradient, gradient gap gamma k lambda^k) "
               "and a non-expansive projection: d_{t+1} <= (1 + alpha_t beta) d_t + alpha_t gamma k lambda^k, so "
               "d_N <= gamma k lambda^k S_N exp(beta S_N), S_N = sum_{t<=N} alpha_t, for any step rule (with "
               "alpha_t = alpha/t, S_N <= alpha (1 + ln N), which gives a polynomial in N like the slides')",
     "prediction": "the step rule enters only through S_N: at matched S_N the weight gap under alpha/t and under the "
                   "constant step is the same within a factor 2",
     "test": "gap_sweep.py's runs at the chosen alphas: per (lambda, seed) the mean over s_points log-spaced S in the "
             "range both rules reach of log(gap_constant / gap_alpha/t) (linear interpolation in log gap against "
             "log S); its mean over the seeds with the 95% t interval; the same against the distance the recurrent "
             "model has moved so far (running maximum of ||w_N - w_0||)",
     "falsified_if": "for some lambda the interval lies entirely outside (-log 2, log 2) (held if it lies inside for "
                     "every lambda; otherwise undecided)"},
    {"id": "Fig1",
     "source": "Fig. 1's caption (the slides): without the 1/t rate the gradient descent bound no longer appears "
               "qualitatively correct, suggesting the O(1/t) rate is necessary",
     "prediction": "ours, what the reading implies for the runs: without 1/t the gap is larger at the same cumulative "
                   "step S (the bound's shape fails only for the constant step)",
     "test": "the P2-S interval of log(gap_constant / gap_alpha/t) at matched S",
     "falsified_if": "the interval lies entirely below log 2 for every lambda (the constant step's gap is not twice "
                     "alpha/t's at any lambda); supported if it lies entirely above log 2 for every lambda; otherwise "
                     "undecided"},
]


# ----------------------------------------------------------------------------- analysis (pure, tested on synthetic data)
def rate_fit(ks, gaps, level: float = 0.95):
    """The least-squares slope of ``log(gap_k / k)`` on k (Lemma 2's ``gamma k lambda^k`` makes it ``log lambda``),
    with its t interval (:func:`seq2d.stats.slope_interval`); non-positive gaps are left out."""
    pts = [(k, math.log(g / k)) for k, g in zip(ks, gaps) if g is not None and g > 0 and math.isfinite(g)]
    return slope_interval([k for k, _ in pts], [y for _, y in pts], level)


def rate_test(slopes, log_lams, level: float = 0.95) -> dict:
    """``b - log lambda`` over seeds: its mean and t interval; ``bound_ok`` (L2-bound / P2-k: the interval does not lie
    entirely above 0) and ``rate_ok`` (L2-rate: the interval contains 0)."""
    d = [b - ll for b, ll in zip(slopes, log_lams)]
    iv = mean_interval(d, level)
    return {"diff": d, "mean": iv.estimate, "low": iv.low, "high": iv.high, "df": iv.df,
            "bound_ok": iv.low <= 0, "rate_ok": iv.contains(0.0)}


def slope_on_log_lambda(slopes, log_lams, level: float = 0.95) -> dict:
    """The least-squares slope of the fitted rates b on log lambda (1 under Lemma 2's face value) and its interval."""
    iv = slope_interval(log_lams, slopes, level)
    return {"slope": iv.estimate, "low": iv.low, "high": iv.high, "intercept": iv.intercept, "one_inside": iv.contains(1.0)}


def step_sums(Ns, rule: str, alpha: float) -> list[float]:
    """``S_N = sum_{t <= N} alpha_t`` for each N: ``alpha H_N`` for alpha/t, ``alpha N`` for the constant step."""
    if rule == "constant":
        return [alpha * n for n in Ns]
    out, h, t = [], 0.0, 0
    for n in Ns:
        while t < n:
            t += 1
            h += 1.0 / t
        out.append(alpha * h)
    return out


def _interp(x, xs, ys) -> float:
    """Piecewise-linear interpolation of log y against log x (xs increasing)."""
    lx = math.log(x)
    for i in range(len(xs) - 1):
        a, b = math.log(xs[i]), math.log(xs[i + 1])
        if a <= lx <= b:
            w = 0.0 if b == a else (lx - a) / (b - a)
            return math.exp((1 - w) * math.log(ys[i]) + w * math.log(ys[i + 1]))
    raise ValueError(f"{x} outside [{xs[0]}, {xs[-1]}]")


def _increasing(xs, ys):
    """The points with strictly increasing x (a running maximum keeps the first point of each new maximum)."""
    px, py = [], []
    for x, y in zip(xs, ys):
        if x > 0 and y > 0 and (not px or x > px[-1]):
            px.append(x)
            py.append(y)
    return px, py


def matched_log_ratio(xa, ya, xb, yb, points: int = 20) -> dict | None:
    """Over the x range both curves cover, at ``points`` log-spaced x: the mean of ``log(y_b / y_a)`` (each curve
    interpolated linearly in log-log), its value at the largest common x, and the range. None if they do not overlap."""
    xa, ya = _increasing(xa, ya)
    xb, yb = _increasing(xb, yb)
    if len(xa) < 2 or len(xb) < 2:
        return None
    lo, hi = max(xa[0], xb[0]), min(xa[-1], xb[-1])
    if not hi > lo:
        return None
    grid = [lo] + [math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (points - 1))
                   for i in range(1, points - 1)] + [hi]  # the ends exactly (no rounding past the data)
    r = [math.log(_interp(x, xb, yb) / _interp(x, xa, ya)) for x in grid]
    return {"mean": sum(r) / len(r), "at_max": r[-1], "range": [lo, hi], "min": min(r), "max": max(r)}


def classify_ratio(low: float, high: float, factor: float = 2.0) -> str:
    """P2-S / Fig1's decision on the interval of the mean log ratio constant / alpha-t."""
    m = math.log(factor)
    if -m < low and high < m:
        return "same within the factor"
    if low > m:
        return "constant larger by more than the factor"
    if high < m:
        return "constant not larger by the factor"
    return "undecided"


def s_clock(sweep: dict, level: float = 0.95, factor: float = 2.0, points: int = 20) -> list[dict]:
    """Per lambda of gap_sweep.py's JSON (its chosen alphas): the P2-S / Fig1 statistics against S_N and against the
    distance moved so far, and the log-log slope of the gap in S over the common range, per seed."""
    out = []
    cfgs = [c for c in sweep["configs"] if not c["diverged"] and c.get("curve")]
    for lam in sweep["config"]["lams"]:
        ch = sweep["selection"][str(lam)].get("alpha")
        if not ch:
            continue
        per = {}
        for rule in RULES:
            for c in cfgs:
                if c["lam"] == lam and c["rule"] == rule and c["alpha"] == ch[rule]:
                    per.setdefault(c["seed"], {})[rule] = c
        rows = []
        for seed, rr in sorted(per.items()):
            if len(rr) < 2:
                continue
            cu = {r: rr[r]["curve"] for r in RULES}
            S = {r: step_sums(cu[r]["N"], r, ch[r]) for r in RULES}
            moved = {r: [max(cu[r]["moved"][:i + 1]) for i in range(len(cu[r]["moved"]))] for r in RULES}
            vs_s = matched_log_ratio(S["alpha/t"], cu["alpha/t"]["gap"], S["constant"], cu["constant"]["gap"], points)
            vs_m = matched_log_ratio(moved["alpha/t"], cu["alpha/t"]["gap"], moved["constant"], cu["constant"]["gap"],
                                     points)
            sl = {}
            if vs_s:
                lo, hi = vs_s["range"]
                for r in RULES:
                    pts = [(s, g) for s, g in zip(S[r], cu[r]["gap"]) if lo <= s <= hi and g > 0]
                    sl[r] = slope_interval([math.log(s) for s, _ in pts], [math.log(g) for _, g in pts], level).estimate \
                        if len(pts) >= 3 else None
            rows.append({"seed": seed, "vs_S": vs_s, "vs_moved": vs_m, "slope_in_S": sl,
                         "end_S": {r: S[r][-1] for r in RULES}, "end_gap": {r: cu[r]["gap"][-1] for r in RULES},
                         "end_moved": {r: cu[r]["moved"][-1] for r in RULES}})
        res = {"lam": lam, "alpha": ch, "seeds": rows}
        for key in ("vs_S", "vs_moved"):
            v = [r[key]["mean"] for r in rows if r[key]]
            if len(v) >= 2:
                iv = mean_interval(v, level)
                res[key] = {"mean": iv.estimate, "low": iv.low, "high": iv.high, "n": len(v),
                            "outcome": classify_ratio(iv.low, iv.high, factor),
                            "at_max": [r[key]["at_max"] for r in rows if r[key]]}
        out.append(res)
    return out


# ----------------------------------------------------------------------------- the runs
def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"stable_rnn_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def starts(cfg: dict, gs, gg, family: str):
    """Every (seed, lambda) start of one family, batched: gap_sweep.init_params's start (``projected``) or the same
    with ``W_hh = lambda Q`` (``orthogonal``, Q from the seed). Returns P, X, Y, labels."""
    combos = [(lam, "-", 0.0) for lam in cfg["lams"]]
    P, X, Y, labels, _ = gs.init_params(cfg, gg, cfg["seeds"], combos)
    if family == "orthogonal":
        H = cfg["hidden"]
        for c, lab in enumerate(labels):
            g = torch.Generator().manual_seed(1000 + lab["seed"])
            Q, R = torch.linalg.qr(torch.randn(H, H, generator=g, dtype=torch.float64))
            P[1][c] = lab["lam"] * Q * torch.sign(torch.diagonal(R))[None, :]
    for c, lab in enumerate(labels):
        W = P[1][c]
        lab.update(family=family, norm=float(torch.linalg.matrix_norm(W, ord=2)),
                   radius=float(torch.linalg.eigvals(W).abs().max()))
    return P, X, Y, labels


def grad_gaps(cfg: dict, gs, P, X, Y) -> list[list[float]]:
    """Per configuration, ``||grad p_T - grad p_T^k||`` (every parameter) for each k of cfg["ks"], at P."""
    def flat_grad(k):
        m = gs.Batch(P, X, Y, cfg["n_out"], k)
        gs_ = torch.autograd.grad(m.losses().sum(), m.p, materialize_grads=True)  # k = 1: no W_hh
        return torch.cat([q.reshape(q.shape[0], -1) for q in gs_], 1)

    gf = flat_grad(None)
    return [(gf - flat_grad(k)).norm(dim=1).tolist() for k in cfg["ks"]]  # (k, C)


def descend(cfg: dict, gs, P, X, Y, k, lam, alpha, decay) -> list[torch.Tensor]:
    """Projected gradient descent of one model (recurrent: k None) of every configuration; the flat weights at each N
    of record_N (non-finite weights stay non-finite: such a configuration is reported as diverged)."""
    m = gs.Batch(P, X, Y, cfg["n_out"], k)
    out, want = [], set(cfg["record_N"])
    for t in range(1, cfg["train_N"] + 1):
        step = torch.where(decay, alpha / t, alpha)
        gsum = torch.autograd.grad(m.losses().sum(), m.p, materialize_grads=True)
        with torch.no_grad():
            for q, g in zip(m.p, gsum):
                q.sub_(step.view(-1, *([1] * (q.dim() - 1))) * g)
            m.p[1].copy_(gs._project(m.p[1], lam))
        if t in want:
            out.append(m.flat().clone())
    return out


def run(cfg: dict, log=print) -> dict:
    gs = _load("gap_sweep")
    gg = gs._gaps_module()
    if max(cfg["ks"]) > cfg["T"] - cfg["n_out"] + 1:
        raise SystemExit(f"prop2_tests.py: every k must be <= T - n_out + 1 = {cfg['T'] - cfg['n_out'] + 1}")
    t0 = time.perf_counter()
    lemma2 = []
    for fam in cfg["families"]:
        P, X, Y, labels = starts(cfg, gs, gg, fam)
        G = grad_gaps(cfg, gs, P, X, Y)
        for c, lab in enumerate(labels):
            lemma2.append(dict(lab, gap=[G[i][c] for i in range(len(cfg["ks"]))]))
    log(f"Lemma 2 at the start: {len(lemma2)} configurations, {time.perf_counter() - t0:.1f} s")
    # Proposition 2's k-dependence: the projected start, both rules with the same sum of steps at N = train_N
    N = cfg["train_N"]
    a_c = step_sums([N], "alpha/t", cfg["alpha_t"])[0] / N
    P, X, Y, labels = starts(cfg, gs, gg, "projected")
    C = len(labels)
    P2 = [torch.cat([q, q]) for q in P]
    X2, Y2 = torch.cat([X, X]), torch.cat([Y, Y])
    lab2 = [dict(lab, rule=r, alpha=cfg["alpha_t"] if r == "alpha/t" else a_c) for r in RULES for lab in labels]
    lam = torch.tensor([lb["lam"] for lb in lab2], dtype=torch.float64)
    alpha = torch.tensor([lb["alpha"] for lb in lab2], dtype=torch.float64)
    decay = torch.tensor([lb["rule"] == "alpha/t" for lb in lab2])
    t1 = time.perf_counter()
    wf = descend(cfg, gs, P2, X2, Y2, None, lam, alpha, decay)
    gaps = {k: [(a - b).norm(dim=1).tolist() for a, b in zip(wf, descend(cfg, gs, P2, X2, Y2, k, lam, alpha, decay))]
            for k in cfg["ks"]}
    log(f"Proposition 2's k-dependence: {2 * C} configurations x {len(cfg['ks'])} k to N = {N}, "
        f"{time.perf_counter() - t1:.1f} s")
    m = gs.Batch(P2, X2, Y2, cfg["n_out"], None)  # the start (Batch copies P2)
    with torch.no_grad():
        loss0 = m.losses().tolist()
    moved = [(w - m.flat()).norm(dim=1).tolist() for w in wf]
    trained = []
    for c, lb in enumerate(lab2):
        ok = all(math.isfinite(gaps[k][j][c]) for k in cfg["ks"] for j in range(len(cfg["record_N"])))
        trained.append(dict(lb, diverged=not ok, initial_loss=loss0[c],
                            moved=[moved[j][c] for j in range(len(cfg["record_N"]))],
                            gap={str(n): [gaps[k][j][c] for k in cfg["ks"]] for j, n in enumerate(cfg["record_N"])}))
    return {"lemma2": lemma2, "prop2_k": trained, "alpha_constant": a_c, "step_sum": a_c * N,
            "seconds": time.perf_counter() - t0}


def analyse(doc: dict, sweep: dict | None) -> dict:
    """Every test of PREDICTIONS from the runs (``doc``) and gap_sweep.py's JSON (``sweep``)."""
    c = doc["config"]
    lvl, ks = c["level"], c["ks"]
    out = {"L2": [], "L2_across": {}, "P2k": []}
    for fam in c["families"]:
        rows = [r for r in doc["lemma2"] if r["family"] == fam]
        b_all, ll_all = [], []
        for lam in c["lams"]:
            rr = [r for r in rows if r["lam"] == lam]
            fits = [rate_fit(ks, r["gap"], lvl) for r in rr]
            b = [f.estimate for f in fits]
            ll = [math.log(r["norm"]) for r in rr]
            b_all += b
            ll_all += ll
            out["L2"].append({"family": fam, "lam": lam, "slopes": b, "log_lambda": ll,
                              "log_radius": [math.log(r["radius"]) for r in rr],
                              "fit_intervals": [[f.low, f.high] for f in fits],
                              "runs_above": sum(f.low > x for f, x in zip(fits, ll)), **rate_test(b, ll, lvl)})
        out["L2_across"][fam] = slope_on_log_lambda(b_all, ll_all, lvl)
    N = str(c["train_N"])
    for rule in RULES:
        for lam in c["lams"]:
            rr = [r for r in doc["prop2_k"] if r["rule"] == rule and r["lam"] == lam and not r["diverged"]]
            if len(rr) < 2:
                continue
            fits = [rate_fit(ks, r["gap"][N], lvl) for r in rr]
            b = [f.estimate for f in fits]
            out["P2k"].append({"rule": rule, "lam": lam, "slopes": b, "alpha": rr[0]["alpha"],
                               "slopes_by_N": {n: [rate_fit(ks, r["gap"][n], lvl).estimate for r in rr]
                                               for n in rr[0]["gap"]},
                               **rate_test(b, [math.log(lam)] * len(b), lvl)})
    if sweep:
        out["S"] = s_clock(sweep, lvl, c["factor"], c["s_points"])
        out["bound_growth"] = _load("report_seeds").bound_growth(sweep)
    return out


# ----------------------------------------------------------------------------- text
def _r(v, fmt=".2f"):
    return value_range(v, fmt)


def _iv(d, fmt="+.3f"):
    return f"{d['mean']:{fmt}} [{d['low']:{fmt}}, {d['high']:{fmt}}]"


def outcomes(doc: dict, a: dict) -> dict:
    """One line per prediction: held / falsified / undecided, with the margin; the page and the verdict use these."""
    c = doc["config"]
    res = {}
    l2 = a["L2"]
    above = [r for r in l2 if not r["bound_ok"]]
    res["L2-bound"] = ("falsified" if above else "held",
                       f"mean of b - log lambda {_r([r['mean'] for r in l2], '+.3f')} over {len(l2)} (family, lambda); "
                       f"upper ends of the intervals {_r([r['high'] for r in l2], '+.3f')}, lower ends "
                       f"{_r([r['low'] for r in l2], '+.3f')}"
                       + (f"; entirely above 0: {[(r['family'], r['lam']) for r in above]}" if above else
                          "; no interval lies entirely above 0"))
    parts, bad = [], []
    for fam in c["families"]:
        rr = [r for r in l2 if r["family"] == fam]
        ok = [r["lam"] for r in rr if r["rate_ok"]]
        x = a["L2_across"][fam]
        parts.append(f"{fam}: interval contains 0 for lambda in {ok} of {[r['lam'] for r in rr]}; slope of b on log "
                     f"lambda {x['slope']:.3f} [{x['low']:.3f}, {x['high']:.3f}]")
        bad += [(fam, r["lam"]) for r in rr if not r["rate_ok"]] + ([(fam, "slope")] if not x["one_inside"] else [])
    res["L2-rate"] = ("falsified" if bad else "held", "; ".join(parts)
                      + (f"; falsified for {bad}" if bad else ""))
    p2 = a["P2k"]
    above = [(r["rule"], r["lam"]) for r in p2 if not r["bound_ok"]]
    res["P2-k"] = ("falsified" if above else "held",
                   f"mean of b - log lambda {_r([r['mean'] for r in p2], '+.3f')} over {len(p2)} (rule, lambda); upper "
                   f"ends {_r([r['high'] for r in p2], '+.3f')}" + (f"; entirely above 0: {above}" if above else
                                                                     "; no interval lies entirely above 0"))
    if a.get("S"):
        S = [s for s in a["S"] if "vs_S" in s]
        m = math.log(c["factor"])
        out_s = [s["lam"] for s in S if s["vs_S"]["low"] > m or s["vs_S"]["high"] < -m]
        inside = [s["lam"] for s in S if s["vs_S"]["outcome"] == "same within the factor"]
        res["P2-S"] = ("falsified" if out_s else "held" if len(inside) == len(S) else "undecided",
                       "; ".join(f"lambda {s['lam']}: {_iv(s['vs_S'])} against S, "
                                 + (f"{_iv(s['vs_moved'])} against the distance moved" if "vs_moved" in s else
                                    "n/a against the distance moved (no common range)")
                                 for s in S) + f" (margin log {c['factor']:g} = {m:.3f})"
                       + (f"; entirely outside the margin for lambda in {out_s}" if out_s else "")
                       + (f"; straddling it for lambda in {[s['lam'] for s in S if s['lam'] not in inside + out_s]}"
                          if len(inside) + len(out_s) < len(S) else ""))
        sup = [s["lam"] for s in S if s["vs_S"]["low"] > m]
        below = [s["lam"] for s in S if s["vs_S"]["high"] < m]
        res["Fig1"] = ("falsified" if len(below) == len(S) else "supported" if len(sup) == len(S) else "undecided",
                       f"intervals entirely below log {c['factor']:g} for lambda in {below}, entirely above for {sup}")
    return res


def section(doc: dict, sweep: dict | None, rel: str) -> str:
    c, a = doc["config"], doc["analysis"]
    oc = outcomes(doc, a)
    load = lambda v: "n/a" if not v else ", ".join(f"{x:.1f}" for x in v)  # noqa: E731
    L = ["## Lemma 2, Proposition 2 and Fig. 1: tests that can fail", "",
         "<!-- Written by experiments/stable_rnn/prop2_tests.py --doc from its JSON and gap_sweep.py's; rerun it rather "
         "than editing numbers. -->", "",
         f"Mode `{doc['mode']}`. Command: `{doc['command']}`; run {doc['date_utc']} on {doc['cpu']} ({doc['nproc']} cores, "
         f"torch {doc['torch']}, 1 thread, nice 10), load average {load(doc['loadavg_start'])} at the start and "
         f"{load(doc['loadavg_end'])} at the end (shared machine), {doc['seconds'] / 60:.1f} min. This section again from "
         "the committed JSON: `python experiments/stable_rnn/prop2_tests.py --from-json "
         "docs/results/stability/prop2_tests.json --gap-sweep docs/results/stability/gap_sweep.json --out "
         "runs/stable_rnn --doc docs/results/stability.md`.", "",
         "The earlier checks of this page could not fail: the slides' exponent `alpha*beta + 1` is at least 1, so any "
         "gap growing more slowly than N passed"
         + (lambda g: f" (with the measured lower bounds of beta, the bound lets the gap grow by a factor "
                      f"{_load('report_seeds')._pow10(g['log10_allowed'])} from N = {g['from_N']} to N = {g['to_N']:,}, where it grew by "
                      f"{_r(g['measured'])})" if g and g["measured"] else "")(a.get("bound_growth"))
         + ". Here each prediction is written down with its test and the outcome that would falsify it; they were "
         "committed with the script before the runs below (git history of experiments/stable_rnn/prop2_tests.py). "
         "\"Source\" is the slides (seeds/002_e0ce570a88c4aff3.txt); \"ours\" is our reading or derivation.", "",
         "### The predictions (stated before the runs)", "",
         "| id | source | prediction | test | falsified if |", "| --- | --- | --- | --- | --- |"]
    for p in doc["predictions"]:
        L.append(f"| {p['id']} | {p['source']} | {p['prediction']} | {p['test'].replace('train_N', str(c['train_N'])).replace('s_points', str(c['s_points']))} | {p['falsified_if']} |")
    L += ["", "### Outcomes", "", "| id | outcome | margin (95% t intervals over the seeds) |", "| --- | --- | --- |"]
    for k, (v, why) in oc.items():
        L.append(f"| {k} | **{v}** | {why} |")
    L += ["", "### Lemma 2 at the start: the rate in k", "",
          f"Instance: gap_sweep.py's, with T = {c['T']} (loss on the last {c['n_out']} positions, hidden {c['hidden']}, "
          f"input {c['input']}, {c['n']} sequences); seeds {c['seeds']}; k = {c['ks'][0]}..{c['ks'][-1]}. b is the "
          "least-squares slope of log(gap_k / k) on k; lambda the start's ||W_hh||_2; rho its spectral radius.", "",
          "| family | lambda | log lambda | log rho (seeds) | b (seeds) | b - log lambda: mean [95% interval] | runs "
          "whose own fit interval lies above log lambda | L2-bound | L2-rate |",
          "| --- | ---: | ---: | --- | --- | --- | ---: | --- | --- |"]
    for r in a["L2"]:
        L.append(f"| {r['family']} | {r['lam']} | {_r(r['log_lambda'], '+.3f')} | {_r(r['log_radius'], '+.3f')} | "
                 f"{_r(r['slopes'], '+.3f')} | {_iv(r)} | {r['runs_above']} of {len(r['slopes'])} | "
                 f"{'held' if r['bound_ok'] else 'falsified'} | {'held' if r['rate_ok'] else 'falsified'} |")
    L += ["", "Across lambdas (all seeds), the slope of b on log lambda (1 if the gap decays exactly as lambda^k): "
          + "; ".join(f"{fam} {x['slope']:.3f} [{x['low']:.3f}, {x['high']:.3f}] (intercept {x['intercept']:+.3f})"
                      for fam, x in a["L2_across"].items()) + ".", "",
          f"### Proposition 2 after N = {c['train_N']} steps: the rate in k", "",
          f"Projected start, every weight trained, projection radius lambda; step alpha/t with alpha = {c['alpha_t']:g} "
          f"(fixed before the run, not tuned) and a constant step {doc['alpha_constant']:.5f}, so that both sum to "
          f"S = {doc['step_sum']:.3f} at N = {c['train_N']}.", "",
          "| step | lambda | b (seeds) | b - log lambda: mean [95% interval] | b at N = " + ", ".join(str(n) for n in c["record_N"])
          + " (seed means) | P2-k |", "| --- | ---: | --- | --- | --- | --- |"]
    for r in a["P2k"]:
        by = ", ".join(f"{sum(v) / len(v):+.3f}" for v in r["slopes_by_N"].values())
        L.append(f"| {r['rule']} | {r['lam']} | {_r(r['slopes'], '+.3f')} | {_iv(r)} | {by} | "
                 f"{'held' if r['bound_ok'] else 'falsified'} |")
    div = [r for r in doc["prop2_k"] if r["diverged"]]
    if div:
        L += ["", f"Diverged and left out: {[(r['rule'], r['lam'], r['seed']) for r in div]}."]
    if a.get("S") and sweep:
        gsel = sweep["selection"]
        L += ["", "### The cumulative step: Proposition 2 against Fig. 1's reading", "",
              "From gap_sweep.py's runs (the section below: its instance, k = "
              f"{sweep['config']['k']}, {len(sweep['config']['seeds'])} seeds, alpha chosen by the rule quoted there, "
              "the grid extended past its edge by that rule"
              + (f"; extended: {', '.join(f'lambda {x[0]} {x[1]} alpha {x[2]:g}' for x in sweep.get('extended', []))}"
                 if sweep.get("extended") else "") + "). S_N = sum_{t <= N} alpha_t; the ratio is constant over alpha/t "
              "at matched S, averaged in log over the common range.", "",
              "| lambda | alpha (alpha/t, constant) | common S range (seeds) | log ratio vs S: mean [95%] | at the largest "
              "common S (seeds) | log ratio vs distance moved: mean [95%] | slope of log gap in log S: alpha/t, "
              "constant (seeds) | the interval against log 2 |", "| ---: | --- | --- | --- | --- | --- | --- | --- |"]
        for s in a["S"]:
            if "vs_S" not in s:
                continue
            rg = [x["vs_S"]["range"] for x in s["seeds"] if x["vs_S"]]
            sl = {r: [x["slope_in_S"].get(r) for x in s["seeds"]] for r in RULES}
            L.append(f"| {s['lam']} | {s['alpha']['alpha/t']:g}, {s['alpha']['constant']:g} | "
                     f"{_r([x[0] for x in rg])} to {_r([x[1] for x in rg])} | {_iv(s['vs_S'])} | "
                     f"{_r(s['vs_S']['at_max'], '+.2f')} | {_iv(s['vs_moved']) if 'vs_moved' in s else 'n/a'} | "
                     f"{_r(sl['alpha/t'])}; {_r(sl['constant'])} | {s['vs_S']['outcome']} |")
        edge = [f"lambda {lam} {', '.join(v['at_edge'])}" for lam, v in gsel.items() if v.get("at_edge")]
        L += ["", "Where the alpha/t choice landed: " + "; ".join(
            f"lambda {lam}: alpha {v['alpha']['alpha/t']:g} of the grid {sorted(float(x) for x in v['grid']['alpha/t'])}"
            + (f" (the rule picked {', '.join(f'{x:g}' for x in v['diverged_in_sweep']['alpha/t'])} on the tuning seed; "
               "a sweep seed diverged there, so its fallback, the next smaller alpha, was taken; the constant step's "
               "alpha stays the one matched to the first pick's loss)"
               if v.get("diverged_in_sweep", {}).get("alpha/t") else "")
            for lam, v in gsel.items() if v.get("alpha"))
              + (f"; still at an edge after the extensions: {edge}" if edge else "; no choice is at an edge of its grid")
              + "."]
    L += ["", f"![Lemma 2 and Proposition 2 in k; the gap against the cumulative step]({rel}/prop2_tests.png)"]
    return "\n".join(L)


def verdict_lines(doc: dict) -> tuple[list[str], list[str]]:
    """(holds, fails) for the page's verdict."""
    oc = outcomes(doc, doc["analysis"])
    c = doc["config"]
    scale = f"{len(c['seeds'])} seeds x {len(c['lams'])} lambdas, hidden {c['hidden']}, k = 1..{c['ks'][-1]}"
    holds, fails = [], []
    names = {"L2-bound": f"Lemma 2 as a bound, rate in k ({scale}, at the start)",
             "L2-rate": f"Lemma 2 at face value, gap = gamma k lambda^k ({scale}, at the start)",
             "P2-k": f"Proposition 2's rate in k ({scale}, after {c['train_N']} projected steps)",
             "P2-S": "Proposition 2 in the cumulative step (ours: the step rule enters only through sum alpha_t; "
                     "gap_sweep.py's runs)",
             "Fig1": "Fig. 1's reading (the 1/t rate is necessary), at matched cumulative step"}
    for k, (v, why) in oc.items():
        (holds if v in ("held", "supported") else fails).append(f"**{names[k]}** (pre-stated test {k}): {v}; {why}.")
    return holds, fails


def plot(doc: dict, sweep: dict | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c, ks = doc["config"], doc["config"]["ks"]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    gm = lambda rows: [math.exp(sum(math.log(max(r[i] / k, 1e-300)) for r in rows) / len(rows))  # noqa: E731
                       for i, k in enumerate(ks)]
    for i, lam in enumerate(c["lams"]):
        for fam, ls in (("projected", "-"), ("orthogonal", "--")):
            rows = [r["gap"] for r in doc["lemma2"] if r["family"] == fam and r["lam"] == lam]
            if rows:
                y = gm(rows)
                axes[0].semilogy(ks, y, ls, marker="o", ms=3, color=f"C{i}", label=f"λ={lam} {fam}")
        axes[0].semilogy(ks, [y[0] * lam ** (k - 1) for k in ks], ":", color=f"C{i}", lw=1)
        for rule, ls in (("alpha/t", "-"), ("constant", "--")):
            rows = [r["gap"][str(c["train_N"])] for r in doc["prop2_k"] if r["rule"] == rule and r["lam"] == lam
                    and not r["diverged"]]
            if rows:
                y2 = gm(rows)
                axes[1].semilogy(ks, y2, ls, marker="o", ms=3, color=f"C{i}", label=f"λ={lam} {rule}")
        if rows:
            axes[1].semilogy(ks, [y2[0] * lam ** (k - 1) for k in ks], ":", color=f"C{i}", lw=1)
    axes[0].set_title("Lemma 2: gradient gap / k at the start (dotted: λ^k)", fontsize=10)
    axes[1].set_title(f"Prop. 2: weight gap / k after N = {c['train_N']} (dotted: λ^k)", fontsize=10)
    for ax in axes[:2]:
        ax.set_xlabel("k")
        ax.set_ylabel("gap / k (geometric mean over seeds)")
        ax.legend(fontsize=6, ncol=2)
        ax.grid(alpha=0.3, which="both")
    if sweep:
        ax = axes[2]
        for i, lam in enumerate(sweep["config"]["lams"]):
            ch = sweep["selection"][str(lam)].get("alpha") or {}
            for rule, ls in (("alpha/t", "-"), ("constant", "--")):
                for cf in sweep["configs"]:
                    if cf["lam"] == lam and cf["rule"] == rule and cf["alpha"] == ch.get(rule) and cf.get("curve"):
                        S = step_sums(cf["curve"]["N"], rule, cf["alpha"])
                        ax.loglog(S, cf["curve"]["gap"], ls, color=f"C{i}", lw=1, alpha=0.6,
                                  label=f"λ={lam} {rule} α={cf['alpha']:g}" if cf["seed"] == sweep["config"]["seeds"][0]
                                  else None)
        ax.set_xlabel("cumulative step S_N = Σ α_t")
        ax.set_ylabel("‖w_recurr^N − w_trunc^N‖")
        ax.set_title("gap_sweep.py's runs against the cumulative step (every seed)", fontsize=10)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _loadavg():
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small instance, few k and steps (CI)")
    ap.add_argument("--out", default="runs/stable_rnn", help="output folder (prop2_tests.json, prop2_tests.png)")
    ap.add_argument("--gap-sweep", default=None, help="gap_sweep.py's JSON for the cumulative-step tests")
    ap.add_argument("--from-json", default=None, help="the analysis, plot and --doc from this prop2_tests.json")
    ap.add_argument("--doc", default=None, help="also write the 'prop2-tests' section of this page (and the verdict)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sweep = json.loads(Path(args.gap_sweep).read_text()) if args.gap_sweep else None
    if args.from_json:
        doc = json.loads(Path(args.from_json).read_text())
    else:
        cfg = json.loads(json.dumps(QUICK if args.quick else FULL))
        threads = torch.get_num_threads()
        torch.set_num_threads(args.threads)
        load0 = _loadavg()
        try:
            res = run(cfg, log=lambda m: print(m, flush=True))
        finally:
            torch.set_num_threads(threads)
        gg = _load("gradient_gaps")
        doc = {"experiment": "Lemma 2 / Proposition 2 / Fig. 1: tests that can fail (issue 34, item 3)",
               "mode": "quick" if args.quick else "full", "config": cfg, "predictions": PREDICTIONS,
               "command": "python experiments/stable_rnn/prop2_tests.py " + " ".join(argv),
               "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": gg._cpu_name(),
               "nproc": os.cpu_count(), "torch": torch.__version__, "python": sys.version.split()[0],
               "machine": platform.machine(), "loadavg_start": load0, "loadavg_end": _loadavg(), **res}
    doc["analysis"] = analyse(doc, sweep)  # recomputed from the raw numbers every time (never read back)
    (out / "prop2_tests.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "analysis"}, indent=1) + "\n")
    plot(doc, sweep, out / "prop2_tests.png")
    for k, (v, why) in outcomes(doc, doc["analysis"]).items():
        print(f"{k}: {v} -- {why}")
    if args.doc:
        import shutil

        page = Path(args.doc)
        assets = page.parent / "stability"
        assets.mkdir(parents=True, exist_ok=True)
        if (assets / "prop2_tests.json").resolve() != (out / "prop2_tests.json").resolve():
            shutil.copy(out / "prop2_tests.json", assets / "prop2_tests.json")
        shutil.copy(out / "prop2_tests.png", assets / "prop2_tests.png")
        rep = _load("report")
        rep.write_section(page, "prop2-tests", section(doc, sweep, assets.name))
        verdict = rep.verdict_section(assets)
        if verdict:
            rep.write_section(page, "verdict", verdict)
        print(f"wrote the prop2-tests section of {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
