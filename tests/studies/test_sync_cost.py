"""sync-amplification's cost section (studies/sync_amplification/cost.py), on constructed results
documents: the ratios, R3's claim classes, the TCG label, and the family's coverage."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from iolab.analysis.sequential import LookDesign
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
            kind = spec.APPS[app]["workload"]["kind"]
            if kind == "sync-writes":
                m = {"write_iops": v, "write_lat_mean_us": 0.4e6 / v, "sync_lat_mean_us": 0.6e6 / v}
            elif kind == "ycsb":
                op = "insert" if app == "ycsb-insert" else "update"
                m = {"run_ops_s": v, f"run_{op}_mean_us": 1e6 / v, "load_ops_s": 10 * v}
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
    # the ratio of the medians (the median rate is the rate of the median time: fixed work or not)
    want = statistics.median([200, 205, 198]) / statistics.median([100, 102, 98])
    assert dd["throughput_vs_baseline"]["mean"] == pytest.approx(want)
    assert dd["latency_vs_baseline"]["mean"] == pytest.approx(0.5, rel=0.03)  # latency halves
    assert rows[("dd-append", "qcow2")].get("throughput_vs_baseline") is None  # the baseline itself
    against = {a["app"]: a for a in c["against_r3"]}
    assert against["dd-append"]["claim"] == "large" and against["dd-append"]["verdict"] == "holds"
    assert against["varmail"]["claim"] == "small" and against["varmail"]["verdict"] == "holds"
    assert against["dd-append"]["measured_gain_pct"] == pytest.approx((want - 1) * 100, abs=0.1)
    # what this run has no trial of is listed with the reason: the full study's applications say so
    not_run = {n["r3_name"]: n["reason"] for n in c["not_measured"]}
    assert set(not_run) == {"dd overwrite", "Mobibench append", "Mobibench overwrite", "YCSB insert", "YCSB update"}
    assert "full study only" in not_run["YCSB insert"] and "TCG" in not_run["YCSB insert"]
    assert not_run["dd overwrite"] == "not part of this run"


def test_ycsb_insert_and_update_read_their_own_operation_and_failed_ones_are_named() -> None:
    doc = _doc({("ycsb-insert", "qcow2"): [100, 101, 99], ("ycsb-insert", "raw"): [104, 103, 105],
                ("ycsb-update", "qcow2"): [200, 202, 198]})
    for i in range(2):  # the update's raw trials all failed
        doc["trials"].append({**_trial("ycsb-update", "raw", {}, 10 + i), "status": "failed"})
    c = cost.analyze_cost(doc, tcg=False)
    rows = {(r["app"], r["configuration"]): r for r in c["rows"]}
    ins = rows[("ycsb-insert", "raw")]
    want = statistics.median([104, 103, 105]) / statistics.median([100, 101, 99])
    assert ins["throughput_vs_baseline"]["mean"] == pytest.approx(want)
    assert ins["latency_us"]["mean"] == pytest.approx(statistics.median(1e6 / v for v in [104, 103, 105]))
    assert rows[("ycsb-update", "qcow2")]["latency_us"]["mean"] == pytest.approx(
        statistics.median(1e6 / v for v in [200, 202, 198]))
    against = {a["app"]: a for a in c["against_r3"]}
    assert against["ycsb-insert"]["claim"] == "small" and against["ycsb-insert"]["r3_gain_pct"] == 3.3
    assert "ycsb-update" not in against  # no raw trial succeeded: no verdict, and it says why
    not_run = {n["r3_name"]: n["reason"] for n in c["not_measured"]}
    assert "YCSB update" not in not_run  # it has a row (the baseline), just no comparison


def test_a_gain_outside_r3s_class_differs_and_a_wide_interval_is_undecided() -> None:
    doc = _doc({("dd-append", "qcow2"): [100, 101, 99], ("dd-append", "raw"): [103, 102, 104],  # tiny gain
                ("dd-overwrite", "qcow2"): [100, 101, 99], ("dd-overwrite", "raw"): [300, 310, 290],  # big gain
                ("varmail", "qcow2"): [100, 300, 50], ("varmail", "raw"): [110, 90, 400]})  # noise
    against = {a["app"]: a for a in cost.analyze_cost(doc, tcg=False)["against_r3"]}
    assert against["dd-append"]["verdict"] == "differs"       # R3: large; here below +20 %
    assert against["dd-overwrite"]["verdict"] == "differs"    # R3: small; here x3
    assert against["varmail"]["verdict"] == "undecided"
    assert "reaches beyond the band" in against["varmail"]["reason"] and "[" in against["varmail"]["reason"]
    assert "more repetition" in against["varmail"]["reason"] and against["varmail"]["decide"]["configurations"]


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
    assert c["family"]["verdicts"] == 3
    assert c["family"]["tail"] == pytest.approx(LookDesign(3, 5).alpha / 3)
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
    and less often than the rows' own intervals read together."""
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
    assert row_rate > rate, (row_rate, rate)  # the family's intervals are the wider ones


def test_the_full_study_runs_ycsb_insert_and_update_in_guests_that_carry_it() -> None:
    """R3's YCSB rows (point 3): in the full study, on the guest ext4 of every cost configuration,
    64 KiB records, in guests with YCSB's bundle and memory for its heap; the quick study leaves
    them out (and so its guests stay small). Both specs pass iolab's own validation."""
    from iolab.spec.study import from_dict

    full, quick = spec.build(False), spec.build(True)
    ycsb = {w["name"]: w for w in full["workloads"] if w["kind"] == "ycsb"}
    assert set(ycsb) == {"ycsb-insert", "ycsb-update"}
    assert ycsb["ycsb-insert"]["insertproportion"] == 1 and ycsb["ycsb-update"]["updateproportion"] == 1
    for w in ycsb.values():
        assert w["fieldcount"] == 1 and w["fieldlength"] == "64k" and w["probes"] == []
        assert sorted(w["targets"]) == sorted(f"{v}/ext4" for v in spec.COST_VARIANTS)
    carriers = {t["name"] for t in full["targets"] if "ycsb" in t.get("guest_apps", [])}
    assert carriers == {f"{v}/ext4" for v in spec.COST_VARIANTS}
    assert all(t["memory"] == spec.YCSB_MEMORY for t in full["targets"] if t["name"] in carriers)
    assert not [w for w in quick["workloads"] if w["kind"] == "ycsb"]
    assert not [t for t in quick["targets"] if t.get("guest_apps")]
    configs = from_dict(full, "builtin:sync-amplification").configs
    assert len([c for c in configs if c.workload["kind"] == "ycsb"]) == 2 * len(spec.COST_VARIANTS)
    from_dict(quick, "builtin:sync-amplification --quick")
