"""Clock skew of fleet hosts, decided on given numbers (fleet/skew.py): the minimum-delay estimate,
which skew a trial places each host's samples with, and when it is flagged."""

from __future__ import annotations

import time

import pytest

from iolab.fleet import skew
from iolab.fleet.skew import Skew, for_trial, from_bounds, same_clock


def test_the_estimate_is_the_highest_lower_bound() -> None:
    s = from_bounds([-35.0, None, -21.5, -40.0, -26.0])
    assert s.ms == -21.5 and s.spread_ms == pytest.approx(18.5) and len(s.bounds) == 4
    assert "minimum-delay" in s.method and not s.exact
    unknown = from_bounds([None, None])
    assert unknown.ms is None and "unknown" in unknown.method


def test_hosts_on_this_machines_clock_are_exactly_zero_and_never_flagged() -> None:
    t = for_trial({"a": same_clock(), "b": same_clock()}, {"a": -52.0, "b": None}, 50)
    assert t.used == {"a": 0.0, "b": 0.0} and t.flags == [] and t.remeasure == []
    assert not same_clock().stale(every_s=0, now=time.time() + 10**6)


def test_a_tight_estimate_is_used_as_it_is() -> None:
    t = for_trial({"r": Skew(-20.0, "m", 3.0)}, {"r": -31.0}, 50)
    assert t.used == {"r": -20.0} and t.flags == [] and t.remeasure == []


def test_probes_that_disagree_by_more_than_the_windows_tolerance_are_flagged() -> None:
    t = for_trial({"rack_r": Skew(-20.0, "m", 14.0), "rack_q": Skew(5.0, "m", 2.0)}, {}, 50)
    (flag,) = t.flags
    assert flag.startswith("fleet_skew_exceeds_tolerance") and "rack_r ±14 ms" in flag and "rack_q" not in flag
    assert "12.5 ms" in flag  # a quarter of the 50 ms log interval
    assert for_trial({"r": Skew(-20.0, "m", 14.0)}, {}, 100).flags == []  # 25 ms tolerance


def test_a_trial_bound_above_the_estimate_proves_it_stale() -> None:
    """The clocks drifted: the trial's own logs arrived 'before' the estimate allows. The trial is
    placed with its bound, flagged when the gap exceeds the tolerance, and the host probed again."""
    t = for_trial({"r": Skew(-20.0, "m", 1.0)}, {"r": 180.0}, 50)
    assert t.used == {"r": 180.0} and t.remeasure == ["r"]
    assert t.flags and "r ±200 ms" in t.flags[0]
    small = for_trial({"r": Skew(-20.0, "m", 1.0)}, {"r": -15.0}, 50)
    assert small.used == {"r": -15.0} and small.flags == [] and small.remeasure == []


def test_an_unknown_skew_is_flagged_and_measured_again() -> None:
    t = for_trial({"r": Skew(None, "unknown")}, {"r": None}, 50)
    assert t.used == {"r": 0.0} and t.remeasure == ["r"]
    assert t.flags[0].startswith("fleet_skew_unknown") and "r" in t.flags[0]
    known_now = for_trial({"r": Skew(None, "unknown")}, {"r": 1234.0}, 50)
    assert known_now.used == {"r": 1234.0} and "fleet_skew_exceeds_tolerance" in known_now.flags[0]


def test_a_measurement_ages() -> None:
    s = Skew(-20.0, "m", 1.0, measured_at=1000.0)
    assert not s.stale(every_s=300, now=1200.0) and s.stale(every_s=300, now=1400.0)
    assert Skew(None, "unknown").stale(every_s=10**9)
    assert skew.REMEASURE_S == 300.0
