"""Calibrating the intervals of analysis/sequential.py on the DESIGN noise shapes.

Three tables, all by simulation with fixed seeds, shipped in look_alpha.json (`python -m
iolab.analysis.calibration` rewrites it, a few minutes; tests/analysis recompute entries):

1. **pivot**: for every n = 2..N_MAX, the upper quantiles (at the tail probabilities TAILS) of
   the pivot |median_n − median| / (s_n / √n), the largest over the design shapes. An
   interval median ± q · s/√n with q the (1 − α') quantile misses with probability at most α'
   at that n for every design shape. The median's pivot depends far less on the shape than
   the mean's t statistic does (a skewed sample's median stays near the population median;
   its mean does not), so one table serves skewed, heavy-tailed and normal noise alike.
2. **per_look_alpha** for every look design (first..last): the largest per-look tail α' for
   which the interval *at the runner's own stop* (analysis/plan.py StopRule: stop when the
   interval is within ci_target, or when the run-order checks trip, at the cap) still covers
   the median in at least STOP_COVERAGE of the studies, for every design shape and every CV
   from 0.1 to 3 × ci_target. Calibrating on the stop the runner really makes (not on every
   look at once) is what keeps normal noise from paying for a guarantee nobody reads: ~97 %
   there instead of 99.5 %.
3. **check_thresholds**: the run-order checks' thresholds per n (analysis/checks.py): the
   dependence check's from random orders (distribution-free), the two-modes check's the
   largest upper TAIL quantile of its statistic over the design shapes.

The design set is normal, lognormal σ = 0.5 (right- and left-skewed) and Student t with 3
degrees of freedom. The held-out set (tests/analysis/coverage.py: heavier lognormals,
dependence, mixtures, drift, outliers, the clock's truncation) is never used here; it only
judges the result (docs/statistics.md publishes both tables).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from iolab.analysis import checks

LEVEL = 0.95
SEED = 20251124
DESIGN_SHAPES = ("normal", "lognormal", "lognormal-left", "t3")
LOGNORMAL_SIGMA = 0.5
N_MAX = 30
TAILS = tuple(float(t) for t in np.geomspace(1e-4, 0.3, 41))
PIVOT_SIMULATIONS = 200_000
STOP_SIMULATIONS = 20_000
STOP_CV_RATIOS = (0.1, 0.25, 0.5, 1.0, 3**0.5, 3.0)
STOP_COVERAGE = 0.965  # LEVEL plus a margin for noise between and beyond the design shapes (docs/statistics.md)
OS_DEPTH = 12  # order statistics kept per end for the distribution-free hull
TABLE = Path(__file__).with_name("look_alpha.json")
TABLE_FIRST = range(2, 11)  # look designs shipped: first 2..10, last first..N_MAX


# -- the design noise shapes -------------------------------------------------------------------
def draw_noise(shape: str, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Noise of one design shape, standardised to mean 0 and standard deviation 1."""
    if shape == "normal":
        return rng.standard_normal(size)
    if shape in ("lognormal", "lognormal-left"):
        s2 = LOGNORMAL_SIGMA**2
        z = (np.exp(LOGNORMAL_SIGMA * rng.standard_normal(size)) - math.exp(s2 / 2)) / math.sqrt(
            (math.exp(s2) - 1) * math.exp(s2))
        return z if shape == "lognormal" else -z
    if shape == "t3":
        return rng.standard_t(3, size) / math.sqrt(3.0)
    raise ValueError(f"unknown noise shape {shape!r}")


def noise_median(shape: str) -> float:
    """The population median of draw_noise(shape): what the interval must cover."""
    if shape in ("lognormal", "lognormal-left"):
        s2 = LOGNORMAL_SIGMA**2
        m = (1.0 - math.exp(s2 / 2)) / math.sqrt((math.exp(s2) - 1) * math.exp(s2))
        return m if shape == "lognormal" else -m
    return 0.0


# -- order statistics of the distribution-free hull ----------------------------------------------
@lru_cache(maxsize=4096)
def order_depth(n: int, tail: float) -> int:
    """k: [x_(k), x_(n+1-k)] covers the median of any continuous distribution with probability
    >= 1 − tail (2·P(Binomial(n, ½) < k) <= tail); 0 when n is too small for any such pair."""
    k = 0
    while k + 1 <= n // 2 and 2 * sps.binom.cdf(k, n, 0.5) <= tail:
        k += 1
    return k


# -- the shipped table ----------------------------------------------------------------------------
def _constants() -> dict[str, Any]:
    return {"level": LEVEL, "seed": SEED, "design_shapes": list(DESIGN_SHAPES), "lognormal_sigma": LOGNORMAL_SIGMA,
            "pivot_simulations": PIVOT_SIMULATIONS, "stop_simulations": STOP_SIMULATIONS,
            "stop_coverage": STOP_COVERAGE, "stop_cv_ratios": [round(r, 6) for r in STOP_CV_RATIOS],
            "check_tail": checks.TAIL, "tails": TAILS}


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    """The shipped calibration; a table made with other constants is not used (recomputed)."""
    try:
        data = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return {}
    same = all(data.get(k) == (list(v) if isinstance(v, tuple) else v) for k, v in _constants().items())
    return data if same else {}


@lru_cache(maxsize=64)
def pivot_quantiles(n: int) -> np.ndarray:
    """Upper quantiles of the median pivot at n values, at the tail probabilities TAILS."""
    shipped = (_table().get("pivot") or {}).get(str(n))
    return np.asarray(shipped, dtype=float) if shipped is not None else simulate_pivot(n)


def simulate_pivot(n: int) -> np.ndarray:
    worst = np.zeros(len(TAILS))
    for shape in DESIGN_SHAPES:
        rng = np.random.default_rng([SEED, 1, n, DESIGN_SHAPES.index(shape)])
        x = draw_noise(shape, rng, (PIVOT_SIMULATIONS, n))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(np.median(x, axis=-1) - noise_median(shape)) / (x.std(axis=-1, ddof=1) / math.sqrt(n))
        worst = np.maximum(worst, np.quantile(t, 1.0 - np.asarray(TAILS)))
    return worst


def quantile(n: int, tail: float) -> float:
    """q: the half-width multiplier (× s/√n) that the median pivot at n values exceeds with
    probability at most `tail` under every design shape (log-linear between the tabulated
    tails; beyond the smallest one, extrapolated on the same line)."""
    if n < 2 or not tail > 0:
        return math.inf
    if n > N_MAX:
        n = N_MAX  # the pivot's quantiles only fall with n: the table's last is conservative
    q = pivot_quantiles(n)
    lt, lq = np.log(np.asarray(TAILS)), np.log(q)
    x = math.log(min(tail, TAILS[-1]))
    if x < lt[0]:
        slope = (lq[1] - lq[0]) / (lt[1] - lt[0])
        return float(math.exp(lq[0] + slope * (x - lt[0])))
    return float(math.exp(np.interp(x, lt, lq)))


@lru_cache(maxsize=64)
def check_thresholds(n: int) -> checks.Thresholds | None:
    """The run-order checks' thresholds at n values (None below checks.CHECK_FROM): shipped, or
    simulated on first use (dependence: random orders; two modes: the design shapes)."""
    if n < checks.CHECK_FROM:
        return None
    n = min(n, N_MAX)
    shipped = (_table().get("check_thresholds") or {}).get(str(n))
    if shipped is not None:
        return checks.Thresholds(float(shipped[0]), float(shipped[1]))
    return checks.Thresholds(checks.simulate_dependence_threshold(n), simulate_modes_threshold(n))


def simulate_modes_threshold(n: int) -> float:
    worst = 0.0
    for shape in DESIGN_SHAPES:
        rng = np.random.default_rng([SEED, 2, n, DESIGN_SHAPES.index(shape)])
        stat = checks.two_modes_stat(draw_noise(shape, rng, (PIVOT_SIMULATIONS, n)))
        worst = max(worst, float(np.quantile(stat, 1.0 - checks.TAIL)))
    return worst


@lru_cache(maxsize=512)
def per_look_alpha(first: int, last: int) -> float:
    """α': the per-look tail probability of the design first..last (shipped, or simulated)."""
    shipped = (_table().get("per_look_alpha") or {}).get(f"{first}..{last}")
    return float(shipped) if shipped is not None else simulate_alpha(first, last)


# -- the stop-time calibration ------------------------------------------------------------------
@dataclass
class _Looks:
    """One design shape's simulated studies, summarised per look n = 2..N_MAX (x units)."""

    center: dict[int, np.ndarray]
    scale: dict[int, np.ndarray]  # s_n / √n
    low: dict[int, np.ndarray]  # x_(k) for k = 1..OS_DEPTH (columns)
    high: dict[int, np.ndarray]  # x_(n+1-k)
    tripped: dict[int, np.ndarray]
    median: float


@lru_cache(maxsize=8)
def _looks(shape: str) -> _Looks:
    rng = np.random.default_rng([SEED, 3, DESIGN_SHAPES.index(shape)])
    x = draw_noise(shape, rng, (STOP_SIMULATIONS, N_MAX))
    out = _Looks({}, {}, {}, {}, {}, noise_median(shape))
    for n in range(2, N_MAX + 1):
        v = x[:, :n]
        s = np.sort(v, axis=-1)
        d = min(OS_DEPTH, n // 2)
        out.center[n] = np.median(v, axis=-1)
        out.scale[n] = v.std(axis=-1, ddof=1) / math.sqrt(n)
        out.low[n], out.high[n] = s[:, :d], s[:, ::-1][:, :d]
        trips = checks.tripped(v, check_thresholds(n))
        out.tripped[n] = trips["trend"] | trips["dependence"] | trips["two_modes"]
    return out


def stop_coverage(first: int, last: int, alpha: float, shape: str,
                  cv_ratios: tuple[float, ...] = STOP_CV_RATIOS) -> tuple[np.ndarray, np.ndarray]:
    """(coverage of the median at the runner's stop, mean repetitions), one per CV of cv_ratios ×
    ci_target, for one design shape, the noise on the scale the interval is computed on (log)."""
    looks, target = _looks(shape), 0.05
    cv = np.asarray(cv_ratios, dtype=float)[:, None] * target
    n_sim = len(looks.center[2])
    covered = np.zeros((len(cv), n_sim), dtype=bool)
    reps = np.zeros((len(cv), n_sim))
    running = np.ones((len(cv), n_sim), dtype=bool)
    for n in range(first, last + 1):
        c, half = looks.center[n], quantile(n, alpha) * looks.scale[n]
        lo, hi = c - half, c + half
        k = order_depth(n, alpha)
        if k:
            lo, hi = np.minimum(lo, looks.low[n][:, k - 1]), np.maximum(hi, looks.high[n][:, k - 1])
        rel = (np.exp(cv * (hi - c)) - np.exp(-cv * (c - lo))) / 2.0
        stop = running & ((rel <= target) & ~looks.tripped[n] | (n == last))
        inside = (lo <= looks.median) & (looks.median <= hi)
        covered |= stop & inside
        reps[stop] = n
        running &= ~stop
    return covered.mean(axis=1), reps.mean(axis=1)


def simulate_alpha(first: int, last: int) -> float:
    """The largest α' whose worst coverage at the stop over the design shapes and CVs reaches
    STOP_COVERAGE (bisection on log α' to 0.1 %; coverage falls as α' grows)."""
    def worst(alpha: float) -> float:
        return min(float(stop_coverage(first, last, alpha, s)[0].min()) for s in DESIGN_SHAPES)
    lo, hi = math.log(1e-4), math.log(0.3)
    if worst(math.exp(hi)) >= STOP_COVERAGE:
        return math.exp(hi)
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if worst(math.exp(mid)) >= STOP_COVERAGE else (lo, mid)
    return round(math.exp(lo), 6)


# -- the simultaneous t design of iolab's benchmarks ------------------------------------------------
T_TABLE = Path(__file__).with_name("simultaneous_t_alpha.json")
T_SEED, T_SIMULATIONS, T_SHAPES = 20251123, 200_000, ("normal", "lognormal", "t3")


@lru_cache(maxsize=512)
def simultaneous_t_alpha(first: int, last: int) -> float:
    """α' of a mean's t-interval that holds at *every* look first..last at once (Pocock's design on
    the p-value scale, the smallest over normal, lognormal σ = 0.5 and t3 noise): for figures that
    may be read at any look, such as bench/figures.py and fleet-scan's host deviations. Shipped
    for first 2..10, last up to 30 (simultaneous_t_alpha.json); others simulated on first use."""
    try:
        shipped = json.loads(T_TABLE.read_text()).get("per_look_alpha", {}).get(f"{first}..{last}")
    except (OSError, ValueError):
        shipped = None
    if shipped is not None:
        return float(shipped)
    ks, worst = np.arange(first, last + 1), 1.0
    for i, shape in enumerate(T_SHAPES):
        rng = np.random.default_rng([T_SEED, first, last, i])
        n_sim = int(min(T_SIMULATIONS, max(20_000, 20_000_000 // last)))
        x = draw_noise(shape, rng, (n_sim, last))
        counts = np.arange(1, last + 1)
        means = np.cumsum(x, axis=1) / counts
        ss = np.cumsum(x * x, axis=1) - counts * means * means
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(means[:, ks - 1]) / np.sqrt(np.maximum(ss[:, ks - 1], 0.0) / (ks - 1) / ks)
        p = 2.0 * sps.t.sf(t, ks - 1)
        min_p = np.nanmin(np.where(np.isnan(p), 1.0, p), axis=1)
        worst = min(worst, float(np.quantile(min_p, LEVEL_TAIL - 2.0 * math.sqrt(LEVEL_TAIL * LEVEL / n_sim))))
    return worst


LEVEL_TAIL = 1.0 - LEVEL


def write_table(reuse: bool = True) -> None:
    """Simulate every shipped table entry and write look_alpha.json (minutes). `reuse`: keep the
    pivot and check tables of a shipped file made with the same constants (they are seeded, so a
    recomputation gives the same numbers) and recompute the designs' α' only."""
    def reset() -> None:
        for f in (_table, pivot_quantiles, check_thresholds, per_look_alpha, _looks):
            f.cache_clear()
    reset()
    old: dict[str, Any] = {}
    if reuse:  # the pivot and check tables depend on these constants only
        try:
            shipped = json.loads(TABLE.read_text())
        except (OSError, ValueError):
            shipped = {}
        keys = ("seed", "design_shapes", "lognormal_sigma", "pivot_simulations", "check_tail", "tails")
        if all(shipped.get(k) == (list(v) if isinstance(v, tuple) else v) for k, v in _constants().items()
               if k in keys):
            old = shipped
    pivot = old.get("pivot") or {str(n): [round(float(q), 5) for q in simulate_pivot(n)] for n in range(2, N_MAX + 1)}
    thresholds = old.get("check_thresholds") or {
        str(n): [checks.simulate_dependence_threshold(n), round(simulate_modes_threshold(n), 5)]
        for n in range(checks.CHECK_FROM, N_MAX + 1)}
    base = {**_constants(), "pivot": pivot, "check_thresholds": thresholds}
    TABLE.write_text(json.dumps(base, indent=1) + "\n")  # no α' shipped while recomputing them
    reset()
    alphas = {f"{f}..{last}": simulate_alpha(f, last) for f in TABLE_FIRST for last in range(f, N_MAX + 1)}
    TABLE.write_text(json.dumps({**base, "per_look_alpha": alphas}, indent=1) + "\n")
    reset()


if __name__ == "__main__":
    import sys

    write_table(reuse="--all" not in sys.argv[1:])
