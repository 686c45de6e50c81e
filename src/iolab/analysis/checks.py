"""What no interval over ten repetitions can fix, checked on the repetitions themselves.

An interval from n <= 10 values can be made to hold for skewed, heavy-tailed and contaminated
noise (analysis/sequential.py), but three things in a configuration's run order are beyond any
method at that size, and each gets its own test, run on every metric after every repetition:

* ``trend``: the values move along the run (a device filling, a cache warming, thermal
  drift). Kendall's S between value and run order, against its exact distribution under
  exchangeable values (the number of inversions of a random permutation): distribution-free.
* ``dependence``: consecutive repetitions are alike (positive lag-1 dependence), so n values
  carry the information of fewer. The rank von Neumann ratio (Bartels 1982), against its
  permutation distribution: distribution-free.
* ``two_modes``: the values fall in two groups (a cache that sometimes hits, a GC pause): the
  estimate then describes neither group. The largest gap between the means of a lower and an
  upper group (at least two values each) in units of their pooled spread, against the design
  noise shapes (calibration.py): one outlier is not two modes, and the median is robust to it.

Each test trips at a per-look tail probability of TAIL (1 %) on noise without the defect, and
only from CHECK_FROM values on. The two rank tests need one more: at five values no order of them
is rarer than 1 % (Kendall's S at its largest, both ways: 2/120; the smallest rank von Neumann
ratio: 2/120 too), so at five only `two_modes` can trip; `possible` says which can at n, and the
reports say so beside a configuration that stopped there. A tripped check is
said beside the number, the runner keeps repeating the configuration up to its cap (more values
are the only remedy), and the interval's "95 %" is not claimed for it (docs/statistics.md).

Everything is vectorised over a leading batch axis (the calibration and the simulation run
the same functions on 20 000 studies at once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

TAIL = 0.01
CHECK_FROM = 5
EXACT_MAX = 40  # Kendall's S: exact distribution up to here, normal approximation beyond
CHECKS = ("trend", "dependence", "two_modes")
# What a tripped check means, for the report beside the number (see flags.CATALOGUE for trial flags).
MEANING = {
    "trend": "the values move along the run (drift): the interval describes the repetitions run, not a level",
    "dependence": "consecutive repetitions are alike: n values hold less information than n, the interval "
                  "may be too narrow",
    "two_modes": "the values fall in two groups: the estimate describes neither",
    "independence_assumed": f"a design of fewer than {CHECK_FROM} repetitions per configuration (`--quick`) cannot "
                            "test whether consecutive repetitions are alike: the interval assumes they are "
                            "independent, and is too narrow if they are not",
}
# Not a check that trips: the label of every interval of a run whose design never reaches CHECK_FROM values,
# where neither these checks nor the run's pooled dependence (analysis/dependence.py `tested_in`) can test it.
INDEPENDENCE_ASSUMED = "independence_assumed"


def kendall_s(x: np.ndarray) -> np.ndarray:
    """Kendall's S of each row against its position: concordant minus discordant pairs (ties 0)."""
    n = x.shape[-1]
    i, j = np.triu_indices(n, 1)
    return np.sign(x[..., j] - x[..., i]).sum(axis=-1)


@lru_cache(maxsize=64)
def trend_threshold(n: int, tail: float = TAIL) -> float:
    """Smallest |S| whose two-sided probability under exchangeability is <= tail (exact: S =
    n(n-1)/2 - 2 * inversions, and the inversions of a random permutation are Mahonian; beyond
    EXACT_MAX values, S's normal approximation with variance n(n-1)(2n+5)/18)."""
    if n > EXACT_MAX:
        return math.ceil(NormalDist().inv_cdf(1 - tail / 2) * math.sqrt(n * (n - 1) * (2 * n + 5) / 18))
    counts = np.zeros(1, dtype=float)
    counts[0] = 1.0
    for k in range(2, n + 1):  # inversions of permutations of k from those of k - 1
        counts = np.convolve(counts, np.ones(k))
    p = counts / counts.sum()
    pairs = n * (n - 1) // 2
    s = pairs - 2 * np.arange(len(p))  # S for each inversion count
    for thr in range(0, pairs + 2):
        if p[np.abs(s) >= thr].sum() <= tail:
            return float(thr)
    return math.inf


def rank_von_neumann(x: np.ndarray) -> np.ndarray:
    """Bartels' rank von Neumann ratio of each row (ties: average ranks); about 2 for exchangeable
    values, small when consecutive values are alike. NaN for a row without spread."""
    r = _ranks(x)
    d = np.diff(r, axis=-1)
    dev = r - r.mean(axis=-1, keepdims=True)
    den = (dev * dev).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (d * d).sum(axis=-1) / den, np.nan)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (1-based) along the last axis: tied values share the mean of their ranks."""
    below = (x[..., None, :] < x[..., :, None]).sum(axis=-1)
    equal = (x[..., None, :] == x[..., :, None]).sum(axis=-1)
    return below + (equal + 1) / 2.0


def simulate_dependence_threshold(n: int, tail: float = TAIL) -> float:
    """The largest rank von Neumann ratio whose probability of being reached or undercut by a random
    order of n values is at most `tail` (400 000 permutations, fixed seed; -inf when even the
    smallest possible ratio is more likely than that): distribution-free."""
    rng = np.random.default_rng([20251124, n])
    ranks = np.argsort(rng.random((400_000, n)), axis=-1).astype(float) + 1.0  # a random order's ranks
    dev = ranks - (n + 1) / 2.0
    rvn = np.round((np.diff(ranks, axis=-1) ** 2).sum(axis=-1) / (dev * dev).sum(axis=-1), 9)
    values, counts = np.unique(rvn, return_counts=True)
    cdf = np.cumsum(counts) / len(rvn)
    ok = values[cdf <= tail]
    return float(ok[-1]) if len(ok) else -math.inf


def two_modes_stat(x: np.ndarray) -> np.ndarray:
    """Largest separation of a lower and an upper group of the sorted values (>= 2 each): the
    difference of their means over their pooled standard deviation. The pooled deviation is at
    least half the smallest step between distinct values, so values a quantised tool rounds to
    two neighbouring levels are not two modes."""
    s = np.sort(x, axis=-1)
    n = s.shape[-1]
    if n < 4:
        return np.zeros(s.shape[:-1])
    steps = np.diff(s, axis=-1)
    floor = 0.5 * np.where(steps > 0, steps, np.inf).min(axis=-1)
    floor = np.where(np.isfinite(floor), floor, 0.0)
    best = np.zeros(s.shape[:-1])
    csum, csq = np.cumsum(s, axis=-1), np.cumsum(s * s, axis=-1)
    tot, totsq = csum[..., -1], csq[..., -1]
    for k in range(2, n - 1):  # lower group s[:k], upper s[k:]
        m_lo, m_hi = csum[..., k - 1] / k, (tot - csum[..., k - 1]) / (n - k)
        ss_lo = csq[..., k - 1] - k * m_lo * m_lo
        ss_hi = (totsq - csq[..., k - 1]) - (n - k) * m_hi * m_hi
        sd = np.sqrt(np.maximum(ss_lo + ss_hi, 0.0) / (n - 2))
        with np.errstate(divide="ignore", invalid="ignore"):
            stat = (m_hi - m_lo) / np.maximum(sd, floor)
        best = np.maximum(best, np.where(np.isfinite(stat), stat, 0.0))
    return best


@dataclass(frozen=True)
class Thresholds:
    """The checks' thresholds at one n (calibration.check_thresholds: shipped in look_alpha.json)."""

    dependence: float  # trips at or below (rank von Neumann ratio)
    two_modes: float  # trips at or above


def tripped(x: np.ndarray, thresholds: Thresholds | None) -> dict[str, np.ndarray]:
    """{check: bool per row} on the values in run order (last axis); nothing trips below
    CHECK_FROM values (thresholds None)."""
    n = x.shape[-1]
    shape = x.shape[:-1]
    if n < CHECK_FROM or thresholds is None:
        return {c: np.zeros(shape, dtype=bool) for c in CHECKS}
    return {
        "trend": np.abs(kendall_s(x)) >= trend_threshold(n),
        "dependence": np.round(np.nan_to_num(rank_von_neumann(x), nan=np.inf), 9) <= thresholds.dependence,
        "two_modes": two_modes_stat(x) >= thresholds.two_modes,
    }


def possible(n: int, thresholds: Thresholds | None) -> tuple[str, ...]:
    """The checks that can trip at all at n values (none below CHECK_FROM): a rank test only where some
    order of n values is as rare as TAIL (its threshold is reachable), so that a report never lets
    "nothing tripped" stand for a check that could not have."""
    if n < CHECK_FROM or thresholds is None:
        return ()
    can = {"trend": trend_threshold(n) <= n * (n - 1) // 2, "dependence": math.isfinite(thresholds.dependence),
           "two_modes": math.isfinite(thresholds.two_modes)}
    return tuple(c for c in CHECKS if can[c])


def names(trips: dict[str, np.ndarray], row: int | None = None) -> tuple[str, ...]:
    """The checks that tripped (for one row of a batch, or a single configuration)."""
    return tuple(c for c in CHECKS if bool(trips[c] if row is None else trips[c][row]))
