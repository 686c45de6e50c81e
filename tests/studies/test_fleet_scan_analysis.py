"""fleet-scan's analysis on stored-shape documents: which hosts are named, and that naming keeps
its promise (at most 5 % of scans of a fleet with no outlier name anybody, however many hosts).
Pure: no machine. The scan against real fio servers is tests/fleet/test_fleet_scan.py."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from iolab.report.markdown import render_markdown
from iolab.studies.fleet_scan import analyze, present
from iolab.studies.fleet_scan.spec import TOLERANCE

PATTERNS = [("randread", 4096, 1), ("randread", 4096, 32), ("read", 1 << 20, 8), ("write", 1 << 20, 8)]


def scan_doc(hosts: list[str], factors: dict[tuple[str, int], float], rng: np.random.Generator,
             reps: int = 3, noise: float = 0.02, shared: float = 0.10,
             failed: dict[tuple[int, str], str] | None = None) -> dict[str, Any]:
    """A results document of fleet-scan: every host's rate per trial is base × its factor for the
    pattern (index) × a factor every host shares in that trial × its own noise."""
    trials = []
    for i, (rw, bs, qd) in enumerate(PATTERNS):
        base = 20000.0 if rw.startswith("rand") else 800.0
        metric = "iops" if rw.startswith("rand") else "bw_mib_s"
        for r in range(reps):
            common = math.exp(rng.normal(0, shared))
            m: dict[str, float] = {}
            gone = {h: why for (rr, h), why in (failed or {}).items() if rr == r and i == 0}
            for h in hosts:
                if h in gone:
                    continue
                m[f"host:{h}:{metric}"] = base * factors.get((h, i), 1.0) * common * math.exp(rng.normal(0, noise))
            m[metric] = sum(v for k, v in m.items() if k.startswith("host:"))
            m.update(fleet_hosts=len(hosts), fleet_hosts_ok=len(hosts) - len(gone), fleet_start_spread_ms=12.0,
                     fleet_window_s=1.9)
            trials.append({
                "id": f"c{i}-r{r}", "status": "ok", "error": None, "flags": [], "repetition": r,
                "params": {"_workload": {"kind": "fio", "rw": rw, "bs": bs, "iodepth": qd},
                           "_target": {"kind": "fleet"}},
                "metrics": m,
                "manifest": {"target": {"hosts": {h: {"clock_skew_ms": -3.0} for h in hosts},
                                        "clock_skew_spread_ms": 1.5},
                             "workload_facts": {"fleet_failed_hosts": gone}},
            })
    return {"study": "fleet-scan", "run_id": "x", "status": "complete", "trials": trials,
            "spec": {"study": {"name": "fleet-scan", "repetitions": reps, "max_repetitions": reps}}}


def test_a_slow_host_is_named_for_its_pattern_only_with_the_size_of_its_difference() -> None:
    hosts = [f"h{i}" for i in range(5)]
    doc = scan_doc(hosts, {("h3", 1): 0.5}, np.random.default_rng(1))
    f = analyze(doc)
    assert [(o["host"], o["pattern"]) for o in f["outliers"]] == [("h3", "4k randread QD32")]
    o = f["outliers"][0]
    assert o["ci95"][0] < 0.5 < o["ci95"][1] and 0.45 < o["ratio"] < 0.55
    assert f["patterns"] == ["4k randread QD1", "4k randread QD32", "1M read QD8", "1M write QD8"]
    assert f["metric_of"]["1M read QD8"] == "bw_mib_s" and f["metric_of"]["4k randread QD1"] == "iops"
    assert f["tests"] == len(hosts) * len(PATTERNS)
    summary, sections = present(doc, f)
    assert any(re.match(r"outlier h3: 4k randread QD32 -(4[5-9]|5[0-5]) % \(0\.\d\d× \[", line)
               for line in summary), summary
    md = render_markdown(doc, sections, summary)
    assert "outlier" in md and "fleet median" in md and "start spread" in md


def test_the_shared_load_of_a_trial_cancels_a_host_within_tolerance_is_never_named() -> None:
    """Paired per trial: 30 % swings every host shares do not hide a real outlier; a host 3 % off
    with a tight interval is a real difference but inside the tolerance: not named."""
    hosts = [f"h{i}" for i in range(4)]
    doc = scan_doc(hosts, {("h0", 2): 0.7, ("h1", 0): 1.03}, np.random.default_rng(2), shared=0.3, noise=0.005)
    f = analyze(doc)
    named = {(o["host"], o["pattern"]) for o in f["outliers"]}
    assert named == {("h0", "1M read QD8")}
    assert TOLERANCE > 0.03
    assert f["per_host"]["4k randread QD1"]["h1"]["vs_median"]["ci95"][0] > 1.0  # real, but small


def test_no_outlier_in_a_fleet_of_equals_keeps_its_family_wise_promise() -> None:
    """200 scans of 40 equal hosts (160 tests each, heavy-tailed noise): a scan names anybody in at
    most 5 % of them (Holm over hosts × patterns; without it almost every scan would)."""
    rng = np.random.default_rng(3)
    hosts = [f"h{i}" for i in range(40)]
    named = 0
    for _ in range(200):
        f = analyze(scan_doc(hosts, {}, rng, noise=0.04))
        named += bool(f["outliers"])
    assert named <= 10, f"{named} of 200 scans of equal hosts named an outlier"


def test_two_hosts_name_nobody_and_a_failed_host_keeps_its_other_results() -> None:
    f = analyze(scan_doc(["a", "b"], {("b", 0): 0.3}, np.random.default_rng(4)))
    assert not f["enough_hosts"] and f["outliers"] == []
    summary, _ = present({}, f)
    assert any("cannot say which one differs" in s for s in summary)
    hosts = ["a", "b", "c"]
    doc = scan_doc(hosts, {}, np.random.default_rng(5), failed={(0, "c"): "no result from c: its server stopped"})
    f = analyze(doc)
    assert f["failed_hosts"] == {"c": ["c0-r0: no result from c: its server stopped"]}
    assert f["per_host"]["4k randread QD1"]["c"]["n"] == 2 and f["per_host"]["4k randread QD32"]["c"]["n"] == 3
    assert f["aggregate"]["4k randread QD1"]["hosts_ok_min"] == 2
    summary, sections = present(doc, f)
    assert any("c (1×)" in s for s in summary)
