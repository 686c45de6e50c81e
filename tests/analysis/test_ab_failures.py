"""`iolab ab` with stalls and failures (analysis/ab.py, publish/ab.py): a stalled trial (a rate of
0) and a block where a side has no successful trial are evidence, not blocks left out.

Before: `_log_mean` dropped values <= 0 and a block without a value on a side was only counted as
`missing`, so B stalling in a third of its trials was "no difference" (B/A 1.003), B stalling in
6 of 8 blocks "undecided" on the other 2 (exit 0), B stalling everywhere "invalid" (exit 3), and B
crashing in 5 of 8 blocks "undecided, missing 5" with exit 0 and a table that said "blocks 3".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from iolab.analysis import ab
from iolab.publish import ab as ab_report

W = {"kind": "fio", "rw": "randread", "bs": 4096, "iodepth": 1, "runtime": 1.0}
ONE_LOOK = ab.Design(8, 8, 4, 0.05)


def _doc(values: list[float | None], error: str = "fio failed (exit -11): Segmentation fault") -> dict[str, Any]:
    """A run of one configuration: None is a failed trial."""
    return {"run_id": "r", "trials": [
        {"id": f"cfg-r{i}", "params": {"bs": "4k", "_workload": W}, "status": "ok" if v is not None else "failed",
         "error": None if v is not None else error, "metrics": {"iops": v} if v is not None else {}, "manifest": {}}
        for i, v in enumerate(values)]}


def _ok(rng: np.random.Generator, n: int = 3) -> list[float | None]:
    return list(1000 * np.exp(0.01 * rng.standard_normal(n)))


def _judge(blocks: list[dict[str, Any]], design: ab.Design = ONE_LOOK) -> dict[str, ab.Row]:
    return {r.metric: r for r in ab.judge(ab.rows_of(blocks), design, True)}


def test_a_stall_in_one_of_three_trials_of_every_block_is_a_regression() -> None:
    rng = np.random.default_rng(0)
    blocks = [{"A": _doc(_ok(rng)), "B": _doc([0.0, *_ok(rng, 2)])} for _ in range(8)]
    rows = _judge(blocks)
    iops = rows["iops"]
    assert iops.verdict == "regression", iops.reason
    assert iops.ratio == pytest.approx(2 / 3, rel=0.02)  # arithmetic means, the zero included
    assert iops.stalled == {"A": 0, "B": 8} and "stalled trials: B 8" in iops.reason
    assert ab.exit_status(list(rows.values())) == 1


@pytest.mark.parametrize("stalled_blocks", [6, 8])
def test_b_stalled_completely_in_most_blocks_is_a_regression_not_fewer_blocks(stalled_blocks: int) -> None:
    rng = np.random.default_rng(1)
    blocks = [{"A": _doc(_ok(rng)), "B": _doc([0.0] * 3 if j < stalled_blocks else _ok(rng))} for j in range(8)]
    rows = _judge(blocks)
    iops = rows["iops"]
    assert len(iops.d) == 8 and iops.missing == 0
    assert iops.verdict == "regression", iops.reason
    # a side that stalled in every trial is the floor's worth worse in that block: 1000 times
    assert min(iops.d) == pytest.approx(-math.log(1 / ab.STALL_FLOOR), rel=0.05)
    assert ab.exit_status(list(rows.values())) == 1


def test_a_stall_on_both_sides_is_a_tie_and_the_rule_is_symmetric() -> None:
    a, b = _doc([0.0, 100.0, 100.0]), _doc([100.0, 100.0, 50.0])
    (fwd,) = ab.rows_of([{"A": a, "B": b}])
    (rev,) = ab.rows_of([{"A": b, "B": a}])
    assert fwd.d[0] == pytest.approx(-rev.d[0]) and fwd.d[0] == pytest.approx(math.log(250 / 200))
    (tie,) = ab.rows_of([{"A": _doc([0.0] * 3), "B": _doc([0.0] * 2)}])
    assert tie.d == [0.0]


def test_a_equals_b_with_random_stalls_on_both_sides_claims_no_change_in_more_than_5_percent() -> None:
    """Stalls that strike A and B alike (10 % of trials) keep d_j symmetric: the sign flips stay valid."""
    rng = np.random.default_rng(7)
    claims = 0
    for _ in range(150):
        blocks = [{k: _doc([0.0 if rng.random() < 0.1 else v for v in _ok(rng)]) for k in "AB"} for _ in range(8)]
        claims += _judge(blocks)["iops"].verdict in ("regression", "improvement")
    assert claims / 150 <= 0.05, claims


def test_b_crashing_in_5_of_8_blocks_is_counted_per_side_and_is_not_a_pass() -> None:
    """The real study's shape (sysbench segfaulting in B): A fine, B without a successful trial in
    5 of 8 blocks. 5 of 5 one-sided blocks give p = 2/32: too few for a regression at 0.05, so the
    failure row is undecided, and the gate exits 4 (not 0); the text names the failures per side."""
    rng = np.random.default_rng(2)
    blocks = [{"A": _doc(_ok(rng, 1)), "B": _doc([None] if j in (0, 2, 4, 5, 7) else _ok(rng, 1))} for j in range(8)]
    rows = list(_judge(blocks).values())
    by = {r.metric: r for r in rows}
    fails, iops = by[ab.FAILURES], by["iops"]
    assert fails.kind == "failures" and fails.failed == {"A": 0, "B": 5} and fails.extra["only"] == {"A": 0, "B": 5}
    assert fails.p_beyond == pytest.approx(2 / 32) and fails.verdict == "undecided"
    assert iops.failed == {"A": 0, "B": 5} and iops.missing == 5 and len(iops.d) == 3
    assert ab.exit_status(rows) == 4
    assert ab.incomplete(rows) and "B failed in 5 block(s) where A did not" in ab.incomplete(rows)[0]
    text = ab_report.text(rows, ONE_LOOK, 8)
    assert "failures: bs=4k: B failed in 5 of 8 block(s), A in 0" in text, text
    assert "Segmentation fault" in text and "3 (5 B failed)" in text, text
    assert ab_report.AbVerdict("x", 8, ONE_LOOK, rows).as_json()["exit_status"] == 4


@pytest.mark.parametrize("failed,verdict,status", [(8, "regression", 1), (7, "regression", 1), (6, "undecided", 4),
                                                    (2, "undecided", 4)])
def test_b_failing_where_a_does_not_is_a_regression_by_an_exact_sign_test(failed: int, verdict: str,
                                                                          status: int) -> None:
    """B without a successful trial in `failed` of 8 blocks, A fine: the exact sign test over those
    blocks, in one Holm family with the metric rows (6 of 8: p = 2/64, but the iops row's 2 blocks
    are the family's second member, so 4/64 after Holm: undecided, and the gate exits 4, not 0)."""
    rng = np.random.default_rng(3)
    blocks = [{"A": _doc(_ok(rng)), "B": _doc([None] * 3 if j < failed else _ok(rng))} for j in range(8)]
    rows = list(_judge(blocks).values())
    fails = next(r for r in rows if r.kind == "failures")
    assert fails.p_beyond == pytest.approx(ab.sign_test(failed, 0))
    if failed == 6:
        assert fails.p_holm_beyond == pytest.approx(2 * 2 / 64)
    assert fails.verdict == verdict, fails.reason
    assert ab.exit_status(rows) == status  # B failing everywhere was exit 3 "nothing measured"


def test_failures_of_a_alone_or_of_both_alike_do_not_fail_the_gate_but_are_named() -> None:
    rng = np.random.default_rng(5)
    same = [{"A": _doc([None] * 3 if j == 0 else _ok(rng)), "B": _doc([None] * 3 if j == 0 else _ok(rng))}
            for j in range(9)]
    rows = ab.judge(ab.rows_of(same), ab.Design(8, 9, 1, 0.05), True)
    fails = next(r for r in rows if r.kind == "failures")
    assert fails.verdict == "no difference" and "the same 1 block(s)" in fails.reason
    assert ab.exit_status(rows) == 0
    assert "failures: bs=4k: A and B failed in the same 1 block(s)" in ab_report.text(rows, ab.Design(), 9)
    a_only = [{"A": _doc([None] * 3 if j == 0 else _ok(rng)), "B": _doc(_ok(rng))} for j in range(9)]
    rows = ab.judge(ab.rows_of(a_only), ab.Design(8, 9, 1, 0.05), True)
    assert next(r for r in rows if r.kind == "failures").verdict == "undecided" and ab.exit_status(rows) == 0


def test_both_sides_failing_everywhere_is_nothing_measured() -> None:
    blocks = [{"A": _doc([None]), "B": _doc([None])} for _ in range(8)]
    rows = ab.judge(ab.rows_of(blocks), ONE_LOOK, True)
    assert ab.exit_status(rows) == 3


def test_a_side_whose_load_ended_early_is_set_aside_and_the_study_is_incomplete() -> None:
    rng = np.random.default_rng(6)
    blocks = [{"A": _doc(_ok(rng)), "B": _doc(_ok(rng)) | ({"invalid": "load ended"} if j == 3 else {})}
              for j in range(8)]
    rows = ab.judge(ab.rows_of(blocks), ONE_LOOK, True)
    (iops,) = rows  # set aside is not a failure of B: no failure row
    assert iops.invalid == {"A": 0, "B": 1} and len(iops.d) == 7
    assert ab.exit_status(rows) == 4 and "B's load command ended before its run in 1 block(s)" in ab.incomplete(rows)[0]
    # nothing measured but a load that ended: still 4, and the JSON says the same as the process
    assert ab_report.exit_status([], ["B's load `false` exited with status 1"]) == 4


def test_sign_test_is_exact() -> None:
    assert ab.sign_test(5, 0) == pytest.approx(2 / 32)
    assert ab.sign_test(0, 5) == pytest.approx(2 / 32)
    assert ab.sign_test(3, 3) == 1.0
    assert ab.sign_test(7, 1) == pytest.approx(2 * 9 / 256)
