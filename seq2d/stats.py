"""Two-sample statistics for "is model B as accurate as model A?" (no scipy needed).

    welch(a, b)              # difference of means b - a, Welch's df, a t interval
    tost(a, b, margin=0.5)   # two one-sided tests: is |mean(b) - mean(a)| < margin?

A Welch interval that contains 0 says the data cannot tell the models apart; it does not
say they are equal. Equivalence is what :func:`tost` tests (Schuirmann's two one-sided
tests): B is equivalent to A within ``margin`` at level ``alpha`` when both one-sided
tests reject, i.e. when the ``1 - 2 alpha`` Welch interval lies inside ``(-margin,
margin)``. Quantiles are exact for fractional degrees of freedom (the Student t CDF via
the regularised incomplete beta function, inverted by bisection), never rounded to a
table entry.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InvalidValue

__all__ = ["t_cdf", "t_quantile", "welch", "tost", "welch_summary", "tost_summary", "WelchResult", "TostResult"]


# ---------------------------------------------------------------------- the t distribution
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError("incomplete beta: the continued fraction did not converge")  # pragma: no cover


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _check_df(df: float) -> float:
    if isinstance(df, bool) or not isinstance(df, (int, float)) or math.isnan(df) or df <= 0:
        raise InvalidValue(f"df: expected a positive number of degrees of freedom, got {df!r}")
    return float(df)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (any positive real; ``inf``: the normal)."""
    df = _check_df(df)
    if math.isinf(df):
        return 0.5 * math.erfc(-t / math.sqrt(2.0))
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (exact to ~1e-12)."""
    df = _check_df(df)
    if not 0.0 < p < 1.0:
        raise InvalidValue(f"p: expected a probability in (0, 1), got {p!r}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


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


def _welch_parts(a, b) -> tuple[float, float, float]:
    a, b = _samples(a, b)
    return _parts(statistics.fmean(a), statistics.stdev(a), len(a), statistics.fmean(b), statistics.stdev(b), len(b))


def _parts(mean_a, sd_a, n_a, mean_b, sd_b, n_b) -> tuple[float, float, float]:
    """(mean_b - mean_a, its standard error, Welch's df) from summary statistics."""
    for name, n in (("n_a", n_a), ("n_b", n_b)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise InvalidValue(f"{name}: at least two values are needed for a variance, got {n!r}")
    for name, v in (("sd_a", sd_a), ("sd_b", sd_b)):
        if not (math.isfinite(v) and v >= 0):
            raise InvalidValue(f"{name}: expected a finite standard deviation >= 0, got {v!r}")
    va, vb = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    se = math.sqrt(va + vb)
    diff = mean_b - mean_a
    if se == 0:
        return diff, 0.0, math.inf
    df = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    return diff, se, df


def welch(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> WelchResult:
    """Welch's t interval for mean(b) - mean(a) at ``level`` (unequal variances; exact quantile)."""
    return _welch(*_welch_parts(a, b), level)


def welch_summary(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int,
                  level: float = 0.95) -> WelchResult:
    """:func:`welch` from summary statistics (sample standard deviations), e.g. a published table."""
    return _welch(*_parts(mean_a, sd_a, n_a, mean_b, sd_b, n_b), level)


def _welch(diff: float, se: float, df: float, level: float) -> WelchResult:
    if not 0 < level < 1:
        raise InvalidValue(f"level: expected a probability in (0, 1), got {level!r}")
    if se == 0:  # no spread at all: the interval is the point
        return WelchResult(diff, 0.0, df, diff, diff, level, math.copysign(math.inf, diff) if diff else 0.0,
                           0.0 if diff else 1.0)
    q = t_quantile(0.5 + level / 2, df)
    t = diff / se
    p = 2.0 * (1.0 - t_cdf(abs(t), df))
    return WelchResult(diff, se, df, diff - q * se, diff + q * se, level, t, p)


def tost(a: Sequence[float], b: Sequence[float], margin: float, alpha: float = 0.05) -> TostResult:
    """Two one-sided Welch tests that ``|mean(b) - mean(a)| < margin`` (same units as the data)."""
    _check_tost(margin, alpha)
    return _tost(*_welch_parts(a, b), margin, alpha)


def tost_summary(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int, margin: float,
                 alpha: float = 0.05) -> TostResult:
    """:func:`tost` from summary statistics (sample standard deviations)."""
    _check_tost(margin, alpha)
    return _tost(*_parts(mean_a, sd_a, n_a, mean_b, sd_b, n_b), margin, alpha)


def _check_tost(margin, alpha) -> None:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin > 0 or math.isinf(margin):
        raise InvalidValue(f"margin: expected a positive finite number (the largest difference called equivalent), got {margin!r}")
    if not 0 < alpha < 0.5:
        raise InvalidValue(f"alpha: expected a level in (0, 0.5), got {alpha!r}")


def _tost(diff: float, se: float, df: float, margin: float, alpha: float) -> TostResult:
    if se == 0:
        inside = abs(diff) < margin
        return TostResult(inside, 0.0 if inside else 1.0, diff, diff, diff, float(margin), alpha, df)
    p_low = 1.0 - t_cdf((diff + margin) / se, df)   # H0: diff <= -margin
    p_high = t_cdf((diff - margin) / se, df)        # H0: diff >= +margin
    q = t_quantile(1.0 - alpha, df)
    p = max(p_low, p_high)
    return TostResult(p < alpha, p, diff, diff - q * se, diff + q * se, float(margin), alpha, df)
