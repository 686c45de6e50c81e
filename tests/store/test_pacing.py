"""`spool.Pacing`, pure: how often a store tries a server that does not take writes.

The promise is that attempts that fail take at most a tenth of a run's time (a frozen server
costs each attempt a connect timeout), that a server which fails fast is tried again soon (a
failover is over in seconds), and that one success resets the pace.
"""

from __future__ import annotations

import pytest

from iolab.store.spool import Pacing


def test_fast_failures_are_tried_again_after_a_wait_that_doubles_up_to_its_cap() -> None:
    pace = Pacing()
    waits = [pace.failed(0.01, now=0.0) for _ in range(10)]
    assert waits == [1, 2, 4, 8, 16, 32, 64, 120, 120, 120]


@pytest.mark.parametrize("cost", [0.5, 5.0, 10.0, 25.0])
def test_attempts_that_fail_take_at_most_a_tenth_of_the_time(cost: float) -> None:
    """An outage of an hour, each attempt costing `cost` (10 s: libpq's connect timeout on a
    frozen server, 25 s: the answer deadline and the retry window of the first write)."""
    pace, now, spent = Pacing(), 0.0, 0.0
    while now < 3600:
        now += cost
        spent += cost
        now += pace.failed(cost, now=now)  # the next attempt is made as soon as it is due
        assert pace.due(now) and not pace.due(now - 0.001)
    # a tenth while 9 x cost is below the cap (120 s); a costlier attempt waits the cap
    assert spent / now <= max(0.1, cost / (cost + Pacing().most_s)) + 1e-9, (spent, now)


def test_a_success_resets_the_pace() -> None:
    pace = Pacing()
    for _ in range(5):
        pace.failed(0.01, now=100.0)
    assert not pace.due(100.0 + 15)
    pace.succeeded()
    assert pace.due(0.0) and pace.failed(0.01, now=0.0) == 1
