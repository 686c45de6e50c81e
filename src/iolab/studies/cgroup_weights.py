"""Study cgroup-weights (R4): does proportional I/O sharing hold as groups grow, where does it
break, and why. N fio processes in cgroups weighted 100/200/400/800 (shuffled per trial),
kernel per-group counters as ground truth, BFQ against scheduler `none` as the negative
control, a sanity gate before each sweep, and RocksDB db_bench as a real tenant.
docs/studies/cgroup-weights.md explains every finding.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from iolab.analysis.stats import mean_ci, ratio_ci
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import fmt_est, ok_trials

NAME = "cgroup-weights"
SUMMARY = "R4: cgroup I/O weights 100/200/400/800 with N = 4..128 groups, BFQ vs none; break point and why"
CLASSES = ("100", "200", "400", "800")
BREAK_LOG2 = math.log2(1.5)  # a group got >= 1.5x or <= 1/1.5 of its weight's share
RATIO_TOL = 0.15  # class ratios within ±15 % of the weights "hold"
GATE_WEIGHTS = (100, 400)
QUICK_N = [4]
FULL_N = [4, 8, 16, 32, 64, 128]
DEPTH1_N = [8, 32, 128]  # the diagnostic: same N with iodepth 1, so N x iodepth stays below nr_requests
METRICS = ("max_abs_log2_error", "class_max_abs_log2_error", "min_share", "jain", "aggregate_iops",
           "generator_cpu_busy", "machine_cpu_busy", "window_s", "warmup_cut_s", "start_spread_s",
           "min_group_ios", "kernel_vs_fio", "iodepth_total")


def build(quick: bool) -> dict[str, Any]:
    sweep = {"name": "sweep", "kind": "fio-groups", "groups": QUICK_N if quick else FULL_N, "rw": "randread",
             "runtime": 8 if quick else 10, "warmup": 1}
    study = {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 5,
             "ci_target": 0.1, "description": SUMMARY}  # metric: ratio_800 (tenant alone: its ops/s)
    if quick:
        return {"study": study, "target": {"kind": "cgroups", "controller": ["bfq", "none"], "size": "1G"},
                "workload": sweep}
    return {"study": study,
            "target": {"kind": "cgroups", "controller": ["bfq", "none"], "size": "1G", "filesystem": "ext4",
                       "data_size": "512M"},
            "workloads": [sweep,
                          {"name": "depth1", "kind": "fio-groups", "groups": DEPTH1_N, "iodepth": 1,
                           "rw": "randread", "runtime": 10, "warmup": 1},
                          {"name": "tenant-alone", "kind": "fio-groups", "groups": 0, "tenant": "alone",
                           "runtime": 10},
                          {"name": "tenant-beside", "kind": "fio-groups", "groups": 4, "tenant": "beside",
                           "runtime": 10, "warmup": 1}]}


# -- sanity gate ---------------------------------------------------------------------------
def before_group(runner: Any, target: Any, placement: Any, configs: list[Any]) -> None:
    """Two groups at 1:4 for a short run. A weight-enforcing controller far from 4 means it is not
    active here: its sweep is skipped and the report says so. For `none` failing is expected."""
    from iolab.core.errors import IolabError
    from iolab.workloads.fio_groups import FioGroupsParams, FioGroupsWorkload, run_groups

    session = placement.extras["cgroup_session"]
    backend = session.backend
    w = next((c.workload for c in configs if c.workload.get("tenant") == "off"), configs[0].workload)
    params = FioGroupsParams(groups=2, weights=list(GATE_WEIGHTS), rw=w.get("rw", "randread"), bs=w.get("bs", 4096),
                             iodepth=w.get("iodepth", 32), runtime=5, warmup=0.5, start_allowance=0)
    gate: dict[str, Any] = {"controller": backend.name, "enforces_weights": backend.enforces_weights,
                            "weights": list(GATE_WEIGHTS), "expected_ratio": GATE_WEIGHTS[1] / GATE_WEIGHTS[0]}
    try:
        out = run_groups(FioGroupsWorkload(params), placement, 120)
        ratio = out.result.metrics["ratio_400"]
        gate.update(ratio=ratio, aggregate_iops=out.result.metrics["aggregate_iops"],
                    active=abs(math.log2(ratio / gate["expected_ratio"])) <= 1.0 if ratio > 0 else False)
    except (IolabError, OSError) as exc:
        gate.update(ratio=None, active=None, error=str(exc))
    finally:
        placement.manifest.pop("trial", None)
        placement.manifest.pop("share_series", None)
    gate["verdict"] = _gate_verdict(gate)
    extra_key = f"sanity_gate/{backend.name}"
    runner.store.set_extra(runner.run_id, extra_key, gate)
    runner.reporter.message(f"sanity gate {backend.name}: {gate['verdict']}")
    if gate["enforces_weights"] and gate["active"] is False:
        for c in configs:  # skip the sweep: numbers without an active controller mean nothing
            st = runner.state[c.id]
            st.failures = max(st.failures, 2)


def _gate_verdict(g: dict[str, Any]) -> str:
    if g.get("ratio") is None:
        return f"gate could not run: {g.get('error')}"
    r = f"observed {g['ratio']:.2f} for weights 1:4"
    if g["enforces_weights"]:
        return (f"controller active ({r})" if g["active"] else
                f"controller not active ({r}); the sweep was skipped")
    return (f"negative control confirmed: weights not enforced ({r})" if not g["active"] else
            f"UNEXPECTED: weights look enforced without a controller ({r})")


# -- analysis (pure) -------------------------------------------------------------------------
def _controller(t: dict[str, Any]) -> str:
    return str(t["params"].get("_target", {}).get("controller", "?"))


def _backend(t: dict[str, Any]) -> dict[str, Any]:
    return (t.get("manifest") or {}).get("target", {}).get("cgroups", {}) or {}


def _enforcing(trials: list[dict[str, Any]], ctrl: str) -> bool:
    return any(_backend(t).get("enforces_weights", ctrl != "none") for t in trials if _controller(t) == ctrl)


def _sweep(trials: list[dict[str, Any]], name: str = "sweep") -> list[dict[str, Any]]:
    """Trials of one fio-groups workload without tenant ("sweep"; "depth1" = the diagnostic)."""
    return [t for t in trials if t["params"].get("_workload", {}).get("tenant", "off") == "off"
            and t["params"].get("workload", "sweep") == name]


def _groups_n(t: dict[str, Any]) -> int:
    return int(t["params"]["_workload"]["groups"])


def per_n(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """by_groups for one controller: estimates over repetitions per N."""
    by: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        by[_groups_n(t)].append(t)
    out = {}
    for n in sorted(by):
        ts = by[n]
        est = {m: mean_ci([t["metrics"][m] for t in ts if m in t["metrics"]]).as_dict() for m in METRICS}
        ratio = {c: (mean_ci([t["metrics"][f"ratio_{c}"] for t in ts if f"ratio_{c}" in t["metrics"]]).as_dict())
                 for c in CLASSES}
        flags = sorted({f.split(":")[0] for t in ts for f in t.get("flags", [])})
        details = _one_detail_per_flag(ts)
        err = est["max_abs_log2_error"]
        holds = all(ratio[c]["mean"] is not None and abs(ratio[c]["mean"] / (int(c) / 100) - 1) <= RATIO_TOL
                    for c in CLASSES)
        out[str(n)] = {
            "class_ratio": ratio, **est, "jain_floor": jain_floor(ts[0]), "flags": flags, "flag_details": details,
            "holds": holds, "broken": err["mean"] is not None and err["mean"] > BREAK_LOG2,
            "signals": _signals(ts), "n_trials": len(ts),
        }
    return out


def _one_detail_per_flag(ts: list[dict[str, Any]]) -> list[str]:
    """One example sentence per flag name, with how many repetitions raised it."""
    seen: dict[str, list[str]] = defaultdict(list)
    for t in ts:
        for f in t.get("flags", []):
            seen[f.split(":")[0]].append(f)
    return [f"{v[0]} ({len(v)} of {len(ts)} repetitions)" for _k, v in sorted(seen.items())]


def jain_floor(t: dict[str, Any]) -> float:
    """Jain's index on weight-normalised shares when the weights are ignored (equal split)."""
    weights = list(((t.get("manifest") or {}).get("target", {}).get("trial", {}) or {}).get("weights", {}).values())
    if not weights:
        weights = [100, 200, 400, 800]
    x = [1.0 / w for w in weights]
    return round(sum(x) ** 2 / (len(x) * sum(v * v for v in x)), 4)


def _signals(ts: list[dict[str, Any]]) -> dict[str, Any]:
    """What could explain a break at this N, from the trials' metrics and manifests."""
    tgt = (ts[0].get("manifest") or {}).get("target", {})
    dev = tgt.get("device", {}) or {}
    iosched = dev.get("iosched", {}) or {}
    w = ts[0]["params"].get("_workload", {})
    mean = lambda m: mean_ci([t["metrics"][m] for t in ts if m in t["metrics"]]).mean  # noqa: E731
    nr = _int(dev.get("nr_requests"))
    total = mean("iodepth_total")
    return {
        "generator_cpu_busy": _r(mean("generator_cpu_busy")), "machine_cpu_busy": _r(mean("machine_cpu_busy")),
        "iodepth_per_group": w.get("iodepth"), "iodepth_total": _r(total),
        "nr_requests": dev.get("nr_requests"), "nr_tags": dev.get("nr_tags"),
        "tag_pressure": bool(nr and math.isfinite(total) and total >= nr),
        "bfq_tag_limit_min": _r(mean("tag_limit_min")) if math.isfinite(mean("tag_limit_min"))
        else _tag_limit_from_manifest(ts[0], nr),
        "scheduler": dev.get("scheduler"),
        "tunables": {k: iosched[k] for k in ("strict_guarantees", "low_latency", "slice_idle", "timeout_sync",
                                             "max_budget", "back_seek_penalty") if k in iosched},
        "window_s": _r(mean("window_s")), "start_spread_s": _r(mean("start_spread_s")),
        "min_group_ios": _r(mean("min_group_ios")), "aggregate_iops": _r(mean("aggregate_iops")),
    }


def _tag_limit_from_manifest(t: dict[str, Any], nr: int | None) -> float | None:
    """BFQ's smallest per-group request limit, nr_requests x min weight / sum of weights (older runs)."""
    weights = list((((t.get("manifest") or {}).get("target", {}) or {}).get("trial", {}) or {})
                   .get("weights", {}).values())
    if not nr or not weights:
        return None
    return float(max(round(nr * min(weights) / sum(weights)), 1))


def _r(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 3)


def breakdown(by_groups: dict[str, Any]) -> tuple[int | None, list[int | None]]:
    """(smallest N whose mean worst share error exceeds BREAK_LOG2, [largest N surely held, smallest
    N surely broken] by the 95 % CI of that error)."""
    ns = sorted(int(n) for n in by_groups)
    first = next((n for n in ns if by_groups[str(n)]["broken"]), None)
    lo = [n for n in ns if (by_groups[str(n)]["max_abs_log2_error"]["ci95"][1] or math.inf) <= BREAK_LOG2]
    hi = [n for n in ns if (by_groups[str(n)]["max_abs_log2_error"]["ci95"][0] or -math.inf) > BREAK_LOG2]
    held = max((n for n in lo if first is None or n < first), default=None)
    return first, [held, min(hi) if hi else None]


def controller_findings(trials: list[dict[str, Any]], ctrl: str) -> dict[str, Any]:
    mine = [t for t in _sweep(trials) if _controller(t) == ctrl]
    by = per_n(mine)
    first, bracket = breakdown(by)
    b = _backend(mine[0]) if mine else {}
    return {"controller": ctrl, "backend": b.get("backend"), "cgroup_version": b.get("cgroup_version"),
            "enforces_weights": b.get("enforces_weights"), "by_groups": by, "breakdown_n": first,
            "breakdown_bracket": bracket,
            "breakdown_signals": by[str(first)]["signals"] if first is not None else None,
            "proportional_at": [int(n) for n, v in by.items() if v["holds"]]}


def tenant_findings(trials: list[dict[str, Any]], ctrl: str) -> dict[str, Any] | None:
    mine = [t for t in trials if _controller(t) == ctrl]
    alone = [t for t in mine if t["params"]["_workload"].get("tenant") == "alone"]
    beside = [t for t in mine if t["params"]["_workload"].get("tenant") == "beside"]
    if not alone and not beside:
        return None
    keys = ("tenant_ops_s", "tenant_read_p99_us", "tenant_read_p50_us", "tenant_write_p99_us", "tenant_iops_kernel")
    est = lambda ts: {k: mean_ci([t["metrics"][k] for t in ts if k in t["metrics"]]).as_dict()  # noqa: E731
                      for k in keys}
    out: dict[str, Any] = {"alone": est(alone), "beside": est(beside),
                           "weight": (alone or beside)[0]["params"]["_workload"].get("tenant_weight")}
    vals = lambda ts, k: [t["metrics"][k] for t in ts if k in t["metrics"]]  # noqa: E731
    out["ops_beside_over_alone"] = ratio_ci(vals(beside, "tenant_ops_s"), vals(alone, "tenant_ops_s")).as_dict()
    out["read_p99_beside_over_alone"] = ratio_ci(vals(beside, "tenant_read_p99_us"),
                                                 vals(alone, "tenant_read_p99_us")).as_dict()
    if beside:
        g = per_n(beside)
        only = next(iter(g.values()))
        out["groups_beside"] = {"groups": int(next(iter(g))), "class_ratio": only["class_ratio"],
                                "max_abs_log2_error": only["max_abs_log2_error"], "ratios_hold": only["holds"]}
    return out


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    trials = ok_trials(doc)
    ctrls = sorted({_controller(t) for t in doc["trials"]})
    weighted = [c for c in ctrls if _enforcing(trials, c)] or [c for c in ctrls if c != "none"] or ctrls
    main = weighted[0] if weighted else None
    by_ctrl = {c: controller_findings(trials, c) for c in ctrls}
    gates = {k.split("/", 1)[1]: v for k, v in (doc.get("extra") or {}).items() if k.startswith("sanity_gate/")}
    tenant = {c: tf for c in ctrls if (tf := tenant_findings(trials, c))} or None
    top = by_ctrl.get(main) or {}
    out: dict[str, Any] = {
        "controller": main, "backend": top.get("backend"), "cgroup_version": top.get("cgroup_version") or next(
            (v.get("cgroup_version") for v in by_ctrl.values() if v.get("cgroup_version")), None),
        "by_groups": top.get("by_groups", {}), "breakdown_n": top.get("breakdown_n"),
        "breakdown_bracket": top.get("breakdown_bracket"), "breakdown_signals": top.get("breakdown_signals"),
        "breakdown_threshold_log2": BREAK_LOG2, "ratio_tolerance": RATIO_TOL,
        "tenant": tenant, "sanity_gate": gates, "controller_active": _active(gates, main),
        "by_controller": by_ctrl,
    }
    depth1 = _sweep(trials, "depth1")
    if depth1:
        out["depth_check"] = {c: {n: {"class_ratio": v["class_ratio"], "holds": v["holds"],
                                      "max_abs_log2_error": v["max_abs_log2_error"],
                                      "aggregate_iops": v["aggregate_iops"]}
                                  for n, v in per_n([t for t in depth1 if _controller(t) == c]).items()}
                              for c in ctrls if any(_controller(t) == c for t in depth1)}
    if "none" in by_ctrl and main and main != "none":
        out["work_conservation"] = _work_conservation(trials, main)
        none_by = by_ctrl["none"]["by_groups"]
        out["none_proportional"] = any(v["holds"] for v in none_by.values()) if none_by else None
    return out


def _active(gates: dict[str, Any], main: str | None) -> bool | None:
    g = next((v for k, v in gates.items() if main and k.endswith(main)), None)
    return None if g is None else g.get("active")


def _work_conservation(trials: list[dict[str, Any]], main: str) -> dict[str, Any]:
    """Aggregate IOPS of the weighted controller over `none`, per N: < 1 = capacity given up for fairness."""
    sweep = _sweep(trials)
    out = {}
    for n in sorted({_groups_n(t) for t in sweep}):
        a = [t["metrics"]["aggregate_iops"] for t in sweep if _groups_n(t) == n and _controller(t) == main]
        b = [t["metrics"]["aggregate_iops"] for t in sweep if _groups_n(t) == n and _controller(t) == "none"]
        if a and b:
            out[str(n)] = {main: mean_ci(a).as_dict("IOPS"), "none": mean_ci(b).as_dict("IOPS"),
                           "ratio": ratio_ci(a, b).as_dict()}
    return out


# -- presentation --------------------------------------------------------------------------------
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
        sections.append(_tenant_section(f["tenant"]))
    if gate_notes:
        sections.append(Section("Sanity gate", gate_notes, intro=(
            "Before each controller's trials: two groups weighted 1:4, 5 s. An enforcing controller must come "
            "within 2x of 4; scheduler none must not (negative control).")))
    return summary, sections


def _summary(f: dict[str, Any]) -> list[str]:
    main, by = f.get("controller"), f.get("by_groups") or {}
    lines = [f"controller {main} ({f.get('backend')}, cgroup v{f.get('cgroup_version')})"]
    if f.get("controller_active") is False:
        return lines + ["controller not active: the 1:4 sanity gate failed, the sweep was skipped"]
    for n, v in by.items():
        r = v["class_ratio"]
        lines.append(f"N={n}: ratios 1 : " + " : ".join(_num(r[c]["mean"]) for c in CLASSES[1:])
                     + f" (ideal 1 : 2 : 4 : 8), worst share error x{2 ** (v['max_abs_log2_error']['mean'] or 0):.2f}"
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
    for ctrl, t in (f.get("tenant") or {}).items():
        lines.append(f"db_bench under {ctrl}: {_num(t['alone']['tenant_ops_s']['mean'])} ops/s alone, "
                     f"{_num(t['beside']['tenant_ops_s']['mean'])} beside the groups; read p99 "
                     f"{_num(t['alone']['tenant_read_p99_us']['mean'])} -> "
                     f"{_num(t['beside']['tenant_read_p99_us']['mean'])} µs")
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
                           "per-group counters in the steady window; mean over repetitions with 95% CI band.")])
    return Section(f"Class ratio vs N: {ctrl}", [chart])


def _headline_section(f: dict[str, Any], main: str) -> Section:
    by = f["by_groups"]
    wc = f.get("work_conservation") or {}
    cols = ["N", "200/100", "400/100", "800/100", "worst |log2| err", "min share (of entitled)",
            "Jain (floor if ignored)", "aggregate IOPS", f"IOPS {main}/none", "generator CPU", "machine CPU", "holds"]
    rows, notes = [], []
    for n, v in by.items():
        r = v["class_ratio"]
        rows.append([n, fmt_est(r["200"]), fmt_est(r["400"]), fmt_est(r["800"]), fmt_est(v["max_abs_log2_error"]),
                     fmt_est(v["min_share"]), f"{_num(v['jain']['mean'])} ({v['jain_floor']:.3f})",
                     fmt_est(v["aggregate_iops"]), fmt_est(wc.get(n, {}).get("ratio")),
                     fmt_est(v["generator_cpu_busy"]), fmt_est(v["machine_cpu_busy"]),
                     "yes" if v["holds"] else "NO"])
        if "generator_cpu_bound" in v["flags"] or "cpu_saturated" in v["flags"]:
            label = "generator CPU-bound" if "generator_cpu_bound" in v["flags"] else "CPUs saturated"
            notes.append(Note(f"N={n}: {label} — " + "; ".join(d for d in v["flag_details"] if "cpu" in d), "warn"))
    notes.append(Note(f"Jain's index is on weight-normalised shares; with 1:2:4:8 weights an equal split "
                      f"(weights ignored) still scores {next(iter(by.values()))['jain_floor']:.3f}, "
                      "so read it only beside the ratios."))
    return Section(f"Headline per N ({main})", [Table(f"Weight adherence per N under {main} (mean ± 95% CI)", cols,
                                                      rows, notes=notes)])


def _worst_share_chart(doc: dict[str, Any], f: dict[str, Any], main: str) -> Chart | None:
    by = f["by_groups"]
    worst = max(by, key=lambda n: by[n]["max_abs_log2_error"]["mean"] or 0)
    ts = [t for t in _sweep(ok_trials(doc)) if _controller(t) == main and _groups_n(t) == int(worst)]
    ss = next(((t.get("manifest") or {}).get("target", {}).get("share_series") for t in ts
               if (t.get("manifest") or {}).get("target", {}).get("share_series")), None)
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
             f"95% CI bracket [largest N surely held, smallest N surely broken]: {f.get('breakdown_bracket')}.")
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
    nr = _int(sig.get("nr_requests"))
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
             "yes" if v["holds"] else "NO"] for ctrl, per in dc.items() for n, v in per.items()]
    return Section("Diagnostic: the same N at iodepth 1", [Table(
        "iodepth 1 per group, so N x iodepth stays below nr_requests (mean ± 95% CI)",
        ["controller", "N", "200/100", "400/100", "800/100", "worst |log2| err", "aggregate IOPS", "holds"], rows)],
        intro="If the break comes from BFQ's per-group request limit (nr_requests x w / sum w) falling below the "
              "groups' iodepth, iodepth 1 must restore the ratios until that limit itself reaches 1 request.")


def _int(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def _tenant_section(tenant: dict[str, Any]) -> Section:
    rows = []
    for ctrl, t in tenant.items():
        for mode in ("alone", "beside"):
            e = t[mode]
            rows.append([ctrl, mode, fmt_est(e["tenant_ops_s"]), fmt_est(e["tenant_read_p99_us"]),
                         fmt_est(e["tenant_write_p99_us"]), fmt_est(e["tenant_iops_kernel"])])
    notes = []
    for ctrl, t in tenant.items():
        g = t.get("groups_beside")
        if g:
            r = g["class_ratio"]
            notes.append(Note(f"{ctrl}: the {g['groups']} groups beside db_bench split 1 : "
                              + " : ".join(_num(r[c]['mean']) for c in CLASSES[1:])
                              + (" — ratios hold" if g["ratios_hold"] else " — ratios do NOT hold"),
                              "info" if g["ratios_hold"] else "warn"))
    return Section("A real application beside the groups (RocksDB db_bench)", [Table(
        "db_bench readrandomwriterandom (90% reads, direct reads) in its own group (mean ± 95% CI)",
        ["controller", "run", "ops/s", "read p99 µs", "write p99 µs", "device IOPS (kernel)"], rows, notes=notes)],
        intro="R4's second experiment: a database in its own weighted group, alone and beside the weighted fio groups.")
