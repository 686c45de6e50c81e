"""Ordering trials and deciding when a configuration has enough of them.

Interleaving (A B B A ...) keeps slow drift of the machine from looking like a difference
between configurations. Groups share one target setup (one loop device, one guest boot),
because setting a target up per trial would cost more than the trial.

Stopping (StopRule): at least `repetitions` successful trials; then another while the
interval the report will print for the main metric (analysis/sequential.py, calibrated so
that it keeps 95 % at the stop this rule makes) is wider than `ci_target` of its estimate,
or while a run-order check trips on it (analysis/checks.py: a trend, dependence between
consecutive repetitions, two modes: more repetitions are the only remedy, so the
configuration goes on to its cap), up to `max_repetitions` successful trials. Failed
attempts do not use up repetitions; a configuration is abandoned after
MAX_FAILURES_WITHOUT_SUCCESS failures with no success, or once its failures reach
`max_repetitions`. Every other metric of the configuration is reported at the stop this
metric decided, with its own checks said beside it (docs/statistics.md shows what that
costs them in coverage).

**The run's dependence** (analysis/dependence.py). One configuration's ten values cannot show
that consecutive repetitions are alike, but the run's configurations together can: the runner
pools the main metric's lag-1 dependence over every configuration measuring it, as the
repetitions arrive (`run_dependence`), and while that pooled test suspects dependence
(`Dependence.suspected`, z < −Z_TRIP) every one of those configurations goes on to its cap, stopped ones
included (their next round resumes them). A configuration stopped at three values says almost
nothing about ρ; the cap gives the report's widening (the variance factor at the pooled ρ̂)
and its flag (z < −Z_FLAG over the stored run: the `dependence` check beside each number) the
values to decide on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from iolab.analysis import calibration, checks, dependence
from iolab.analysis.sequential import LookDesign, interval_batch, relative_half_width
from iolab.core.metrics import NONNEG, Domain, Metric
from iolab.core.model import Config
from iolab.spec.study import StudySettings, StudySpec

MAX_FAILURES_WITHOUT_SUCCESS = 2


@dataclass
class TargetGroup:
    target: dict
    configs: list[Config]


def target_groups(spec: StudySpec) -> list[TargetGroup]:
    groups: dict[str, TargetGroup] = {}
    for c in spec.configs:
        key = repr(sorted(c.target.items()))
        groups.setdefault(key, TargetGroup(c.target, [])).configs.append(c)
    return list(groups.values())


def round_order(configs: list[Config], round_no: int, interleaved: bool) -> list[Config]:
    """Forward on even rounds, backward on odd ones (A B | B A); sequential keeps spec order."""
    if not interleaved:
        return list(configs)
    return list(configs) if round_no % 2 == 0 else list(reversed(configs))


@dataclass(frozen=True)
class StopRule:
    """When a configuration has enough repetitions (see the module docstring)."""

    min_reps: int
    max_reps: int
    ci_target: float
    domain: Domain = NONNEG  # of the main metric (its declaration): the interval's scale and range

    @classmethod
    def of(cls, settings: StudySettings, metric: Metric | None = None) -> StopRule:
        return cls(settings.repetitions, settings.max_repetitions, settings.ci_target,
                   metric.range if metric is not None else NONNEG)

    @property
    def design(self) -> LookDesign:
        return LookDesign.for_study(self.min_reps, self.max_reps)

    def narrow_enough(self, values: Any) -> Any:
        """Whether the reported interval's half-width is within ci_target of the estimate.
        values: (..., n) finite numbers (a batch of configurations, or one); bool per row."""
        x = np.asarray(values, dtype=float)
        if x.shape[-1] < 2:
            return np.zeros(x.shape[:-1], dtype=bool) if x.ndim > 1 else False
        rel = relative_half_width(*interval_batch(x, self.design, self.domain))
        return rel <= self.ci_target

    def tripped(self, values: Any) -> Any:
        """Whether a run-order check trips on the values (in run order): bool per row."""
        x = np.asarray(values, dtype=float)
        trips = checks.tripped(x, calibration.check_thresholds(x.shape[-1]))
        return trips["trend"] | trips["dependence"] | trips["two_modes"]

    def abandoned(self, n_ok: int, failures: int) -> bool:
        """Too many failures: two with no success yet, or as many as max_repetitions."""
        return (failures >= MAX_FAILURES_WITHOUT_SUCCESS and n_ok == 0) or failures >= self.max_reps

    def wants_more(self, ok_values: Sequence[float] | np.ndarray, failures: int = 0, run_dependent: Any = False
                   ) -> Any:
        """Another repetition? What the runner calls after every trial. ok_values: the main
        metric of the successful trials so far (a batch (..., n) gives one answer per row;
        non-finite values, a trial without the metric, count as a repetition but not as data).
        run_dependent: the run's pooled dependence of this metric is significant (run_dependence;
        per row for a batch): more, up to the cap."""
        x = np.asarray(ok_values, dtype=float)
        n = x.shape[-1]
        if self.abandoned(n, failures):
            return np.zeros(x.shape[:-1], dtype=bool) if x.ndim > 1 else False
        if n < self.min_reps:
            return np.ones(x.shape[:-1], dtype=bool) if x.ndim > 1 else True
        if n >= self.max_reps:
            return np.zeros(x.shape[:-1], dtype=bool) if x.ndim > 1 else False
        if x.ndim == 1:
            data = x[np.isfinite(x)]
            return bool(run_dependent) or bool(len(data) < 2 or not self.narrow_enough(data) or self.tripped(data))
        return ~self.narrow_enough(x) | self.tripped(x) | np.asarray(run_dependent, dtype=bool)

    def stop_reason(self, ok_values: Sequence[float], failures: int, run_dependent: bool = False) -> str:
        """Why a configuration has the repetitions it has (for reports): recomputed from its values
        (and the run's pooled dependence of the metric, run_dependence over the stored run)."""
        n = len(ok_values)
        if self.abandoned(n, failures):
            return f"abandoned after {failures} failed attempt(s)"
        if n < self.min_reps:
            return "short of the minimum (interrupted, or failures)"
        if self.wants_more(ok_values, failures, run_dependent):
            return "short of the cap (interrupted)"
        x = np.asarray(ok_values, dtype=float)
        data = x[np.isfinite(x)]
        if n >= self.max_reps and len(data) >= 2:
            trips = checks.names(checks.tripped(data, calibration.check_thresholds(len(data))))
            wide = not self.narrow_enough(data)
            if trips or wide or run_dependent:
                why = ([f"interval still wider than ±{self.ci_target:.0%}"] if wide else []) + \
                      [f"check tripped: {t}" for t in trips] + \
                      (["dependence between consecutive repetitions, pooled over the run's configurations"]
                       if run_dependent else [])
                return f"cap of {self.max_reps} reached, " + "; ".join(why)
        return f"interval within ±{self.ci_target:.0%}"


def run_dependence(series: Sequence[Sequence[float]]) -> bool:
    """Whether the run's repetitions so far show dependence between consecutive ones: the main
    metric's lag-1 dependence pooled over every configuration measuring it (`series`: each one's
    successful values in run order; non-finite values left out), beyond Z_TRIP (dependence.py). What
    the runner asks after every trial, and the reports of the stored run."""
    rows = [[float(v) for v in s if isinstance(v, (int, float)) and math.isfinite(v)] for s in series]
    return dependence.pooled(rows).suspected
