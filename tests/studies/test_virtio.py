"""`iolab study virtio --quick`: host and five guest buses in one run, under TCG on CI machines."""

from __future__ import annotations

import subprocess

from iolab.studies import virtio
from tests.studies.conftest import Lab


def test_virtio_quick(lab: Lab) -> None:
    _, doc = lab.quick_study("virtio", timeout=1800, complete=False)
    f = doc["findings"]
    assert f["accel"] in ("kvm", "tcg")
    systems = ["host"] + virtio.MAIN_BUSES + virtio.EXTRA_BUSES
    assert set(f["kbps"]) == set(systems), "every system's rows"
    for system in systems:
        for test in virtio.QUICK_TESTS:
            for rec in virtio.QUICK_RECORDS:
                est = f["kbps"][system][test][rec]
                assert est["mean"] > 0 and est["n"] >= 3, (system, test, rec)
                if system != "host":
                    r = f["ratio_vs_host"][system][test][rec]
                    assert r["mean"] > 0 and len(r["ci95"]) == 2
    guest_trials = [t for t in doc["trials"] if t["params"]["_target"]["kind"] == "qemu"]
    assert guest_trials and all(t["probes"].get("guest_disk") for t in guest_trials if t["status"] == "ok")
    if f["accel"] == "tcg":
        # labelled as TCG next to the numbers, in the findings' trials and in the report
        assert all(any(fl.startswith("tcg") for fl in t["flags"]) for t in guest_trials if t["status"] == "ok")
        md = lab.run("report", "latest", "--format", "md").stdout
        assert "TCG" in md and "not representative" in md.lower()
    # nothing left behind: no QEMU, no loop device on the lab's scratch images
    assert subprocess.run(["pgrep", "-f", "qemu-system.*iolab-"], capture_output=True).returncode == 1
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in loops
