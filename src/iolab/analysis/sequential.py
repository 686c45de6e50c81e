"""Intervals that keep their promise when the runner stops on them (adaptive stopping).

The runner looks at a configuration after every repetition from n = `repetitions` to
n = `max_repetitions` and stops as soon as the reported interval is narrow enough. A
plain t-interval reported at such a data-chosen n covers the mean less often than 95 %.
The interval here is *simultaneous over the looks*: at look n it is

    mean_n ± q_n · s_n / sqrt(n),   q_n = t_{n-1}^{-1}(1 - α'/2)

with one per-look tail probability α' (Pocock's design on the p-value scale) chosen so
that P(∃ look n: |mean_n − μ| > q_n · s_n / sqrt(n)) ≤ 5 %. Whatever decides when to stop
(this metric's width, another metric's, a failure, Ctrl-C), the interval at the stopping
time then covers μ with at least 95 %. The t-statistic is location- and scale-invariant,
so α' depends only on the looks and on the *shape* of the noise; it is calibrated once
per look design by simulation (analysis/calibration.py), and the smallest α' of the
shapes is used (normal, lognormal σ = 0.5 either way round, Student t with 3 d.o.f.): the
guarantee holds for noise up to that skewed and that heavy-tailed, not only for normal
noise. docs/statistics.md has the reasoning, the alternatives considered and the coverage
table of the simulation test.

Everything here is vectorised over a leading batch axis, so the simulation test runs the
very functions the runner and the reports call, on 20 000 studies at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError
from scipy import special

from iolab.analysis import calibration
from iolab.analysis.stats import Estimate, finite, ratio_ci, ratio_with_resolution, with_resolution
from iolab.studies.spec import StudySettings


@dataclass(frozen=True)
class LookDesign:
    """The repetition counts at which the runner may stop: first, first + 1, ..., last."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 2 <= self.first <= self.last:
            raise ValueError(f"looks must satisfy 2 <= first <= last, got {self.first}..{self.last}")

    @classmethod
    def for_study(cls, repetitions: int, max_repetitions: int, n: int | None = None) -> LookDesign:
        """The runner's looks (repetitions..max_repetitions), widened to include n if a configuration
        ended outside them (fewer after failures or an interruption): more looks, never fewer."""
        lo = min(repetitions, n) if n else repetitions
        hi = max(max_repetitions, n or 0)
        first = max(2, lo)
        return cls(first, max(hi, first))

    def covering(self, n: int) -> LookDesign:
        """This design, or a wider one that also has a look at n (never fewer looks)."""
        if n < 2 or self.first <= n <= self.last:
            return self
        return LookDesign(min(self.first, n), max(self.last, n))

    @property
    def method(self) -> str:
        return f"simultaneous-t[{self.first}..{self.last}]"

    def quantile(self, n: int) -> float:
        """q_n: the half-width multiplier at n repetitions (∞ below 2: never a claim from one value)."""
        if n < 2:
            return math.inf
        if not self.first <= n <= self.last:
            raise ValueError(f"n = {n} is not a look of {self.method}")
        return float(special.stdtrit(n - 1, 1 - calibration.per_look_alpha(self.first, self.last) / 2))


def interval_batch(values: Any, design: LookDesign, aggregate: str = "mean"
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi) along the last axis of `values` (finite numbers, n = values.shape[-1]).

    aggregate "mean": the simultaneous interval of the arithmetic mean. "harmonic": the same
    interval for the mean of 1/x, inverted (bounds swap); a row with a rate <= 0 (a stalled
    trial) has harmonic mean 0 and the interval [0, ∞)."""
    x = np.asarray(values, dtype=float)
    n = x.shape[-1]
    q = design.covering(n).quantile(n)
    if aggregate == "mean":
        return _t_interval(x, q)
    if aggregate != "harmonic":
        raise ValueError(f"unknown aggregate {aggregate!r}")
    stalled = (x <= 0).any(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        m_r, lo_r, hi_r = _t_interval(1.0 / np.where(x > 0, x, np.nan), q)
        mean = 1.0 / m_r
        lo = np.where(hi_r > 0, 1.0 / hi_r, 0.0)
        hi = np.where(lo_r > 0, 1.0 / lo_r, np.inf)
    return np.where(stalled, 0.0, mean), np.where(stalled, 0.0, lo), np.where(stalled, np.inf, hi)


def _t_interval(x: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = x.shape[-1]
    mean = x.mean(axis=-1)
    if n < 2 or not math.isfinite(q):
        inf = np.full(mean.shape, np.inf)
        return mean, -inf, inf
    half = q * x.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def relative_half_width(mean: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(hi − lo) / 2 / |mean|: ∞ where the mean is 0 or a bound is unbounded."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (hi - lo) / 2.0 / np.abs(mean)
    return np.where(np.isfinite(r), r, np.inf)


def sequential_ci(values: Sequence[float | None], design: LookDesign, aggregate: str = "mean") -> Estimate:
    """One configuration's estimate (what reports print): interval_batch on its finite values."""
    a, dropped = finite(values)
    n = len(a)
    if n == 0:
        method = design.method if aggregate == "mean" else f"harmonic {design.method}"
        return Estimate(math.nan, math.nan, math.nan, 0, math.nan, method, dropped=dropped)
    zeros = int((a <= 0).sum()) if aggregate == "harmonic" else 0
    design = design.covering(n)
    method = design.method if aggregate == "mean" else f"harmonic {design.method}"
    mean, lo, hi = (float(v[0]) for v in interval_batch(a[None, :], design, aggregate))
    sd = float(a.std(ddof=1)) if n > 1 else math.nan
    return Estimate(mean, lo, hi, n, sd, method, zeros, dropped)


def design_of(doc: dict[str, Any]) -> LookDesign:
    """The looks of the run that produced `doc` (its [study] table, with iolab's defaults)."""
    table = (doc.get("spec") or {}).get("study") or {}
    try:
        s = StudySettings(**table)
        reps, max_reps = s.repetitions, s.max_repetitions
    except (ValidationError, TypeError):  # a document from another version: its numbers or the defaults
        defaults = StudySettings.model_fields
        reps = _int(table.get("repetitions"), defaults["repetitions"].default)
        max_reps = _int(table.get("max_repetitions"), defaults["max_repetitions"].default)
    return LookDesign.for_study(reps, max(reps, max_reps))


def _int(v: Any, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else default


def aggregate_ratio(aggregate: str, num: Sequence[float], den: Sequence[float],
                    ratio: Callable[[list[float], list[float]], Estimate]) -> Estimate:
    """num/den of two configurations' means of the declared aggregate, through `ratio` (a ratio of
    arithmetic means with its interval). "harmonic": the ratio of harmonic means, which is the
    inverse ratio of the mean times per unit of work (den's over num's), so the interval is the
    exact one for the statistic the tables show. A rate of 0 (work that never finished) has no
    time per unit and is left out."""
    if aggregate == "harmonic":
        return ratio([1.0 / v for v in den if v > 0], [1.0 / v for v in num if v > 0])
    return ratio(list(num), list(den))


class RunEstimator:
    """Estimates over one run's repetitions, with the interval its stopping rule calls for.

    `rel` (and `rels` for a ratio's numerator and denominator): the values' clock error bound
    relative to the value (analysis.trials.relative_resolution), which widens the interval
    (stats.with_resolution); 0 for values their tool measures exactly."""

    def __init__(self, doc: dict[str, Any]):
        self.design = design_of(doc)

    def mean(self, values: Sequence[float | None], rel: float = 0.0) -> Estimate:
        return self.of("mean", values, rel)

    def harmonic(self, values: Sequence[float | None], rel: float = 0.0) -> Estimate:
        return self.of("harmonic", values, rel)

    def of(self, aggregate: str, values: Sequence[float | None], rel: float = 0.0) -> Estimate:
        return with_resolution(sequential_ci(values, self.design, aggregate), rel)

    def ratio(self, num: Sequence[float | None], den: Sequence[float | None],
              rels: tuple[float, float] = (0.0, 0.0)) -> Estimate:
        """mean(num)/mean(den) of two configurations of this run (e.g. guest / host): the log-scale
        delta interval with the per-look α' of the run's stopping design, so a ratio of two
        adaptively stopped means is widened as each of them is."""
        n = max(len(finite(num)[0]), len(finite(den)[0]))
        design = self.design.covering(n)
        alpha = calibration.per_look_alpha(design.first, design.last)
        e = ratio_ci([v for v in num if v is not None], [v for v in den if v is not None], tail=alpha,
                     method=f"log-delta-welch {design.method}")
        return ratio_with_resolution(e, *rels)

    def ratio_of(self, aggregate: str, num: Sequence[float], den: Sequence[float],
                 rels: tuple[float, float] = (0.0, 0.0)) -> Estimate:
        """The ratio of the two configurations' `aggregate` means (aggregate_ratio), widened as `ratio`
        (and by the clock errors `rels` of num's and den's values)."""
        return ratio_with_resolution(aggregate_ratio(aggregate, num, den, self.ratio), *rels)
