"""Issue 25, point 2: the verdict of `iolab ab` (analysis/ab.py) on simulated blocks.

A block's difference d_j = log(B_j / A_j); the sign-flip test across blocks with a minimum
effect, Holm over rows, Bonferroni over the looks, stopping once every row is decided. The
simulations drive the real `judge` at each look of the default design, as the session does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from iolab.analysis import ab


def _study(rng: np.random.Generator, rows: int, effect: float, sd: float, design: ab.Design) -> list[ab.Row]:
    """One sequential A/B study: rows x blocks of log differences (a common block effect plus each
    row's own), judged at every look until decided; the rows of the last look."""
    total = design.max_blocks
    common = rng.normal(0, sd / math.sqrt(2), total)
    d = effect + common[None, :] + rng.normal(0, sd / math.sqrt(2), (rows, total))
    look = design.max_blocks
    for look in design.looks:
        out = ab.judge([ab.Row(f"c{i}", "iops", "IOPS", "higher", list(d[i, :look])) for i in range(rows)], design,
                       look == design.max_blocks, intervals=False)
        if ab.decided(out):
            break
    return ab.judge([ab.Row(f"c{i}", "iops", "IOPS", "higher", list(d[i, :look])) for i in range(rows)], design,
                    True, intervals=rows == 1)


@pytest.mark.parametrize("rows,sd", [(1, 0.02), (6, 0.05), (6, 0.15)])
def test_a_equals_b_claims_no_change_in_more_than_5_percent_of_studies(rows: int, sd: float) -> None:
    rng = np.random.default_rng(rows * 100 + int(sd * 100))
    design = ab.Design()
    claims = 0
    for _ in range(100):
        claims += any(r.verdict in ("regression", "improvement") for r in _study(rng, rows, 0.0, sd, design))
    assert claims / 100 <= 0.05, claims


def test_a_large_slowdown_is_a_regression_at_the_first_look() -> None:
    rng = np.random.default_rng(2)
    design = ab.Design()
    for _ in range(20):
        rows = _study(rng, 1, math.log(0.6), 0.1, design)
        (r,) = rows
        assert r.verdict == "regression" and len(r.d) == design.min_blocks, r
        assert r.lo is not None and r.hi is not None and r.lo < 0.6 < r.hi < 0.95
        assert ab.exit_status(rows) == 1


def test_a_change_inside_the_minimum_effect_is_no_difference_not_a_regression() -> None:
    rng = np.random.default_rng(3)
    design = ab.Design(min_effect=0.05)
    verdicts = [_study(rng, 1, math.log(0.98), 0.01, design)[0].verdict for _ in range(40)]
    assert "regression" not in verdicts and verdicts.count("no difference") >= 36, verdicts
    assert all(ab.exit_status([ab.Row("c", "m", "", "higher", [], verdict=v)]) == 0 for v in set(verdicts))


def test_lower_is_better_metrics_and_improvements_take_their_sign_from_the_declaration() -> None:
    d = [math.log(1.5)] * 10  # B 50 % higher in every block
    (lat,) = ab.judge([ab.Row("c", "read_lat_mean_us", "µs", "lower", d)], ab.Design(), False)
    (iops,) = ab.judge([ab.Row("c", "iops", "IOPS", "higher", d)], ab.Design(), False)
    assert (lat.verdict, iops.verdict) == ("regression", "improvement")
    assert lat.ratio == pytest.approx(1.5)


def test_the_sign_flips_are_exact_and_the_design_says_what_it_can_decide() -> None:
    d = [0.1] * 8  # every block the same way: the most extreme of 2^8 patterns
    beyond, within, plain = ab.tests(d, 0.05)
    assert plain == pytest.approx(2 / 256) and beyond == pytest.approx(2 / 256)
    assert within == 1.0
    design = ab.Design(min_blocks=8, max_blocks=20, step=4)
    assert design.looks == [8, 12, 16, 20] and design.look_alpha == pytest.approx(0.0125)
    assert design.smallest_p(8) < design.look_alpha < design.smallest_p(6)
    with pytest.raises(ValueError):
        ab.Design(min_blocks=10, max_blocks=5)
    with pytest.raises(ValueError):
        ab.Design(min_effect=0)


def test_holm_over_rows_makes_many_rows_need_more_blocks() -> None:
    """8 blocks all one way reach p = 2/256: enough for one row at the look's level, not for 5 rows."""
    one = ab.judge([ab.Row("c0", "iops", "", "higher", [-0.5] * 8)], ab.Design(), False)
    many = ab.judge([ab.Row(f"c{i}", "iops", "", "higher", [-0.5] * 8) for i in range(5)], ab.Design(), False)
    assert one[0].verdict == "regression"
    assert {r.verdict for r in many} == {"undecided"}
    assert {r.verdict for r in ab.judge([ab.Row(f"c{i}", "iops", "", "higher", [-0.5] * 12) for i in range(5)],
                                        ab.Design(), False)} == {"regression"}


def test_rows_match_configurations_by_their_labels_not_their_ids() -> None:
    """B changes a key (its configuration id changes): its rows still pair with A's."""
    def doc(iodepth: int, iops: float) -> dict:
        w = {"kind": "fio", "rw": "randread", "bs": 4096, "iodepth": iodepth}
        return {"trials": [{"id": f"cfg{iodepth}-r0", "params": {"bs": 4096, "_workload": w}, "status": "ok",
                            "metrics": {"iops": iops, "runtime_s": 1.0}, "manifest": {}, "flags": []}]}
    rows = ab.rows_of([{"A": doc(1, 1000.0), "B": doc(32, 2000.0)}] * 3)
    (r,) = rows
    assert (r.config, r.metric, r.d) == ("bs=4096", "iops", [pytest.approx(math.log(2))] * 3)
    invalid = ab.judge(ab.rows_of([{"A": doc(1, 1000.0), "B": doc(32, 2000.0)}]), ab.Design(), True)
    assert invalid[0].verdict == "invalid"


def test_rows_that_are_the_same_numbers_are_one_question_for_holm() -> None:
    """IOPS, MiB/s and a latency that is 1/IOPS carry the same block differences: one hypothesis,
    so 8 blocks all one way still decide (2/256 < 0.05), where 3 separate rows would need 0.0167."""
    d = [-0.5] * 8
    rows = ab.judge([ab.Row("c", "iops", "", "higher", d), ab.Row("c", "bw_mib_s", "", "higher", d),
                     ab.Row("c", "read_lat_mean_us", "", "lower", [0.5] * 8)], ab.Design(max_blocks=8), True,
                    intervals=False)
    assert {r.verdict for r in rows} == {"regression"}
    assert len({r.p_holm_beyond for r in rows}) == 1


def test_an_error_count_from_zero_is_a_regression_not_a_missing_block() -> None:
    """A count (declared in the `count` range, its estimand the mean per trial) that is 0 in A and
    hundreds in B is evidence: every block has a difference, and B is the regression. With the
    geometric mean of positive values (the old rows), A's zeros left no value and the row was invalid."""
    def doc(errors: list[float], rng: np.random.Generator) -> dict:
        w = {"kind": "ycsb"}
        return {"trials": [{"id": f"c-r{j}", "params": {"_workload": w}, "status": "ok",
                            "metrics": {"run_errors": e, "run_ops_s": 1000.0 * (1 + 0.01 * rng.standard_normal())},
                            "manifest": {}, "flags": []} for j, e in enumerate(errors)]}
    rng = np.random.default_rng(5)
    blocks = [{"A": doc([0.0, 0.0, 0.0], rng), "B": doc([0.0, 383.0, 390.0], rng)} for _ in range(8)]
    rows = {r.metric: r for r in ab.judge(ab.rows_of(blocks), ab.Design(max_blocks=8), True)}
    errors = rows["run_errors"]
    assert errors.missing == 0 and len(errors.d) == 8
    assert errors.d[0] == pytest.approx(math.log((773 / 3 + 0.5) / 0.5))
    assert errors.verdict == "regression", errors.reason
    assert rows["run_ops_s"].verdict != "regression"
    # no errors on either side: ties (d = 0), which the equivalence test calls no difference
    same = [{"A": doc([0.0, 0.0], rng), "B": doc([0.0, 0.0], rng)} for _ in range(8)]
    quiet = {r.metric: r for r in ab.judge(ab.rows_of(same), ab.Design(max_blocks=8), True)}["run_errors"]
    assert quiet.d == [0.0] * 8 and quiet.verdict == "no difference", quiet.reason
