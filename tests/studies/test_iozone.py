"""`iolab study iozone --quick`: iozone's six tests x three records on the scratch device."""

from __future__ import annotations

import math
import statistics

import pytest

from tests.statcheck import Band, check
from tests.studies.conftest import Lab


@pytest.mark.whole_machine  # small records against large ones, per repetition: a ratio
def test_iozone_quick(lab: Lab) -> None:
    _, doc = lab.quick_study("iozone", complete=False)
    kbps = doc["findings"]["kbps"]["host"]
    assert set(kbps) == {"write", "rewrite", "read", "reread", "randread", "randwrite"}
    for test, per_record in kbps.items():
        assert set(per_record) == {"4k", "4m", "16m"}, test
        for est in per_record.values():
            assert est["mean"] > 0 and est["unit"] == "KB/s" and est["n"] >= 3
    # R1's shape: small records are far slower than large ones in every test. Per repetition
    # (4k and 4m of one round run back to back); over all tests and repetitions as a 95% CI on
    # the log scale (--quick stops at 3 repetitions: one test's three can spread from 10x to
    # 115x under load, too few for a CI of their own), and in every test by the median of its
    # three, so no single sample decides; a flagged confounder excuses the CI.
    by: dict[tuple[str, int, int], float] = {}
    for t in doc["trials"]:
        if t["status"] == "ok":
            w = t["params"]["_workload"]
            by[w["test"], w["record"], t["repetition"]] = t["metrics"]["kbps"]
    flags = [fl for t in doc["trials"] for fl in t["flags"] if fl.startswith(("generator_cpu_bound", "cpu_contended"))]
    pooled = []
    for test in kbps:
        ratios = [by[test, 4 << 20, r] / by[test, 4 << 10, r] for r in range(3)
                  if (test, 4 << 20, r) in by and (test, 4 << 10, r) in by]
        assert len(ratios) >= 3 and statistics.median(ratios) > 2, (test, ratios)
        pooled += ratios
    check("KB/s at 4m / at 4k, all tests", pooled, Band(2.0, math.inf, "4 KiB records pay a syscall and "
                                                       "an I/O per 4 KiB"), flags, log=True)
    # each trial really moved the file's bytes (flush in timing, O_DIRECT)
    for t in doc["trials"]:
        assert t["metrics"]["kbps"] > 0
        if t["params"]["_workload"]["test"] in ("write", "randwrite"):
            assert t["probes"]["host_disk"]["write_bytes"] >= t["params"]["_workload"]["file_size"] * 0.9
    _check_resolution(doc)


def _check_resolution(doc: dict) -> None:
    """fio's rates divide by whole milliseconds: each trial records that error bound, a pass under
    100 ms is flagged short_run, and every kbps interval is widened by the bound (docs/statistics.md,
    'Resolution'), so cells whose repetitions agree to the last digit still get an honest width."""
    ok = [t for t in doc["trials"] if t["status"] == "ok"]
    assert ok
    for t in ok:
        kbps = t["metrics"]["kbps"]
        side = "read" if t["params"]["_workload"]["test"] in ("read", "reread", "randread") else "write"
        ms = round(t["metrics"][f"{side}_bytes"] / 1024 / kbps * 1000)  # fio's runtime, back from its rate
        assert ms >= 1
        assert t["manifest"]["resolution"]["kbps"] == pytest.approx(kbps / ms, rel=1e-6), t["id"]
        short = [f for f in t["flags"] if f.startswith("short_run")]
        assert bool(short) == (ms < 100), (t["id"], ms, t["flags"])
        if short:
            assert f"took {ms} ms" in short[0]
    for test, per_record in doc["findings"]["kbps"]["host"].items():
        for rec, est in per_record.items():
            assert est["method"].endswith("±resolution"), (test, rec, est)
            lo, hi = est["ci95"]  # hi is None (unbounded) when the harmonic interval's 1/x reaches 0
            assert lo < est["mean"] and (hi is None or est["mean"] < hi), (test, rec, est)
