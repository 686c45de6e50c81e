"""A study's history: every configuration's metrics over its runs, with the steps in them named.

Each run contributes one point per configuration and metric: the metric's declared estimand over
the run's successful trials of it (the median, robust to one odd repetition; an event count's mean
per trial), at the run's creation time, with
the versions its environment recorded. The family is every configuration x every metric with a
declared direction (or the metrics asked for): analysis/changepoints.py judges it at once,
with Holm over the family, and each change gets its size with an interval and the environment
differences between the last run before it and the first after it on the keys `compare`
names ("kernel 6.1.0 → 6.6.0"). The newest-run test is also replayed run by run, so a
suspicion raised earlier shows as confirmed or withdrawn. Runs of an `iolab ab` session are
not part of a history (they are variants, not the study's runs). Pure: records in, series out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iolab.analysis import changepoints as cp
from iolab.analysis.compare import ENVIRONMENT
from iolab.analysis.innovations import NORMAL, Shape
from iolab.core import metrics
from iolab.core.model import TrialResult


@dataclass
class RunData:
    """What history needs of one stored run (the CLI reads it from the store)."""

    run_id: str
    created: float
    environment: dict[str, Any]
    trials: list[TrialResult]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Point:
    run_id: str
    created: float
    value: float
    n: int  # successful trials behind the value
    versions: dict[str, Any]
    resolution: float = 0.0  # the value's error bound (its trials' largest manifest.resolution), in its units


@dataclass
class Change:
    index: int  # into Series.points: the first point after the step
    status: str  # confirmed | suspected
    p: float
    level: float  # the Holm level it was held to
    before: float
    after: float
    ratio: float  # after / before (or after - before for a metric that can be 0 or negative)
    lo: float
    hi: float
    runs_after: int
    verdict: str  # regression | improvement | change (direction neither)
    differences: list[str]  # "kernel 6.1 → 6.6"; [] when the environments agree (look elsewhere)


@dataclass
class Event:
    run: int  # index of the run at which it happened
    what: str  # suspected | confirmed | withdrawn
    at: int  # index of the change it is about


@dataclass
class Series:
    config_id: str
    metric: str
    points: list[Point]
    changes: list[Change] = field(default_factory=list)
    label: str = ""
    unit: str = ""
    direction: str = "neither"
    relative: bool = True  # ratio is after/before (log scale); False: a difference
    noise_cv: float | None = None  # residual SD between runs (relative when `relative`)
    events: list[Event] = field(default_factory=list)
    estimand: str = "median"  # what each run's point is over its trials (the metric's declared estimand)


@dataclass
class History:
    series: list[Series]
    rho: float  # the lag-1 correlation between consecutive runs the tests assumed
    rho_estimate: float
    family: int  # series judged together
    tails: float = math.inf  # degrees of freedom of the t innovations the nulls assumed (inf: normal)
    skew: float = 1.0  # their Fernández–Steel γ (1: symmetric; analysis/innovations.py)
    alpha: float = cp.ALPHA
    method: str = ("median per run (a count: its mean per trial); circular binary segmentation, each end tested on "
                   "its own (>= 3 runs per side), "
                   "newest 1-3 runs, every one beyond the baseline window; differences within the tools' "
                   "resolution are not evidence; AR(1) between runs; Holm over every configuration "
                   "and metric at 5 %")


def metric_names(trials: list[TrialResult], wanted: tuple[str, ...]) -> dict[str, list[str]]:
    """Per configuration, the metrics to follow: `wanted`, else every one with a declared direction;
    when no stored metric has one (runs whose workload iolab no longer knows), every metric, whose
    changes are then `change`, neither better nor worse."""
    out: dict[str, set[str]] = {}
    every: dict[str, set[str]] = {}
    for t in trials:
        if t.status != "ok":
            continue
        declared = metrics.for_workload((t.params or {}).get("_workload") or {})
        for m in t.metrics:
            every.setdefault(t.config_id, set()).add(m)
            decl = declared.get(m)
            if (m in wanted) if wanted else (decl is not None and decl.direction != "neither"):
                out.setdefault(t.config_id, set()).add(m)
    return {c: sorted(ms) for c, ms in (out or ({} if wanted else every)).items()}


def build(runs: list[RunData], metric: str | tuple[str, ...] | None = None, config: str | None = None,
          host: str | None = None) -> History:
    """The history of every configuration (or only `config`) over `runs` (any order; oldest first
    out), keeping runs of `host` only when given, and never `iolab ab` blocks."""
    wanted = (metric,) if isinstance(metric, str) else tuple(metric or ())
    kept = sorted((r for r in runs if (host is None or r.environment.get("hostname") == host)
                   and not (r.options or {}).get("ab")), key=lambda r: r.created)
    names = metric_names([t for r in kept for t in r.trials if config in (None, t.config_id)], wanted)
    raw: dict[tuple[str, str], list[Point]] = {}
    labels: dict[str, str] = {}
    decls: dict[tuple[str, str], metrics.Metric | None] = {}
    for rec in kept:
        values: dict[tuple[str, str], list[float]] = {}
        steps: dict[tuple[str, str], float] = {}
        for t in rec.trials:
            if t.status != "ok" or t.config_id not in names:
                continue
            labels.setdefault(t.config_id, ", ".join(f"{k}={v}" for k, v in (t.params or {}).items()
                                                     if not k.startswith("_")))
            for m in names[t.config_id]:
                v = t.metrics.get(m)
                if isinstance(v, (int, float)) and math.isfinite(v):
                    values.setdefault((t.config_id, m), []).append(float(v))
                    step = ((t.manifest or {}).get("resolution") or {}).get(m)
                    if isinstance(step, (int, float)) and math.isfinite(step) and step > 0:
                        steps[(t.config_id, m)] = max(steps.get((t.config_id, m), 0.0), float(step))
                    if (t.config_id, m) not in decls:
                        decls[(t.config_id, m)] = metrics.for_workload((t.params or {}).get("_workload") or {}).get(m)
        for key, vs in values.items():
            raw.setdefault(key, []).append(Point(rec.run_id, rec.created, run_value(decls.get(key), vs), len(vs),
                                                 {k: rec.environment.get(k) for k, _ in ENVIRONMENT},
                                                 steps.get(key, 0.0)))
    keys = sorted(raw)
    family: dict[Hashable, list[float]] = {k: [p.value for p in raw[k]] for k in keys}
    bounds: dict[Hashable, list[float]] = {k: [p.resolution for p in raw[k]] for k in keys}
    results, model = cp.analyse(family, resolution=bounds) if family else ({}, cp.NoiseModel(0.0, 0.0, 0))
    out = []
    for key in keys:
        cid, m = key
        decl = decls.get(key)
        res = results[key]
        points = raw[key]
        s = Series(cid, m, points, label=labels.get(cid, ""), unit=decl.unit if decl else "",
                   direction=decl.direction if decl else "neither", relative=res.logged,
                   noise_cv=_noise(points, res, model.rho), estimand=decl.estimand if decl else "median")
        s.changes = [_named(c, points, s.direction) for c in res.changes]
        s.events = replay(points, res, model.rho, cp.ALPHA / max(2 * len(keys), 1), cp.null_size(2 * len(keys)),
                          model.shape)
        out.append(s)
    hist = History(out, model.rho, model.estimate, len(keys), tails=model.tails, skew=model.skew)
    if model.unclipped is not None:
        hist.method += (f"; rho's bias-corrected estimate {model.unclipped:.2f} lies outside [-1, 1] (too few runs "
                        f"per segment for the correction) and was clipped to {model.estimate:.2f}")
    return hist


def run_value(decl: metrics.Metric | None, values: list[float]) -> float:
    """A run's point for one configuration and metric: the declared estimand over its trials, the
    median of a measured quantity (robust to one odd repetition), the mean per trial of an event
    count (errors in one trial of five are a run with errors; their median would be 0)."""
    if decl is not None and decl.estimand == "mean":
        return statistics.fmean(values)
    return statistics.median(values)


def _noise(points: list[Point], res: cp.SeriesResult, rho: float) -> float | None:
    """The series' SD between runs around its segments (log scale when logged), for --power."""
    x = _tested(points, res)
    cuts = [c.index for c in res.changes if c.status == "confirmed"]
    edges = [0, *cuts, len(x)]
    pieces = [x[a:b] for a, b in zip(edges, edges[1:], strict=False) if b - a >= 2]
    if not pieces:
        return None
    ss = sum(float(((p - p.mean()) ** 2).sum()) for p in pieces)
    expected = sum(len(p) - float(cp.correlation(len(p), rho).sum()) / len(p) for p in pieces)
    return math.sqrt(ss / expected) * (1.0 if res.logged else res.scale) if expected > 0 else None


def _named(c: cp.Change, points: list[Point], direction: str) -> Change:
    before, after = points[c.index - 1].versions, points[c.index].versions
    diffs = [f"{label} {before.get(key)} → {after.get(key)}" for key, label in ENVIRONMENT
             if key != "study" and before.get(key) != after.get(key)]
    up = c.after > c.before
    verdict = "change" if direction == "neither" else ("improvement" if up == (direction == "higher")
                                                        else "regression")
    return Change(c.index, c.status, c.p, c.level, c.before, c.after, c.ratio, c.lo, c.hi, c.runs_after, verdict,
                  diffs)


def replay(points: list[Point], res: cp.SeriesResult, rho: float, level: float,
           nulls: int = cp.NULL_SERIES, shape: Shape = NORMAL) -> list[Event]:
    """The newest-run test as it would have answered after each run (the runs known then, the
    baseline since the confirmed change before it), at Holm's first-step level: when a change
    was first suspected, and whether it was then confirmed or withdrawn."""
    x = _tested(points, res)
    confirmed = sorted(c.index for c in res.changes if c.status == "confirmed")
    events: list[Event] = []
    open_at: int | None = None
    for t in range(2 * cp.MIN_SIDE, len(x) + 1):
        if open_at is None and any(c + cp.MIN_SIDE < t and c > t - max(cp.NEWEST) - cp.MIN_BASELINE
                                   for c in confirmed):
            continue  # the newest runs follow a change already confirmed: they are explained (as in analyse)
        start = max([c for c in confirmed if c <= t - max(cp.NEWEST) - cp.MIN_BASELINE] or [0])
        p, k = cp.newest_test(x[:t], start, rho, nulls, shape, res.resolution)
        if p <= level:
            at = t - k
            if open_at is None:
                events.append(Event(t - 1, "suspected", at))
                open_at = at
            if any(abs(c - open_at) <= 1 and c + cp.MIN_SIDE <= t for c in confirmed) or t - open_at >= cp.MIN_SIDE:
                events.append(Event(t - 1, "confirmed", open_at))
                open_at = None
        elif open_at is not None:
            if any(abs(c - open_at) <= 1 for c in confirmed):
                continue  # the segmentation holds it: it will be confirmed there
            events.append(Event(t - 1, "withdrawn", open_at))
            open_at = None
    return events


def _tested(points: list[Point], res: cp.SeriesResult) -> np.ndarray:
    """The series as analyse tested it: logs, or the values over the series' scale (no overflow)."""
    v = np.asarray([p.value for p in points], dtype=float)
    return np.log(v) if res.logged else v / res.scale
