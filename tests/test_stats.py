"""seq2d.stats against published t-table values and hand computations (float64)."""

from __future__ import annotations

import math
import statistics

import pytest

from seq2d.errors import InvalidValue
from seq2d.stats import t_cdf, t_quantile, tost, welch

# two-sided 95 % (p = 0.975) and 99 % (p = 0.995) quantiles, standard tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2)
TABLE = [(1, 0.975, 12.7062047), (2, 0.975, 4.30265273), (3, 0.975, 3.18244631), (4, 0.975, 2.77644511),
         (10, 0.975, 2.22813885), (30, 0.975, 2.04227246), (100, 0.975, 1.98397152),
         (1, 0.995, 63.6567412), (5, 0.995, 4.03214298), (20, 0.995, 2.84533971)]


@pytest.mark.parametrize("df,p,q", TABLE)
def test_quantiles_match_the_table(df, p, q):
    assert t_quantile(p, df) == pytest.approx(q, abs=5e-7)
    assert t_cdf(q, df) == pytest.approx(p, abs=1e-8)


def test_fractional_df_is_not_rounded_and_lies_between_its_neighbours():
    q = t_quantile(0.975, 3.03)
    assert t_quantile(0.975, 4) < q < t_quantile(0.975, 3)  # 2.776 < q < 3.182 (the old table used 2.776)
    assert q == pytest.approx(3.165, abs=2e-3)  # the figure


def test_cdf_symmetry_limits_and_normal_case():
    for df in (1, 2.5, 7, 40):
        for t in (0.3, 1.7, 4.0):
            assert t_cdf(-t, df) == pytest.approx(1 - t_cdf(t, df), abs=1e-13)
    assert t_cdf(0.0, 3) == 0.5
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959963985, abs=1e-8)
    assert t_quantile(0.025, 10) == pytest.approx(-2.22813885, abs=5e-7)


def test_welch_by_hand():
    a, b = [91.0, 92.5, 90.2, 93.1], [92.0, 94.1, 93.3]
    r = welch(a, b)
    va, vb = statistics.variance(a) / 4, statistics.variance(b) / 3
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 2)
    se = math.sqrt(va + vb)
    assert r.diff == pytest.approx(statistics.fmean(b) - statistics.fmean(a))
    assert r.df == pytest.approx(df) and r.se == pytest.approx(se)
    q = t_quantile(0.975, df)
    assert (r.low, r.high) == (pytest.approx(r.diff - q * se), pytest.approx(r.diff + q * se))
    assert r.p == pytest.approx(2 * (1 - t_cdf(abs(r.diff / se), df)))
    assert welch(a, b, level=0.99).high > r.high  # wider at a higher level


def test_tost_equivalence_and_its_interval():
    a = [92.0, 92.4, 91.8, 92.2, 92.1]
    b = [92.1, 92.3, 91.9, 92.2, 92.0]
    r = tost(a, b, margin=0.5)
    assert r.equivalent and r.p < 0.05 and -0.5 < r.low <= r.diff <= r.high < 0.5
    assert not tost(a, b, margin=0.05).equivalent  # too tight a margin for this spread
    far = [x + 2.0 for x in b]
    assert not tost(a, far, margin=0.5).equivalent
    # a Welch interval containing 0 is not equivalence: few noisy runs
    c, d = [90.0, 94.0], [89.0, 95.0]
    assert welch(c, d).low < 0 < welch(c, d).high and not tost(c, d, margin=1.0).equivalent


@pytest.mark.parametrize("call,match", [
    (lambda: welch([1.0], [1.0, 2.0]), r"a: at least two values"),
    (lambda: welch([1.0, 2.0], ["x", 2.0]), r"b: expected a sequence of numbers"),
    (lambda: welch([1.0, float("nan")], [1.0, 2.0]), r"a: expected finite numbers"),
    (lambda: welch([1.0, 2.0], [1.0, 2.0], level=1.5), r"level: expected a probability"),
    (lambda: tost([1.0, 2.0], [1.0, 2.0], margin=0), r"margin: expected a positive finite number"),
    (lambda: tost([1.0, 2.0], [1.0, 2.0], margin=1, alpha=0.7), r"alpha: expected a level in \(0, 0.5\)"),
    (lambda: t_quantile(1.0, 3), r"p: expected a probability in \(0, 1\)"),
    (lambda: t_cdf(1.0, 0), r"df: expected a positive number"),
])
def test_bad_inputs_are_named(call, match):
    with pytest.raises(InvalidValue, match=match):
        call()


def test_summary_forms_equal_the_sample_forms():
    from seq2d.stats import tost_summary, welch_summary

    a, b = [91.0, 92.5, 90.2, 93.1], [92.0, 94.1, 93.3]
    sa = (statistics.fmean(a), statistics.stdev(a), len(a))
    sb = (statistics.fmean(b), statistics.stdev(b), len(b))
    assert welch_summary(*sa, *sb) == welch(a, b)
    assert tost_summary(*sa, *sb, margin=3.0) == tost(a, b, margin=3.0)
    with pytest.raises(InvalidValue, match=r"n_a: at least two values"):
        welch_summary(1.0, 0.1, 1, 1.0, 0.1, 3)
