"""`iolab study vm-profile --quick`: host, `performance` and `encrypted` guests, all four parts, real runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from iolab.studies import vm_profile
from tests.report.browser import open_report_in_browser
from tests.studies.conftest import Lab

SYSTEMS = ["host", "performance", "encrypted"]


def test_vm_profile_quick(lab: Lab) -> None:
    result, doc = lab.quick_study("vm-profile", timeout=2400, complete=False)
    f = doc["findings"]
    assert f["accel"] in ("kvm", "tcg")
    assert set(f["systems"]) == set(SYSTEMS)
    assert not f["missing"], f"every metric for every system: {f['missing']}"
    failed = [(t["params"], t["error"]) for t in doc["trials"] if t["status"] != "ok"]
    assert not failed, failed
    for system in SYSTEMS:
        for m in vm_profile.METRICS:
            est = f["table"][system][m.name]
            assert est["mean"] > 0 and est["n"] >= 3 and est["unit"] == m.unit, (system, m.name, est)
            if system != "host":
                r = f["ratio_vs_host"][system][m.name]
                assert r["mean"] > 0 and len(r["ci95"]) == 2, (system, m.name, r)
    _check_measurements(doc, f)
    _check_encryption(doc)
    _check_report(lab, result, f)
    _check_nothing_left(lab)


def _check_measurements(doc: dict, f: dict) -> None:
    """Relations that hold on any machine, under KVM or TCG."""
    host = f["table"]["host"]
    # prime counting: more numbers take longer (counts themselves are checked by the workload)
    assert host["cpu_primes_1e6_s"]["mean"] < host["cpu_primes_1e7_s"]["mean"] < host["cpu_primes_1e8_s"]["mean"]
    # the STREAM variant moves 24 bytes per element in Add/Triad and 16 in Copy/Scale: all in a sane range
    for k in ("mem_copy_mb_s", "mem_scale_mb_s", "mem_add_mb_s", "mem_triad_mb_s"):
        assert 50 < host[k]["mean"] < 1e6, (k, host[k])
    if f["accel"] == "tcg":
        # under emulation the guest's CPU is far slower than the host's: the ratio must show it
        assert f["ratio_vs_host"]["performance"]["cpu_primes_1e8_s"]["mean"] > 1.5
    # guest-to-guest traffic really went through the peer guest
    g2g = [t for t in doc["trials"] if t["params"]["_workload"].get("direction") == "guest_to_guest"
           and t["params"]["_target"]["kind"] == "qemu"]
    assert g2g and all("-p" in t["manifest"]["job"] for t in g2g)


def _check_encryption(doc: dict) -> None:
    """The encrypted profile's image is LUKS; its key is on no command line."""
    enc = [t for t in doc["trials"] if t["params"].get("target") == "encrypted" and t["status"] == "ok"]
    man = enc[0]["manifest"]["target"]
    assert man["qemu_img_info"]["format"] == "qcow2"
    assert man["qemu_img_info"]["format-specific"]["data"]["encrypt"]["format"] == "luks"
    argv = " ".join(man["qemu_cmdline"])
    assert "key-secret" in argv and "file=/dev/fd/" in argv and "data=" not in argv
    assert man["encryption"]["format"] == "luks"


def _check_report(lab: Lab, result: subprocess.CompletedProcess[str], f: dict) -> None:
    md = lab.run("report", "latest", "--format", "md").stdout
    for part in ("CPU", "Memory", "Disk", "Network"):
        assert f"{part}: relative to the host" in md
    assert "STREAM variant" in md
    if f["accel"] == "tcg":
        assert "TCG" in md and "not representative" in md.lower()
    seen = open_report_in_browser(lab.report_path(result))
    assert seen["ok"]
    assert all(u.startswith("file://") or u.startswith("data:") for u in seen["requests"]), seen["requests"]
    drawn = [s for s in seen["svgs"] if s["width"] > 200 and s["plotted"] > 0]
    assert len(drawn) >= 4, seen["svgs"]  # the four parts
    assert "Guest vs host" in seen["body_text"] and "encrypted" in seen["body_text"]


def _check_nothing_left(lab: Lab) -> None:
    """No QEMU, loop device, image, network namespace or tap device of this run is left."""
    scratch = lab.env["IOLAB_SCRATCH"]
    assert subprocess.run(["pgrep", "-f", "qemu-system.*iolab-"], capture_output=True).returncode == 1
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert scratch not in loops
    assert not [p for p in Path(scratch).rglob("*") if p.suffix in (".qcow2", ".raw", ".img")]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "iolab" not in netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "iolab" not in links and "tap" not in links
