"""fleet-scan's analysis (pure): per pattern, each host's result against the fleet's median, and
which hosts are outliers, by how much and how sure.

The hosts of a trial ran at the same time, so each trial gives every host a *paired* deviation
d = log(host / median of the hosts in that trial): load every host shares (a busy SAN, a
noisy neighbour of all of them) moves the median with the host and cancels. Per host and
pattern the deviations are tested as in `iolab compare` (analysis/compare.py):

* the ratio host / fleet median is exp(mean d) with a t interval over the repetitions;
* the p-value of "this host is within ±TOLERANCE of the median" (the t statistic against the
  edge of that band, stats.LogRatio.p_beyond), so a host is only named when the data show a
  difference larger than the tolerance;
* Holm's correction over every host × pattern of the scan, so the chance that any host is
  named without a real difference stays below 5 % however large the fleet.

A host is an outlier when that corrected p-value is below 0.05. With fewer than three hosts
there is no median to stand apart from: the deviations are shown, nobody is named. The
study runs a fixed number of repetitions (spec.py); a spec that stops adaptively is tested
with the per-look α' of its design instead of 0.05 (analysis/sequential.py), which keeps the
same promise over the looks.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

import numpy as np
from scipy import special

from iolab.analysis import calibration
from iolab.analysis.findings import Findings
from iolab.analysis.record import Est, JSONObject, Number, Quantity, Record
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate, LogRatio, holm
from iolab.analysis.trials import Doc, Params, Trial
from iolab.studies.common import ok_trials, size_label
from iolab.studies.fleet_scan.spec import TOLERANCE

ALPHA = 0.05
MIN_HOSTS = 3  # below this a median says nothing about which host differs
HOST_PREFIX = "host:"


class VsMedian(Record):
    """A host over the fleet's median in the same trials: the geometric mean ratio, its interval,
    and (tested) the Holm-corrected p of 'within the tolerance' and whether it is an outlier."""

    ratio: float
    ci95: list[float]
    n: int
    p_beyond_tolerance_holm: float | None = None
    outlier: bool | None = None


class HostResult(Record):
    """One host and pattern: its own estimate, and against the fleet median (with >= 3 hosts)."""

    estimate: Est
    n: int
    vs_median: VsMedian | None = None


class Outlier(Record):
    host: str
    pattern: str
    metric: str
    ratio: float
    ci95: list[float]
    p_holm: float


class Spread(Record):
    median: Number
    max: Number


class Aggregate(Record):
    """The fleet's own numbers for one pattern: the aggregate over the common window, the hosts
    it covered, the start spread and the window, p99 latency."""

    metric: str
    value: Est
    fleet_start_spread_ms: Spread | None = None
    fleet_window_s: Spread | None = None
    hosts_ok_min: int | None = None
    hosts: int | None = None
    read_clat_p99_us: Est | None = None
    write_clat_p99_us: Est | None = None
    windows_unmeasured: int


class Clock(Record):
    skew_ms: dict[str, Number | None]
    spread_ms: Number | None


class FleetScanFindings(Findings):
    """docs/results.md, fleet-scan."""

    hosts: list[str]
    patterns: list[str]
    metric_of: dict[str, str]
    per_host: dict[str, dict[str, HostResult]]   # pattern -> host -> its result
    fleet_median: dict[str, float | None]
    aggregate: dict[str, Aggregate]
    outliers: list[Outlier]
    failed_hosts: dict[str, list[str]]
    clock: Clock
    tolerance: float
    alpha: float
    correction: str
    tests: int
    enough_hosts: bool
    interval_method: str


def pattern_of(workload: Params) -> str:
    """'4k randread QD1', '1M read QD8': what a reader calls the job."""
    return f"{size_label(workload.get('bs', 0))} {workload.get('rw', '?')} QD{workload.get('iodepth', 1)}"


def metric_of(workload: Params) -> str:
    """Random I/O is counted in operations, sequential in bandwidth."""
    return "iops" if str(workload.get("rw", "")).startswith("rand") else "bw_mib_s"


def hosts_of(trials: list[Trial]) -> list[str]:
    """Every host any trial was sent to, in the fleet's order (the target's manifest)."""
    names: list[str] = []
    for t in trials:
        for h in ((t.get("manifest") or {}).get("target") or {}).get("hosts") or {}:
            if h not in names:
                names.append(h)
        for k in t.get("metrics") or {}:
            if k.startswith(HOST_PREFIX) and (h := k.split(":")[1]) not in names:
                names.append(h)
    return names


def _per_host(trials: list[Trial], hosts: list[str], metric: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {h: [] for h in hosts}
    for t in trials:
        for h in hosts:
            v = t["metrics"].get(f"{HOST_PREFIX}{h}:{metric}")
            if isinstance(v, (int, float)) and math.isfinite(v):
                out[h].append(float(v))
    return out


def _deviations(trials: list[Trial], hosts: list[str], metric: str) -> dict[str, list[float]]:
    """Per host, log(host / median of that trial's hosts), for trials with ≥ MIN_HOSTS positive values."""
    out: dict[str, list[float]] = defaultdict(list)
    for t in trials:
        vals = {h: t["metrics"].get(f"{HOST_PREFIX}{h}:{metric}") for h in hosts}
        pos = {h: float(v) for h, v in vals.items() if isinstance(v, (int, float)) and v > 0 and math.isfinite(v)}
        if len(pos) < MIN_HOSTS:
            continue
        med = statistics.median(pos.values())
        for h, v in pos.items():
            out[h].append(math.log(v / med))
    return out


def _log_ratio(d: list[float], tail: float) -> LogRatio | None:
    """exp(mean d) with its interval (two-sided tail probability `tail`) and the p of 'no deviation'."""
    n = len(d)
    if n < 2:
        return None
    a = np.asarray(d)
    mean, se = float(a.mean()), float(a.std(ddof=1)) / math.sqrt(n)
    r = math.exp(mean)
    if se == 0.0:
        return LogRatio(r, r, r, 1.0 if mean == 0.0 else 0.0, mean, 0.0, float(n - 1))
    q = float(special.stdtrit(n - 1, 1 - tail / 2))
    p = float(2 * special.stdtr(n - 1, -abs(mean) / se))
    return LogRatio(r, math.exp(mean - q * se), math.exp(mean + q * se), p, mean, se, float(n - 1))


def _scale(design_first: int, design_last: int) -> tuple[float, float]:
    """(tail of the intervals, factor on p-values): 0.05 and 1 for a fixed n; with adaptive
    stopping the per-look α' of the design, so a host can only be named at a look where the
    runner's own intervals would exclude the band too."""
    if design_first == design_last:
        return ALPHA, 1.0
    a = calibration.simultaneous_t_alpha(design_first, design_last)
    return a, ALPHA / a


def findings(doc: Doc) -> FleetScanFindings:
    trials = ok_trials(doc)
    est = RunEstimator(doc)
    hosts = hosts_of(doc["trials"])
    by_pattern: dict[str, list[Trial]] = defaultdict(list)
    metric_for: dict[str, str] = {}
    for t in trials:
        w = t["params"].get("_workload") or {}
        p = pattern_of(w)
        by_pattern[p].append(t)
        metric_for[p] = metric_of(w)
    patterns = sorted(by_pattern, key=lambda p: (not p.split()[1].startswith("rand"), p.split()[1],
                                                 int(p.split("QD")[-1]) if p.split("QD")[-1].isdigit() else 0))
    tail, p_factor = _scale(est.design.first, est.design.last)
    estimates: dict[str, dict[str, tuple[Estimate, int]]] = {}
    tests: list[tuple[str, str, LogRatio, int]] = []
    medians: dict[str, float | None] = {}
    aggregate: dict[str, Aggregate] = {}
    for p in patterns:
        ts, m = by_pattern[p], metric_for[p]
        values = _per_host(ts, hosts, m)
        means = {h: statistics.fmean(v) for h, v in values.items() if v}
        medians[p] = statistics.median(means.values()) if means else None
        devs = _deviations(ts, hosts, m) if len(hosts) >= MIN_HOSTS else {}
        estimates[p] = {h: (est.mean(values[h]), len(values[h])) for h in hosts}
        for h in hosts:
            lr = _log_ratio(devs.get(h, []), tail)
            if lr is not None:
                tests.append((p, h, lr, len(devs[h])))
        aggregate[p] = _aggregate(ts, est, m)
    adjusted = holm([min(1.0, lr.p_beyond(TOLERANCE) * p_factor) for _, _, lr, _ in tests])
    vs: dict[tuple[str, str], VsMedian] = {}
    outliers: list[Outlier] = []
    for (p, h, lr, n), p_adj in zip(tests, adjusted, strict=True):
        vs[p, h] = VsMedian(ratio=lr.ratio, ci95=[lr.lo, lr.hi], n=n, p_beyond_tolerance_holm=p_adj,
                            outlier=bool(p_adj < ALPHA))
        if p_adj < ALPHA:
            outliers.append(Outlier(host=h, pattern=p, metric=metric_for[p], ratio=lr.ratio, ci95=[lr.lo, lr.hi],
                                    p_holm=p_adj))
    outliers.sort(key=lambda o: -abs(math.log(float(o.ratio))))
    per_host = {p: {h: HostResult(estimate=e, n=n, **({"vs_median": vs[p, h]} if (p, h) in vs else {}))
                    for h, (e, n) in estimates[p].items()} for p in patterns}
    return FleetScanFindings(
        hosts=hosts, patterns=patterns, metric_of={p: metric_for[p] for p in patterns}, per_host=per_host,
        fleet_median=medians, aggregate=aggregate, outliers=outliers, failed_hosts=_failed_hosts(doc["trials"]),
        clock=_clock(doc["trials"]), tolerance=TOLERANCE, alpha=ALPHA, correction="holm", tests=len(tests),
        enough_hosts=len(hosts) >= MIN_HOSTS, interval_method=est.design.method)


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()


def _aggregate(trials: list[Trial], est: RunEstimator, metric: str) -> Aggregate:
    """The fleet's own numbers for one pattern: the aggregate over the common window with its CI,
    how many hosts it covered, the start spread and the common window."""
    def col(name: str) -> list[float | None]:
        return [t["metrics"].get(name) for t in trials]

    out = Aggregate(metric=metric, value=est.mean(col(metric)), windows_unmeasured=sum(
        any(str(f).startswith("fleet_window_unmeasured") for f in t.get("flags") or []) for t in trials))
    given: dict[str, object] = {}
    for name in ("fleet_start_spread_ms", "fleet_window_s"):
        vals = [v for v in col(name) if isinstance(v, (int, float))]
        if vals:
            given[name] = Spread(median=statistics.median(vals), max=max(vals))
    ok = [v for v in col("fleet_hosts_ok") if isinstance(v, (int, float))]
    sent = [v for v in col("fleet_hosts") if isinstance(v, (int, float))]
    if ok and sent:
        given["hosts_ok_min"], given["hosts"] = int(min(ok)), int(max(sent))
    for side in ("read", "write"):
        p99 = [v for v in col(f"{side}_clat_p99_us") if isinstance(v, (int, float))]
        if p99:
            given[f"{side}_clat_p99_us"] = Quantity.of(est.mean(p99), "µs")
    return out.model_copy(update=given)


def _failed_hosts(trials: list[Trial]) -> dict[str, list[str]]:
    """Host -> the reasons its part of a trial failed (a host's failure, not the trial's)."""
    out: dict[str, list[str]] = defaultdict(list)
    for t in trials:
        facts = ((t.get("manifest") or {}).get("workload_facts") or {}).get("fleet_failed_hosts") or {}
        for h, why in facts.items():
            out[h].append(f"{t['id']}: {why}")
    return dict(out)


def _clock(trials: list[Trial]) -> Clock:
    """Each host's clock skew as measured before load (the target's manifest), and their spread."""
    for t in trials:
        target = (t.get("manifest") or {}).get("target") or {}
        hosts = target.get("hosts") or {}
        if hosts:
            skew = {h: v.get("clock_skew_ms") for h, v in hosts.items()}
            return Clock(skew_ms=skew, spread_ms=target.get("clock_skew_spread_ms"))
    return Clock(skew_ms={}, spread_ms=None)
