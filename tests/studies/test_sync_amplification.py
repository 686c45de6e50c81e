"""`iolab study sync-amplification --quick` end to end: real guests under TCG/KVM, strace on QEMU, real counters."""

from __future__ import annotations

import subprocess

from tests.studies.conftest import Lab


def _row(f: dict, fmt: str, pattern: str, fs: str) -> dict:
    rows = [r for r in f["amplification"] if (r["format"], r["pattern"], r["guest_fs"]) == (fmt, pattern, fs)]
    assert len(rows) == 1, (fmt, pattern, fs, f["amplification"])
    return rows[0]


def test_sync_amplification_quick(lab: Lab) -> None:
    result, doc = lab.quick_study("sync-amplification", timeout=600)
    f = doc["findings"]
    for r in f["amplification"]:
        # every layer was measured, and the workload made the syncs it promised
        for k in ("guest_fdatasync", "guest_flushes", "qemu_flush_ops", "host_fdatasync", "host_writes",
                  "host_device_flushes", "factor_host_syncs", "factor_device_flushes"):
            assert r[k] is not None, (k, r)
        assert r["guest_fdatasync"] == 64
        assert r["qemu_flush_ops"] >= r["guest_fdatasync"]
        assert not any(fl.startswith("prefill_in_trial") for fl in r["flags"]), r["flags"]
    raw = _row(f, "raw", "append", "none")
    assert 0.9 <= raw["factor_host_syncs"] <= 1.1, raw
    assert 0.9 <= _row(f, "raw", "overwrite", "none")["factor_host_syncs"] <= 1.1
    for fs in ("none", "ext4"):
        app, ovw = _row(f, "qcow2", "append", fs), _row(f, "qcow2", "overwrite", fs)
        assert app["factor_host_syncs"] > _row(f, "raw", "append", fs)["factor_host_syncs"], (app, fs)
        assert ovw["factor_host_syncs"] < app["factor_host_syncs"], (ovw, app)
        assert app["causes"]["cluster_allocations"] > 0 and ovw["causes"]["cluster_allocations"] == 0
    assert {r["tcg"] for r in f["throughput"]} == {f["accel"] == "tcg"}
    assert f["recommendations"]
    # nothing left behind: no QEMU of this lab, no loop device under its scratch
    procs = subprocess.run(["pgrep", "-fa", "iolab-"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in procs, procs
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in loops
