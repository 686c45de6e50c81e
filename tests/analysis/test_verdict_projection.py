"""How many more repetitions would decide a verdict: one projection loop (verdicts.repetitions_to_decide)
that claims, sync-amplification's cost table and write-modes' cross-check all go through."""

from __future__ import annotations

from iolab.analysis.verdicts import PROJECT_MAX, Band, more_needed, repetitions_to_decide


def test_the_fewest_further_repetitions_that_decide() -> None:
    assert repetitions_to_decide(3, lambda k: k >= 4) == 4
    assert repetitions_to_decide(3, lambda k: True) == 1


def test_no_number_within_the_projection_horizon_is_none() -> None:
    asked: list[int] = []
    assert repetitions_to_decide(5, lambda k: asked.append(k) or False) is None
    assert asked == list(range(1, PROJECT_MAX - 5 + 1)), "looks exactly up to PROJECT_MAX repetitions in all"
    assert repetitions_to_decide(PROJECT_MAX, lambda k: True) is None, "already at the horizon: nothing to project"


def test_more_needed_narrows_an_interval_until_it_clears_the_band() -> None:
    # an interval around 1.5 of half-width 1/k: straddles 1.2 until the half-width is below 0.3
    def project(k: int) -> tuple[float, float]:
        return 1.5 - 1.0 / k, 1.5 + 1.0 / k

    d = more_needed(Band(1.2), project, current=2, configurations=("a",), config_ids=("id-a",))
    assert (d.more, d.configurations, d.config_ids) == (4, ("a",), ("id-a",))
    assert more_needed(Band(1.5), project, current=2).more is None, "sits on the edge: never decided"


def test_the_memoised_intervals_follow_the_values_not_the_list_that_held_them() -> None:
    """sequential_ci and projected are memoised (bench/run analysis): a list changed in place, or
    another design, must give that input's interval, exactly as computed afresh."""
    from iolab.analysis import sequential
    from iolab.core.metrics import NONNEG

    design = sequential.LookDesign(3, 10)
    values = [100.0, 104.0, 97.0]
    before, ahead = sequential.sequential_ci(values, design, NONNEG), sequential.projected(values, design, NONNEG, 4)
    values[2] = 60.0
    now = sequential.sequential_ci(values, design, NONNEG)
    assert now != before and now == sequential._sequential_ci.__wrapped__(tuple(values), design, NONNEG, 1)
    assert sequential.projected(values, design, NONNEG, 4).lo < ahead.lo, "the wider spread projects wider"
    assert sequential.sequential_ci(values, sequential.LookDesign(3, 3), NONNEG) != now, "the design is a key"
