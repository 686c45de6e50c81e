"""Comparing two runs, configuration by configuration and metric by metric, without lying.

Two runs differ by more than their repetitions show: a whole run moves with the page cache,
the image's place on disk, thermal state, a neighbour (analysis/runlevel.py). So every
verdict has two levels of noise:

* **within the run**: the spread of B's repetitions (and A's);
* **between runs**: how far runs of this configuration move as a whole, read from the store:
  A's reference level is A and the runs like A before it (same host and stack), and the
  spread of run means S^2 is pooled over the groups of alike runs on the host. B is judged
  as a new run against that level: d = mean(log B) - level, with variance
  S^2 (1 + 1/k) + max(s_B^2/n_B - within, 0) (the prediction of one more run, plus what B's
  repetitions scatter beyond the usual), on Satterthwaite's degrees of freedom. Where the
  store has no repeated runs, the documented floor tau = DEFAULT_FLOOR stands in for the
  run-level SD (variance tau^2 (1 + 1/k) + within parts) and the verdict says it compares two
  runs only: a gate needs `iolab ab`.

For every configuration both runs measured and every metric with a declared direction:

* the ratio B/A (of geometric means; against A's window when there is one) with its 95 %
  interval and the p-value of "no change", and the p-value of "the change is within the
  noise threshold" (default ±2 %): small only when the data show a change *larger than the
  threshold*;
* counts (errors, retransmits: metrics declared in the `count` range, whose estimand is the mean
  per trial; `counts.is_count`) by a quasi-Poisson rate test, so an error counter going from 0
  to 383 is a regression, not an undefined ratio; a metric whose declared range allows negative
  values has no log ratio and is listed among the skipped metrics;
* Holm's correction of those p-values over all rows, so the chance that any row claims a change
  beyond the threshold that is not there stays below 5 %, however many rows are compared;
* a verdict: `improvement` / `regression` when that Holm-adjusted p-value is below 0.05, its
  sign from the metric's declared direction; otherwise `no difference` only when the ratio's
  whole interval lies inside ±max_ci (an equivalence claim), else `undecided`; `invalid` when a
  side has fewer than MIN_N successful values, or the runs declare the metric differently;
* the tools' quantisation (a rate's millisecond clock, fio's latency histogram buckets:
  `manifest.resolution`) widens every interval and is taken off the difference before it is
  tested: two runs one clock tick or one histogram bucket apart are not a regression.

Every recorded difference between the runs (analysis/differences.py) is listed beside the rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import special

from iolab.analysis import counts, runlevel
from iolab.analysis.differences import differences, schedulers
from iolab.analysis.noise_summary import AB_HINT, noise_summary
from iolab.analysis.questions import holm_over_questions
from iolab.analysis.runlevel import DEFAULT_FLOOR, Reference, RunStat
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import LogRatio, finite
from iolab.analysis.trials import by_config, label_text, metric_set_of, relative_resolution
from iolab.core import metrics
from iolab.report.format import fmt_end

__all__ = ["ENVIRONMENT", "compare_runs", "environment_differences", "schedulers"]

VERDICTS = ("improvement", "regression", "no difference", "undecided", "invalid")
DEFAULT_THRESHOLD = 0.02
ALPHA = 0.05
MAX_CI = 0.10
MIN_N = 3
# The environment keys history names at a step (analysis/history.py).
ENVIRONMENT = (("study", "study"), ("hostname", "machine"), ("cpu_model", "CPU"), ("kernel", "kernel"),
               ("fio_version", "fio"), ("qemu_version", "QEMU"), ("iolab_version", "iolab"))
# A stored spread of run means below this (log scale: a relative SD of 1e-9, under any tool's
# printed precision) is no estimate: identical values across runs and repetitions say the metric
# is deterministic or coarser than its noise, not that the next run cannot differ.
NO_SPREAD = 1e-18


def compare_runs(a: dict[str, Any], b: dict[str, Any], *, threshold: float = DEFAULT_THRESHOLD,
                 metric_names: tuple[str, ...] = (), max_ci: float = MAX_CI,
                 history: Sequence[dict[str, Any]] = (), floor: float = DEFAULT_FLOOR) -> dict[str, Any]:
    """{run_a, run_b, threshold, alpha, correction, noise, warnings, rows, only_a, only_b, skipped, counts}.
    `history`: other stored runs of the study on the same host (documents with `created`), where the
    run-to-run noise is read; B and runs created after B are ignored."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be a fraction between 0 and 1, got {threshold}")
    if not floor >= 0:
        raise ValueError(f"floor must be a fraction >= 0, got {floor}")
    if a.get("run_id") is not None and a.get("run_id") == b.get("run_id"):
        history = ()  # a run against itself is B/A = 1 exactly, not against a level A's neighbours set
    ga, gb = by_config(a), by_config(b)
    ea, eb = RunEstimator(a), RunEstimator(b)
    before = float(b["created"]) if b.get("created") else None
    past = runlevel.prepare(history, before, exclude=[b.get("run_id")])
    rows: list[dict[str, Any]] = []
    measured: list[tuple[dict[str, Any], Reference | None, list[dict[str, Any]], list[dict[str, Any]], str]] = []
    skipped: set[str] = set()
    for cid in [c for c in ga if c in gb]:
        ta, tb = ga[cid], gb[cid]
        oa, ob = [t for t in ta if t["status"] == "ok"], [t for t in tb if t["status"] == "ok"]
        own_a, own_b = metric_set_of(ta), metric_set_of(tb)  # as each run's trials stored them
        declared = own_a.merged(own_b)
        names = sorted({m for t in oa + ob for m in t["metrics"]})
        for m in [n for n in names if not metric_names or n in metric_names]:
            decl = declared.get(m)
            if decl is None or decl.direction == "neither":
                skipped.add(m)  # no direction: neither better nor worse (settings, diagnostics)
                continue
            if not counts.is_count(decl) and decl.range.lo < 0:
                skipped.add(m)  # can be negative (a change, a log): no ratio of positive levels
                continue
            row = _base_row(cid, label_text(ta[0], cid), m, decl, ea, eb, oa, ob, ta, tb)
            clash = _declarations_differ(own_a.get(m), own_b.get(m))
            if clash:
                row["verdict"], row["reason"] = "invalid", clash
                rows.append(row)
                continue
            if counts.is_count(decl):
                _count_row(row, a, past, cid, m, oa, ob, floor)
            else:
                measured.append((row, runlevel.reference(a, past, cid, m), oa, ob, m))
            rows.append(row)
    prior = runlevel.moderate([ref.spread for _, ref, *_ in measured if ref is not None])
    for row, ref, oa, ob, m in measured:
        _measure_row(row, ref, oa, ob, m, floor)
    for r in rows:
        if r["test"] is not None:
            r["p_beyond_threshold"] = r["test"].p_beyond(threshold)
    adjusted = holm_over_questions(rows, ga, gb)
    for r, p in zip(rows, adjusted, strict=True):
        del r["test"]
        r["p_holm"] = None if math.isnan(p) else p
        if r["verdict"] is None:
            r["verdict"], r["reason"] = _verdict(r, threshold, max_ci)
        r["ratio"] = _finite(r["ratio"])  # JSON has no infinity: an unbounded end is null
        r["ratio_ci95"] = [_finite(x) for x in r["ratio_ci95"]]
    return {
        "run_a": a.get("run_id"), "run_b": b.get("run_id"), "threshold": threshold, "alpha": ALPHA,
        "max_ci": max_ci, "correction": "holm",
        "test": "two levels of noise (repetitions, and runs: from the store or the default floor) on log values; "
                "counts by a quasi-Poisson rate test; verdicts from the p-value of a change beyond the threshold",
        "noise": {**noise_summary(rows, floor, before), "moderation": prior},
        "warnings": environment_differences(a, b), "rows": rows,
        "only_a": [label_text(ga[c][0], c) for c in ga if c not in gb],
        "only_b": [label_text(gb[c][0], c) for c in gb if c not in ga],
        "skipped_metrics": sorted(skipped),
        "counts": {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS},
    }


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Every recorded difference between the two runs (analysis/differences.py)."""
    return differences(a, b)


def _base_row(cid: str, label: str, m: str, decl: metrics.Metric, ea: RunEstimator, eb: RunEstimator,
              oa: list[dict[str, Any]], ob: list[dict[str, Any]], ta: list[dict[str, Any]],
              tb: list[dict[str, Any]]) -> dict[str, Any]:
    va = [t["metrics"].get(m) for t in oa]
    vb = [t["metrics"].get(m) for t in ob]
    return {
        "config_id": cid, "config": label, "metric": m, "unit": decl.unit, "direction": decl.direction,
        "a": ea.of(decl.aggregate, va, relative_resolution(oa, m)).as_dict(decl.unit),
        "b": eb.of(decl.aggregate, vb, relative_resolution(ob, m)).as_dict(decl.unit),
        "failed_a": f"{len(ta) - len(oa)} failed of {len(ta)}", "failed_b": f"{len(tb) - len(ob)} failed of {len(tb)}",
        "ratio": None, "ratio_ci95": [None, None], "p_no_change": None, "p_beyond_threshold": None,
        "p_holm": None, "verdict": None, "reason": "", "test": None, "method": None, "noise": None,
    }


def _declarations_differ(da: metrics.Metric | None, db: metrics.Metric | None) -> str:
    """Why the two runs' values of one metric are not the same quantity ('' when they are): each
    run stored its own declaration, and a unit, direction or range that differs (events/s against
    events/min, ms against µs, a metric whose better direction was redeclared) makes any ratio of
    the values meaningless, so neither side's declaration may silently win."""
    if da is None or db is None:
        return ""
    parts = [f"{what} {x} in A, {y} in B" for what, x, y in (
        ("unit", da.unit, db.unit), ("direction", da.direction, db.direction), ("range", da.domain, db.domain),
        ("estimand", da.aggregate, db.aggregate)) if x != y]
    return ("the runs declare this metric differently (" + "; ".join(parts) + "): not comparable") if parts else ""


def _problems(row: dict[str, Any], va: list[Any], vb: list[Any]) -> bool:
    """Marks the row invalid (with why) when a side has too few finite values; True if it did."""
    problems = []
    for side, values in (("A", va), ("B", vb)):
        x, dropped = finite(values)
        if len(x) < MIN_N:
            problems.append(f"{side} has {len(x)} successful value(s), a claim needs {MIN_N}")
        if dropped:
            problems.append(f"{side} has {dropped} trial(s) without a finite value")
        if (x < 0).any():
            problems.append(f"{side} has {int((x < 0).sum())} negative value(s)")
    if problems:
        row["verdict"], row["reason"] = "invalid", "; ".join(problems)
    return bool(problems)


def _measure_row(row: dict[str, Any], ref: Reference | None, oa: list[dict[str, Any]], ob: list[dict[str, Any]],
                 m: str, floor: float) -> None:
    """A measurement (a rate, a time, a latency): B's run mean against A's reference, both levels."""
    va = [t["metrics"].get(m) for t in oa]
    vb = [t["metrics"].get(m) for t in ob]
    if _problems(row, va, vb):
        return
    xa, xb = finite(va)[0], finite(vb)[0]
    if (xa <= 0).any() or (xb <= 0).any():
        _stall_row(row, xa, xb, ref, floor)
        return
    b_stat = RunStat("B", 0.0, float(np.log(xb).mean()), float(np.log(xb).var(ddof=1)) / len(xb), len(xb))
    assert ref is not None  # A has MIN_N positive values
    d, var, df, noise = _two_level(ref, b_stat, floor)
    rels = (max(relative_resolution(oa, m), ref.rel), relative_resolution(ob, m))
    test = _log_ratio(d, var, df, rels)
    row.update(ratio=test.ratio, ratio_ci95=[test.lo, test.hi], p_no_change=test.p, test=test, noise=noise,
               method="log-t, two levels")
    if ref.k > 1:
        row["a_window"] = {"runs": ref.k, "level": math.exp(ref.level), "ids": [r.run_id for r in ref.window]}


def _two_level(ref: Reference, b: RunStat, floor: float) -> tuple[float, float, float, dict[str, Any]]:
    """(d, variance of d, degrees of freedom, what noise was used) for B's run mean against A's level."""
    k, d = ref.k, b.mean - ref.level
    sp = ref.spread
    if sp.df > 0 and sp.s2 > NO_SPREAD:
        c1 = sp.s2 * (1 + 1 / k)
        c2 = max(b.var_mean - sp.within, 0.0)
        var = c1 + c2
        den = (c1**2 / sp.df if c1 else 0.0) + (c2**2 / (b.n - 1) if c2 and b.n > 1 else 0.0)
        df = var**2 / den if den > 0 else math.inf
        return d, var, df, {"source": "store", **sp.as_dict(), "window_runs": k}
    c1 = floor**2 * (1 + 1 / k)  # known, no degrees of freedom spent
    c2, c3 = b.var_mean, ref.window_within / k
    dfw = sum(r.n - 1 for r in ref.window)
    var = c1 + c2 + c3
    den = (c2**2 / (b.n - 1) if c2 and b.n > 1 else 0.0) + (c3**2 / dfw if c3 and dfw else 0.0)
    df = var**2 / den if den > 0 else math.inf
    identical = {"store_identical": len(sp.runs)} if sp.df > 0 else {}  # runs that were there but alike
    return d, var, df, {"source": "floor", "tau": floor, "df": None, "runs": 0, "oldest": None, "newest": None,
                        "window_runs": k, **identical}


def _log_ratio(d: float, var: float, df: float, rels: tuple[float, float]) -> LogRatio:
    """The log-ratio test of stats.LogRatio with this variance: interval, p of no change, p beyond."""
    slack = sum(-math.log1p(-x) if x < 1 else math.inf for x in rels if x > 0)
    seen = max(abs(d) - slack, 0.0)
    se = math.sqrt(max(var, 0.0))
    df = min(df, 1e6)
    if se == 0.0:
        return LogRatio(math.exp(d), math.exp(d - slack), math.exp(d + slack), 1.0 if seen == 0 else 0.0, d, 0.0,
                        df, slack)
    p = 2 * float(special.stdtr(df, -seen / se))
    h = float(special.stdtrit(df, 0.975)) * se
    return LogRatio(math.exp(d), math.exp(d - h - slack), math.exp(d + h + slack), p, d, se, df, slack)


def _stall_row(row: dict[str, Any], xa: np.ndarray, xb: np.ndarray, ref: Reference | None, floor: float) -> None:
    """A measurement with zeros (a stalled trial) is evidence, not invalid: the ratio of arithmetic
    means on the log scale by the delta method, with the run-level noise of the other rows' kind
    (the store's spread of this metric, else the floor). A side whose every trial stalled against
    one whose none did is as extreme as the data can be: the exact permutation p."""
    ma, mb = float(xa.mean()), float(xb.mean())
    zeros = (int((xa <= 0).sum()), int((xb <= 0).sum()))
    row["stalled"] = {"a": zeros[0], "b": zeros[1], "higher": mb > ma}
    if ma <= 0 or mb <= 0:
        p = 2.0 / math.comb(len(xa) + len(xb), len(xb))
        hit = (ma <= 0 < float(xb.min())) or (mb <= 0 < float(xa.min()))
        row.update(ratio=None if ma <= 0 else 0.0, p_no_change=min(1.0, p) if hit else 1.0,
                   method="exact permutation (every trial of one side stalled)")
        row["test"] = _Fixed(row["p_no_change"])
        row["ratio_ci95"] = [None, None] if ma <= 0 else [0.0, None]  # no upper bound from a split alone
        return
    tau2 = floor**2
    if ref is not None and ref.spread.df > 0:
        tau2 = max(ref.spread.s2 - ref.spread.within, 0.0)
    k = ref.k if ref is not None else 1
    var = (float(xa.var(ddof=1)) / len(xa) / ma**2 + float(xb.var(ddof=1)) / len(xb) / mb**2 + tau2 * (1 + 1 / k))
    df = float(min(len(xa), len(xb)) - 1)
    test = _log_ratio(math.log(mb / ma), var, df, (0.0, 0.0))
    row.update(ratio=test.ratio, ratio_ci95=[test.lo, test.hi], p_no_change=test.p, test=test,
               method="log of arithmetic means (delta), stalls included")


class _Fixed:
    """A test whose p does not depend on the threshold (a deterministic split of the data)."""

    def __init__(self, p: float):
        self.p = p

    def p_beyond(self, threshold: float) -> float:
        return self.p


def _count_row(row: dict[str, Any], a: dict[str, Any], past: Sequence[runlevel.Stored], cid: str, m: str,
               oa: list[dict[str, Any]], ob: list[dict[str, Any]], floor: float) -> None:
    va = [t["metrics"].get(m) for t in oa]
    vb = [t["metrics"].get(m) for t in ob]
    if _problems(row, va, vb):
        return
    groups = [list(finite(va)[0])]
    fp, created = runlevel.fingerprint(a), float(a.get("created") or 0.0)
    alike = [s for s in past if s.fingerprint == fp and s.run_id != a.get("run_id") and s.created <= created]
    for s in alike[-(runlevel.WINDOW - 1):]:
        trials = [t for t in s.configs.get(cid) or [] if t["status"] == "ok"]
        vals = list(finite([t["metrics"].get(m) for t in trials])[0])
        if vals:
            groups.append(vals)
    t = counts.count_test(groups, list(finite(vb)[0]), floor=floor)
    hi = None if math.isinf(t.hi) else t.hi
    stored = len(groups) > 1
    row.update(ratio=t.ratio, ratio_ci95=[t.lo, hi], p_no_change=t.p, test=t,
               method=f"quasi-Poisson rate test (phi {t.phi:.2g}) and run-level log-rate test",
               counts={"a_per_trial": t.rate_a, "b_per_trial": t.rate_b, "phi": t.phi, "a_runs": len(groups)},
               noise={"source": "store" if stored else "two runs", "window_runs": len(groups),
                      "tau": t.run_sd if stored else None, "df": t.run_df if stored else None,
                      "assumed_tau": None if stored else floor})


def _verdict(row: dict[str, Any], threshold: float, max_ci: float) -> tuple[str, str]:
    (lo, hi), p = row["ratio_ci95"], row["p_holm"]
    c = row.get("counts")
    if c is not None and c["a_per_trial"] == 0 and c["b_per_trial"] == 0:
        return "no difference", "none in any trial of either run"
    two_runs = (row.get("noise") or {}).get("source") in ("floor", "two runs")
    caveat = f"; compares two runs only: {AB_HINT}" if two_runs else ""
    higher = _higher(row)
    if p is not None and p < ALPHA:
        better = higher == (row["direction"] == "higher")
        word = "improvement" if better else "regression"
        return word, (f"{'higher' if higher else 'lower'} {_size(row)} ({row['direction']} is better); "
                      f"beyond ±{threshold:.0%} with p = {p:.2g} after Holm{caveat}")
    if not _within_band(lo, hi, max_ci):
        shown = f"{fmt_end(lo, 3)}..{fmt_end(hi, 3)}" if lo is not None and hi is not None else "an unbounded range"
        return "undecided", (f"the 95% interval of B/A spans {shown}, reaching beyond ±{max_ci:.0%}: a change "
                             f"that large could hide{caveat}")
    if row["p_no_change"] is not None and row["p_no_change"] < ALPHA:
        return "no difference", (f"{_size(row)} {'higher' if higher else 'lower'}, not shown to exceed the "
                                 f"±{threshold:.0%} threshold after Holm (p = {p:.2g}){caveat}")
    return "no difference", (f"no change shown (p = {row['p_no_change']:.2g}; beyond ±{threshold:.0%}: "
                             f"{p:.2g} after Holm){caveat}")


def _within_band(lo: float | None, hi: float | None, max_ci: float) -> bool:
    """"No difference" is a claim about where the interval lies (docs/statistics.md, "Verdicts"):
    the whole 95 % interval of B/A inside [1/(1 + max_ci), 1 + max_ci]. Its width alone is not
    enough: a narrow interval off-centre ([0.836, 0.988]) still lets a 16 % change hide."""
    if lo is None or hi is None or not lo > 0 or not math.isfinite(hi):
        return False
    return 1 / (1 + max_ci) <= lo and hi <= 1 + max_ci


def _higher(row: dict[str, Any]) -> bool:
    c = row.get("counts")
    if c is not None:
        return bool(c["b_per_trial"] > c["a_per_trial"])
    if row.get("stalled") is not None and row["ratio"] is None:
        return bool(row["stalled"]["higher"])
    return bool(row["ratio"] is not None and row["ratio"] > 1)


def _size(row: dict[str, Any]) -> str:
    c = row.get("counts")
    if c is not None and row["ratio"] is None:
        return f"from {c['a_per_trial']:.4g} to {c['b_per_trial']:.4g} per trial"
    r = row["ratio"]
    return "without bound" if r is None or math.isinf(r) else f"by {abs(r - 1):.1%}"


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x
