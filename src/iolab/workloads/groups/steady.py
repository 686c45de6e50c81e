"""Steady-state statistics of one trial, from the sampled per-group counters (pure).

The window every group ran in, the warm-up cut by steady-state detection (no weight
class's share may drift by more than STEADY_DRIFT of itself over the window), and the
sharing metrics of that window: per-class IOPS and ratios, share errors, Jain's index."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from iolab.cgroups.sampler import Series
from iolab.core.errors import TrialFailed

STEADY_DRIFT = 0.10  # a class share may drift by at most 10 % of itself over the window


def active_window(series: Series, names: Sequence[str]) -> tuple[int, int]:
    """Sample indexes [a, b] during which every group was running (first I/O done, last not yet)."""
    first, last = [], []
    for g in names:
        ios = [c[g].ios for c in series.counters]
        changed = [k for k in range(1, len(ios)) if ios[k] > ios[k - 1]]
        if not changed:
            raise TrialFailed(f"group {g} did no I/O at all on the device (not charged to its cgroup?)")
        first.append(changed[0])
        last.append(changed[-1] - 1)
    return max(first), min(last)


def class_of(weights: dict[str, int]) -> dict[int, list[str]]:
    """Weight -> the groups that have it."""
    out: dict[int, list[str]] = {}
    for g, w in weights.items():
        out.setdefault(w, []).append(g)
    return out


def class_shares(series: Series, weights: dict[str, int], i: int, j: int) -> list[dict[int, float]]:
    """Per interval k in (i, j]: each weight class's share of the groups' completed I/Os."""
    classes = class_of(weights)
    out = []
    for k in range(i + 1, j + 1):
        d = series.delta(k - 1, k)
        tot = sum(d[g].ios for g in weights) or 1
        out.append({w: sum(d[g].ios for g in gs) / tot for w, gs in classes.items()})
    return out


def drift(series: Series, weights: dict[str, int], i: int, j: int) -> float:
    """Largest least-squares change of a class share over [i, j], relative to that share."""
    shares = class_shares(series, weights, i, j)
    ts = [(series.t[k] + series.t[k - 1]) / 2 for k in range(i + 1, j + 1)]
    if len(ts) < 3:
        return math.inf
    tm = sum(ts) / len(ts)
    sxx = sum((t - tm) ** 2 for t in ts) or 1e-12
    worst = 0.0
    for w in shares[0]:
        ys = [s[w] for s in shares]
        ym = sum(ys) / len(ys)
        slope = sum((t - tm) * (y - ym) for t, y in zip(ts, ys, strict=True)) / sxx
        if ym > 0:
            worst = max(worst, abs(slope) * (ts[-1] - ts[0]) / ym)
    return worst


def steady_window(series: Series, weights: dict[str, int], warmup_s: float,
                  within: tuple[int, int] | None = None) -> tuple[int, int, float, bool]:
    """(i, j, drift, steady): the earliest start, at least `warmup_s` after all groups run and at
    most halfway through, from which no class share drifts by more than STEADY_DRIFT. `within`:
    sample indexes the window must also lie in (while a tenant ran beside the groups)."""
    a, b = active_window(series, list(weights))
    if within:
        a, b = max(a, within[0]), min(b, within[1])
    if b - a < 4:
        raise TrialFailed(f"the groups ran together for only {max(series.t[b] - series.t[a], 0):.1f} s; "
                          "raise runtime (many fio processes start slowly on few CPUs)")
    start = next((k for k in range(a, b) if series.t[k] - series.t[a] >= warmup_s), a)
    best = (start, math.inf)
    for k in range(start, a + (b - a) // 2 + 1):
        d = drift(series, weights, k, b)
        if d <= STEADY_DRIFT:
            return k, b, d, True
        if d < best[1]:
            best = (k, d)
    return best[0], b, best[1], False


def sharing_metrics(ios: dict[str, float], weights: dict[str, int], seconds: float) -> dict[str, float]:
    """Weight adherence of one window: per-class IOPS and ratios, worst log2 share error,
    minimum fraction of entitlement, Jain's index on weight-normalised throughput."""
    total = sum(ios[g] for g in weights)
    wsum = sum(weights.values())
    m: dict[str, float] = {"aggregate_iops": total / seconds}
    norm = {g: (ios[g] / total) / (w / wsum) if total else 0.0 for g, w in weights.items()}
    m["max_abs_log2_error"] = max(abs(math.log2(x)) if x > 0 else 10.0 for x in norm.values())
    m["min_share"] = min(norm.values())
    sq = sum(x * x for x in norm.values())
    m["jain"] = sum(norm.values()) ** 2 / (len(norm) * sq) if sq else 0.0
    classes = class_of(weights)
    per_group = {w: sum(ios[g] for g in gs) / len(gs) / seconds for w, gs in classes.items()}
    for w, v in per_group.items():
        m[f"class_iops_{w}"] = v
    base = min(classes)
    for w, v in per_group.items():
        m[f"ratio_{w}"] = v / per_group[base] if per_group[base] else math.inf
    cls_err = [abs(math.log2((sum(ios[g] for g in gs) / total) / (w * len(gs) / wsum)))
               for w, gs in classes.items() if total and sum(ios[g] for g in gs)]
    m["class_max_abs_log2_error"] = max(cls_err) if cls_err else 10.0
    m["min_group_ios"] = min(ios[g] for g in weights)
    return m


def share_series(series: Series, weights: dict[str, int], i: int, j: int, a: int, b: int) -> dict[str, Any]:
    """Compact per-class share over time (all intervals while all groups ran) for the report."""
    shares = class_shares(series, weights, a, b)
    return {"t": [round((series.t[k] + series.t[k - 1]) / 2, 2) for k in range(a + 1, b + 1)],
            "share": {str(w): [round(s[w], 4) for s in shares] for w in sorted(class_of(weights))},
            "ideal": {str(w): round(w * len(gs) / sum(weights.values()), 4)
                      for w, gs in sorted(class_of(weights).items())},
            "window": [round(series.t[i], 2), round(series.t[j], 2)]}
