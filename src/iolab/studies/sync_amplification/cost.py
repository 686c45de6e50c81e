"""What the extra syncs cost an application (R3's second question), pure.

For each application of spec.APPS (dd and Mobibench append/overwrite, varmail) on the guest
ext4 of each configuration in spec.COST_VARIANTS: throughput and mean latency, and the
ratio against default qcow2 (the configuration that keeps qcow2's ordering syncs, R3's
"stock QEMU"). The configurations that remove those syncs (raw, lazy_refcounts,
preallocation) play R3's barrier QEMU, and their change is set beside R3's published one.

R3's finding is about size: dd append gains a lot when ordering gets cheaper (+81.1 %),
every other application little (-2.7 .. +9.2 %). So the claim checked per application is
its class: "large" (R3 >= +20 %: the measured ratio is >= 1.2) or "small" (the ratio stays
within [1/1.2, 1.2]). Removing the syncs is not a barrier (a barrier still orders; raw has
nothing to order), so only the class is compared, never the exact percentage.

Intervals: every ratio is the ratio of the two configurations' medians with the run's
adaptive-stopping interval (RunEstimator, MOVER). The verdicts form one family, so each
verdict reads a wider interval: Bonferroni over the verdicts (each at α'/verdicts), which keeps
the family's 95 % whatever the correlation; the reproduce page recomputes them at its own,
larger family (`verdict_rows`). Each verdict is holds / differs / undecided by where its
interval lies (analysis/verdicts.py); an undecided one says how many more repetitions would
likely decide it. The median of a rate is the rate of the median time, so fixed-work (dd,
Mobibench, YCSB) and time-based (varmail) applications are compared alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from iolab.analysis.record import Decided, Est, Quantity, Record, finite_or_none, parse_estimate
from iolab.analysis.sequential import RunEstimator, aggregate_ratio
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc, Trial, relative_resolution
from iolab.analysis.verdicts import (
    DIFFERS,
    HOLDS,
    UNDECIDED,
    UNTESTABLE,
    Band,
    config_ids_of,
    more_needed,
)
from iolab.report.format import fmt_end
from iolab.studies.common import ok_trials
from iolab.studies.sync_amplification.spec import APPS, COST_BASELINE, COST_VARIANTS

FAMILY_ALPHA = 0.05
LARGE = 1.2   # R3's "large" gain: >= +20 % (dd append +81.1 %); "small": within a factor 1.2 either way
# How each application's trials are read: the throughput metric, its unit, whether the work
# per trial is fixed (harmonic), and the latency of one operation (µs) from a trial's metrics.
THROUGHPUT = {"sync-writes": ("write_iops", "durable writes/s", True), "varmail": ("ops_per_s", "ops/s", False),
              "ycsb": ("run_ops_s", "ops/s", True)}


class CostRow(Record):
    """One application on one configuration: throughput and latency, and (not the baseline) each
    against the baseline's."""

    app: str
    r3_name: str
    configuration: str
    trials: int
    throughput: Est | None
    latency_us: Est | None
    flags: list[str]
    throughput_vs_baseline: Est | None = None  # given with latency_vs_baseline, beside a baseline only
    latency_vs_baseline: Est | None = None


class AgainstR3(Record):
    """R3's claim class against one measured configuration: the ratio at the family's level, the
    verdict, its reason and, when undecided, what would decide it."""

    app: str
    r3_name: str
    r3_gain_pct: float
    configuration: str
    claim: str
    measured: Est
    measured_gain_pct: float | None
    verdict: str
    reason: str
    decide: Decided | None


class NotMeasured(Record):
    r3_name: str
    r3_gain_pct: float
    reason: str


class Family(Record):
    verdicts: int
    tail: float
    method: str


class CostFindings(Record):
    """findings.cost (docs/results.md, sync-amplification)."""

    baseline: str
    rows: list[CostRow]
    against_r3: list[AgainstR3]
    not_measured: list[NotMeasured]
    family: Family
    large_threshold: float


def _latency_us(kind: str, m: Mapping[str, float]) -> float | None:
    """Mean time of one operation: a write plus its fdatasync (none with O_DSYNC), varmail's mean,
    or YCSB's for the one operation its run does (insert or update)."""
    if kind == "sync-writes":
        w = m.get("write_lat_mean_us")
        return None if w is None else w + (m.get("sync_lat_mean_us") or 0.0)
    if kind == "ycsb":
        return m.get("run_insert_mean_us", m.get("run_update_mean_us"))
    return m.get("lat_mean_us")


def _not_planned(doc: Doc, app: str) -> bool:
    """The run tried no trial of this application (the quick study leaves some out)."""
    return not any((t.get("params") or {}).get("workload") == app for t in doc.get("trials", []))


def _app_trials(doc: Doc, app: str, variant: str) -> list[Trial]:
    return [t for t in ok_trials(doc) if t["params"].get("workload") == app
            and t["params"].get("target") == f"{variant}/ext4"]


def _values(trials: Sequence[Trial], metric: str) -> list[float]:
    return [float(t["metrics"][metric]) for t in trials if isinstance(t["metrics"].get(metric), (int, float))]


def throughput_ratio(num: Sequence[float], den: Sequence[float], fixed_work: bool,
                     ratio: Any) -> Estimate:
    """num/den of two configurations' throughput; for fixed work the ratio of harmonic means
    (mean time per operation, inverted), so the interval is the exact one for that statistic."""
    return aggregate_ratio("harmonic" if fixed_work else "mean", num, den, ratio)


def gain_text(e: Estimate | Mapping[str, object] | None) -> str:
    """A ratio estimate as a change in percent with its interval: '+81.1 % [+60.2, +102.0]'."""
    est = None if e is None else parse_estimate(e)
    if est is None or finite_or_none(est.mean) is None:
        return "–"
    lo, hi = finite_or_none(est.lo), finite_or_none(est.hi)
    span = "" if lo is None or hi is None else f" [{(lo - 1) * 100:+.1f}, {(hi - 1) * 100:+.1f}]"
    return f"{(est.mean - 1) * 100:+.1f} %{span}"


def claim_class(r3_gain_pct: float) -> str:
    return "large" if 1 + r3_gain_pct / 100 >= LARGE else "small"


def band_of(cls: str) -> Band:
    """R3's class as a band on the ratio: large gains reach ×1.2, small ones stay within ×1.2 either way."""
    return Band(LARGE) if cls == "large" else Band(1 / LARGE, LARGE)


def verdict(e: Estimate, cls: str, tcg: bool) -> tuple[str, str]:
    """(holds | differs | undecided | not testable here, the reason in one sentence)."""
    if tcg:
        return UNTESTABLE, "under TCG the emulated CPU, not the disk, sets the speed (counts still hold)"
    said = band_of(cls).decide(e.lo, e.hi)
    hi = "∞" if e.hi == float("inf") else fmt_end(e.hi, 2)
    span = f"[{fmt_end(e.lo, 2)}, {hi}]"
    if cls == "large":
        return said, {HOLDS: f"the whole interval {span} is a gain of at least {LARGE - 1:.0%}, as R3's",
                      DIFFERS: f"the interval {span} stays below a {LARGE - 1:.0%} gain: the syncs cost little here",
                      UNDECIDED: f"the interval {span} straddles {LARGE:.1f}"}[said]
    return said, {HOLDS: f"the whole interval {span} is within a factor {LARGE:.1f}: a small effect, as R3's",
                  DIFFERS: f"the interval {span} lies beyond a factor {LARGE:.1f}: the syncs matter more here",
                  UNDECIDED: f"the interval {span} reaches beyond the band [{1 / LARGE:.2f}, {LARGE:.2f}]"}[said]


def _pairs(doc: Doc) -> list[tuple[str, str, list[float], list[float]]]:
    """(app, configuration, its throughputs, the baseline's) for every configuration measured against it."""
    out = []
    for app, spec in APPS.items():
        metric = THROUGHPUT[spec["workload"]["kind"]][0]
        base = _values(_app_trials(doc, app, COST_BASELINE), metric)
        for variant in COST_VARIANTS:
            thr = _values(_app_trials(doc, app, variant), metric)
            if variant != COST_BASELINE and thr and base:
                out.append((app, variant, thr, base))
    return out


def verdict_rows(doc: Doc, tcg: bool, family: int | None = None) -> list[AgainstR3]:
    """R3's claim against each measured configuration: the ratio at α'/family (default: the number of
    verdicts here), its verdict, the reason and, when undecided, what would decide it."""
    pairs = _pairs(doc)
    est = RunEstimator(doc, family or max(len(pairs), 1))
    out = []
    for app, variant, thr, base in pairs:
        spec = APPS[app]
        e = est.ratio(thr, base)
        cls = claim_class(spec["r3_gain_pct"])
        said, why = verdict(e, cls, tcg)
        decide = None
        if said == UNDECIDED:
            decide = more_needed(band_of(cls), est.ratio_ahead(thr, base), e.n,
                                 (f"{app} on {variant}", f"{app} on {COST_BASELINE}"),
                                 config_ids_of(_app_trials(doc, app, variant) + _app_trials(doc, app, COST_BASELINE)))
            why += "; " + decide.words()
        out.append(AgainstR3(app=app, r3_name=spec["r3"], r3_gain_pct=spec["r3_gain_pct"], configuration=variant,
                             claim=cls, measured=e,
                             measured_gain_pct=None if e.mean != e.mean else round((e.mean - 1) * 100, 1),
                             verdict=said, reason=why, decide=decide))
    return out



def analyze_cost(doc: Doc, tcg: bool) -> CostFindings | None:
    """The cost section's findings; None for a run without the application workloads."""
    est = RunEstimator(doc)
    rows: list[CostRow] = []
    for app, spec in APPS.items():
        kind = spec["workload"]["kind"]
        metric, unit, fixed = THROUGHPUT[kind]
        base = _app_trials(doc, app, COST_BASELINE)
        base_thr = _values(base, metric)
        base_lat = [v for t in base if (v := _latency_us(kind, t["metrics"])) is not None]
        for variant in COST_VARIANTS:
            ts = _app_trials(doc, app, variant)
            if not ts:
                continue
            thr = _values(ts, metric)
            lat = [v for t in ts if (v := _latency_us(kind, t["metrics"])) is not None]
            row = CostRow(
                app=app, r3_name=spec["r3"], configuration=variant, trials=len(ts),
                throughput=Quantity.of(est.estimate(thr, rel=relative_resolution(ts, metric)), unit) if thr else None,
                latency_us=Quantity.of(est.estimate(lat), "µs") if lat else None,
                flags=sorted({f for t in ts for f in (t.get("flags") or [])}))
            if variant != COST_BASELINE and thr and base_thr:
                row = row.model_copy(update={
                    "throughput_vs_baseline": throughput_ratio(thr, base_thr, fixed, est.ratio),
                    "latency_vs_baseline": est.ratio(lat, base_lat) if lat and base_lat else None})
            rows.append(row)
    if not rows:
        return None
    against = verdict_rows(doc, tcg)
    measured = {r.app for r in rows}
    not_run = [NotMeasured(r3_name=spec["r3"], r3_gain_pct=spec["r3_gain_pct"],
                           reason=spec.get("why_not_quick", "not part of this run") if _not_planned(doc, app) else
                           "no successful trial on the default qcow2 or a configuration without the syncs")
               for app, spec in APPS.items() if app not in measured]
    return CostFindings(baseline=COST_BASELINE, rows=rows, against_r3=against, not_measured=not_run,
                        family=Family(verdicts=len(against), tail=est.design.largest_tail / max(len(against), 1),
                                      method="Bonferroni over the verdicts: the design's largest tail / verdicts each"),
                        large_threshold=LARGE)
