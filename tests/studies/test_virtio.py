"""`iolab study virtio --quick`: host and R1's guest buses (virtio-blk, IDE) in one run, under TCG on CI machines, and
below the guests the host-side layers (device, QEMU raw on it, raw and qcow2 image files) natively."""

from __future__ import annotations

import math
import statistics
import subprocess
from collections import defaultdict

import pytest

from iolab.core.units import parse_size
from iolab.studies import virtio
from iolab.studies.common import size_label
from tests.statcheck import Band, check
from tests.studies.conftest import Reproduced, assert_median_ratio


def test_virtio_quick(reproduced: Reproduced) -> None:
    lab = reproduced.lab
    _, doc = reproduced.study("virtio", complete=False)
    f = doc["findings"]
    assert f["accel"] in ("kvm", "tcg")
    systems = ["host"] + virtio.spec.buses_of(quick=True)
    assert set(f["kbps"]) == set(systems), "every system's rows"
    # --quick measures R1's own rows, the systems the claims read (the extra buses are the full study's)
    assert set(virtio.spec.MAIN_BUSES) <= set(systems)
    kbps = _kbps_by_cell(doc)
    iozone_tables = [w for w in virtio.build(True)["workloads"] if w["kind"] == "iozone"]
    assert len(iozone_tables) == 1
    file_size = parse_size(iozone_tables[0]["file_size"])
    for system in systems:
        big_over_small = []
        for test in virtio.spec.QUICK_TESTS:
            for rec in virtio.spec.QUICK_RECORDS:
                est = f["kbps"][system][test][rec]
                assert est["n"] == len(kbps[system, test, rec]) >= 3, (system, test, rec)
                if system != "host":
                    _check_ratio(f["ratio_vs_host"][system][test][rec], kbps[system, test, rec],
                                 kbps["host", test, rec], (system, test, rec))
            ratios = [b / s for b, s in zip(kbps[system, test, "4m"], kbps[system, test, "4k"], strict=False)]
            assert statistics.median(ratios) > 1, (system, test, ratios)  # two of three agree
            big_over_small += ratios
        # 4 MiB records amortise the per-I/O cost that 4 KiB records pay: more KB/s on every system.
        # As a CI over all its tests and repetitions (3 x 3): --quick stops at 3 repetitions, and under
        # TCG one cell's three can spread from 2x to 90x, too few and too wide for a CI of their own;
        # per test, by the median of three (above), so no single sample decides.
        check(f"{system}: KB/s at 4m / at 4k, all tests", big_over_small,
              Band(1.0, math.inf, "fewer, larger I/Os for the same bytes"), _confounders(doc, system), log=True)
    guest_trials = [t for t in doc["trials"] if t["params"]["_target"]["kind"] == "qemu"]
    assert guest_trials and all(t["probes"].get("guest_disk") for t in guest_trials if t["status"] == "ok")
    for t in guest_trials:  # O_DIRECT: every written byte reached the virtual disk, not the guest's cache
        if t["status"] == "ok" and t["params"]["_workload"]["test"] == "write":
            assert t["probes"]["guest_disk"]["write_bytes"] >= file_size, (t["id"], t["probes"]["guest_disk"])
    if f["accel"] == "tcg":
        # labelled as TCG next to the numbers, in the findings' trials and in the report
        assert all(any(fl.startswith("tcg") for fl in t["flags"]) for t in guest_trials if t["status"] == "ok")
        md = lab.run("report", doc["run_id"], "--format", "md").stdout
        assert "TCG" in md and "not representative" in md.lower()
    _check_layers(lab, doc)
    # nothing left behind: no QEMU, no loop device on the lab's scratch images, no qemu-img
    assert lab.own_processes() == [] and lab.own_processes("qemu-img") == []
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in loops


HOST_LAYERS = ["device", "qemu-raw", "qemu-raw-file", "qemu-qcow2"]


def _check_layers(lab, doc: dict) -> None:
    """The layer rows below the guests: every host-side layer over the one below it, with a CI,
    recomputed here from the trials; labelled as holding under TCG, the guest rows as needing KVM."""
    f = doc["findings"]
    lay = f["layers"]
    buses = virtio.spec.buses_of(quick=True)
    assert lay["order"] == HOST_LAYERS + buses, lay["order"]
    mib = _layer_mib_s(doc)
    below = {"qemu-raw": "device", "qemu-raw-file": "qemu-raw", "qemu-qcow2": "qemu-raw-file",
             **{b: "qemu-raw-file" for b in buses}}
    for row in lay["order"]:
        meta = lay["rows"][row]
        assert meta["below"] == below.get(row) and meta["holds_under_tcg"] is (row in HOST_LAYERS), (row, meta)
        assert meta["valid_here"] is (row in HOST_LAYERS or f["accel"] == "kvm"), (row, meta)
        for test in virtio.spec.LAYER_TESTS:
            for rec in virtio.spec.QUICK_RECORDS:
                vals = mib[row, test, rec]
                assert len(vals) >= 3 and lay["mib_s"][row][test][rec]["n"] == len(vals), (row, test, rec)
                if row == "device":
                    continue
                r, under = lay["vs_below"][row][test][rec], mib[below[row], test, rec]
                # the ratio of the two layers' median rates (= the ratio of their median times)
                assert_median_ratio(r["mean"], vals, under, (row, test, rec, r))
                lo, hi = r["ci95"]
                assert lo is not None and hi is not None and 0 < lo < r["mean"] < hi, (row, test, rec, r)
    for t in doc["trials"]:  # the same bytes on every host-side layer, and qemu-img's own count
        w = t["params"]["_workload"]
        if t["status"] == "ok" and w["kind"] in ("fio", "qemu_img_bench"):
            assert w["size"] == parse_size(virtio.spec.LAYER_BYTES_QUICK[size_label(w["bs"]).lower()]), w
            if w["kind"] == "qemu_img_bench":
                assert t["metrics"]["requests"] == w["size"] // w["bs"], (t["id"], t["metrics"])
    md = lab.run("report", doc["run_id"], "--format", "md").stdout
    assert "Layers of the virtual disk" in md and "holds under TCG" in md
    assert ("needs KVM (guest ran under TCG)" in md) == (f["accel"] == "tcg")


def _layer_mib_s(doc: dict) -> dict[tuple[str, str, str], list[float]]:
    """MiB/s of the ok layer trials per (row, test, record), from their full configurations."""
    out: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for t in doc["trials"]:
        if t["status"] != "ok":
            continue
        tgt, w, m = t["params"]["_target"], t["params"]["_workload"], t["metrics"]
        if w["kind"] == "iozone" and tgt["kind"] == "qemu" and w["test"] in virtio.spec.LAYER_TESTS:
            out[tgt["bus"], w["test"], size_label(w["record"]).lower()].append(m["kbps"] / 1024)
        elif w["kind"] in ("fio", "qemu_img_bench"):
            on_device = tgt.get("filesystem", "none") == "none"
            row = ("device" if w["kind"] == "fio" else "qemu-raw") if on_device else \
                {"raw": "qemu-raw-file", "qcow2": "qemu-qcow2"}[w["format"]]
            out[row, w["rw"], size_label(w["bs"]).lower()].append(m["bw_mib_s"])
    return out


def _kbps_by_cell(doc: dict) -> dict[tuple[str, str, str], list[float]]:
    """KB/s of the ok trials per (system, test, record), in repetition order (independent of the analysis)."""
    out: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for t in doc["trials"]:
        if t["status"] != "ok" or t["params"]["_workload"]["kind"] != "iozone":
            continue
        tgt, w = t["params"]["_target"], t["params"]["_workload"]
        system = "host" if tgt["kind"] == "loop" else tgt["bus"]
        out[system, w["test"], size_label(w["record"]).lower()].append((t["repetition"], t["metrics"]["kbps"]))
    return {k: [v for _, v in sorted(vals)] for k, vals in out.items()}


def _check_ratio(r: dict, guest: list[float], host: list[float], cell: tuple) -> None:
    """The study's guest/host ratio is the ratio of the two medians (the KB/s the table shows),
    with a finite interval around it that includes fio's clock error:
    even when both cells' repetitions agree to the last digit (a 4m pass of 2 records, ~10 ms,
    counted in whole ms) the interval has width (CI of stop 21 printed [0.5625, 0.5625])."""
    assert r["mean"] == pytest.approx(statistics.median(guest) / statistics.median(host), rel=1e-9), cell
    assert r["n"] == min(len(guest), len(host)), cell
    assert r["method"].endswith("±resolution"), (cell, r)
    lo, hi = r["ci95"]
    assert lo is not None and hi is not None and lo < r["mean"] < hi, (cell, r)
    if len(set(guest)) == 1 and len(set(host)) == 1:  # ties: the width is the clocks' error alone
        assert hi / lo > 1.02, (cell, r)


def _confounders(doc: dict, system: str) -> list[str]:
    return [fl for t in doc["trials"] if t["status"] == "ok" and t["params"]["_workload"]["kind"] == "iozone"
            and ("host" if t["params"]["_target"]["kind"] == "loop" else t["params"]["_target"]["bus"]) == system
            for fl in t["flags"] if fl.startswith(("generator_cpu_bound", "cpu_contended"))]
