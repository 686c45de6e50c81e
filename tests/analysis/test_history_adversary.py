"""A statistician's attack on `iolab history` (findings 5, 6 and 13 of the review).

5: one odd run among the newest three was a "confirmed" change (the newest-3 contrast was a mean:
   one run 30 % low drove it), and flat families with occasional slow runs alarmed in most
   histories; the newest runs must now move jointly (every one beyond the baseline).
6: a fio p99 that crossed one histogram bucket (+0.15 % true) was a "confirmed regression +0.90 %
   [+0.90 %, +0.90 %]": the tools' resolution (manifest.resolution, or the values' own repeated
   levels) is now taken off every difference and widens every interval.
13: rho's bias correction reported estimates above 1; a raw series near 1e303 with a zero crashed.

Reproducers: /tmp/stat-attack/sim_hist*.py, sim_rho.py (the review's); seeded here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from iolab.analysis import changepoints as cp
from iolab.analysis.history import RunData, build
from iolab.core.model import TrialResult
from iolab.fio.engine import bucket_half_width_ns


def _family(rng: np.random.Generator, k: int = 30, n: int = 20, cv: float = 0.01) -> dict[int, np.ndarray]:
    return {i: 1000 * np.exp(cv * rng.standard_normal(n)) for i in range(k)}


@pytest.mark.parametrize("pos,factor", [(17, 0.7), (17, 0.9), (18, 0.7)],
                         ids=["30pc-third-newest", "10pc-third-newest", "30pc-second-newest"])
def test_one_odd_run_among_the_newest_is_not_a_change(pos: int, factor: float) -> None:
    """The same odd run in the middle of the series is (and was) not reported; among the newest
    three it was `(17, 'confirmed', 0.881)` (30 %) and confirmed at -3 % (10 %)."""
    for seed in (5, 6, 7):
        fam = _family(np.random.default_rng(seed))
        fam[0][pos] *= factor
        res, _ = cp.analyse(fam)
        assert res[0].changes == [], (seed, res[0].changes)


def test_a_stalled_or_half_speed_newest_run_and_a_10_percent_step_are_still_found() -> None:
    rng = np.random.default_rng(11)
    fam = _family(rng)
    fam[0][-1] *= 0.5  # half speed
    fam[1][-1] = 1e-3 * fam[1][-1]  # (nearly) stalled
    res, _ = cp.analyse(fam)
    assert [(c.index, c.status) for c in res[0].changes] == [(19, "suspected")]
    assert [(c.index, c.status) for c in res[1].changes] == [(19, "suspected")]
    # a 10 % step with a short history, one series, judged after 1, 2 and 3 runs
    base = 1000 * np.exp(0.01 * np.random.default_rng(12).standard_normal(10))
    after = 900 * np.exp(0.01 * np.random.default_rng(13).standard_normal(3))
    seen = [[(c.index, c.status) for c in cp.analyse({"s": np.concatenate([base, after[:r]])})[0]["s"].changes]
            for r in (1, 2, 3)]
    assert seen == [[(10, "suspected")], [(10, "suspected")], [(10, "confirmed")]], seen


def test_flat_families_with_occasional_half_speed_runs_rarely_confirm() -> None:
    """5 % of runs at half speed in flat families of 30: 'confirmed' changes in 51 % of families
    before (102 of 200 with /tmp/stat-attack/sim_hist_fa.py); the newest three now need every run
    beyond. (A single slow newest run is still suspected: docs/store.md says how often.)"""
    rng = np.random.default_rng(21)
    confirmed_at_end = 0
    n_fam = 30
    for _ in range(n_fam):
        fam = {k: 1000 * np.exp(0.01 * rng.standard_normal(20) + np.where(rng.random(20) < 0.05, math.log(0.5), 0.0))
               for k in range(30)}
        res, _ = cp.analyse(fam)
        confirmed_at_end += any(c.status == "confirmed" and c.index >= 17 for r in res.values() for c in r.changes)
    assert confirmed_at_end / n_fam <= 0.05, confirmed_at_end


def _fio_run(i: int, true_ns: float, rng: np.random.Generator) -> RunData:
    """sim_hist_quant.py: fio prints a p99 as the middle of its histogram bucket."""
    w = {"kind": "fio", "rw": "randread", "bs": 4096, "iodepth": 1, "runtime": 1.0}
    trials = []
    for r in range(3):
        ns = true_ns * math.exp(0.0003 * rng.standard_normal())
        width = 2 * bucket_half_width_ns(ns)
        v = (math.floor(ns / width) + 0.5) * width
        iops = 140000 * math.exp(0.01 * rng.standard_normal())
        trials.append(TrialResult(f"cfg-r{r}", "cfg", r, {"_workload": w, "bs": 4096}, "ok", None,
                                  {"read_clat_p99_us": v / 1000, "iops": iops},
                                  {}, {"resolution": {"read_clat_p99_us": bucket_half_width_ns(v) / 1000}}))
    return RunData(f"run{i:02d}", 1000.0 + i, {"hostname": "lab1", "kernel": "6.1"}, trials)


def test_a_p99_crossing_one_histogram_bucket_is_not_a_regression() -> None:
    """True p99 +0.15 % at run 18 moves the bucket 7.136 -> 7.200 us: was 'confirmed regression
    +0.90 % [+0.90 %, +0.90 %]' (zero width, excluding the true change)."""
    rng = np.random.default_rng(8)
    h = build([_fio_run(i, 7165.0 if i < 17 else 7176.0, rng) for i in range(20)])
    (p99,) = [s for s in h.series if s.metric == "read_clat_p99_us"]
    assert [p.value for p in p99.points][-3:] == [7.2, 7.2, 7.2]
    for c in p99.changes:  # none expected; should one appear, its interval must hold the truth
        assert c.hi > c.lo and c.lo <= 7176.0 / 7165.0 <= c.hi, c
    assert not p99.changes, p99.changes


def test_a_real_step_of_a_quantised_metric_is_found_with_an_interval_widened_by_the_bucket() -> None:
    rng = np.random.default_rng(9)
    h = build([_fio_run(i, 7165.0 if i < 12 else 7165.0 * 1.05, rng) for i in range(20)])
    (p99,) = [s for s in h.series if s.metric == "read_clat_p99_us"]
    (c,) = p99.changes
    assert (c.index, c.status) == (12, "confirmed")
    half = bucket_half_width_ns(7165.0) / 7165.0  # 0.45 %: the interval is at least 4 half-buckets wide
    assert math.log(c.hi / c.lo) >= 4 * half * 0.99 and c.lo <= 1.05 <= c.hi, c


def test_a_flat_p99_jittering_by_one_bucket_does_not_alarm() -> None:
    """sim_hist_quant2.py: one bucket up in 10 % of runs, no manifest: alarmed in 12 of 100 families."""
    rng = np.random.default_rng(1)
    alarms = 0
    for _ in range(40):
        iops = [140000 * np.exp(np.median(0.01 * rng.standard_normal(3))) for _ in range(20)]
        p99 = np.full(20, 7.136)
        p99[rng.random(20) < 0.1] = 7.2
        alarms += bool(cp.analyse({"iops": iops, "p99": p99})[0]["p99"].changes)
    assert alarms <= 1, alarms


def test_rho_estimate_is_clipped_and_history_says_so() -> None:
    """sim_rho.py: 'rho = 0.90 (estimated 1.27)'. One series of 10 runs (seed 5) whose bias-corrected
    estimate is 1.39."""
    x = 1000 * np.exp(0.01 * np.random.default_rng(5).standard_normal(10))
    _, model = cp.analyse({"s": x})
    assert -1.0 <= model.estimate <= 1.0 and model.unclipped is not None and model.unclipped > 1, model
    runs = [RunData(f"r{i}", float(i), {"hostname": "h"},
                    [TrialResult("c-r0", "c", 0, {}, "ok", None, {"iops": float(v)}, {}, {})])
            for i, v in enumerate(x)]
    h = build(runs)
    assert h.rho_estimate <= 1.0 and "clipped" in h.method, (h.rho_estimate, h.method)


def test_huge_raw_values_with_a_zero_do_not_crash() -> None:
    """sim_hist_edge.py: values near 1e303 and one 0 (raw scale) raised 'cannot convert float NaN
    to integer'; a step there is still found, in the series' own units."""
    rng = np.random.default_rng(1)
    h = 1e300 * 1000 * np.exp(0.01 * rng.standard_normal(20))
    h[3] = 0.0
    res, model = cp.analyse({0: h, 1: 1000 * np.exp(0.01 * rng.standard_normal(20))})
    assert math.isfinite(model.rho) and res[0].changes == []
    step = h.copy()
    step[10:] *= 2.0
    (c,) = cp.analyse({0: step})[0][0].changes
    assert c.index == 10 and c.lo < 1e303 < c.hi and math.isfinite(c.before), c
    runs = [RunData(f"r{i}", float(i), {"hostname": "h"},
                    [TrialResult("c-r0", "c", 0, {}, "ok", None, {"iops": float(v)}, {}, {})])
            for i, v in enumerate(step)]
    (s,) = build(runs).series
    assert [c.index for c in s.changes] == [10] and s.noise_cv is not None and math.isfinite(s.noise_cv)
