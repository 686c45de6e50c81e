"""A study's history: one configuration's metric over its runs, with the steps in it named.

Each run contributes one point per configuration: the median of the metric over the run's
successful trials of it (robust to one odd repetition), at the run's creation time, with the
versions its environment recorded. Change points come from analysis/changepoints.py; at each
one the environments of the last run before and the first run after are compared on the keys
`compare` names (machine, CPU, kernel, fio, QEMU, iolab): "kernel 6.1.0 → 6.6.0". Pure:
records in, series out (the CLI reads the store).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from iolab.analysis.changepoints import ChangePoint, change_points
from iolab.analysis.compare import ENVIRONMENT
from iolab.core.model import TrialResult

DEFAULT_METRIC = "iops"


@dataclass
class RunData:
    """What history needs of one stored run (the CLI reads it from the store)."""

    run_id: str
    created: float
    environment: dict[str, Any]
    trials: list[TrialResult]


@dataclass
class Point:
    run_id: str
    created: float
    value: float
    n: int  # successful trials behind the value
    versions: dict[str, Any]


@dataclass
class Change:
    index: int  # into Series.points: the first point after the step
    p: float
    before: float
    after: float
    differences: list[str]  # "kernel 6.1 → 6.6"; [] when the environments agree (look elsewhere)


@dataclass
class Series:
    config_id: str
    metric: str
    points: list[Point]
    changes: list[Change] = field(default_factory=list)


def pick_metric(trials: list[TrialResult], wanted: str | None) -> str | None:
    """`wanted`, else iops when measured, else the first metric name of a successful trial."""
    if wanted:
        return wanted
    names = sorted({m for t in trials if t.status == "ok" for m in t.metrics})
    return DEFAULT_METRIC if DEFAULT_METRIC in names else (names[0] if names else None)


def build(runs: list[RunData], metric: str | None = None, config: str | None = None,
          host: str | None = None, seed: int = 0) -> list[Series]:
    """The series of every configuration (or only `config`) over `runs` (any order; oldest first
    out), keeping runs of `host` only when given."""
    kept = sorted((r for r in runs if host is None or r.environment.get("hostname") == host),
                  key=lambda r: r.created)
    name = pick_metric([t for r in kept for t in r.trials], metric)
    if name is None:
        return []
    by_config: dict[str, list[Point]] = {}
    for rec in kept:
        values: dict[str, list[float]] = {}
        for t in rec.trials:
            v = t.metrics.get(name)
            if (t.status == "ok" and isinstance(v, (int, float)) and math.isfinite(v)
                    and config in (None, t.config_id)):
                values.setdefault(t.config_id, []).append(float(v))
        for cid, vs in values.items():
            by_config.setdefault(cid, []).append(Point(rec.run_id, rec.created, statistics.median(vs), len(vs),
                                                       {k: rec.environment.get(k) for k, _ in ENVIRONMENT}))
    out = []
    for cid in sorted(by_config):
        points = by_config[cid]
        found = change_points([p.value for p in points], seed=seed)
        out.append(Series(cid, name, points, [_named(c, points) for c in found]))
    return out


def _named(c: ChangePoint, points: list[Point]) -> Change:
    before, after = points[c.index - 1].versions, points[c.index].versions
    diffs = [f"{label} {before.get(key)} → {after.get(key)}" for key, label in ENVIRONMENT
             if key != "study" and before.get(key) != after.get(key)]
    return Change(c.index, c.p, c.before, c.after, diffs)
