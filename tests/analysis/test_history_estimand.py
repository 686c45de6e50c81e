"""A history point is the metric's declared estimand over the run's trials (issue 24's medians,
issue 25's history): the median of a measured quantity, the mean per trial of an event count.

An error counter that fires in one trial of five has a median of 0 in every run: a history of
medians would never see errors start. Through the real analysis.history.build on stored-shape
runs (TrialResult records, a YCSB workload's declarations)."""

from __future__ import annotations

import numpy as np

from iolab.analysis.history import RunData, build
from iolab.core.model import TrialResult

WORKLOAD = {"kind": "ycsb"}


def _run(i: int, errors: list[float], ops: list[float]) -> RunData:
    trials = [TrialResult(f"c0-r{j}", "c0", j, {"_workload": WORKLOAD}, "ok", None,
                          {"run_errors": e, "run_ops_s": o}, {}, {})
              for j, (e, o) in enumerate(zip(errors, ops, strict=True))]
    return RunData(f"run{i:02d}", 1000.0 + i, {"kernel": "6.1.0"}, trials)


def test_a_count_is_followed_by_its_mean_a_rate_by_its_median() -> None:
    rng = np.random.default_rng(3)
    runs = []
    for i in range(14):
        errs = [0.0] * 5 if i < 9 else [0.0, 0.0, 400.0 + i, 0.0, 0.0]  # errors start in run 9, one trial in five
        ops = list(1000 * (1 + 0.01 * rng.standard_normal(5)))
        ops[1] = 10.0  # one odd repetition: the median ignores it
        runs.append(_run(i, errs, ops))
    h = build(runs)
    series = {s.metric: s for s in h.series}
    errors, rate = series["run_errors"], series["run_ops_s"]
    assert errors.estimand == "mean" and rate.estimand == "median"
    assert [p.value for p in errors.points[:9]] == [0.0] * 9
    assert [p.value for p in errors.points[9:]] == [(400.0 + i) / 5 for i in range(9, 14)]
    assert all(900 < p.value < 1100 for p in rate.points)  # the 10 ops/s trial moved no point
    # errors that start are a change at run 9, a regression (lower is better); the rate has none
    assert [(c.index, c.verdict) for c in errors.changes] == [(9, "regression")], errors.changes
    assert not rate.changes


def test_runs_without_declared_directions_still_have_a_history() -> None:
    """Runs whose workload iolab does not know (no declarations) are followed on every stored metric,
    their changes neither better nor worse, rather than 'no successful trials'."""
    runs = [RunData(f"r{i}", float(i), {"hostname": "h"},
                    [TrialResult("c-r0", "c", 0, {}, "ok", None, {"iops": 100.0 + (i % 2)}, {}, {})])
            for i in range(4)]
    (s,) = build(runs).series
    assert (s.metric, s.direction, len(s.points)) == ("iops", "neither", 4)
    assert build(runs, "other").series == []  # a metric asked for that no run has: nothing to follow
