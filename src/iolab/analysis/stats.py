"""Statistics over repetitions. Pure functions on lists of numbers; no I/O.

Conventions: 95% two-sided intervals from Student's t (few repetitions are the norm);
ratios by the delta method with Welch–Satterthwaite degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class Estimate:
    mean: float
    lo: float
    hi: float
    n: int
    sd: float

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2

    @property
    def rel_half_width(self) -> float:
        return self.half_width / abs(self.mean) if self.mean else math.inf

    def as_dict(self, unit: str | None = None) -> dict:
        d: dict = {"mean": _clean(self.mean), "ci95": [_clean(self.lo), _clean(self.hi)], "n": self.n}
        if unit:
            d["unit"] = unit
        return d


def _clean(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def mean_ci(values: Sequence[float], conf: float = 0.95) -> Estimate:
    """Mean with a t-interval. One value gives an infinite interval: never a claim from n=1."""
    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = len(a)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, math.nan)
    m = float(a.mean())
    if n == 1:
        return Estimate(m, -math.inf, math.inf, 1, math.nan)
    sd = float(a.std(ddof=1))
    h = float(sps.t.ppf(0.5 + conf / 2, n - 1)) * sd / math.sqrt(n)
    return Estimate(m, m - h, m + h, n, sd)


def harmonic_mean_ci(values: Sequence[float], conf: float = 0.95) -> Estimate:
    """For rates over a fixed amount of work: the mean of 1/x, inverted (bounds swap)."""
    vals = [v for v in values if v and math.isfinite(v) and v > 0]
    inv = mean_ci([1.0 / v for v in vals], conf)
    if inv.n == 0:
        return inv
    m = 1.0 / inv.mean
    lo = 1.0 / inv.hi if inv.hi > 0 and math.isfinite(inv.hi) else 0.0
    hi = 1.0 / inv.lo if inv.lo > 0 else math.inf
    return Estimate(m, lo, hi, inv.n, float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan)


def ratio_ci(num: Sequence[float], den: Sequence[float], conf: float = 0.95) -> Estimate:
    """Ratio of means mean(num)/mean(den) with a delta-method interval."""
    a, b = mean_ci(num), mean_ci(den)
    if a.n == 0 or b.n == 0 or b.mean == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, math.nan)
    r = a.mean / b.mean
    if a.n < 2 or b.n < 2:
        return Estimate(r, -math.inf, math.inf, min(a.n, b.n), math.nan)
    va, vb = a.sd**2 / a.n, b.sd**2 / b.n
    rel_var = va / a.mean**2 + vb / b.mean**2 if a.mean else math.inf
    se = abs(r) * math.sqrt(rel_var)
    df = _welch_df(va, a.n, vb, b.n)
    h = float(sps.t.ppf(0.5 + conf / 2, df)) * se
    return Estimate(r, r - h, r + h, min(a.n, b.n), se)


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    num = (va + vb) ** 2
    den = (va**2 / (na - 1) if na > 1 else 0) + (vb**2 / (nb - 1) if nb > 1 else 0)
    return max(num / den, 1.0) if den > 0 else float(na + nb - 2)


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return float(sps.ttest_ind(a, b, equal_var=False).pvalue)


def knee(xs: Sequence[float], ys: Sequence[float], frac: float = 0.9) -> float | None:
    """Smallest x whose y reaches `frac` of the best y: where growing x stops paying."""
    pts = sorted((x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y))
    if not pts:
        return None
    best = max(y for _, y in pts)
    return next(x for x, y in pts if y >= frac * best)


def verdict(base: Sequence[float], new: Sequence[float], min_change: float = 0.02, max_rel_ci: float = 0.25) -> str:
    """invalid | too noisy | no difference | improvement | regression (higher is better)."""
    if len(base) < 3 or len(new) < 3:
        return "invalid"
    r = ratio_ci(new, base)
    if not math.isfinite(r.lo) or r.half_width / max(abs(r.mean), 1e-12) > max_rel_ci:
        return "too noisy"
    if r.lo <= 1.0 <= r.hi or abs(r.mean - 1.0) < min_change:
        return "no difference"
    return "improvement" if r.mean > 1 else "regression"
