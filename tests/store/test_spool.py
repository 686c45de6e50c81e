"""The local spool, without a server: its file and its pace.

* `spool.Pacing`: attempts that fail take at most a tenth of a run's time (a frozen server
  costs each attempt a connect timeout), a server which fails fast is tried again soon (a
  failover is over in seconds), and one success resets the pace;
* a torn line (a crash between a write and its end) holds nothing back and breaks no flush.
The full disk under the spool, for real: tests/store/test_pg_outage.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iolab.store.spool import Op, Outcome, Pacing, Spool


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


def test_a_torn_line_is_set_aside_and_the_rest_is_written_in_order(tmp_path: Path) -> None:
    """Before, one line cut short by a crash made every later flush, `push --spool` and `doctor`
    end in a JSONDecodeError, and the writes behind it never reached the store."""
    spool = Spool("postgresql://alice@db.example.org/iolab", tmp_path)
    spool.add({"op": "status", "run_id": "r", "at": 1.0, "status": "running"})
    with open(spool.path, "a", encoding="utf-8") as f:
        f.write('{"op": "trial", "run_id": "r", "at": 2.0, "trial": {"trial_id": "c0-r')  # the crash
    spool.add({"op": "status", "run_id": "r", "at": 3.0, "status": "complete"})
    assert [e["at"] for e in spool.entries()] == [1.0, 3.0] and spool.count("r") == 2
    written: list[Op] = []

    def write(op: Op) -> tuple[Outcome, str | None]:
        written.append(op)
        return "written", None

    done = spool.flush(write)
    assert [op["at"] for op in written] == [1.0, 3.0]
    assert (done.written, done.rejected, done.left) == (2, 1, 0) and spool.empty()
    (aside,) = [json.loads(line) for line in spool.rejected.read_text().splitlines()]
    assert aside["torn_line"].startswith('{"op": "trial"') and "cut short" in aside["reason"]
