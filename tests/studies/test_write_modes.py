"""`iolab study write-modes --quick` end to end (the run `iolab reproduce --quick` makes): real helper, real fio,
real loop device, real browser."""

from __future__ import annotations

import subprocess

from tests.report.browser import open_report_in_browser
from tests.studies.conftest import Reproduced


def test_write_modes_quick(reproduced: Reproduced) -> None:
    lab = reproduced.lab
    report, doc = reproduced.study("write-modes")
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
    # the cross-check is like for like, by measurement: both sides appended to a new file and the
    # journal committed as often per write on each side (counts, not timings: they hold on a busy
    # machine); the throughput verdict then agrees within 25 % or says why not
    cc = f["fio_crosscheck"]
    assert {(c["mode"], c["bs"]) for c in cc} == {("o_sync", 4096), ("o_direct", 4096)}, cc
    for c in cc:
        h, fio = c["evidence"]["helper"], c["evidence"]["fio"]
        assert h["layout"] == fio["layout"] == "append", c
        assert h["commits_per_write"] is not None and fio["commits_per_write"] is not None, c
        if c["mode"] == "o_sync":  # every O_SYNC append commits the inode's new size: one commit per write
            assert 0.9 <= h["commits_per_write"] <= 1.1 and 0.9 <= fio["commits_per_write"] <= 1.1, c
        assert abs(h["commits_per_write"] - fio["commits_per_write"]) <= 0.1, c
        assert c["verdict"] in ("holds", "differs", "undecided") and c["reason"], c
        assert c["agrees"] == (c["verdict"] == "holds")
        if c["verdict"] != "holds":
            assert "helper/fio" in c["reason"], c  # the interval it decided on is named
    # O_DIRECT really bypassed the page cache in every trial (else it would be flagged); other flags
    # say what else was seen (disk_shared: the suite's other tests on the disk under the loop)
    assert not [fl for k, v in f["mode_flags"].items() if k.startswith("o_direct/") for fl in v
                if fl.startswith(("mode_not_effective", "helper_warning"))], f["mode_flags"]
    for t in doc["trials"]:
        assert t["manifest"]["job"], "every trial records the exact command it ran"
        assert "host_disk" in t["probes"], "the scratch loop device's counters are probed"

    # the HTML report renders offline in a real browser, with both charts
    seen = open_report_in_browser(report)
    assert all(u.startswith(("file:", "data:")) for u in seen["requests"]), seen["requests"]
    assert seen["svg_count"] == 2
    # nothing left behind
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in loops
