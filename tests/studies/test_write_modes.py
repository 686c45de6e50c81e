"""`iolab study write-modes --quick` end to end: real helper, real fio, real loop device, real browser."""

from __future__ import annotations

import subprocess

from tests.report.browser import open_report_in_browser
from tests.studies.conftest import Lab


def test_write_modes_quick(lab: Lab) -> None:
    result, doc = lab.quick_study("write-modes")
    f = doc["findings"]
    thr = f["throughput"]
    assert set(thr) == {"buffered", "o_sync", "o_direct", "mmap"}
    sizes = sorted(int(b) for b in thr["o_sync"])
    assert sizes[0] == 512 and sizes[-1] == 1 << 20
    for mode in thr:
        for est in thr[mode].values():
            assert est["unit"] == "MiB/s" and est["mean"] > 0 and len(est["ci95"]) == 2
    # R2's central result: O_SYNC pays per call, so big blocks are many times faster.
    assert thr["o_sync"][str(sizes[-1])]["mean"] > 5 * thr["o_sync"]["512"]["mean"]
    assert all(f["knee"][m] in sizes for m in thr), f["knee"]
    assert set(f["syscalls_per_s"]) == set(thr)
    # the helper agrees with fio doing the same writes
    assert f["fio_crosscheck"] and all(c["agrees"] for c in f["fio_crosscheck"]), f["fio_crosscheck"]
    # O_DIRECT really bypassed the page cache in every trial (else it would be flagged)
    assert not any(k.startswith("o_direct/") for k in f["mode_flags"]), f["mode_flags"]
    for t in doc["trials"]:
        assert t["manifest"]["job"], "every trial records the exact command it ran"
        assert "host_disk" in t["probes"], "the scratch loop device's counters are probed"

    # the HTML report renders offline in a real browser, with both charts
    seen = open_report_in_browser(lab.report_path(result))
    assert all(u.startswith(("file:", "data:")) for u in seen["requests"]), seen["requests"]
    assert seen["svg_count"] == 2
    # nothing left behind
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in loops
