"""Statistics over repetitions. Pure functions on lists of numbers; no I/O.

The intervals every report prints (the median of the repetitions, on the metric's natural
scale, under adaptive stopping) are in analysis/sequential.py; this module holds what they
are made of and what other analyses share: the Estimate record, ratios of two estimates
(MOVER), the tools' resolution (clock steps, histogram buckets), Welch on logs and Holm for
`iolab compare`, and the fixed-n Student-t helpers older tests and studies use. Every
Estimate names the method that produced it (docs/statistics.md). Nothing is dropped
silently: non-finite values are counted in `dropped`, stalls (values <= 0 of a quantity that
cannot be negative) in `zeros`, and both ride into every ratio built from them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import numpy as np
from scipy import special
from scipy import stats as sps


@dataclass(frozen=True)
class Estimate:
    mean: float
    lo: float
    hi: float
    n: int
    sd: float
    method: str = "t"
    zeros: int = 0  # values <= 0 of a quantity that cannot be negative (a stalled trial): in the statistic, counted
    dropped: int = 0  # None / NaN / infinite values left out of the statistic (counted, never silent)
    domain: str = "real"  # the range the interval stays in (core/metrics.py DOMAINS)
    estimand: str = "mean"  # what `mean` estimates: "median" (measured quantities) or "mean" (event counts)
    checks: tuple[str, ...] = ()  # run-order checks that tripped (analysis/checks.py): no 95 % claimed

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2

    @property
    def rel_half_width(self) -> float:
        return self.half_width / abs(self.mean) if self.mean else math.inf

    def as_dict(self, unit: str | None = None) -> dict:
        d: dict = {"mean": _clean(self.mean), "ci95": [_clean(self.lo), _clean(self.hi)], "n": self.n,
                   "method": self.method, "estimand": self.estimand, "domain": self.domain}
        if unit:
            d["unit"] = unit
        if self.checks:
            d["checks"] = list(self.checks)
        if self.zeros:
            d["zeros"] = self.zeros
        if self.dropped:
            d["dropped"] = self.dropped
        return d


def _clean(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def finite(values: Sequence[float | None]) -> tuple[np.ndarray, int]:
    """(the finite values as an array, how many were None/NaN/infinite)."""
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    return np.asarray(kept, dtype=float), len(values) - len(kept)


def mean_ci(values: Sequence[float], conf: float = 0.95) -> Estimate:
    """Mean with a Student-t interval for a fixed number of values (method "t").
    One value gives an infinite interval: never a claim from n=1."""
    a, dropped = finite(values)
    n = len(a)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, math.nan, dropped=dropped)
    m = float(a.mean())
    if n == 1:
        return Estimate(m, -math.inf, math.inf, 1, math.nan, dropped=dropped)
    sd = float(a.std(ddof=1))
    h = float(sps.t.ppf(0.5 + conf / 2, n - 1)) * sd / math.sqrt(n)
    return Estimate(m, m - h, m + h, n, sd, dropped=dropped)


def harmonic_mean_ci(values: Sequence[float], conf: float = 0.95) -> Estimate:
    """For rates over a fixed amount of work: the mean of 1/x, inverted (bounds swap).

    A rate of 0 (a stalled trial: the work never finished) enters the statistic: the
    harmonic mean of a set with a 0 is 0, its interval [0, unbounded), and `zeros` counts it."""
    a, dropped = finite(values)
    zeros = int((a <= 0).sum())
    if zeros:
        return Estimate(0.0, 0.0, math.inf, len(a), _sd(a), "harmonic-t", zeros, dropped)
    inv = mean_ci([1.0 / v for v in a], conf)
    if inv.n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, math.nan, "harmonic-t", dropped=dropped)
    m = 1.0 / inv.mean
    lo = 1.0 / inv.hi if inv.hi > 0 and math.isfinite(inv.hi) else 0.0
    hi = 1.0 / inv.lo if inv.lo > 0 else math.inf
    return Estimate(m, lo, hi, inv.n, _sd(a), "harmonic-t", dropped=dropped)


def _sd(a: np.ndarray) -> float:
    return float(a.std(ddof=1)) if len(a) > 1 else math.nan


def ratio_ci(num: Sequence[float], den: Sequence[float], conf: float = 0.95, tail: float | None = None,
             method: str = "log-delta-welch") -> Estimate:
    """Ratio of means mean(num)/mean(den), interval on the log scale: log r ± q·se with
    se² = var(num)/(n·mean²) + var(den)/(m·mean²) (the delta method) and Welch–Satterthwaite
    degrees of freedom. On the log scale a ratio's interval is never negative and is as
    asymmetric as the ratio itself. `tail`: the two-sided tail probability of q (default
    1 − conf); a run's estimator passes the per-look α' of its stopping design."""
    a, b = mean_ci(num), mean_ci(den)
    dropped = a.dropped + b.dropped
    if a.n == 0 or b.n == 0 or b.mean <= 0 or a.mean < 0:
        return Estimate(math.nan, math.nan, math.nan, 0, math.nan, method, dropped=dropped)
    r = a.mean / b.mean
    if a.n < 2 or b.n < 2 or r == 0:
        return Estimate(r, -math.inf, math.inf, min(a.n, b.n), math.nan, method, dropped=dropped)  # no interval
    va, vb = a.sd**2 / a.n, b.sd**2 / b.n
    rel_se = math.sqrt(va / a.mean**2 + vb / b.mean**2)
    df = _welch_df(va, a.n, vb, b.n)
    q = float(special.stdtrit(df, 1 - (tail if tail is not None else 1 - conf) / 2))
    return Estimate(r, r * math.exp(-q * rel_se), r * math.exp(q * rel_se), min(a.n, b.n), r * rel_se, method,
                    dropped=dropped)


RESOLUTION_METHOD = " ±resolution"


def with_resolution(e: Estimate, rel: float, domain: Any = None) -> Estimate:
    """`e` with its bounds moved out by the values' resolution (`rel`: the largest error bound a
    trial's tool puts on its value, relative to the value: a clock's millisecond, a latency
    histogram's bucket; docs/statistics.md, "Resolution"). A tool that counts whole milliseconds
    gives every run between t and t + 1 ms the same rate, so repetitions can agree to the last
    digit and an interval of zero width would claim a precision the tool never had. Each value
    is off by at most rel·|value|, so the estimate is too: adding that bound to both ends keeps
    the interval's coverage. The bounds stay in `domain` (a core.metrics.Domain; default: a
    positive lower bound is never moved below 0)."""
    if not rel > 0 or e.n == 0 or not math.isfinite(e.mean):
        return e
    err = rel * abs(e.mean)
    lo, hi = e.lo - err, e.hi + err
    if domain is not None:
        lo, hi = max(lo, domain.lo), min(hi, domain.hi)
    elif e.lo >= 0 and lo < 0:
        lo = 0.0
    return replace(e, lo=lo, hi=hi, method=e.method + RESOLUTION_METHOD)


def stored_resolution(values: Sequence[float]) -> float:
    """Half a unit in the last digit the values were stored with (their shortest exact decimal
    form: 3.0 -> 0.05, 148.48 -> 0.005): what a value that repeated exactly is known to when its
    tool recorded no resolution. Only used for a sample without any spread, so that no interval
    claims a precision nobody measured."""
    exps = [Decimal(repr(float(v))).as_tuple().exponent for v in values if math.isfinite(v)]
    digits = [int(e) for e in exps if isinstance(e, int)]
    return 0.5 * 10.0 ** max(digits) if digits else 0.0


def ratio_with_resolution(e: Estimate, rel_num: float, rel_den: float) -> Estimate:
    """A ratio's interval widened by the clock error of numerator and denominator (relative
    bounds, as in with_resolution): num/den is off by a factor between (1 − a)/(1 + b) and
    (1 + a)/(1 − b)."""
    a, b = max(rel_num, 0.0), max(rel_den, 0.0)
    if not (a or b) or e.n == 0 or not math.isfinite(e.mean):
        return e
    lo = e.lo * max(1 - a, 0.0) / (1 + b)
    hi = e.hi * (1 + a) / (1 - b) if b < 1 else math.inf
    return replace(e, lo=lo, hi=hi, method=e.method + RESOLUTION_METHOD)


def mover_ratio(a: Estimate, b: Estimate) -> Estimate:
    """a/b of two independent estimates with their intervals, by the MOVER method (Zou & Donner
    2008, "method of variance estimates recovery") on the log scale: each side's distances to its
    bounds are combined in quadrature,

        lo = r · exp(−√(ln(a/a_lo)² + ln(b_hi/b)²)),  hi = r · exp(√(ln(a_hi/a)² + ln(b/b_lo)²)),

    so the ratio's interval is made from the very intervals the tables show (whatever method made
    them: medians on a log scale, a hull with order statistics) and keeps about their level. It
    is positive and as asymmetric as a ratio is. A side whose interval reaches 0 (a stall, or too
    few repetitions) gives the ratio a bound of 0 or ∞: zeros and dropped values of both sides
    are counted in the result."""
    zeros, dropped = a.zeros + b.zeros, a.dropped + b.dropped
    method = f"mover-ratio of {a.method}"
    n = min(a.n, b.n)
    if a.n == 0 or b.n == 0 or not (b.mean > 0) or not (a.mean >= 0):
        return Estimate(math.nan, math.nan, math.nan, n, math.nan, method, zeros, dropped, "nonneg", a.estimand)
    r = a.mean / b.mean
    if r == 0:  # the numerator's estimate is 0: the ratio's upper end from the bounds
        hi = a.hi / b.lo if b.lo > 0 else math.inf
        return Estimate(0.0, 0.0, hi, n, math.nan, method, zeros, dropped, "nonneg", a.estimand)

    def dist(top: float, bottom: float) -> float:
        return math.log(top / bottom) if bottom > 0 and math.isfinite(top) else math.inf

    down = math.hypot(dist(a.mean, max(a.lo, 0.0)), dist(b.hi, b.mean))
    up = math.hypot(dist(a.hi, a.mean), dist(b.mean, max(b.lo, 0.0)))
    lo = r * math.exp(-down) if math.isfinite(down) else 0.0
    hi = r * math.exp(up) if math.isfinite(up) else math.inf
    return Estimate(r, lo, hi, n, math.nan, method, zeros, dropped, "nonneg", a.estimand,
                    tuple(sorted(set(a.checks) | set(b.checks))))


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    num = (va + vb) ** 2
    den = (va**2 / (na - 1) if na > 1 else 0) + (vb**2 / (nb - 1) if nb > 1 else 0)
    return max(num / den, 1.0) if den > 0 else float(na + nb - 2)


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return float(sps.ttest_ind(a, b, equal_var=False).pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: adjusted p-values that control the family-wise error rate
    over all of them (any dependence between the tests). NaN stays NaN and is not counted."""
    idx = [i for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    m = len(idx)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda k: pvalues[k])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


@dataclass(frozen=True)
class LogRatio:
    """Welch's t-test on log values, B against A (positive numbers). Logs suit ratios: a change
    of x % is the same shift at any level."""

    ratio: float  # ratio of geometric means, B / A
    lo: float
    hi: float
    p: float  # two-sided p-value of "no change"
    diff: float  # mean(log B) - mean(log A)
    se: float
    df: float
    slack: float = 0.0  # how far the tools' clocks alone may move diff (log scale; with_resolution)

    def p_beyond(self, threshold: float) -> float:
        """p-value of the null "the change is within ±threshold" (|log ratio| <= log(1 + threshold)):
        small only when the data show a change larger than the threshold. Valid for every
        change inside the band (the boundary is the worst case). A change the clocks' error
        could make is never counted as change: |diff| is shrunk by the slack first."""
        delta = math.log1p(threshold)
        d = max(abs(self.diff) - self.slack, 0.0)
        if self.se == 0.0:
            return 0.0 if d > delta else 1.0
        return float(min(1.0, _t_sf((d - delta) / self.se, self.df) + _t_sf((d + delta) / self.se, self.df)))


def welch_log(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, conf: float = 0.95,
              rels: tuple[float, float] = (0.0, 0.0)) -> LogRatio:
    """B / A as a ratio of geometric means with its interval and p-value (Welch on logs).
    `rels`: the clock error bounds of A's and B's values relative to the values (as in
    with_resolution): the interval is widened by them and a difference they could explain is
    not evidence of change."""
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    na, nb = len(la), len(lb)
    diff = float(lb.mean() - la.mean())
    va, vb = float(la.var(ddof=1)) / na, float(lb.var(ddof=1)) / nb
    se = math.sqrt(va + vb)
    r = math.exp(diff)
    slack = sum(-math.log1p(-x) if x < 1 else math.inf for x in rels if x > 0)
    seen = max(abs(diff) - slack, 0.0)  # the part of the difference the clocks cannot explain
    if se == 0.0:
        return LogRatio(r, math.exp(diff - slack), math.exp(diff + slack), 1.0 if seen == 0.0 else 0.0, diff, 0.0,
                        float(na + nb - 2), slack)
    df = _welch_df(va, na, vb, nb)
    p = 2 * _t_sf(seen / se, df)
    h = float(special.stdtrit(df, 0.5 + conf / 2)) * se
    return LogRatio(r, math.exp(diff - h - slack), math.exp(diff + h + slack), p, diff, se, df, slack)


def _t_sf(t: float, df: float) -> float:
    """P(T_df > t), with scipy.special directly (scipy.stats' wrappers cost 100x more per call)."""
    return float(special.stdtr(df, -t))


def knee(xs: Sequence[float], ys: Sequence[float], frac: float = 0.9) -> float | None:
    """Smallest x whose y reaches `frac` of the best y: where growing x stops paying."""
    pts = sorted((x, y) for x, y in zip(xs, ys, strict=True) if y is not None and math.isfinite(y))
    if not pts:
        return None
    best = max(y for _, y in pts)
    return next(x for x, y in pts if y >= frac * best)

