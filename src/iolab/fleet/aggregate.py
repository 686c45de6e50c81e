"""The fleet's aggregate over the window in which every host ran: pure functions.

fio starts the servers' jobs one after another, so summing each host's whole-run IOPS mixes
seconds in which some hosts had not started or had already finished. Each host logs its
rate every `interval_ms` with absolute timestamps from its own clock (`log_unix_epoch`);
with the clock skew measured before load, every sample is placed on this machine's clock.
The common window runs from the last host's start to the first host's end; a rate in the
aggregate is the sum over hosts of each host's mean rate over the samples inside that
window. Latency percentiles come from the hosts' merged completion-latency histograms, never
from averaged percentiles: from each host's histogram log (`write_hist_log`, one histogram per
interval) over the same common window, or, without those logs, from fio's json+ bins of each
host's whole job (flag `fleet_percentiles_whole_run`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from iolab.fio.engine import MIB, PERCENTILES, job_metrics

SIDES = {0: "read", 1: "write"}


@dataclass(frozen=True)
class Sample:
    t_ms: float   # end of the sampling interval, on the host's clock
    value: float  # IOPS (iops log) or KiB/s (bw log)
    ddir: int     # 0 read, 1 write, 2 trim


@dataclass(frozen=True)
class HistSample:
    """One interval of a histogram log: completions per fio latency bin (index -> count, sparse)."""

    t_ms: float
    ddir: int
    bins: dict[int, int]


FIO_PLAT_BITS = 6  # fio's FIO_IO_U_PLAT_BITS: 64 buckets per power of two
FIO_PLAT_VAL = 1 << FIO_PLAT_BITS


def plat_idx_to_val(idx: int) -> float:
    """The latency (ns) fio's histogram bin `idx` stands for: fio's own plat_idx_to_val (stat.c),
    the middle of the bucket; the json+ bins are keyed by the same values."""
    if idx < (FIO_PLAT_VAL << 1):
        return float(idx)
    error_bits = (idx >> FIO_PLAT_BITS) - 1
    base = 1 << (error_bits + FIO_PLAT_BITS)
    k = idx % FIO_PLAT_VAL
    return float(base + int((k + 0.5) * (1 << error_bits)))


@dataclass
class HostRun:
    """One host's part of a trial that came back: fio's stats entry and its logs (one list per job)."""

    name: str
    stats: dict[str, Any]
    iops_logs: list[list[Sample]] = field(default_factory=list)
    bw_logs: list[list[Sample]] = field(default_factory=list)
    hist_logs: list[list[HistSample]] = field(default_factory=list)
    skew_ms: float = 0.0  # host clock minus this machine's clock

    def span(self, interval_ms: float) -> tuple[float, float] | None:
        """(start, end) of this host's logged run on this machine's clock, None without logs."""
        samples = [s for log in self.iops_logs for s in log]
        if not samples:
            return None
        return (min(s.t_ms for s in samples) - interval_ms - self.skew_ms,
                max(s.t_ms for s in samples) - self.skew_ms)


def parse_log(text: str) -> list[Sample]:
    """fio's log lines `time, value, ddir, bs, offset[, prio]`; malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            out.append(Sample(float(parts[0]), float(parts[1]), int(parts[2])))
        except ValueError:
            continue
    return out


def parse_hist_log(text: str) -> list[HistSample]:
    """fio's histogram log lines `time, ddir, bs, bin0, bin1, ...` (log_hist_coarseness 0: one
    column per fio bin); malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 4:
            continue
        try:
            t, ddir = float(parts[0]), int(parts[1])
            bins = {i: n for i, v in enumerate(parts[3:]) if (n := int(v))}
        except ValueError:
            continue
        out.append(HistSample(t, ddir, bins))
    return out


@dataclass(frozen=True)
class Window:
    start_ms: float
    end_ms: float
    starts: dict[str, float]  # host -> its start, ms after the first host's

    @property
    def seconds(self) -> float:
        return max(self.end_ms - self.start_ms, 0.0) / 1000.0

    @property
    def spread_ms(self) -> float:
        return max(self.starts.values(), default=0.0)


def common_window(hosts: Sequence[HostRun], interval_ms: float) -> Window | None:
    spans = {h.name: h.span(interval_ms) for h in hosts}
    if not spans or any(s is None for s in spans.values()):
        return None
    real = {k: v for k, v in spans.items() if v is not None}
    first = min(s[0] for s in real.values())
    return Window(max(s[0] for s in real.values()), min(s[1] for s in real.values()),
                  {k: s[0] - first for k, s in real.items()})


def _window_mean(log: Iterable[Sample], ddir: int, w: Window, skew_ms: float, interval_ms: float) -> float | None:
    tol = interval_ms * 0.25
    vals = [s.value for s in log if s.ddir == ddir
            and s.t_ms - interval_ms - skew_ms >= w.start_ms - tol and s.t_ms - skew_ms <= w.end_ms + tol]
    return sum(vals) / len(vals) if vals else None


def merged_percentiles(stats: Iterable[dict[str, Any]], side: str) -> dict[str, float]:
    """Completion-latency percentiles (µs) of the hosts' merged json+ histograms (whole jobs)."""
    bins: dict[float, int] = {}
    for st in stats:
        for k, n in ((st.get(side) or {}).get("clat_ns", {}).get("bins") or {}).items():
            bins[float(k)] = bins.get(float(k), 0) + int(n)
    return percentiles_of(bins, side)


def window_percentiles(hosts: Sequence[HostRun], ddir: int, w: Window, interval_ms: float) -> dict[str, float]:
    """Completion-latency percentiles (µs) of every host's histogram-log intervals inside the
    common window, merged (the same inclusion rule as the rates)."""
    tol = interval_ms * 0.25
    bins: dict[float, int] = {}
    for h in hosts:
        for log in h.hist_logs:
            for s in log:
                if s.ddir == ddir and s.t_ms - interval_ms - h.skew_ms >= w.start_ms - tol \
                        and s.t_ms - h.skew_ms <= w.end_ms + tol:
                    for idx, n in s.bins.items():
                        v = plat_idx_to_val(idx)
                        bins[v] = bins.get(v, 0) + n
    return percentiles_of(bins, SIDES.get(ddir, "trim"))


def percentiles_of(bins: dict[float, int], side: str) -> dict[str, float]:
    """fio's percentiles (PERCENTILES) of a histogram {latency ns: count}, in µs: the first bin whose
    cumulative count reaches the rank, as fio computes them."""
    total = sum(bins.values())
    if not total:
        return {}
    out = {}
    for name, key in PERCENTILES.items():
        rank, seen = math.ceil(float(key) / 100.0 * total), 0
        for value in sorted(bins):
            seen += bins[value]
            if seen >= rank:
                out[f"{side}_clat_{name}_us"] = value / 1000.0
                break
    return out


def aggregate(hosts: Sequence[HostRun], interval_ms: float) -> tuple[dict[str, float], list[str]]:
    """The fleet's metrics (fio's names) over the common window, and flags saying what fell short."""
    flags: list[str] = []
    per = [job_metrics(h.stats) for h in hosts]
    out: dict[str, float] = {}
    w = common_window(hosts, interval_ms)
    windowed = w is not None and w.seconds * 1000 >= 2 * interval_ms
    if not windowed:
        flags.append("fleet_window_unmeasured: the hosts' logs leave no common window of two samples; "
                     "the aggregate sums whole runs")
    for ddir, side in SIDES.items():
        if not any(f"{side}_iops" in m for m in per):
            continue
        if windowed and w is not None:
            iops = [_window_mean(log, ddir, w, h.skew_ms, interval_ms) for h in hosts for log in h.iops_logs]
            bw = [_window_mean(log, ddir, w, h.skew_ms, interval_ms) for h in hosts for log in h.bw_logs]
            out[f"{side}_iops"] = sum(v for v in iops if v is not None)
            out[f"{side}_bw_mib_s"] = sum(v for v in bw if v is not None) / 1024.0
        else:
            out[f"{side}_iops"] = sum(m.get(f"{side}_iops", 0.0) for m in per)
            out[f"{side}_bw_mib_s"] = sum(m.get(f"{side}_bw_mib_s", 0.0) for m in per)
        out[f"{side}_bytes"] = sum(m.get(f"{side}_bytes", 0.0) for m in per)
        ios = [m.get(f"{side}_ios", 0.0) for m in per]
        out[f"{side}_ios"] = sum(ios)
        lats = [(m[f"{side}_lat_mean_us"], n) for m, n in zip(per, ios, strict=True) if f"{side}_lat_mean_us" in m]
        if lats and sum(n for _, n in lats):
            out[f"{side}_lat_mean_us"] = sum(v * n for v, n in lats) / sum(n for _, n in lats)
        from_window = window_percentiles(hosts, ddir, w, interval_ms) if windowed and w is not None else {}
        if from_window:
            out.update(from_window)
        else:
            out.update(merged_percentiles([h.stats for h in hosts], side))
            if windowed:
                flags.append(f"fleet_percentiles_whole_run: no {side} histogram log inside the common window; the "
                             f"{side} latency percentiles merge each host's whole job")
    out["iops"] = sum(out.get(f"{s}_iops", 0.0) for s in SIDES.values())
    out["bw_mib_s"] = sum(out.get(f"{s}_bw_mib_s", 0.0) for s in SIDES.values())
    out["runtime_s"] = w.seconds if windowed and w else max((m.get("runtime_s", 0.0) for m in per), default=0.0)
    for k in ("fio_usr_cpu_pct", "fio_sys_cpu_pct"):
        out[k] = sum(m.get(k, 0.0) for m in per) / max(len(per), 1)
    if w is not None:
        out["fleet_start_spread_ms"] = w.spread_ms
        out["fleet_window_s"] = w.seconds
    return out, flags


def host_starts(hosts: Sequence[HostRun], interval_ms: float) -> dict[str, float]:
    w = common_window(hosts, interval_ms)
    return dict(w.starts) if w else {}


__all__ = ["HistSample", "HostRun", "Sample", "Window", "aggregate", "common_window", "merged_percentiles",
           "parse_hist_log", "parse_log", "plat_idx_to_val", "host_starts", "window_percentiles", "MIB"]
