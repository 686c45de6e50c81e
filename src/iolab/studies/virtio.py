"""Study virtio (R1): host vs guests with virtio-blk, emulated IDE and other buses.

The same iozone-style workload runs on the host (ext4 on the scratch loop device) and in
guests (ext4 on the virtual disk, whose image sits on a scratch loop device of its own).
Every guest cell is paired with the host cell of the same run: a ratio with a 95% CI.
"""

from __future__ import annotations

from typing import Any

from iolab.analysis.stats import ratio_ci
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies import iozone
from iolab.studies.common import fmt_est, group_values, ok_trials

NAME = "virtio"
SUMMARY = "R1: host vs QEMU guests (virtio-blk, ide; nvme, virtio-scsi, ahci), iozone tests, ratio vs host"
MAIN_BUSES = ["virtio-blk", "ide"]
EXTRA_BUSES = ["nvme", "virtio-scsi", "ahci"]
# R1's published ratios vs host at 16M records (virtio ~0.8, emulated ~0.53-0.55)
R1_RATIO_16M = {"virtio-blk": 0.83, "ide": 0.55}


QUICK_TESTS = ["write", "read", "randread"]
QUICK_RECORDS = ["4k", "4m"]


def build(quick: bool) -> dict[str, Any]:
    """--quick keeps every system (every row of R1's table) but fewer tests and records: under
    TCG each guest trial costs seconds of emulation, and six systems must fit in minutes."""
    file_size = "8M" if quick else "100M"
    guest = {"kind": "qemu", "format": "raw", "cache": "none", "aio": "threads", "guest_fs": "ext4",
             "disk_size": "128M" if quick else "256M", "memory": "512M", "prefill": False}
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 6,
                  "ci_target": 0.05, "description": SUMMARY},
        "targets": [{"name": "host", "kind": "loop", "size": "256M" if quick else "512M", "filesystem": "ext4"}]
        + [dict(guest, name=bus, bus=bus) for bus in MAIN_BUSES + EXTRA_BUSES],
        "workload": {"kind": "iozone", "test": QUICK_TESTS if quick else iozone.TESTS,
                     "record": QUICK_RECORDS if quick else iozone.RECORDS, "file_size": file_size},
    }


def accel_of(doc: dict[str, Any]) -> str | None:
    for t in doc["trials"]:
        accel = (t.get("manifest") or {}).get("target", {}).get("accel")
        if accel:
            return accel
    return None


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    kbps = iozone.kbps_findings(doc)
    trials = ok_trials(doc)
    values = group_values(trials, ["system", "test", "record"], "kbps")
    ratios: dict[str, Any] = {}
    for (system, test, record), vals in values.items():
        host = values.get(("host", test, record))
        if system == "host" or not host:
            continue
        ratios.setdefault(system, {}).setdefault(test, {})[record] = ratio_ci(vals, host).as_dict()
    return {"accel": accel_of(doc), "kbps": kbps, "ratio_vs_host": ratios}


def present(doc: dict[str, Any], f: dict[str, Any]) -> tuple[list[str], list[Section]]:
    ratios = f["ratio_vs_host"]
    systems = [s for s in MAIN_BUSES + EXTRA_BUSES if s in ratios]
    tcg = f.get("accel") == "tcg"
    warn = [Note("Guests ran under TCG software emulation (KVM unusable here): every guest number includes "
                 "instruction emulation, so speed ratios are NOT representative of a KVM guest. The table "
                 "still shows the method end to end.", "warn")] if tcg else []
    summary = [f"accelerator: {f.get('accel') or 'n/a'}" + (" (software emulation: ratios not representative)"
                                                          if tcg else "")]
    for s in systems:
        r = ratios[s].get("write", {}).get("16m")
        if r and r["mean"] is not None:
            summary.append(f"{s}: write at 16m records = {r['mean']:.2f}x host (R1: {R1_RATIO_16M.get(s, '–')})")
    rows = [[rec, s] + [fmt_est(ratios[s].get(t, {}).get(rec)) for t in iozone.TESTS]
            for rec in iozone.RECORDS for s in systems]
    ratio_table = Table("Guest / host (ratio of means, 95% CI)", ["record", "system"] + iozone.TESTS, rows,
                        notes=list(warn))
    chart = Chart("Throughput relative to the host, by record size (write)", "bar", "record", "guest / host",
                  [Series(s, iozone.RECORDS,
                          [ratios[s].get("write", {}).get(r, {}).get("mean") for r in iozone.RECORDS],
                          [(ratios[s].get("write", {}).get(r, {}).get("ci95") or [None, None])[0]
                           for r in iozone.RECORDS],
                          [(ratios[s].get("write", {}).get(r, {}).get("ci95") or [None, None])[1]
                           for r in iozone.RECORDS]) for s in systems],
                  ref_lines=[(1.0, "host")], notes=list(warn))
    kb_table = iozone.kbps_table(f["kbps"], "KB/s (mean ± 95% CI), shaped like R1's table")
    kb_table.notes = list(warn)
    return summary, [
        Section("Guest vs host", [chart, ratio_table], intro=(
            "Each guest cell is paired with the host cell of the same run. R1 found virtio-blk at ~80% of "
            "the host and the emulated disk at ~53–55% for large records, with a wider gap for small records.")),
        Section("Throughput", [kb_table]),
    ]
