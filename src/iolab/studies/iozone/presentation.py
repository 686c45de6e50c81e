"""iozone's presentation: the KB/s table shaped like R1's, a chart per record size, and R1's
published host row for the shape (virtio reuses `kbps_table`)."""

from __future__ import annotations

from collections.abc import Mapping

from iolab.analysis.record import plotted
from iolab.analysis.trials import Doc
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import fmt_est, ok_trials, resolution_note
from iolab.studies.iozone.analysis import IozoneFindings, Kbps
from iolab.studies.iozone.spec import RECORDS, TESTS

# R1's published host row on a SATA SSD (KB/s), for shape comparison only.
R1_HOST = {"4k": [108531, 140209, 130116, 149202, 41372, 108057],
           "4m": [475827, 493225, 500618, 506168, 506449, 491150],
           "16m": [495826, 502281, 524808, 521351, 520112, 502445]}


def kbps_table(kbps: Kbps, title: str) -> Table:
    rows: list[list[object]] = []
    for rec in RECORDS:
        for system, per_test in kbps.items():
            rows.append([rec, system, *(fmt_est(per_test.get(t, {}).get(rec)) for t in TESTS)])
    return Table(title, ["record", "system"] + TESTS, rows)


def present(doc: Doc, f: IozoneFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    kbps = IozoneFindings.coerce(f).kbps
    host = kbps.get("host", {})
    summary = []
    for rec in RECORDS:
        w = host.get("write", {}).get(rec)
        r = host.get("read", {}).get(rec)
        if w and r:
            summary.append(f"{rec} records: write {w.mean:,.0f} KB/s, read {r.mean:,.0f} KB/s")
    w4k, w4m = host.get("write", {}).get("4k"), host.get("write", {}).get("4m")
    if w4k and w4m:
        ratio = w4m.mean / w4k.mean
        summary.append(f"4m records write {ratio:.1f}x faster than 4k (R1 host: 4.4x)")
    table = kbps_table(kbps, "KB/s (median and its 95% interval), shaped like R1's table")
    table.notes += [n for n in [resolution_note(ok_trials(doc), "kbps")] if n]
    ref = Table("R1's published host row (SATA SSD), for the shape", ["record"] + TESTS,
                [[rec] + [f"{v:,}" for v in vals] for rec, vals in R1_HOST.items()],
                notes=[Note("Absolute numbers depend on the device; compare ratios and orderings.")])
    series = []
    for rec in RECORDS:
        pts = [plotted(host.get(t, {}).get(rec)) for t in TESTS]
        series.append(Series(rec, TESTS, [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]))
    chart = Chart("Host KB/s by test and record size", "bar", "test", "KB/s", series, y_log=True)
    return summary, [Section("iozone tests", [table, chart, ref], intro=(
        "fio reproduces iozone's tests on a file in ext4 on the scratch loop device, O_DIRECT, with the final "
        "flush inside the timing. Random tests touch every record once in a fixed shuffled order."))]

