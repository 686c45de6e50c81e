"""`iolab study virtio --quick`: host and five guest buses in one run, under TCG on CI machines."""

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
from tests.studies.conftest import Reproduced


def test_virtio_quick(reproduced: Reproduced) -> None:
    lab = reproduced.lab
    _, doc = reproduced.study("virtio", complete=False)
    f = doc["findings"]
    assert f["accel"] in ("kvm", "tcg")
    systems = ["host"] + virtio.spec.MAIN_BUSES + virtio.spec.EXTRA_BUSES
    assert set(f["kbps"]) == set(systems), "every system's rows"
    kbps = _kbps_by_cell(doc)
    file_size = parse_size(virtio.build(True)["workload"]["file_size"])
    for system in systems:
        big_over_small = []
        for test in virtio.spec.QUICK_TESTS:
            for rec in virtio.spec.QUICK_RECORDS:
                est = f["kbps"][system][test][rec]
                assert est["n"] == len(kbps[system, test, rec]) >= 3, (system, test, rec)
                if system != "host":
                    _check_ratio(f["ratio_vs_host"][system][test][rec], kbps[system, test, rec],
                                 kbps["host", test, rec], (system, test, rec))
            ratios = [b / s for b, s in zip(kbps[system, test, "4m"], kbps[system, test, "4k"])]
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
    # nothing left behind: no QEMU, no loop device on the lab's scratch images
    assert lab.own_processes() == []
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab.env["IOLAB_SCRATCH"] not in loops


def _kbps_by_cell(doc: dict) -> dict[tuple[str, str, str], list[float]]:
    """KB/s of the ok trials per (system, test, record), in repetition order (independent of the analysis)."""
    out: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for t in doc["trials"]:
        if t["status"] != "ok":
            continue
        tgt, w = t["params"]["_target"], t["params"]["_workload"]
        system = "host" if tgt["kind"] == "loop" else tgt["bus"]
        out[system, w["test"], size_label(w["record"]).lower()].append((t["repetition"], t["metrics"]["kbps"]))
    return {k: [v for _, v in sorted(vals)] for k, vals in out.items()}


def _check_ratio(r: dict, guest: list[float], host: list[float], cell: tuple) -> None:
    """The study's guest/host ratio is the ratio of the two means, with a finite CI around it."""
    assert r["mean"] == pytest.approx((sum(guest) / len(guest)) / (sum(host) / len(host)), rel=1e-9), cell
    assert r["n"] == min(len(guest), len(host)), cell
    lo, hi = r["ci95"]
    assert lo is not None and hi is not None and lo < r["mean"] < hi, (cell, r)


def _confounders(doc: dict, system: str) -> list[str]:
    return [fl for t in doc["trials"] if t["status"] == "ok"
            and ("host" if t["params"]["_target"]["kind"] == "loop" else t["params"]["_target"]["bus"]) == system
            for fl in t["flags"] if fl.startswith(("generator_cpu_bound", "cpu_contended"))]
