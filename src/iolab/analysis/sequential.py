"""The interval every report prints, and that the runner stops on (adaptive stopping).

**What is estimated.** For every measured quantity (rates, times, latencies, percentiles,
fractions, ratios) the *median* of the configuration's repetitions; for event counts (a
metric whose declared range is `count`) the *mean* count per trial (core/metrics.py). The
median is what n <= 10 repetitions can promise: no interval for a mean is valid for every
noise shape at that size (a run that never saw the 10 % of cache hits cannot know the mean
they add), while the median of that noise stays inside the common runs. It is also the same
number for a rate and for its time (median(1/x) = 1/median(x)), so fixed-work and fixed-time
metrics need no different treatment.

**The interval**, at look n, computed on the scale the metric's range makes natural (log
for positive values, logit for fractions strictly inside (0, 1), the values themselves
otherwise) and mapped back, so it never leaves the range:

    median_n ± q_n · s_n / √n,   hull with [x_(k), x_(n+1−k)]

q_n: the (1 − tail_n) quantile of the median's pivot over the design noise shapes, tail_n
the tail look n spends (calibration.py: α' per look, twice that at the first two looks of a
design of three or more; the largest α' whose coverage at the runner's own stop is >= 96.4 %
for every design shape and CV, 96.5 % for designs of one or two looks). The hull with the order statistics
[x_(k), x_(n+1−k)] (k from the binomial, calibration.order_depth) adds the distribution-free
interval of the median whenever n is large enough to have one at that tail: it covers the
median of *any* continuous noise, whatever its shape. Counts: the mean ± q_n · s/√n, hulled
with Garwood's exact Poisson interval, so a count that never happened still has an upper
bound (a count that is the same in every trial is exact: a deterministic count).

Each estimate is also checked in run order (analysis/checks.py: trend, dependence, two
modes); what trips rides with the estimate (`checks`), the report says it beside the number,
and the runner keeps repeating such a configuration up to its cap.

Everything here is vectorised over a leading batch axis, so the simulations (calibration,
tests/analysis/coverage.py) run the very functions the runner and the reports call.

Size: one interval, read as one: its estimand, its scale per declared range, its look design
and tail, the distribution-free hull, counts, resolution and the widening all meet in
`interval_batch`, which the runner, every report and the simulations call; split, the
simulations could drift from what the reports print.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import ValidationError
from scipy import special

from iolab.analysis import calibration, checks, dependence
from iolab.analysis.stats import (
    RESOLUTION_METHOD,
    Estimate,
    finite,
    mover_ratio,
    ratio_with_resolution,
    stored_resolution,
    with_resolution,
)
from iolab.core.metrics import NONNEG, Domain, Metric
from iolab.core.model import config_id_of_trial
from iolab.spec.study import StudySettings


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
    def alpha(self) -> float:
        """α': the tail probability each look's interval spends after the first ones
        (calibration.per_look_alpha; the first looks of a longer design spend more: tail)."""
        top = calibration.N_MAX  # beyond 30 looks: the design up to 30 (the pivot only narrows with n)
        return calibration.per_look_alpha(min(self.first, top), min(self.last, top))

    def tail(self, n: int) -> float:
        """The tail the interval at look n spends (calibration.look_tail)."""
        top = calibration.N_MAX
        return calibration.look_tail(min(self.first, top), min(self.last, top), n, self.alpha)

    @property
    def largest_tail(self) -> float:
        """The largest tail any look of this design spends (its first look's)."""
        return self.tail(self.first)

    def label(self) -> str:
        return f"[{self.first}..{self.last}]"

    @property
    def method(self) -> str:
        return f"median{self.label()}"

    def quantile(self, n: int, family: int = 1) -> float:
        """q_n: the half-width multiplier (× s/√n) at n repetitions (∞ below 2: never a claim from one
        value); `family`: the number of intervals read together (Bonferroni: α'/family each)."""
        if n < 2:
            return math.inf
        return calibration.quantile(n, self.tail(n) / family)


def scale_of(x: np.ndarray, domain: Domain) -> np.ndarray:
    """Per row, the scale the interval is computed on: 1 log, 2 logit, 0 the values themselves."""
    if domain.integer:
        return np.zeros(x.shape[:-1], dtype=int)
    log = (domain.lo >= 0) & (x > 0).all(axis=-1)
    logit = (domain.lo >= 0) & (domain.hi <= 1) & (x > 0).all(axis=-1) & (x < 1).all(axis=-1)
    return np.where(logit, 2, np.where(log, 1, 0))


SCALE_NAMES = {0: "raw", 1: "log", 2: "logit"}


def interval_batch(values: Any, design: LookDesign, domain: Domain = NONNEG, family: int = 1
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, lo, hi) along the last axis of `values` (finite numbers in run order, n =
    values.shape[-1]): the median (the mean for counts) with the interval of the module
    docstring, never outside `domain`."""
    x = np.asarray(values, dtype=float)
    n = x.shape[-1]
    design = design.covering(n)
    tail = design.tail(n) / family
    q = design.quantile(n, family)
    if domain.integer:
        c, lo, hi = _count_interval(x, q, tail)
    else:
        scale = scale_of(x, domain)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where((scale == 1)[..., None], np.log(np.where(x > 0, x, 1.0)),
                         np.where((scale == 2)[..., None], special.logit(np.clip(x, 1e-300, 1 - 1e-16)), x))
        _, lo, hi = _median_interval(y, q, calibration.order_depth(n, tail) if n >= 2 else 0)
        with np.errstate(over="ignore"):
            for code, back in ((1, np.exp), (2, special.expit)):
                m = scale == code
                lo, hi = (np.where(m, back(v), v) for v in (lo, hi))
        c = np.median(x, axis=-1)  # the median of the values themselves (a value, or the mid of two)
        tiny = 1e-12 * np.abs(c)  # a bound the scale's round trip moved by a rounding error is the value
        lo, hi = np.where(np.abs(lo - c) <= tiny, c, lo), np.where(np.abs(hi - c) <= tiny, c, hi)
    lo, hi = np.clip(lo, domain.lo, domain.hi), np.clip(hi, domain.lo, domain.hi)
    return c, np.minimum(lo, c), np.maximum(hi, c)


def _median_interval(y: np.ndarray, q: float, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = y.shape[-1]
    c = np.median(y, axis=-1)
    if n < 2 or not math.isfinite(q):
        inf = np.full(c.shape, np.inf)
        return c, -inf, inf
    half = q * y.std(axis=-1, ddof=1) / math.sqrt(n)
    lo, hi = c - half, c + half
    if k:
        s = np.sort(y, axis=-1)
        lo, hi = np.minimum(lo, s[..., k - 1]), np.maximum(hi, s[..., n - k])
    return c, lo, hi


def _count_interval(x: np.ndarray, q: float, tail: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean count, hulled with Garwood's exact Poisson interval of the total (a count the same
    in every trial is deterministic: exact)."""
    n = x.shape[-1]
    c = x.mean(axis=-1)
    total = x.sum(axis=-1)
    g_lo = np.where(total > 0, special.gammaincinv(np.maximum(total, 1e-300), tail / 2), 0.0) / n
    g_hi = special.gammaincinv(total + 1.0, 1 - tail / 2) / n
    if n < 2 or not math.isfinite(q):
        return c, np.zeros(c.shape), np.full(c.shape, np.inf)
    half = q * x.std(axis=-1, ddof=1) / math.sqrt(n)
    lo, hi = np.minimum(c - half, g_lo), np.maximum(c + half, g_hi)
    same = (x == x[..., :1]).all(axis=-1) & (c > 0)
    return c, np.where(same, c, lo), np.where(same, c, hi)


def relative_half_width(mean: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(hi − lo) / 2 / |estimate|: ∞ where the estimate is 0 or a bound is unbounded."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (hi - lo) / 2.0 / np.abs(mean)
    return np.where(np.isfinite(r), r, np.inf)


def method_of(design: LookDesign, domain: Domain, scale: str, family: int = 1) -> str:
    """The estimate's `method`: estimand, looks, scale (docs/results.md)."""
    words = f"{domain.estimand}{design.label()} {'count' if domain.integer else scale}"
    return words + (f" family/{family}" if family > 1 else "")


def sequential_ci(values: Sequence[float | None], design: LookDesign, domain: Domain = NONNEG,
                  family: int = 1) -> Estimate:
    """One configuration's estimate (what reports print): interval_batch on its finite values in
    run order, with the run-order checks that tripped and the stalls (zeros) it counted.
    Memoised (an Estimate is immutable): a study's analysis reads one configuration in every ratio
    and table that uses it, and each read would recompute the same interval and checks."""
    return _sequential_ci(tuple(values), design, domain, family)


@functools.lru_cache(maxsize=4096)
def _sequential_ci(values: tuple[float | None, ...], design: LookDesign, domain: Domain, family: int) -> Estimate:
    a, dropped = finite(values)
    n = len(a)
    design = design.covering(n)
    zeros = int((a <= 0).sum()) if domain.lo >= 0 and not domain.integer else 0  # a count of 0 is no stall
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, math.nan, method_of(design, domain, "raw", family),
                        dropped=dropped, domain=domain.name, estimand=domain.estimand)
    c, lo, hi = (float(v[0]) for v in interval_batch(a[None, :], design, domain, family))
    scale = SCALE_NAMES[int(scale_of(a[None, :], domain)[0])]
    trips = checks.names(checks.tripped(a[None, :], calibration.check_thresholds(n)), 0)
    sd = float(a.std(ddof=1)) if n > 1 else math.nan
    return Estimate(c, lo, hi, n, sd, method_of(design, domain, scale, family), zeros, dropped,
                    domain=domain.name, estimand=domain.estimand, checks=trips)


def projected(values: Sequence[float | None], design: LookDesign, domain: Domain, extra: int,
              family: int = 1) -> Estimate:
    """The interval `values` would likely have after `extra` more repetitions with the same estimate
    and spread (the parametric part at n + extra, on the same scale; no hull): what tells an
    undecided verdict how many more repetitions would decide it (analysis/verdicts.py)."""
    n, scale, c, sd = _projection_basis(tuple(values), domain)
    if n < 2:
        return Estimate(math.nan, math.nan, math.nan, n, math.nan, "projected")
    total = n + extra
    half = _quantile_at(design, total, family) * sd / math.sqrt(total)
    back = {1: math.exp, 2: lambda v: float(special.expit(v))}.get(scale, float)
    lo, hi = domain.clip(back(c - half)), domain.clip(back(c + half))
    return Estimate(back(c), lo, hi, total, math.nan, "projected", domain=domain.name, estimand=domain.estimand)


@functools.lru_cache(maxsize=4096)
def _projection_basis(values: tuple[float | None, ...], domain: Domain) -> tuple[int, int, float, float]:
    """(n, scale code, estimate and SD on that scale) of `values`: what every projection of them
    shares. Memoised because "how many more would decide it" projects the same values at every k
    up to PROJECT_MAX (verdicts.repetitions_to_decide), and recomputing the median and SD for each
    k was most of the time a study's verdicts took to analyse (bench/run analysis)."""
    a, _ = finite(values)
    n = len(a)
    if n < 2:
        return n, 0, math.nan, math.nan
    scale = int(scale_of(a[None, :], domain)[0])
    y = np.log(a) if scale == 1 else special.logit(a) if scale == 2 else a
    c = float(np.mean(y)) if domain.integer else float(np.median(y))
    return n, scale, c, float(y.std(ddof=1))


@functools.lru_cache(maxsize=1024)
def _quantile_at(design: LookDesign, n: int, family: int) -> float:
    """The half-width multiplier at n of `design` widened to have a look there (memoised: see above)."""
    return design.covering(n).quantile(n, family)


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


def _domain(what: Metric | Domain | str | None, domain: Domain | None) -> Domain:
    if isinstance(what, Metric):
        return what.range
    if isinstance(what, Domain):
        return what
    return domain or NONNEG  # an aggregate name alone (older callers): the range of rates and times


class RunEstimator:
    """Estimates over one run's repetitions, with the interval its stopping rule calls for.

    `family`: how many intervals a reader will hold together (the verdicts of one page): each is
    then computed at α'/family (Bonferroni), so all of them hold together with 95 %. `rel` (and
    `rels` for a ratio's sides): the values' clock error bound relative to the value
    (analysis.trials.relative_resolution), which widens the interval (stats.with_resolution).

    **The run's dependence.** Every metric's lag-1 dependence between consecutive repetitions is
    pooled over the run's configurations (analysis/dependence.py); on any sign of it every interval
    of that metric is widened for it, and where it is significant each also carries the `dependence`
    check. An estimate's
    values are matched to their metric by the stored series they are (a configuration's values of
    one metric in trial order): values that are not a stored series of this run are not widened.
    A run whose design never reaches checks.CHECK_FROM repetitions (`--quick`: 3..3) cannot test it at
    all (dependence.tested_in): its intervals are not widened on a coin flip but carry
    `independence_assumed`, beside the number like a tripped check."""

    def __init__(self, doc: dict[str, Any], family: int = 1):
        self.design = design_of(doc)
        self.family = max(int(family), 1)
        self._trials: list[dict[str, Any]] = [t for t in doc.get("trials") or []
                                              if isinstance(t, dict) and t.get("status", "ok") == "ok"]
        self._series: dict[tuple[float, ...], dependence.Dependence] | None = None

    def widened(self, family: int) -> RunEstimator:
        """This run's estimator for a family of `family` intervals read together (Bonferroni)."""
        other = RunEstimator({}, family)
        other.design = self.design
        other._trials, other._series = self._trials, self._series
        return other

    def dependence_of(self, values: Sequence[float | None]) -> dependence.Dependence:
        """The run's pooled dependence of the metric whose stored series `values` is (NONE if none)."""
        if not dependence.tested_in(self.design.last):
            return dependence.NONE  # a design too short to test it: labelled instead (_with_dependence)
        if self._series is None:
            self._series = _run_dependence(self._trials)
        key = tuple(float(v) for v in finite(values)[0])
        return self._series.get(key, dependence.NONE)

    def _with_dependence(self, e: Estimate, values: Sequence[float | None], d: Domain) -> Estimate:
        if not dependence.tested_in(self.design.last) and not d.integer and e.n >= 2:
            return replace(e, checks=(*e.checks, checks.INDEPENDENCE_ASSUMED))
        dep = self.dependence_of(values) if not d.integer and e.n >= 3 else dependence.NONE
        if not dep.rho_widen > 0 or not (math.isfinite(e.lo) and math.isfinite(e.hi)):
            return e
        trips = tuple(c for c in checks.CHECKS if c in e.checks or (c == "dependence" and dep.significant))
        return replace(_widened(e, dep.rho_widen, d), checks=trips)

    def estimate(self, values: Sequence[float | None], domain: Domain | Metric = NONNEG, rel: float = 0.0
                 ) -> Estimate:
        d = _domain(domain, None)
        e = self._with_dependence(sequential_ci(values, self.design, d, self.family), values, d)
        if not rel > 0 and not d.integer and e.n >= 2 and e.lo == e.hi:
            # every value the same and no resolution recorded: known to its stored digits, not exactly
            err = stored_resolution([v for v in values if v is not None])
            return replace(e, lo=max(e.lo - err, d.lo), hi=min(e.hi + err, d.hi), method=e.method + RESOLUTION_METHOD)
        return with_resolution(e, rel, d)

    def of(self, what: Metric | Domain | str, values: Sequence[float | None], rel: float = 0.0,
           domain: Domain | None = None) -> Estimate:
        """The estimate of a declared metric (`what` a Metric), or of values in `domain` (an
        aggregate name is accepted for older callers: the median makes it irrelevant)."""
        return self.estimate(values, _domain(what, domain), rel)

    def mean(self, values: Sequence[float | None], rel: float = 0.0, domain: Domain = NONNEG) -> Estimate:
        """Kept for callers of the former API: the estimate of `domain` (a median, a count's mean)."""
        return self.estimate(values, domain, rel)

    harmonic = mean

    def ratio(self, num: Sequence[float | None], den: Sequence[float | None],
              rels: tuple[float, float] = (0.0, 0.0), domain: Domain = NONNEG) -> Estimate:
        """est(num) / est(den) of two configurations of this run (e.g. guest / host): the MOVER interval
        (stats.mover_ratio) of the two sides' intervals, then the clocks' error of both sides. A
        stall on either side (a 0) is counted in `zeros` and reaches the ratio's bounds."""
        a = self._with_dependence(sequential_ci(list(num), self.design, domain, self.family), num, domain)
        b = self._with_dependence(sequential_ci(list(den), self.design, domain, self.family), den, domain)
        ra, rb = (_stored(e, vals, rel) for e, vals, rel in ((a, num, rels[0]), (b, den, rels[1])))
        return ratio_with_resolution(mover_ratio(a, b), ra, rb)

    def projected(self, values: Sequence[float | None], extra: int, domain: Domain = NONNEG) -> Estimate:
        """`values`' interval after `extra` more repetitions at the spread measured (projected), widened
        for the run's dependence as the printed interval is, at the bound the run would have with that
        many values (dependence.projected_widen): without it a widened interval could sit beside "1 more
        repetition would decide it" that only an unwidened one would."""
        e = projected(values, self.design, domain, extra, self.family)
        dep = self.dependence_of(values) if not domain.integer and e.n >= 3 else dependence.NONE
        rho = dependence.projected_widen(dep, e.n)
        if not rho > 0 or not (math.isfinite(e.lo) and math.isfinite(e.hi)):
            return e
        return _widened(e, rho, domain)

    def projected_ratio(self, num: Sequence[float | None], den: Sequence[float | None], extra: int,
                        domain: Domain = NONNEG) -> Estimate:
        """The ratio's interval after `extra` more repetitions of both sides (MOVER of the projections)."""
        return mover_ratio(self.projected(num, extra, domain), self.projected(den, extra, domain))

    def ratio_ahead(self, num: Sequence[float | None], den: Sequence[float | None],
                    domain: Domain = NONNEG) -> Callable[[int], tuple[float, float]]:
        """k -> the ratio's (lo, hi) after k more repetitions of both sides: the projection
        `verdicts.more_needed` walks to say how many more repetitions would decide a verdict."""

        def ends(extra: int) -> tuple[float, float]:
            e = self.projected_ratio(num, den, extra, domain)
            return e.lo, e.hi

        return ends

    def ratio_of(self, aggregate: str, num: Sequence[float], den: Sequence[float],
                 rels: tuple[float, float] = (0.0, 0.0)) -> Estimate:
        """The ratio of the two configurations' estimates (the aggregate no longer matters: the median
        of a rate is the rate of the median time)."""
        return self.ratio(num, den, rels)


def _widened(e: Estimate, rho: float, d: Domain) -> Estimate:
    """`e`'s interval stretched by the factor AR(1) dependence at `rho` makes in the variance of a mean
    of e.n values (on the log scale for a positive interval), kept in its domain."""
    lo, hi = dependence.widen(np.array([e.mean]), np.array([e.lo]), np.array([e.hi]),
                              dependence.variance_factor(rho, e.n), np.array([e.lo > 0]))
    return replace(e, lo=d.clip(float(lo[0])), hi=d.clip(float(hi[0])), method=e.method + f" dependence ρ={rho:.2f}")


def _run_dependence(trials: list[dict[str, Any]]) -> dict[tuple[float, ...], dependence.Dependence]:
    """{a configuration's series of one metric (finite values in trial order): the run's pooled
    dependence of that metric}. A series two metrics share (the same numbers) takes the stronger."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        if isinstance(t.get("id"), str):
            groups.setdefault(config_id_of_trial(t["id"]), []).append(t)
    per_metric: dict[str, list[tuple[float, ...]]] = {}
    for group in groups.values():
        names = {k for t in group for k, v in (t.get("metrics") or {}).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for name in names:
            series = finite([(t.get("metrics") or {}).get(name) for t in group])[0]
            per_metric.setdefault(name, []).append(tuple(float(v) for v in series))
    out: dict[tuple[float, ...], dependence.Dependence] = {}
    for series_list in per_metric.values():
        dep = dependence.pooled(series_list)
        for s in series_list:
            if s not in out or dep.rho_widen > out[s].rho_widen:
                out[s] = dep
    return out


def _stored(e: Estimate, values: Sequence[float | None], rel: float) -> float:
    """`rel`, or for a ratio's side without spread and without a recorded resolution its stored
    digits' (relative; a side whose estimate is 0 already gives the ratio a bound of 0 or ∞)."""
    if rel > 0 or e.n < 2 or e.lo != e.hi or not e.mean:
        return rel
    return stored_resolution([v for v in values if v is not None]) / abs(e.mean)


def aggregate_ratio(aggregate: str, num: Sequence[float], den: Sequence[float], ratio: Any) -> Estimate:
    """Kept for callers of the former API: ratio(num, den); nothing is dropped (a stall is a 0 the
    ratio's interval reaches, counted in `zeros`)."""
    return ratio(list(num), list(den))
