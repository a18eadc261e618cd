"""Two-sample statistics for "is model B as accurate as model A?", on :mod:`scipy.stats`.

    welch(a, b)              # difference of means b - a, Welch's df, a t interval
    tost(a, b, margin=0.5)   # two one-sided tests: is |mean(b) - mean(a)| < margin?

Paired and multiple comparisons, for classifiers scored on the same test examples::

    holm([p1, p2, ...])                  # Holm-Bonferroni adjusted p-values (family-wise error)
    binomial_se(acc, n)                  # the test set's own sampling error of an accuracy
    mcnemar(correct_a, correct_b)        # exact McNemar test of one pair of runs, same examples
    paired_bootstrap(ca, cb)             # mean(cb) - mean(ca) over (seeds, examples), resampling both

One sample and a fitted line::

    mean_interval(values)                # the mean and its t interval (e.g. one slope per seed)
    slope_interval(x, y)                 # least-squares slope of y on x and its t interval (n - 2 df)

A Welch interval that contains 0 says the data cannot tell the models apart; it does not
say they are equal. Equivalence is what :func:`tost` tests (Schuirmann's two one-sided
tests): B is equivalent to A within ``margin`` at level ``alpha`` when both one-sided
tests reject, i.e. when the ``1 - 2 alpha`` Welch interval lies inside ``(-margin,
margin)``.

What scipy computes and what is ours:

    ============================  ==================================================
    t and p of Welch's test       ``scipy.stats.ttest_ind_from_stats(equal_var=False)``
    TOST's two one-sided p        the same, ``alternative="greater"`` / ``"less"``,
                                  with mean(b) shifted by +margin / -margin
    interval half-width           ``scipy.stats.t.ppf(q, df) * se`` (fractional df exact)
    diff, se, Welch's df          here (:func:`_parts`): the Welch-Satterthwaite formula,
                                  the one ``scipy.stats.ttest_ind`` uses
    zero spread (se == 0)         here: the interval is the point, df = inf
    ============================  ==================================================

The sample forms (:func:`welch`, :func:`tost`) reduce the samples to means and sample standard
deviations and take the same path as the summary forms, so both give identical results.
Until the port to scipy (issue 22) this module carried its own Student t CDF and quantile; the
tests hold the values that implementation gave (tests/test_stats.py) and these agree to ~1e-13.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as _st

from .errors import InvalidValue

__all__ = ["t_cdf", "t_quantile", "welch", "tost", "welch_summary", "tost_summary", "WelchResult", "TostResult",
           "holm", "binomial_se", "mcnemar", "McNemarResult", "paired_bootstrap", "BootstrapResult", "Interval",
           "mean_interval", "slope_interval"]


# ---------------------------------------------------------------------- the t distribution (scipy's)
def _check_df(df: float) -> float:
    if isinstance(df, bool) or not isinstance(df, (int, float)) or math.isnan(df) or df <= 0:
        raise InvalidValue(f"df: expected a positive number of degrees of freedom, got {df!r}")
    return float(df)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (any positive real; ``inf``: the normal): ``scipy.stats.t.cdf``."""
    return float(_st.t.cdf(t, _check_df(df)))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom: ``scipy.stats.t.ppf``."""
    df = _check_df(df)
    if not 0.0 < p < 1.0:
        raise InvalidValue(f"p: expected a probability in (0, 1), got {p!r}")
    return float(_st.t.ppf(p, df))


# ---------------------------------------------------------------------- two samples
@dataclass(frozen=True)
class WelchResult:
    """``diff`` = mean(b) - mean(a); ``[low, high]`` its ``level`` interval; ``df`` Welch's degrees
    of freedom; ``t``, ``p``: the two-sided test of ``diff == 0``."""

    diff: float
    se: float
    df: float
    low: float
    high: float
    level: float
    t: float
    p: float


@dataclass(frozen=True)
class TostResult:
    """``equivalent``: both one-sided tests reject at ``alpha`` (``p`` = the larger p-value), i.e.
    the ``1 - 2 alpha`` interval ``[low, high]`` of mean(b) - mean(a) lies inside ``(-margin, margin)``."""

    equivalent: bool
    p: float
    diff: float
    low: float
    high: float
    margin: float
    alpha: float
    df: float

    @property
    def supported_margin(self) -> float:
        """The smallest margin at which these data are equivalent at ``alpha``: the larger end of
        the ``1 - 2 alpha`` interval in absolute value (TOST rejects for every margin above it)."""
        return max(abs(self.low), abs(self.high))


@dataclass(frozen=True)
class _Summary:
    """Both samples as (mean, sample sd, n), and what Welch's test derives from them."""

    mean_a: float
    sd_a: float
    n_a: int
    mean_b: float
    sd_b: float
    n_b: int
    diff: float  # mean_b - mean_a
    se: float    # sqrt(sd_a^2 / n_a + sd_b^2 / n_b)
    df: float    # Welch-Satterthwaite; inf when se == 0

    def ttest(self, shift: float = 0.0, alternative: str = "two-sided") -> tuple[float, float]:
        """(t, p) of scipy's Welch test of ``mean_b + shift - mean_a`` against 0."""
        r = _st.ttest_ind_from_stats(self.mean_b + shift, self.sd_b, self.n_b, self.mean_a, self.sd_a, self.n_a,
                                     equal_var=False, alternative=alternative)
        return float(r.statistic), float(r.pvalue)


def _samples(a: Sequence[float], b: Sequence[float]) -> tuple[list[float], list[float]]:
    out = []
    for name, x in (("a", a), ("b", b)):
        try:
            x = [float(v) for v in x]
        except (TypeError, ValueError):
            raise InvalidValue(f"{name}: expected a sequence of numbers, got {x!r}") from None
        if len(x) < 2:
            raise InvalidValue(f"{name}: at least two values are needed for a variance, got {len(x)}")
        if not all(math.isfinite(v) for v in x):
            raise InvalidValue(f"{name}: expected finite numbers, got {x}")
        out.append(x)
    return out[0], out[1]


def _from_samples(a, b) -> _Summary:
    a, b = _samples(a, b)
    return _parts(statistics.fmean(a), statistics.stdev(a), len(a), statistics.fmean(b), statistics.stdev(b), len(b))


def _parts(mean_a, sd_a, n_a, mean_b, sd_b, n_b) -> _Summary:
    """The checked summary statistics with mean_b - mean_a, its standard error and Welch's df."""
    for name, n in (("n_a", n_a), ("n_b", n_b)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise InvalidValue(f"{name}: at least two values are needed for a variance, got {n!r}")
    for name, v in (("sd_a", sd_a), ("sd_b", sd_b)):
        if not (math.isfinite(v) and v >= 0):
            raise InvalidValue(f"{name}: expected a finite standard deviation >= 0, got {v!r}")
    va, vb = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    se = math.sqrt(va + vb)
    df = math.inf if se == 0 else (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    return _Summary(mean_a, sd_a, n_a, mean_b, sd_b, n_b, mean_b - mean_a, se, df)


def welch(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> WelchResult:
    """Welch's t interval for mean(b) - mean(a) at ``level`` (unequal variances; exact quantile)."""
    return _welch(_from_samples(a, b), level)


def welch_summary(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int,
                  level: float = 0.95) -> WelchResult:
    """:func:`welch` from summary statistics (sample standard deviations), e.g. a published table."""
    return _welch(_parts(mean_a, sd_a, n_a, mean_b, sd_b, n_b), level)


def _welch(s: _Summary, level: float) -> WelchResult:
    if not 0 < level < 1:
        raise InvalidValue(f"level: expected a probability in (0, 1), got {level!r}")
    diff, se, df = s.diff, s.se, s.df
    if se == 0:  # no spread at all: the interval is the point (scipy would answer nan)
        return WelchResult(diff, 0.0, df, diff, diff, level, math.copysign(math.inf, diff) if diff else 0.0,
                           0.0 if diff else 1.0)
    t, p = s.ttest()
    q = float(_st.t.ppf(0.5 + level / 2, df))
    return WelchResult(diff, se, df, diff - q * se, diff + q * se, level, t, p)


def tost(a: Sequence[float], b: Sequence[float], margin: float, alpha: float = 0.05) -> TostResult:
    """Two one-sided Welch tests that ``|mean(b) - mean(a)| < margin`` (same units as the data)."""
    _check_tost(margin, alpha)
    return _tost(_from_samples(a, b), margin, alpha)


def tost_summary(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int, margin: float,
                 alpha: float = 0.05) -> TostResult:
    """:func:`tost` from summary statistics (sample standard deviations)."""
    _check_tost(margin, alpha)
    return _tost(_parts(mean_a, sd_a, n_a, mean_b, sd_b, n_b), margin, alpha)


def _check_tost(margin, alpha) -> None:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin > 0 or math.isinf(margin):
        raise InvalidValue(f"margin: expected a positive finite number (the largest difference called equivalent), got {margin!r}")
    if not 0 < alpha < 0.5:
        raise InvalidValue(f"alpha: expected a level in (0, 0.5), got {alpha!r}")


def _tost(s: _Summary, margin: float, alpha: float) -> TostResult:
    diff, se, df = s.diff, s.se, s.df
    if se == 0:
        inside = abs(diff) < margin
        return TostResult(inside, 0.0 if inside else 1.0, diff, diff, diff, float(margin), alpha, df)
    _, p_low = s.ttest(+margin, "greater")   # H0: diff <= -margin
    _, p_high = s.ttest(-margin, "less")     # H0: diff >= +margin
    q = float(_st.t.ppf(1.0 - alpha, df))
    p = max(p_low, p_high)
    return TostResult(p < alpha, p, diff, diff - q * se, diff + q * se, float(margin), alpha, df)


# ---------------------------------------------------------------------- one sample, one line
@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided t interval at ``level``: ``[low, high]``, standard error
    ``se`` and ``df`` degrees of freedom (``inf``: no spread, the interval is the point). For a
    fitted line ``intercept`` is set too."""

    estimate: float
    low: float
    high: float
    se: float
    df: float
    n: int
    level: float
    intercept: float | None = None

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def _numbers(x, name: str, least: int) -> list[float]:
    try:
        x = [float(v) for v in x]
    except (TypeError, ValueError):
        raise InvalidValue(f"{name}: expected a sequence of numbers, got {x!r}") from None
    if len(x) < least:
        raise InvalidValue(f"{name}: at least {least} values are needed, got {len(x)}")
    if not all(math.isfinite(v) for v in x):
        raise InvalidValue(f"{name}: expected finite numbers, got {x}")
    return x


def _level(level: float) -> float:
    if not 0 < level < 1:
        raise InvalidValue(f"level: expected a probability in (0, 1), got {level!r}")
    return level


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """The mean of ``values`` (>= 2) and its t interval, ``n - 1`` df: ``scipy.stats.t.ppf`` times
    the standard error ``sd / sqrt(n)``."""
    x, level = _numbers(values, "values", 2), _level(level)
    m, se = statistics.fmean(x), statistics.stdev(x) / math.sqrt(len(x))
    if se == 0:
        return Interval(m, m, m, 0.0, math.inf, len(x), level)
    q = float(_st.t.ppf(0.5 + level / 2, len(x) - 1))
    return Interval(m, m - q * se, m + q * se, se, len(x) - 1, len(x), level)


def slope_interval(x: Sequence[float], y: Sequence[float], level: float = 0.95) -> Interval:
    """The least-squares slope of ``y`` on ``x`` (``scipy.stats.linregress``) and its t interval
    with ``n - 2`` df (the textbook interval for independent errors of equal variance; for a
    smooth deterministic curve it measures the lack of fit, not a sampling error)."""
    xs, ys, level = _numbers(x, "x", 3), _numbers(y, "y", 3), _level(level)
    if len(xs) != len(ys):
        raise InvalidValue(f"x and y must have the same length, got {len(xs)} and {len(ys)}")
    if max(xs) == min(xs):
        raise InvalidValue(f"x: expected at least two different values, got {xs}")
    r = _st.linregress(xs, ys)
    se, df = float(r.stderr), len(xs) - 2
    if se == 0:
        return Interval(float(r.slope), float(r.slope), float(r.slope), 0.0, math.inf, len(xs), level,
                        float(r.intercept))
    q = float(_st.t.ppf(0.5 + level / 2, df))
    return Interval(float(r.slope), float(r.slope) - q * se, float(r.slope) + q * se, se, df, len(xs), level,
                    float(r.intercept))


# ---------------------------------------------------------------------- multiple and paired comparisons
def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order: reject hypothesis ``i`` at family-wise
    level ``alpha`` when ``holm(p)[i] < alpha``. (scipy has Benjamini-Hochberg, which controls the
    false discovery rate, not Holm; statsmodels' ``multipletests(method="holm")`` gives the same
    values but is not a dependency.)"""
    p = [float(v) for v in pvalues]
    if not all(0.0 <= v <= 1.0 for v in p):
        raise InvalidValue(f"pvalues: expected probabilities in [0, 1], got {p}")
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))  # step-down, kept monotone
        out[i] = running
    return out


def binomial_se(acc: float, n: int) -> float:
    """The standard error of an accuracy ``acc`` measured on ``n`` independent test examples,
    ``sqrt(acc (1 - acc) / n)``: the spread a re-drawn test set of the same size would add."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidValue(f"n: expected a positive number of test examples, got {n!r}")
    if not 0.0 <= acc <= 1.0:
        raise InvalidValue(f"acc: expected an accuracy in [0, 1], got {acc!r}")
    return math.sqrt(acc * (1.0 - acc) / n)


@dataclass(frozen=True)
class McNemarResult:
    """``only_a``: examples run a gets right and b wrong; ``only_b`` the reverse; ``p``: the exact
    two-sided binomial test of ``only_b`` out of ``only_a + only_b`` against 1/2 (1.0 with no
    discordant example); ``diff`` = (only_b - only_a) / n, the accuracy difference b - a."""

    only_a: int
    only_b: int
    n: int
    diff: float
    p: float


def _correct(x, name: str):
    import numpy as np

    a = np.asarray(x)
    if a.dtype != np.bool_:
        raise InvalidValue(f"{name}: expected booleans (example answered correctly), got dtype {a.dtype}")
    return a


def mcnemar(correct_a, correct_b) -> McNemarResult:
    """Exact McNemar test of two classifiers on the same ``n`` test examples (boolean vectors,
    example k answered correctly): only the discordant examples carry information; the p-value
    is ``scipy.stats.binomtest(only_b, only_a + only_b, 0.5)``."""
    a, b = _correct(correct_a, "correct_a"), _correct(correct_b, "correct_b")
    if a.ndim != 1 or a.shape != b.shape:
        raise InvalidValue(f"correct_a and correct_b must be vectors of the same length, got {a.shape} and {b.shape}")
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    k = only_a + only_b
    p = 1.0 if k == 0 else float(_st.binomtest(only_b, k, 0.5).pvalue)
    return McNemarResult(only_a, only_b, int(a.size), (only_b - only_a) / a.size, p)


@dataclass(frozen=True)
class BootstrapResult:
    """``diff``: mean(b) - mean(a) over every (seed, example); ``[low, high]`` its percentile
    interval at ``level`` from ``resamples`` draws; ``p``: two-sided bootstrap p-value of 0."""

    diff: float
    low: float
    high: float
    level: float
    resamples: int
    p: float


def paired_bootstrap(correct_a, correct_b, *, resamples: int = 10_000, level: float = 0.95,
                     seed: int = 0) -> BootstrapResult:
    """Percentile bootstrap of the accuracy difference b - a of paired runs on the same test
    examples: ``correct_a``, ``correct_b`` are ``(seeds, n)`` booleans, row ``s`` of each the same
    seed's run (or any pairing of runs), column ``k`` the same test example. Each resample draws
    seeds (rows) and examples (columns) with replacement, both at once, so the interval carries
    the seed-to-seed spread and the test set's sampling error (a two-way bootstrap; scipy's
    ``bootstrap`` resamples one axis only, hence this function)."""
    import numpy as np

    a, b = _correct(correct_a, "correct_a"), _correct(correct_b, "correct_b")
    if a.ndim == 1:
        a, b = a[None], b[None] if b.ndim == 1 else b
    if a.ndim != 2 or a.shape != b.shape:
        raise InvalidValue(f"correct_a and correct_b must be (seeds, examples) of one shape, got {a.shape} and {b.shape}")
    if not 0 < level < 1:
        raise InvalidValue(f"level: expected a probability in (0, 1), got {level!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 100:
        raise InvalidValue(f"resamples: expected an int >= 100, got {resamples!r}")
    d = b.astype(np.float64) - a.astype(np.float64)  # (S, n) per-example differences
    S, n = d.shape
    rng = np.random.default_rng(seed)
    stats_ = np.empty(resamples)
    for r in range(resamples):  # one (S, n) index draw per resample: a few ms at MNIST's n
        rows = rng.integers(0, S, S)
        cols = rng.integers(0, n, n)
        stats_[r] = d[rows][:, cols].mean()
    lo, hi = np.quantile(stats_, [(1 - level) / 2, (1 + level) / 2])
    p = min(1.0, 2 * min(float((stats_ <= 0).mean()), float((stats_ >= 0).mean())))
    return BootstrapResult(float(d.mean()), float(lo), float(hi), level, resamples, p)
