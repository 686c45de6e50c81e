"""Change points in a series of run values: where did a configuration's performance step?

Method (docs/store.md#history): **circular binary segmentation with a permutation test**
(Olshen et al. 2004; the same scheme as e-divisive, Matteson & James 2014, with a
mean-shift statistic in place of the energy distance). For a segment of n values the
statistic is the largest two-sample t statistic of an interval [i, j) against the rest,

    T = max_{i<j} |mean(inside) - mean(outside)| / (s_pooled * sqrt(1/|inside| + 1/|outside|)),

over every interval that leaves at least MIN_SEGMENT values inside and outside; an interval
that reaches the end is a single step, one in the middle is a step and a step back (a
regression that a later version fixed), which a plain binary segmentation often misses.
Its p-value is the share of PERMUTATIONS random reorderings of the segment whose T is at
least as large (+1 correction: p is never 0). If p <= ALPHA the interval's ends are change
points and each piece is searched the same way. Under "no change" the values are
exchangeable, so the first test is exact whatever the noise distribution (heavy tails,
skew): a series of pure noise shows any change point with probability <= ALPHA (1 %). The
permutations come from a generator seeded by the caller, so a history is reproducible.
Pure: numbers in, change points out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALPHA = 0.01
PERMUTATIONS = 999
MIN_SEGMENT = 3


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first value after the change
    p: float  # the permutation p-value of the split in its segment
    before: float  # mean of the segment before / after, for the message
    after: float


def _intervals(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j) with MIN_SEGMENT <= j - i <= n - MIN_SEGMENT: the candidate inside-intervals."""
    i, j = np.triu_indices(n + 1, k=MIN_SEGMENT)
    keep = (j - i) <= n - MIN_SEGMENT
    return i[keep], j[keep]


def _t_max(x: np.ndarray, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise (T, index of the best interval) for a (rows, n) array of series."""
    n = x.shape[1]
    zero = np.zeros((len(x), 1))
    c1 = np.hstack([zero, np.cumsum(x, axis=1)])
    c2 = np.hstack([zero, np.cumsum(x * x, axis=1)])
    m = (j - i).astype(float)
    in1, in2 = c1[:, j] - c1[:, i], c2[:, j] - c2[:, i]
    out1, out2 = c1[:, -1:] - in1, c2[:, -1:] - in2
    mean_in, mean_out = in1 / m, out1 / (n - m)
    ss = (in2 - m * mean_in**2) + (out2 - (n - m) * mean_out**2)  # within-group sums of squares
    s2 = np.maximum(ss, 0.0) / (n - 2)
    diff = np.abs(mean_in - mean_out)
    scale = np.sqrt(s2 * (1.0 / m + 1.0 / (n - m)))
    tiny = 1e-12 * (np.abs(mean_in) + np.abs(mean_out) + 1e-300)  # rounding, not spread
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(scale > tiny, diff / np.where(scale > tiny, scale, 1.0), np.where(diff > tiny, np.inf, 0.0))
    best = np.argmax(t, axis=1)
    return t[np.arange(len(t)), best], best


def _split(x: np.ndarray, rng: np.random.Generator, permutations: int, alpha: float) -> tuple[int, int, float] | None:
    """(i, j, p) of the strongest interval [i, j) in x, or None when x is too short to split."""
    n = len(x)
    if n < 2 * MIN_SEGMENT:
        return None
    i, j = _intervals(n)
    t_obs, best = _t_max(x[None, :], i, j)
    at_least = t_obs[0] * (1 - 1e-9) if np.isfinite(t_obs[0]) else t_obs[0]  # ties count, inf included
    hits = 0
    chunk = max(1, min(100, 2_000_000 // len(i)))  # bounded memory for long series
    for start in range(0, permutations, chunk):
        rows = min(chunk, permutations - start)
        perms = rng.permuted(np.broadcast_to(x, (rows, n)), axis=1)
        hits += int(np.sum(_t_max(perms, i, j)[0] >= at_least))
        if (1 + hits) / (permutations + 1) > alpha:
            break  # already not significant: the rest cannot change the decision (p is then a lower bound)
    return int(i[best[0]]), int(j[best[0]]), (1 + hits) / (permutations + 1)


def change_points(values: list[float] | np.ndarray, *, alpha: float = ALPHA, permutations: int = PERMUTATIONS,
                  seed: int = 0) -> list[ChangePoint]:
    """The change points of `values` (in order), found by binary segmentation; [] for a series
    too short (under 2 * MIN_SEGMENT values) or without a step significant at `alpha`."""
    x = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("change points need finite values")
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    todo = [(0, len(x))]
    while todo:
        lo, hi = todo.pop()
        split = _split(x[lo:hi], rng, permutations, alpha)
        if split is None or split[2] > alpha:
            continue
        i, j, p = split
        cuts = [lo + c for c in (i, j) if 0 < c < hi - lo]
        edges = [lo, *cuts, hi]
        for left, cut, right in zip(edges, edges[1:], edges[2:], strict=False):
            found.append(ChangePoint(cut, p, float(x[left:cut].mean()), float(x[cut:right].mean())))
        todo += list(zip(edges, edges[1:], strict=False))
    return sorted(found, key=lambda c: c.index)
