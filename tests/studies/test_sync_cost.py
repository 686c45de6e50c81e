"""sync-amplification's cost section (studies/sync_amplification/cost.py), on constructed results
documents: the ratios, R3's claim classes, the TCG label, and the family's coverage."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from iolab.analysis.stats import harmonic_mean_ci
from iolab.studies.sync_amplification import cost, spec
from iolab.studies.sync_amplification.analysis import analyze


def _trial(app: str, variant: str, metrics: dict[str, float], i: int) -> dict[str, Any]:
    kind = spec.APPS[app]["workload"]["kind"]
    return {"id": f"{app}-{variant}-{i}", "status": "ok", "flags": [], "probes": {}, "manifest": {},
            "params": {"workload": app, "target": f"{variant}/ext4", "_workload": {"kind": kind, "probes": []},
                       "_target": {"kind": "qemu", "format": variant.split("-")[0]}},
            "metrics": metrics}


def _doc(values: dict[tuple[str, str], list[float]], reps: int = 3, max_reps: int = 3) -> dict[str, Any]:
    """values: (app, variant) -> throughput per trial (latency = 1e6 / throughput)."""
    trials = []
    for (app, variant), vs in values.items():
        for i, v in enumerate(vs):
            if spec.APPS[app]["workload"]["kind"] == "sync-writes":
                m = {"write_iops": v, "write_lat_mean_us": 0.4e6 / v, "sync_lat_mean_us": 0.6e6 / v}
            else:
                m = {"ops_per_s": v, "lat_mean_us": 1e6 / v}
            trials.append(_trial(app, variant, m, i))
    return {"trials": trials, "spec": {"study": {"name": "x", "repetitions": reps, "max_repetitions": max_reps}}}


def test_dd_append_twice_as_fast_without_ordering_syncs_holds_r3s_large_gain() -> None:
    doc = _doc({("dd-append", "qcow2"): [100, 102, 98], ("dd-append", "raw"): [200, 205, 198],
                ("varmail", "qcow2"): [500, 505, 495], ("varmail", "raw"): [520, 515, 525]})
    c = cost.analyze_cost(doc, tcg=False)
    assert c is not None
    rows = {(r["app"], r["configuration"]): r for r in c["rows"]}
    dd = rows[("dd-append", "raw")]
    # fixed work: the ratio of harmonic means (mean time per write), exactly
    want = harmonic_mean_ci([200, 205, 198]).mean / harmonic_mean_ci([100, 102, 98]).mean
    assert dd["throughput_vs_baseline"]["mean"] == pytest.approx(want)
    assert dd["latency_vs_baseline"]["mean"] == pytest.approx(0.5, rel=0.03)  # latency halves
    assert rows[("dd-append", "qcow2")].get("throughput_vs_baseline") is None  # the baseline itself
    against = {a["app"]: a for a in c["against_r3"]}
    assert against["dd-append"]["claim"] == "large" and against["dd-append"]["verdict"] == "holds"
    assert against["varmail"]["claim"] == "small" and against["varmail"]["verdict"] == "holds"
    assert against["dd-append"]["measured_gain_pct"] == pytest.approx((want - 1) * 100, abs=0.1)
    assert {n["r3_name"] for n in c["not_measured"]} == {"YCSB insert", "YCSB update"}


def test_a_gain_outside_r3s_class_differs_and_a_wide_interval_is_undecided() -> None:
    doc = _doc({("dd-append", "qcow2"): [100, 101, 99], ("dd-append", "raw"): [103, 102, 104],  # tiny gain
                ("dd-overwrite", "qcow2"): [100, 101, 99], ("dd-overwrite", "raw"): [300, 310, 290],  # big gain
                ("varmail", "qcow2"): [100, 300, 50], ("varmail", "raw"): [110, 90, 400]})  # noise
    against = {a["app"]: a for a in cost.analyze_cost(doc, tcg=False)["against_r3"]}
    assert against["dd-append"]["verdict"] == "differs"       # R3: large; here below +20 %
    assert against["dd-overwrite"]["verdict"] == "differs"    # R3: small; here x3
    assert against["varmail"]["verdict"] == "undecided"
    assert "straddles" not in against["varmail"]["reason"] and "[" in against["varmail"]["reason"]


def test_under_tcg_every_verdict_is_not_testable_with_the_reason() -> None:
    doc = _doc({("dd-append", "qcow2"): [100, 102, 98], ("dd-append", "raw"): [200, 205, 198]})
    (a,) = cost.analyze_cost(doc, tcg=True)["against_r3"]
    assert a["verdict"] == "not testable here" and "TCG" in a["reason"]
    assert a["measured"]["mean"] > 1.9  # the number is still reported


def test_the_verdict_interval_is_wider_than_the_row_interval_by_the_family() -> None:
    values = {("dd-append", "qcow2"): [100, 104, 97], ("dd-append", "raw"): [190, 210, 199],
              ("dd-overwrite", "qcow2"): [100, 104, 97], ("dd-overwrite", "raw"): [101, 99, 103],
              ("varmail", "qcow2"): [100, 104, 97], ("varmail", "raw"): [98, 102, 100]}
    c = cost.analyze_cost(_doc(values, reps=3, max_reps=5), tcg=False)
    assert c["family"]["verdicts"] == 3 and c["family"]["looks"] == 3
    assert c["family"]["tail"] == pytest.approx(0.05 / 9)
    for a in c["against_r3"]:
        row = next(r for r in c["rows"] if (r["app"], r["configuration"]) == (a["app"], "raw"))
        lo, hi = row["throughput_vs_baseline"]["ci95"]
        assert a["measured"]["ci95"][0] < lo and a["measured"]["ci95"][1] > hi, (a, row)


def test_no_application_trials_no_cost_section() -> None:
    doc = _doc({})
    assert cost.analyze_cost(doc, tcg=False) is None
    assert analyze(doc)["cost"] is None  # an older run of the study: its findings simply lack the section


def test_the_family_of_verdicts_keeps_its_95_percent_when_nothing_changes() -> None:
    """A/A: every configuration has the same speed (lognormal noise, 3 repetitions a side, as the
    quick study). How often does any of the family's intervals miss the true ratio 1? At most 5 %,
    while the rows' own 95 % intervals, read together, miss far more often."""
    rng = random.Random(20261123)
    apps = ("dd-append", "dd-overwrite", "varmail")
    variants = ("raw", "qcow2-lazy")
    misses, row_misses, sims = 0, 0, 1500
    for _ in range(sims):
        values = {(app, v): [100 * math.exp(rng.gauss(0, 0.1)) for _ in range(3)]
                  for app in apps for v in ("qcow2", *variants)}
        c = cost.analyze_cost(_doc(values), tcg=False)
        assert c["family"]["verdicts"] == len(apps) * len(variants)
        misses += any(not (a["measured"]["ci95"][0] <= 1 <= a["measured"]["ci95"][1]) for a in c["against_r3"])
        rows = [r["throughput_vs_baseline"]["ci95"] for r in c["rows"] if r.get("throughput_vs_baseline")]
        row_misses += any(not (lo <= 1 <= hi) for lo, hi in rows)
    rate, row_rate = misses / sims, row_misses / sims
    print(f"family of {len(apps) * len(variants)}: any miss {rate:.3f}; the rows' own intervals: {row_rate:.3f}")
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / sims), rate
    assert row_rate > 2 * 0.05, row_rate  # without the family's correction the verdicts would not hold
