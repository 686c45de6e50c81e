"""Study vm-profile (R5): CPU, memory, disk and network of guests per VM profile, host as baseline.

Every system runs the same workloads: prime counting and sysbench cpu (CPU), a STREAM-style
kernel (memory), fio 4 KiB patterns (disk) and iperf3 TCP (network). The host is a scratch
loop device with ext4 (disk) and its loopback (network); each profile is a guest whose test
disk carries ext4 the same way. Each guest metric gets a ratio to the host's with a 95% CI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from iolab.analysis.stats import mean_ci, ratio_ci
from iolab.core.units import format_size
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import fmt_est, ok_trials
from iolab.vm.profiles import DESCRIPTIONS

NAME = "vm-profile"
SUMMARY = "R5: CPU, memory, disk and network of guests per VM profile (performance, encrypted) vs host"
PROFILES = ["performance", "encrypted"]
FIO_PATTERNS = ["randread", "randwrite", "read", "write", "randrw"]
DIRECTIONS = ["guest_to_host", "host_to_guest", "guest_to_guest"]


@dataclass(frozen=True)
class Metric:
    name: str
    part: str  # cpu | memory | disk | network
    unit: str
    higher_is_better: bool
    label: str


METRICS: list[Metric] = [
    Metric("cpu_primes_1e6_s", "cpu", "s", False, "primes < 10^6"),
    Metric("cpu_primes_1e7_s", "cpu", "s", False, "primes < 10^7"),
    Metric("cpu_primes_1e8_s", "cpu", "s", False, "primes < 10^8"),
    Metric("cpu_events_per_s_1t", "cpu", "events/s", True, "sysbench 1 thread"),
    Metric("cpu_events_per_s_nt", "cpu", "events/s", True, "sysbench 1 thread/vCPU"),
    Metric("mem_copy_mb_s", "memory", "MB/s", True, "Copy"),
    Metric("mem_scale_mb_s", "memory", "MB/s", True, "Scale"),
    Metric("mem_add_mb_s", "memory", "MB/s", True, "Add"),
    Metric("mem_triad_mb_s", "memory", "MB/s", True, "Triad"),
    Metric("disk_randread_iops", "disk", "IOPS", True, "randread"),
    Metric("disk_randwrite_iops", "disk", "IOPS", True, "randwrite"),
    Metric("disk_read_iops", "disk", "IOPS", True, "read"),
    Metric("disk_write_iops", "disk", "IOPS", True, "write"),
    Metric("disk_randrw_read_iops", "disk", "IOPS", True, "randrw (read)"),
    Metric("disk_randrw_write_iops", "disk", "IOPS", True, "randrw (write)"),
    Metric("net_guest_to_host_mbit_s", "network", "Mbit/s", True, "guest → host"),
    Metric("net_host_to_guest_mbit_s", "network", "Mbit/s", True, "host → guest"),
    Metric("net_guest_to_guest_mbit_s", "network", "Mbit/s", True, "guest → guest"),
]
BY_NAME = {m.name: m for m in METRICS}
PARTS = [("cpu", "CPU"), ("memory", "Memory"), ("disk", "Disk"), ("network", "Network")]


def build(quick: bool) -> dict[str, Any]:
    """--quick keeps every metric and every system, with short runs and small files."""
    vcpus = max(1, min(os.cpu_count() or 1, 8))
    guest = {"kind": "qemu", "guest_fs": "ext4", "disk_size": "256M" if quick else "5G", "memory": "1G",
             "vcpus": vcpus, "network": "user", "net_peer": True,
             "extra_binaries": ["/usr/bin/sysbench", "/usr/bin/iperf3"],
             "native_helpers": ["iolab_primes", "iolab_stream"]}
    seconds = 3 if quick else 30
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 6,
                  "ci_target": 0.05, "description": SUMMARY},
        "targets": [{"name": "host", "kind": "loop", "size": "256M" if quick else "5G", "filesystem": "ext4"}]
        + [{"name": p, "profile": p, **guest} for p in PROFILES],
        "workloads": [
            {"kind": "primes"},
            {"kind": "sysbench-cpu", "threads": [1, 0], "time": seconds},
            {"kind": "stream", "ntimes": 4 if quick else 10},
            {"kind": "fio", "rw": FIO_PATTERNS, "bs": "4k", "size": "64M" if quick else "4G", "iodepth": 16,
             "ioengine": "libaio", "direct": True, "runtime": seconds, "ramp_time": 1},
            {"kind": "iperf3", "direction": DIRECTIONS, "time": seconds},
        ],
    }


# ---------------------------------------------------------------- analysis (pure)

def trial_metrics(t: dict[str, Any]) -> dict[str, float]:
    """One trial's values under the study's metric names."""
    w, m = t["params"]["_workload"], t["metrics"]
    kind = w.get("kind")
    out: dict[str, float] = {}
    if kind == "primes":
        out = {f"cpu_{k}": v for k, v in m.items() if k.startswith("primes_")}
    elif kind == "sysbench-cpu" and "events_per_s" in m:
        threads = int(w.get("threads", 1))
        suffix = "1t" if threads == 1 else "nt" if threads == 0 else f"{threads}t"
        out = {f"cpu_events_per_s_{suffix}": m["events_per_s"]}
    elif kind == "stream":
        out = {f"mem_{k}": v for k, v in m.items() if k in ("copy_mb_s", "scale_mb_s", "add_mb_s", "triad_mb_s")}
    elif kind == "fio":
        rw = w.get("rw")
        if rw in ("randread", "read"):
            out = {f"disk_{rw}_iops": m.get("read_iops")}
        elif rw in ("randwrite", "write"):
            out = {f"disk_{rw}_iops": m.get("write_iops")}
        elif rw == "randrw":
            out = {"disk_randrw_read_iops": m.get("read_iops"), "disk_randrw_write_iops": m.get("write_iops")}
    elif kind == "iperf3" and "mbit_s" in m:
        out = {f"net_{w.get('direction')}_mbit_s": m["mbit_s"]}
    return {k: float(v) for k, v in out.items() if v is not None}


def system_of(t: dict[str, Any]) -> str:
    return str(t["params"].get("target") or t["params"]["_target"].get("name") or "host")


def collect(doc: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """{system: {metric: [value per ok trial]}}."""
    out: dict[str, dict[str, list[float]]] = {}
    for t in ok_trials(doc):
        for metric, v in trial_metrics(t).items():
            out.setdefault(system_of(t), {}).setdefault(metric, []).append(v)
    return out


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    values = collect(doc)
    table = {s: {k: mean_ci(v).as_dict(_unit(k)) for k, v in sorted(ms.items())} for s, ms in values.items()}
    host = values.get("host", {})
    ratio: dict[str, Any] = {}
    for system, ms in values.items():
        if system == "host":
            continue
        ratio[system] = {k: ratio_ci(v, host[k]).as_dict() for k, v in sorted(ms.items()) if host.get(k)}
    missing = {s: [m.name for m in METRICS if m.name not in table.get(s, {})] for s in table}
    return {
        "accel": _accel(doc), "systems": list(table), "table": table, "ratio_vs_host": ratio,
        "metrics": {m.name: {"part": m.part, "unit": m.unit, "higher_is_better": m.higher_is_better,
                             "label": m.label} for m in METRICS},
        "missing": {s: v for s, v in missing.items() if v},
        "profiles": _profiles(doc),
    }


def _unit(metric: str) -> str | None:
    m = BY_NAME.get(metric)
    return m.unit if m else None


def _accel(doc: dict[str, Any]) -> str | None:
    for t in doc["trials"]:
        accel = (t.get("manifest") or {}).get("target", {}).get("accel")
        if accel:
            return accel
    return None


def _profiles(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What each guest system was: its profile and the disk/VM settings that define it."""
    out: dict[str, dict[str, Any]] = {}
    for t in doc["trials"]:
        tg = t["params"]["_target"]
        if tg.get("kind") != "qemu":
            continue
        out[system_of(t)] = {k: tg.get(k) for k in ("profile", "format", "encrypt", "cache", "aio", "bus",
                                                      "vcpus", "memory")}
    return out


# ---------------------------------------------------------------- report

def relative(est: dict[str, Any] | None, higher_is_better: bool) -> dict[str, Any] | None:
    """A guest/host ratio turned into 'performance relative to the host' (higher = better).

    For a lower-is-better metric the ratio is inverted; a CI bound at or below zero (a very
    noisy host value) becomes an open end (None), never a negative speed.
    """
    if not est or not est.get("mean"):
        return None
    if higher_is_better:
        return est
    lo, hi = est.get("ci95") or [None, None]
    return {"mean": 1 / est["mean"], "ci95": [1 / hi if hi and hi > 0 else None, 1 / lo if lo and lo > 0 else None],
            "n": est.get("n")}


def present(doc: dict[str, Any], f: dict[str, Any]) -> tuple[list[str], list[Section]]:
    systems = [s for s in f["systems"] if s != "host"]
    tcg = f.get("accel") == "tcg"
    warn = [Note("Guests ran under TCG software emulation (KVM unusable here): every guest number includes "
                 "instruction emulation, so guest/host ratios are NOT representative of KVM.", "warn")] if tcg else []
    summary = [f"accelerator: {f.get('accel') or 'n/a'}" + (" (software emulation: ratios not representative)"
                                                          if tcg else "")]
    for s in systems:
        parts = []
        for name in ("cpu_primes_1e8_s", "mem_triad_mb_s", "disk_randread_iops", "net_guest_to_host_mbit_s"):
            rel = relative(f["ratio_vs_host"].get(s, {}).get(name), BY_NAME[name].higher_is_better)
            if rel:
                parts.append(f"{BY_NAME[name].part} {rel['mean']:.2f}x")
        if parts:
            summary.append(f"{s}: " + ", ".join(parts) + " of the host (higher = better)")
    for s, miss in f.get("missing", {}).items():
        summary.append(f"{s}: no result for {', '.join(miss)} (see the Trials appendix)")
    charts = [_part_chart(f, part, title, systems) for part, title in PARTS]
    return summary, [
        Section("Guest vs host", [*warn, *charts], layout="grid", intro=(
            "Each bar is a guest's performance relative to the host (1 = host; higher is better for every "
            "metric: for prime-counting times the ratio is inverted), on a log scale. Whiskers: 95% CI of "
            "the ratio of means.")),
        Section("Measured values", [*_values_table(f, systems), *_part_notes(), *_method_notes(f)]),
    ]


def _part_chart(f: dict[str, Any], part: str, title: str, systems: list[str]) -> Chart:
    metrics = [m for m in METRICS if m.part == part]
    series = []
    for s in systems:
        rel = [relative(f["ratio_vs_host"].get(s, {}).get(m.name), m.higher_is_better) for m in metrics]
        series.append(Series(s, [m.label for m in metrics], [r["mean"] if r else None for r in rel],
                             [(r["ci95"][0] if r else None) for r in rel],
                             [(r["ci95"][1] if r else None) for r in rel]))
    return Chart(f"{title}: relative to the host", "bar", "", "guest / host (higher = better)", series,
                 y_log=True, ref_lines=[(1.0, "host")])


def _values_table(f: dict[str, Any], guests: list[str]) -> list[Table]:
    """Every metric of every system; then each guest relative to the host (higher = better)."""
    values, ratios = [], []
    for part, title in PARTS:
        for m in (m for m in METRICS if m.part == part):
            label = f"{title}: {m.label} ({m.unit})"
            values.append([label, *[fmt_est(f["table"].get(s, {}).get(m.name)) for s in f["systems"]]])
            ratios.append([label, *[fmt_est(relative(f["ratio_vs_host"].get(g, {}).get(m.name), m.higher_is_better))
                                    for g in guests]])
    return [Table("Every metric (mean ± 95% CI)", ["metric", *f["systems"]], values),
            Table("Each guest relative to the host (higher = better; ratio of means, 95% CI)",
                  ["metric", *[f"{g} / host" for g in guests]], ratios)]


def _part_notes() -> list[Note]:
    return [
        Note("CPU — prime counting: seconds to count the primes below the limit, one thread (lower is better; "
             "the counts are checked: 78498, 664579, 5761455). sysbench cpu: events/s, max prime 10000, with "
             "1 thread and one thread per (v)CPU."),
        Note("Memory — a STREAM variant (iolab's own kernel, not the STREAM benchmark): best of N iterations "
             "excluding the first, 16/16/24/24 bytes per element, MB = 10^6, arrays at least 4x the host's "
             "last-level cache, results validated."),
        Note("Disk — fio 4 KiB, libaio, direct I/O, iodepth 16 on a file in ext4: the host's on a scratch loop "
             "device, each guest's on its virtual disk (whose image is on a scratch loop device of its own)."),
        Note("Network — iperf3 TCP, rate at the receiver. The host's row is its loopback (client and server both "
             "on the host): the ceiling a guest's user-mode network is compared with."),
    ]


def _method_notes(f: dict[str, Any]) -> list[Note]:
    out = []
    for s, p in f.get("profiles", {}).items():
        desc = DESCRIPTIONS.get(p.get("profile") or "", "")
        settings = ", ".join(f"{k}={format_size(v) if k == 'memory' else v}" for k, v in p.items()
                             if v is not None and k != "profile")
        out.append(Note(f"{s}: " + (f"{desc} — " if desc else "") + settings))
    return out
