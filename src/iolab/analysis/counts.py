"""Comparing counts (errors, retransmits, failed requests) between two runs: zeros are evidence.

A count per trial is not a positive measurement whose logarithm can be averaged: an error
counter that is 0 in every trial of A and 383 in every trial of B has no ratio of geometric
means, yet it is the clearest regression a comparison can show. Counts are compared as
rates per trial with the conditional test of two Poisson rates (given the total, B's share
is binomial; Przyborowski & Wilenski 1940), made honest for counts that vary more than a
Poisson count would (bursts of errors, and run-to-run differences when A's reference is
several runs) by the quasi-Poisson dispersion phi >= 1: the Pearson statistic of the trials
around their side's rate per degree of freedom. Counts are divided by phi before the test
(Wedderburn 1974; McCullagh & Nelder, ch. 6), so a count that scatters widely needs a
larger change to count.

Counts move between runs too (a run that sees more retransmits all through, a device that
wrote 3 % more bytes): the test's second level is the run-level variance of the log rate, read
from the runs of A's reference when there are two or more (their log means' spread beyond what
Poisson sampling explains, on k - 1 degrees of freedom), else compare's documented floor. Where
both rates are positive the log rate ratio is also tested with that variance added to the
quasi-Poisson one (the delta method, Student t), and the row keeps the larger p and the union of
the two intervals: neither level of noise can be argued away by the other. A rate of zero
against a positive one is left to the exact test (no multiplicative run-to-run shift turns a
positive rate into none). Which metrics are counts is declared: a metric whose range is an event
count (core/metrics.py, the `count` domain, whose estimand is the mean per trial; `is_count`).
Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from iolab.core import metrics


def is_count(decl: metrics.Metric) -> bool:
    """A metric declared as an event count (its range is the `count` domain, its estimand the
    mean per trial): compared as a rate, never by the logarithm of its values."""
    return decl.range.integer


@dataclass(frozen=True)
class CountTest:
    rate_a: float  # per trial
    rate_b: float
    ratio: float | None  # rate_b / rate_a; None when rate_a is 0 (B/A unbounded)
    lo: float
    hi: float  # math.inf when unbounded
    p: float  # two-sided p of "same rate"
    phi: float  # the dispersion the counts were divided by (1: Poisson)
    n_a: int
    n_b: int
    _b: float  # B's total / phi
    _total: float  # (A's + B's total) / phi
    run_sd: float = 0.0  # the run-level SD of the log rate the second test used (0: none)
    run_df: float = math.inf  # its degrees of freedom (inf: the floor, taken as known)
    _d: float = math.nan  # log(rate_b / rate_a), when both are positive
    _se: float = 0.0  # its standard error with both levels

    def p_beyond(self, threshold: float) -> float:
        """p of "the rates differ by at most the threshold" (B/A within [1/(1+t), 1+t]): B's share
        tested against the band's nearer edge, twice the smaller tail (two-sided); with the
        run-level test's p beyond the same band when there is one, the larger of the two."""
        if self._total <= 0:
            return 1.0
        up = _share(self.n_a, self.n_b, 1 + threshold)
        down = _share(self.n_a, self.n_b, 1 / (1 + threshold))
        exact = float(min(1.0, 2 * min(_sf(self._b, self._total, up), _cdf(self._b, self._total, down))))
        return max(exact, self._p_log(math.log1p(threshold)))

    def _p_log(self, band: float) -> float:
        if math.isnan(self._d) or self._se <= 0:
            return 0.0
        seen = max(abs(self._d) - band, 0.0)
        return float(min(1.0, 2 * special.stdtr(min(self.run_df, 1e6), -seen / self._se)))


def _share(n_a: int, n_b: int, c: float) -> float:
    """B's expected share of the total when B's rate is c times A's."""
    return n_b * c / (n_a + n_b * c)


def _sf(k: float, n: float, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), continuous in k and n (regularised incomplete beta)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return float(special.betainc(k, n - k + 1, p))


def _cdf(k: float, n: float, p: float) -> float:
    """P(X <= k)."""
    if k >= n:
        return 1.0
    if k < 0:
        return 0.0
    return float(special.betainc(n - k, k + 1, 1 - p))


def dispersion(groups: Sequence[Sequence[float]]) -> float:
    """phi = max(1, Pearson chi^2 / df) over groups, each around its own mean (a group of all
    zeros says nothing about spread and is left out)."""
    chi2, df = 0.0, 0
    for g in groups:
        x = np.asarray(g, dtype=float)
        m = float(x.mean()) if len(x) else 0.0
        if len(x) < 2 or m <= 0:
            continue
        chi2 += float(((x - m) ** 2).sum() / m)
        df += len(x) - 1
    return max(1.0, chi2 / df) if df else 1.0


def count_test(a_groups: Sequence[Sequence[float]], b: Sequence[float], conf: float = 0.95,
               floor: float = 0.0) -> CountTest:
    """B's counts against A's. `a_groups`: A's trials, one list per run of A's reference (A alone:
    one list); the dispersion is read around each run's own rate and around A's pooled rate, so
    that runs of A that disagree with each other widen the test. `floor`: the run-level SD of the
    log rate assumed when A's reference is one run (compare's DEFAULT_FLOOR)."""
    a = [v for g in a_groups for v in g]
    n_a, n_b = len(a), len(b)
    sa, sb = float(sum(a)), float(sum(b))
    phi = max(dispersion([*a_groups, b]), dispersion([a, b]))
    kb, total = sb / phi, (sa + sb) / phi
    p0 = _share(n_a, n_b, 1.0)
    p = 1.0 if total <= 0 else float(min(1.0, 2 * min(_sf(kb, total, p0), _cdf(kb, total, p0))))
    rate_a, rate_b = sa / n_a, sb / n_b
    lo, hi = _ratio_interval(kb, total, n_a, n_b, conf)
    run_var, run_df = run_level(a_groups, dispersion([*a_groups, b]), floor)
    d, se = math.nan, 0.0
    if sa > 0 and sb > 0 and run_var > 0:
        d = math.log(rate_b / rate_a)
        se = math.sqrt(phi * (1 / sa + 1 / sb) + run_var * (1 + 1 / len(a_groups)))
        h = float(special.stdtrit(min(run_df, 1e6), 0.5 + conf / 2)) * se
        p = max(p, float(min(1.0, 2 * special.stdtr(min(run_df, 1e6), -abs(d) / se))))
        lo, hi = min(lo, math.exp(d - h)), max(hi, math.exp(d + h))
    return CountTest(rate_a, rate_b, rate_b / rate_a if rate_a > 0 else None, lo, hi, p, phi, n_a, n_b, kb, total,
                     math.sqrt(run_var), run_df, d, se)


def run_level(a_groups: Sequence[Sequence[float]], phi: float, floor: float) -> tuple[float, float]:
    """(variance of a run's log rate around its setup's, degrees of freedom): from the runs of A's
    reference when two or more have a positive rate (the variance of their log means less the
    quasi-Poisson part of it, never below 0), else floor^2 taken as known (inf). `phi`: the
    dispersion *within* runs (around each run's own rate), so the runs' own spread is not
    subtracted from itself."""
    means = [(float(np.mean(g)), len(g)) for g in a_groups if len(g) and float(np.mean(g)) > 0]
    if len(means) < 2:
        return floor**2, math.inf
    logs = np.log([m for m, _ in means])
    sampling = float(np.mean([phi / (m * n) for m, n in means]))
    return max(float(logs.var(ddof=1)) - sampling, 0.0), float(len(means) - 1)


def _ratio_interval(kb: float, total: float, n_a: int, n_b: int, conf: float) -> tuple[float, float]:
    """Clopper-Pearson bounds on B's share, turned into bounds on the rate ratio B/A."""
    if total <= 0:
        return 0.0, math.inf
    tail = (1 - conf) / 2
    lo_p = 0.0 if kb <= 0 else float(special.betaincinv(kb, total - kb + 1, tail))
    hi_p = 1.0 if kb >= total else float(special.betaincinv(kb + 1, total - kb, 1 - tail))

    def ratio(p: float) -> float:
        return math.inf if p >= 1 else p / (1 - p) * n_a / n_b

    return ratio(lo_p), ratio(hi_p)
