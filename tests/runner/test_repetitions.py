"""Issue 11 point 3: failed attempts are counted apart and never use up max_repetitions; the
runner stops where its StopRule says. The real Runner, store and host target, in-process,
with a workload that fails on chosen attempts (tests/core/flaky_workload.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.core import flaky_target as flaky_target_mod
from tests.core import flaky_workload

from iolab.analysis.plan import StopRule
from iolab.core import registry
from iolab.publish.document import analyse_document, results_document
from iolab.runner.runner import Runner
from iolab.spec.study import from_dict
from iolab.store.registry import open_store


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setitem(registry.WORKLOADS, flaky_workload.KIND, flaky_workload.REF)
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    yield tmp_path


def _run(tmp: Path, workloads: list[dict[str, Any]], target: dict[str, Any] | None = None,
         **study: Any) -> tuple[str, dict[str, Any]]:
    spec = from_dict({"study": {"name": "flaky", "ci_target": 0.05, **study}, "target": target or {"kind": "host"},
                      "workloads": workloads}, "test.toml")
    store = open_store(tmp / "data" / "results.sqlite")
    try:
        runner = Runner(spec, store, Console(file=open("/dev/null", "w")))
        runner.instantiate()
        runner.start()
        status = runner.run()
        doc, _, _ = analyse_document(results_document(store, store.resolve(runner.run_id)))
    finally:
        store.close()
    assert not list((tmp / "scratch").glob("iolab-host-*")), "the host target left its scratch dir"
    return status, doc


def _by_label(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["label"]: r for r in doc["findings"]["repetitions"]}


def test_failures_do_not_use_up_repetitions(env: Path) -> None:
    status, doc = _run(env, [{"name": "a", "kind": "flaky", "fail_on": [1, 3]}], repetitions=3, max_repetitions=3)
    assert status == "complete"
    assert [t["status"] for t in doc["trials"]] == ["ok", "failed", "ok", "failed", "ok"]
    rec = doc["findings"]["repetitions"][0]
    assert (rec["ok"], rec["failed"], rec["attempts"], rec["failed_of"]) == (3, 2, 5, "2 failed of 5")
    cfg = doc["findings"]["configs"][0]
    assert cfg["n_ok"] == 3 and cfg["failed_of"] == "2 failed of 5"
    assert cfg["metrics"]["value"]["n"] == 3  # failed attempts are not in the mean ...
    assert "flaky: attempt 1 failed" in " ".join(cfg["errors"])  # ... and not hidden either


def test_two_failures_without_success_abandon_the_configuration(env: Path) -> None:
    status, doc = _run(env, [{"name": "bad", "kind": "flaky", "fail_on": list(range(20))},
                             {"name": "good", "kind": "flaky"}], repetitions=3, max_repetitions=5)
    assert status == "partial"
    recs = _by_label(doc)
    assert (recs["workload=bad"]["ok"], recs["workload=bad"]["failed"]) == (0, 2)
    assert recs["workload=bad"]["stop_reason"] == "abandoned after 2 failed attempt(s)"
    assert recs["workload=good"]["ok"] == 3 and recs["workload=good"]["failed"] == 0


def test_failures_are_capped_at_max_repetitions(env: Path) -> None:
    # a success first, then it keeps failing: abandoned once its failures reach max_repetitions
    status, doc = _run(env, [{"name": "x", "kind": "flaky", "fail_on": list(range(1, 20))}],
                       repetitions=3, max_repetitions=4)
    assert status == "partial"
    rec = doc["findings"]["repetitions"][0]
    assert (rec["ok"], rec["failed"]) == (1, 4) and rec["stop_reason"] == "abandoned after 4 failed attempt(s)"


def test_runner_stops_where_its_rule_says(env: Path) -> None:
    steady = [100.0, 100.01, 99.99]  # CV 0.01 %: narrow at the first look
    noisy = [100.0, 130.0, 70.0, 110.0, 90.0]  # never narrow: runs to the cap
    drifting = [100.0, 103.0, 97.0, 102.5, 97.5, 102.0, 98.0, 101.5]  # CV ~2.5 %: narrows after a few looks
    status, doc = _run(env, [{"name": "steady", "kind": "flaky", "values": steady},
                             {"name": "noisy", "kind": "flaky", "values": noisy},
                             {"name": "drifting", "kind": "flaky", "values": drifting}],
                       repetitions=3, max_repetitions=8)
    assert status == "complete"
    rule = StopRule(3, 8, 0.05)
    got = {r["label"]: r["ok"] for r in doc["findings"]["repetitions"]}
    for name, values in (("steady", steady), ("noisy", noisy), ("drifting", drifting)):
        seq = [values[i % len(values)] for i in range(8)]
        expected = next(n for n in range(3, 9) if n == 8 or not rule.wants_more(seq[:n]))
        assert got[f"workload={name}"] == expected, (name, got)
    assert got == {"workload=steady": 3, "workload=noisy": 8, "workload=drifting": got["workload=drifting"]}
    assert 3 < got["workload=drifting"] < 8, got
    reasons = {r["label"]: r["stop_reason"] for r in doc["findings"]["repetitions"]}
    assert reasons["workload=steady"] == "interval within ±5%"
    assert reasons["workload=noisy"].startswith("cap of 8 reached")


@pytest.fixture
def flaky_target(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setitem(registry.TARGETS, flaky_target_mod.KIND, flaky_target_mod.REF)
    monkeypatch.setattr(flaky_target_mod.FlakyHostTarget, "setups", 0)
    yield env


def _run_on(tmp: Path, target: dict[str, Any], **study: Any) -> tuple[str, dict[str, Any]]:
    """Two configurations on one flaky target."""
    return _run(tmp, [{"name": "a", "kind": "flaky", "values": [100.0]},
                      {"name": "b", "kind": "flaky", "values": [200.0]}], target, **study)


def test_a_transient_target_setup_failure_costs_one_attempt_not_the_target(flaky_target: Path) -> None:
    status, doc = _run_on(flaky_target, {"kind": "flaky-host", "fail_setups": [0]}, repetitions=3, max_repetitions=3)
    assert status == "complete"
    assert flaky_target_mod.FlakyHostTarget.setups == 2
    for rec in doc["findings"]["repetitions"]:
        assert (rec["ok"], rec["failed"]) == (3, 1), rec
    failed = [t for t in doc["trials"] if t["status"] == "failed"]
    assert len(failed) == 2 and all("target setup failed: " in t["error"] and "transient" in t["error"]
                                    for t in failed)


def test_a_target_that_keeps_failing_is_given_up_after_two_attempts(flaky_target: Path) -> None:
    status, doc = _run_on(flaky_target, {"kind": "flaky-host", "fail_setups": list(range(10))},
                          repetitions=3, max_repetitions=5)
    assert status == "failed"
    assert flaky_target_mod.FlakyHostTarget.setups == 2, "bounded like a trial's failures: two without a success"
    assert all((r["ok"], r["failed"]) == (0, 2) for r in doc["findings"]["repetitions"])


def test_a_missing_capability_is_not_retried(flaky_target: Path) -> None:
    status, doc = _run_on(flaky_target, {"kind": "flaky-host", "fail_setups": [0], "final": True},
                          repetitions=3, max_repetitions=3)
    assert status == "failed"
    assert flaky_target_mod.FlakyHostTarget.setups == 1
    assert all((r["ok"], r["failed"]) == (0, 1) for r in doc["findings"]["repetitions"])


# Eight configurations (the 16 consecutive pairs at three values that dependence.MIN_PAIRS asks for)
# whose repetitions move slowly (each next value close to the last), each narrow enough at three
# values to stop there on its own, and with no check of its own tripping at 5 or 6 values: only the
# run's pooled dependence (plan.run_dependence) can send them on.
_ALIKE = [[100.0, 100.3, 100.5, 100.4, 100.1, 99.8], [200.0, 200.8, 201.2, 200.9, 200.2, 199.6],
          [50.0, 50.1, 50.2, 50.15, 50.05, 49.95], [80.0, 79.8, 79.6, 79.7, 79.9, 80.1]]
ALIKE_IN_ORDER = _ALIKE + [[v * 3 for v in s] for s in _ALIKE]
# The same values of each configuration in an order that alternates (consecutive values apart).
_ALTERNATING = [[100.0, 100.5, 100.1, 100.4, 99.8, 100.3], [200.0, 201.2, 200.2, 200.9, 199.6, 200.8],
                [50.0, 50.2, 50.05, 50.15, 49.95, 50.1], [80.0, 79.6, 79.9, 79.7, 80.1, 79.8]]
ALTERNATING = _ALTERNATING + [[v * 3 for v in s] for s in _ALTERNATING]


def _workloads(series: list[list[float]]) -> list[dict[str, Any]]:
    return [{"name": f"c{i}", "kind": "flaky", "values": values} for i, values in enumerate(series)]


def test_a_run_whose_repetitions_are_alike_in_order_repeats_every_configuration_to_the_cap(env: Path) -> None:
    rule = StopRule(3, 6, 0.05)
    assert not any(rule.wants_more(v[:3]) for v in ALIKE_IN_ORDER)  # on its own, each stops at 3
    status, doc = _run(env, _workloads(ALIKE_IN_ORDER), repetitions=3, max_repetitions=6)
    assert status == "complete"
    recs = _by_label(doc)
    assert {r["ok"] for r in recs.values()} == {6}, {k: r["ok"] for k, r in recs.items()}
    for r in recs.values():
        assert r["stop_reason"].startswith("cap of 6 reached") and "pooled over the run" in r["stop_reason"], r
        assert "dependence" in r["checks"], r
    for cfg in doc["findings"]["configs"]:  # the report's numbers: flagged and widened, no bare 95 %
        value = cfg["metrics"]["value"]
        assert "dependence" in value["checks"] and "dependence ρ=" in value["method"], value


def test_a_run_whose_repetitions_alternate_stops_where_each_configuration_is_narrow(env: Path) -> None:
    status, doc = _run(env, _workloads(ALTERNATING), repetitions=3, max_repetitions=6)
    assert status == "complete"
    recs = _by_label(doc)
    assert {r["ok"] for r in recs.values()} == {3}, {k: r["ok"] for k, r in recs.items()}
    assert all(r["stop_reason"] == "interval within ±5%" and "dependence" not in r["checks"] for r in recs.values())
