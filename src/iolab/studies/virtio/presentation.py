"""virtio's presentation: the layers of the virtual disk (what each costs, which rows hold under
TCG), guest / host ratios (chart and table, TCG labelled) and the KB/s table."""

from __future__ import annotations

from collections.abc import Mapping

from iolab.analysis.record import finite_or_none, plotted
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc
from iolab.report.model import Chart, Note, Section, Series, Table, Tag
from iolab.studies.common import fmt_est, ok_trials, resolution_note
from iolab.studies.iozone import presentation as iozone_presentation
from iolab.studies.iozone.spec import RECORDS, TESTS
from iolab.studies.virtio.analysis import VirtioFindings
from iolab.studies.virtio.layers import LayerRow, Layers
from iolab.studies.virtio.spec import EXTRA_BUSES, LAYER_TESTS, MAIN_BUSES

# R1's published ratios vs host at 16M records (virtio ~0.8, emulated ~0.53-0.55)
R1_RATIO_16M = {"virtio-blk": 0.83, "ide": 0.55}


def present(doc: Doc, f: VirtioFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    f = VirtioFindings.coerce(f)
    ratios = f.ratio_vs_host
    systems = [s for s in MAIN_BUSES + EXTRA_BUSES if s in ratios]
    tcg = f.accel == "tcg"
    warn = [Note("Guests ran under TCG software emulation (KVM unusable here): every guest number includes "
                 "instruction emulation, so speed ratios are NOT representative of a KVM guest. The table "
                 "still shows the method end to end.", "warn")] if tcg else []
    summary = [f"accelerator: {f.accel or 'n/a'}" + (" (software emulation: ratios not representative)"
                                                    if tcg else "")]
    for s in systems:
        r = ratios[s].get("write", {}).get("16m")
        if r and finite_or_none(r.mean) is not None:
            summary.append(f"{s}: write at 16m records = {r.mean:.2f}x host (R1: {R1_RATIO_16M.get(s, '–')})")
    rows: list[list[object]] = [[rec, s, *[fmt_est(ratios[s].get(t, {}).get(rec)) for t in TESTS]]
                                for rec in RECORDS for s in systems]
    short = [n for n in [resolution_note(
        [t for t in ok_trials(doc) if t["params"]["_workload"].get("kind") == "iozone"], "kbps")] if n]
    ratio_table = Table("Guest / host (ratio of medians, 95% interval)", ["record", "system"] + TESTS, rows,
                        notes=list(warn) + short)
    chart = Chart("Throughput relative to the host, by record size (write)", "bar", "record", "guest / host",
                  [_series(s, [ratios[s].get("write", {}).get(r) for r in RECORDS], RECORDS) for s in systems],
                  ref_lines=[(1.0, "host")], notes=list(warn))
    kb_table = iozone_presentation.kbps_table(f.kbps, "KB/s (median and its 95% interval), shaped like R1's table")
    kb_table.notes = list(warn) + short
    layer_summary, layer_section = present_layers(f.layers, tcg)
    return summary + layer_summary, [
        *layer_section,
        Section("Guest vs host", [chart, ratio_table], intro=(
            "Each guest cell is paired with the host cell of the same run. R1 found virtio-blk at ~80% of "
            "the host and the emulated disk at ~53–55% for large records, with a wider gap for small records.")),
        Section("Throughput", [kb_table]),
    ]


def _series(name: str, points: list[Estimate | None], xs: list[str]) -> Series:
    pts = [plotted(e) for e in points]
    return Series(name, xs, [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts])


def _est(node: dict[str, dict[str, dict[str, Estimate]]], row: str, test: str, rec: str) -> Estimate | None:
    return node.get(row, {}).get(test, {}).get(rec)


def _status(row: LayerRow, tcg: bool) -> Tag:
    """Whether a row's numbers answer R1's question on this machine."""
    if row.holds_under_tcg:
        return Tag("holds under TCG (host side, native)", "good")
    return Tag("needs KVM (guest ran under TCG)", "warn") if tcg else Tag("measured with KVM", "good")


def present_layers(lay: Layers, tcg: bool) -> tuple[list[str], list[Section]]:
    """The layer tables: MiB/s per layer, and each layer over the one below it (with its CI)."""
    order = lay.order
    if not order:
        return [], []
    rows, mib, vs = lay.rows, lay.mib_s, lay.vs_below
    records = [r for r in RECORDS if any(_est(mib, n, t, r) for n in order for t in LAYER_TESTS)]
    mib_rows = [[rec, rows[n].layer, rows[n].tool, *[fmt_est(_est(mib, n, t, rec)) for t in LAYER_TESTS],
                 _status(rows[n], tcg)] for rec in records for n in order]
    cost_rows = [[rec, rows[n].layer, rows[below].layer, *[fmt_est(_est(vs, n, t, rec)) for t in LAYER_TESTS],
                  _status(rows[n], tcg)]
                 for rec in records for n in order if (below := rows[n].below) is not None and below in rows]
    notes = [Note("Host-side rows (device, QEMU block layer raw and qcow2) run natively: they hold on any machine, "
                  "TCG or not. Guest rows include the emulated guest CPU: they need KVM.")]
    if tcg:
        notes.append(Note("Guests ran under TCG here: the guest rows and their ratio to the QEMU image file below "
                          "them measure instruction emulation, NOT the device model. Read the host-side rows.",
                          "warn"))
    native = [n for n in order if rows[n].holds_under_tcg and rows[n].below]
    charts = [Chart(f"Each host-side layer over the one below ({test})", "bar", "record", "layer / layer below",
                    [_series(rows[n].layer, [_est(vs, n, test, r) for r in records], records) for n in native],
                    ref_lines=[(1.0, "no cost")]) for test in LAYER_TESTS]
    summary = []
    for n in native:
        below = rows[n].below
        assert below is not None  # native rows have one
        for rec in dict.fromkeys([records[0], records[-1]]):  # the smallest and the largest record
            r = _est(vs, n, "write", rec)
            if r and finite_or_none(r.mean) is not None:
                summary.append(f"{rows[n].layer} / {rows[below].layer}: write at {rec} records "
                               f"= {r.mean:.2f}x (host side, holds under TCG)")
    return summary, [Section("Layers of the virtual disk", [
        Table("Throughput per layer (MiB/s, median and its 95% interval)",
              ["record", "layer", "tool", *LAYER_TESTS, "on this machine"], mib_rows, notes=list(notes)),
        Table("What each layer costs: its throughput over the layer below (ratio of medians, 95% interval)",
              ["record", "layer", "over", *LAYER_TESTS, "on this machine"], cost_rows, notes=list(notes)),
        *charts,
    ], intro=(
        "From the device up, each row adds one layer of a virtual disk and does the same thing: sequential "
        "requests of one record size, one in flight, the same bytes, O_DIRECT (cache=none, aio=threads, as the "
        "guests' disks). fio drives the bare loop device; qemu-img bench drives QEMU's block layer on that device "
        "(raw), then on a fresh raw and a fresh qcow2 image file in ext4; the guests' rows are iozone's write and "
        "read on their raw image file in ext4. A ratio below 1 is what the layer costs."))]
