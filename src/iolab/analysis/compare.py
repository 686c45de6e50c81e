"""Comparing two runs, configuration by configuration and metric by metric, without lying.

For every configuration both runs measured and every metric with a declared direction:

* the ratio B/A of geometric means with its 95 % interval and the p-value of "no change",
  both from Welch's t-test on the log values (a change of x % is the same shift at any
  level, which suits ratios; for the small spreads of benchmarks the ratio of geometric
  means is within CV²/2 of the ratio of means);
* the p-value of "the change is within the noise threshold" (default ±2 %): the same Welch
  statistic tested against the edge of the threshold band instead of against 1, so it is
  small only when the data show a change *larger than the threshold*;
* Holm's correction of those p-values over all rows of the comparison, so the chance that
  any row claims a change beyond the threshold that is not there stays below 5 %, however
  many configurations × metrics are compared;
* a verdict: `improvement` / `regression` when that Holm-adjusted p-value is below 0.05
  (significant after Holm AND larger than the threshold), its sign read from the metric's
  declared direction; otherwise `too noisy` when the ratio's 95 % interval is wider than
  ±max_ci (a change that large could hide), else `no difference`; `invalid` when a side
  has fewer than MIN_N successful values or a value that is not a positive number;
* the tools' clock error (a rate over a pass of a few milliseconds, `manifest.resolution`)
  widens every interval and is taken off the difference before it is tested: two runs one
  millisecond tick apart are not a regression.

Runs of different studies, machines or versions are compared with a warning that names
every difference (from the environment and the trial manifests).
"""

from __future__ import annotations

import math
from typing import Any

from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import finite, holm, welch_log
from iolab.analysis.trials import by_config, label_text, metric_set_of, relative_resolution
from iolab.core import metrics

VERDICTS = ("improvement", "regression", "no difference", "too noisy", "invalid")
DEFAULT_THRESHOLD = 0.02
ALPHA = 0.05
MAX_CI = 0.10
MIN_N = 3
ENVIRONMENT = (("study", "study"), ("hostname", "machine"), ("cpu_model", "CPU"), ("kernel", "kernel"),
               ("fio_version", "fio"), ("qemu_version", "QEMU"), ("iolab_version", "iolab"))


def compare_runs(a: dict[str, Any], b: dict[str, Any], *, threshold: float = DEFAULT_THRESHOLD,
                 metric_names: tuple[str, ...] = (), max_ci: float = MAX_CI) -> dict[str, Any]:
    """{run_a, run_b, threshold, alpha, correction, warnings, rows, only_a, only_b, skipped}."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be a fraction between 0 and 1, got {threshold}")
    ga, gb = by_config(a), by_config(b)
    ea, eb = RunEstimator(a), RunEstimator(b)
    rows: list[dict[str, Any]] = []
    skipped: set[str] = set()
    for cid in [c for c in ga if c in gb]:
        ta, tb = ga[cid], gb[cid]
        oa, ob = [t for t in ta if t["status"] == "ok"], [t for t in tb if t["status"] == "ok"]
        declared = metric_set_of(ta).merged(metric_set_of(tb))  # as each run's trials stored them, A's first
        names = sorted({m for t in oa + ob for m in t["metrics"]})
        for m in [n for n in names if not metric_names or n in metric_names]:
            decl = declared.get(m)
            if decl is None or decl.direction == "neither":
                skipped.add(m)  # no direction: neither better nor worse (counts, settings, diagnostics)
                continue
            va = [t["metrics"].get(m) for t in oa]
            vb = [t["metrics"].get(m) for t in ob]
            rels = (relative_resolution(oa, m), relative_resolution(ob, m))
            rows.append(_row(cid, label_text(ta[0], cid), m, decl, va, vb, ea, eb, rels,
                             len(ta) - len(oa), len(ta), len(tb) - len(ob), len(tb)))
    for r in rows:
        if r["test"] is not None:
            r["p_beyond_threshold"] = r["test"].p_beyond(threshold)
    adjusted = holm([r["p_beyond_threshold"] if r["p_beyond_threshold"] is not None else math.nan for r in rows])
    for r, p in zip(rows, adjusted, strict=True):
        del r["test"]
        r["p_holm"] = None if math.isnan(p) else p
        if r["verdict"] is None:
            r["verdict"], r["reason"] = _verdict(r, threshold, max_ci)
    return {
        "run_a": a.get("run_id"), "run_b": b.get("run_id"), "threshold": threshold, "alpha": ALPHA,
        "max_ci": max_ci, "correction": "holm",
        "test": "welch t-test on log values; verdicts from the p-value of a change beyond the threshold",
        "warnings": environment_differences(a, b), "rows": rows,
        "only_a": [label_text(ga[c][0], c) for c in ga if c not in gb],
        "only_b": [label_text(gb[c][0], c) for c in gb if c not in ga],
        "skipped_metrics": sorted(skipped),
        "counts": {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS},
    }


def _row(cid: str, label: str, m: str, decl: metrics.Metric, va: list[Any], vb: list[Any], ea: RunEstimator,
         eb: RunEstimator, rels: tuple[float, float], failed_a: int, attempts_a: int, failed_b: int,
         attempts_b: int) -> dict[str, Any]:
    """One metric of one configuration, A against B. `rels`: the clock error of A's and B's values
    (a rate over a few milliseconds): it widens both estimates and the ratio, and a change it
    could explain is no change."""
    xa, drop_a = finite(va)
    xb, drop_b = finite(vb)
    row: dict[str, Any] = {
        "config_id": cid, "config": label, "metric": m, "unit": decl.unit, "direction": decl.direction,
        "a": ea.of(decl.aggregate, va, rels[0]).as_dict(decl.unit),
        "b": eb.of(decl.aggregate, vb, rels[1]).as_dict(decl.unit),
        "failed_a": f"{failed_a} failed of {attempts_a}", "failed_b": f"{failed_b} failed of {attempts_b}",
        "ratio": None, "ratio_ci95": [None, None], "p_no_change": None, "p_beyond_threshold": None,
        "p_holm": None, "verdict": None, "reason": "", "test": None,
    }
    problems = []
    for side, x, dropped in (("A", xa, drop_a), ("B", xb, drop_b)):
        if len(x) < MIN_N:
            problems.append(f"{side} has {len(x)} successful value(s), a claim needs {MIN_N}")
        if dropped:
            problems.append(f"{side} has {dropped} trial(s) without a finite value")
        if (x <= 0).any():
            problems.append(f"{side} has {int((x <= 0).sum())} value(s) <= 0 (a stall?): no ratio of logs")
    if problems:
        row["verdict"], row["reason"] = "invalid", "; ".join(problems)
        return row
    test = welch_log(xa, xb, rels=rels)
    row.update(ratio=test.ratio, ratio_ci95=[test.lo, test.hi], p_no_change=test.p, test=test)
    return row


def _verdict(row: dict[str, Any], threshold: float, max_ci: float) -> tuple[str, str]:
    r, (lo, hi), p = row["ratio"], row["ratio_ci95"], row["p_holm"]
    if p < ALPHA:
        better = (r > 1) == (row["direction"] == "higher")
        word = "improvement" if better else "regression"
        return word, (f"{'higher' if r > 1 else 'lower'} by {abs(r - 1):.1%} ({row['direction']} is better); "
                      f"beyond ±{threshold:.0%} with p = {p:.2g} after Holm")
    if math.sqrt(hi / lo) - 1 > max_ci:
        return "too noisy", (f"the 95% interval of B/A spans {lo:.3f}..{hi:.3f}: "
                             f"a change of over {max_ci:.0%} could hide")
    if row["p_no_change"] < ALPHA:
        return "no difference", (f"{abs(r - 1):.1%} {'higher' if r > 1 else 'lower'}, not shown to exceed the "
                                 f"±{threshold:.0%} threshold after Holm (p = {p:.2g})")
    return "no difference", (f"no change shown (p = {row['p_no_change']:.2g}; "
                             f"beyond ±{threshold:.0%}: {p:.2g} after Holm)")


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One line per difference that makes the runs not like-for-like: study, machine, CPU,
    kernel, fio, QEMU, iolab versions, and the I/O schedulers the trials ran under."""
    ea, eb = a.get("environment") or {}, b.get("environment") or {}
    out = []
    for key, label in ENVIRONMENT:
        va = a.get("study") if key == "study" else ea.get(key)
        vb = b.get("study") if key == "study" else eb.get(key)
        if va != vb:
            out.append(f"{label} differs: A {_known(va)}, B {_known(vb)}")
    sa, sb = schedulers(a), schedulers(b)
    if sa != sb:
        out.append(f"scheduler differs: A {', '.join(sa) or 'unknown'}, B {', '.join(sb) or 'unknown'}")
    return out


def _known(v: Any) -> str:
    return "unknown" if v is None else str(v)


def schedulers(doc: dict[str, Any]) -> list[str]:
    """The active I/O schedulers of the devices the trials ran on (from each trial's manifest)."""
    found = set()
    for t in doc.get("trials") or []:
        queue = ((t.get("manifest") or {}).get("target") or {}).get("queue") or {}
        if isinstance(queue, dict) and queue.get("scheduler_active"):
            found.add(str(queue["scheduler_active"]))
    return sorted(found)
