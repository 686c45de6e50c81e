"""cgroup-weights' presentation: class ratio vs N per controller, the headline table, the share
over time at the worst N, the break point and why, the iodepth-1 diagnostic, the tenant and
the sanity gates (or, when the gate failed, only why there are no numbers)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Protocol

from iolab.analysis.record import plotted
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc
from iolab.analysis.verdicts import DIFFERS, HOLDS
from iolab.report.model import Chart, Note, Section, Series, Table, Tag, Tone
from iolab.studies.cgroup_weights.analysis import (
    BREAK_LOG2,
    CLASSES,
    CgroupWeightsFindings,
    ControllerFindings,
    DepthCheck,
    TenantFindings,
    TenantMetrics,
    TenantReference,
    as_int,
    controller_of,
    groups_n,
    sweep_trials,
    trial_entry,
)
from iolab.studies.common import fmt_est, ok_trials


def present(doc: Doc, f: CgroupWeightsFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    f = CgroupWeightsFindings.coerce(f)
    main = f.controller
    by = f.by_groups
    summary = _summary(f)
    sections: list[Section] = []
    gate_notes = [Note(f"sanity gate {k}: {v.verdict}", "warn" if v.enforces_weights and not v.active else "info")
                  for k, v in f.sanity_gate.items()]
    if f.controller_active is False:
        sections.append(Section("Controller not active", gate_notes, intro=(
            f"Two groups weighted 1:4 did not share the device 1:4 under {main}: the controller is not "
            "enforcing weights on this device, so no sweep was run. Check the scheduler and cgroup mode "
            "(`iolab doctor`).")))
        return summary, sections
    for ctrl, cf in f.by_controller.items():
        if cf.by_groups:
            sections.append(_ratio_section(ctrl, cf))
    if main and by:
        sections.append(_headline_section(f, main))
        worst = _worst_share_chart(doc, f, main)
        if worst:
            sections.append(Section("Per-class share over time at the worst N", [worst]))
        sections.append(_break_section(f))
        if f.depth_check:
            sections.append(_depth_section(f.depth_check))
    if f.tenant:
        sections.extend(_tenant_sections(f))
    if gate_notes:
        sections.append(Section("Sanity gate", gate_notes, intro=(
            "Before each controller's trials: two groups weighted 1:4, 5 s. An enforcing controller must come "
            "within 2x of 4; scheduler none must not (negative control).")))
    return summary, sections


class _Verdicted(Protocol):
    @property
    def verdict(self) -> str: ...


def _verdict_tag(v: _Verdicted) -> Tag:
    """The class ratios' verdict (holds / differs / undecided: where their intervals lie against the
    weights ±15 %)."""
    tone: Tone = "good" if v.verdict == HOLDS else "bad" if v.verdict == DIFFERS else "warn"
    return Tag(v.verdict, tone)


def _summary(f: CgroupWeightsFindings) -> list[str]:
    main, by = f.controller, f.by_groups
    lines = [f"controller {main} ({f.backend}, cgroup v{f.cgroup_version})"]
    if f.controller_active is False:
        return lines + ["controller not active: the 1:4 sanity gate failed, the sweep was skipped"]
    for n, v in by.items():
        r = v.class_ratio
        worst = v.max_abs_log2_error.mean
        lines.append(f"N={n}: ratios 1 : " + " : ".join(_num(r[c].mean) for c in CLASSES[1:])
                     + f" (ideal 1 : 2 : 4 : 8; within ±15 %: {_verdict_tag(v).text})"
                     + f", worst share error x{2 ** (worst if math.isfinite(worst) else 0):.2f}"
                     + (f" (flags: {', '.join(v.flags)})" if v.flags else ""))
    bn = f.breakdown_n
    if by:
        lines.append(f"breakdown at N={bn}" if bn is not None else
                     f"no breakdown up to N={max(int(n) for n in by)}")
    none = f.by_controller.get("none")
    if none and none.by_groups:
        n0 = next(iter(none.by_groups))
        r800 = none.by_groups[n0].class_ratio["800"].mean
        lines.append(f"none (control), N={n0}: 800/100 ratio {_num(r800)} -> "
                     + ("weights NOT enforced, as expected" if not f.none_proportional
                        else "UNEXPECTEDLY proportional"))
    wc = f.work_conservation or {}
    if wc:
        n0 = next(iter(wc))
        lines.append(f"work conservation N={n0}: {main} gives {_num(wc[n0]['ratio'].mean)}x the IOPS of none")
    for app, per in (f.tenant_by_app or {"db_bench": f.tenant or {}}).items():
        for ctrl, t in per.items():
            lines.append(f"{app} under {ctrl}: {_num(t.alone.tenant_ops_s.mean)} ops/s alone, "
                         f"{_num(t.beside.tenant_ops_s.mean)} beside the groups; read p99 "
                         f"{_num(t.alone.tenant_read_p99_us.mean)} -> "
                         f"{_num(t.beside.tenant_read_p99_us.mean)} µs"
                         + (" (R4: 8,412.8 ops/s, read p99 271 µs, on its SATA SSD)" if app == "ycsb" else ""))
    return lines


def _num(x: float | None) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _series(name: str, xs: list[float], points: list[Estimate]) -> Series:
    pts = [plotted(e) for e in points]
    return Series(name, xs, [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts])


def _ratio_section(ctrl: str, cf: ControllerFindings) -> Section:
    by = cf.by_groups
    ns = [int(n) for n in by]
    series = [_series(f"{c}/100", [float(n) for n in ns], [by[str(n)].class_ratio[c] for n in ns])
              for c in CLASSES[1:]]
    notes = [Note(f"N={n}: " + "; ".join(v.flag_details), "warn") for n, v in by.items() if v.flags]
    chart = Chart(f"Class IOPS ratio vs N under {ctrl} (ideal 2, 4, 8)", "line", "groups N",
                  "IOPS / IOPS of weight 100",
                  series, x_log2=True, y_log=True, ref_lines=[(2, "2"), (4, "4"), (8, "8")], notes=notes + [
                      Note("Per-group IOPS of each weight class over that of the weight-100 class, from the kernel's "
                           "per-group counters in the steady window; median over repetitions with its 95% "
                           "interval band.")])
    return Section(f"Class ratio vs N: {ctrl}", [chart])


def _headline_section(f: CgroupWeightsFindings, main: str) -> Section:
    by = f.by_groups
    wc = f.work_conservation or {}
    cols = ["N", "200/100", "400/100", "800/100", "worst |log2| err", "min share (of entitled)",
            "Jain (floor if ignored)", "aggregate IOPS", f"IOPS {main}/none", "generator CPU", "machine CPU",
            "ratios ±15 %"]
    rows: list[list[object]] = []
    notes = []
    for n, v in by.items():
        r = v.class_ratio
        rows.append([n, fmt_est(r["200"]), fmt_est(r["400"]), fmt_est(r["800"]), fmt_est(v.max_abs_log2_error),
                     fmt_est(v.min_share), f"{_num(v.jain.mean)} ({v.jain_floor:.3f})",
                     fmt_est(v.aggregate_iops), fmt_est(wc.get(n, {}).get("ratio")),
                     fmt_est(v.generator_cpu_busy), fmt_est(v.machine_cpu_busy),
                     _verdict_tag(v)])
        if "generator_cpu_bound" in v.flags or "cpu_saturated" in v.flags:
            label = "generator CPU-bound" if "generator_cpu_bound" in v.flags else "CPUs saturated"
            notes.append(Note(f"N={n}: {label} — " + "; ".join(d for d in v.flag_details if "cpu" in d), "warn"))
    notes.append(Note(f"Jain's index is on weight-normalised shares; with 1:2:4:8 weights an equal split "
                      f"(weights ignored) still scores {next(iter(by.values())).jain_floor:.3f}, "
                      "so read it only beside the ratios."))
    title = f"Weight adherence per N under {main} (median and its 95% interval)"
    return Section(f"Headline per N ({main})", [Table(title, cols, rows, notes=notes)])


def _worst_share_chart(doc: Doc, f: CgroupWeightsFindings, main: str) -> Chart | None:
    by = f.by_groups
    worst = max(by, key=lambda n: _finite_or_zero(by[n].max_abs_log2_error.mean))
    ts = [t for t in sweep_trials(ok_trials(doc)) if controller_of(t) == main and groups_n(t) == int(worst)]
    ss = next((trial_entry(t, "share_series") for t in ts if trial_entry(t, "share_series")), None)
    if not ss:
        return None
    series = [Series(f"weight {c}", ss["t"], ss["share"][c]) for c in ss["share"]]
    refs = [(v, f"ideal {c}") for c, v in ss["ideal"].items()]
    return Chart(f"Share of completed I/Os per weight class over time, N={worst}, {main}", "line", "seconds",
                 "share of I/Os", series, ref_lines=refs, notes=[Note(
                     f"Kernel counters every sample interval while all groups ran; the measurement window is "
                     f"{ss['window'][0]}–{ss['window'][1]} s (warm-up cut by steady-state detection).")])


def _finite_or_zero(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def _break_section(f: CgroupWeightsFindings) -> Section:
    bn, sig = f.breakdown_n, f.breakdown_signals
    blocks: list[Note | Table] = []
    intro = (f"Break point: the smallest N whose mean worst per-group |log2(observed share / weight share)| exceeds "
             f"log2(1.5) = {BREAK_LOG2:.3f} (some group got 1.5x or 1/1.5 of its entitled share). "
             f"95% interval bracket [largest N surely held, smallest N surely broken]: {f.breakdown_bracket}.")
    if bn is None or not sig:
        blocks.append(Note("No N exceeded the threshold."))
        return Section("Break point and why", blocks, intro=intro)
    rows: list[list[object]] = [[k, str(v)] for k, v in sig.to_json().items()]
    notes = []
    if (sig.machine_cpu_busy or 0) >= 0.9:
        notes.append(Note(f"At N={bn} the CPUs were {sig.machine_cpu_busy:.0%} busy (fio's share "
                          f"{(sig.generator_cpu_busy or 0):.0%}): processes waited for CPU, so CPU "
                          "scheduling can "
                          "decide who submits I/O.", "warn"))
    nr = as_int(sig.nr_requests)
    lim = sig.bfq_tag_limit_min
    depth = sig.iodepth_per_group
    if sig.scheduler == "bfq" and lim is not None and isinstance(depth, (int, float)) and depth and lim <= depth:
        notes.append(Note(
            f"BFQ (Linux >= 5.17, bfqq_request_over_limit) limits each group to nr_requests x weight / sum of active "
            f"weights requests and trims the tag depth of a group above that to 1. Here nr_requests = {nr}, so the "
            f"weight-100 groups may hold only {lim:.0f} requests against an iodepth of {depth}: "
            "they drain during their service slot, BFQ expires them, and the heavy groups take the device.", "warn"))
    if sig.tag_pressure:
        notes.append(Note(f"I/O depth x N = {sig.iodepth_total:.0f} >= nr_requests = {nr}: requests also wait "
                          "for a scheduler tag before BFQ sees them.", "warn"))
    dc = (f.depth_check or {}).get(f.controller or "", {})
    if dc:
        held = [n for n, v in dc.items() if v.holds]
        notes.append(Note(f"Diagnostic: the same sweep with iodepth 1 (below every group's request limit) holds "
                          f"1:2:4:8 at N = "
                          f"{', '.join(held) or 'none of ' + ', '.join(dc)}.", "info" if held else "warn"))
    if sig.min_group_ios is not None and sig.min_group_ios < 100:
        notes.append(Note(f"The smallest group completed only {sig.min_group_ios:.0f} I/Os in the "
                          f"{sig.window_s} s window: per-group shares are counting noise there.", "warn"))
    blocks.append(Table(f"Signals recorded at N={bn}", ["signal", "value"], rows, notes=notes))
    return Section("Break point and why", blocks, intro=intro)


def _depth_section(dc: dict[str, dict[str, DepthCheck]]) -> Section:
    rows: list[list[object]] = [
        [ctrl, n, fmt_est(v.class_ratio["200"]), fmt_est(v.class_ratio["400"]), fmt_est(v.class_ratio["800"]),
         fmt_est(v.max_abs_log2_error), fmt_est(v.aggregate_iops), _verdict_tag(v)]
        for ctrl, per in dc.items() for n, v in per.items()]
    return Section("Diagnostic: the same N at iodepth 1", [Table(
        "iodepth 1 per group, so N x iodepth stays below nr_requests (median and its 95% interval)",
        ["controller", "N", "200/100", "400/100", "800/100", "worst |log2| err", "aggregate IOPS", "ratios ±15 %"],
        rows)],
        intro="If the break comes from BFQ's per-group request limit (nr_requests x w / sum w) falling below the "
              "groups' iodepth, iodepth 1 must restore the ratios until that limit itself reaches 1 request.")


TITLES = {"ycsb": "YCSB workload A on RocksDB", "db_bench": "RocksDB db_bench"}
WHAT = {"ycsb": "YCSB 0.17.0 workload A (read 0.5 / update 0.5, zipfian), 1 thread, direct reads, a fresh "
                "100 000-record database each trial",
        "db_bench": "db_bench readrandomwriterandom (90% reads, direct reads)"}
# per application, column -> the tenant's metric and R4's published value of it, in the order shown
# (YCSB's: what R4 published, and the update side); a column no trial reported is left out
Read = Callable[[TenantMetrics], Estimate | None]
Published = Callable[[TenantReference], float | None]
LATENCY_COLUMNS: dict[str, dict[str, tuple[Read, Published]]] = {
    "ycsb": {"read mean µs": (lambda e: e.tenant_read_mean_us, lambda r: r.tenant_read_mean_us),
             "read p95 µs": (lambda e: e.tenant_read_p95_us, lambda r: r.tenant_read_p95_us),
             "read p99 µs": (lambda e: e.tenant_read_p99_us, lambda r: r.tenant_read_p99_us),
             "update p99 µs": (lambda e: e.tenant_update_p99_us, lambda r: None)},
    "db_bench": {"read p50 µs": (lambda e: e.tenant_read_p50_us, lambda r: None),
                 "read p99 µs": (lambda e: e.tenant_read_p99_us, lambda r: r.tenant_read_p99_us),
                 "write p99 µs": (lambda e: e.tenant_write_p99_us, lambda r: None)},
}
RATIO_COLUMNS: dict[str, Callable[[TenantFindings], Estimate | None]] = {
    "ops/s": lambda t: t.ops_beside_over_alone, "read mean": lambda t: t.read_mean_beside_over_alone,
    "read p95": lambda t: t.read_p95_beside_over_alone, "read p99": lambda t: t.read_p99_beside_over_alone}


def _tenant_sections(f: CgroupWeightsFindings) -> list[Section]:
    by_app = f.tenant_by_app or {"db_bench": f.tenant or {}}
    return [_tenant_section(app, per, f.tenant_reference) for app, per in by_app.items()]


def _known(e: Estimate | None) -> bool:
    return e is not None and math.isfinite(e.mean)


def _tenant_section(app: str, per: dict[str, TenantFindings], ref: TenantReference | None) -> Section:
    """The tenant alone and beside the groups, beside/alone with CIs, the groups' class ratios
    beside it, and (YCSB, R4's application) R4's published numbers as the reference."""
    title = TITLES.get(app, app)
    r4 = ref if app == "ycsb" else None
    shown = {c: cols for c, cols in LATENCY_COLUMNS.get(app, LATENCY_COLUMNS["db_bench"]).items()
             if any(_known(cols[0](getattr(t, mode))) for t in per.values() for mode in ("alone", "beside"))}
    rows: list[list[object]] = []
    for ctrl, t in per.items():
        for mode, e in (("alone", t.alone), ("beside", t.beside)):
            rows.append([ctrl, mode, fmt_est(e.tenant_ops_s), *(fmt_est(read(e)) for read, _ in shown.values()),
                         fmt_est(e.tenant_iops_kernel)])
    notes: list[Note] = []
    if r4:
        rows.append(["R4 (published)", "beside", f"{r4.tenant_ops_s:,.1f}",
                     *(f"{v:g}" if (v := published(r4)) is not None else "–" for _, published in shown.values()),
                     "–"])
        notes.append(Note(f"R4's numbers are absolute and come from its hardware ({r4.hardware}): the published "
                          "reference, not a value this machine's device should reproduce; the ratios below are "
                          "what carries over."))
    weight = next(iter(per.values())).weight
    blocks: list[Table] = [Table(f"{WHAT.get(app, title)} in its own group, weight {weight} (median, 95% interval)",
                                 ["controller", "run", "ops/s", *shown, "device IOPS (kernel)"], rows, notes=notes)]
    ratio_cols = {c: read for c, read in RATIO_COLUMNS.items() if any(read(t) is not None for t in per.values())}
    rrows: list[list[object]] = [[ctrl, *(fmt_est(read(t)) for read in ratio_cols.values())]
                                 for ctrl, t in per.items()]
    blocks.append(Table(f"{title}: beside the groups / alone (ratio of medians, 95% interval)",
                        ["controller", *ratio_cols], rrows))
    grows: list[list[object]] = []
    for ctrl, t in per.items():
        g = t.groups_beside
        if g:
            grows.append([ctrl, str(g.groups), *(fmt_est(g.class_ratio[c]) for c in CLASSES[1:]),
                          fmt_est(g.max_abs_log2_error), _verdict_tag(g)])
    if grows:
        if r4:
            grows.append(["R4 (published)", "4", *(f"{r4.class_ratio[c]:g}" for c in CLASSES[1:]), "–", "yes"])
        blocks.append(Table(f"The weighted groups beside {title}: class IOPS ratios (median, 95% interval; "
                            "ideal 2, 4, 8)", ["controller", "groups", "200/100", "400/100", "800/100",
                                               "worst |log2| err", "ratios ±15 %"], grows))
    return Section(f"A real application beside the groups ({title})", blocks,
                   intro="R4's second experiment: a database in its own weighted group, alone and beside the "
                         "weighted fio groups, released together. Beside, the groups run until the application's "
                         "timed run has ended, and their numbers come from the window in which it did I/O too.")


