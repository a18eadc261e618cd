"""Page text for the runs over several seeds (issue 20, items 2 and 3), every number read from their JSON:
gap_sweep.py's weight gap vs N (Proposition 2, Fig. 1) and truncated_training.py's --seeds runs with
several perturbed-initialisation controls (the noise floor). report.py's verdict takes its lines from
here when those JSON files sit next to the page.
"""

from __future__ import annotations

import math

from seq2d.renames import migrate_record
from seq2d.results_page import value_range

#: Proposition 2 as the slides state it (seeds/002_e0ce570a88c4aff3.txt), and Fig. 1's conclusion there.
PROP2_SOURCE = "||w_recurr^N - w_trunc^N|| <= alpha * gamma * k * lambda^k * N^(alpha*beta + 1)"
FIG1_CAPTION = ("Without the $1/t$ rate, the gradient descent bound no longer appears qualitatively correct, "
                "suggesting the $O(1/t)$ rate is necessary.")
SWEEP_REGEN = ("python experiments/stable_rnn/gap_sweep.py --from-json docs/results/stability/gap_sweep.json "
               "--out runs/stable_rnn --doc docs/results/stability.md")


def _r(v, fmt=".2f") -> str:
    return value_range(v, fmt)


def _pow10(logs) -> str:
    """A range of powers of ten from their log10 values: "10^14.4 to 10^20.4"."""
    return " to ".join(dict.fromkeys(f"10^{v:.1f}" for v in (min(logs), max(logs)))) if logs else "n/a"


def _mean(v):
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None


def _geo(v):
    v = [x for x in v if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def sweep_table(doc: dict) -> str:
    """Plain-text table of gap_sweep.py's summary (stdout)."""
    lines = [f"{'lambda':>7}{'rule':>10}{'alpha':>8}{'final loss':>12}{'slope (seeds)':>24}{'alpha*beta_hat+1':>22}"]
    for r in doc["summary"]:
        lines.append(f"{r['lam']:>7}{r['rule']:>10}{r['alpha']:>8g}{_mean(r['final_loss']):>12.4f}"
                     f"{_r(r['slope']):>24}{_r(r['exponent_lower_bound']):>22}")
    return "\n".join(lines)


def sweep_facts(doc: dict) -> dict:
    """The comparisons the page and the verdict state, computed once."""
    S = doc["summary"]
    at = [r for r in S if r["rule"] == "alpha/t"]
    co = [r for r in S if r["rule"] == "constant"]
    sl_at = [s for r in at for s in r["slope"]]
    bound_at = [b for r in at for b in r["exponent_lower_bound"]]
    below = sum(s is not None and s < 1 for s in sl_at)
    below_b = sum(s is not None and s < b for r in at for s, b in zip(r["slope"], r["exponent_lower_bound"]))
    sl_co = [s for r in co for s in r["slope"]]
    rising = sum(x for r in co for x in r["local_slopes_rising"])
    per_lam = []
    Ns = doc["config"]["steps_list"]
    i0 = Ns.index(doc["config"]["fit_from"]) if doc["config"]["fit_from"] in Ns else 0
    early = {}
    for rule in ("alpha/t", "constant"):
        early[rule] = [cf["weight_gap"][i0] / cf["weight_gap"][-1] for r in S if r["rule"] == rule
                       for cf in doc["configs"] if cf["lam"] == r["lam"] and cf["rule"] == rule
                       and cf["alpha"] == r["alpha"] and not cf["diverged"]]
    for a, c in zip(at, co):
        per_lam.append({"lam": a["lam"], "ratio_gap": [y / x for x, y in zip(a["gap_at_max_N"], c["gap_at_max_N"])],
                        "loss_ratio": _mean(c["final_loss"]) / _mean(a["final_loss"]),
                        "constant_faster": min(c["slope"]) > max(a["slope"]),
                        "disjoint": (min(c["slope"]) > max(a["slope"])) or (max(c["slope"]) < min(a["slope"]))})
    return {"slopes_alpha_t": sl_at, "bound_alpha_t": bound_at, "below_one": below, "below_bound": below_b,
            "n_alpha_t": len(sl_at), "slopes_constant": sl_co, "rising": rising, "n_constant": len(sl_co),
            "per_lambda": per_lam, "n_seeds": len(doc["config"]["seeds"]), "lams": doc["config"]["lams"],
            "N": max(doc["config"]["steps_list"]), "fit_from": doc["config"]["fit_from"], "early": early}


def gap_sweep_section(doc: dict, rel: str) -> str:
    c, f = doc["config"], sweep_facts(doc)
    load = lambda v: "n/a" if not v else ", ".join(f"{x:.1f}" for x in v)  # noqa: E731
    lines = [
        "## Proposition 2 / Fig. 1 over seeds, lambdas and step rules: the weight gap against N",
        "",
        "<!-- Written by experiments/stable_rnn/gap_sweep.py --doc from its JSON; rerun it rather than editing numbers. -->",
        "",
        f"Mode `{doc['mode']}`. Command: `{doc['command']}`; run {doc['date_utc']} on {doc['cpu']} ({doc['nproc']} "
        f"cores, torch {doc['torch']}, {doc['torch_threads']} thread), load average {load(doc['loadavg_start'])} at the "
        f"start and {load(doc['loadavg_end'])} at the end (shared machine), {doc['seconds'] / 60:.1f} min. This section "
        f"again from the committed JSON: `{SWEEP_REGEN}`.",
        "",
        f"gradient_gaps.py's random instance at a smaller size (input {c['input']}, hidden {c['hidden']}, T = {c['T']}, "
        f"loss on the last {c['n_out']} positions, {c['n']} sequences, teacher norm {c['teacher_lambda']}), truncation "
        f"k = {c['k']}; lambda (the projection radius, `||W_hh||_2 <= lambda` after every step) in {c['lams']}; seeds "
        f"{c['seeds']} (each its own data and seq2d.rnn initialisation); both step rules, full-batch projected gradient "
        f"descent to N = {f['N']:,}; every weight trained. The models of all configurations are batched "
        f"(plain torch); their loss equals seq2d.rnn's and seq2d.truncated_rnn's to a relative {doc['check']:.1e} "
        "(checked at the start and at perturbed weights).",
        "",
        (f"**How alpha was chosen** (the rule, fixed in gap_sweep.py before this run; N = {f['N']:,}, tuning seed(s) "
         f"{c['tune_seeds']}, divergence: loss above {c['diverged_loss']:g} or not finite). {doc['choice_rule']} "
         + (f"Extended by the rule: {', '.join(f'lambda {x[0]} {x[1]} alpha {x[2]:g}' for x in doc['extended'])}. "
            if doc.get("extended") else "The rule extended no grid. ")
         + (f"Still at an edge: {', '.join(f'lambda {lam} ' + ', '.join(v['at_edge']) for lam, v in doc['selection'].items() if v.get('at_edge'))}. "
            if any(v.get("at_edge") for v in doc["selection"].values()) else "No choice is at an edge of its grid. ")
         + "Divergence in the sweep"
         if doc.get("choice_rule") else
         f"**How alpha was chosen.** For each lambda, the recurrent model alone was trained to N = {f['N']:,} on seed(s) "
         f"{c['tune_seeds']} for every alpha of a grid; alpha/t takes the alpha with the lowest final training loss, the "
         "constant step the alpha whose final loss is closest to that one (in log), so that the two rules are compared "
         "at a comparable training loss. If a seed of the sweep then diverged at the chosen alpha (loss above "
         f"{c['diverged_loss']:g} or not finite), the next smaller alpha of the grid was taken and rerun on every seed")
        + (": given up that way, " + "; ".join(f"lambda {lam} {rule}: {', '.join(f'{a:g}' for a in v)}"
                                              for lam in c["lams"]
                                              for rule, v in doc["selection"][str(lam)].get("diverged_in_sweep", {}).items())
           if any(doc["selection"][str(lam)].get("diverged_in_sweep") for lam in c["lams"]) else ": none was")
        + (f" (the retries by `{doc['resumed']['command']}`, {doc['resumed']['date_utc']})" if doc.get("resumed") else "")
        + ". Final training loss of the tuning run per alpha (chosen in bold; -- diverged):",
        "",
        "| lambda | step | alpha: final loss |",
        "| ---: | --- | --- |",
    ]
    for lam in c["lams"]:
        s = doc["selection"][str(lam)]
        for rule in ("alpha/t", "constant"):
            ch = (s.get("alpha") or {}).get(rule)
            cells = []
            for a, row in s["grid"][rule].items():
                v = "--" if row["mean_final_loss"] is None else f"{row['mean_final_loss']:.4f}"
                cells.append(f"**{float(a):g}: {v}**" if ch is not None and float(a) == ch else f"{float(a):g}: {v}")
            lines.append(f"| {lam} | {rule} | {', '.join(cells)} |")
    lines += ["", f"Results at the chosen alpha, {f['n_seeds']} seeds each (range over the seeds; the slope is the "
              f"least-squares slope of log gap against log N for N >= {f['fit_from']}; beta_hat is the largest "
              "eigenvalue of the recurrent model's loss Hessian, measured by power iteration at the start and at the "
              "end, the larger kept: a lower bound on the gradient's Lipschitz constant beta, so alpha * beta_hat + 1 "
              "is a lower bound on the slides' exponent alpha*beta + 1):", "",
              "| lambda | step | alpha | steps sum to | final loss | distance moved | slope of gap vs N | last-interval "
              "slope | alpha * beta_hat + 1 | gap at N max (geometric mean) |",
              "| ---: | --- | ---: | ---: | --- | --- | --- | --- | --- | ---: |"]
    for r in doc["summary"]:
        lines.append(f"| {r['lam']} | {r['rule']} | {r['alpha']:g} | {r['step_sum']:.3g} | {_r(r['final_loss'], '.4f')} | "
                     f"{_r(r['moved'])} | {_r(r['slope'])} | {_r(r['last_local_slope'])} | "
                     f"{_r(r['exponent_lower_bound'])} | {_geo(r['gap_at_max_N']):.2e} |")
    lines += ["", sweep_paragraph(doc), "", f"![weight gap vs N, every seed]({rel}/gap_sweep.png)"]
    return "\n".join(lines)


def bound_growth(doc: dict) -> dict:
    """What the comparison with the slides' exponent allows: per alpha/t run at the chosen alpha, the bound's growth
    factor (log10) from N = fit_from to the largest N at the exponent alpha * beta_hat + 1 (a lower bound on
    alpha*beta + 1), and the measured growth factor of the gap over the same N."""
    c = doc["config"]
    Ns = c["steps_list"]
    i0 = Ns.index(c["fit_from"]) if c["fit_from"] in Ns else 0
    allowed, seen = [], []
    for r in doc["summary"]:
        if r["rule"] != "alpha/t":
            continue
        for cf in doc["configs"]:
            if cf["lam"] == r["lam"] and cf["rule"] == "alpha/t" and cf["alpha"] == r["alpha"] and not cf["diverged"]:
                e = cf["alpha"] * max(cf["beta_hat_start"], cf["beta_hat_end"]) + 1
                allowed.append(e * math.log10(Ns[-1] / Ns[i0]))
                seen.append(cf["weight_gap"][-1] / cf["weight_gap"][i0])
    return {"from_N": Ns[i0], "to_N": Ns[-1], "log10_allowed": allowed, "measured": seen}


def sweep_paragraph(doc: dict) -> str:
    f, g = sweep_facts(doc), bound_growth(doc)
    p = (f"**Against the slides' exponent: a comparison that cannot fail.** Proposition 2 as the slides state it "
         f"(seeds/002_e0ce570a88c4aff3.txt, step size alpha_t = alpha/t): `{PROP2_SOURCE}`. Measured with step alpha/t: "
         f"slopes of the gap against N {_r(f['slopes_alpha_t'])} over {f['n_alpha_t']} runs ({len(f['lams'])} lambdas x "
         f"{f['n_seeds']} seeds); {f['below_bound']} of {f['n_alpha_t']} lie below their run's lower bound alpha * "
         f"beta_hat + 1 ({_r(f['bound_alpha_t'])}) and {f['below_one']} of {f['n_alpha_t']} below 1. The exponent is at "
         "least 1 whatever beta is, so every gap that grows more slowly than N passes: with the measured beta_hat the "
         f"bound lets the gap grow by a factor {_pow10(g['log10_allowed'])} from N = {g['from_N']} to "
         f"N = {g['to_N']:,}, where it grew by {_r(g['measured'])}. This is not a test of the proposition; the tests "
         "that can fail (its rate in k, and the gap against the cumulative step) are in the section \"Lemma 2, "
         "Proposition 2 and Fig. 1: tests that can fail\". With a constant step the slopes are "
         f"{_r(f['slopes_constant'])}; the local slopes rise over the last three intervals in {f['rising']} of "
         f"{f['n_constant']} runs.")
    lam_txt = "; ".join(f"lambda {d['lam']}: constant-step gap / alpha/t gap at N = {f['N']:,} {_r(d['ratio_gap'])}, "
                        f"final-loss ratio {d['loss_ratio']:.2f}, slopes in N "
                        + ("disjoint across seeds" if d["disjoint"] else "overlapping across seeds")
                        for d in f["per_lambda"])
    sums = " and ".join(f"{r['step_sum']:.3g}" for r in doc["summary"] if r["lam"] == f["lams"][0])
    q = (f"**Fig. 1: what the slopes in N show.** The slides' caption of Fig. 1 concludes: \"{FIG1_CAPTION}\" Ours, at "
         f"a comparable training loss: {lam_txt}. By N = {f['fit_from']} the alpha/t gap has reached "
         f"{_r(f['early']['alpha/t'])} of its value at N = {f['N']:,} (its first steps are its largest), the constant "
         f"step's {_r(f['early']['constant'], '.3f')} of its own. A larger slope in N for the constant step is therefore "
         "what the two schedules do to the clock (alpha/t spends most of its sum of steps in its first steps), and "
         "says nothing by itself about the 1/t rate being necessary: at the largest N the two rules' sums of steps "
         f"are {sums} at lambda {f['lams'][0]}, and their gaps there are in the ratio "
         f"{_r([x for d in f['per_lambda'] for x in d['ratio_gap']])} (every lambda and seed). The pre-stated comparison at matched cumulative step is "
         "test P2-S / Fig1 in the section named above.")
    return p + "\n\n" + q


def sweep_verdict(doc: dict) -> tuple[list[str], list[str]]:
    """(holds, fails) lines for the verdict at the top of the page: the comparisons of this sweep are not tests
    (prop2_tests.py's are), so both go to the second list."""
    f, g = sweep_facts(doc), bound_growth(doc)
    c = doc["config"]
    scale = (f"{len(f['lams'])} lambdas x {f['n_seeds']} seeds, hidden {c['hidden']}, k = {c['k']}, N up to {f['N']:,}, "
             "alpha chosen per rule for a comparable training loss")
    ratio = [x for d in f["per_lambda"] for x in d["ratio_gap"]]
    fails = [f"**Proposition 2, growth in N, against the slides' exponent** ({scale}): with step alpha/t the gap grows "
             f"as N to the power {_r(f['slopes_alpha_t'])}, below alpha * beta_hat + 1 ({_r(f['bound_alpha_t'])}) in "
             f"{f['below_bound']} of {f['n_alpha_t']} runs; not a test: the exponent is >= 1 for any beta and the bound "
             f"allows a growth by {_pow10(g['log10_allowed'])} from N = {g['from_N']} to {g['to_N']:,} where "
             f"{_r(g['measured'])} was measured.",
             f"**Fig. 1's reading from the slopes in N** ({scale}): the constant step's slope in N "
             f"({_r(f['slopes_constant'])}) is above alpha/t's ({_r(f['slopes_alpha_t'])}), but the gaps at the "
             f"largest N are in the ratio {_r(ratio)} (constant / alpha/t) and alpha/t makes {_r(f['early']['alpha/t'])} "
             f"of its final gap by N = {f['fit_from']}: a schedule effect, not evidence for the reading (the matched-S "
             "test is prop2_tests.py's)."]
    return [], fails


# ------------------------------------------------------------------ truncated training over seeds
CONTROL = "recurrent, init perturbed"


def _controls(models: dict) -> list[dict]:
    return [m for n, m in models.items() if n == CONTROL or n.startswith(CONTROL + " #")]


def noise_floor(res: dict) -> list[dict]:
    """Per setting (stable / unstable): per k, the truncated-minus-recurrent test perplexity of every seed,
    against the control-minus-recurrent differences of every control of every seed (the noise floor); and the
    same for the relative W_rnn distance to the recurrent model."""
    out = {}
    for r in res["runs"].values():
        tag = "stable" if r["stable"] else "unstable"
        o = out.setdefault(tag, {"setting": tag, "seeds": [], "controls": [], "control_dist": [], "recurrent": [],
                                 "by_k": {}, "diverged": []})
        ms, rec = r["models"], r["models"]["recurrent"]
        o["seeds"].append(r.get("seed"))
        o["diverged"] += [n for n, m in ms.items() if m.get("diverged")]
        o["recurrent"].append(rec["test_ppl_recurrent"])
        for m in _controls(ms):
            o["controls"].append(m["test_ppl_recurrent"] - rec["test_ppl_recurrent"])
            o["control_dist"].append(m["distance"]["recurrent_rel"])
        for n, m in ms.items():
            if n.startswith("k=") and m.get("test_ppl_truncated") is not None:
                d = o["by_k"].setdefault(str(m["k"]), {"diff": [], "dist": []})
                d["diff"].append(m["test_ppl_truncated"] - rec["test_ppl_recurrent"])
                d["dist"].append(m["distance"]["recurrent_rel"])
    out = {t: o for t, o in out.items() if o["controls"]}  # no controls (--control-eps 0): no floor to read against
    for o in out.values():
        lo, hi = min(o["controls"]), max(o["controls"])
        for d in o["by_k"].values():
            d["outside_controls"] = sum(x < lo or x > hi for x in d["diff"])
            d["mean"] = _mean(d["diff"])
            d["mean_outside"] = not (lo <= d["mean"] <= hi)
            d["dist_over_control"] = [x / max(o["control_dist"]) for x in d["dist"]]
    return list(out.values())


def noise_floor_text(res: dict, longer: list[dict] = ()) -> str:
    """Markdown: the noise-floor table and a sentence per setting, from ``res`` (results.json)."""
    rows = noise_floor(res)
    if not rows or len(rows[0]["seeds"]) < 2:
        return ""
    lines = ["**Against the noise floor** (every seed and every perturbed-initialisation control; differences in test "
             "perplexity to the recurrent model of the same seed; a difference is outside the floor when it lies "
             "outside the range of all the controls' differences):", "",
             "| setting | recurrent test ppl (seeds) | controls - recurrent (all) | k | truncated - recurrent (per seed) "
             "| mean | seeds outside the controls' range | W_rnn distance / largest control's |",
             "| --- | --- | --- | ---: | --- | ---: | ---: | --- |"]
    for o in rows:
        for i, (k, d) in enumerate(sorted(o["by_k"].items(), key=lambda kv: int(kv[0]))):
            head = (f"| {o['setting']} | {', '.join(f'{v:.1f}' for v in o['recurrent'])} | "
                    f"{_r(o['controls'], '+.1f')} ({len(o['controls'])}) |" if i == 0 else "| | | |")
            lines.append(f"{head} {k} | {', '.join(f'{v:+.1f}' for v in d['diff'])} | {d['mean']:+.1f} | "
                         f"{d['outside_controls']} of {len(d['diff'])} | {_r(d['dist_over_control'])} |")
    lines.append("")
    for o in rows:
        out_k = [int(k) for k, d in o["by_k"].items() if d["outside_controls"] == len(d["diff"])]
        lines.append(f"- **{o['setting']}** ({len(o['seeds'])} seeds, {len(o['controls'])} controls): the controls "
                     f"alone move the test perplexity by {_r(o['controls'], '+.1f')}; "
                     + (f"every seed's truncated model lies outside that range for k in {out_k}."
                        if out_k else "no k has every seed outside that range: the truncation's effect on "
                        "perplexity is within the noise floor at this scale.")
                     + (f" Diverged: {o['diverged']}." if o["diverged"] else ""))
    under = undertraining(res, longer)
    if under:
        lines += ["", under]
    return "\n".join(lines)


def _updates(res: dict) -> list[int]:
    """The optimizer updates the models of truncated_training.py's ``res`` took, each count once (a file written
    before issue 36 says ``steps``: read as ``updates``, seq2d.renames.migrate_record)."""
    return sorted({u for r in res["runs"].values() for m in r["models"].values() if (u := migrate_record(m).get("updates"))})


def undertraining(res: dict, longer: list[dict] = ()) -> str:
    """The smallest k's truncated-minus-recurrent perplexity after this run's optimizer updates, next to the same
    difference in longer runs (``longer``: other truncated_training.py results, e.g. the full-corpus runs), with the
    reading that a gain of the smallest k after few updates is under-training. Empty when no k has every seed outside
    the controls' range."""
    rows = noise_floor(res)
    gain = [(o, k) for o in rows for k, d in o["by_k"].items() if d["outside_controls"] == len(d["diff"]) and d["mean"] < 0]
    if not gain:
        return ""
    ks = sorted({int(k) for _, k in gain})
    updates = _updates(res)
    rec = [r["models"]["recurrent"]["test_ppl_recurrent"] for r in res["runs"].values()]
    text = (f"**The gain of k = {', '.join(map(str, ks))} is under-training (our reading).** It comes after "
            f"{_r(updates, 'd')} optimizer updates ({res['config']['epochs']} epochs over {res['corpus']['train_tokens']:,} "
            f"tokens), with the recurrent models still at test perplexity {_r(rec, '.1f')}")
    long_d, long_c, long_u, long_rec = [], [], [], []
    for L in longer:
        for r in L["runs"].values():
            ms, recm = r["models"], r["models"]["recurrent"]
            for k in ks:
                m = ms.get(f"k={k}")
                if m and m.get("test_ppl_truncated") is not None:
                    long_d.append(m["test_ppl_truncated"] - recm["test_ppl_recurrent"])
            long_c += [m["test_ppl_recurrent"] - recm["test_ppl_recurrent"] for m in _controls(ms)]
            long_u.append(migrate_record(recm).get("updates"))
            long_rec.append(recm["test_ppl_recurrent"])
    means = [o["by_k"][k]["mean"] for o, k in gain]
    if long_d:
        text += (f" (mean gain {_r(means, '+.1f')}). In the longer runs of this page ({_r(long_u, ',d')} updates over the "
                 f"full training stream, recurrent test perplexity {_r(long_rec, '.1f')}) the same k ends "
                 f"{', '.join(f'{v:+.1f}' for v in long_d)} from the recurrent model, against "
                 f"{', '.join(f'{v:+.1f}' for v in long_c)} for their controls"
                 + (": every one of them smaller than the smallest mean gain here, so the gain shrinks with training"
                    if all(d > max(means) for d in long_d) else ""))
    return text + (". A short window is easier to fit in a few hundred updates; the difference measures how far each "
                   "model got, not a benefit of truncation, and this run is not rerun longer.")


def noise_verdict(res: dict, longer: list[dict] = ()) -> tuple[list[str], list[str]]:
    a = res["config"]
    holds, fails = [], []
    for o in noise_floor(res):
        out_k = [int(k) for k, d in o["by_k"].items() if d["outside_controls"] == len(d["diff"])]
        diffs = [x for d in o["by_k"].values() for x in d["diff"]]
        scale = (f"{o['setting']}, hidden {a['hidden']}, {a['epochs']} epochs over {res['corpus']['train_tokens']:,} "
                 f"tokens, {len(o['seeds'])} seeds x {len(o['controls']) // max(1, len(o['seeds']))} controls")
        line = (f"**Truncated training, perplexity, against the noise floor** ({scale}): truncated minus recurrent "
                f"{_r(diffs, '+.1f')} (k in {sorted(int(k) for k in o['by_k'])}), controls minus recurrent "
                f"{_r(o['controls'], '+.1f')}; ")
        inside = sorted(int(k) for k in o["by_k"] if int(k) not in out_k)
        if out_k:
            updates = _updates(res)
            fails.append(line + "every seed outside the controls' range for k in "
                         + ", ".join(f"{k} (mean {o['by_k'][str(k)]['mean']:+.1f})" for k in out_k)
                         + f" after {_r(updates, 'd')} optimizer updates: truncation changes the perplexity there by more "
                         "than the noise"
                         + (f"; within the noise for k in {inside}" if inside else "")
                         + ("; a gain after few steps that the full-corpus runs do not show: under-training (see that "
                            "section)." if longer and any(o["by_k"][str(k)]["mean"] < 0 for k in out_k) else "."))
        else:
            holds.append(line + "no k has every seed outside the controls' range: no effect of truncation on "
                         "perplexity beyond the noise at this scale.")
    return holds, fails
