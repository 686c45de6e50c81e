"""sync-amplification's presentation: the layer waterfall, the counts at every layer, R3's claim
next to the measurement, the recommendations with their measured effect, the causes and
the throughput (labelled TCG where it is)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from iolab.analysis.record import plotted
from iolab.analysis.trials import Doc
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import fmt_est
from iolab.studies.sync_amplification.analysis import (
    LAYERS,
    R3_CLAIM,
    AmpRow,
    Recommendation,
    SyncAmplificationFindings,
    variant,
)
from iolab.studies.sync_amplification.cost import CostFindings, gain_text
from iolab.studies.sync_amplification.spec import DEFAULTS, PATTERNS


def _label(r: AmpRow) -> str:
    return f"{variant(r)} · {r.pattern} · fs={r.guest_fs}"


def _n(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) and v != int(v) else f"{int(v)}")


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _chain(r: AmpRow) -> str:
    """The layer diagram of one configuration, per guest sync: guest → blk → QEMU → host → device."""
    p = r.per_guest_sync
    return " → ".join(_f(p[k]) for k, _ in LAYERS)


def _waterfall_charts(amp: list[AmpRow], per_chart: int = 5) -> list[Chart]:
    """One grouped-bar chart per pattern and guest fs (at most `per_chart` configurations each):
    every configuration is a group of bars, one per layer, in stack order."""
    charts = []
    cells: dict[tuple[str, str], list[AmpRow]] = defaultdict(list)
    for r in amp:
        cells[(r.pattern, r.guest_fs)].append(r)
    for (pattern, fs), rows in cells.items():
        chunks = [rows[i:i + per_chart] for i in range(0, len(rows), per_chart)]
        for n, chunk in enumerate(chunks):
            xs = [variant(r) for r in chunk]
            part = f" ({n + 1}/{len(chunks)})" if len(chunks) > 1 else ""
            sync = "O_DSYNC write" if pattern.startswith("sequential") else "guest fdatasync"
            charts.append(Chart(
                f"Waterfall: {pattern}, guest fs={fs}{part} — per {sync}, guest → QEMU → host → device",
                "bar", "disk configuration", f"count per {sync}",
                [Series(name, xs, [r.per_guest_sync[k] for r in chunk]) for k, name in LAYERS],
                ref_lines=[(R3_CLAIM, "R3: ≥3 host syncs (qcow2)"), (1.0, "1 per guest sync")]))
    return charts


def _rec_cells(rec: Recommendation, cols: list[tuple[str, str]]) -> list[str]:
    cells = []
    for pattern, fs in cols:
        ms = [m for m in rec.measured if (m.pattern, m.guest_fs) == (pattern, fs)]
        if not ms:
            cells.append("not in this run")
            continue
        parts = []
        for m in ms:
            who = f"{m.baseline.split()[0]}: " if len(rec.measured) > len(
                {(x.pattern, x.guest_fs) for x in rec.measured}) else ""
            parts.append(f"{who}{_f(m.baseline_factor_host_syncs)} → {_f(m.factor_host_syncs)} "
                         f"(dev {_f(m.baseline_factor_device_flushes)} → {_f(m.factor_device_flushes)})")
        cells.append("; ".join(parts))
    return cells


def present(doc: Doc, f: SyncAmplificationFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    f = SyncAmplificationFindings.coerce(f)
    amp = f.amplification
    tcg = f.accel == "tcg"
    summary = [f"accelerator: {f.accel or 'n/a'}" + (" (counts hold; throughput is not representative)"
                                                    if tcg else "")]
    plain = [r for r in amp if r.options == DEFAULTS]
    for r in plain:
        summary.append(f"{_label(r)}: {_f(r.factor_host_syncs)} host syncs and "
                       f"{_f(r.factor_device_flushes)} device flushes per guest sync")
    others = [(r, r.factor_host_syncs) for r in amp if r.options != DEFAULTS and r.factor_host_syncs is not None]
    if others:
        lo, lo_f = min(others, key=lambda rf: rf[1])
        hi, hi_f = max(others, key=lambda rf: rf[1])
        summary.append(f"{len(others)} more configurations (qcow2/raw options): from {_f(lo_f)} "
                       f"({_label(lo)}) to {_f(hi_f)} ({_label(hi)}) host syncs per guest "
                       "sync; see the waterfall and the recommendation table")
    charts = _waterfall_charts(amp)
    flow_cols = ["configuration", "pattern", "guest fs", "guest data syncs", "per guest sync: guest → guest blk "
                 "flushes → QEMU flushes → host syncs → host device flushes"]
    flow = Table("Layer diagram per configuration (counts per guest data sync)", flow_cols,
                 [[variant(r), r.pattern, r.guest_fs, _n(r.guest_fdatasync), _chain(r)] for r in amp],
                 notes=[Note("Read left to right: one guest data sync (fdatasync, or one O_DSYNC write in the "
                             "sequential pattern) becomes this many flushes in the guest block layer, flush "
                             "requests at QEMU's virtual device, syncs QEMU asks of the host kernel for the image "
                             "(fdatasync/fsync syscalls + io_uring flushes), and flushes at the host device under "
                             "the image.")])
    cols = ["configuration", "pattern", "guest fs", "guest data syncs", "guest flushes", "guest blk writes",
            "guest write requests", "guest FUA writes", "QEMU flush ops", "QEMU writes", "host fdatasync", "host fsync",
            "host io_uring flushes",
            "host syncs (total)", "host pwrite*", "host io_submit", "host io_uring writes", "host device writes",
            "host device flushes", "host syncs / guest sync", "device flushes / guest sync"]
    rows = [[variant(r), r.pattern, r.guest_fs, _n(r.guest_fdatasync), _n(r.guest_flushes),
             _n(r.guest_block_writes), _n(r.guest_write_requests), _n(r.guest_fua_writes),
             _n(r.qemu_flush_ops), _n(r.qemu_write_ops),
             _n(r.host_fdatasync_syscalls), _n(r.host_fsync_syscalls), _n(r.host_io_uring_flushes),
             _n(r.host_fdatasync), _n(r.host_pwrite), _n(r.host_io_submit),
             _n(r.host_io_uring_writes),
             _n(r.host_writes), _n(r.host_device_flushes), _f(r.factor_host_syncs),
             _f(r.factor_device_flushes)] for r in amp]
    notes = [Note("Counts are means over the repetitions of one trial (a fixed number of 64 KiB writes; "
                  "append/overwrite: each followed by fdatasync, the last by fsync; sequential: O_DSYNC writes, "
                  "each its own sync). Each column is explained in docs/studies/sync-amplification.md.")]
    lost = [r for r in amp if r.options.get("aio") == "io_uring" and not r.io_uring_counted]
    if lost:
        notes.append(Note("QEMU trace events were unavailable for " + ", ".join(_label(r) for r in lost) +
                          ": flushes submitted through io_uring could not be counted, so their host sync "
                          "count is shown as unknown (–), not as 0.", "warn"))
    table = Table("Counts per trial at every layer", cols, rows, notes=notes)
    cause_keys = sorted({k for r in amp for k in r.causes})
    cause_table = Table("qcow2 metadata work per trial (QEMU trace events): why the extra syncs happen",
                        ["configuration", "pattern", "guest fs", *cause_keys],
                        [[variant(r), r.pattern, r.guest_fs, *[_n(r.causes.get(k)) for k in cause_keys]]
                         for r in amp if r.format == "qcow2"],
                        notes=[Note("cluster_allocations: qcow2_handle_alloc; refcount_block_writes / "
                                    "l2_table_writes: a dirty cache entry written to the image; "
                                    "refcount_cache_flushes / l2_cache_flushes: calls to flush that cache (also "
                                    "when nothing is dirty). An allocating write costs one ordering sync "
                                    "(refcount block before L2 entry) on top of the guest's own.")])
    r3_rows = [[variant(r), r.pattern, r.guest_fs, f">= {R3_CLAIM:.0f}", _f(r.factor_host_syncs),
                "–" if r.factor_host_syncs is None else ("yes" if r.factor_host_syncs >= R3_CLAIM else "no")]
               for r in amp if r.format == "qcow2"]
    r3 = Table("R3's claim next to what was measured (host syncs per guest sync, qcow2)",
               ["configuration", "pattern", "guest fs", "R3 (QEMU 2.1.2)", "measured", "claim holds here"], r3_rows,
               notes=[Note(f"Measured with {_qemu_version(doc)}; R3 used QEMU 2.1.2 (Linux 3.10). The claim is "
                           "checked per configuration, never assumed; the Causes section shows the metadata work "
                           "behind each extra sync (per cluster allocation: the refcount block is synced before "
                           "the L2 entry that points at the new cluster).")])
    warn = [Note("Guests ran under TCG software emulation: throughput includes instruction emulation and is "
                 "NOT representative of KVM. The counts above do not depend on CPU speed.", "warn")] if tcg else []
    thr_rows = [[variant(r), r.pattern, r.guest_fs, fmt_est(r.syncs_per_s)] for r in f.throughput]
    thr_table = Table("Write+sync pairs per second (median and its 95% interval)" + (" — TCG" if tcg else ""),
                      ["configuration", "pattern", "guest fs", "syncs/s"], thr_rows, notes=warn)
    rec_cols = sorted({(r.pattern, r.guest_fs) for r in amp},
                      key=lambda c: (PATTERNS.index(c[0]) if c[0] in PATTERNS else 9, c[1] != "none", c[1]))
    rec = Table("What cuts amplification, and what it costs (measured: host syncs per guest sync, "
                "baseline → this configuration; dev = host device flushes per guest sync)",
                ["configuration", *[f"{p}, fs={fs}" for p, fs in rec_cols], "effect", "cost or risk"],
                [[r.configuration, *_rec_cells(r, rec_cols), r.effect, r.cost_or_risk]
                 for r in f.recommendations],
                notes=[Note("The baseline is plain qcow2 (cache=none, aio=threads, 64k clusters, no "
                            "preallocation) for the qcow2 options and cache modes, plain raw for raw's aio "
                            "variants, and qcow2 for 'raw format'; both measured in this run with the same "
                            "pattern and guest fs. 'not in this run': the run did not include that "
                            "configuration (the --quick matrix has only plain raw and qcow2).")])
    cost = f.cost
    if cost:
        summary.extend(_cost_summary(cost))
    return summary, [
        Section("Layer waterfall", [*charts, flow, table], intro=(
            "One guest data sync, followed down the stack: the guest block layer turns it into a flush (two "
            "with ext4's journal when the file grows), QEMU's device sees the flush, QEMU asks the host kernel "
            "to sync the image (qcow2 adds an ordering sync for each cluster allocation), and the host device "
            "under the image flushes (the host ext4 adds a journal commit when the image file grows).")),
        Section("R3 claim", [r3]),
        Section("Recommendations", [rec]),
        Section("Causes", [cause_table]),
        Section("Throughput", [thr_table]),
        *([_cost_section(cost, tcg)] if cost else []),
    ]


def _cost_chart(cost: CostFindings, tcg: bool) -> Chart | None:
    """Throughput against default qcow2 per application (bars with 95 % CI), one series per
    configuration; R3's barrier gains are in the table beside (they differ per application)."""
    rows = [(r, vs) for r in cost.rows if (vs := r.throughput_vs_baseline) is not None]
    if not rows:
        return None
    apps = list(dict.fromkeys(r.r3_name for r in cost.rows))
    series = []
    for conf in dict.fromkeys(r.configuration for r, _ in rows):
        by = {r.r3_name: plotted(vs) for r, vs in rows if r.configuration == conf}
        ys = [by[a][0] if a in by else None for a in apps]
        lo = [by[a][1] if a in by else None for a in apps]
        hi = [by[a][2] if a in by else None for a in apps]
        series.append(Series(conf, apps, ys, lo, hi))
    return Chart(f"Throughput against default {cost.baseline} (median ratio, 95% interval)"
                 + (" — TCG: not the disk's speed" if tcg else ""),
                 "bar", "application (guest ext4)", f"throughput / {cost.baseline}", series,
                 ref_lines=[(1.0, f"same as {cost.baseline}"), (1.2, "R3's 'large' gain (+20 %)")])


def _cost_summary(cost: CostFindings) -> list[str]:
    out = []
    for a in cost.against_r3:
        out.append(f"cost, {a.r3_name} on {a.configuration} vs {cost.baseline}: {gain_text(a.measured)} "
                   f"(R3, barrier vs stock: {a.r3_gain_pct:+.1f} %): {a.verdict}")
    return out


def _cost_section(cost: CostFindings, tcg: bool) -> Section:
    base = cost.baseline
    rows = [[r.r3_name, r.configuration, fmt_est(r.throughput),
             gain_text(r.throughput_vs_baseline) if r.configuration != base else "(baseline)",
             fmt_est(r.latency_us),
             gain_text(r.latency_vs_baseline) if r.configuration != base else "(baseline)",
             ", ".join(x.split(":")[0] for x in r.flags) or "–"] for r in cost.rows]
    warn = [Note("Guests ran under TCG software emulation: these speeds are the emulated CPU's, not the disk's; "
                 "the verdicts below are 'not testable here'. Run on a machine with KVM.", "warn")] if tcg else []
    table = Table(f"What the syncs cost: R3's applications on the guest ext4, change against default {base}",
                  ["application", "configuration", "throughput", f"throughput vs {base} [95% interval]",
                   "latency (µs)", f"latency vs {base} [95% interval]", "flags"], rows,
                  notes=[*warn, Note("Measured without the syscall tracer (it slows exactly the syncs being priced): "
                                     "these trials run apart from the counted ones. dd and Mobibench make a fixed "
                                     "number of 64 KiB durable writes per trial (throughput: durable writes/s; "
                                     "latency: one write plus its fdatasync); varmail runs for a set time "
                                     "(operations/s; latency: all its operations). Each figure is the median of the "
                                     "repetitions.")])
    fam = cost.family
    chart = _cost_chart(cost, tcg)
    against = [[a.r3_name, f"{a.r3_gain_pct:+.1f} % ({a.claim})",
                f"{a.configuration}: {gain_text(a.measured)}", a.verdict, a.reason]
               for a in cost.against_r3]
    against += [[n.r3_name, f"{n.r3_gain_pct:+.1f} %", "not measured", "–", n.reason]
                for n in cost.not_measured]
    r3 = Table("Against R3: the configurations without qcow2's ordering syncs in the role of R3's barrier QEMU",
               ["R3 workload", "R3: barrier vs stock (claim)", f"here, vs {base} [family interval]", "verdict",
                "reason"], against,
               notes=[Note(f"R3's finding is about size: dd append gains a lot when ordering gets cheaper (large: "
                           f"at least +20 %), the others little (small: within x1.2 either way); each verdict checks "
                           f"that class, not the exact percentage (raw or lazy refcounts "
                           f"remove the syncs, R3's barrier only makes them cheaper; R3 ran an SSD, QEMU 2.1.2). The "
                           f"{fam.verdicts} verdicts are one family: each reads an interval at tail "
                           f"{fam.tail:.2g} (Bonferroni over the {fam.verdicts} verdicts), so the chance that "
                           "any holds or differs here is wrong is at most 5 %; undecided ones say how many more "
                           "repetitions would likely decide them.")])
    return Section("Cost", [*([chart] if chart else []), table, r3], intro=(
        "What the extra syncs cost an application: R3's workloads in the guest, on the configurations that keep "
        f"qcow2's ordering syncs ({base}) or remove them (raw, lazy refcounts, preallocation), and R3's published "
        "change beside the measured one."))


def _qemu_version(doc: Doc) -> str:
    for t in doc["trials"]:
        v = (t.get("manifest") or {}).get("target", {}).get("qemu_version")
        if v:
            return f"QEMU {v}" if not str(v).lower().startswith("qemu") else str(v)
    return "this host's QEMU"
