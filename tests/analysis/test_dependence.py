"""Issue 24 item 2: dependence between consecutive repetitions, pooled over a run's configurations
(analysis/dependence.py), on fabricated stored runs read the way every report reads them
(RunEstimator), and the stopping rule's run-level question (plan.run_dependence).

Every assertion is over many seeded runs, never one draw: a strongly dependent run (AR(1), ρ = 0.9)
must be flagged and widened in every one of 20 runs; independent runs may be flagged at the test's
5 % false-alarm rate, never more than 4 of 40 (expected 2).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from iolab.analysis import dependence
from iolab.analysis.plan import StopRule, run_dependence
from iolab.analysis.sequential import LookDesign, RunEstimator, sequential_ci
from iolab.analysis.verdicts import UNDECIDED, Band, more_needed
from iolab.core.metrics import NONNEG

CONFIGS, N = 6, 10


def _series(rng: np.random.Generator, rho: float, cv: float = 0.03) -> list[list[float]]:
    """CONFIGS configurations of N values each around different levels, AR(1) with coefficient rho."""
    out = []
    for c in range(CONFIGS):
        e = rng.standard_normal(N)
        x = np.empty(N)
        x[0] = e[0]
        for i in range(1, N):
            x[i] = rho * x[i - 1] + math.sqrt(1 - rho * rho) * e[i]
        out.append(list(100.0 * (c + 1) * (1 + cv * x)))
    return out


def _doc(series: list[list[float]]) -> dict[str, Any]:
    """A stored run as results_document gives it: trials in order, ids '<config>-r<repetition>'."""
    trials = [{"id": f"cfg{c}-r{i}", "status": "ok", "metrics": {"iops": v, "other": 1.0 + 0.01 * i}}
              for c, values in enumerate(series) for i, v in enumerate(values)]
    return {"spec": {"study": {"name": "dep", "repetitions": 3, "max_repetitions": N}}, "trials": trials}


def _t_width(values: list[float]) -> float:
    """The width of the textbook t-interval of the mean (independent values) at 95 %."""
    x = np.asarray(values)
    return 2 * float(stats.t.ppf(0.975, x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)


def test_a_strongly_dependent_run_is_flagged_and_wider_than_its_t_interval() -> None:
    for seed in range(20):
        series = _series(np.random.default_rng([24, seed]), rho=0.9)
        est = RunEstimator(_doc(series))
        for values in series:
            e = est.estimate(values, NONNEG)
            plain = sequential_ci(values, LookDesign(3, N), NONNEG)
            assert "dependence" in e.checks, (seed, e)
            assert "dependence ρ=" in e.method, e.method
            assert e.hi - e.lo > 2 * _t_width(values), (seed, e, _t_width(values))
            assert e.hi - e.lo > 2 * (plain.hi - plain.lo), (seed, e, plain)
            assert e.lo <= plain.lo and plain.hi <= e.hi  # widened around the same estimate
        assert run_dependence(series), seed


def test_independent_runs_are_not_flagged_beyond_the_tests_false_alarm_rate() -> None:
    """Flagged at Z_FLAG's 5 %; widened on any sign of dependence (z < 0, half of them), but by
    little: the factor is at an upper bound of ρ near 0 (measured: mean width 1.26 times the plain
    interval over 240 configurations, against at least 2.9 times under ρ = 0.9)."""
    flagged = widened = tripped = 0
    ratios = []
    for seed in range(40):
        series = _series(np.random.default_rng([25, seed]), rho=0.0)
        est = RunEstimator(_doc(series))
        estimates = [est.estimate(values, NONNEG) for values in series]
        flagged += any("dependence" in e.checks for e in estimates)
        widened += any("dependence" in e.method for e in estimates)
        tripped += run_dependence(series)
        for values, e in zip(series, estimates, strict=True):
            plain = sequential_ci(values, LookDesign(3, N), NONNEG)
            ratios.append((e.hi - e.lo) / (plain.hi - plain.lo))
            if "dependence" not in e.method:  # not widened: the interval is exactly the plain one
                assert (e.lo, e.hi) == (plain.lo, plain.hi)
    assert flagged <= 4, flagged  # Z_FLAG: 5 % one-sided, 2 of 40 expected
    assert widened <= 28, widened  # Z_WIDEN = 0: half of them, 20 of 40 expected
    assert tripped <= 4, tripped  # Z_TRIP = Z_FLAG: 5 % one-sided, 2 of 40 expected (at 1.0, 16 %: up to 12 passed)
    assert float(np.mean(ratios)) < 1.5, float(np.mean(ratios))


def test_a_metric_is_pooled_with_its_own_kind_only() -> None:
    """The dependence of one metric never flags another: 'other' rises steadily in every configuration
    (perfectly dependent series) while 'iops' is independent; each is looked up as its own series."""
    series = _series(np.random.default_rng(7), rho=0.0)
    est = RunEstimator(_doc(series))
    iops, other = dependence.pooled(series), est.dependence_of([1.0 + 0.01 * i for i in range(N)])
    assert other.significant and other.z < -3
    assert not iops.significant and all(est.dependence_of(v).z == iops.z for v in series)
    assert not any("dependence" in est.estimate(v, NONNEG).checks for v in series)


def test_the_stop_rule_repeats_to_the_cap_while_the_run_is_dependent() -> None:
    rule = StopRule(3, 10, 0.05)
    narrow = [100.0, 100.1, 99.9]
    assert not rule.wants_more(narrow)  # narrow at the first look: on its own it stops
    assert rule.wants_more(narrow, 0, True)  # the run's dependence: on to the cap
    assert not rule.wants_more(narrow * 3 + [100.0], 0, True)  # at the cap it stops
    assert rule.stop_reason(narrow, 0, True) == "short of the cap (interrupted)"
    capped = rule.stop_reason(narrow * 3 + [100.0], 0, True)
    assert capped.startswith("cap of 10 reached") and "pooled over the run's configurations" in capped
    batch = np.array([narrow, narrow])
    assert list(rule.wants_more(batch, 0, np.array([True, False]))) == [True, False]


def test_a_run_too_small_to_say_anything_is_never_pooled() -> None:
    """Two configurations of three values (a --quick study) rising in perfect order: the upper bound
    of ρ from 4 pairs is the cap, which would widen every interval 4.6 times; below MIN_PAIRS the run
    is not pooled (not widened, not flagged, not repeated for it), and 8 such configurations are."""
    rising = [[100.0, 101.0, 102.0], [50.0, 50.5, 51.0]]
    assert sum(len(s) - 1 for s in rising) < dependence.MIN_PAIRS
    d = dependence.pooled(rising)
    assert d.rho_widen == 0 and not d.significant and not d.suspected and not run_dependence(rising)
    est = RunEstimator({"spec": {"study": {"repetitions": 3, "max_repetitions": 3}}, "trials": [
        {"id": f"c{c}-r{i}", "status": "ok", "metrics": {"iops": v}} for c, s in enumerate(rising) for i, v in
        enumerate(s)]})
    for values in rising:
        e, plain = est.estimate(values, NONNEG), sequential_ci(values, LookDesign(3, 3), NONNEG)
        assert (e.lo, e.hi, e.method) == (plain.lo, plain.hi, plain.method)
        assert e.checks == ("independence_assumed",), "no 95 % without a word: nothing could test it"
    eight = [[v * (1 + c) for v in rising[0]] for c in range(8)]
    assert dependence.pooled(eight).significant and run_dependence(eight)



def test_short_configurations_do_not_dilute_the_long_ones_evidence() -> None:
    """A run where the stopping rule stopped five configurations at three values and ran three to ten
    (as it does when the first values of some happen to look tight): three values say almost nothing
    about ρ (E_3 moves 0.11 between ρ = 0 and 0.8, against a standard deviation of 0.35), ten say much.
    Weighted by each configuration's signal over its noise (RHO_STAR), AR(1) ρ = 0.7 is flagged in 38
    of 40 seeded runs; weighted equally (the rule before) 26 of 40, the rest left unflagged with
    intervals that undercover (docs/statistics.md). Independent runs of the same shape stay at the
    test's 5 % (2 of 40 here; never more than 4)."""
    def run(rng: np.random.Generator, rho: float) -> list[list[float]]:
        out = []
        for c in range(8):
            n = N if c < 3 else 3
            e = rng.standard_normal(n)
            x = np.empty(n)
            x[0] = e[0]
            for i in range(1, n):
                x[i] = rho * x[i - 1] + math.sqrt(1 - rho * rho) * e[i]
            out.append(list(100.0 * (c + 1) * (1 + 0.03 * x)))
        return out

    dependent = sum(dependence.pooled(run(np.random.default_rng([26, s]), 0.7)).significant for s in range(40))
    independent = sum(dependence.pooled(run(np.random.default_rng([26, s]), 0.0)).significant for s in range(40))
    assert dependent >= 34, dependent
    assert independent <= 4, independent


def test_fewer_runs_of_eight_are_left_unflagged_and_undercovering_under_strong_dependence() -> None:
    """The cell of issue 24 the weights are for, on the design set's AR(1) ρ = 0.7 at a CV of ci_target:
    runs of 8 configurations through the runner's own stop and dependence rule (tests/analysis/coverage.py,
    1 500 runs, seed 1). Weighted, 83 % of the numbers carry the check (60 % weighted equally) and those
    printed without one cover 95.1 % here (93.0 % weighted equally; at 10 000 runs 94.1 % against 92.7 %:
    still short of 94.5 %, docs/statistics.md "What is not covered")."""
    from tests.analysis import coverage

    cell = coverage.simulate("ar1 ρ=0.7", (3, 10), 1.0, studies=1500, configs=8)
    assert cell.flagged >= 0.75, cell.row()
    assert cell.unflagged >= 0.94, cell.row()


def test_no_invariant_test_separates_dependent_runs_much_better_than_the_pooled_one() -> None:
    """Why the open cells of runs of 8 stay open is the test's power, so its power is what is checked: against
    King's point-optimal invariant test (tests/analysis/coverage.py `point_optimal`), the most powerful test
    that does not know the configurations' means and spreads, at the false-alarm rate the widening can spend on
    normal noise (12 %). Both ways: the pooled z must come within 3 points of it (equal weights on 3 × 10 and
    5 × 3 values, or a statistic that throws away the short configurations, fall further behind), and it must
    not beat it by more than the simulation's noise (or the bound computed would be wrong, not tight). At 8 × 4
    values and AR(1) ρ = 0.7 both detect about 60 %, on 3 × 10 + 5 × 3 about 94 % (docs/statistics.md, "How
    much a better test could give")."""
    from tests.analysis import coverage

    for n, floor in (((4,) * 8, 0.5), ((10,) * 3 + (3,) * 5, 0.88)):
        (_, pooled, optimal), = coverage.dependence_power(6000, n, 0.7, seed=3, rates=(0.12,))
        assert optimal >= floor, (n, pooled, optimal)
        assert pooled >= optimal - 0.03, (n, pooled, optimal)
        assert optimal >= pooled - 0.02, (n, pooled, optimal)


def test_docs_publish_the_power_and_lever_tables_of_the_checked_in_driver() -> None:
    """docs/statistics.md's `--test-power` and `--levers` tables are what the driver computes (rows recomputed
    exactly: the same seeds), and computing a lever leaves the shipped rule in place."""
    import re
    from pathlib import Path

    from tests.analysis import coverage

    text = (Path(__file__).resolve().parents[2] / "docs" / "statistics.md").read_text()
    power = re.search(r"<!-- test-power -->\n(.*?)\n<!-- /test-power -->", text, re.S)
    levers = re.search(r"<!-- levers -->\n(.*?)\n<!-- /levers -->", text, re.S)
    assert power and levers, "docs/statistics.md lacks the test-power or levers block"
    for row in coverage.power_rows(20000, (4,) * 8, 0.7):
        assert row in power.group(1), f"out of date (`python -m tests.analysis.coverage 20000 --test-power`): {row}"
    single = re.search(r"<!-- test-power-single -->\n(.*?)\n<!-- /test-power-single -->", text, re.S)
    assert single, "docs/statistics.md lacks the one-configuration test-power block"
    for row in coverage.single_power_rows(20000, 10, 0.5):
        assert row in single.group(1), f"out of date (`… 20000 --test-power`): {row}"
    tail = next(lv for lv in coverage.LEVERS if lv.alpha_factor == 1.3)
    for shape, ratio in (("normal", 0.5), ("ar1 ρ=0.7", 0.5)):
        row = coverage.lever_row(tail, shape, ratio, 10000)
        assert row in levers.group(1), f"out of date (`python -m tests.analysis.coverage 10000 --levers`): {row}"
    assert dependence.Z_WIDEN == 0.0 and dependence.RHO_MARGIN == 1.5  # lever_row put the shipped rule back


def test_the_pooled_bound_at_three_values_is_the_cap_or_nothing_on_half_of_independent_runs() -> None:
    """Why a `--quick` run is not widened for its pooled dependence (dependence.tested_in): at three
    values per configuration E_3(ρ) falls only from 1.00 to 0.88 by ρ = 0.9, so the upper bound on ρ is
    never identified below the cap for up to 19 configurations, and the pooled rule would widen a run of
    independent values by variance_factor(RHO_CAP, 3) ≈ 4.6 whenever its z < 0: about half the time."""
    rng = np.random.default_rng(24)
    for k in (8, 18):
        y = rng.standard_normal((2000, k, 3))
        _, z, _, rho_w = dependence.pooled_batch(y, np.full((2000, k), 3))
        assert set(np.unique(rho_w)) <= {0.0, dependence.RHO_CAP}
        assert ((rho_w > 0) == (z < 0)).all()
        assert 0.45 < (rho_w > 0).mean() < 0.55
    assert 4.5 < float(dependence.variance_factor(dependence.RHO_CAP, 3)) < 4.7


def _ends(est: RunEstimator, values: list[float]) -> Any:
    def ends(k: int) -> tuple[float, float]:
        p = est.projected(values, k)
        return p.lo, p.hi
    return ends


def test_what_would_decide_a_verdict_counts_the_dependence_its_interval_counts() -> None:
    """A widened interval must not sit beside "1 more repetition would decide it" that only the unwidened
    interval would earn: the projection (RunEstimator.projected, which every verdict's "how many more"
    walks) widens as the printed interval does, at the bound the run would have with that many values.
    On the old code the projection was the plain interval: 1 or 2 more repetitions for every seed; with
    the widening 14, 20 or none within the projection's horizon."""
    for seed in range(10):
        series = _series(np.random.default_rng([31, seed]), rho=0.9)
        series = [s[:6] for s in series]  # six values each: more repetitions are still possible
        doc = _doc(series)
        est = RunEstimator(doc)
        values = series[0]
        e = est.estimate(values, NONNEG)
        assert "dependence ρ=" in e.method, (seed, e)
        plain = sequential_ci(values, LookDesign(3, N), NONNEG)
        now = est.projected(values, 0)
        assert now.lo <= plain.lo and plain.hi <= now.hi and (now.hi - now.lo) > 1.5 * (plain.hi - plain.lo), (
            seed, now, plain)
        assert "dependence ρ=" in now.method
        # a claim whose edge the plain projection clears with one more repetition, the widened one does not
        one_more = sequential_ci(values + [float(np.median(values))], LookDesign(3, N), NONNEG)
        edge = one_more.lo * 0.999
        band = Band(edge)
        assert band.decide(e.lo, e.hi) == UNDECIDED, (seed, e, edge)
        d = more_needed(band, _ends(est, values), current=6)
        assert d.more is None or d.more > 2, (seed, d)


def test_a_projection_narrows_the_bound_with_more_values_and_leaves_independent_runs_alone() -> None:
    """A quick run widened at the cap (three values say nothing about ρ) projects a bound that falls as
    the values would grow, never above the widening now; a run not widened is projected unwidened."""
    dep = dependence.Dependence(rho=0.04, z=-0.1, configurations=18, rho_widen=dependence.RHO_CAP)
    bounds = [dependence.projected_widen(dep, n) for n in range(3, 11)]
    assert bounds[0] == dependence.RHO_CAP
    assert all(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:], strict=False)), bounds
    assert bounds[-1] < 0.5, bounds
    assert dependence.projected_widen(dependence.Dependence(0.3, 0.5, 18, 0.0), 10) == 0.0, "not widened now"
    assert dependence.projected_widen(dependence.Dependence(-0.2, -0.1, 18, 0.4), 10) == 0.0, "ρ̂ not positive"
    assert dependence.projected_widen(dependence.Dependence(0.9, -5.0, 8, 0.6), 10) <= 0.6, "never above now"


def _quick_doc(series: list[list[float]]) -> dict[str, Any]:
    doc = _doc(series)
    doc["spec"]["study"].update(repetitions=3, max_repetitions=3)
    return doc


def test_a_quick_runs_intervals_are_not_widened_on_a_coin_flip_and_say_independence_is_assumed() -> None:
    """A `--quick` run (looks 3..3) of 18 configurations of independent values: every interval is the
    plain one, labelled `independence_assumed`, never widened. On the old code about half of such runs
    (those whose pooled z came out below 0) had every interval 4.6 times wider and no label: here 12 of
    the 20 seeds. A run of the same values whose design goes on to ten (a run that stopped early) is still
    widened where its pooled z < 0."""
    widened_if_longer = 0
    for seed in range(20):
        rng = np.random.default_rng([35, seed])
        series = [list(100.0 * (c + 1) * (1 + 0.03 * rng.standard_normal(3))) for c in range(18)]
        est = RunEstimator(_quick_doc(series))
        longer = RunEstimator(_doc(series))
        for values in series:
            e = est.estimate(values, NONNEG)
            plain = sequential_ci(values, LookDesign(3, 3), NONNEG)
            assert (e.lo, e.hi) == (plain.lo, plain.hi) and "dependence" not in e.method, (seed, e, plain)
            assert e.checks == ("independence_assumed",), (seed, e.checks)
            p = est.projected(values, 5)
            assert "dependence" not in p.method, p
        widened_if_longer += "dependence ρ=" in longer.estimate(series[0], NONNEG).method
    assert 4 <= widened_if_longer <= 16, widened_if_longer


def test_the_label_stands_beside_the_number_in_a_report() -> None:
    from iolab.report.format import estimate_marks

    series = [[100.0, 101.0, 99.0], [200.0, 202.0, 199.0]]
    e = RunEstimator(_quick_doc(series)).estimate(series[0], NONNEG)
    assert "⚑ independence_assumed" in estimate_marks({"checks": list(e.checks), "n": e.n})
    single = RunEstimator(_quick_doc(series[:1])).estimate(series[0], NONNEG)
    assert single.checks == ("independence_assumed",), "one configuration: nothing to pool either"


def test_a_quick_generic_report_says_independence_is_assumed_once_not_per_number() -> None:
    """The label is the design's, not a configuration's: the generic report's per-configuration table
    carries it beside every number and explains it in one note, not one warning per number."""
    from iolab.analysis import generic

    series = [[100.0, 101.0, 99.0], [200.0, 202.0, 199.0], [300.0, 301.0, 305.0]]
    doc = _quick_doc(series)
    for t in doc["trials"]:
        t.update(params={"cfg": t["id"].split("-")[0]}, error=None)
    _, sections = generic.present(doc, generic.analyze(doc))
    notes = [n.text for s in sections for b in s.blocks for n in (getattr(b, "notes", None) or [])]
    assert sum("independence_assumed" in n for n in notes) == 1, notes
    assert not any("no 95 % is claimed" in n for n in notes), notes
