"""write-modes' presentation: the headline lines, throughput and call-rate charts, the table with
each mode's knee, and the cross-check against fio."""

from __future__ import annotations

from collections.abc import Mapping

from iolab.analysis.flags import name_of
from iolab.analysis.record import finite_or_none, plotted
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import fmt_est, size_label
from iolab.studies.write_modes.analysis import WriteModesFindings
from iolab.studies.write_modes.crosscheck import TOLERANCE
from iolab.studies.write_modes.spec import MODES


def present(doc: Doc, f: WriteModesFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    f = WriteModesFindings.coerce(f)
    thr = f.throughput
    modes = [m for m in MODES if m in thr]
    sizes = sorted({int(b) for m in modes for b in thr[m]})
    summary = []
    if "o_sync" in thr and sizes:
        lo, hi = thr["o_sync"].get(str(sizes[0])), thr["o_sync"].get(str(sizes[-1]))
        if lo and hi and finite_or_none(lo.mean) and finite_or_none(hi.mean) is not None:
            summary.append(f"O_SYNC at {size_label(sizes[-1])} blocks is {hi.mean / lo.mean:.0f}x its "
                           f"throughput at {size_label(sizes[0])} (R2: 512 B took 29x as long as 16 KiB)")
    for m in modes:
        k = f.knee.get(m)
        if k:
            summary.append(f"{m}: 90% of its best throughput from {size_label(k)} blocks on")
    chart = Chart("Write throughput vs block size", "line", "block size (bytes)", "MiB/s",
                  [_series(m, thr[m], sizes) for m in modes], x_log2=True, y_log=True,
                  notes=[Note("Median over repetitions with its 95% interval band (docs/statistics.md).")])
    sps = f.syscalls_per_s
    chart2 = Chart("Write calls per second vs block size", "line", "block size (bytes)", "calls/s",
                   [_series(m, sps[m], sizes) for m in modes if m in sps], x_log2=True, y_log=True,
                   notes=[Note("With a fixed number of calls per second, time is set by calls, not bytes: "
                               "why larger blocks win until the device, not the call count, is the limit.")])
    # block sizes as rows, modes as columns: a dozen sizes stay readable in a report's width
    rows: list[list[object]] = [[size_label(b), *(fmt_est(thr[m].get(str(b))) for m in modes)] for b in sizes]
    rows.append(["knee (90 % of best)", *(size_label(k) if (k := f.knee.get(m)) else "–" for m in modes)])
    notes = [Note(f"{k}: {_flags_words(v)}", "warn") for k, v in f.mode_flags.items()]
    table = Table("Throughput, MiB/s (median and its 95% interval)", ["block size"] + modes, rows, notes=notes)
    cc = f.fio_crosscheck
    cc_rows: list[list[object]] = [[c.mode, size_label(c.bs), fmt_est(c.helper), fmt_est(c.fio),
                                    fmt_est(c.helper_over_fio), c.verdict, c.reason] for c in cc]
    cc_table = Table("Cross-check against fio (both append to a new file: same mode, block size and data)",
                     ["mode", "bs", "iolab helper", "fio", "helper/fio", f"verdict (±{TOLERANCE:.0%})", "why"],
                     cc_rows, notes=[Note(
                         "Evidence per side: the file's layout, journal commits per write (jbd2) and device "
                         "flushes per write, from the same trials. 'holds': the helper agrees with fio (the whole "
                         "interval of the ratio of medians within the band); 'undecided': the interval straddles "
                         "an edge of the band (the reason says how many more repetitions would likely decide it). "
                         "The rows are one family: each interval at its share of 5 % (Bonferroni).")])
    for c in cc:
        if c.verdict == "differs":
            summary.append(f"cross-check {c.mode} {size_label(c.bs)}: the helper and fio differ: {c.reason}")
    sections = [Section("Throughput by write mode", [chart, table], intro=(
        "Each trial writes the same amount of data to a new file on ext4 on iolab's scratch loop device; "
        "the time includes what each mode pays for durability (fsync for buffered and O_DIRECT, msync for mmap).")),
        Section("System calls", [chart2]),
        Section("Cross-check", [cc_table])]
    return summary, sections


def _series(mode: str, per_bs: dict[str, Estimate], sizes: list[int]) -> Series:
    pts = [plotted(per_bs.get(str(b))) for b in sizes]
    return Series(mode, [float(b) for b in sizes], [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts])


def _flags_words(raised: list[str]) -> str:
    """One example per flag name, with how many other details of it were seen: a flag with numbers
    (disk_shared) raised by every trial would otherwise fill the note with near-copies."""
    by_name: dict[str, list[str]] = {}
    for flag in raised:
        by_name.setdefault(name_of(flag), []).append(flag)
    return "; ".join(same[0] + (f" (and {len(same) - 1} more like it)" if len(same) > 1 else "")
                     for same in by_name.values())
