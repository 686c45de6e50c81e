"""vm-profile's presentation: each guest relative to the host per part (higher = better), every
measured value, and what each part and each profile was."""

from __future__ import annotations

import math
from collections.abc import Mapping

from iolab.analysis.record import plotted
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc
from iolab.core.units import format_size
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import Cell, fmt_est
from iolab.studies.vm_profile.analysis import BY_NAME, METRICS, VmProfileFindings
from iolab.vm.profiles import DESCRIPTIONS

PARTS = [("cpu", "CPU"), ("memory", "Memory"), ("disk", "Disk"), ("network", "Network")]


def relative(est: Estimate | None, higher_is_better: bool) -> Estimate | None:
    """A guest/host ratio turned into 'performance relative to the host' (higher = better).

    For a lower-is-better metric the ratio is inverted; a CI bound at or below zero (a very
    noisy host value) becomes an open end, never a negative speed.
    """
    if est is None or not math.isfinite(est.mean) or not est.mean:
        return None
    if higher_is_better:
        return est
    lo, hi = est.lo, est.hi
    return Estimate(1 / est.mean, 1 / hi if math.isfinite(hi) and hi > 0 else math.nan,
                    1 / lo if math.isfinite(lo) and lo > 0 else math.nan, est.n, math.nan)


def _relative_cell(est: Estimate | None, higher_is_better: bool) -> Cell:
    """The table cell of `relative`: its mean, interval and n (an inverted ratio has no method of its own)."""
    rel = relative(est, higher_is_better)
    if rel is None:
        return "–"
    if higher_is_better:
        return fmt_est(rel)
    lo, hi = plotted(rel)[1:]
    return {"mean": rel.mean, "ci95": [lo, hi], "n": rel.n}


def present(doc: Doc, f: VmProfileFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    f = VmProfileFindings.coerce(f)
    systems = [s for s in f.systems if s != "host"]
    tcg = f.accel == "tcg"
    warn = [Note("Guests ran under TCG software emulation (KVM unusable here): every guest number includes "
                 "instruction emulation, so guest/host ratios are NOT representative of KVM.", "warn")] if tcg else []
    summary = [f"accelerator: {f.accel or 'n/a'}" + (" (software emulation: ratios not representative)"
                                                    if tcg else "")]
    for s in systems:
        parts = []
        for name in ("cpu_primes_1e8_s", "mem_triad_mb_s", "disk_randread_iops", "net_guest_to_host_mbit_s"):
            rel = relative(f.ratio_vs_host.get(s, {}).get(name), BY_NAME[name].higher_is_better)
            if rel:
                parts.append(f"{BY_NAME[name].part} {rel.mean:.2f}x")
        if parts:
            summary.append(f"{s}: " + ", ".join(parts) + " of the host (higher = better)")
    for s, miss in f.missing.items():
        summary.append(f"{s}: no result for {', '.join(miss)} (see the Trials appendix)")
    charts = [_part_chart(f, part, title, systems) for part, title in PARTS]
    return summary, [
        Section("Guest vs host", [*warn, *charts], layout="grid", intro=(
            "Each bar is a guest's performance relative to the host (1 = host; higher is better for every "
            "metric: for prime-counting times the ratio is inverted), on a log scale. Whiskers: 95% interval of "
            "the ratio of medians.")),
        Section("Measured values", [*_values_table(f, systems), *_part_notes(), *_method_notes(f)]),
    ]


def _part_chart(f: VmProfileFindings, part: str, title: str, systems: list[str]) -> Chart:
    metrics = [m for m in METRICS if m.part == part]
    series = []
    for s in systems:
        rel = [plotted(relative(f.ratio_vs_host.get(s, {}).get(m.name), m.higher_is_better)) for m in metrics]
        series.append(Series(s, [m.label for m in metrics], [r[0] for r in rel], [r[1] for r in rel],
                             [r[2] for r in rel]))
    return Chart(f"{title}: relative to the host", "bar", "", "guest / host (higher = better)", series,
                 y_log=True, ref_lines=[(1.0, "host")])


def _values_table(f: VmProfileFindings, guests: list[str]) -> list[Table]:
    """Every metric of every system; then each guest relative to the host (higher = better)."""
    values, ratios = [], []
    for part, title in PARTS:
        for m in (m for m in METRICS if m.part == part):
            label = f"{title}: {m.label} ({m.unit})"
            values.append([label, *[fmt_est(f.table.get(s, {}).get(m.name)) for s in f.systems]])
            ratios.append([label, *[_relative_cell(f.ratio_vs_host.get(g, {}).get(m.name), m.higher_is_better)
                                    for g in guests]])
    return [Table("Every metric (median and its 95% interval)", ["metric", *f.systems], values),
            Table("Each guest relative to the host (higher = better; ratio of medians, 95% interval)",
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


def _method_notes(f: VmProfileFindings) -> list[Note]:
    out = []
    for s, m in f.memory_sizing.items():
        text = m.reason if len(m.array_mib) == 1 else (
            f"arrays {' / '.join(f'{a} MiB' for a in m.array_mib)} (the size differed between repetitions); "
            + m.reason)
        out.append(Note(f"Memory sizing, {s}: {text}", "warn" if m.reduced else "info"))
    for s, p in f.profiles.items():
        desc = DESCRIPTIONS.get(str(p.get("profile") or ""), "")
        settings = ", ".join(f"{k}={format_size(v) if k == 'memory' and isinstance(v, int) else v}"
                             for k, v in p.items()
                             if v is not None and k != "profile")
        out.append(Note(f"{s}: " + (f"{desc} — " if desc else "") + settings))
    return out
