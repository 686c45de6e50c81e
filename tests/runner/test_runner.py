"""The runner: per-trial timeout, adaptive stopping, interleaved order."""

from __future__ import annotations

import re
from collections import Counter

from tests.core.helpers import LOOP_TARGET, Lab, fio_workload, needs_fio, needs_root, study_table

from iolab.analysis.plan import StopRule


@needs_root
@needs_fio
def test_trial_timeout_fails_that_config_while_the_study_goes_on(lab: Lab) -> None:
    # fio's 1 s fits in the 3 s timeout even on a busy machine; its 6 s do not
    spec = lab.spec(study_table("timeouts", trial_timeout=3, repetitions=3, max_repetitions=3)
                    + LOOP_TARGET + fio_workload(runtime=[1, 6]))
    r = lab.iolab("run", spec, timeout=120)
    assert r.returncode == 0, r.stderr  # partial is not a failure of the command
    doc = lab.report_json()
    assert doc["status"] == "partial"
    by_runtime: dict[float, list[dict]] = {}
    for t in doc["trials"]:
        by_runtime.setdefault(t["params"]["runtime"], []).append(t)
    fast, slow = by_runtime[1.0], by_runtime[6.0]
    assert [t["status"] for t in fast] == ["ok"] * 3
    assert slow and all(t["status"] == "failed" for t in slow)
    for t in slow:
        assert re.search(r"did not finish within 3 s|time(d)? ?out", t["error"]), t["error"]
        assert t["metrics"] == {}
        # killed at the deadline, not after fio's 6 s
        assert t["ended"] - t["started"] < 5.5, t
    # a configuration that keeps failing is given up, not retried up to the cap
    assert len(slow) == 2
    lab.assert_nothing_left()


def _stored_values(lab: Lab) -> list[float]:
    doc = lab.report_json()
    return [t["metrics"]["iops"] for t in doc["trials"] if t["status"] == "ok"]


def _expected_stop(values: list[float], lo: int, hi: int, target: float) -> int:
    """Where the documented rule stops: the first n >= lo whose reported interval has
    half-width/estimate <= target and on which no run-order check trips, else hi."""
    rule = StopRule(lo, hi, target)
    return next(n for n in range(lo, hi + 1) if n == hi or not rule.wants_more(values[:n]))


@needs_root
@needs_fio
def test_adaptive_stopping_goes_to_the_cap_when_the_ci_is_too_wide(lab: Lab) -> None:
    spec = lab.spec(study_table("adaptive-tight", repetitions=3, max_repetitions=5, ci_target=0.0001)
                    + LOOP_TARGET + fio_workload())
    r = lab.iolab("run", spec, timeout=120)
    assert r.returncode == 0, r.stderr
    values = _stored_values(lab)
    assert len(values) == 5
    assert StopRule(3, 5, 0.0001).wants_more(values[:4])


@needs_root
@needs_fio
def test_adaptive_stopping_stops_at_the_minimum_when_the_ci_is_tight_enough(lab: Lab) -> None:
    # A rate-limited job (fio's rate_iops, through a spec's fio-jobfile workload): its IOPS are
    # the same every time, even on a busy machine, so 3 repetitions meet a 90 % CI target.
    spec = lab.spec(study_table("adaptive-loose", repetitions=3, max_repetitions=5, ci_target=0.9) + """
[target]
kind = "host"

[workload]
kind = "fio-jobfile"
job_file = "inline"
job_text = '''
[global]
rw=randread
bs=4k
size=4M
ioengine=psync
rate_iops=200
runtime=1
time_based

[steady]
'''
""")
    r = lab.iolab("run", spec, timeout=120)
    assert r.returncode == 0, r.stderr
    values = _stored_values(lab)
    assert all(150 < v < 250 for v in values), values
    # The runner stopped exactly where the rule says ...
    assert len(values) == _expected_stop(values, 3, 5, 0.9), values
    # ... which for a steady rate is right at the minimum.
    assert len(values) == 3, values


@needs_root
@needs_fio
def test_trials_are_interleaved_across_configurations(basic_run: tuple[Lab, dict]) -> None:
    lab, doc = basic_run
    order = [t["params"]["bs"] for t in doc["trials"]]
    assert Counter(order) == {4096: 3, 8192: 3}
    # forward, then backward, then forward: A B | B A | A B
    assert order == [4096, 8192, 8192, 4096, 4096, 8192]
    # the store's own order (seq) is the execution order (start times increase)
    rows = lab.trial_rows(doc["run_id"])
    assert [r[0] for r in rows] == [t["id"] for t in doc["trials"]]
    starts = [r[4] for r in rows]
    assert starts == sorted(starts)


@needs_root
@needs_fio
def test_sequential_order_runs_each_configuration_to_its_end(lab: Lab) -> None:
    """order = "sequential" is the opt-out of interleaving: A A A B B B, in the stored order and
    in time; each configuration is finished (here: its 3 repetitions) before the next starts."""
    spec = lab.spec(study_table("sequential", repetitions=3, max_repetitions=3, order="sequential") + LOOP_TARGET
                    + fio_workload(bs=["4k", "8k"]))
    r = lab.iolab("run", spec, timeout=180)
    assert r.returncode == 0, r.stderr
    doc = lab.report_json()
    assert [t["params"]["bs"] for t in doc["trials"]] == [4096] * 3 + [8192] * 3
    assert [t["repetition"] for t in doc["trials"]] == [0, 1, 2] * 2
    rows = lab.trial_rows(doc["run_id"])
    starts = [row[4] for row in rows]
    assert starts == sorted(starts) and [row[0] for row in rows] == [t["id"] for t in doc["trials"]]
    # the last trial of A ended before the first of B started
    a_end = max(t["ended"] for t in doc["trials"] if t["params"]["bs"] == 4096)
    assert a_end <= min(t["started"] for t in doc["trials"] if t["params"]["bs"] == 8192)
    lab.assert_nothing_left()
