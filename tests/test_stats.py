"""seq2d.stats against published t-table values, hand computations, scipy's own two-sample test and
the values of the hand-written implementation it replaced (float64)."""

from __future__ import annotations

import math
import statistics

import pytest

from seq2d.errors import InvalidValue
from seq2d.stats import t_cdf, t_quantile, tost, tost_summary, welch, welch_summary

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
    a, b = [91.0, 92.5, 90.2, 93.1], [92.0, 94.1, 93.3]
    sa = (statistics.fmean(a), statistics.stdev(a), len(a))
    sb = (statistics.fmean(b), statistics.stdev(b), len(b))
    assert welch_summary(*sa, *sb) == welch(a, b)
    assert tost_summary(*sa, *sb, margin=3.0) == tost(a, b, margin=3.0)
    with pytest.raises(InvalidValue, match=r"n_a: at least two values"):
        welch_summary(1.0, 0.1, 1, 1.0, 0.1, 3)


# The values the hand-written implementation (its own incomplete-beta t CDF, quantile by bisection) gave
# before seq2d.stats moved onto scipy.stats, printed with that implementation, from the repository root:
#   git show 7a54e28:seq2d/stats.py | sed 's/from .errors/from seq2d.errors/' > /tmp/old_stats.py
#   python -c "import sys; sys.path.insert(0, '/tmp'); from old_stats import *;
#              A, B = [91.0, 92.5, 90.2, 93.1], [92.0, 94.1, 93.3]; print(repr(welch(A, B)))"
# with one print per row below, of the call the row names (t_quantile(p, df), t_cdf(t, df) for the last two
# tables). The scipy-backed module must give them to 1e-10 relative (it does to ~3e-13).
_A, _B = [91.0, 92.5, 90.2, 93.1], [92.0, 94.1, 93.3]
_C, _D = [92.0, 92.4, 91.8, 92.2, 92.1], [92.1, 92.3, 91.9, 92.2, 92.0]
_W = ("diff", "se", "df", "low", "high", "level", "t", "p")
_T = ("equivalent", "p", "diff", "low", "high", "margin", "alpha", "df")
OLD_VALUES = [
    ("welch(A, B)", lambda: welch(_A, _B), _W,
     (1.433333333333323, 0.9052317076000157, 4.933334089182663, -0.9031287380493862, 3.769795404716032, 0.95,
      1.5833883427851088, 0.17496647860789039)),
    ("welch(A, B, level=0.99)", lambda: welch(_A, _B, level=0.99), _W,
     (1.433333333333323, 0.9052317076000157, 4.933334089182663, -2.242206484499207, 5.108873151165852, 0.99,
      1.5833883427851088, 0.17496647860789039)),
    ("tost(A, B, margin=3.0)", lambda: tost(_A, _B, margin=3.0), _T,
     (False, 0.0724283293434329, 1.433333333333323, -0.3962115205710093, 3.2628781872376553, 3.0, 0.05,
      4.933334089182663)),
    ("tost(C, D, margin=0.5)", lambda: tost(_C, _D, margin=0.5), _T,
     (True, 0.002201780334917469, 0.0, -0.23107148342826753, 0.23107148342826753, 0.5, 0.05, 7.199999999999889)),
    ("tost(C, D, margin=0.05)", lambda: tost(_C, _D, margin=0.05), _T,
     (False, 0.3474800101685345, 0.0, -0.23107148342826753, 0.23107148342826753, 0.05, 0.05, 7.199999999999889)),
    ("welch([90, 94], [89, 95])", lambda: welch([90.0, 94.0], [89.0, 95.0]), _W,
     (0.0, 3.605551275463989, 1.7422680412371139, -17.934123536163373, 17.934123536163373, 0.95, 0.0, 1.0)),
    ("tost([90, 94], [89, 95], margin=1.0)", lambda: tost([90.0, 94.0], [89.0, 95.0], margin=1.0), _T,
     (False, 0.4054461921117034, 0.0, -11.671095770512457, 11.671095770512457, 1.0, 0.05, 1.7422680412371139)),
    ("welch_summary(97.9, 0.12, 3, 97.5, 0.31, 5)", lambda: welch_summary(97.9, 0.12, 3, 97.5, 0.31, 5), _W,
     (-0.4000000000000057, 0.15498387012847498, 5.554527154067357, -0.7867278520852483, -0.01327214791476311, 0.95,
      -2.580913740690711, 0.04475827981089253)),
    ("tost_summary(97.9, 0.12, 3, 97.5, 0.31, 5, margin=1.0)",
     lambda: tost_summary(97.9, 0.12, 3, 97.5, 0.31, 5, margin=1.0), _T,
     (True, 0.004792101391877579, -0.4000000000000057, -0.7055429283094999, -0.09445707169051143, 1.0, 0.05,
      5.554527154067357)),
    # fractional df just above 1 (n_a = 2 with the larger spread), at level 0.9
    ("welch_summary(0.0, 1.0, 2, 0.3, 0.05, 40, level=0.9)", lambda: welch_summary(0.0, 1.0, 2, 0.3, 0.05, 40, level=0.9),
     _W, (0.3, 0.7071509739793901, 1.0002500152242586, -4.162884237832793, 4.762884237832792, 0.9, 0.4242375546932973,
          0.7445585322737873)),
    # no spread at all: the interval is the point, df = inf
    ("welch([1, 1], [2, 2])", lambda: welch([1.0, 1.0], [2.0, 2.0]), _W,
     (1.0, 0.0, math.inf, 1.0, 1.0, 0.95, math.inf, 0.0)),
    ("welch([1, 1], [1, 1])", lambda: welch([1.0, 1.0], [1.0, 1.0]), _W, (0.0, 0.0, math.inf, 0.0, 0.0, 0.95, 0.0, 1.0)),
    ("tost([1, 1], [1.2, 1.2], margin=0.5)", lambda: tost([1.0, 1.0], [1.2, 1.2], margin=0.5), _T,
     (True, 0.0, 0.19999999999999996, 0.19999999999999996, 0.19999999999999996, 0.5, 0.05, math.inf)),
    ("tost([1, 1], [2, 2], margin=0.5)", lambda: tost([1.0, 1.0], [2.0, 2.0], margin=0.5), _T,
     (False, 1.0, 1.0, 1.0, 1.0, 0.5, 0.05, math.inf)),
]
OLD_QUANTILES = [(3.03, 0.975, 3.164694835574551), (2.5, 0.95, 2.5582186141358534), (7.7, 0.995, 3.393726867618966),
                 (1, 0.975, 12.70620473617464), (1.5, 0.9, 2.19639841756549), (250.3, 0.975, 1.9694869113885147),
                 (math.inf, 0.975, 1.9599639845400247)]
OLD_CDF = [(3.03, 2.1, 0.9371665168088175), (2.5, -1.3, 0.1502433946353539), (7.7, 4.0, 0.9978649380863124),
           (0.7, 0.5, 0.634799156658835), (40, 1.7, 0.9515522711882131), (math.inf, 1.0, 0.8413447460685429)]


@pytest.mark.parametrize("what,call,fields,expected", OLD_VALUES, ids=[v[0] for v in OLD_VALUES])
def test_scipy_backed_results_equal_the_old_implementation(what, call, fields, expected):
    r = call()
    for field, want in zip(fields, expected):
        got = getattr(r, field)
        if isinstance(want, bool) or math.isinf(want) or want == 0:
            assert got == want, f"{what}.{field}: {got!r} != {want!r}"
        else:
            assert got == pytest.approx(want, rel=1e-10, abs=1e-13), f"{what}.{field}"


@pytest.mark.parametrize("df,p,q", OLD_QUANTILES)
def test_quantiles_equal_the_old_implementation(df, p, q):
    assert t_quantile(p, df) == pytest.approx(q, rel=1e-10)


@pytest.mark.parametrize("df,t,p", OLD_CDF)
def test_cdf_equals_the_old_implementation(df, t, p):
    assert t_cdf(t, df) == pytest.approx(p, rel=1e-10)


def test_sample_form_agrees_with_scipy_ttest_ind():
    from scipy import stats

    for a, b in ((_A, _B), (_C, [x + 0.3 for x in _D]), ([90.0, 94.0], [89.0, 95.0, 91.5])):
        ref = stats.ttest_ind(b, a, equal_var=False)
        r = welch(a, b, level=0.9)
        ci = ref.confidence_interval(0.9)
        assert (r.t, r.p, r.df) == (pytest.approx(ref.statistic, rel=1e-12), pytest.approx(ref.pvalue, rel=1e-12),
                                    pytest.approx(ref.df, rel=1e-12))
        assert (r.low, r.high) == (pytest.approx(ci.low, rel=1e-12), pytest.approx(ci.high, rel=1e-12))


# ---------------------------------------------------------------------- paired and multiple comparisons
def test_supported_margin_is_where_tost_switches():
    from seq2d.stats import tost

    a, b = [0.981, 0.984, 0.979, 0.983, 0.982], [0.978, 0.977, 0.980, 0.976, 0.979]
    m = tost(a, b, margin=0.01).supported_margin
    assert 0 < m < 0.01
    assert tost(a, b, margin=m * 1.001).equivalent and not tost(a, b, margin=m * 0.999).equivalent


def test_holm_by_hand_and_order_kept():
    from seq2d.stats import holm

    # sorted 0.01, 0.03, 0.04, 0.5 -> 4*0.01, 3*0.03, max(3*0.03, 2*0.04), max(.., 1*0.5)
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.3, 0.9]) == pytest.approx([0.6, 0.9]) and holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="probabilities"):
        holm([0.1, 1.5])


def test_binomial_se():
    from seq2d.stats import binomial_se

    assert binomial_se(0.98, 10_000) == pytest.approx(0.0014, abs=1e-6)
    with pytest.raises(ValueError, match="test examples"):
        binomial_se(0.5, 0)


def test_mcnemar_counts_only_discordant_examples():
    import numpy as np
    from scipy.stats import binomtest

    from seq2d.stats import mcnemar

    a = np.array([True] * 90 + [True] * 7 + [False] * 2 + [False])
    b = np.array([True] * 90 + [False] * 7 + [True] * 2 + [False])
    r = mcnemar(a, b)
    assert (r.only_a, r.only_b, r.n) == (7, 2, 100) and r.diff == pytest.approx(-0.05)
    assert r.p == pytest.approx(binomtest(2, 9, 0.5).pvalue) and r.p == pytest.approx(0.1796875)
    assert mcnemar(a, a).p == 1.0
    with pytest.raises(ValueError, match="booleans"):
        mcnemar(a.astype(int), b)


def test_paired_bootstrap_interval_and_determinism():
    import numpy as np

    from seq2d.stats import paired_bootstrap

    rng = np.random.default_rng(0)
    a = rng.random((3, 4000)) < 0.90
    b = a.copy()
    flip = rng.random((3, 4000)) < 0.05
    b[flip] = True  # b is never worse on an example: about +0.5 points
    r = paired_bootstrap(a, b, resamples=500, seed=1)
    assert r.diff == pytest.approx(b.mean() - a.mean())
    assert 0 < r.low < r.diff < r.high and r.p < 0.01
    assert paired_bootstrap(a, b, resamples=500, seed=1) == r  # seeded: the same draws
    same = paired_bootstrap(a, a, resamples=200)
    assert same.diff == 0 and same.low == same.high == 0 and same.p == 1.0
    with pytest.raises(ValueError, match="one shape"):
        paired_bootstrap(a, b[:2])


# ---------------------------------------------------------------------- one sample, one line (issue 34)
def test_mean_interval_against_a_hand_computation():
    from seq2d.stats import mean_interval

    iv = mean_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.77644511 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4) * sd / sqrt(n)
    assert iv.estimate == 3.0 and iv.df == 4 and iv.n == 5
    assert (iv.low, iv.high) == pytest.approx((3.0 - half, 3.0 + half), abs=1e-7)
    assert iv.contains(1.1) and not iv.contains(0.9)
    same = mean_interval([2.0, 2.0, 2.0])
    assert (same.low, same.high, same.df) == (2.0, 2.0, math.inf)
    with pytest.raises(InvalidValue, match="at least 2"):
        mean_interval([1.0])


def test_slope_interval_against_the_normal_equations():
    """The slope and its standard error from the textbook formulas (a second path), the interval t(0.975, n - 2) wide."""
    from seq2d.stats import slope_interval

    x, y = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0.1, 0.9, 2.2, 2.8, 4.3, 4.9]
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sxx
    a0 = my - b * mx
    s2 = sum((c - a0 - b * a) ** 2 for a, c in zip(x, y)) / (n - 2)
    se = math.sqrt(s2 / sxx)
    iv = slope_interval(x, y)
    assert iv.estimate == pytest.approx(b, rel=1e-12) and iv.intercept == pytest.approx(a0, rel=1e-12)
    assert iv.se == pytest.approx(se, rel=1e-10) and iv.df == n - 2
    assert (iv.low, iv.high) == pytest.approx((b - t_quantile(0.975, n - 2) * se, b + t_quantile(0.975, n - 2) * se))
    exact = slope_interval([1, 2, 3], [2, 4, 6])
    assert (exact.estimate, exact.low, exact.high) == pytest.approx((2.0, 2.0, 2.0))
    with pytest.raises(InvalidValue, match="same length"):
        slope_interval([1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(InvalidValue, match="two different values"):
        slope_interval([1, 1, 1], [1, 2, 3])
