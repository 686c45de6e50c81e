"""The published claims of the five reference studies, and how this machine's runs test them.

Each claim names the study that measures it and a function from that study's results
document to a verdict (analysis/verdicts.py), decided by where the claim's intervals lie:

  holds              every interval lies inside the claim's band (or beyond its threshold; for
                     "equal" claims: an equivalence test)
  differs            an interval lies wholly outside it; the reason says what was measured
  undecided          an interval straddles an edge: the reason says how many more repetitions
                     would likely decide it (or that none will)
  not testable here  the run cannot answer it on this machine (guest speed ratios under TCG, a
                     matrix the quick run leaves out, a study that did not complete)

**One family.** The verdicts of a page are read together, so their error is controlled
together: every interval behind a testable claim is computed at α'/M (Bonferroni over the M
intervals of the page, on top of the adaptive-stopping design's α'), so the chance that any
holds or differs on the page is wrong is at most 5 %. `evaluate` first finds which claims are
testable (that depends on the run, never on its outcome), counts their intervals, then decides
them all at that level.

Pure: a claim is evaluated from stored trials (each study's findings where they hold raw
counts), so it is tested without a machine (tests/reproduce) and a runner can recompute every
verdict between rounds (each undecided row's `decide` says where more repetitions help).

Size: one short function per published claim (seventeen), in the papers' order, so the table
of claims can be read against the papers side by side (../shared/reference-studies.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from iolab.analysis import budget as spend
from iolab.analysis.findings import Findings
from iolab.analysis.record import Decided, Est, Record, finite_or_none
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate, mover_ratio
from iolab.analysis.trials import Doc, Params, Trial, relative_resolution
from iolab.analysis.verdicts import (
    DIFFERS,
    HOLDS,
    UNDECIDED,
    UNTESTABLE,
    Band,
    Decision,
    ReportedVerdict,
    combine,
    config_ids_of,
    repetitions_to_decide,
)
from iolab.report.format import fmt_end
from iolab.studies import builtin
from iolab.studies.cgroup_weights import analysis as cgroup_weights
from iolab.studies.cgroup_weights.analysis import BREAK_LOG2, CgroupWeightsFindings, GroupsAtN, Signals
from iolab.studies.common import ok_trials
from iolab.studies.sync_amplification import analysis as sync_amplification
from iolab.studies.sync_amplification.analysis import AmpRow, SyncAmplificationFindings
from iolab.studies.sync_amplification.cost import gain_text, verdict_rows
from iolab.studies.sync_amplification.spec import COUNT_WORKLOAD, DEFAULTS
from iolab.studies.vm_profile.analysis import collect, system_of, trial_metrics
from iolab.studies.write_modes import analysis as write_modes
from iolab.studies.write_modes.analysis import WriteModesFindings

ALPHA = 0.05
__all__ = ["HOLDS", "DIFFERS", "UNDECIDED", "UNTESTABLE", "CLAIMS", "evaluate"]


@dataclass(frozen=True)
class Ctx:
    """How a claim is read: the quick run or the full one, and the page's family size M (each
    interval at α'/M)."""

    quick: bool
    family: int = 1

    def est(self, doc: Doc) -> RunEstimator:
        return RunEstimator(doc, self.family)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    value: str     # what was measured, for the table ("0.83 [0.78, 0.88]")
    reason: str    # one sentence, from measurements
    estimate: Estimate | None = None
    intervals: int = 0  # the intervals this verdict read (its share of the page's family)
    decide: Decision | None = None  # undecided: what would decide it


class ClaimRow(Record):
    """One claim's row on the page (findings.claims): the claim, this machine's value, the verdict,
    its reason, the intervals it read and, when undecided, what would decide it."""

    id: str
    reference: str
    study: str
    claim: str
    rule: str
    verdict: str
    value: str
    reason: str
    estimate: Est | None
    intervals: int
    decide: Decided | None
    run_id: str | None


class PageFamily(Record):
    """How the page's verdicts control their error together (findings.family)."""

    verdicts: int
    intervals: int
    alpha: float
    per_interval: float
    method: str


@dataclass(frozen=True)
class Claim:
    id: str
    reference: str          # R1..R5
    study: str              # the built-in study that measures it
    text: str               # the published claim, in words
    rule: str               # how the verdict is decided here
    evaluate: Callable[[Doc, Ctx], Verdict]   # (the study's document, how to read it) -> Verdict


@dataclass(frozen=True)
class Measured:
    """One interval a claim reads, and how it would look after k more repetitions."""

    name: str
    est: Estimate
    project: Callable[[int], Estimate]
    configs: tuple[str, ...]
    ids: tuple[str, ...] = ()  # the same configurations by id: where a budget would spend


def decide(items: Sequence[tuple[Measured, Band]]) -> tuple[str, Decision | None]:
    """The claim's verdict over its intervals, and for an undecided one what would decide it: the
    fewest further repetitions after which the projected intervals (same estimates, the spread
    measured so far) give a verdict other than undecided."""
    verdict = combine(band.decide(m.est.lo, m.est.hi) for m, band in items)
    if verdict != UNDECIDED or not items:
        return verdict, None
    open_ = [m for m, band in items if band.decide(m.est.lo, m.est.hi) == UNDECIDED]
    configs = tuple(dict.fromkeys(c for m in open_ for c in m.configs))
    ids = tuple(dict.fromkeys(i for m in open_ for i in m.ids))
    more = repetitions_to_decide(
        min(m.est.n for m in open_),
        lambda k: combine(band.decide(m.project(k).lo, m.project(k).hi) for m, band in items) != UNDECIDED)
    return verdict, Decision(more, configs, ids)


def undecided_words(decision: Decision | None) -> str:
    return f"; {decision.words()}" if decision else ""


# -- small helpers ---------------------------------------------------------------------------
def _fmt(e: Estimate | None, digits: int = 2) -> str:
    if e is None:
        return "–"
    mean, lo, hi = e.mean, e.lo, e.hi
    if mean is None or not math.isfinite(mean):
        return "–"
    def f(x: float | None) -> str:
        if x is None or not math.isfinite(x):
            return "?"
        return fmt_end(x, digits)
    if hi is None or hi == math.inf:  # no upper end: open, as the reports show it
        return f"{mean:.{digits}f} [{f(lo)}, ∞)"
    return f"{mean:.{digits}f} [{f(lo)}, {f(hi)}]"


F = TypeVar("F", bound=Findings)


def _findings(doc: Doc, model: type[F], compute: Callable[[Doc], F]) -> F:
    """The study's typed findings of `doc`: as held (typed, or the JSON a report wrote: parsed, so a
    document whose findings do not have the study's shape is an error, never a silent default), or
    computed from its trials when it has none."""
    f = doc.get("findings")
    if isinstance(f, model):
        return f
    return model.from_json(f) if f else compute(doc)


def _accel(doc: Doc) -> str | None:
    """The accelerator the run's guests had, from its trials (what every study's `accel` is)."""
    return next((str(a) for t in doc.get("trials") or [] if (a := ((t.get("manifest") or {}).get("target") or {})
                                                              .get("accel"))), None)


def _tcg_reason() -> str:
    return ("guests ran under TCG software emulation (no usable KVM here): guest/host speed ratios measure the "
            "emulator, not the device model; needs KVM")


def _trials(doc: Doc, where: Params, metric: str) -> list[Trial]:
    """The ok trials whose params match `where` (labels or _target/_workload keys) and have `metric`."""
    out = []
    for t in ok_trials(doc):
        p = t["params"]
        # the full configs win over labels (a study's analysis may rewrite labels for display, e.g. "4k")
        scope = {**{k: v for k, v in p.items() if not k.startswith("_")}, **p.get("_target", {}),
                 **p.get("_workload", {})}
        if all(scope.get(k) == v for k, v in where.items()) and isinstance(t["metrics"].get(metric), (int, float)):
            out.append(t)
    return out


def _values(doc: Doc, where: Params, metric: str) -> list[float]:
    """Metric values of ok trials whose params match `where`, in run order."""
    return [float(t["metrics"][metric]) for t in _trials(doc, where, metric)]


def _label(where: Params) -> str:
    return " ".join(f"{k}={_size(v) if k in ('record', 'bs') and isinstance(v, int) else v}"
                    for k, v in where.items() if k not in ("kind",))


def _one(doc: Doc, ctx: Ctx, where: Params, metric: str, name: str = "") -> Measured:
    """The estimate of one configuration's `metric` (widened by its tool's resolution)."""
    ts = _trials(doc, where, metric)
    vals, rel = [float(t["metrics"][metric]) for t in ts], relative_resolution(ts, metric)
    est = ctx.est(doc)
    return Measured(name or _label(where), est.estimate(vals, rel=rel), lambda k: est.projected(vals, k),
                    (_label(where),), config_ids_of(ts))


def _ratio(doc: Doc, ctx: Ctx, num: Params, den: Params, metric: str, name: str = "") -> Measured:
    """est(num)/est(den) of one metric between two configurations of the run, widened by the clock
    error of both sides (the ratio the studies show)."""
    a, b = _trials(doc, num, metric), _trials(doc, den, metric)
    va, vb = [float(t["metrics"][metric]) for t in a], [float(t["metrics"][metric]) for t in b]
    est = ctx.est(doc)
    e = est.ratio(va, vb, (relative_resolution(a, metric), relative_resolution(b, metric)))
    return Measured(name or f"{_label(num)} / {_label(den)}", e, lambda k: est.projected_ratio(va, vb, k),
                    (_label(num), _label(den)), config_ids_of(a + b))


def _ratio_of(a: Measured, b: Measured, name: str) -> Measured:
    """a/b of two ratios (MOVER again): e.g. the 4 KiB gap over the large-record gap."""
    return Measured(name, mover_ratio(a.est, b.est), lambda k: mover_ratio(a.project(k), b.project(k)),
                    a.configs + b.configs, tuple(dict.fromkeys(a.ids + b.ids)))


def _not_run(doc: Doc | None, study: str) -> Verdict | None:
    if doc is None:
        return Verdict(UNTESTABLE, "–", f"the {study} study has not run in this reproduction")
    if not ok_trials(doc):
        return Verdict(UNTESTABLE, "–", f"the {study} study has no successful trial (status {doc.get('status')})")
    return None


def _verdict(items: Sequence[tuple[Measured, Band]], value: str, words: dict[str, str],
             estimate: Estimate | None = None) -> Verdict:
    """A Verdict from the claim's intervals; `words`: the reason per outcome (undecided gets what
    would decide it appended)."""
    v, decision = decide(items)
    reason = words[v] + (undecided_words(decision) if v == UNDECIDED else "")
    return Verdict(v, value, reason, estimate, len(items), decision)


# -- R1: host vs VM, virtio-blk vs emulated (study virtio) ----------------------------------------
KIB4 = 4 << 10


def _largest_record(doc: Doc) -> int:
    recs = {int(t["params"]["_workload"]["record"]) for t in ok_trials(doc) if "record" in t["params"]["_workload"]}
    return max(recs) if recs else 4 << 20


def _bus_ratio(doc: Doc, ctx: Ctx, bus: str, record: int, test: str) -> Measured:
    return _ratio(doc, ctx, {"target": bus, "test": test, "record": record},  # as the study's ratio_vs_host
                  {"target": "host", "test": test, "record": record}, "kbps", f"{test} {bus}/host at {_size(record)}")


def _r1_band(bus: str, band: Band) -> Callable[[Doc, Ctx], Verdict]:
    def evaluate(doc: Doc, ctx: Ctx) -> Verdict:
        rec = _largest_record(doc)
        ms = [m for m in (_bus_ratio(doc, ctx, bus, rec, t) for t in ("write", "read")) if m.est.n]
        if not ms:
            return Verdict(UNTESTABLE, "–", f"no {bus} and host trials at {_size(rec)} records")
        value = "; ".join(f"{m.name.split()[0]} {_fmt(m.est)}" for m in ms)
        if _accel(doc) == "tcg":
            return Verdict(UNTESTABLE, value, _tcg_reason())
        where = f"{bus} reaches {value} of the host at {_size(rec)} records"
        return _verdict([(m, band) for m in ms], value, {
            HOLDS: f"{where}: every interval {band.words()}",
            DIFFERS: f"{where}: outside {band.words()}",
            UNDECIDED: f"{where}: an interval straddles {band.words()}"})
    return evaluate


def _r1_gap(doc: Doc, ctx: Ctx) -> Verdict:
    rec = _largest_record(doc)
    small, large = _bus_ratio(doc, ctx, "ide", KIB4, "write"), _bus_ratio(doc, ctx, "ide", rec, "write")
    if not small.est.n or not large.est.n:
        return Verdict(UNTESTABLE, "–", "no emulated-disk (ide) write trials at 4 KiB and at large records")
    gap = _ratio_of(small, large, "ide/host at 4 KiB over at the largest record")
    value = f"ide/host write: 4 KiB {_fmt(small.est)}, {_size(rec)} {_fmt(large.est)}"
    if _accel(doc) == "tcg":
        return Verdict(UNTESTABLE, value, _tcg_reason())
    ratio = f"(4 KiB over {_size(rec)}: {_fmt(gap.est)})"
    return _verdict([(gap, Band(0.0, 1.0))], value, {
        HOLDS: f"the emulated disk loses more at 4 KiB than at {_size(rec)} records {ratio}",
        DIFFERS: f"the emulated disk's gap to the host is narrower at 4 KiB than at {_size(rec)} {ratio}",
        UNDECIDED: f"the emulated disk's gap at 4 KiB and at {_size(rec)} cannot be told apart yet {ratio}"},
        gap.est)


def _r1_host_records(doc: Doc, ctx: Ctx) -> Verdict:
    rec = _largest_record(doc)
    m = _ratio(doc, ctx, {"target": "host", "test": "write", "record": rec},
               {"target": "host", "test": "write", "record": KIB4}, "kbps")
    if not m.est.n:
        return Verdict(UNTESTABLE, "–", "no host write trials at 4 KiB and at large records")
    value = f"{_fmt(m.est, 1)}×"
    words = f"host writes with {_size(rec)} records are {value} as fast as with 4 KiB records (R1: 4.4× at 4 MiB)"
    return _verdict([(m, Band(2.0))], value, {HOLDS: words + ": fewer, larger requests", DIFFERS: words,
                                             UNDECIDED: words + ", an interval that straddles 2×"}, m.est)


# -- R2: write modes and block size (study write-modes) ---------------------------------------------
def _helper(mode: str, bs: int) -> Params:
    return {"kind": "writemode", "mode": mode, "bs": bs}


def _r2_block_size(doc: Doc, ctx: Ctx) -> Verdict:
    m = _ratio(doc, ctx, _helper("o_sync", 4096), _helper("o_sync", 512), "throughput_mib_s",
               "O_SYNC 4 KiB / 512 B")  # how many times faster 4 KiB is than 512 B for the same data
    if not m.est.n:
        return Verdict(UNTESTABLE, "–", "no o_sync trials at 512 B and 4 KiB")
    calls = _ratio(doc, ctx, _helper("o_sync", 4096), _helper("o_sync", 512), "syscalls_per_s").est
    value = f"{_fmt(m.est, 1)}×"
    why = (f"O_SYNC writes of 4 KiB are {value} as fast as 512 B for the same data (R2: 7.8×), with calls per "
           f"second changing only {_fmt(calls)}×: the time follows the number of calls")
    return _verdict([(m, Band(3.0))], value, {HOLDS: why, DIFFERS: why + ", below 3×",
                                             UNDECIDED: "the interval straddles 3×: " + why}, m.est)


def _knee_bounds(curve: dict[int, Estimate], frac: float) -> tuple[int, int]:
    """[earliest, latest] block size the knee (the first size reaching `frac` of the best) can be at,
    given every size's interval: a size surely reaches it when its lower end clears frac × the
    highest upper end, surely not when its upper end stays below frac × the highest lower end."""
    sizes = sorted(curve)
    top_hi = max(curve[b].hi for b in sizes)
    top_lo = max(curve[b].lo for b in sizes)
    earliest = next((b for b in sizes if curve[b].hi >= frac * top_lo), sizes[-1])
    latest = next((b for b in sizes if curve[b].lo >= frac * top_hi), sizes[-1])
    return earliest, max(latest, earliest)


def _r2_knee(doc: Doc, ctx: Ctx) -> Verdict:
    sizes = sorted({int(t["params"]["_workload"]["bs"]) for t in _trials(doc, {"kind": "writemode", "mode": "o_sync"},
                                                                          "throughput_mib_s")})
    if not sizes:
        return Verdict(UNTESTABLE, "–", "no o_sync throughput curve")
    frac = _findings(doc, WriteModesFindings, write_modes.findings).knee_fraction
    ms = {b: _one(doc, ctx, _helper("o_sync", b), "throughput_mib_s") for b in sizes}
    curve = {b: m.est for b, m in ms.items()}
    knee = min((b for b in sizes if curve[b].mean >= frac * max(c.mean for c in curve.values())), default=sizes[-1])
    first, last = _knee_bounds(curve, frac)
    value = f"{_size(knee)}, between {_size(first)} and {_size(last)} (grid {', '.join(_size(b) for b in sizes)})"
    if not [b for b in sizes if 32 << 10 <= b <= 128 << 10]:
        return Verdict(UNTESTABLE, value, "the measured block sizes do not resolve 32–128 KiB (run the full study)")
    lo_ok, hi_ok = 32 << 10, 128 << 10
    inside = lo_ok <= first and last <= hi_ok
    outside = last < lo_ok or first > hi_ok
    verdict = HOLDS if inside else DIFFERS if outside else UNDECIDED
    decision = None
    if verdict == UNDECIDED:

        def knee_decided(k: int) -> bool:
            f2, l2 = _knee_bounds({b: m.project(k) for b, m in ms.items()}, frac)
            return lo_ok <= f2 and l2 <= hi_ok or l2 < lo_ok or f2 > hi_ok

        more = repetitions_to_decide(min(c.n for c in curve.values()), knee_decided)
        decision = (Decision(more, tuple(f"bs={_size(b)}" for b in sizes), tuple(i for m in ms.values() for i in m.ids))
                    if more is not None else Decision(None, ()))
    side = "later" if first > hi_ok else "earlier"
    reason = {HOLDS: f"O_SYNC reaches {frac:.0%} of its best throughput from {_size(knee)} on, as R2 saw at 64 KiB "
                     f"(every size's interval puts the knee between {_size(first)} and {_size(last)})",
              DIFFERS: f"gains stop {side} here, between {_size(first)} and {_size(last)}; R2 says the threshold "
                       "depends on device and OS (this is a scratch loop device)",
              UNDECIDED: f"the knee could lie anywhere from {_size(first)} to {_size(last)}, across the edge of "
                         "32–128 KiB" + undecided_words(decision)}[verdict]
    return Verdict(verdict, value, reason, None, len(sizes), decision)


def _size(n: int) -> str:
    for suffix, mult in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {suffix}"
    return f"{n} B"


# -- R3: qcow2 sync amplification (study sync-amplification) ------------------------------------------
def _amp_row(doc: Doc, fmt: str, pattern: str, fs: str) -> AmpRow | None:
    f = _findings(doc, SyncAmplificationFindings, sync_amplification.findings)
    return next((r for r in f.amplification if (r.format, r.pattern, r.guest_fs) == (fmt, pattern, fs)
                 and r.options == DEFAULTS), None)


def _causes(r: AmpRow) -> str:
    gs = r.guest_fdatasync or 0
    parts = [f"{k} {v / gs:.2f}" for k, v in sorted(r.causes.items()) if v and gs]
    return f" (per guest sync, qcow2 events: {', '.join(parts)})" if parts else ""


def _factors(r: AmpRow | None) -> list[float]:
    """The row's host syncs per guest sync, one per trial (exact counts: no clock, no noise model)."""
    return [float(v) for v in (r.factor_host_syncs_per_trial if r else []) if v is not None]


def _factor(doc: Doc, ctx: Ctx, r: AmpRow) -> Measured:
    vals, est = _factors(r), ctx.est(doc)
    ts = [t for t in ok_trials(doc) if t["params"].get("_workload", {}).get("kind") == "sync-writes"
          and t["params"].get("workload", COUNT_WORKLOAD) == COUNT_WORKLOAD
          and (t["params"]["_target"].get("format", "raw"), t["params"]["_workload"].get("pattern"),
               t["params"]["_target"].get("guest_fs", "none")) == (r.format, r.pattern, r.guest_fs)
          and all(t["params"]["_target"].get(k, v) == v for k, v in DEFAULTS.items())]
    return Measured(f"fs={r.guest_fs}", est.estimate(vals), lambda k: est.projected(vals, k),
                    (f"qcow2 append fs={r.guest_fs}",), config_ids_of(ts))


def _r3_three(doc: Doc, ctx: Ctx) -> Verdict:
    rows = [r for fs in ("none", "ext4") if (r := _amp_row(doc, "qcow2", "append", fs)) is not None and _factors(r)]
    if not rows:
        return Verdict(UNTESTABLE, "–", "no qcow2 append row with host sync counts per trial")
    ms = [(r, _factor(doc, ctx, r)) for r in rows]
    value = "; ".join(f"{m.name}: {_fmt(m.est)}" for _, m in ms)
    low_r, low = min(ms, key=lambda rm: rm[1].est.mean)
    return _verdict([(m, Band(2.95)) for _, m in ms], value, {
        HOLDS: f"at least 3 host syncs per guest sync in every measured case{_causes(low_r)}; counts hold under TCG",
        DIFFERS: f"{low.est.mean:.2f} host syncs per guest sync with {low.name}{_causes(low_r)}: this QEMU orders a "
                 "cluster allocation with fewer syncs than R3's QEMU 2.1.2; counts hold under TCG",
        UNDECIDED: f"host syncs per guest sync straddle 2.95 ({value}){_causes(low_r)}"})


def _r3_journal(doc: Doc, ctx: Ctx) -> Verdict:
    plain, ext4 = _amp_row(doc, "qcow2", "append", "none"), _amp_row(doc, "qcow2", "append", "ext4")
    if not _factors(plain) or not _factors(ext4):
        return Verdict(UNTESTABLE, "–", "needs qcow2 append with and without a guest ext4, with counts per trial")
    assert plain is not None and ext4 is not None
    m = _ratio_of(_factor(doc, ctx, ext4), _factor(doc, ctx, plain), "ext4 / none")
    value = f"{_fmt(m.est)}× ({_fmt(_factor(doc, ctx, ext4).est)} / {_fmt(_factor(doc, ctx, plain).est)})"
    g, gs = ext4.guest_flushes or 0, ext4.guest_fdatasync or 0
    flushes = f"; the guest's block layer sent {g / gs:.2f} flushes per fdatasync with ext4" if gs else ""
    words = f"the guest ext4 journal multiplies the host syncs by {value}"
    return _verdict([(m, Band(1.8, 2.2))], value, {HOLDS: words + flushes, DIFFERS: words + ", not 2×" + flushes,
                                                  UNDECIDED: words + ", an interval straddling 1.8–2.2" + flushes},
                    m.est)


def _r3_cost(apps: tuple[str, ...]) -> Callable[[Doc, Ctx], Verdict]:
    """R3's cost findings: each named application on raw (no ordering syncs: R3's barrier in the
    strongest form) against default qcow2, recomputed from the trials at the page's family level."""
    def evaluate(doc: Doc, ctx: Ctx) -> Verdict:
        tcg = _accel(doc) == "tcg"
        rows = [a for a in verdict_rows(doc, tcg, ctx.family) if a.app in apps and a.configuration == "raw"]
        if not rows:
            return Verdict(UNTESTABLE, "–", "this run had no cost section for " + ", ".join(apps))
        value = "; ".join(f"{a.r3_name} {gain_text(a.measured)}" for a in rows)
        reason = "; ".join(f"{a.r3_name} (R3 {a.r3_gain_pct:+.1f} %): {a.reason}" for a in rows)
        if tcg:
            return Verdict(UNTESTABLE, value, reason)
        said = combine(a.verdict for a in rows)
        decide = [a.decide for a in rows if a.decide]
        decision = max(decide, key=lambda d: (d.more is None, d.more or 0)) if decide and said == UNDECIDED else None
        return Verdict(said, value, reason + (undecided_words(decision) if decision else ""),
                       rows[0].measured if len(rows) == 1 else None, len(rows), decision)
    return evaluate


# -- R4: cgroup weights (study cgroup-weights) -------------------------------------------------------
R4_RATIOS = {"200": 2.03, "400": 4.08, "800": 8.12}


def _groups(doc: Doc, ctx: Ctx, ctrl: str, n: int | None, tenant: str, metric: str) -> Measured:
    where: Params = {"kind": "fio-groups", "controller": ctrl, "tenant": tenant}
    if n is not None:
        where["groups"] = n
    ts = [t for t in _trials(doc, where, metric) if t["params"].get("workload", "sweep") == "sweep"
          or tenant != "off"]
    vals, est = [float(t["metrics"][metric]) for t in ts], ctx.est(doc)
    label = f"{ctrl} N={n}" if n is not None else f"{ctrl} beside the application"
    return Measured(f"{label} {metric}", est.estimate(vals), lambda k: est.projected(vals, k), (label,),
                    config_ids_of(ts))


def _weights(doc: Doc) -> CgroupWeightsFindings:
    return _findings(doc, CgroupWeightsFindings, cgroup_weights.findings)


def _class_ratios(doc: Doc, ctx: Ctx, ctrl: str, n: int | None, tenant: str) -> list[tuple[Measured, Band]]:
    tol = _weights(doc).ratio_tolerance
    out = [(_groups(doc, ctx, ctrl, n, tenant, f"ratio_{c}"), Band(pub * (1 - tol), pub * (1 + tol)))
           for c, pub in R4_RATIOS.items()]
    return [(m, b) for m, b in out if m.est.n]


def _ratios_text(items: list[tuple[Measured, Band]]) -> str:
    return "1 : " + " : ".join(_fmt(m.est) for m, _ in items)


def _r4_four(doc: Doc, ctx: Ctx) -> Verdict:
    f = _weights(doc)
    ctrl = f.controller
    items = _class_ratios(doc, ctx, str(ctrl), 4, "off") if ctrl else []
    if len(items) < len(R4_RATIOS):
        return Verdict(UNTESTABLE, "–", "no 4-group trials under a weight-enforcing controller"
                       + f" (controller active: {f.controller_active})")
    value = _ratios_text(items)
    tol = f.ratio_tolerance
    four = f.by_groups.get("4")
    off = [m.name.split()[-1].removeprefix("ratio_") for m, b in items if b.decide(m.est.lo, m.est.hi) == DIFFERS]
    return _verdict(items, value, {
        HOLDS: f"under {ctrl} every weight class is within ±{tol:.0%} of R4's ratio",
        DIFFERS: f"under {ctrl} weight class(es) {', '.join(off)} lie outside ±{tol:.0%} of R4's ratios"
                 + _flags_words(four),
        UNDECIDED: f"under {ctrl} a class ratio's interval straddles R4's ratio ±{tol:.0%}"})


def _flags_words(v: GroupsAtN | None) -> str:
    return f" — flagged: {'; '.join(v.flag_details)}" if v and v.flag_details else ""


def _r4_beside_app(doc: Doc, ctx: Ctx) -> Verdict:
    f = _weights(doc)
    ctrl = f.controller or ""
    tenant = (f.tenant or {}).get(ctrl)  # the headline application's tenant under this controller
    items = _class_ratios(doc, ctx, ctrl, None, "beside") if ctrl else []
    if not items:
        return Verdict(UNTESTABLE, "–", "this run had no application beside the groups"
                       + (" (the --quick study leaves the tenant out)" if ctx.quick else ""))
    value = _ratios_text(items)
    # the findings' headline tenant is YCSB whenever the run had it; runs before the choice ran db_bench
    ycsb = tenant is not None and tenant.app == "ycsb"
    app = ("YCSB workload A on RocksDB, as R4" if ycsb else "RocksDB db_bench (R4 used YCSB workload A on RocksDB)")
    ops = finite_or_none(tenant.beside.tenant_ops_s.mean) if tenant else None
    p99 = finite_or_none(tenant.beside.tenant_read_p99_us.mean) if tenant else None
    if ycsb and ops is not None and p99 is not None:
        app += f" ({ops:,.0f} ops/s, read p99 {p99:,.0f} µs here; R4: 8,412.8 ops/s, 271 µs on its SATA SSD)"
    return _verdict(items, value, {HOLDS: f"the four groups keep {value} beside {app}",
                                   DIFFERS: f"beside {app} the four groups split {value}",
                                   UNDECIDED: f"beside {app} the four groups split {value}: an interval straddles "
                                              "R4's ratio ±15 %"})


def _break_items(doc: Doc, ctx: Ctx, ns: list[int], broken_at: int | None) -> list[tuple[Measured, Band]]:
    """Each N's worst share error against log2(1.5): below it for N < broken_at, above it at broken_at."""
    ctrl = str(_weights(doc).controller)
    return [(_groups(doc, ctx, ctrl, n, "off", "max_abs_log2_error"),
             Band(BREAK_LOG2) if n == broken_at else Band(-math.inf, BREAK_LOG2)) for n in ns]


def _measured_ns(doc: Doc) -> list[int]:
    return sorted(int(n) for n in _weights(doc).by_groups)


def _r4_upto16(doc: Doc, ctx: Ctx) -> Verdict:
    ns = [n for n in (8, 16) if n in _measured_ns(doc)]
    if len(ns) < 2:
        return Verdict(UNTESTABLE, "–", "this run did not measure 8 and 16 groups"
                       + (" (the --quick study runs N = 4 only)" if ctx.quick else ""))
    items = _break_items(doc, ctx, ns, None)
    value = "; ".join(f"N={n}: worst share error {_fmt(m.est)} (log2)" for n, (m, _) in zip(ns, items, strict=True))
    broken = [str(n) for n, (m, b) in zip(ns, items, strict=True) if b.decide(m.est.lo, m.est.hi) == DIFFERS]
    sig = _weights(doc).breakdown_signals
    return _verdict(items, value, {HOLDS: f"proportional sharing held at N = 8 and 16 ({value})",
                                   DIFFERS: f"sharing broke already at N = {', '.join(broken)}{_signals_words(sig)}",
                                   UNDECIDED: f"an error interval straddles log2(1.5) ({value})"})


def _signals_words(sig: Signals | None) -> str:
    if sig is None:
        return ""
    parts = []
    if sig.tag_pressure:
        parts.append(f"iodepth × N = {sig.iodepth_total} reached nr_requests = {sig.nr_requests}")
    if sig.bfq_tag_limit_min is not None:
        parts.append(f"BFQ let the smallest group queue only {sig.bfq_tag_limit_min:.0f} requests")
    if sig.generator_cpu_busy is not None:
        parts.append(f"fio used {sig.generator_cpu_busy:.2f} CPUs")
    return f": {'; '.join(parts)}" if parts else ""


def _r4_breaks32(doc: Doc, ctx: Ctx) -> Verdict:
    f = _weights(doc)
    ns = [n for n in _measured_ns(doc) if n <= 32]
    if 32 not in ns:
        return Verdict(UNTESTABLE, "–", "this run did not reach 32 groups"
                       + (" (the --quick study runs N = 4 only)" if ctx.quick else ""))
    items = _break_items(doc, ctx, ns, 32)
    n, bracket = f.breakdown_n, f.breakdown_bracket
    value = f"breaks at N = {n}" if n else "did not break"
    sig = _signals_words(f.breakdown_signals)
    early = [str(k) for k, (m, b) in zip(ns, items, strict=True) if k < 32 and b.decide(m.est.lo, m.est.hi) == DIFFERS]
    return _verdict(items, value, {
        HOLDS: f"sharing breaks first at 32 groups (bracket {bracket}){sig}",
        DIFFERS: (f"sharing breaks already at N = {', '.join(early)} (bracket {bracket}){sig}" if early else
                  f"sharing held at N = 32 (bracket {bracket})"),
        UNDECIDED: f"the share error's intervals do not place the break at 32 yet (bracket {bracket}){sig}"})


# -- R5: two VM modes (study vm-profile) ------------------------------------------------------------
def _profile_ratio(doc: Doc, ctx: Ctx, metric: str) -> Measured:
    v = collect(doc)
    enc, perf = v.get("encrypted", {}).get(metric, []), v.get("performance", {}).get(metric, [])
    est = ctx.est(doc)
    ts = [t for t in ok_trials(doc) if system_of(t) in ("encrypted", "performance") and metric in trial_metrics(t)]
    return Measured(metric.split("_", 1)[1], est.ratio(enc, perf), lambda k: est.projected_ratio(enc, perf, k),
                    (f"encrypted {metric}", f"performance {metric}"), config_ids_of(ts))


def _r5_part(part: str, metrics: tuple[str, ...]) -> Callable[[Doc, Ctx], Verdict]:
    def evaluate(doc: Doc, ctx: Ctx) -> Verdict:
        ms = [m for m in (_profile_ratio(doc, ctx, k) for k in metrics) if m.est.n]
        if not ms:
            return Verdict(UNTESTABLE, "–", f"no {part} trials for both profiles")
        value = "; ".join(f"{m.name} {_fmt(m.est)}" for m in ms)
        tcg = _accel(doc) == "tcg"
        if part == "memory":
            return Verdict(UNTESTABLE, value, "R5's balanced mode signed memory; QEMU has no such mode, "
                                              "so iolab's encrypted profile changes the disk only "
                                              f"(encrypted/performance: {value})")
        if part == "cpu":
            words = f"encrypted/performance: {value}" + (" (both guests under TCG)" if tcg else "")
            return _verdict([(m, Band(0.95, 1.05)) for m in ms], value, {
                HOLDS: "CPU speed is the same in both profiles within ±5 % (equivalence: every interval inside "
                       "0.95–1.05): " + words,
                DIFFERS: "CPU speed differs between the profiles by more than 5 %: " + words,
                UNDECIDED: "not shown equal within ±5 %, nor shown different: " + words})
        if tcg:
            return Verdict(UNTESTABLE, value, "under TCG the emulated guest I/O path dominates each request, so "
                                              f"the encryption cost is diluted ({value}); needs KVM")
        return _verdict([(m, Band(-math.inf, 1.0)) for m in ms], value, {
            HOLDS: f"every disk pattern is slower on the encrypted disk ({value})",
            DIFFERS: f"a disk pattern is faster on the encrypted disk ({value})",
            UNDECIDED: f"not every disk pattern is shown slower encrypted ({value})"})
    return evaluate


CPU = ("cpu_primes_1e8_s", "cpu_events_per_s_1t")
MEMORY = ("mem_triad_mb_s", "mem_copy_mb_s")
DISK = ("disk_randread_iops", "disk_randwrite_iops", "disk_read_iops", "disk_write_iops")

CLAIMS: list[Claim] = [
    Claim("R1-virtio-80", "R1", "virtio", "virtio-blk reaches about 80 % of the host",
          "guest/host KB/s at the largest record, write and read: every interval inside 0.70–0.90",
          _r1_band("virtio-blk", Band(0.70, 0.90))),
    Claim("R1-emulated-53", "R1", "virtio", "the emulated disk (IDE) reaches 53–55 % of the host at large records",
          "ide/host KB/s at the largest record, write and read: every interval inside 0.45–0.65",
          _r1_band("ide", Band(0.45, 0.65))),
    Claim("R1-gap-small-records", "R1", "virtio", "the smaller the record, the wider the gap",
          "ide/host write ratio at 4 KiB over at the largest record: interval wholly below 1", _r1_gap),
    Claim("R1-host-records", "R1", "virtio", "on the host, 4 MiB records write several times faster than 4 KiB "
          "(R1: 4.4×)", "host write KB/s largest record / 4 KiB: interval wholly at or above 2", _r1_host_records),
    Claim("R2-block-size", "R2", "write-modes", "larger blocks are much faster: fewer system calls for the same "
          "data (512 B took 7.8× as long as 4 KiB)", "O_SYNC 4 KiB vs 512 B speed-up: interval wholly at or above 3",
          _r2_block_size),
    Claim("R2-knee-64k", "R2", "write-modes", "gains stop at 64 KiB (a threshold that depends on device and OS)",
          "the O_SYNC knee (90 % of the best throughput), placed by every size's interval, lies in 32–128 KiB",
          _r2_knee),
    Claim("R3-three-syncs", "R3", "sync-amplification", "one guest fdatasync costs at least 3 host fdatasync "
          "on qcow2", "host syncs per guest sync on a fresh qcow2 when appending: interval wholly at or above 2.95 "
          "(counts)", _r3_three),
    Claim("R3-journal-doubles", "R3", "sync-amplification", "journaling in the guest filesystem doubles it",
          "qcow2 append host syncs per guest sync, with ext4 / without: interval inside 1.8–2.2", _r3_journal),
    Claim("R3-cost-dd-append", "R3", "sync-amplification", "cheaper ordering speeds dd append up by 81.1 %",
          "dd append (64 KiB O_DSYNC) on raw vs default qcow2, guest ext4: interval wholly at or above +20 %",
          _r3_cost(("dd-append",))),
    Claim("R3-cost-small", "R3", "sync-amplification", "for the other applications the gain is small: dd "
          "overwrite +4.5 %, Mobibench append +4.7 % and overwrite −2.7 %, varmail +9.2 %, YCSB insert +3.3 % and "
          "update +0.6 %", "raw vs default qcow2, guest ext4: every interval inside ×1.2 either way",
          _r3_cost(("dd-overwrite", "mobibench-append", "mobibench-overwrite", "varmail", "ycsb-insert",
                    "ycsb-update"))),
    Claim("R4-four-groups", "R4", "cgroup-weights", "weights 100/200/400/800 split the disk 1 : 2.03 : 4.08 : 8.12",
          "at N = 4 every class ratio's interval inside R4's ratio ±15 %", _r4_four),
    Claim("R4-beside-app", "R4", "cgroup-weights", "the split holds with YCSB-RocksDB running beside the groups",
          "class ratios beside the application: every interval inside R4's ratio ±15 %", _r4_beside_app),
    Claim("R4-holds-16", "R4", "cgroup-weights", "the ratios hold for 4, 8 and 16 groups",
          "worst share error at N = 8 and 16: every interval below log2(1.5)", _r4_upto16),
    Claim("R4-breaks-32", "R4", "cgroup-weights", "the ratios break down from 32 groups on",
          "worst share error: every interval below log2(1.5) for N < 32, wholly above it at N = 32", _r4_breaks32),
    Claim("R5-cpu-equal", "R5", "vm-profile", "CPU performance is equal in both modes",
          "encrypted/performance CPU scores: every interval inside 0.95–1.05 (equivalence)", _r5_part("cpu", CPU)),
    Claim("R5-memory-better", "R5", "vm-profile", "memory bandwidth is better without encryption (signing)",
          "encrypted/performance STREAM bandwidth below 1", _r5_part("memory", MEMORY)),
    Claim("R5-disk-better", "R5", "vm-profile", "disk IOPS are better without encryption",
          "encrypted/performance IOPS: every interval wholly below 1", _r5_part("disk", DISK)),
]


def with_findings(doc: Doc | None, study: str) -> Doc | None:
    """`doc` with its study's findings, computed (typed) from its trials when it has none (a runner
    between rounds holds trials, not a report): verdicts are a function of stored trials alone."""
    if doc is None or doc.get("findings"):
        return doc
    return {**doc, "findings": builtin.get(study).findings(doc)}


def evaluate(children: dict[str, Doc], quick: bool) -> list[ClaimRow]:
    """One row per claim: the claim, this machine's value, the verdict and the reason, every testable
    claim decided with the page's family of intervals (module docstring). `children`: each study's
    results document (`iolab report RUN --format json`, or the store's trials between rounds)."""
    children = {name: d for name, d in ((n, with_findings(c, n)) for n, c in children.items()) if d is not None}
    first = {c.id: _not_run(children.get(c.study), c.study) or _safe(c, children.get(c.study), Ctx(quick))
             for c in CLAIMS}
    family = max(sum(v.intervals for v in first.values() if v.verdict != UNTESTABLE), 1)
    rows = []
    for c in CLAIMS:
        doc = children.get(c.study)
        v = first[c.id] if first[c.id].verdict == UNTESTABLE else _safe(c, doc, Ctx(quick, family))
        v = _left_open(v, doc, c.study)
        rows.append(ClaimRow(id=c.id, reference=c.reference, study=c.study, claim=c.text, rule=c.rule,
                             verdict=v.verdict, value=v.value, reason=v.reason, estimate=v.estimate,
                             intervals=v.intervals, decide=v.decide, run_id=doc.get("run_id") if doc else None))
    return rows


def _left_open(v: Verdict, doc: Doc | None, study: str) -> Verdict:
    """A claim a time budget left unmeasured is undecided, left open by the budget, not 'not
    testable here' (which says this machine or matrix cannot answer it): what the run measured
    before the budget ended it inside its minimum is said, and nothing is claimed."""
    cut = spend.cut_short(doc, study) if doc is not None and v.verdict == UNTESTABLE else None
    if cut is None:
        return v
    said = "" if v.reason.startswith(f"the {study} study has no successful trial") else \
        f"; what it measured so far says: {v.reason}"
    return Verdict(UNDECIDED, v.value, f"left open by the budget: {cut[0]}{said}")


def study_verdicts(study: str, children: dict[str, Doc], quick: bool) -> list[ReportedVerdict]:
    """The claims one study answers, as a repetition budget reads them between that study's rounds
    (`children`: the documents stored so far, that study's included; the family is the page's
    as far as those documents make it)."""
    return [ReportedVerdict(r.id, r.claim, r.verdict, r.decide) for r in evaluate(children, quick) if r.study == study]


def family_of(rows: list[ClaimRow]) -> PageFamily:
    """What the page says about its family: how many verdicts and intervals, at which level each."""
    tested = [r for r in rows if r.verdict != UNTESTABLE]
    m = sum(r.intervals for r in tested)  # 0: nothing measured yet (a budget that afforded no study)
    return PageFamily(verdicts=len(tested), intervals=m, alpha=ALPHA, per_interval=ALPHA / max(m, 1),
                      method="Bonferroni over the intervals behind every testable verdict, on top of each "
                             "interval's adaptive-stopping design")


def _safe(c: Claim, doc: Doc | None, ctx: Ctx) -> Verdict:
    assert doc is not None
    try:
        return c.evaluate(doc, ctx)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:  # a malformed doc: say so
        return Verdict(UNTESTABLE, "–", f"could not evaluate from the stored results ({type(exc).__name__}: {exc})")
