"""Point 2 and 3 of issue 24: the interval the report prints holds at the stop the runner makes,
on the noise shapes it was calibrated on and on held-out ones it never saw, for every metric
of the configuration, and normal noise no longer pays 99.5 % for it.

Simulated studies go through the runner's own StopRule and the reports' own interval
(tests/analysis/coverage.py). Here: every cell of both sets at 2 000 studies (floors allow
for that Monte-Carlo error), and published cells of docs/statistics.md recomputed exactly at
10 000 from the seeds."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from iolab.analysis import calibration, checks
from iolab.analysis.plan import StopRule
from iolab.analysis.sequential import LookDesign, RunEstimator, interval_batch, sequential_ci
from iolab.core.metrics import NONNEG
from tests.analysis import coverage

DOCS = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"
SMALL = 2_000
FLOOR = 0.945 - 3 * math.sqrt(0.05 * 0.95 / SMALL)  # 94.5 % less three standard errors at 2 000 studies
# What no per-configuration method can hold at n <= 10 without a flag it rarely raises: said in
# docs/statistics.md ("What is not covered"): dependence between repetitions, two modes of equal weight.
NOT_COVERED = ("ar1", "two modes")


@pytest.fixture(scope="module")
def design_cells() -> list[coverage.Cell]:
    return coverage.cells_of(coverage.DESIGN_SET, SMALL)


@pytest.fixture(scope="module")
def held_out_cells() -> list[coverage.Cell]:
    return coverage.cells_of(coverage.HELD_OUT + coverage.HELD_OUT_2, SMALL)


def test_design_set_holds_at_the_stop(design_cells: list[coverage.Cell]) -> None:
    print("\n" + coverage.table(design_cells))
    low = [c for c in design_cells if c.coverage < FLOOR or c.secondary < FLOOR]
    assert not low, "\n".join(c.row() for c in low)


def test_held_out_set_holds_where_no_check_is_printed(held_out_cells: list[coverage.Cell]) -> None:
    """Lognormal up to σ = 1.5 both ways, mixtures of 10 % and 20 % at +30 %, drift, outliers and
    fio's clock: the intervals printed without a check cover >= 94.5 % (less Monte-Carlo error);
    the old rule (t-interval of the mean) covered 46-90 % on several of these."""
    print("\n" + coverage.table(held_out_cells))
    low = [c for c in held_out_cells if (c.unflagged < FLOOR or c.secondary < FLOOR)
           and not c.shape.startswith(NOT_COVERED)]
    assert not low, "\n".join(c.row() for c in low)
    assert {c.shape for c in held_out_cells} == set(coverage.HELD_OUT + coverage.HELD_OUT_2)
    # the documented exceptions are real, and the checks see part of them
    for shape in ("ar1 ρ=0.8", "two modes 50% +10%"):
        cells = [c for c in held_out_cells if c.shape == shape]
        assert min(c.unflagged for c in cells if not math.isnan(c.unflagged)) < FLOOR, shape
        assert max(c.flagged for c in cells) > 0.2, shape


def test_normal_noise_no_longer_pays_for_a_guarantee_nobody_reads() -> None:
    """At a CV of 2.5 % (ci_target 5 %, looks 3..10) the rule before covered 99.5 % with 6.2
    repetitions on average; now about 97.8 % with 4.8. Measured over four seeds of 20 000 studies
    (standard error ~0.05 %), not one cell: the published seed-1 cell at 10 000 said 97.43 %, a
    low draw that sat under the issue's 97.5 % ceiling while the true coverage (97.8 %) does not
    (docs/statistics.md says so; lowering it is a recalibration, still open)."""
    cells = [coverage.simulate("normal", (3, 10), 0.5, seed=seed, studies=20_000) for seed in (2, 3, 4, 5)]
    cov = float(np.mean([c.coverage for c in cells]))
    assert 0.95 <= cov <= 0.9825, [c.row() for c in cells]
    assert max(c.mean_reps for c in cells) < 6.2, [c.row() for c in cells]
    assert max(c.flagged for c in cells) < 0.03, [c.row() for c in cells]  # the checks rarely trip without defects


def test_docs_publish_the_tables_of_the_checked_in_driver() -> None:
    text = DOCS.read_text()
    block = re.search(r"<!-- coverage-tables -->\n(.*?)\n<!-- /coverage-tables -->", text, re.S)
    assert block, f"{DOCS} has no tables between <!-- coverage-tables --> markers"
    published = block.group(1)
    assert f"{coverage.STUDIES} simulated studies per row" in published
    for shape, design, ratio in (("normal", (3, 10), 0.5), ("mixture 10% +30%", (3, 10), 0.1),
                                 ("lognormal σ=1.5", (3, 3), 1.0), ("t2", (3, 10), 1.0)):
        row = coverage.simulate(shape, design, ratio).row()
        assert row in published, f"docs/statistics.md is out of date (`python -m tests.analysis.coverage`): {row}"


def test_the_report_prints_the_batch_interval_of_the_same_rule() -> None:
    """sequential_ci (every report) and interval_batch (the simulation, the stopping rule) agree,
    and a run's estimator takes its looks from the run's own [study] table."""
    rng = np.random.default_rng(3)
    design = LookDesign(3, 10)
    for n in range(3, 11):
        x = 100 * (1 + 0.03 * rng.standard_normal((20, n)))
        mean, lo, hi = interval_batch(x, design, NONNEG)
        for i in range(20):
            e = sequential_ci(list(x[i]), design, NONNEG)
            assert (e.mean, e.lo, e.hi) == (pytest.approx(mean[i]), pytest.approx(lo[i]), pytest.approx(hi[i]))
            assert e.method == "median[3..10] log" and e.n == n and e.estimand == "median"
            assert e.mean == pytest.approx(float(np.median(x[i])))
    doc = {"spec": {"study": {"name": "x", "repetitions": 4, "max_repetitions": 7}}}
    assert RunEstimator(doc).design == LookDesign(4, 7)
    assert RunEstimator({"spec": {"study": {"name": "x"}}}).design == LookDesign(3, 10)  # iolab's defaults


def test_multipliers_are_wider_than_t_and_shrink_with_n() -> None:
    from scipy import stats

    d = LookDesign(3, 10)
    q = [d.quantile(n) for n in range(3, 11)]
    assert all(a > b for a, b in zip(q, q[2:], strict=False)), q  # odd and even n (a mid of two) apart
    assert all(qn > stats.t.ppf(0.975, n - 1) for qn, n in zip(q, range(3, 11), strict=False))
    assert d.quantile(1) == float("inf")
    assert d.quantile(5, family=10) > d.quantile(5)  # a family of ten intervals: each wider
    with pytest.raises(ValueError):
        LookDesign(1, 3)


def test_shipped_calibration_is_what_the_simulation_gives() -> None:
    """look_alpha.json is a cache of the seeded simulations: fresh ones reproduce its entries."""
    table = calibration._table()
    assert table, "look_alpha.json does not match calibration.py's constants: `python -m iolab.analysis.calibration`"
    assert len(table["per_look_alpha"]) == sum(calibration.N_MAX - f + 1 for f in calibration.TABLE_FIRST)
    assert table["pivot"]["5"] == [round(float(q), 5) for q in calibration.simulate_pivot(5)]
    for first, last in ((3, 3), (3, 10)):
        assert table["per_look_alpha"][f"{first}..{last}"] == calibration.simulate_alpha(first, last)
    assert table["per_look_alpha"]["3..10"] < table["per_look_alpha"]["3..3"] < 0.05
    # the stop-time criterion it was made with holds for every design shape and CV
    a = table["per_look_alpha"]["3..10"]
    for shape in calibration.DESIGN_SHAPES:
        assert calibration.stop_coverage(3, 10, a, shape)[0].min() >= calibration.STOP_COVERAGE


def test_stop_rule_batch_and_single_agree_and_a_tripped_check_keeps_repeating() -> None:
    rule = StopRule(3, 10, 0.05)
    rng = np.random.default_rng(5)
    x = 1 + 0.02 * rng.standard_normal((200, 6))
    batch = rule.wants_more(x)
    assert batch.dtype == bool and batch.shape == (200,)
    assert [bool(rule.wants_more(list(row))) for row in x] == list(batch)
    assert 0 < batch.sum() < 200  # some stop at 6, some do not: the rule decides per row
    # a tight but steadily rising series would stop on width alone; the trend check keeps it going
    rising = [100.0, 100.2, 100.4, 100.6, 100.8, 101.0]
    assert rule.narrow_enough(np.asarray(rising)) and rule.wants_more(rising)
    assert "check tripped: trend" in StopRule(3, 6, 0.05).stop_reason(rising, 0)


def test_checks_trip_rarely_without_the_defect_and_see_it_when_there() -> None:
    rng = np.random.default_rng(11)
    n = 10
    iid = rng.standard_normal((20_000, n))
    trips = checks.tripped(iid, calibration.check_thresholds(n))
    for name, t in trips.items():
        assert t.mean() <= 1.5 * checks.TAIL, (name, t.mean())
    drift = iid * 0.01 + np.linspace(0, 0.05, n)
    assert checks.tripped(drift, calibration.check_thresholds(n))["trend"].mean() > 0.75  # 5 % over 10 at CV 1 %
    modes = np.where(rng.random((20_000, n)) < 0.3, 1.3, 1.0) * (1 + 0.01 * iid)
    seen = (modes > 1.15).sum(axis=1) >= 2  # the second group is there to see
    assert checks.tripped(modes, calibration.check_thresholds(n))["two_modes"][seen].mean() > 0.9
    rho, ar = 0.9, np.empty((20_000, n))
    ar[:, 0] = iid[:, 0]
    for i in range(1, n):
        ar[:, i] = rho * ar[:, i - 1] + math.sqrt(1 - rho * rho) * iid[:, i]
    assert checks.tripped(ar, calibration.check_thresholds(n))["dependence"].mean() > 0.3


def test_no_report_or_doc_promises_95_percent_unconditionally() -> None:
    """The report said 'Every interval in this report is a 95 % interval', whatever the noise. Now the
    95 % is stated with its condition (no check printed beside the number) wherever it is stated."""
    from iolab.analysis.repetitions import INTRO

    root = Path(__file__).resolve().parents[2]
    texts = {p: p.read_text() for p in [*(root / "src" / "iolab").rglob("*.py"), *(root / "docs").rglob("*.md"),
                                        root / "README.md"]}
    promise = re.compile(r"every (interval|number)[^.]{0,80}\b(is|keeps its|holds) (a )?95", re.I)
    assert not [str(p) for p, t in texts.items() if promise.search(t)]
    assert "95 %" in INTRO and "not covered by that 95 %" in INTRO and "check" in INTRO
