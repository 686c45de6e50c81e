"""`iolab compare` on a stored real run of `vm-profile --quick` (tests/analysis/data): B is
the same document with the CPU, memory and network rates raised, so the verdicts can be
checked against a known answer on a real document (its workloads, systems, metric names,
manifests).

The run was measured on a loaded 2-CPU machine under TCG, with spreads of 5-90 % over its
3 repetitions: on those values compare must not claim what it cannot see (no regression, and
"undecided" where the spread hides a 30 % change). With the same document's values given
the 2 % spread of a quiet machine, every raised rate is an improvement when those rates are
the question (--metric), and nothing is claimed falsely when every metric is compared.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from iolab.analysis.compare import compare_runs
from iolab.analysis.trials import by_config

FIXTURE = Path(__file__).parent / "data" / "vm-profile-quick.json.gz"
RAISED = ("events_per_s", "copy_mb_s", "scale_mb_s", "add_mb_s", "triad_mb_s", "mbit_s")
FACTOR = 1.3


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


def _raised(doc: dict[str, Any], run_id: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["run_id"] = run_id
    for t in out["trials"]:
        for m in RAISED:
            if m in t["metrics"]:
                t["metrics"][m] *= FACTOR
    return out


def _quiet(doc: dict[str, Any], seed: int) -> dict[str, Any]:
    """Every configuration's values replaced by its mean × (1 + 2 % noise)."""
    out = copy.deepcopy(doc)
    rng = np.random.default_rng(seed)
    for trials in by_config(out).values():
        names = {m for t in trials for m in t["metrics"]}
        for m in names:
            mean = float(np.mean([t["metrics"][m] for t in trials if m in t["metrics"]]))
            for t in trials:
                if m in t["metrics"]:
                    t["metrics"][m] = mean * (1 + 0.02 * rng.standard_normal())
    return out


def test_the_fixture_is_a_real_vm_profile_run(run: dict[str, Any]) -> None:
    assert run["study"] == "vm-profile" and run["status"] == "complete"
    assert {t["params"]["_workload"]["kind"] for t in run["trials"]} == {"primes", "sysbench-cpu", "stream", "fio",
                                                                          "iperf3"}
    assert {t["params"]["target"] for t in run["trials"]} == {"host", "performance", "encrypted"}
    assert len(by_config(run)) == 36 and all(t["status"] == "ok" for t in run["trials"])


def test_raised_rates_are_improvements_on_a_quiet_machine(run: dict[str, Any]) -> None:
    """The question 'did CPU, memory and network get faster?' asked with --metric: Holm over those
    27 rows, and every one is an improvement at the quick study's 3 repetitions."""
    a, b = _quiet(run, seed=1), _raised(_quiet(run, seed=2), "B")
    res = compare_runs(a, b, metric_names=RAISED)
    assert {r["metric"] for r in res["rows"]} == set(RAISED)
    assert len(res["rows"]) == 6 + 12 + 9  # sysbench 2 × 3 systems, stream 4 × 3, iperf3 3 × 3
    bad = [(r["config"], r["metric"], r["verdict"], r["reason"]) for r in res["rows"] if r["verdict"] != "improvement"]
    assert not bad, bad
    for r in res["rows"]:
        assert r["direction"] == "higher" and r["ratio"] == pytest.approx(FACTOR, rel=0.06)
        assert r["a"]["n"] == r["b"]["n"] == 3


def test_every_metric_at_once_claims_only_true_changes(run: dict[str, Any]) -> None:
    """All 201 directional rows at once: Holm over all of them needs more evidence per row, so
    with 3 repetitions some raised rates are not claimed, but nothing false is."""
    res = compare_runs(_quiet(run, seed=1), _raised(_quiet(run, seed=2), "B"))
    assert len(res["rows"]) == 201 and res["warnings"] == []
    raised = [r for r in res["rows"] if r["metric"] in RAISED]
    assert {r["verdict"] for r in raised} <= {"improvement", "no difference", "undecided"}
    assert sum(r["verdict"] == "improvement" for r in raised) >= len(raised) // 3
    others = [r for r in res["rows"] if r["metric"] not in RAISED]
    assert not [r for r in others if r["verdict"] in ("improvement", "regression")]


def test_on_the_measured_spread_compare_claims_nothing_it_cannot_see(run: dict[str, Any]) -> None:
    res = compare_runs(run, _raised(run, "B"), metric_names=RAISED)
    verdicts = {r["verdict"] for r in res["rows"]}
    assert "regression" not in verdicts and verdicts <= {"improvement", "undecided", "no difference"}
    noisy = [r for r in res["rows"] if r["verdict"] == "undecided"]
    assert noisy, "a 30 % change under 20-80 % spread at n = 3 must not be called anything else"
    for r in noisy:
        lo, hi = r["ratio_ci95"]
        assert (hi / lo) ** 0.5 - 1 > 0.10 and r["p_holm"] >= 0.05
    # every directional row, the unchanged ones included: identical values never make a claim
    whole = compare_runs(run, _raised(run, "B"))
    same = [r for r in whole["rows"] if r["metric"] not in RAISED]
    assert same and all(r["verdict"] in ("no difference", "undecided", "invalid") for r in same)
    assert all(r["ratio"] == pytest.approx(1) for r in same if r["ratio"] is not None)
    assert all("<= 0" in r["reason"] for r in same if r["verdict"] == "invalid")  # e.g. 0 TCP retransmits
