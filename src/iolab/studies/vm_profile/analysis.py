"""vm-profile's analysis (pure): every system's value of every study metric, and each guest's
ratio to the host of the same run with its 95 % CI."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import JsonValue

from iolab.analysis.findings import Findings
from iolab.analysis.record import Est, JSONObject, Number, Quantity, Record
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc, Trial
from iolab.studies.common import ok_trials


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


class MetricInfo(Record):
    """findings.metrics[name]: what one of the study's metrics is."""

    part: str
    unit: str
    higher_is_better: bool
    label: str


class MemorySizing(Record):
    """Per system: the STREAM arrays its trials used (MiB, each size once) and why."""

    array_mib: list[Number]
    reduced: bool
    reason: str


class VmProfileFindings(Findings):
    """docs/results.md, vm-profile."""

    accel: str | None
    systems: list[str]
    table: dict[str, dict[str, Est]]          # system -> study metric -> its estimate (with its unit)
    ratio_vs_host: dict[str, dict[str, Est]]  # guest system -> study metric -> guest / host
    metrics: dict[str, MetricInfo]
    missing: dict[str, list[str]]             # system -> study metrics it has no result for
    profiles: dict[str, dict[str, JsonValue]]  # guest system -> the profile and the disk/VM settings that define it
    memory_sizing: dict[str, MemorySizing]


def trial_metrics(t: Trial) -> dict[str, float]:
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


def system_of(t: Trial) -> str:
    return str(t["params"].get("target") or t["params"]["_target"].get("name") or "host")


def collect(doc: Doc) -> dict[str, dict[str, list[float]]]:
    """{system: {metric: [value per ok trial]}}."""
    out: dict[str, dict[str, list[float]]] = {}
    for t in ok_trials(doc):
        for metric, v in trial_metrics(t).items():
            out.setdefault(system_of(t), {}).setdefault(metric, []).append(v)
    return out


def findings(doc: Doc) -> VmProfileFindings:
    values = collect(doc)
    est = RunEstimator(doc)  # the interval adaptive stopping calls for (analysis/sequential.py)
    table: dict[str, dict[str, Estimate]] = {
        s: {k: _with_unit(est.mean(v), k) for k, v in sorted(ms.items())} for s, ms in values.items()}
    host = values.get("host", {})
    ratio: dict[str, dict[str, Estimate]] = {}
    for system, ms in values.items():
        if system == "host":
            continue
        ratio[system] = {k: est.ratio(v, host[k]) for k, v in sorted(ms.items()) if host.get(k)}
    missing = {s: [m.name for m in METRICS if m.name not in table.get(s, {})] for s in table}
    return VmProfileFindings(
        accel=_accel(doc), systems=list(table), table=table, ratio_vs_host=ratio,
        metrics={m.name: MetricInfo(part=m.part, unit=m.unit, higher_is_better=m.higher_is_better, label=m.label)
                 for m in METRICS},
        missing={s: v for s, v in missing.items() if v}, profiles=_profiles(doc), memory_sizing=memory_sizing(doc))


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()


def memory_sizing(doc: Doc) -> dict[str, MemorySizing]:
    """Per system: the STREAM arrays its trials used and why (from the trial manifests)."""
    out: dict[str, tuple[list[Number], bool, str]] = {}
    for t in ok_trials(doc):
        if t["params"]["_workload"].get("kind") != "stream":
            continue
        s = ((t.get("manifest") or {}).get("workload_facts") or {}).get("sizing")
        if not s:
            continue
        sizes, reduced, reason = out.setdefault(system_of(t), ([], False, s["reason"]))
        if s["array_mib"] not in sizes:
            sizes.append(s["array_mib"])
        out[system_of(t)] = (sizes, reduced or bool(s["reduced"]), s["reason"] if s["reduced"] else reason)
    return {k: MemorySizing(array_mib=sizes, reduced=reduced, reason=reason)
            for k, (sizes, reduced, reason) in out.items()}


def _with_unit(e: Estimate, metric: str) -> Estimate:
    m = BY_NAME.get(metric)
    return Quantity.of(e, m.unit) if m else e


def _accel(doc: Doc) -> str | None:
    for t in doc["trials"]:
        accel = (t.get("manifest") or {}).get("target", {}).get("accel")
        if accel:
            return str(accel)
    return None


def _profiles(doc: Doc) -> dict[str, dict[str, JsonValue]]:
    """What each guest system was: its profile and the disk/VM settings that define it."""
    out: dict[str, dict[str, JsonValue]] = {}
    for t in doc["trials"]:
        tg = t["params"]["_target"]
        if tg.get("kind") != "qemu":
            continue
        out[system_of(t)] = {k: tg.get(k) for k in ("profile", "format", "encrypt", "cache", "aio", "bus",
                                                      "vcpus", "memory")}
    return out
