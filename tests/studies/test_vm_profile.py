"""`iolab study vm-profile --quick`: host, `performance` and `encrypted` guests, all four parts, real runs."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from iolab.core import sizing
from iolab.studies import vm_profile
from iolab.studies.vm_profile.spec import QUICK_ARRAY_MIB
from iolab.targets.base import TCG_TIME_FACTOR
from tests.report.browser import open_report_in_browser
from tests.statcheck import Band, check_estimate, from_json
from tests.studies.conftest import Lab, Reproduced, assert_median, assert_median_ratio

SYSTEMS = ["host", "performance", "encrypted"]


def test_vm_profile_quick(reproduced: Reproduced) -> None:
    lab = reproduced.lab
    report, doc = reproduced.study("vm-profile", complete=False)
    f = doc["findings"]
    failed = [(t["params"].get("_target", {}).get("name"), t["error"]) for t in doc["trials"] if t["status"] != "ok"]
    assert not failed, failed  # first: a system missing below has its reason here
    assert f["accel"] in ("kvm", "tcg")
    assert set(f["systems"]) == set(SYSTEMS)
    assert not f["missing"], f"every metric for every system: {f['missing']}"
    values = vm_profile.analysis.collect(doc)
    for system in SYSTEMS:
        for m in vm_profile.analysis.METRICS:
            est = f["table"][system][m.name]
            vals = _values(doc, system, m.name)
            assert sorted(vals) == sorted(values[system][m.name]), (system, m.name)
            assert est["n"] == len(vals) >= 3 and est["unit"] == m.unit, (system, m.name, est)
            assert_median(est["mean"], vals, (system, m.name))  # the estimand of a measured quantity
            if system != "host":
                _check_ratio(f["ratio_vs_host"][system][m.name], vals, _values(doc, "host", m.name),
                             (system, m.name))
    _check_sizing(f)
    _check_timeouts(doc, f)
    _check_measurements(doc, f)
    _check_encryption(doc)
    _check_report(lab, report, doc["run_id"], f)
    _check_nothing_left(lab)


# Every study metric as (workload kind, a test on the workload's params, the trial metric it is).
SOURCES = {
    **{f"cpu_primes_{k}_s": ("primes", lambda w: True, f"primes_{k}_s") for k in ("1e6", "1e7", "1e8")},
    "cpu_events_per_s_1t": ("sysbench-cpu", lambda w: w["threads"] == 1, "events_per_s"),
    "cpu_events_per_s_nt": ("sysbench-cpu", lambda w: w["threads"] == 0, "events_per_s"),
    **{f"mem_{k}_mb_s": ("stream", lambda w: True, f"{k}_mb_s") for k in ("copy", "scale", "add", "triad")},
    **{f"disk_{rw}_iops": ("fio", lambda w, rw=rw: w["rw"] == rw, f"{side}_iops")
       for rw, side in (("randread", "read"), ("randwrite", "write"), ("read", "read"), ("write", "write"))},
    **{f"disk_randrw_{side}_iops": ("fio", lambda w: w["rw"] == "randrw", f"{side}_iops")
       for side in ("read", "write")},
    **{f"net_{d}_mbit_s": ("iperf3", lambda w, d=d: w["direction"] == d, "mbit_s")
       for d in ("guest_to_host", "host_to_guest", "guest_to_guest")},
}


def _values(doc: dict, system: str, metric: str) -> list[float]:
    """One study metric's values straight from the trials, independent of the study's analysis."""
    kind, wanted, name = SOURCES[metric]
    return [t["metrics"][name] for t in doc["trials"] if t["status"] == "ok"
            and (t["params"].get("target") or "host") == system
            and t["params"]["_workload"]["kind"] == kind and wanted(t["params"]["_workload"])]


def _check_ratio(r: dict, guest: list[float], host: list[float], cell: tuple) -> None:
    """The study's guest/host ratio is the ratio of the two medians, with a finite CI around it."""
    assert_median_ratio(r["mean"], guest, host, cell)
    assert r["n"] == min(len(guest), len(host)), cell
    lo, hi = r["ci95"]
    assert lo is not None and hi is not None and lo < r["mean"] < hi, (cell, r)


def _check_sizing(f: dict) -> None:
    """Host and guests ran STREAM over the same arrays, 4x this host's LLC capped at --quick's
    QUICK_ARRAY_MIB (the guests were sized to hold them), and the report says so."""
    sizing_ = f["memory_sizing"]
    assert set(sizing_) == set(SYSTEMS)
    wanted = min(QUICK_ARRAY_MIB, -(-4 * sizing.read_llc().bytes // (1 << 20)))
    for system, s in sizing_.items():
        assert s["array_mib"] == [wanted] and not s["reduced"], (system, s)
        assert s["reason"].startswith(f"arrays 3 x {wanted} MiB: {wanted} MiB as the spec asks"), (system, s)


def _check_timeouts(doc: dict, f: dict) -> None:
    """A trial in a TCG guest gets its timeout stretched by TCG_TIME_FACTOR (the same workload's
    host trial does not): emulation alone must never time a trial out."""
    timeouts: dict[tuple[str, str], set[float]] = {}
    for t in (t for t in doc["trials"] if t["status"] == "ok"):
        kind = t["params"]["_target"]["kind"]
        timeouts.setdefault((t["params"]["_workload"]["kind"], kind), set()).add(t["manifest"]["timeout_s"])
    host, guest = max(timeouts[("stream", "loop")]), min(timeouts[("stream", "qemu")])
    if f["accel"] == "tcg":
        assert guest - 60 == pytest.approx((host - 60) * TCG_TIME_FACTOR), (host, guest)
    else:
        assert guest == host, (host, guest)


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
        # and so is its memory: every load and store goes through the emulated MMU
        contended = [fl for t in doc["trials"] if t["status"] == "ok" for fl in t["flags"]
                     if fl.startswith("cpu_contended")]
        for system in ("performance", "encrypted"):
            check_estimate(f"{system}/host Triad under TCG", from_json(f["ratio_vs_host"][system]["mem_triad_mb_s"]),
                           Band(-math.inf, 1.0, "emulated loads and stores"), contended)
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
    assert "data=" not in argv
    if man["boot"]["mode"] == "restored":  # the key went over QMP; the manifest keeps only its place
        attached = json.dumps(man["boot"]["disk_attached"])
        assert "key-secret" in attached and "(the key, not recorded)" in attached
    else:
        assert "key-secret" in argv and "file=/dev/fd/" in argv
    assert man["encryption"]["format"] == "luks"


def _check_report(lab: Lab, report: Path, run_id: str, f: dict) -> None:
    md = lab.run("report", run_id, "--format", "md").stdout
    for part in ("CPU", "Memory", "Disk", "Network"):
        assert f"{part}: relative to the host" in md
    assert "STREAM variant" in md
    if f["accel"] == "tcg":
        assert "TCG" in md and "not representative" in md.lower()
    seen = open_report_in_browser(report)
    assert seen["ok"]
    assert all(u.startswith("file://") or u.startswith("data:") for u in seen["requests"]), seen["requests"]
    drawn = [s for s in seen["svgs"] if s["width"] > 200 and s["plotted"] > 0]
    assert len(drawn) >= 4, seen["svgs"]  # the four parts
    assert "Guest vs host" in seen["body_text"] and "encrypted" in seen["body_text"]


def _check_nothing_left(lab: Lab) -> None:
    """No QEMU, loop device, image, network namespace or tap device of this run is left."""
    scratch = lab.env["IOLAB_SCRATCH"]
    assert lab.own_processes() == []
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert scratch not in loops
    assert not [p for p in Path(scratch).rglob("*") if p.suffix in (".qcow2", ".raw", ".img")]
    tags = [f"iolab-o{pid}." for pid in lab.pids]  # this lab's runs' names; other runs' are not ours
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [t for t in tags if t in netns], netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not [t for t in tags if t in links], links


def _stream_trial(system: str, mib: int, reduced: bool, reason: str, rep: int) -> dict:
    return {"status": "ok", "error": None, "repetition": rep, "flags": [], "metrics": {"triad_mb_s": 1.0},
            "params": {"target": system, "_target": {"kind": "qemu"}, "_workload": {"kind": "stream"}},
            "manifest": {"workload_facts": {"sizing": {"array_mib": mib, "reduced": reduced, "reason": reason}}}}


def test_memory_sizing_is_reported_per_system() -> None:
    doc = {"trials": [_stream_trial("host", 128, False, "arrays 3 x 128 MiB: 4 x LLC fits", 0),
                      _stream_trial("small", 72, True, "arrays 3 x 72 MiB: would not fit", 0),
                      _stream_trial("small", 80, True, "arrays 3 x 80 MiB: would not fit", 1)]}
    ms = vm_profile.analysis.memory_sizing(doc)
    assert ms["host"].to_json() == {"array_mib": [128], "reduced": False,
                                    "reason": "arrays 3 x 128 MiB: 4 x LLC fits"}
    assert ms["small"].array_mib == [72, 80] and ms["small"].reduced
    # only what the method notes read (model_construct: no other field is needed or validated)
    findings = vm_profile.analysis.VmProfileFindings.model_construct(  # type: ignore[call-arg]
        memory_sizing=ms, profiles={})
    notes = {n.text: n.level for n in vm_profile.presentation._method_notes(findings)}
    assert notes["Memory sizing, host: arrays 3 x 128 MiB: 4 x LLC fits"] == "info"
    assert notes["Memory sizing, small: arrays 72 MiB / 80 MiB (the size differed between repetitions); "
                 "arrays 3 x 80 MiB: would not fit"] == "warn"
