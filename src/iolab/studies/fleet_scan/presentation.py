"""fleet-scan's presentation: which hosts are outliers (the headline), every host against the
fleet's median per pattern (table and one chart per pattern), the fleet's aggregate with its
start spread and common window, and the hosts' clocks."""

from __future__ import annotations

from collections.abc import Mapping

from iolab.analysis.record import plotted
from iolab.analysis.trials import Doc
from iolab.report.model import Chart, Note, Section, Series, Table, Tag
from iolab.studies.common import fmt_est
from iolab.studies.fleet_scan.analysis import FleetScanFindings, VsMedian

UNITS = {"iops": "IOPS", "bw_mib_s": "MiB/s"}


def ratio_text(vs: VsMedian | None) -> str:
    if not vs:
        return "–"
    return _ratio(vs.ratio, vs.ci95)


def _x(r: float) -> str:
    """A ratio to two significant digits at least (0.0039, 0.51, 1.03): never 0.00."""
    return f"{r:.2f}" if 0.1 <= r < 10 else f"{r:.2g}"


def _ratio(r: float, ci: list[float]) -> str:
    return f"{_x(r)}× [{_x(ci[0])}, {_x(ci[1])}]"


def _pct(r: float) -> str:
    d = (r - 1) * 100
    return f"{d:+.0f} %" if abs(d) < 99 else f"{d:+.3g} %"


def headline(f: FleetScanFindings) -> list[str]:
    n, k = len(f.hosts), len(f.patterns)
    lines = [f"{n} host(s), {k} pattern(s); a host is named when it is more than ±{f.tolerance:.0%} from the "
             f"fleet median with {f.alpha:.0%} family-wise error over all {f.tests} host × pattern tests (Holm)"]
    if not f.enough_hosts:
        lines.append(f"only {n} host(s): a median of fewer than 3 hosts cannot say which one differs; nobody is named")
    elif not f.outliers:
        lines.append("no outlier: every host is within the tolerance of the fleet median, or indistinguishable from it")
    else:
        by_host: dict[str, list[str]] = {}
        for o in f.outliers:
            by_host.setdefault(o.host, []).append(f"{o.pattern} {_pct(o.ratio)} ({_ratio(o.ratio, o.ci95)})")
        for h, what in by_host.items():
            lines.append(f"outlier {h}: " + "; ".join(what))
    if f.failed_hosts:
        lines.append("hosts that failed in some trials: " + ", ".join(
            f"{h} ({len(v)}×)" for h, v in sorted(f.failed_hosts.items())))
    return lines


def _vs(f: FleetScanFindings, p: str, h: str) -> VsMedian | None:
    r = f.per_host[p].get(h)
    return r.vs_median if r else None


def _ratio_table(f: FleetScanFindings) -> Table:
    """Host × pattern: the host's ratio to the fleet median, outliers tagged."""
    rows: list[list[object]] = []
    for h in f.hosts:
        row: list[object] = [h]
        for p in f.patterns:
            vs = _vs(f, p, h)
            row.append(Tag(ratio_text(vs), "bad") if vs and vs.outlier else ratio_text(vs))
        rows.append(row)
    notes = [Note("Marked: an outlier (more than the tolerance from the median, after Holm). The host's result "
                  "over the median of all hosts in the same trial: the geometric mean over the repetitions with "
                  "its 95 % interval. Paired per trial, so load every host shares cancels; hosts that share one "
                  "machine's CPUs also differ by the order fio starts them in.")]
    for h, reasons in sorted(f.failed_hosts.items()):
        notes.append(Note(f"{h} failed in {len(reasons)} trial(s), its other results are kept: {reasons[0]}", "warn"))
    return Table("Each host over the fleet median (× [95% interval])", ["host", *f.patterns], rows, notes=notes)


def _value_table(f: FleetScanFindings) -> Table:
    """Host × pattern: the host's own result with its interval."""
    cols = ["host"] + [f"{p} ({UNITS.get(f.metric_of[p], f.metric_of[p])})" for p in f.patterns]
    rows: list[list[object]] = [[h, *(fmt_est(r.estimate if (r := f.per_host[p].get(h)) else None)
                                      for p in f.patterns)] for h in f.hosts]
    return Table("Each host's own result (median and its 95% interval)", cols, rows, notes=[Note(
        "These intervals include what changed from trial to trial for every host at once; the ratios above do not.")])


def _chart(f: FleetScanFindings, p: str) -> Chart:
    m = f.metric_of[p]
    flagged = {o.host for o in f.outliers if o.pattern == p}
    xs = [f"{h} (outlier)" if h in flagged else h for h in f.hosts]
    pts = [plotted(r.estimate if (r := f.per_host[p].get(h)) else None) for h in f.hosts]
    med = f.fleet_median.get(p)
    return Chart(f"{p}: {UNITS.get(m, m)} per host", "bar", "host", UNITS.get(m, m),
                 [Series(m, xs, [e[0] for e in pts], [e[1] for e in pts], [e[2] for e in pts])],
                 ref_lines=[(med, "fleet median")] if med else [])


def _aggregate_table(f: FleetScanFindings) -> Table:
    rows: list[list[object]] = []
    notes: list[Note] = []
    for p in f.patterns:
        a = f.aggregate[p]
        spread, window = a.fleet_start_spread_ms, a.fleet_window_s
        covered = f"{a.hosts_ok_min} of {a.hosts}" if a.hosts is not None else "–"
        p99 = a.read_clat_p99_us or a.write_clat_p99_us
        rows.append([f"{p} ({UNITS.get(a.metric, a.metric)})", fmt_est(a.value), covered,
                     f"{spread.median:.0f} (max {spread.max:.0f})" if spread else "–",
                     f"{window.median:.2f}" if window else "–", fmt_est(p99)])
        if a.windows_unmeasured:
            notes.append(Note(f"{p}: in {a.windows_unmeasured} trial(s) the hosts' logs left no common window; "
                              "those aggregates sum whole runs", "warn"))
        if a.hosts is not None and a.hosts_ok_min is not None and a.hosts_ok_min < a.hosts:
            notes.append(Note(f"{p}: some trials' aggregate covers only {a.hosts_ok_min} of {a.hosts} hosts "
                              "(a host failed; flag fleet_partial)", "warn"))
    notes.append(Note("start spread: how long after the first host's job the last one started (fio starts them one "
                      "after another); window: how long all of them ran together; p99: completion latency of the "
                      "hosts' merged histograms inside that window."))
    return Table("The fleet's aggregate over the window in which every host ran",
                 ["pattern", "aggregate", "hosts", "start spread ms", "window s", "p99 µs"], rows, notes=notes)


def _clock_table(f: FleetScanFindings) -> Table:
    skew = f.clock.skew_ms
    spread = f.clock.spread_ms
    rows = [[h, "–" if (s := skew.get(h)) is None else f"{s:+.1f}"] for h in f.hosts]
    return Table("Clocks: each host's time minus this machine's, measured before load (ms)", ["host", "skew ms"],
                 rows, notes=[Note(f"spread between hosts: {spread:.1f} ms" if spread is not None else
                                   "spread between hosts: not measured"),
                              Note("0 for a host on this machine's clock (a unix socket, loopback, same_machine); "
                                   "else the minimum-delay estimate of several probes before load, low by the "
                                   "fastest probe's delivery time, and measured again through the scan (each trial's "
                                   "own value is in its facts, fleet_clock_skew_ms; docs/fleet.md).")])


def present(doc: Doc, f: FleetScanFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    f = FleetScanFindings.coerce(f)
    summary = headline(f)
    charts = [_chart(f, p) for p in f.patterns]
    return summary, [
        Section("Hosts against the fleet median", [_ratio_table(f), _value_table(f)], intro=(
            "The same fio jobs ran on every host at once, through fio's client/server mode. A host is an outlier "
            f"when its result is more than ±{f.tolerance:.0%} from the median of the hosts, after Holm's "
            "correction over every host and pattern (docs/studies/fleet-scan.md).")),
        Section("Per host, per pattern", charts, layout="grid"),
        Section("The fleet's aggregate", [_aggregate_table(f)], intro=(
            "Aggregate IOPS and bandwidth are the sum of each host's mean rate inside the common window (from the "
            "last host's start to the first host's end); latency percentiles come from the hosts' merged "
            "histograms, never from averaged percentiles (docs/fleet.md).")),
        Section("Clocks", [_clock_table(f)]),
    ]
