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
larger change to count. Which metrics are counts is declared: a metric whose range is an event
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

    def p_beyond(self, threshold: float) -> float:
        """p of "the rates differ by at most the threshold" (B/A within [1/(1+t), 1+t]): B's share
        tested against the band's nearer edge, twice the smaller tail (two-sided)."""
        if self._total <= 0:
            return 1.0
        up = _share(self.n_a, self.n_b, 1 + threshold)
        down = _share(self.n_a, self.n_b, 1 / (1 + threshold))
        return float(min(1.0, 2 * min(_sf(self._b, self._total, up), _cdf(self._b, self._total, down))))


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


def count_test(a_groups: Sequence[Sequence[float]], b: Sequence[float], conf: float = 0.95) -> CountTest:
    """B's counts against A's. `a_groups`: A's trials, one list per run of A's reference (A alone:
    one list); the dispersion is read around each run's own rate and around A's pooled rate, so
    that runs of A that disagree with each other widen the test."""
    a = [v for g in a_groups for v in g]
    n_a, n_b = len(a), len(b)
    sa, sb = float(sum(a)), float(sum(b))
    phi = max(dispersion([*a_groups, b]), dispersion([a, b]))
    kb, total = sb / phi, (sa + sb) / phi
    p0 = _share(n_a, n_b, 1.0)
    p = 1.0 if total <= 0 else float(min(1.0, 2 * min(_sf(kb, total, p0), _cdf(kb, total, p0))))
    rate_a, rate_b = sa / n_a, sb / n_b
    lo, hi = _ratio_interval(kb, total, n_a, n_b, conf)
    return CountTest(rate_a, rate_b, rate_b / rate_a if rate_a > 0 else None, lo, hi, p, phi, n_a, n_b, kb, total)


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
