"""virtio's presentation: guest / host ratios (chart and table, TCG labelled) and the KB/s table."""

from __future__ import annotations

from typing import Any

from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import fmt_est
from iolab.studies.iozone import presentation as iozone_presentation
from iolab.studies.iozone.spec import RECORDS, TESTS
from iolab.studies.virtio.spec import EXTRA_BUSES, MAIN_BUSES

# R1's published ratios vs host at 16M records (virtio ~0.8, emulated ~0.53-0.55)
R1_RATIO_16M = {"virtio-blk": 0.83, "ide": 0.55}


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
    rows: list[list[Any]] = [[rec, s, *[fmt_est(ratios[s].get(t, {}).get(rec)) for t in TESTS]]
                             for rec in RECORDS for s in systems]
    ratio_table = Table("Guest / host (ratio of means, 95% CI)", ["record", "system"] + TESTS, rows,
                        notes=list(warn))
    chart = Chart("Throughput relative to the host, by record size (write)", "bar", "record", "guest / host",
                  [Series(s, RECORDS,
                          [ratios[s].get("write", {}).get(r, {}).get("mean") for r in RECORDS],
                          [(ratios[s].get("write", {}).get(r, {}).get("ci95") or [None, None])[0]
                           for r in RECORDS],
                          [(ratios[s].get("write", {}).get(r, {}).get("ci95") or [None, None])[1]
                           for r in RECORDS]) for s in systems],
                  ref_lines=[(1.0, "host")], notes=list(warn))
    kb_table = iozone_presentation.kbps_table(f["kbps"], "KB/s (mean ± 95% CI), shaped like R1's table")
    kb_table.notes = list(warn)
    return summary, [
        Section("Guest vs host", [chart, ratio_table], intro=(
            "Each guest cell is paired with the host cell of the same run. R1 found virtio-blk at ~80% of "
            "the host and the emulated disk at ~53–55% for large records, with a wider gap for small records.")),
        Section("Throughput", [kb_table]),
    ]
