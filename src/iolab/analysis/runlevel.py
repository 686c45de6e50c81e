"""Run-to-run noise: how far a configuration's result moves between runs, read from the store.

Two runs of the same configuration on the same machine differ by more than their
repetitions suggest: page-cache state, the image's place on the disk, thermal state, a
neighbour's load, a reboot all move a whole run at once. A value of run r is modelled on
the log scale as

    y = mu + u_r + e,   u_r ~ (0, tau^2) per run,   e ~ (0, sigma^2) per repetition,

so the mean of run r has variance tau^2 + sigma^2 / n_r. Repetitions inside one run see only
sigma; a verdict between runs needs tau too (docs/statistics.md, "Two levels of noise").

What this module reads from the store, per configuration and metric:

* **the reference level of A**: A and the runs *like A* before it (same host and the same
  recorded stack: kernel, CPU, governor, fio, QEMU, iolab, autogroup placement; `FINGERPRINT`),
  the newest `WINDOW` of them. Their mean is a better estimate of "A's setup" than A alone,
  and its variance is (tau^2 + sigma^2/n) / k.
* **the spread of run means** S^2 (which estimates tau^2 + sigma^2/n): pooled over every group
  of alike runs on this host (one-way analysis of variance of run means, within groups), the
  newest `SPREAD_RUNS` runs, with its degrees of freedom sum(k_g - 1) and the runs' dates.

Where no group has two runs, there is no estimate: `DEFAULT_FLOOR` (measured on repeated real
runs, docs/statistics.md) stands in for tau and the verdict says that it compares two runs only.
Pure: result documents in, numbers out; the CLI chooses which stored runs to pass.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from iolab.analysis.trials import by_config, label_text, relative_resolution, workload_of
from iolab.core import metrics

# Environment keys that must agree for two runs to be repeats of one setup.
FINGERPRINT = ("hostname", "cpu_model", "cpus", "kernel", "kernel_version", "cpu_governor", "sched_autogroup",
               "workload_session", "fio_version", "qemu_version", "qemu_img_version", "iolab_version")
WINDOW = 10  # runs like A (A included) that make A's reference level
SPREAD_RUNS = 30  # newest runs of a configuration whose spread is pooled
# tau assumed when the store holds no repeated runs: a policy, the run-to-run spread of a quiet
# machine (the first two runs of bench/run run-to-run differed by 3 % in events/s), not the
# reference machine's busy-hour figure (8-172 %); docs/statistics.md, "How the default floor was measured"
DEFAULT_FLOOR = 0.03


def fingerprint(doc: dict[str, Any]) -> tuple[Any, ...]:
    env = doc.get("environment") or {}
    return tuple(str(env.get(k)) for k in FINGERPRINT)


@dataclass(frozen=True)
class RunStat:
    """One run's values of one configuration and metric, on the log scale."""

    run_id: str
    created: float
    mean: float  # mean of the log values
    var_mean: float  # s^2 / n of the log values (0 for n = 1: no within-run estimate)
    n: int
    rel: float = 0.0  # the largest clock error of the run's values, relative (trials.relative_resolution)


def positive_values(trials: list[dict[str, Any]], metric: str) -> list[float]:
    """The finite, positive values of `metric` in the successful trials."""
    out = []
    for t in trials:
        if t.get("status") != "ok":
            continue
        v = (t.get("metrics") or {}).get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out.append(float(v))
    return out


def run_stat(doc: dict[str, Any], trials: list[dict[str, Any]], metric: str) -> RunStat | None:
    x = np.log(positive_values(trials, metric))
    if len(x) == 0:
        return None
    var_mean = float(x.var(ddof=1)) / len(x) if len(x) > 1 else 0.0
    return RunStat(str(doc.get("run_id")), float(doc.get("created") or 0.0), float(x.mean()), var_mean, len(x),
                   relative_resolution([t for t in trials if t.get("status") == "ok"], metric))


@dataclass
class Spread:
    """The spread of run means of one configuration and metric, pooled over groups of alike runs."""

    s2: float  # variance of run means (log scale) this row uses; nan without an estimate
    df: float  # its degrees of freedom: sum over groups of (runs - 1), more once moderated
    within: float  # mean s^2/n of those runs: the part of s2 the repetitions explain
    runs: list[RunStat] = field(default_factory=list)  # the runs the estimate uses
    deviations: dict[str, float] = field(default_factory=dict)  # run id -> run mean - its group's mean
    own_s2: float = math.nan  # this row's own estimate and df, before moderation (moderate())
    own_df: int = 0

    @property
    def tau(self) -> float | None:
        """The run-level SD beyond the repetitions (relative, log scale), None without an estimate."""
        if self.df <= 0:
            return None
        return math.sqrt(max(self.s2 - self.within, 0.0))

    def as_dict(self) -> dict[str, Any]:
        created = [r.created for r in self.runs if r.created]
        return {"tau": self.tau, "df": self.df, "own_df": self.own_df, "runs": len(self.runs),
                "oldest": min(created) if created else None, "newest": max(created) if created else None}


def spread(groups: Sequence[Sequence[RunStat]]) -> Spread:
    """Pooled within-group variance of run means: sum_g sum_r (m_r - mean_g)^2 / sum_g (k_g - 1)."""
    ss, df, used = 0.0, 0, []
    dev: dict[str, float] = {}
    for g in groups:
        if len(g) < 2:
            continue
        m = np.array([r.mean for r in g])
        ss += float(((m - m.mean()) ** 2).sum())
        df += len(g) - 1
        used += list(g)
        dev.update({r.run_id: float(v) for r, v in zip(g, m - m.mean(), strict=True)})
    if df == 0:
        return Spread(math.nan, 0, 0.0, [])
    within = float(np.mean([r.var_mean for r in used]))
    return Spread(ss / df, df, within, used, dev, ss / df, df)


def moderate(spreads: Sequence[Spread]) -> dict[str, Any]:
    """Borrow strength across the rows of one comparison (Smyth 2004, limma's squeezeVar): each
    row's spread s^2 on d degrees of freedom is shrunk toward a common prior s0^2 worth d0
    degrees of freedom, both estimated from the rows' spreads (a scaled inverse chi-square prior,
    fitted by moments of log s^2):

        s~^2 = (d0 s0^2 + d s^2) / (d0 + d)   on d0 + d degrees of freedom.

    Rows that scatter more than sampling explains get a small d0 (little pooling); rows that
    agree get a large one. Rows are not independent when runs move as a whole (a run's day
    moves every configuration): the prior's worth is capped at the effective degrees of freedom
    of the pooled rows, d_eff = d G / (1 + (G - 1) r^2), r^2 the mean squared correlation of the
    rows' run deviations, so ten rows that moved together count as one. Changes `spreads` in
    place; returns the prior (s0^2, d0, the cap, rows)."""
    rows = [s for s in spreads if s.own_df > 0 and s.own_s2 > 0 and math.isfinite(s.own_s2)]
    info: dict[str, Any] = {"rows": len(rows), "d0": 0.0, "s0": None, "cap": 0.0}
    if len(rows) < 3:
        return info
    d = np.array([s.own_df for s in rows], dtype=float)
    z = np.log([s.own_s2 for s in rows])
    e = z - special.digamma(d / 2) + np.log(d / 2)
    excess = float(e.var(ddof=1) - np.mean(special.polygamma(1, d / 2)))
    d0 = math.inf if excess <= 0 else 2 * _trigamma_inverse(excess)
    cap = _effective_df(rows) - float(d.mean())
    d0 = max(0.0, min(d0, cap))
    s0 = float(np.exp(e.mean() + (special.digamma(d0 / 2) - math.log(d0 / 2) if d0 > 0 else 0.0)))
    info.update(d0=d0, s0=math.sqrt(s0), cap=cap)
    if d0 <= 0:
        return info
    for s in rows:
        s.s2 = (d0 * s0 + s.own_df * s.own_s2) / (d0 + s.own_df)
        s.df = d0 + s.own_df
    return info


def _trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (Newton's method on 1/trigamma, as limma does)."""
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = float(special.polygamma(1, x))
        step = tri * (1 - tri / y) / float(special.polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


def _effective_df(rows: Sequence[Spread]) -> float:
    """sum of the rows' df, discounted by how alike their run deviations are (squared correlation,
    with the sampling bias of r^2 removed)."""
    g = len(rows)
    r2: list[float] = []
    for i in range(g):
        for j in range(i + 1, g):
            common = sorted(set(rows[i].deviations) & set(rows[j].deviations))
            if len(common) < 3:
                r2.append(1.0)  # cannot tell: count them as one
                continue
            x = np.array([rows[i].deviations[c] for c in common])
            y = np.array([rows[j].deviations[c] for c in common])
            sx, sy = float(x.std()), float(y.std())
            r = float((x * y).mean() / (sx * sy)) if sx > 0 and sy > 0 else 1.0
            k = len(common) - 1  # the deviations' degrees of freedom (about)
            r2.append(r * r if k > 1 else 1.0)  # not corrected for its sampling bias (1/k): errs toward fewer df
    mean_r2 = float(np.mean(r2)) if r2 else 1.0
    d = float(np.mean([s.own_df for s in rows]))
    return d * g / (1 + (g - 1) * mean_r2)


@dataclass
class Reference:
    """A's reference level for one configuration and metric, and the run-to-run spread to judge B by."""

    window: list[RunStat]  # A and the runs like A before it, oldest first (A last)
    spread: Spread

    @property
    def level(self) -> float:
        return float(np.mean([r.mean for r in self.window]))

    @property
    def k(self) -> int:
        return len(self.window)

    @property
    def rel(self) -> float:
        """The largest clock error of the window's runs: the level is off by at most that much."""
        return max(r.rel for r in self.window)

    @property
    def window_within(self) -> float:
        return float(np.mean([r.var_mean for r in self.window]))


@dataclass(frozen=True)
class Stored:
    """A stored run, read once for all rows of a comparison."""

    doc: dict[str, Any]
    configs: dict[str, list[dict[str, Any]]]
    fingerprint: tuple[Any, ...]
    created: float

    @property
    def run_id(self) -> str:
        return str(self.doc.get("run_id"))


def prepare(history: Sequence[dict[str, Any]], before: float | None = None,
            exclude: Sequence[Any] = ()) -> list[Stored]:
    """The stored runs a comparison may learn from: created before `before` (B's creation: nothing
    B could not have known), not in `exclude` (B itself), oldest first."""
    out = []
    for doc in history:
        created = float(doc.get("created") or 0.0)
        if doc.get("run_id") in exclude or (before is not None and created >= before):
            continue
        out.append(Stored(doc, by_config(doc), fingerprint(doc), created))
    return sorted(out, key=lambda s: s.created)


def reference(a: dict[str, Any], stored: Sequence[Stored], config_id: str, metric: str) -> Reference | None:
    """A's window and the spread for `config_id`/`metric`. `stored`: runs of the same study on the
    same host (prepare(); A may be among them). None when A has no positive value."""
    a_stat = run_stat(a, by_config(a).get(config_id) or [], metric)
    if a_stat is None:
        return None
    fp_a, created_a = fingerprint(a), float(a.get("created") or 0.0)
    stats: list[tuple[tuple[Any, ...], RunStat]] = []
    for s in stored:
        trials = s.configs.get(config_id)
        st = run_stat(s.doc, trials, metric) if trials and s.run_id != a_stat.run_id else None
        if st is not None:
            stats.append((s.fingerprint, st))
    stats.append((fp_a, a_stat))
    stats.sort(key=lambda fs: fs[1].created)
    groups: dict[tuple[Any, ...], list[RunStat]] = defaultdict(list)
    for fp, st in stats[-SPREAD_RUNS:]:
        groups[fp].append(st)
    window = [st for fp, st in stats if fp == fp_a and st.created <= created_a and st.run_id != a_stat.run_id]
    window = [*window[-(WINDOW - 1):], a_stat]
    return Reference(window, spread(list(groups.values())))


def spread_of_runs(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """For bench/run run-to-run: per configuration and metric over `docs` (repeats of one study), the
    run-level SD tau, the typical within-run SD of a run mean and the SD of the run means."""
    by: dict[tuple[str, str], list[RunStat]] = defaultdict(list)
    labels: dict[str, str] = {}
    for doc in docs:
        for cid, trials in by_config(doc).items():
            labels[cid] = label_text(trials[0], cid)
            declared = metrics.for_workload(workload_of(trials[0]))
            names = {m for t in trials if t["status"] == "ok" for m in t["metrics"]}
            for m in sorted(names):
                decl = declared.get(m)
                if decl is None or decl.direction == "neither":
                    continue
                st = run_stat(doc, trials, m)
                if st is not None:
                    by[(cid, m)].append(st)
    out = []
    for (cid, m), runs in sorted(by.items()):
        s = spread([runs])
        out.append({"config": labels[cid], "metric": m, "runs": len(runs), "tau": s.tau,
                    "within": math.sqrt(s.within) if s.df else math.nan,
                    "between": math.sqrt(s.s2) if s.df else math.nan})
    return out
