"""Timing-dependent assertions the way a study makes its claims: over repetitions, with a 95 %
confidence interval, and aware of the confounders the product itself flags.

A test never decides on one sample. It repeats the measurement like a study does (at least
MIN_REPS, more while the interval is too wide to decide, up to a maximum), then:

* passes when the whole 95 % CI lies inside the expected band;
* passes with a warning when, at the maximum number of repetitions, the CI still straddles an
  edge of the band with its mean inside it: too noisy to decide (the verdict `iolab compare`
  gives as "undecided"), never evidence against the claim; a broken measurement lands wholly
  outside the band and still fails;
* fails when the CI lies wholly outside the band (or has its mean outside it) and no
  confounder was flagged;
* when a confounder *was* flagged (the product said "this number cannot mean what it seems",
  e.g. `cpu_contended`, `cpu_saturated`), it passes with a warning that names the
  confounder: on a busy machine the test checks that the product reported the cause.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from iolab.analysis.stats import Estimate, mean_ci

MIN_REPS = 3
# Flags of the fio-groups workload under which a class share may legitimately miss its band.
FIO_GROUPS_CONFOUNDERS = ("generator_cpu_bound", "cpu_saturated", "not_steady", "slow_start", "short_window")


class ConfoundedWarning(UserWarning):
    """A timing check did not hold, and the product flagged why (shown in pytest's summary)."""


class UndecidedWarning(UserWarning):
    """A timing check's CI straddled an edge of its band with the mean inside (a busy machine)."""


@dataclass(frozen=True)
class Band:
    """The values an estimate may take: [lo, hi], and why (said in every failure)."""

    lo: float  # -math.inf / math.inf for a one-sided claim ("below 1": a delta-method CI of a
    hi: float  # ratio may reach below 0, which says nothing against the claim)
    why: str

    @classmethod
    def around(cls, expected: float, rel: float, why: str) -> Band:
        return cls(expected * (1 - rel), expected * (1 + rel), why)

    def holds(self, est: Estimate) -> bool:
        return math.isfinite(est.lo) and math.isfinite(est.hi) and self.lo <= est.lo and est.hi <= self.hi

    def decided(self, est: Estimate) -> bool:
        """The CI is inside the band or wholly outside it: more repetitions would not change the verdict."""
        if not (math.isfinite(est.lo) and math.isfinite(est.hi)):
            return False
        return self.holds(est) or est.hi < self.lo or est.lo > self.hi


def describe(est: Estimate) -> str:
    return f"{est.mean:.3g} [{est.lo:.3g}, {est.hi:.3g}] n={est.n}"


def check(name: str, values: Sequence[float], band: Band, confounders: Iterable[str] = (),
          log: bool = False) -> Estimate:
    """Assert that the mean of `values` has its 95 % CI inside `band`, or that a confounder was flagged.

    log=True: for ratios that spread over orders of magnitude (32x, 84x, 115x), the geometric
    mean with the t-interval of the mean log, transformed back (the arithmetic t-interval of
    such values reaches below zero)."""
    return check_estimate(name, geometric_ci(values) if log else mean_ci(values), band, confounders, values)


def geometric_ci(values: Sequence[float]) -> Estimate:
    est = mean_ci([math.log(v) for v in values if v > 0])
    return Estimate(math.exp(est.mean), math.exp(est.lo), math.exp(est.hi), est.n, est.sd)


def from_json(est: dict) -> Estimate:
    """A results-contract estimate {mean, ci95: [lo, hi], n} (null bounds: unknown, infinite)."""
    lo, hi = est["ci95"]
    return Estimate(est["mean"], -math.inf if lo is None else lo, math.inf if hi is None else hi, est["n"], math.nan)


def check_estimate(name: str, est: Estimate, band: Band, confounders: Iterable[str] = (),
                   values: Sequence[float] | None = None) -> Estimate:
    """Assert that `est`'s 95 % CI lies inside `band`, or that a confounder was flagged."""
    print(f"{name}: {describe(est)} (band [{band.lo:.3g}, {band.hi:.3g}]: {band.why})")
    if band.holds(est):
        return est
    if straddles(band, est):
        warnings.warn(UndecidedWarning(
            f"{name}: 95% CI {describe(est)} straddles an edge of [{band.lo:.3g}, {band.hi:.3g}] with its mean "
            "inside: too noisy to decide here (a busy machine), not evidence against the claim"), stacklevel=2)
        return est
    seen = summarize(confounders)
    shown = f"values {[round(v, 4) for v in values]}; " if values is not None else ""
    assert seen, (f"{name}: 95% CI {describe(est)} is not inside [{band.lo:.3g}, {band.hi:.3g}] ({band.why}); "
                  f"{shown}no confounder was flagged")
    warnings.warn(ConfoundedWarning(
        f"{name}: 95% CI {describe(est)} outside [{band.lo:.3g}, {band.hi:.3g}], and the product flagged "
        f"why: {seen}"), stacklevel=2)
    return est


def straddles(band: Band, est: Estimate) -> bool:
    """Undecided with the mean inside: the CI is finite, crosses an edge, and its mean is in the band."""
    return (math.isfinite(est.lo) and math.isfinite(est.hi) and not band.decided(est)
            and band.lo <= est.mean <= band.hi)


def summarize(flags: Iterable[str]) -> str:
    """'name (k times): first message; ...' for each distinct flag name."""
    by: dict[str, list[str]] = {}
    for f in flags:
        by.setdefault(f.split(":")[0], []).append(f)
    return "; ".join(f"{k} ({len(v)}x): {v[0].split(':', 1)[-1].strip()}" for k, v in sorted(by.items()))


def repeat_until_decided(measure: Callable[[int], dict[str, float]], bands: dict[str, Band],
                         max_reps: int, min_reps: int = MIN_REPS) -> dict[str, list[float]]:
    """Call measure(i) for i = 0, 1, ... (each returns {name: value}) until every named value's
    CI is decided against its band (inside it, or wholly outside it), at least min_reps and at
    most max_reps times, as the runner's adaptive stopping does. Returns the values."""
    values: dict[str, list[float]] = {k: [] for k in bands}
    for i in range(max_reps):
        got = measure(i)
        for k in bands:
            values[k].append(got[k])
        if i + 1 >= min_reps and all(bands[k].decided(mean_ci(values[k])) for k in bands):
            break
    return values
