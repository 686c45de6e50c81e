"""`iolab study iozone --quick`: iozone's six tests x three records on the scratch device."""

from __future__ import annotations

from tests.studies.conftest import Lab


def test_iozone_quick(lab: Lab) -> None:
    _, doc = lab.quick_study("iozone", complete=False)
    kbps = doc["findings"]["kbps"]["host"]
    assert set(kbps) == {"write", "rewrite", "read", "reread", "randread", "randwrite"}
    for test, per_record in kbps.items():
        assert set(per_record) == {"4k", "4m", "16m"}, test
        for est in per_record.values():
            assert est["mean"] > 0 and est["unit"] == "KB/s" and est["n"] >= 3
    # R1's shape: small records are far slower than large ones in every test
    for test in kbps:
        assert kbps[test]["4m"]["mean"] > 2 * kbps[test]["4k"]["mean"], test
    # each trial really moved the file's bytes (flush in timing, O_DIRECT)
    for t in doc["trials"]:
        assert t["metrics"]["kbps"] > 0
        if t["params"]["_workload"]["test"] in ("write", "randwrite"):
            assert t["probes"]["host_disk"]["write_bytes"] >= t["params"]["_workload"]["file_size"] * 0.9
