"""Simulated studies through iolab's own stopping rule and interval code, on two sets of noise.

Each simulated study is one configuration of a run: the runner's StopRule.wants_more (what
Runner._wants_more calls after every trial) decides after every repetition whether another
is needed, exactly as for a real run, and the study's interval is interval_batch at the
stopping point (what sequential_ci, i.e. every report, prints), its run-order checks those
the report prints beside it. A second, independent metric of the same shape is read at the
stop the first one decided (every other metric of a configuration is reported that way).

**The design set** is what calibration.py tuned the intervals on: normal, lognormal σ = 0.5
(both skews), Student t3. **The held-out set** was never used to tune anything; it only
judges: shifted lognormals with σ = 1 and 1.5 (skewness 6 and 33; both ways), AR(1) between
consecutive repetitions with ρ = 0.2, 0.5, 0.8, mixtures where 10 % or 20 % of the runs land
30 % higher (a cache hit), a level drifting 5 % over the run, 5 % of runs at half speed
(outliers), and fio's clock: rates over passes of ~20 ms timed in whole milliseconds.

What is estimated is the median of the configuration's repetitions (docs/statistics.md); the
truth of each cell is its noise's population median (under drift: of the trials that ran).

`python -m tests.analysis.coverage` prints both tables of docs/statistics.md (10 000 studies
per cell; about ten minutes on a loaded two-core machine); `--dependence` the runs of 8
configurations; `--runner-design`, `--runner-held-out-4`, `--runner-held-out-5` and
`--runner-held-out-6` the runner's dependence rule (about 15 minutes each); `--held-out-6` the sixth
held-out set for one configuration, `--quick-runs K [CV_RATIO ...] [--cap=RHO] [--held-out-6]` `--quick`
runs (3..3) of K configurations with the width the pooled dependence gives their intervals (`--cap`: the rule
before dependence.tested_in), `--design` the design table alone;
`--breakdown SHAPE CV_RATIO [N]`
where the coverage of runs of 8 configurations comes from (by the pooled z, by repetitions); `--test-power`
the pooled dependence test's power against the most powerful invariant test's (`point_optimal`); `--levers`
the alternatives to the shipped rule for runs that were measured and not kept (`LEVERS`).
tests/analysis/test_adaptive_coverage.py runs a smaller version and recomputes a few published cells exactly.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

from iolab.analysis import calibration, checks, dependence
from iolab.analysis.plan import StopRule
from iolab.analysis.sequential import interval_batch
from iolab.core.metrics import NONNEG

STUDIES = 10_000
CI_TARGET = 0.05
DESIGN_SET = calibration.DESIGN_SHAPES
HELD_OUT = ("lognormal σ=1", "lognormal σ=1.5", "lognormal-left σ=1.5", "ar1 ρ=0.2", "ar1 ρ=0.5", "ar1 ρ=0.8",
            "mixture 10% +30%", "mixture 20% +30%", "drift +5%", "outliers 5% at ½", "clock 20 ms")
# Added after the first held-out evaluation had informed one change of the design (docs/statistics.md,
# "How the held-out sets were used"), and evaluated once: shapes nobody had looked at.
HELD_OUT_2 = ("exponential", "t2", "mixture 5% ×2", "two modes 50% +10%", "ar1 ρ=0.3")
# Dependence between consecutive repetitions, pooled over a run's configurations (analysis/dependence.py):
# Z_WIDEN and RHO_MARGIN were chosen on DEPENDENCE_DESIGN only; HELD_OUT_3 was written down before it was
# evaluated, once (docs/statistics.md). MA(1) θ=0.5 has a lag-1 correlation of 0.4.
DEPENDENCE_DESIGN = ("normal", "ar1 ρ=0.4", "ar1 ρ=0.7", "ma1 θ=0.5")
HELD_OUT_3 = ("ar1 ρ=0.3", "ar1 ρ=0.5", "ar1 ρ=0.8", "ma1 θ=0.9", "ar1 ρ=0.5 lognormal", "sine drift 5%",
              "lognormal σ=1", "mixture 10% +30%")
# The runner's own dependence rule (runs that suspect dependence repeat every configuration to the cap,
# analysis/plan.py run_dependence; Z_TRIP chosen on DEPENDENCE_DESIGN only): HELD_OUT_3 had been read, so
# this fourth set was written and committed before the rule was evaluated on it, and evaluated once.
HELD_OUT_4 = ("ar1 ρ=0.6", "ma1 θ=0.7", "ar1 ρ=0.25", "exponential")
# The fourth set showed the widening, not the stopping, failing; a retune of Z_WIDEN and RHO_MARGIN (on
# DEPENDENCE_DESIGN only) is judged on this fifth set, written and committed before that retune was chosen.
HELD_OUT_5 = ("ar1 ρ=0.35", "ar1 ρ=0.75", "ma1 θ=0.6", "t2")
# The early looks' larger tail and the lower target (calibration.py EARLY_WEIGHT, STOP_COVERAGE_EARLY)
# were chosen on the design shapes after sets 1-5 had been read; this sixth set was written and committed
# before that change was evaluated on it, and is evaluated once, for one configuration (3..10, 3..3) and
# for runs of RUN_CONFIGS configurations: shapes, strengths and parameters none of the earlier sets had.
HELD_OUT_6 = ("lognormal σ=1.25", "mixture 15% +30%", "drift +3%", "clock 10 ms", "ma1 θ=0.8", "ar1 ρ=0.65",
              "ar1 ρ=0.8")
DEPENDENCE_RATIOS = (0.5, 1.0, 3**0.5)  # CV 2.5 %, 5 %, 8.7 %: a table of 12 cells runs in ~15 minutes
RUN_CONFIGS = 8  # configurations per simulated run where dependence is pooled
ALL_SHAPES = DESIGN_SET + HELD_OUT + HELD_OUT_2 + ("ar1 ρ=0.4", "ar1 ρ=0.7", "ma1 θ=0.5", "ma1 θ=0.9",
                                                  "ar1 ρ=0.5 lognormal", "sine drift 5%", "ar1 ρ=0.6", "ma1 θ=0.7",
                                                  "ar1 ρ=0.25", "ar1 ρ=0.35", "ar1 ρ=0.75", "ma1 θ=0.6",
                                                  "lognormal σ=1.25", "mixture 15% +30%", "drift +3%", "clock 10 ms",
                                                  "ma1 θ=0.8", "ar1 ρ=0.65")
CV_RATIOS = (0.1, 0.5, 1.0, 3**0.5, 3.0)  # CV of the noise in units of ci_target
DESIGNS = ((3, 10), (3, 3))


@dataclass(frozen=True)
class Cell:
    shape: str
    design: tuple[int, int]
    cv_ratio: float
    coverage: float  # of every study's interval at its stop
    unflagged: float  # of the studies whose printed number carries no check
    flagged: float  # share of studies printed with a check
    secondary: float  # an independent metric of the same shape, read at this metric's stop
    any_look: float  # share of studies whose interval missed at some look (an adversarial stop)
    mean_reps: float
    configs: int = 1  # configurations per simulated study (run together; dependence pooled over them)

    def row(self) -> str:
        lo, hi = self.design
        unfl = "–" if math.isnan(self.unflagged) else f"{self.unflagged:.2%}"
        label = self.shape + (f", {self.configs} configurations" if self.configs > 1 else "")
        return (f"| {label} | {lo}..{hi} | {self.cv_ratio * CI_TARGET:.1%} | {self.coverage:.2%} | {unfl} | "
                f"{self.flagged:.1%} | {self.secondary:.2%} | {self.any_look:.1%} | {self.mean_reps:.2f} |")


HEAD = ("| noise | looks | CV | coverage | coverage, no check printed | check printed | other metric at this stop "
        "| missed at some look | mean repetitions |\n|---|---|---|---|---|---|---|---|---|")


def _std_lognormal(rng: np.random.Generator, size: tuple[int, ...], sigma: float) -> tuple[np.ndarray, float]:
    z = np.exp(sigma * rng.standard_normal(size))
    m, sd = math.exp(sigma * sigma / 2), math.sqrt((math.exp(sigma * sigma) - 1) * math.exp(sigma * sigma))
    return (z - m) / sd, (1.0 - m) / sd


@lru_cache(maxsize=64)
def _mixture_median(p: float, factor: float, cv: float) -> float:
    def cdf(t: float) -> float:
        return (1 - p) * stats.norm.cdf((t - 1) / cv) + p * stats.norm.cdf((t / factor - 1) / cv) - 0.5
    return float(optimize.brentq(cdf, 0.2, 3.0))


@lru_cache(maxsize=1)
def _ar1_lognormal_median() -> float:
    """The stationary median of "ar1 ρ=0.5 lognormal" (standardised units), from 2 000 000 draws."""
    rng = np.random.default_rng(2024)
    e, _ = _std_lognormal(rng, (2_000_000, 40), 1.0)
    x = np.zeros(2_000_000)
    for i in range(40):
        x = 0.5 * x + math.sqrt(0.75) * e[:, i]
    return float(np.median(x))


def draw(shape: str, rng: np.random.Generator, n_studies: int, last: int, cv: float
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values (studies, last) in run order, the truth after each look n (last,), relative resolution
    of each value (studies, last))."""
    size = (n_studies, last)
    no_clock = np.zeros(size)
    flat = np.ones(last)
    if shape in DESIGN_SET:
        return 1 + cv * calibration.draw_noise(shape, rng, size), flat * (1 + cv * calibration.noise_median(shape)), \
            no_clock
    if shape == "exponential":  # standardised Exp(1): skewness 2, median ln 2 - 1
        return 1 + cv * (rng.exponential(1.0, size) - 1.0), flat * (1 + cv * (math.log(2) - 1)), no_clock
    if shape == "t2":  # Student t with 2 degrees of freedom (no variance at all), scale cv
        return 1 + cv * rng.standard_t(2, size), flat, no_clock
    if shape == "mixture 5% ×2":
        v = (1 + cv * rng.standard_normal(size)) * np.where(rng.random(size) < 0.05, 2.0, 1.0)
        return v, flat * _mixture_median(0.05, 2.0, cv), no_clock
    if shape == "two modes 50% +10%":
        v = (1 + cv * rng.standard_normal(size)) * np.where(rng.random(size) < 0.5, 1.1, 1.0)
        return v, flat * _mixture_median(0.5, 1.1, cv), no_clock
    if shape == "ar1 ρ=0.5 lognormal":  # AR(1) whose innovations are lognormal σ = 1 (skewed shocks), stationary
        rho, burn = 0.5, 30
        e, _ = _std_lognormal(rng, (n_studies, last + burn), 1.0)
        x = np.zeros(n_studies)
        out = np.empty(size)
        for i in range(last + burn):
            x = rho * x + math.sqrt(1 - rho * rho) * e[:, i]
            if i >= burn:
                out[:, i - burn] = x
        return 1 + cv * out, flat * (1 + cv * _ar1_lognormal_median()), no_clock
    if shape == "sine drift 5%":  # the level swings ±5 % with a period of 16 repetitions, random phase
        phase = rng.uniform(0, 2 * math.pi, (n_studies, 1))
        level = 1 + 0.05 * np.sin(2 * math.pi * np.arange(last)[None, :] / 16 + phase)
        return level + cv * rng.standard_normal(size), np.cumsum(level, axis=1) / np.arange(1, last + 1), no_clock
    kind, _, param = shape.partition(" ")
    if kind == "ma1":
        theta = float(param.split("=")[1])
        e = rng.standard_normal((n_studies, last + 1))
        return 1 + cv * (e[:, 1:] + theta * e[:, :-1]) / math.sqrt(1 + theta * theta), flat, no_clock
    if kind in ("lognormal", "lognormal-left"):
        x, m = _std_lognormal(rng, size, float(param.split("=")[1]))
        sign = 1 if kind == "lognormal" else -1
        return 1 + cv * sign * x, flat * (1 + cv * sign * m), no_clock
    if kind == "ar1":
        rho = float(param.split("=")[1])
        e = rng.standard_normal(size)
        x = np.empty(size)
        x[:, 0] = e[:, 0]
        for i in range(1, last):
            x[:, i] = rho * x[:, i - 1] + math.sqrt(1 - rho * rho) * e[:, i]
        return 1 + cv * x, flat, no_clock
    if kind == "mixture":
        p = float(param.split("%")[0]) / 100
        v = (1 + cv * rng.standard_normal(size)) * np.where(rng.random(size) < p, 1.3, 1.0)
        return v, flat * _mixture_median(p, 1.3, cv), no_clock
    if kind == "outliers":
        v = (1 + cv * rng.standard_normal(size)) * np.where(rng.random(size) < 0.05, 0.5, 1.0)
        return v, flat * _mixture_median(0.05, 0.5, cv), no_clock
    if kind == "drift":  # "drift +5%": the level rises linearly by 5 % from the first repetition to the last
        level = 1 + float(param.strip("+%")) / 100 * np.arange(last) / max(last - 1, 1)
        return level + cv * rng.standard_normal(size), np.cumsum(level) / np.arange(1, last + 1), no_clock
    if kind == "clock":  # "clock 20 ms": a rate over a pass of ~20 ms that the tool times in whole milliseconds (fio)
        ms = float(param.split()[0])
        t = ms * (1 + cv * rng.standard_normal(size))
        ticks = np.maximum(np.floor(t), 1.0)
        rate = ms / ticks
        return rate, flat, 1.0 / ticks  # truth: the rate of the median time (ms / ms)
    raise ValueError(shape)


def simulate(shape: str, design: tuple[int, int], cv_ratio: float, seed: int = 1, studies: int = STUDIES,
             configs: int = 1, detail: dict[str, np.ndarray] | None = None) -> Cell:
    """One cell: `studies` simulated studies of `configs` configurations each (the same noise shape,
    independent draws), every configuration stopped by the runner's rule on its own; coverage and
    repetitions are over every configuration. With more than one configuration the run's lag-1
    dependence is pooled over them (analysis/dependence.py) and widens the intervals it finds it in."""
    first, last = design
    rule = StopRule(first, last, CI_TARGET, NONNEG)
    key = [seed, ALL_SHAPES.index(shape), first, last, int(cv_ratio * 1000)] + ([configs] if configs > 1 else [])
    rng = np.random.default_rng(key)
    cv = cv_ratio * CI_TARGET
    rows = studies * configs
    values, truth, rel = draw(shape, rng, rows, last, cv)
    other, truth2, rel2 = draw(shape, rng, rows, last, cv)
    truth, truth2 = (np.broadcast_to(np.atleast_2d(t), values.shape) for t in (truth, truth2))
    if configs > 1:
        return _simulate_run(shape, design, cv_ratio, rule, configs, (values, truth, rel), (other, truth2, rel2),
                             detail)
    covered, covered2 = np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)
    flagged, missed = np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)
    reps = np.zeros(rows, dtype=int)
    running = np.ones(rows, dtype=bool)
    for n in range(1, last + 1):
        more = np.ones(rows, dtype=bool)
        idx = np.flatnonzero(running)
        more[idx] = np.asarray(rule.wants_more(values[idx, :n]), dtype=bool)
        if n >= first:
            for v, t, r, cov in ((values, truth, rel, covered), (other, truth2, rel2, covered2)):
                c, lo, hi = _reported(v[:, :n], rule, r[:, :n])
                inside = (lo <= t[:, n - 1]) & (t[:, n - 1] <= hi)
                if v is values:
                    missed |= ~inside
                    stop = running & ~more
                    trips = checks.tripped(v[:, :n], calibration.check_thresholds(n))
                    flagged[stop] = (trips["trend"] | trips["dependence"] | trips["two_modes"])[stop]
                cov[running & ~more] = inside[running & ~more]
            reps[running & ~more] = n
        running &= more
        if not running.any():
            break
    assert not running.any(), "the stopping rule must stop every study by max_repetitions"
    unflagged = float(covered[~flagged].mean()) if (~flagged).any() else math.nan
    return Cell(shape, design, cv_ratio, float(covered.mean()), unflagged, float(flagged.mean()),
                float(covered2.mean()), float(missed.mean()), float(reps.mean()), configs)


Series = tuple[np.ndarray, np.ndarray, np.ndarray]  # values (rows, last), truth per look, relative resolution


def _simulate_run(shape: str, design: tuple[int, int], cv_ratio: float, rule: StopRule, configs: int,
                  main: Series, second: Series, detail: dict[str, np.ndarray] | None = None) -> Cell:
    """Runs of `configs` configurations (rows study-major), in rounds as the runner makes them: after
    every round each configuration asks rule.wants_more with the run's pooled dependence of the main
    metric over the configurations' values so far (plan.run_dependence, what Runner._run_dependent
    asks), so a run that trips sends every configuration, stopped ones included, on to its cap. At the
    end the report's intervals: widened by the run's pooled dependence (RunEstimator), flagged where it
    is significant or a configuration's own check trips."""
    values, truth, rel = main
    rows, last = values.shape
    first = design[0]
    y = np.log(np.where(values > 0, values, np.nan))
    y = np.where(np.isfinite(y), y, values).reshape(-1, configs, last)
    reps = np.zeros(rows, dtype=int)
    missed = np.zeros(rows, dtype=bool)
    more = np.ones(rows, dtype=bool)
    while more.any():
        reps[more] += 1
        for n in np.unique(reps[more]):
            m = more & (reps == n)
            if n >= first:
                _, lo, hi = _reported(values[m, :n], rule, rel[m, :n])
                missed[m] |= ~((lo <= truth[m, n - 1]) & (truth[m, n - 1] <= hi))
        _, z, _, _ = dependence.pooled_batch(y, reps.reshape(-1, configs))
        tripped = np.repeat(z < -dependence.Z_TRIP, configs)
        for n in np.unique(reps):
            m = reps == n
            more[m] = np.asarray(rule.wants_more(values[m, :n], 0, tripped[m]), dtype=bool)
    flagged = np.zeros(rows, dtype=bool)
    for n in np.unique(reps):
        m = reps == n
        trips = checks.tripped(values[m, :n], calibration.check_thresholds(int(n)))
        flagged[m] = trips["trend"] | trips["dependence"] | trips["two_modes"]
    flag, covered = _pooled_cover(values, truth, rel, reps, rule, configs, detail)
    flagged |= flag
    if detail is not None:  # per configuration, for breakdown()
        detail.update(reps=reps, flagged=flagged, covered=covered)
    _, covered2 = _pooled_cover(*second, reps, rule, configs)
    unflagged = float(covered[~flagged].mean()) if (~flagged).any() else math.nan
    return Cell(shape, design, cv_ratio, float(covered.mean()), unflagged, float(flagged.mean()),
                float(covered2.mean()), float(missed.mean()), float(reps.mean()), configs)


def _pooled_cover(v: np.ndarray, t: np.ndarray, r: np.ndarray, reps: np.ndarray, rule: StopRule, configs: int,
                  detail: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(flagged, covered) per configuration: the reported interval at its stop, stretched by the
    run's pooled dependence (what RunEstimator does for a stored run)."""
    rows, last = v.shape
    y = np.log(np.where(v > 0, v, np.nan))
    y = np.where(np.isfinite(y), y, v)
    _, z, _, rho_w = dependence.pooled_batch(y.reshape(-1, configs, last), reps.reshape(-1, configs))
    rho_w, z = np.repeat(rho_w, configs), np.repeat(z, configs)
    if not dependence.tested_in(last):  # a design too short to test it: unwidened, every number labelled
        rho_w, z = np.zeros_like(rho_w), np.full_like(z, -np.inf)
    covered, plain, fac = np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool), np.ones(rows)
    for n in np.unique(reps):
        m = reps == n
        c, lo, hi = interval_batch(v[m, :n], rule.design, rule.domain)
        fac[m] = np.where(rho_w[m] > 0, dependence.variance_factor(rho_w[m], n), 1.0)
        err = r[m, :n].max(axis=-1) * np.abs(c)
        plain[m] = (np.maximum(lo - err, 0.0) <= t[m, n - 1]) & (t[m, n - 1] <= hi + err)
        lo, hi = dependence.widen(c, lo, hi, fac[m], (v[m, :n] > 0).all(axis=-1))
        lo, hi = np.maximum(lo - err, 0.0), hi + err
        covered[m] = (lo <= t[m, n - 1]) & (t[m, n - 1] <= hi)
    if detail is not None and "z" not in detail:  # the main metric's (the first call)
        detail.update(z=z, factor=fac, plain=plain)
    return z < -dependence.Z_FLAG, covered


def _reported(x: np.ndarray, rule: StopRule, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The interval a report prints: interval_batch, widened by the values' resolution (with_resolution)."""
    c, lo, hi = interval_batch(x, rule.design, rule.domain)
    err = rel.max(axis=-1) * np.abs(c)
    return c, np.maximum(lo - err, 0.0), hi + err


def table(cells: list[Cell]) -> str:
    return "\n".join([HEAD] + [c.row() for c in cells])


def cells_of(shapes: tuple[str, ...], studies: int = STUDIES, ratios: tuple[float, ...] = CV_RATIOS,
             designs: tuple[tuple[int, int], ...] = DESIGNS, configs: int = 1) -> list[Cell]:
    return [simulate(s, d, r, studies=studies, configs=configs) for d in designs for s in shapes for r in ratios]


def runner_rule_tables(n: int, which: str) -> str:
    """Runs of RUN_CONFIGS configurations under the runner's dependence rule, looks 3..10 (the cap is
    where the rule acts): `which` "design" (DEPENDENCE_DESIGN), "held-out-4", "held-out-5" or "held-out-6"."""
    shapes = {"design": DEPENDENCE_DESIGN, "held-out-4": HELD_OUT_4, "held-out-5": HELD_OUT_5,
              "held-out-6": HELD_OUT_6}[which]
    return table(cells_of(shapes, n, DEPENDENCE_RATIOS, ((3, 10),), configs=RUN_CONFIGS))


def breakdown(shape: str, cv_ratio: float, studies: int) -> str:
    """Where a cell's coverage comes from, for runs of RUN_CONFIGS (3..10): the configurations printed
    without a check, by the run's pooled z and by their repetitions; coverage as printed (widened by the
    pooled dependence) and of the plain interval."""
    d: dict[str, np.ndarray] = {}
    cell = simulate(shape, (3, 10), cv_ratio, studies=studies, configs=RUN_CONFIGS, detail=d)
    out = [cell.row(), "| configurations without a check | share of all | coverage | plain interval | "
           "mean widening | mean repetitions |", "|---|---|---|---|---|---|"]
    free = ~d["flagged"]
    groups = [(f"z in [{a:g}, {b:g})", (d["z"] >= a) & (d["z"] < b)) for a, b in
              zip((-np.inf, -1.0, -0.5, 0.0, 0.5, 1.0), (-1.0, -0.5, 0.0, 0.5, 1.0, np.inf), strict=True)]
    groups += [(f"{k} repetitions", d["reps"] == k) for k in (3, 4, 5)] + [("6-10 repetitions", d["reps"] > 5)]
    for label, g in groups:
        m = free & g
        if m.any():
            out.append(f"| {label} | {m.mean():.1%} | {d['covered'][m].mean():.2%} | {d['plain'][m].mean():.2%} | "
                       f"{d['factor'][m].mean():.2f} | {d['reps'][m].mean():.2f} |")
    return "\n".join(out)


def point_optimal(y: np.ndarray, n: np.ndarray, rho1: float = dependence.RHO_STAR) -> np.ndarray:
    """King's point-optimal invariant statistic against AR(1) ρ = rho1, per run: `y` (runs, K, last) each
    configuration's values in run order, the first n[run, c] used. Each configuration's mean and spread are
    unknown (nuisance), so a test may use only what is invariant to them; the log density ratio of that
    maximal invariant (King 1980: |Σ|^-½ (1'Σ⁻¹1)^-½ (e'Σ⁻¹e)^-(n-1)/2, e the GLS residuals), summed over
    the configurations, is by Neyman and Pearson the most powerful invariant test against rho1: no test that
    does not know the configurations' means and spreads separates independent runs from ones at rho1
    better. Configurations with fewer than 3 values say nothing (one invariant needs n - 2 >= 1)."""
    y = np.asarray(y, dtype=float)
    n = np.asarray(n)
    out = np.zeros(y.shape[0])
    for m in np.unique(n):
        if m < 3:
            continue
        idx = np.arange(int(m))
        sigma = rho1 ** np.abs(np.subtract.outer(idx, idx))
        inv = np.linalg.inv(sigma)
        a = inv.sum()
        proj = inv - np.outer(inv.sum(axis=1), inv.sum(axis=0)) / a
        x = y[..., :m]
        q1 = np.einsum("...i,ij,...j->...", x, proj, x)
        q0 = ((x - x.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = (-0.5 * np.linalg.slogdet(sigma)[1] - 0.5 * math.log(a) + 0.5 * math.log(m)
                  - (m - 1) / 2 * (np.log(q1) - np.log(q0)))
        out += np.where((n == m) & np.isfinite(lr), lr, 0.0).sum(axis=-1)
    return out


def _ar1_runs(rng: np.random.Generator, runs: int, configs: int, last: int, rho: float) -> np.ndarray:
    """Stationary normal AR(1) series (runs, configs, last), unit variance."""
    e = rng.standard_normal((runs, configs, last))
    x = np.empty_like(e)
    x[..., 0] = e[..., 0]
    for t in range(1, last):
        x[..., t] = rho * x[..., t - 1] + math.sqrt(1 - rho * rho) * e[..., t]
    return x


POWER_RATES = (0.05, 0.12, 0.33)  # false alarms on independent runs: the flag's, the widening's budget, z < 0


def dependence_power(runs: int, n: tuple[int, ...] | np.ndarray, rho: float, seed: int = 1,
                     rates: tuple[float, ...] = POWER_RATES) -> list[tuple[float, float, float]]:
    """(false-alarm rate, power of the run's pooled z (dependence.pooled_batch), power of the point-optimal
    invariant test) against AR(1) ρ = `rho`, for runs whose configurations have `n` values each; each test
    at its own threshold for that false-alarm rate on independent runs (the same seed's)."""
    rng = np.random.default_rng([seed, int(rho * 1000), len(n), *map(int, n)])
    counts = np.broadcast_to(np.asarray(n), (runs, len(n)))
    y0, y1 = (_ar1_runs(rng, runs, len(n), int(max(n)), r) for r in (0.0, rho))
    z0, z1 = (dependence.pooled_batch(y, counts)[1] for y in (y0, y1))
    p0, p1 = (point_optimal(y, counts) for y in (y0, y1))
    out = []
    for rate in rates:
        tz, tp = np.quantile(-z0, 1 - rate), np.quantile(p0, 1 - rate)
        out.append((rate, float((-z1 > tz).mean()), float((p1 > tp).mean())))
    return out


POWER_RUNS = ((3,) * 8, (4,) * 8, (5,) * 8, (6,) * 8, (10,) * 3 + (3,) * 5)


def power_table(runs: int) -> str:
    """`--test-power`: the pooled test against the most powerful invariant one, runs of 8 configurations."""
    rows = ["| values per configuration | AR(1) ρ | false alarms | pooled z: power | point-optimal invariant: power |",
            "|---|---|---|---|---|"]
    return "\n".join(rows + [r for n in POWER_RUNS for rho in (0.4, 0.7) for r in power_rows(runs, n, rho)])


SINGLE_POWER_RATES = (checks.TAIL, 0.05)  # the check's own false-alarm rate per look, and a lenient one


def single_power_rows(runs: int, n: int, rho: float, seed: int = 1) -> list[str]:
    """One configuration alone (nothing to pool): power against AR(1) ρ = `rho` of the per-configuration
    `dependence` check's statistic (checks.rank_von_neumann) and of the point-optimal invariant test, each at
    its own threshold for the same false-alarm rate on independent series of n values (the same seed's)."""
    rng = np.random.default_rng([seed, int(rho * 1000), n])
    y0, y1 = (_ar1_runs(rng, runs, 1, n, r) for r in (0.0, rho))
    counts = np.full((runs, 1), n)
    r0, r1 = checks.rank_von_neumann(y0[:, 0]), checks.rank_von_neumann(y1[:, 0])
    p0, p1 = point_optimal(y0, counts), point_optimal(y1, counts)
    rows = []
    for rate in SINGLE_POWER_RATES:
        tr, tp = np.quantile(r0, rate), np.quantile(p0, 1 - rate)
        rows.append(f"| {n} | {rho} | {rate:.0%} | {(r0 <= tr).mean():.1%} | {(r1 <= tr).mean():.1%} | "
                    f"{(p1 > tp).mean():.1%} |")
    return rows


def single_power_table(runs: int) -> str:
    """`--test-power`, second table: one configuration's own check against the most powerful invariant test."""
    rows = ["| values | AR(1) ρ | false alarms | the check's, measured | `dependence` check: power | "
            "point-optimal invariant: power |", "|---|---|---|---|---|---|"]
    return "\n".join(rows + [r for n in (8, 10) for rho in (0.3, 0.5, 0.8) for r in single_power_rows(runs, n, rho)])


def power_rows(runs: int, n: tuple[int, ...], rho: float) -> list[str]:
    """The `--test-power` table's rows for one run shape and one ρ."""
    label = f"8 × {n[0]}" if len(set(n)) == 1 else "3 × 10 and 5 × 3"
    return [f"| {label} | {rho} | {rate:.0%} | {pz:.1%} | {pp:.1%} |"
            for rate, pz, pp in dependence_power(runs, n, rho)]


@dataclass(frozen=True)
class Lever:
    """One alternative to the shipped rule for runs of several configurations (`--levers`): the first look,
    dependence.Z_WIDEN / RHO_MARGIN / Z_TRIP, a factor on every look's tail (calibration.per_look_alpha),
    and the configurations per run."""

    label: str
    first: int = 3
    z_widen: float = dependence.Z_WIDEN
    rho_margin: float = dependence.RHO_MARGIN
    z_trip: float = dependence.Z_TRIP
    alpha_factor: float = 1.0
    configs: int = RUN_CONFIGS


LEVERS = (
    Lever("shipped"),
    Lever("first look at 5", first=5),
    Lever("first look at 5, widened from z < -0.5 at 2.5 se", first=5, z_widen=0.5, rho_margin=2.5),
    Lever("first look at 5, widened from z < -0.75 at 3.5 se", first=5, z_widen=0.75, rho_margin=3.5),
    Lever("repeated on while z < -1 (Z_TRIP 1.0)", z_trip=1.0),
    Lever("every look's tail x 1.3", alpha_factor=1.3),
    Lever("every look's tail x 1.6", alpha_factor=1.6),
    Lever("32 configurations per run", configs=32),
)


def levers_table(n: int) -> str:
    """`--levers`: DEPENDENCE_DESIGN in runs under each of LEVERS (n runs of 8 configurations' worth of
    numbers per cell), the module constants restored after each."""
    rows = ["| rule | noise | CV | coverage | coverage, no check printed | check printed | mean repetitions |",
            "|---|---|---|---|---|---|---|"]
    return "\n".join(rows + [lever_row(lever, shape, r, n) for lever in LEVERS for shape in DEPENDENCE_DESIGN
                              for r in DEPENDENCE_RATIOS])


def lever_row(lever: Lever, shape: str, cv_ratio: float, n: int) -> str:
    """One `--levers` row: the cell under `lever`, the module's constants restored after it."""
    saved = dependence.Z_WIDEN, dependence.RHO_MARGIN, dependence.Z_TRIP, calibration.per_look_alpha
    original = calibration.per_look_alpha
    dependence.Z_WIDEN, dependence.RHO_MARGIN, dependence.Z_TRIP = lever.z_widen, lever.rho_margin, lever.z_trip
    calibration.per_look_alpha = lambda a, b, k=lever.alpha_factor: original(a, b) * k  # type: ignore[assignment]
    dependence._bound_at.cache_clear()
    try:
        c = simulate(shape, (lever.first, 10), cv_ratio, studies=n * RUN_CONFIGS // lever.configs,
                     configs=lever.configs)
    finally:
        dependence.Z_WIDEN, dependence.RHO_MARGIN, dependence.Z_TRIP, calibration.per_look_alpha = saved
        dependence._bound_at.cache_clear()
    unflagged = "–" if math.isnan(c.unflagged) else f"{c.unflagged:.2%}"
    return (f"| {lever.label} | {shape} | {cv_ratio * CI_TARGET:.1%} | {c.coverage:.2%} | {unflagged} | "
            f"{c.flagged:.1%} | {c.mean_reps:.2f} |")


QUICK_RUN_CONFIGS = (8, 18)  # `--quick` runs: 18 is the virtio study's run, 8 the smallest pooled (MIN_PAIRS)
QUICK_HEAD = ("| noise | configurations | CV | coverage | widened | width × unwidened: median | 90th percentile |\n"
              "|---|---|---|---|---|---|---|")


def quick_run_table(n: int, configs: int, ratios: tuple[float, ...] = DEPENDENCE_RATIOS,
                    cap: float | None = None, shapes: tuple[str, ...] = DEPENDENCE_DESIGN) -> str:
    """`--quick` runs (looks 3..3) of `configs` configurations on DEPENDENCE_DESIGN: coverage, the share
    of configurations whose interval the run's pooled dependence widened, and the width of the printed
    interval over the unwidened one (median, 90th percentile). iolab's rule (dependence.tested_in): a
    3..3 run is not widened, every number carries `independence_assumed`. `cap` simulates the rule before
    it instead, for this table only: the pooled widening, whose bound on ρ is never identified at 3..3 (E_3
    is too flat), so that every widening is at `cap` (dependence.RHO_CAP then: 0.9)."""
    saved = dependence.RHO_CAP, dependence.tested_in
    if cap is not None:
        dependence.RHO_CAP = cap
        dependence.tested_in = lambda last: True  # type: ignore[assignment]  # the rule before
    try:
        rows = [QUICK_HEAD]
        for shape in shapes:
            for r in ratios:
                d: dict[str, np.ndarray] = {}
                cell = simulate(shape, (3, 3), r, studies=n, configs=configs, detail=d)
                f = d["factor"]
                rows.append(f"| {shape} | {configs} | {r * CI_TARGET:.1%} | {cell.coverage:.2%} | "
                            f"{(f > 1).mean():.1%} | {np.median(f):.2f} | {np.quantile(f, 0.9):.2f} |")
        return "\n".join(rows)
    finally:
        dependence.RHO_CAP, dependence.tested_in = saved  # type: ignore[assignment]


def dependence_tables(n: int) -> str:
    """The two tables of runs of RUN_CONFIGS configurations (dependence pooled over them)."""
    return "\n".join([
        f"Runs of {RUN_CONFIGS} configurations, dependence pooled over them: design set (Z_WIDEN and RHO_MARGIN "
        "were chosen on these):\n", table(cells_of(DEPENDENCE_DESIGN, n, configs=RUN_CONFIGS)),
        f"\nRuns of {RUN_CONFIGS} configurations: third held-out set (written before it was evaluated; "
        "evaluated once):\n", table(cells_of(HELD_OUT_3, n, configs=RUN_CONFIGS))])


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args and args[0].isdigit() else STUDIES
    print(f"{n} simulated studies per row, ci_target = {CI_TARGET:.0%}\n")
    if "--breakdown" in sys.argv:  # where runs of 8 cover: `--breakdown SHAPE CV_RATIO [n]`
        shape, ratio = args[0], float(args[1])
        print(breakdown(shape, ratio, int(args[2]) if len(args) > 2 else 2000))
        sys.exit(0)
    if "--quick-runs" in sys.argv:  # `--quick-runs K [CV_RATIO ...] [--cap=RHO] [--held-out-6]`: 3..3 runs of K
        caps = [float(a.split("=")[1]) for a in sys.argv if a.startswith("--cap=")]
        ratios = tuple(float(a) for a in args[2:]) or DEPENDENCE_RATIOS
        print(quick_run_table(n, int(args[1]), ratios, caps[0] if caps else None,
                              HELD_OUT_6 if "--held-out-6" in sys.argv else DEPENDENCE_DESIGN))
        sys.exit(0)
    if "--levers" in sys.argv:  # the alternatives to the shipped rule for runs, on the design set
        print(levers_table(n))
        sys.exit(0)
    if "--test-power" in sys.argv:  # the pooled test against the most powerful invariant test
        print(power_table(n))
        print("\nOne configuration:\n")
        print(single_power_table(n))
        sys.exit(0)
    for flag in ("--runner-design", "--runner-held-out-4", "--runner-held-out-5", "--runner-held-out-6"):
        if flag in sys.argv:  # one table each
            print(runner_rule_tables(n, flag.removeprefix("--runner-")))
            sys.exit(0)
    if "--held-out-6" in sys.argv:  # the sixth held-out set, one configuration per study
        print("Sixth held-out set (written and committed before it was evaluated; evaluated once):\n")
        print(table(cells_of(HELD_OUT_6, n)))
        sys.exit(0)
    if "--design" in sys.argv:  # the single-configuration design table alone
        print(table(cells_of(DESIGN_SET, n)))
        sys.exit(0)
    if "--dependence" not in sys.argv:  # the single-configuration tables
        print("Design set (the intervals were calibrated on these):\n")
        print(table(cells_of(DESIGN_SET, n)))
        print("\nHeld-out set (never used to tune anything):\n")
        print(table(cells_of(HELD_OUT, n)))
        print("\nSecond held-out set (added after the first had been read once; evaluated once):\n")
        print(table(cells_of(HELD_OUT_2, n)))
        print()
    print(dependence_tables(n))
