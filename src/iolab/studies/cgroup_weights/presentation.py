"""cgroup-weights' presentation: class ratio vs N per controller, the headline table, the share
over time at the worst N, the break point and why, the iodepth-1 diagnostic, the tenant and
the sanity gates (or, when the gate failed, only why there are no numbers)."""

from __future__ import annotations

import math
from typing import Any

from iolab.analysis.verdicts import DIFFERS, HOLDS
from iolab.report.model import Chart, Note, Section, Series, Table, Tag, Tone
from iolab.studies.cgroup_weights.analysis import (
    BREAK_LOG2,
    CLASSES,
    as_int,
    controller_of,
    groups_n,
    sweep_trials,
    trial_entry,
)
from iolab.studies.common import fmt_est, ok_trials


def present(doc: dict[str, Any], f: dict[str, Any]) -> tuple[list[str], list[Section]]:
    main = f.get("controller")
    by = f.get("by_groups") or {}
    summary = _summary(f)
    sections: list[Section] = []
    gate_notes = [Note(f"sanity gate {k}: {v['verdict']}", "warn" if v.get("enforces_weights") and not v.get("active")
                       else "info") for k, v in (f.get("sanity_gate") or {}).items()]
    if f.get("controller_active") is False:
        sections.append(Section("Controller not active", gate_notes, intro=(
            f"Two groups weighted 1:4 did not share the device 1:4 under {main}: the controller is not "
            "enforcing weights on this device, so no sweep was run. Check the scheduler and cgroup mode "
            "(`iolab doctor`).")))
        return summary, sections
    for ctrl, cf in (f.get("by_controller") or {}).items():
        if cf["by_groups"]:
            sections.append(_ratio_section(ctrl, cf))
    if main and by:
        sections.append(_headline_section(f, main))
        worst = _worst_share_chart(doc, f, main)
        if worst:
            sections.append(Section("Per-class share over time at the worst N", [worst]))
        sections.append(_break_section(f))
        if f.get("depth_check"):
            sections.append(_depth_section(f["depth_check"]))
    if f.get("tenant"):
        sections.extend(_tenant_sections(f))
    if gate_notes:
        sections.append(Section("Sanity gate", gate_notes, intro=(
            "Before each controller's trials: two groups weighted 1:4, 5 s. An enforcing controller must come "
            "within 2x of 4; scheduler none must not (negative control).")))
    return summary, sections


def _verdict_tag(v: dict[str, Any]) -> Tag:
    """The class ratios' verdict (holds / differs / undecided: where their intervals lie against the
    weights ±15 %); runs stored before the verdicts had only a yes/no on the means."""
    verdict = v.get("verdict") or (HOLDS if v.get("holds", v.get("ratios_hold")) else DIFFERS)
    tone: Tone = "good" if verdict == HOLDS else "bad" if verdict == DIFFERS else "warn"
    return Tag(verdict, tone)


def _summary(f: dict[str, Any]) -> list[str]:
    main, by = f.get("controller"), f.get("by_groups") or {}
    lines = [f"controller {main} ({f.get('backend')}, cgroup v{f.get('cgroup_version')})"]
    if f.get("controller_active") is False:
        return lines + ["controller not active: the 1:4 sanity gate failed, the sweep was skipped"]
    for n, v in by.items():
        r = v["class_ratio"]
        lines.append(f"N={n}: ratios 1 : " + " : ".join(_num(r[c]["mean"]) for c in CLASSES[1:])
                     + f" (ideal 1 : 2 : 4 : 8; within ±15 %: {_verdict_tag(v).text})"
                     + f", worst share error x{2 ** (v['max_abs_log2_error']['mean'] or 0):.2f}"
                     + (f" (flags: {', '.join(v['flags'])})" if v["flags"] else ""))
    bn = f.get("breakdown_n")
    if by:
        lines.append(f"breakdown at N={bn}" if bn is not None else
                     f"no breakdown up to N={max(int(n) for n in by)}")
    none = (f.get("by_controller") or {}).get("none")
    if none and none["by_groups"]:
        n0 = next(iter(none["by_groups"]))
        r = none["by_groups"][n0]["class_ratio"]["800"]["mean"]
        lines.append(f"none (control), N={n0}: 800/100 ratio {_num(r)} -> "
                     + ("weights NOT enforced, as expected" if not f.get("none_proportional")
                        else "UNEXPECTEDLY proportional"))
    wc = f.get("work_conservation") or {}
    if wc:
        n0 = next(iter(wc))
        lines.append(f"work conservation N={n0}: {main} gives {_num(wc[n0]['ratio']['mean'])}x the IOPS of none")
    for app, per in (f.get("tenant_by_app") or {"db_bench": f.get("tenant") or {}}).items():
        for ctrl, t in per.items():
            lines.append(f"{app} under {ctrl}: {_num(t['alone']['tenant_ops_s']['mean'])} ops/s alone, "
                         f"{_num(t['beside']['tenant_ops_s']['mean'])} beside the groups; read p99 "
                         f"{_num(t['alone']['tenant_read_p99_us']['mean'])} -> "
                         f"{_num(t['beside']['tenant_read_p99_us']['mean'])} µs"
                         + (" (R4: 8,412.8 ops/s, read p99 271 µs, on its SATA SSD)" if app == "ycsb" else ""))
    return lines


def _num(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _ratio_section(ctrl: str, cf: dict[str, Any]) -> Section:
    by = cf["by_groups"]
    ns = [int(n) for n in by]
    series = []
    for c in CLASSES[1:]:
        pts = [by[str(n)]["class_ratio"][c] for n in ns]
        series.append(Series(f"{c}/100", [float(n) for n in ns], [p["mean"] for p in pts],
                             [p["ci95"][0] for p in pts], [p["ci95"][1] for p in pts]))
    notes = [Note(f"N={n}: " + "; ".join(v["flag_details"]), "warn") for n, v in by.items() if v["flags"]]
    chart = Chart(f"Class IOPS ratio vs N under {ctrl} (ideal 2, 4, 8)", "line", "groups N",
                  "IOPS / IOPS of weight 100",
                  series, x_log2=True, y_log=True, ref_lines=[(2, "2"), (4, "4"), (8, "8")], notes=notes + [
                      Note("Per-group IOPS of each weight class over that of the weight-100 class, from the kernel's "
                           "per-group counters in the steady window; median over repetitions with its 95% "
                           "interval band.")])
    return Section(f"Class ratio vs N: {ctrl}", [chart])


def _headline_section(f: dict[str, Any], main: str) -> Section:
    by = f["by_groups"]
    wc = f.get("work_conservation") or {}
    cols = ["N", "200/100", "400/100", "800/100", "worst |log2| err", "min share (of entitled)",
            "Jain (floor if ignored)", "aggregate IOPS", f"IOPS {main}/none", "generator CPU", "machine CPU",
            "ratios ±15 %"]
    rows, notes = [], []
    for n, v in by.items():
        r = v["class_ratio"]
        rows.append([n, fmt_est(r["200"]), fmt_est(r["400"]), fmt_est(r["800"]), fmt_est(v["max_abs_log2_error"]),
                     fmt_est(v["min_share"]), f"{_num(v['jain']['mean'])} ({v['jain_floor']:.3f})",
                     fmt_est(v["aggregate_iops"]), fmt_est(wc.get(n, {}).get("ratio")),
                     fmt_est(v["generator_cpu_busy"]), fmt_est(v["machine_cpu_busy"]),
                     _verdict_tag(v)])
        if "generator_cpu_bound" in v["flags"] or "cpu_saturated" in v["flags"]:
            label = "generator CPU-bound" if "generator_cpu_bound" in v["flags"] else "CPUs saturated"
            notes.append(Note(f"N={n}: {label} — " + "; ".join(d for d in v["flag_details"] if "cpu" in d), "warn"))
    notes.append(Note(f"Jain's index is on weight-normalised shares; with 1:2:4:8 weights an equal split "
                      f"(weights ignored) still scores {next(iter(by.values()))['jain_floor']:.3f}, "
                      "so read it only beside the ratios."))
    title = f"Weight adherence per N under {main} (median and its 95% interval)"
    return Section(f"Headline per N ({main})", [Table(title, cols, rows, notes=notes)])


def _worst_share_chart(doc: dict[str, Any], f: dict[str, Any], main: str) -> Chart | None:
    by = f["by_groups"]
    worst = max(by, key=lambda n: by[n]["max_abs_log2_error"]["mean"] or 0)
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


def _break_section(f: dict[str, Any]) -> Section:
    bn, sig = f.get("breakdown_n"), f.get("breakdown_signals")
    blocks: list[Any] = []
    intro = (f"Break point: the smallest N whose mean worst per-group |log2(observed share / weight share)| exceeds "
             f"log2(1.5) = {BREAK_LOG2:.3f} (some group got 1.5x or 1/1.5 of its entitled share). "
             f"95% interval bracket [largest N surely held, smallest N surely broken]: {f.get('breakdown_bracket')}.")
    if bn is None or not sig:
        blocks.append(Note("No N exceeded the threshold."))
        return Section("Break point and why", blocks, intro=intro)
    rows = [[k, str(v)] for k, v in sig.items()]
    notes = []
    if (sig.get("machine_cpu_busy") or 0) >= 0.9:
        notes.append(Note(f"At N={bn} the CPUs were {sig['machine_cpu_busy']:.0%} busy (fio's share "
                          f"{(sig.get('generator_cpu_busy') or 0):.0%}): processes waited for CPU, so CPU "
                          "scheduling can "
                          "decide who submits I/O.", "warn"))
    nr = as_int(sig.get("nr_requests"))
    lim = sig.get("bfq_tag_limit_min")
    if sig.get("scheduler") == "bfq" and lim is not None and sig.get("iodepth_per_group") and \
            lim <= sig["iodepth_per_group"]:
        notes.append(Note(
            f"BFQ (Linux >= 5.17, bfqq_request_over_limit) limits each group to nr_requests x weight / sum of active "
            f"weights requests and trims the tag depth of a group above that to 1. Here nr_requests = {nr}, so the "
            f"weight-100 groups may hold only {lim:.0f} requests against an iodepth of {sig['iodepth_per_group']}: "
            "they drain during their service slot, BFQ expires them, and the heavy groups take the device.", "warn"))
    if sig.get("tag_pressure"):
        notes.append(Note(f"I/O depth x N = {sig['iodepth_total']:.0f} >= nr_requests = {nr}: requests also wait "
                          "for a scheduler tag before BFQ sees them.", "warn"))
    dc = (f.get("depth_check") or {}).get(f.get("controller"), {})
    if dc:
        held = [n for n, v in dc.items() if v["holds"]]
        notes.append(Note(f"Diagnostic: the same sweep with iodepth 1 (below every group's request limit) holds "
                          f"1:2:4:8 at N = "
                          f"{', '.join(held) or 'none of ' + ', '.join(dc)}.", "info" if held else "warn"))
    if (sig.get("min_group_ios") or 0) < 100:
        notes.append(Note(f"The smallest group completed only {sig['min_group_ios']:.0f} I/Os in the "
                          f"{sig['window_s']} s window: per-group shares are counting noise there.", "warn"))
    blocks.append(Table(f"Signals recorded at N={bn}", ["signal", "value"], rows, notes=notes))
    return Section("Break point and why", blocks, intro=intro)


def _depth_section(dc: dict[str, Any]) -> Section:
    rows = [[ctrl, n, fmt_est(v["class_ratio"]["200"]), fmt_est(v["class_ratio"]["400"]),
             fmt_est(v["class_ratio"]["800"]), fmt_est(v["max_abs_log2_error"]), fmt_est(v["aggregate_iops"]),
             _verdict_tag(v)] for ctrl, per in dc.items() for n, v in per.items()]
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
# per application, column -> the findings' key, in the order shown (YCSB's: what R4 published, and
# the update side); a column no trial reported is left out
LATENCY_COLUMNS = {
    "ycsb": {"read mean µs": "tenant_read_mean_us", "read p95 µs": "tenant_read_p95_us",
             "read p99 µs": "tenant_read_p99_us", "update p99 µs": "tenant_update_p99_us"},
    "db_bench": {"read p50 µs": "tenant_read_p50_us", "read p99 µs": "tenant_read_p99_us",
                 "write p99 µs": "tenant_write_p99_us"},
}
RATIO_COLUMNS = {"ops/s": "ops_beside_over_alone", "read mean": "read_mean_beside_over_alone",
                 "read p95": "read_p95_beside_over_alone", "read p99": "read_p99_beside_over_alone"}


def _tenant_sections(f: dict[str, Any]) -> list[Section]:
    by_app = f.get("tenant_by_app") or {"db_bench": f["tenant"]}
    return [_tenant_section(app, per, f.get("tenant_reference") or {}) for app, per in by_app.items()]


def _tenant_section(app: str, per: dict[str, Any], ref: dict[str, Any]) -> Section:
    """The tenant alone and beside the groups, beside/alone with CIs, the groups' class ratios
    beside it, and (YCSB, R4's application) R4's published numbers as the reference."""
    title = TITLES.get(app, app)
    r4 = app == "ycsb" and bool(ref)
    shown = {c: k for c, k in LATENCY_COLUMNS.get(app, LATENCY_COLUMNS["db_bench"]).items()
             if any((t[mode].get(k) or {}).get("mean") is not None
                    for t in per.values() for mode in ("alone", "beside"))}
    rows: list[list[Any]] = []
    for ctrl, t in per.items():
        for mode in ("alone", "beside"):
            e = t[mode]
            rows.append([ctrl, mode, fmt_est(e["tenant_ops_s"]), *(fmt_est(e.get(k)) for k in shown.values()),
                         fmt_est(e["tenant_iops_kernel"])])
    notes: list[Note] = []
    if r4:
        rows.append(["R4 (published)", "beside", f"{ref['tenant_ops_s']:,.1f}",
                     *(f"{ref[k]:g}" if k in ref else "–" for k in shown.values()), "–"])
        notes.append(Note(f"R4's numbers are absolute and come from its hardware ({ref['hardware']}): the published "
                          "reference, not a value this machine's device should reproduce; the ratios below are "
                          "what carries over."))
    weight = next(iter(per.values())).get("weight")
    blocks: list[Any] = [Table(f"{WHAT.get(app, title)} in its own group, weight {weight} (median, 95% interval)",
                               ["controller", "run", "ops/s", *shown, "device IOPS (kernel)"], rows, notes=notes)]
    ratio_cols = {c: k for c, k in RATIO_COLUMNS.items() if any(k in t for t in per.values())}
    rrows = [[ctrl, *(fmt_est(t.get(k)) for k in ratio_cols.values())] for ctrl, t in per.items()]
    blocks.append(Table(f"{title}: beside the groups / alone (ratio of medians, 95% interval)",
                        ["controller", *ratio_cols], rrows))
    grows = []
    for ctrl, t in per.items():
        g = t.get("groups_beside")
        if g:
            r = g["class_ratio"]
            grows.append([ctrl, str(g["groups"]), *(fmt_est(r[c]) for c in CLASSES[1:]),
                          fmt_est(g["max_abs_log2_error"]), _verdict_tag(g)])
    if grows:
        if r4:
            grows.append(["R4 (published)", "4", *(f"{ref['class_ratio'][c]:g}" for c in CLASSES[1:]), "–", "yes"])
        blocks.append(Table(f"The weighted groups beside {title}: class IOPS ratios (median, 95% interval; "
                            "ideal 2, 4, 8)", ["controller", "groups", "200/100", "400/100", "800/100",
                                               "worst |log2| err", "ratios ±15 %"], grows))
    return Section(f"A real application beside the groups ({title})", blocks,
                   intro="R4's second experiment: a database in its own weighted group, alone and beside the "
                         "weighted fio groups, released together. Beside, the groups run until the application's "
                         "timed run has ended, and their numbers come from the window in which it did I/O too.")
