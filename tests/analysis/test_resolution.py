"""A tool's clock resolution never makes an interval promise more than it holds.

fio divides by a runtime it counts in whole milliseconds (truncated). A pass of 9.3 ms and one
of 9.8 ms both print 9 ms: three repetitions of a short pass agree to the last digit, and a
plain t-interval has zero width (CI of stop 21: `ahci/host randread 4m` printed
0.5625 [0.5625, 0.5625]). The workload records each rate's clock error
(`manifest.resolution`), and every interval is widened by it (stats.with_resolution).

Simulated studies here draw true pass times, let the clock truncate them as fio's does, stop
with the runner's own StopRule (which watches the statistical interval only: more
repetitions cannot shrink a clock's step) and check the printed interval's coverage of the
true rate (bytes / the median time) and of the true guest/host ratio. Each test also runs the
un-widened interval on the same draws and asserts it undercovers: the test has teeth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from iolab.analysis.compare import compare_runs
from iolab.analysis.plan import StopRule
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import RESOLUTION_METHOD, welch_log, with_resolution
from iolab.analysis.trials import relative_resolution

BYTES = 8 << 20
STUDIES = 4000  # coverage standard error ~0.35 % at 95 %
FLOOR = 0.94


def _doc(reps: int, max_reps: int) -> dict:
    return {"spec": {"study": {"repetitions": reps, "max_repetitions": max_reps, "ci_target": 0.05}}, "trials": []}


def _fio_rates(rng: np.random.Generator, mean_ms: float, cv: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rates as fio prints them, their relative clock error): true times, truncated to whole ms."""
    true_ms = mean_ms * (1 + cv * rng.standard_normal(n))
    shown_ms = np.maximum(np.floor(true_ms), 1.0)
    return BYTES * 1000 / shown_ms, 1.0 / shown_ms


def _stopped(rule: StopRule, draw: callable) -> tuple[np.ndarray, np.ndarray]:
    """Repetitions as the runner takes them: one more while the rule wants more."""
    rates, rels = draw(rule.max_reps)
    n = rule.min_reps
    while n < rule.max_reps and rule.wants_more(rates[:n]):
        n += 1
    return rates[:n], rels[:n]


@pytest.mark.parametrize("design", [(3, 3), (3, 6)])
@pytest.mark.parametrize("mean_ms,cv", [(9.4, 0.01), (16.5, 0.02), (9.9, 0.05), (40.2, 0.01)])
def test_the_interval_of_a_short_pass_covers_the_true_rate(design: tuple[int, int], mean_ms: float,
                                                           cv: float) -> None:
    rng = np.random.default_rng([int(mean_ms * 10), int(cv * 1000), *design])
    est, rule = RunEstimator(_doc(*design)), StopRule(*design, 0.05)
    truth = BYTES * 1000 / mean_ms
    covered = plain = 0
    for _ in range(STUDIES):
        rates, rels = _stopped(rule, lambda n: _fio_rates(rng, mean_ms, cv, n))
        e = est.harmonic(list(rates), float(rels.max()))
        covered += e.lo <= truth <= e.hi
        p = est.harmonic(list(rates))
        plain += p.lo <= truth <= p.hi
        assert e.lo < e.mean < e.hi and RESOLUTION_METHOD in e.method
    print(f"{mean_ms} ms, CV {cv:.0%}, looks {design}: widened {covered / STUDIES:.1%}, plain {plain / STUDIES:.1%}")
    assert covered / STUDIES >= FLOOR
    assert plain / STUDIES < FLOOR, "the truncating clock biases and hides: the plain interval undercovers"


@pytest.mark.parametrize("design", [(3, 3), (3, 6)])
def test_the_guest_over_host_ratio_of_short_passes_covers_the_true_ratio(design: tuple[int, int]) -> None:
    """R1's ratio_vs_host on the cell that failed CI: guest passes of ~16.4 ms over host ~9.3 ms."""
    rng = np.random.default_rng(list(design))
    est = RunEstimator(_doc(*design))
    rule = StopRule(*design, 0.05)
    g_ms, h_ms = 16.4, 9.3
    truth = h_ms / g_ms  # guest rate / host rate for the same bytes
    covered = plain = 0
    for _ in range(STUDIES):
        g, g_rel = _stopped(rule, lambda n: _fio_rates(rng, g_ms, 0.01, n))
        h, h_rel = _stopped(rule, lambda n: _fio_rates(rng, h_ms, 0.01, n))
        e = est.ratio_of("harmonic", list(g), list(h), (float(g_rel.max()), float(h_rel.max())))
        covered += e.lo <= truth <= e.hi
        p = est.ratio_of("harmonic", list(g), list(h))
        plain += p.lo <= truth <= p.hi
    print(f"ratio, looks {design}: widened {covered / STUDIES:.1%}, plain {plain / STUDIES:.1%}")
    assert covered / STUDIES >= FLOOR
    assert plain / STUDIES < 0.8


def test_the_cell_that_failed_ci_gets_an_interval_that_holds_every_possible_truth() -> None:
    """Three guest passes printed as 16 ms, three host passes as 9 ms: the true ratio is anywhere
    in (9/17, 10/16); the printed interval must hold all of it, and have width."""
    guest, host = [BYTES * 1000 / 16] * 3, [BYTES * 1000 / 9] * 3
    e = RunEstimator(_doc(3, 3)).ratio_of("harmonic", guest, host, (1 / 16, 1 / 9))
    assert e.mean == pytest.approx(9 / 16)
    assert e.lo <= 9 / 17 and e.hi >= 10 / 16 and e.lo < e.mean < e.hi
    plain = RunEstimator(_doc(3, 3)).ratio_of("harmonic", guest, host)
    # the defect this fixes: without the clock's error only the stored digits are left (a width of ~1e-10)
    assert (plain.hi - plain.lo) / plain.mean < 1e-6, plain


def test_widening_keeps_rates_positive_and_values_without_spread_get_their_stored_digits() -> None:
    est = RunEstimator(_doc(3, 3))
    e = est.harmonic([100.0, 100.0, 100.0], 0.5)
    assert e.lo == 50.0 and e.hi == 150.0
    stored = est.harmonic([100.0, 100.0, 100.0], 0.0)  # no resolution recorded: known to its stored digits
    assert (stored.lo, stored.hi) == (pytest.approx(99.95), pytest.approx(100.05)), stored
    assert with_resolution(stored, 0.0) == stored
    big = est.harmonic([100.0, 100.0, 100.0], 2.0)
    assert big.lo == 0.0 and big.hi == 300.0, "an error bound beyond the value clips at 0, not below"
    assert est.mean([5.0, 6.0, 7.0]) == est.mean([5.0, 6.0, 7.0], 0.0), "no resolution: nothing changes"


def test_relative_resolution_reads_what_the_workload_recorded() -> None:
    trials = [{"metrics": {"kbps": 1000.0}, "manifest": {"resolution": {"kbps": 100.0}}},
              {"metrics": {"kbps": 500.0}, "manifest": {"resolution": {"kbps": 100.0}}},
              {"metrics": {"kbps": 800.0}, "manifest": {}},
              {"metrics": {"kbps": 0.0}, "manifest": {"resolution": {"kbps": 5.0}}},
              {"metrics": {"iops": 3.0}, "manifest": {"resolution": {"kbps": "x"}}}]
    assert relative_resolution(trials, "kbps") == pytest.approx(0.2)
    assert relative_resolution(trials, "iops") == 0.0


def test_one_clock_tick_apart_is_not_a_regression_but_a_real_change_still_is() -> None:
    ms_a, ms_b = 9, 10
    a, b = [BYTES * 1000 / ms_a] * 4, [BYTES * 1000 / ms_b] * 4
    tick = welch_log(a, b, rels=(1 / ms_a, 1 / ms_b))
    assert tick.p_beyond(0.02) == 1.0 and tick.lo < 1 < tick.hi, tick
    assert welch_log(a, b).p_beyond(0.02) == 0.0, "without the clock's error a tick is a 10 % change"
    slow = welch_log(a, [BYTES * 1000 / 30] * 4, rels=(1 / ms_a, 1 / 30))
    assert slow.p_beyond(0.02) == 0.0 and slow.hi < 1


def _trial(tid: str, ms: int) -> dict:
    rate = BYTES / 1024 * 1000 / ms
    return {"id": f"{tid}", "status": "ok", "error": None, "flags": [],
            "params": {"_workload": {"kind": "iozone", "test": "read", "record": 4 << 20, "file_size": BYTES},
                       "_target": {"kind": "loop", "name": "host"}},
            "metrics": {"kbps": rate}, "manifest": {"resolution": {"kbps": rate / ms}}}


def test_compare_reads_the_resolution_from_the_stored_trials() -> None:
    def run(rid: str, ms: int) -> dict:
        return {"run_id": rid, "study": "iozone", "environment": {}, "spec": _doc(3, 3)["spec"],
                "trials": [_trial(f"c1-r{i}", ms) for i in range(1, 4)]}
    out = compare_runs(run("a", 9), run("b", 10), threshold=0.02)
    row = next(r for r in out["rows"] if r["metric"] == "kbps")
    assert row["verdict"] != "regression", row
    assert RESOLUTION_METHOD in row["a"]["method"] and row["a"]["ci95"][0] < row["a"]["mean"]
    far = compare_runs(run("a", 9), run("b", 40), threshold=0.02)
    assert next(r for r in far["rows"] if r["metric"] == "kbps")["verdict"] == "regression"
    assert not math.isnan(far["rows"][0]["p_holm"])


def test_the_repetitions_section_names_the_clock_error_once_with_its_range() -> None:
    from iolab.analysis.repetitions import ConfigRepetitions, section

    def rec(label: str, clock: float) -> ConfigRepetitions:
        return ConfigRepetitions(
            config_id=label, label=label, ok=3, failed=0, attempts=3, failed_of="0 failed of 3", main_metric="kbps",
            zero_values=0, stop_reason="cap of 3 reached",
            interval_method="median[3..3] natural scale" + (RESOLUTION_METHOD if clock else ""), clock_error=clock,
            checks=[])
    table = section([rec("a", 0.002), rec("b", 0.059), rec("c", 0.031), rec("d", 0.0)]).blocks[0]
    notes = [n.text for n in table.notes]
    assert len(notes) == 1 and notes[0].startswith("2 of 4 configurations") and "3.1% to 5.9%" in notes[0] \
        and "(worst: b)" in notes[0], notes
    assert [row[-2] for row in table.rows] == ["±0.2%", "±5.9%", "±3.1%", "—"]
    assert not section([rec("a", 0.002)]).blocks[0].notes, "a clock error under 1 % needs no note"


def test_the_repetitions_table_never_lets_nothing_tripped_stand_for_a_check_that_could_not_trip() -> None:
    """At five values no order is rarer than 1 %, so trend and dependence cannot trip there (every one of
    the 120 orders of five values is tried), while two_modes can; from six all three can (some order trips
    each). The table said "—" (nothing tripped) for five values, as for ten."""
    import itertools

    from iolab.analysis import calibration, checks
    from iolab.analysis.repetitions import ConfigRepetitions, checks_run, section

    for n, can in ((5, ("two_modes",)), (6, checks.CHECKS), (10, checks.CHECKS)):
        thr = calibration.check_thresholds(n)
        assert checks.possible(n, thr) == can, n
        orders = np.array(list(itertools.permutations(range(n))), dtype=float) if n <= 6 else None
        if orders is not None:
            trips = checks.tripped(orders, thr)
            for c in ("trend", "dependence"):
                assert trips[c].any() == (c in can), (n, c)
    assert checks.possible(4, calibration.check_thresholds(4)) == ()
    assert checks_run(4) == "not run: fewer than 5 values"
    assert checks_run(5) == "trend, dependence: cannot trip at 5 values (two_modes ran)"
    assert checks_run(6) == checks_run(10) == "—"

    def rec(n: int, tripped: list[str]) -> ConfigRepetitions:
        return ConfigRepetitions(config_id=str(n), label=str(n), ok=n, failed=0, attempts=n,
                                 failed_of=f"0 failed of {n}", main_metric="kbps", zero_values=0,
                                 stop_reason="narrow enough",
                                 interval_method="median[3..10] log", clock_error=0.0, checks=tripped)
    rows = section([rec(5, []), rec(8, []), rec(5, ["two_modes"])]).blocks[0].rows
    assert [r[-1] for r in rows] == ["trend, dependence: cannot trip at 5 values (two_modes ran)", "—", "two_modes"]
