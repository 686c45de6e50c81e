"""cgroup-weights' analysis (pure): per controller and N, the class ratios and share errors over
repetitions, the break point and the signals recorded there, the iodepth-1 diagnostic,
work conservation against `none`, the tenant alone and beside the groups, and the gates.

A trial's own entries (its shuffled weights, its share over time) are in
`manifest.workload_facts`; runs stored before that had them in `manifest.target`, and are
read the same way (`trial_entry`).

Size: the study's findings are the largest of the contract (docs/results.md, cgroup-weights):
their eleven typed models (per N, per controller, the tenant, the gate, ...) sit beside the
functions that fill them, as every study keeps its findings' types in its analysis part."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from iolab.analysis.findings import Findings
from iolab.analysis.record import Est, JSONObject, Quantity, Record, Scalar, Stored, finite_or_none, parse_estimate
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc, Params, Trial, metric_set_of
from iolab.analysis.verdicts import HOLDS, Band, combine
from iolab.core.metrics import NONNEG, Domain, MetricSet
from iolab.studies.common import ok_trials

CLASSES = ("100", "200", "400", "800")
BREAK_LOG2 = math.log2(1.5)  # a group got >= 1.5x or <= 1/1.5 of its weight's share
RATIO_TOL = 0.15  # class ratios within ±15 % of the weights "hold"
METRICS = ("max_abs_log2_error", "class_max_abs_log2_error", "min_share", "jain", "aggregate_iops",
           "generator_cpu_busy", "machine_cpu_busy", "window_s", "warmup_cut_s", "start_spread_s",
           "min_group_ios", "kernel_vs_fio", "iodepth_total")


def trial_entry(t: Trial, key: str) -> Any:
    """One of the trial's own manifest entries ("trial", "share_series"), also from older runs."""
    manifest = t.get("manifest") or {}
    own = (manifest.get("workload_facts") or {}).get(key)
    return own if own is not None else (manifest.get("target") or {}).get(key)


def controller_of(t: Trial) -> str:
    return str(t["params"].get("_target", {}).get("controller", "?"))


def _backend(t: Trial) -> Params:
    return (t.get("manifest") or {}).get("target", {}).get("cgroups", {}) or {}


def _enforcing(trials: list[Trial], ctrl: str) -> bool:
    return any(_backend(t).get("enforces_weights", ctrl != "none") for t in trials if controller_of(t) == ctrl)


def sweep_trials(trials: list[Trial], name: str = "sweep") -> list[Trial]:
    """Trials of one fio-groups workload without tenant ("sweep"; "depth1" = the diagnostic)."""
    return [t for t in trials if t["params"].get("_workload", {}).get("tenant", "off") == "off"
            and t["params"].get("workload", "sweep") == name]


def groups_n(t: Trial) -> int:
    return int(t["params"]["_workload"]["groups"])


Estimator = Callable[..., Estimate]  # (values, rel=0.0, domain=...) -> Estimate: RunEstimator.mean
RatioEstimator = Callable[[list[float], list[float]], Estimate]
_FIXED = RunEstimator({})  # iolab's default looks, for callers without a run
mean_ci, ratio_ci = _FIXED.mean, _FIXED.ratio


def domain_of(declared: MetricSet, metric: str) -> Domain:
    """The declared range of one of fio-groups' metrics (tenant metrics included), as the trials
    stored it."""
    decl = declared.get(metric)
    return decl.range if decl is not None else NONNEG


def class_verdict(ratio: Mapping[str, Estimate | Mapping[str, object]]) -> str:
    """holds / differs / undecided: every weight class's ratio interval inside its ideal ±RATIO_TOL."""
    ests = {c: parse_estimate(ratio[c]) for c in CLASSES}
    return combine(Band(int(c) / 100 * (1 - RATIO_TOL), int(c) / 100 * (1 + RATIO_TOL)).decide(
        finite_or_none(e.lo), finite_or_none(e.hi)) for c, e in ests.items()
        if c != "100" and finite_or_none(e.mean) is not None)


def per_n(trials: list[Trial], mean: Estimator = mean_ci) -> dict[str, GroupsAtN]:
    """by_groups for one controller: estimates over repetitions per N (`mean`: the run's estimator),
    the sharing verdict by where the class ratios' intervals lie, and the break verdict by where
    the worst share error's interval lies against log2(1.5)."""
    by: dict[int, list[Trial]] = defaultdict(list)
    for t in trials:
        by[groups_n(t)].append(t)
    declared = metric_set_of(trials)
    out = {}
    for n in sorted(by):
        ts = by[n]
        est = {m: mean([t["metrics"][m] for t in ts if m in t["metrics"]], domain=domain_of(declared, m))
               for m in METRICS}
        ratio = {c: mean([t["metrics"][f"ratio_{c}"] for t in ts if f"ratio_{c}" in t["metrics"]],
                         domain=domain_of(declared, f"ratio_{c}"))
                 for c in CLASSES}
        flags = sorted({f.split(":")[0] for t in ts for f in t.get("flags", [])})
        err = est["max_abs_log2_error"]
        known = finite_or_none(err.mean) is not None
        verdict = class_verdict(ratio)
        out[str(n)] = GroupsAtN(
            class_ratio=ratio, **est, jain_floor=jain_floor(ts[0]), flags=flags,
            flag_details=_one_detail_per_flag(ts), verdict=verdict, holds=verdict == HOLDS,
            break_verdict=(Band(BREAK_LOG2).decide(finite_or_none(err.lo), finite_or_none(err.hi)) if known
                           else "undecided"),
            broken=known and err.mean > BREAK_LOG2, signals=_signals(ts, declared), n_trials=len(ts))
    return out


def _one_detail_per_flag(ts: list[Trial]) -> list[str]:
    """One example sentence per flag name, with how many repetitions raised it."""
    seen: dict[str, list[str]] = defaultdict(list)
    for t in ts:
        for f in t.get("flags", []):
            seen[f.split(":")[0]].append(f)
    return [f"{v[0]} ({len(v)} of {len(ts)} repetitions)" for _k, v in sorted(seen.items())]

def jain_floor(t: Trial) -> float:
    """Jain's index on weight-normalised shares when the weights are ignored (equal split)."""
    weights = list((trial_entry(t, "trial") or {}).get("weights", {}).values())
    if not weights:
        weights = [100, 200, 400, 800]
    x = [1.0 / w for w in weights]
    return round(sum(x) ** 2 / (len(x) * sum(v * v for v in x)), 4)


def _signals(ts: list[Trial], declared: MetricSet) -> Signals:
    """What could explain a break at this N, from the trials' metrics and manifests."""
    tgt = (ts[0].get("manifest") or {}).get("target", {})
    dev = tgt.get("device", {}) or {}
    iosched = dev.get("iosched", {}) or {}
    w = ts[0]["params"].get("_workload", {})
    mean = lambda m: _FIXED.mean([t["metrics"][m] for t in ts if m in t["metrics"]],  # noqa: E731
                                 domain=domain_of(declared, m)).mean
    nr = as_int(dev.get("nr_requests"))
    total = mean("iodepth_total")
    return Signals(
        generator_cpu_busy=_r(mean("generator_cpu_busy")), machine_cpu_busy=_r(mean("machine_cpu_busy")),
        iodepth_per_group=w.get("iodepth"), iodepth_total=_r(total),
        nr_requests=dev.get("nr_requests"), nr_tags=dev.get("nr_tags"),
        tag_pressure=bool(nr and math.isfinite(total) and total >= nr),
        bfq_tag_limit_min=_r(mean("tag_limit_min")) if math.isfinite(mean("tag_limit_min"))
        else _tag_limit_from_manifest(ts[0], nr),
        scheduler=dev.get("scheduler"),
        tunables={k: iosched[k] for k in ("strict_guarantees", "low_latency", "slice_idle", "timeout_sync",
                                          "max_budget", "back_seek_penalty") if k in iosched},
        window_s=_r(mean("window_s")), start_spread_s=_r(mean("start_spread_s")),
        min_group_ios=_r(mean("min_group_ios")), aggregate_iops=_r(mean("aggregate_iops")))

def _tag_limit_from_manifest(t: Trial, nr: int | None) -> float | None:
    """BFQ's smallest per-group request limit, nr_requests x min weight / sum of weights (older runs)."""
    weights = list((trial_entry(t, "trial") or {}).get("weights", {}).values())
    if not nr or not weights:
        return None
    return float(max(round(nr * min(weights) / sum(weights)), 1))


def _r(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 3)


def breakdown(by_groups: Mapping[str, GroupsAtN]) -> tuple[int | None, list[int | None]]:
    """(smallest N whose mean worst share error exceeds BREAK_LOG2, [largest N surely held, smallest
    N surely broken] by the 95 % CI of that error)."""
    ns = sorted(int(n) for n in by_groups)
    first = next((n for n in ns if by_groups[str(n)].broken), None)
    lo = [n for n in ns if (finite_or_none(by_groups[str(n)].max_abs_log2_error.hi) or math.inf) <= BREAK_LOG2]
    hi = [n for n in ns if (finite_or_none(by_groups[str(n)].max_abs_log2_error.lo) or -math.inf) > BREAK_LOG2]
    held = max((n for n in lo if first is None or n < first), default=None)
    return first, [held, min(hi) if hi else None]


def controller_findings(trials: list[Trial], ctrl: str, mean: Estimator = mean_ci) -> ControllerFindings:
    mine = [t for t in sweep_trials(trials) if controller_of(t) == ctrl]
    by = per_n(mine, mean)
    first, bracket = breakdown(by)
    b = _backend(mine[0]) if mine else {}
    return ControllerFindings(
        controller=ctrl, backend=b.get("backend"), cgroup_version=b.get("cgroup_version"),
        enforces_weights=b.get("enforces_weights"), by_groups=by, breakdown_n=first, breakdown_bracket=bracket,
        breakdown_signals=by[str(first)].signals if first is not None else None,
        proportional_at=[int(n) for n, v in by.items() if v.holds])


# R4 exp. 2 (../shared/reference-studies.md): YCSB workload A on RocksDB beside the four groups.
R4_TENANT = {"tenant_ops_s": 8412.8, "tenant_read_mean_us": 108.0, "tenant_read_p95_us": 236.0,
             "tenant_read_p99_us": 271.0}
R4_CLASS_RATIO = {"200": 2.03, "400": 4.08, "800": 8.12}
R4_HARDWARE = ("Ryzen 7 3700X, 8 GB, Samsung 860 PRO 256 GB SATA SSD, Ubuntu 18.04, kernel 4.15, CFQ, "
               "cgroup v1 blkio.weight; 3-hour runs")
TENANT_KEYS = ("tenant_ops_s", "tenant_read_mean_us", "tenant_read_p50_us", "tenant_read_p95_us",
               "tenant_read_p99_us", "tenant_write_p99_us", "tenant_update_mean_us", "tenant_update_p95_us",
               "tenant_update_p99_us", "tenant_iops_kernel")
# beside / alone, each with its CI: what the groups cost the tenant
TENANT_RATIOS = {"ops_beside_over_alone": "tenant_ops_s", "read_mean_beside_over_alone": "tenant_read_mean_us",
                 "read_p95_beside_over_alone": "tenant_read_p95_us", "read_p99_beside_over_alone": "tenant_read_p99_us"}


class Signals(Record):
    """What could explain a break at one N, from its trials' metrics and manifests."""

    generator_cpu_busy: float | None
    machine_cpu_busy: float | None
    iodepth_per_group: Scalar
    iodepth_total: float | None
    nr_requests: Scalar
    nr_tags: Scalar
    tag_pressure: bool
    bfq_tag_limit_min: float | None
    scheduler: Scalar
    tunables: dict[str, Scalar]
    window_s: float | None
    start_spread_s: float | None
    min_group_ios: float | None
    aggregate_iops: float | None


class GroupsAtN(Record):
    """One N under one controller: every metric of METRICS over the repetitions, the class ratios
    and their verdict, the break verdict on the worst share error, flags and signals."""

    class_ratio: dict[str, Est]  # weight class ("100".."800") -> its IOPS over the weight-100 class's
    max_abs_log2_error: Est
    class_max_abs_log2_error: Est
    min_share: Est
    jain: Est
    aggregate_iops: Est
    generator_cpu_busy: Est
    machine_cpu_busy: Est
    window_s: Est
    warmup_cut_s: Est
    start_spread_s: Est
    min_group_ios: Est
    kernel_vs_fio: Est
    iodepth_total: Est
    jain_floor: float
    flags: list[str]
    flag_details: list[str]
    verdict: str
    holds: bool
    break_verdict: str
    broken: bool
    signals: Signals
    n_trials: int


class ControllerFindings(Record):
    """One controller's sweep: per N, the break point and its bracket, where the ratios held."""

    controller: str
    backend: str | None
    cgroup_version: int | None
    enforces_weights: bool | None
    by_groups: dict[str, GroupsAtN]
    breakdown_n: int | None
    breakdown_bracket: list[int | None]
    breakdown_signals: Signals | None
    proportional_at: list[int]


class DepthCheck(Record):
    """One N of the iodepth-1 diagnostic."""

    class_ratio: dict[str, Est]
    holds: bool
    verdict: str
    max_abs_log2_error: Est
    aggregate_iops: Est


class TenantMetrics(Record):
    """The tenant's metrics alone or beside the groups: the contract's five always, another latency
    only where the application reports it (YCSB: mean, p95, update)."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({
        "tenant_read_mean_us", "tenant_read_p95_us", "tenant_update_mean_us", "tenant_update_p95_us",
        "tenant_update_p99_us"})

    tenant_ops_s: Est
    tenant_read_p50_us: Est
    tenant_read_p99_us: Est
    tenant_write_p99_us: Est
    tenant_iops_kernel: Est
    tenant_read_mean_us: Est | None = None
    tenant_read_p95_us: Est | None = None
    tenant_update_mean_us: Est | None = None
    tenant_update_p95_us: Est | None = None
    tenant_update_p99_us: Est | None = None


class GroupsBeside(Record):
    """The weighted groups' class ratios beside the tenant."""

    groups: int
    class_ratio: dict[str, Est]
    max_abs_log2_error: Est
    verdict: str
    ratios_hold: bool


class TenantFindings(Record):
    """One controller's tenant: its metrics alone and beside the groups, beside/alone with CIs, and
    the groups beside it."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({*TENANT_RATIOS, "groups_beside"})

    app: str
    alone: TenantMetrics
    beside: TenantMetrics
    weight: Scalar
    ops_beside_over_alone: Est | None = None
    read_mean_beside_over_alone: Est | None = None
    read_p95_beside_over_alone: Est | None = None
    read_p99_beside_over_alone: Est | None = None
    groups_beside: GroupsBeside | None = None


class TenantReference(Record):
    """R4's published tenant numbers and class ratios beside it, and what they ran on."""

    source: str
    tenant_ops_s: float
    tenant_read_mean_us: float
    tenant_read_p95_us: float
    tenant_read_p99_us: float
    class_ratio: dict[str, float]
    hardware: str


class Gate(Stored):
    """The 1:4 sanity gate a controller's hook stored (`extra["sanity_gate/<controller>"]`)."""

    verdict: str
    enforces_weights: bool | None = None
    active: bool | None = None


class CgroupWeightsFindings(Findings):
    """docs/results.md, cgroup-weights: the headline controller's sweep at top level, every
    controller's in by_controller."""

    OMIT_NONE: ClassVar[frozenset[str]] = Findings.OMIT_NONE | {"depth_check"}

    controller: str | None
    backend: str | None
    cgroup_version: int | None
    by_groups: dict[str, GroupsAtN]
    breakdown_n: int | None
    breakdown_bracket: list[int | None] | None
    breakdown_signals: Signals | None
    breakdown_threshold_log2: float
    ratio_tolerance: float
    tenant: dict[str, TenantFindings] | None           # the headline application's, per controller
    tenant_by_app: dict[str, dict[str, TenantFindings]] | None
    tenant_reference: TenantReference | None
    sanity_gate: dict[str, Gate]
    controller_active: bool | None
    by_controller: dict[str, ControllerFindings]
    depth_check: dict[str, dict[str, DepthCheck]] | None = None
    # only beside the negative control: per N, {<the headline controller>: IOPS, "none": IOPS,
    # "ratio": the first over the second}, and whether `none` held the ratios (it must not)
    work_conservation: dict[str, dict[str, Est]] | None = None
    none_proportional: bool | None = None


def tenant_app(t: Trial) -> str:
    """The trial's tenant application; runs from before the choice ran db_bench."""
    return str(t["params"]["_workload"].get("tenant_app") or "db_bench")


ALWAYS = ("tenant_ops_s", "tenant_read_p99_us", "tenant_read_p50_us", "tenant_write_p99_us", "tenant_iops_kernel")


def tenant_findings(trials: list[Trial], ctrl: str, mean: Estimator = mean_ci,
                    ratio: RatioEstimator = ratio_ci, app: str | None = None) -> TenantFindings | None:
    """One controller's tenant (one application, `app`, or the trials' only one): its metrics alone
    and beside the groups, beside/alone with CIs, and the groups' class ratios beside it."""
    mine = [t for t in trials if controller_of(t) == ctrl and t["params"]["_workload"].get("tenant", "off") != "off"
            and (app is None or tenant_app(t) == app)]
    alone = [t for t in mine if t["params"]["_workload"].get("tenant") == "alone"]
    beside = [t for t in mine if t["params"]["_workload"].get("tenant") == "beside"]
    if not alone and not beside:
        return None
    declared = metric_set_of(mine)
    vals = lambda ts, k: [t["metrics"][k] for t in ts if k in t["metrics"]]  # noqa: E731
    # the contract's keys always; another latency only where the application reports it (YCSB: p95, update)
    keys = [k for k in TENANT_KEYS if k in ALWAYS or vals(mine, k)]

    def est(ts: list[Trial]) -> TenantMetrics:
        return TenantMetrics(**{k: mean(vals(ts, k), domain=domain_of(declared, k)) for k in keys})

    ratios = {name: ratio(vals(beside, k), vals(alone, k)) for name, k in TENANT_RATIOS.items() if k in keys}
    groups = None
    if beside:
        g = per_n(beside, mean)
        only = next(iter(g.values()))
        groups = GroupsBeside(groups=int(next(iter(g))), class_ratio=only.class_ratio,
                              max_abs_log2_error=only.max_abs_log2_error, verdict=only.verdict,
                              ratios_hold=only.holds)
    return TenantFindings(app=app or tenant_app(mine[0]), alone=est(alone), beside=est(beside),
                          weight=(alone or beside)[0]["params"]["_workload"].get("tenant_weight"), **ratios,
                          groups_beside=groups)


def tenants(trials: list[Trial], ctrls: list[str], mean: Estimator = mean_ci,
            ratio: RatioEstimator = ratio_ci) -> dict[str, dict[str, TenantFindings]]:
    """{app: {controller: tenant findings}}, YCSB (R4's application) first."""
    apps = sorted({tenant_app(t) for t in trials if t["params"]["_workload"].get("tenant", "off") != "off"},
                  key=lambda a: (a != "ycsb", a))
    out = {a: {c: tf for c in ctrls if (tf := tenant_findings(trials, c, mean, ratio, a))} for a in apps}
    return {a: per for a, per in out.items() if per}


def tenant_reference() -> TenantReference:
    """R4's published tenant numbers and class ratios beside it, and what they ran on."""
    return TenantReference(source="R4, experiment 2: YCSB workload A on RocksDB beside 4 groups weighted "
                                  "100/200/400/800", **R4_TENANT, class_ratio=R4_CLASS_RATIO, hardware=R4_HARDWARE)


def findings(doc: Doc) -> CgroupWeightsFindings:
    trials = ok_trials(doc)
    ctrls = sorted({controller_of(t) for t in doc["trials"]})
    weighted = [c for c in ctrls if _enforcing(trials, c)] or [c for c in ctrls if c != "none"] or ctrls
    main = weighted[0] if weighted else None
    est = RunEstimator(doc)  # the intervals adaptive stopping calls for (analysis/sequential.py)
    mean = est.mean
    by_ctrl = {c: controller_findings(trials, c, mean) for c in ctrls}
    gates = {k.split("/", 1)[1]: Gate.from_json(v) for k, v in (doc.get("extra") or {}).items()
             if k.startswith("sanity_gate/")}
    by_app = tenants(trials, ctrls, mean, est.ratio)
    top = by_ctrl.get(main) if main else None
    depth1 = sweep_trials(trials, "depth1")
    depth = {c: {n: DepthCheck(class_ratio=v.class_ratio, holds=v.holds, verdict=v.verdict,
                               max_abs_log2_error=v.max_abs_log2_error, aggregate_iops=v.aggregate_iops)
                 for n, v in per_n([t for t in depth1 if controller_of(t) == c], mean).items()}
             for c in ctrls if any(controller_of(t) == c for t in depth1)}
    out = CgroupWeightsFindings(
        controller=main, backend=top.backend if top else None,
        cgroup_version=(top.cgroup_version if top else None) or next(
            (v.cgroup_version for v in by_ctrl.values() if v.cgroup_version), None),
        by_groups=top.by_groups if top else {}, breakdown_n=top.breakdown_n if top else None,
        breakdown_bracket=top.breakdown_bracket if top else None,
        breakdown_signals=top.breakdown_signals if top else None,
        breakdown_threshold_log2=BREAK_LOG2, ratio_tolerance=RATIO_TOL,
        tenant=next(iter(by_app.values()), None), tenant_by_app=by_app or None,
        tenant_reference=tenant_reference() if by_app else None, sanity_gate=gates,
        controller_active=_active(gates, main), by_controller=by_ctrl, depth_check=depth if depth1 else None)
    if "none" in by_ctrl and main and main != "none":  # the negative control ran beside a weighted controller
        none_by = by_ctrl["none"].by_groups
        out = out.model_copy(update={
            "work_conservation": _work_conservation(trials, main, mean, est.ratio),
            "none_proportional": any(v.holds for v in none_by.values()) if none_by else None})
    return out


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()


def _active(gates: dict[str, Gate], main: str | None) -> bool | None:
    g = next((v for k, v in gates.items() if main and k.endswith(main)), None)
    return None if g is None else g.active


def _work_conservation(trials: list[Trial], main: str, mean: Estimator = mean_ci,
                       ratio: RatioEstimator = ratio_ci) -> dict[str, dict[str, Estimate]]:
    """Aggregate IOPS of the weighted controller over `none`, per N: < 1 = capacity given up for fairness."""
    sweep = sweep_trials(trials)
    out = {}
    for n in sorted({groups_n(t) for t in sweep}):
        a = [t["metrics"]["aggregate_iops"] for t in sweep if groups_n(t) == n and controller_of(t) == main]
        b = [t["metrics"]["aggregate_iops"] for t in sweep if groups_n(t) == n and controller_of(t) == "none"]
        if a and b:
            out[str(n)] = {main: Quantity.of(mean(a, domain=NONNEG), "IOPS"),
                           "none": Quantity.of(mean(b, domain=NONNEG), "IOPS"), "ratio": ratio(a, b)}
    return out


def as_int(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None
