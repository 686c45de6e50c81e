"""Change points in a study's history: where a configuration's performance stepped, and whether
the newest runs have just stepped.

A history is a family of series (every configuration x metric of a study), one value per run
(log of the run's median for positive metrics: a step of x % is the same size at any level).
Consecutive runs are not independent (a slow week, a neighbour that stays), so the noise is
modelled as a stationary AR(1) process with lag-1 correlation rho, estimated from the whole
family (`noise_model`: residuals within the segments found, corrected for the downward bias
of a short series' autocorrelation, plus one standard error as margin), with normal or Student t
innovations, as heavy-tailed and as skewed as the family's own (analysis/innovations.py).

**Confirmed changes** (at least MIN_SIDE runs on each side): circular binary segmentation
(Olshen et al. 2004) finds a candidate: the interval [i, j) of runs whose mean differs most
from the rest (a single step when it reaches the end), by the contrast's t statistic with its
variance under the AR(1) model. Each end of the candidate is then tested **on its own**, in its
neighbourhood: end i as a single split of [lo, j), end j as a single split of [i, hi), each
needing MIN_SIDE runs per side. p-values come from the null distribution of the largest
statistic over every candidate of a segment that long, simulated from the AR(1) model
(`NULL_SERIES` series; a parametric bootstrap: the selection over candidates and the
dependence are both in it, and there is no permutation floor, so a step three runs before the
end can be confirmed). The pieces are searched again.

**Suspected changes**: the newest 1 or 2 runs against the baseline window (the runs since
the last confirmed change before them, at least MIN_BASELINE), the larger of the two
contrasts' statistics against its own simulated null. A suspicion is confirmed once MIN_SIDE
runs after it split the series at the confirmed level, or withdrawn when later runs return.

**Family**: every series' "is there any change" and "have the newest runs moved" are one
family, Holm-adjusted at ALPHA (family-wise error: the chance that a history of flat series
shows any change is <= ALPHA, whatever the number of configurations and metrics). Inside a
series found to change, later splits are tested at the level at which Holm rejected it.

**Size**: every change carries after/before (the ratio of the segments' geometric means)
with a 95 % interval from the same model (t on the segments' residual degrees of freedom).
Pure: numbers in, change points out; seeded, so a history gives the same answer every time.

Size: one method (model, nulls, segmentation, suspicion, family, sizes) whose parts share the
AR(1) contrast variance; docs/store.md#history explains it and the power tables.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import special

from iolab.analysis.innovations import NORMAL, Shape, shape_for
from iolab.analysis.stats import holm

ALPHA = 0.05
MIN_SIDE = 3  # runs on each side of a confirmed change
MIN_BASELINE = 4  # runs in the baseline window before a suspected change
NEWEST = (1, 2, 3)  # how many newest runs the newest-run test looks at (3: a change it confirms)
NULL_SERIES = 20_000  # simulated null series per (length, rho, kind), at least
MAX_NULL = 200_000  # ... and at most: enough for p-values 20 x below Holm's first level in a family of 500 series
RHO_MAX = 0.9
MAX_CIRCULAR = 80  # longer segments are searched by single splits only (the circular search is O(n^2))


@dataclass(frozen=True)
class NoiseModel:
    rho: float  # the lag-1 correlation the tests use (bias-corrected estimate + margin, clipped)
    estimate: float  # the bias-corrected estimate before the margin
    pairs: int  # consecutive pairs of runs it was estimated from
    tails: float = math.inf  # degrees of freedom of the Student t innovations (inf: normal)
    far: float = 0.0  # share of the pooled innovations beyond 3 robust SDs, which chose the shape
    unclipped: float | None = None  # the bias-corrected estimate when it fell outside [-1, 1] (then clipped)
    skew: float = 1.0  # the innovations' Fernández–Steel γ (1: symmetric; innovations.Shape)

    @property
    def shape(self) -> Shape:
        """The innovations the nulls are simulated with."""
        return Shape(self.tails, self.skew)


@dataclass(frozen=True)
class Change:
    index: int  # the first run after the change
    status: str  # "confirmed" or "suspected"
    p: float  # the test's own p-value
    level: float  # the (Holm) level it was held to
    before: float  # level of the segment before / after (original scale: geometric mean when logged)
    after: float
    ratio: float  # after / before (log series) or after - before (raw series)
    lo: float  # 95 % interval of ratio
    hi: float
    runs_after: int  # runs from the change to the next change or the end


@dataclass
class SeriesResult:
    changes: list[Change] = field(default_factory=list)
    p_any: float = 1.0  # the series' top-level test ("any change")
    p_newest: float = 1.0  # the suspicion test of the newest runs
    logged: bool = True
    resolution: float = 0.0  # h: each tested value's error bound (log scale when logged; `transform`)
    scale: float = 1.0  # a raw series was divided by this before testing


# -- the AR(1) model ----------------------------------------------------------------------------
def correlation(n: int, rho: float) -> np.ndarray:
    idx = np.arange(n)
    return rho ** np.abs(idx[:, None] - idx[None, :]) if rho > 0 else np.eye(n)


def _prefix2(r: np.ndarray) -> np.ndarray:
    """2-D prefix sums, P[a, b] = sum of r[:a, :b], so any block sum is four lookups."""
    p = np.zeros((r.shape[0] + 1, r.shape[1] + 1))
    p[1:, 1:] = r.cumsum(0).cumsum(1)
    return p


def _block(p: np.ndarray, a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    return p[a1, b1] - p[a0, b1] - p[a1, b0] + p[a0, b0]


@lru_cache(maxsize=1024)
def _correlation_sums(n: int, rho: float) -> np.ndarray:
    """The prefix sums of n AR(1) values' correlation matrix, once per (n, rho): a family's series
    share their length and noise model, and every test of every series reads them."""
    p = _prefix2(correlation(n, rho))
    p.flags.writeable = False
    return p


def interval_variance(n: int, rho: float, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Var(mean(inside) - mean(outside)) / sigma^2 for inside = [i, j) of n AR(1) values."""
    p = _correlation_sums(n, rho)
    z, e = np.zeros_like(i), np.full_like(i, n)
    m = (j - i).astype(float)
    o = n - m
    s_in = _block(p, i, j, i, j)
    s_all = _block(p, z, e, z, e)
    s_cross = _block(p, i, j, z, e) - s_in  # inside x outside
    s_out = s_all - s_in - 2 * s_cross
    return s_in / m**2 + s_out / o**2 - 2 * s_cross / (m * o)


def split_variance(n: int, rho: float, t: np.ndarray) -> np.ndarray:
    """Var(mean(after) - mean(before)) / sigma^2 for a split of n values at t."""
    return interval_variance(n, rho, t, np.full_like(t, n))


def tail_variance(n: int, rho: float, k: int) -> float:
    """Var(mean(newest k) - mean(the n - k before)) / sigma^2."""
    return float(split_variance(n, rho, np.array([n - k]))[0])


# -- statistics ---------------------------------------------------------------------------------
def candidates(n: int, circular: bool) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of every inside-interval with MIN_SIDE values inside and outside; single splits
    (j = n, or i = 0 folded onto j = n) only when not circular."""
    if n < 2 * MIN_SIDE:
        return np.array([], dtype=int), np.array([], dtype=int)
    if not circular or n > MAX_CIRCULAR:
        t = np.arange(MIN_SIDE, n - MIN_SIDE + 1)
        return t, np.full_like(t, n)
    i, j = np.triu_indices(n + 1, k=MIN_SIDE)
    keep = ((j - i) <= n - MIN_SIDE) & (i < n) & ~((i == 0) & (j < n))  # [0, j) is the split at j: once
    return i[keep], j[keep]


@lru_cache(maxsize=1024)
def candidate_set(n: int, rho: float, circular: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, their interval variances) of `candidates`, once per (n, rho, circular), read-only:
    binary segmentation tests every segment of every series of a family with them."""
    i, j = candidates(n, circular)
    var = interval_variance(n, rho, i, j)
    for a in (i, j, var):
        a.flags.writeable = False
    return i, j, var


def statistics(x: np.ndarray, i: np.ndarray, j: np.ndarray, var: np.ndarray, h: float = 0.0) -> np.ndarray:
    """|mean(inside) - mean(outside)| / (s * sqrt(var)) for rows of x (..., n), s the pooled
    within-group SD of inside and outside. Rows without spread give 0 (no step) or inf. `h`: the
    values' resolution (each off by at most h): the difference loses 2 h (what the tool cannot
    tell from no difference) and s is at least h / sqrt(3) (a uniform rounding error's SD)."""
    n = x.shape[-1]
    zero = np.zeros(x.shape[:-1] + (1,))
    c1 = np.concatenate([zero, np.cumsum(x, axis=-1)], axis=-1)
    c2 = np.concatenate([zero, np.cumsum(x * x, axis=-1)], axis=-1)
    m = (j - i).astype(float)
    in1, in2 = c1[..., j] - c1[..., i], c2[..., j] - c2[..., i]
    out1, out2 = c1[..., -1:] - in1, c2[..., -1:] - in2
    mi, mo = in1 / m, out1 / (n - m)
    ss = np.maximum((in2 - m * mi**2) + (out2 - (n - m) * mo**2), 0.0)
    s = np.maximum(np.sqrt(ss / (n - 2)), h / math.sqrt(3))
    diff = np.maximum(np.abs(mi - mo) - 2 * h, 0.0)
    tiny = 1e-12 * (np.abs(mi) + np.abs(mo) + 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(s > tiny, diff / (s * np.sqrt(var)), np.where(diff > tiny, np.inf, 0.0))
    return t


def null_maxima(x: np.ndarray, i: np.ndarray, j: np.ndarray, var: np.ndarray, block: int = 1 << 16) -> np.ndarray:
    """`statistics(x, i, j, var).max(axis=-1)` for simulated flat rows (h = 0, continuous noise),
    the same numbers to rounding (~1e-15), five to eight times faster: simulating the nulls was
    four fifths of a cold `iolab history` and of every simulation of it.

    How: with each row centred, a candidate's inside sum S alone sets its statistic. The gap of
    the means is D = S n / (m (n - m)), the pooled within SS is SST - S² n / (m (n - m)) (total
    SS less the between SS), so t² = u g / (SST - u) with u = S² w, w = n / (m (n - m)) and
    g = w (n - 2) / var per candidate: four passes over rows × candidates instead of some twenty,
    in blocks of `block` values that stay in the CPU's cache."""
    rows, n = x.shape
    m = (j - i).astype(float)
    w = n / (m * (n - m))
    g = w * (n - 2) / var
    out = np.empty(rows)
    step = max(1, block // max(len(i), 1))
    c1 = np.zeros((min(step, rows), n + 1))
    for a in range(0, rows, step):
        xc = x[a:a + step] - x[a:a + step].mean(axis=-1, keepdims=True)
        c = c1[: len(xc)]
        np.cumsum(xc, axis=-1, out=c[:, 1:])
        sst = np.einsum("ij,ij->i", xc, xc)[:, None]
        inside = c[:, j] - c[:, i]
        u = inside * inside * w
        with np.errstate(divide="ignore", invalid="ignore"):
            out[a:a + step] = np.sqrt((u * g / (sst - u)).max(axis=-1))
    return out


def ar1(rng: np.random.Generator, rows: int, n: int, rho: float, shape: Shape = NORMAL) -> np.ndarray:
    """rows stationary AR(1) series of length n with unit marginal variance; innovations of `shape`
    (normal, Student t, skewed: analysis/innovations.py)."""
    e = shape.draw(rng, (rows, n))
    if rho <= 0:
        return e
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    c = math.sqrt(1 - rho * rho)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + c * e[:, t]
    return x


@lru_cache(maxsize=512)
def segment_null(n: int, rho: float, circular: bool, size: int = NULL_SERIES, shape: Shape = NORMAL) -> np.ndarray:
    """Sorted maxima of the candidate statistics of `size` simulated flat series of length n."""
    i, j, var = candidate_set(n, rho, circular)
    rng = np.random.default_rng([n, int(rho * 1000), circular, *shape.seed()])
    out = []
    chunk = max(100, min(size, 1_000_000 // max(len(i), 1)))
    for start in range(0, size, chunk):
        x = ar1(rng, min(chunk, size - start), n, rho, shape)
        out.append(null_maxima(x, i, j, var))
    return np.sort(np.concatenate(out))


@lru_cache(maxsize=512)
def newest_null(n: int, rho: float, size: int = NULL_SERIES, shape: Shape = NORMAL) -> tuple[np.ndarray, np.ndarray]:
    """(per k in NEWEST the sorted newest-k statistics, the sorted smallest of each series' own
    p-values over k) of `size` simulated flat series of length n: the k are combined by min-p."""
    rng = np.random.default_rng([n, int(rho * 1000), 7, *shape.seed()])
    stats = np.concatenate([_newest_stats(ar1(rng, min(50_000, size - start), n, rho, shape), rho)
                            for start in range(0, size, 50_000)])
    cols = np.sort(stats, axis=0).T
    ps = np.stack([_tail_share(c, stats[:, q]) for q, c in enumerate(cols)], axis=-1)
    return cols, np.sort(ps.min(axis=-1))


def _tail_share(null: np.ndarray, stat: np.ndarray) -> np.ndarray:
    """Share of the sorted null at least as large as each stat."""
    return (len(null) - np.searchsorted(null, stat * (1 - 1e-9), side="left")) / len(null)


def null_size(hypotheses: int, alpha: float = ALPHA) -> int:
    """Simulated null series enough to resolve p-values 20 times below Holm's first level."""
    return int(min(MAX_NULL, max(NULL_SERIES, 20 * hypotheses / alpha)))


def _newest_stats(x: np.ndarray, rho: float, h: float = 0.0) -> np.ndarray:
    """(..., len(NEWEST)) per k: how far the newest k runs lie beyond the baseline's mean, all on one
    side (else 0), without the farthest of them (k >= 2: the mean of the k - 1 others; the
    smallest contrast left when any one run is removed), in baseline SDs. One odd run among the
    newest k cannot make their change: the others must have moved too. `h`: the values'
    resolution (as in `statistics`)."""
    n = x.shape[-1]
    out = []
    for k in NEWEST:
        base, new = x[..., : n - k], x[..., n - k:]
        s = np.maximum(base.std(axis=-1, ddof=1), h / math.sqrt(3))
        d = new - base.mean(axis=-1, keepdims=True)
        same = np.all(d > 0, axis=-1) | np.all(d < 0, axis=-1)
        kept = np.sort(np.abs(d), axis=-1)[..., : max(k - 1, 1)].mean(axis=-1)
        diff = np.where(same, np.maximum(kept - 2 * h, 0.0), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.where(s > 0, diff / s, np.where(diff > 0, np.inf, 0.0)))
    return np.stack(out, axis=-1)


def p_of(null: np.ndarray, stat: float) -> float:
    """Share of the null at least as large (+1 correction: never 0)."""
    above = len(null) - int(np.searchsorted(null, stat * (1 - 1e-9), side="left"))
    return (1 + above) / (len(null) + 1)


# -- the noise model ----------------------------------------------------------------------------
def noise_model(segments: Sequence[np.ndarray]) -> NoiseModel:
    """Lag-1 correlation from the residuals of every segment (each around its own mean), pooled,
    bias-corrected for short segments (E[r] ~ rho - (1 + 4 rho) / L; Kendall 1954, Marriott &
    Pope 1954) and raised by one standard error, so that dependence is not under-stated; and the
    innovations' tails and skew (innovations.shape_for)."""
    num = den = 0.0
    pairs, lengths = 0, []
    resid = []
    for seg in segments:
        if len(seg) < 3:
            continue
        r = seg - seg.mean()
        num += float((r[1:] * r[:-1]).sum())
        den += float((r * r).sum())
        pairs += len(seg) - 1
        lengths.append(len(seg))
        resid.append(r)
    if pairs == 0 or not den > 0 or not math.isfinite(num / den):
        return NoiseModel(0.0, 0.0, 0)
    raw = num / den
    length = float(np.mean(lengths))
    corrected = (raw * length + 1) / (length - 4) if length > 5 else raw + 0.3
    est = min(max(corrected, -1.0), 1.0)  # a correlation: the correction of a short series can overshoot
    margin = math.sqrt(max(1 - est * est, 0.05) / pairs)
    rho = float(np.clip(math.ceil((est + margin) * 20) / 20, 0.0, RHO_MAX))  # up to a 0.05 grid: fewer nulls
    innov = np.concatenate([r[1:] - raw * r[:-1] for r in resid])
    shape, far = shape_for(innov)
    return NoiseModel(rho, est, pairs, shape.df, far, None if est == corrected else corrected, shape.skew)


# -- one series ---------------------------------------------------------------------------------
def _best(x: np.ndarray, lo: int, hi: int, rho: float, h: float = 0.0) -> tuple[int, int, float] | None:
    """(i, j, statistic) of the strongest candidate in x[lo:hi] (absolute indices), or None."""
    seg = x[lo:hi]
    n = len(seg)
    i, j, var = candidate_set(n, rho, True)
    if len(i) == 0:
        return None
    t = statistics(seg[None, :], i, j, var, h)[0]
    b = int(np.argmax(t))
    return lo + int(i[b]), lo + int(j[b]), float(t[b])


def _split_p(x: np.ndarray, lo: int, cut: int, hi: int, rho: float, nulls: int = NULL_SERIES,
             shape: Shape = NORMAL, h: float = 0.0) -> float:
    """p of the single split of x[lo:hi] at cut, against the largest split statistic of a flat
    segment that long; 1 when a side is shorter than MIN_SIDE."""
    if cut - lo < MIN_SIDE or hi - cut < MIN_SIDE:
        return 1.0
    n = hi - lo
    t = np.array([cut - lo])
    stat = float(statistics(x[None, lo:hi], t, np.full_like(t, n), split_variance(n, rho, t), h)[0, 0])
    return p_of(segment_null(n, rho, False, nulls, shape), stat)


def segment(x: np.ndarray, rho: float, level: float, nulls: int = NULL_SERIES,
            shape: Shape = NORMAL, h: float = 0.0) -> tuple[list[tuple[int, float]], float]:
    """Binary segmentation of x at `level`: ([(index, p)] of the confirmed change points, the p of
    the top-level test of the whole series); `h` the values' resolution."""
    found: list[tuple[int, float]] = []
    p_top = 1.0
    todo = [(0, len(x))]
    first = True
    while todo:
        lo, hi = todo.pop()
        best = _best(x, lo, hi, rho, h)
        if best is None:
            first = False
            continue
        i, j, stat = best
        p_seg = p_of(segment_null(hi - lo, rho, True, nulls, shape), stat)
        if first:
            p_top, first = p_seg, False
        if p_seg > level:
            continue
        ends = [(c, _split_p(x, lo, c, j, rho, nulls, shape, h) if c == i
                 else _split_p(x, i if i > lo else lo, c, hi, rho, nulls, shape, h))
                for c in (i, j) if lo < c < hi]
        kept = [(c, p) for c, p in ends if p <= level]
        found += kept
        edges = [lo, *sorted(c for c, _ in kept), hi]
        if len(edges) > 2:
            todo += list(zip(edges, edges[1:], strict=False))
    return sorted(found), p_top


def newest_p(x: np.ndarray, start: int, rho: float, nulls: int = NULL_SERIES, shape: Shape = NORMAL,
             h: float = 0.0) -> float:
    """p of "the newest runs moved", against the baseline x[start:-k]; 1 without MIN_BASELINE runs."""
    return newest_test(x, start, rho, nulls, shape, h)[0]


def newest_test(x: np.ndarray, start: int, rho: float, nulls: int = NULL_SERIES, shape: Shape = NORMAL,
                h: float = 0.0) -> tuple[float, int]:
    """(p, k): the newest-k tests combined by their smallest p-value (its null simulated), and the
    k that gave it (the largest of equally small ones: every run that moved belongs to the change)."""
    n = len(x) - start
    if n - max(NEWEST) < MIN_BASELINE:
        return 1.0, NEWEST[0]
    cols, minp = newest_null(n, rho, nulls, shape)
    stats = _newest_stats(x[None, start:], rho, h)[0]
    ps = [float(_tail_share(c, np.array([v]))[0]) for c, v in zip(cols, stats, strict=True)]
    best = min(ps)
    k = max(kk for kk, pk in zip(NEWEST, ps, strict=True) if pk <= best)
    above = int(np.searchsorted(minp, best * (1 + 1e-9), side="right"))
    return (1 + above) / (len(minp) + 1), k


Size = tuple[float, float, float, float, float]  # (before, after, ratio or difference, lo, hi): `sizes`


def sizes(x: np.ndarray, cuts: list[int], rho: float, logged: bool, h: float = 0.0) -> list[Size]:
    """Per cut: (before, after, ratio, lo, hi) of the segments on either side, 95 % interval by t on
    the residual degrees of freedom of all segments, variance from the AR(1) model, widened on each
    side by 2 h (each segment's mean is off by at most the values' resolution h: never zero width)."""
    edges = [0, *cuts, len(x)]
    pieces = list(zip(edges, edges[1:], strict=False))
    ss = sum(float(((x[a:b] - x[a:b].mean()) ** 2).sum()) for a, b in pieces)
    # E[sum of squares around a segment's own mean] = sigma^2 (L - S(L)/L) under AR(1), S(L) the sum
    # of the segment's correlation matrix: dependence makes a short segment look calmer than it is
    expected = sum((b - a) - float(correlation(b - a, rho).sum()) / (b - a) for a, b in pieces)
    df = max(len(x) - len(pieces), 1)
    s = math.sqrt(ss / expected) if expected > 0 else 0.0
    q = float(special.stdtrit(df, 0.975))
    out = []
    for k, c in enumerate(cuts):
        a, b = edges[k], edges[k + 2]
        seg = x[a:b]
        d = float(x[c:b].mean() - x[a:c].mean())
        w = q * s * math.sqrt(float(split_variance(len(seg), rho, np.array([c - a]))[0])) + 2 * h
        mb, ma = float(x[a:c].mean()), float(x[c:b].mean())
        if logged:
            out.append((math.exp(mb), math.exp(ma), math.exp(d), math.exp(d - w), math.exp(d + w)))
        else:
            out.append((mb, ma, d, d - w, d + w))
    return out


# -- the family ---------------------------------------------------------------------------------
def analyse(family: Mapping[Hashable, Sequence[float]], alpha: float = ALPHA, rho: float | None = None,
            tails: float = math.inf, resolution: Mapping[Hashable, Sequence[float]] | None = None,
            skew: float = 1.0,
            ) -> tuple[dict[Hashable, SeriesResult], NoiseModel]:
    """Every series of a study at once: the noise model from all of them, Holm over the family
    of their top-level and newest-run tests, the changes of each. `rho` (and `tails`, `skew`): use this
    noise model instead of estimating it (power simulations). `resolution`: per series, each
    value's error bound in its own units (the tool's clock tick or histogram bucket, as
    `manifest.resolution` records it; `transform`)."""
    data = {k: transform(v, (resolution or {}).get(k)) for k, v in family.items()}
    model = NoiseModel(rho, rho, 0, tails, skew=skew) if rho is not None else _model(data)
    r, shape = model.rho, model.shape
    nulls = null_size(2 * len(data), alpha)
    tops: dict[Hashable, float] = {}
    newest: dict[Hashable, float] = {}
    for k, (x, _, _, h) in data.items():
        _, tops[k] = segment(x, r, 0.0, nulls, shape, h) if len(x) >= 2 * MIN_SIDE else ([], 1.0)
    keys = list(data)
    # Holm over the "any change" tests first pass: which series change at all
    hyps = [("any", k) for k in keys] + [("newest", k) for k in keys]
    # the newest-run test needs the confirmed segmentation for its baseline: computed at a level
    # found by Holm's first step (conservative: the smallest level Holm could use)
    first_level = alpha / len(hyps) if hyps else alpha
    cuts0 = {k: segment(data[k][0], r, first_level, nulls, shape, data[k][3])[0] if tops[k] <= first_level else []
             for k in keys}
    starts: dict[Hashable, int] = {}
    ks: dict[Hashable, int] = {}
    for k in keys:
        x, h = data[k][0], data[k][3]
        starts[k] = max([c for c, _ in cuts0[k] if c <= len(x) - max(NEWEST) - MIN_BASELINE] or [0])
        newest[k], ks[k] = newest_test(x, starts[k], r, nulls, shape, h)
    ps = [tops[k] for k in keys] + [newest[k] for k in keys]
    adjusted = holm(ps)
    levels = _holm_levels(ps, alpha)
    out: dict[Hashable, SeriesResult] = {}
    for idx, k in enumerate(keys):
        x, logged, scale, h = data[k]
        res = SeriesResult(p_any=tops[k], p_newest=newest[k], logged=logged, resolution=h, scale=scale)
        if adjusted[idx] <= alpha:
            cuts = segment(x, r, levels[idx], nulls, shape, h)[0]
            res.changes += _changes(x, cuts, r, res, "confirmed", levels[idx])
        j = idx + len(keys)
        covered = any(c.index > len(x) - max(NEWEST) - MIN_BASELINE for c in res.changes)
        if adjusted[j] <= alpha and not covered:  # a change confirmed among the newest runs explains them
            res.changes += _suspected(x, r, res, levels[j], starts[k], ks[k])
        out[k] = res
    return out, model


def transform(values: Sequence[float], bounds: Sequence[float] | None = None) -> tuple[np.ndarray, bool, float, float]:
    """(the series as tested, logged, scale, h): the log of a positive series; else the values
    divided by their largest magnitude (`scale`: 1e303 and 0 in one series must not overflow).
    h is the values' resolution on that scale: the largest error bound in `bounds` (relative to
    its value when logged, up to a factor 2), and at least half the smallest gap between distinct
    values when the series repeats itself (at most half of its values before the newest runs
    distinct, and it returns to a level it left: a quantised metric jittering between buckets,
    not a clean step) -- a difference within it is not evidence of a change."""
    x = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("change points need finite values")
    b = np.zeros(len(x)) if bounds is None else np.abs(np.nan_to_num(np.asarray(bounds, dtype=float)))
    logged = bool(len(x)) and bool(np.all(x > 0))
    if logged:
        y, scale = np.log(x), 1.0
        h = float(np.max(-np.log1p(-np.minimum(b / x, 0.5)))) if len(x) else 0.0
    else:
        scale = float(np.max(np.abs(x))) if len(x) and np.any(x) else 1.0
        y, h = x / scale, float(np.max(b, initial=0.0)) / scale
    known = y[: len(y) - max(NEWEST)]  # the newest runs are judged, they never set the scale they are judged on
    levels, at = np.unique(known, return_inverse=True)
    gaps = np.diff(levels)
    returns = np.count_nonzero(np.diff(at)) > len(gaps)  # it goes back to a level (a staircase does not)
    if len(known) >= 2 * MIN_SIDE and 1 <= len(gaps) < len(known) // 2 and returns:
        h = max(h, float(gaps.min()) / 2)
    return y, logged, scale, h


def _model(data: Mapping[Hashable, tuple[np.ndarray, bool, float, float]]) -> NoiseModel:
    """Two passes: segments of a first segmentation under independence, then under the first model."""
    model = NoiseModel(0.0, 0.0, 0)
    for _ in range(2):
        segs = []
        for x, _logged, _scale, h in data.values():
            level = ALPHA / max(len(data), 1)
            cuts = [c for c, _ in segment(x, model.rho, level, null_size(len(data)), model.shape, h)[0]] \
                if len(x) >= 2 * MIN_SIDE else []
            # the newest runs are what the newest-run test judges: they never shape the noise it is judged by
            known = len(x) - max(NEWEST) if len(x) > 2 * max(NEWEST) else len(x)
            edges = [0, *[c for c in cuts if c < known], known]
            segs += [x[a:b] for a, b in zip(edges, edges[1:], strict=False)]
        model = noise_model(segs)
    return model


def _holm_levels(ps: Sequence[float], alpha: float) -> list[float]:
    """The level Holm holds each hypothesis to: alpha / (m - rank) at its rank among the p-values."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out = [alpha] * len(ps)
    for rank, i in enumerate(order):
        out[i] = alpha / (len(ps) - rank)
    return out


def _scaled(size: Size, res: SeriesResult) -> Size:
    """A raw series' size back in its own units (it was tested divided by `res.scale`)."""
    if res.logged:
        return size
    before, after, d, lo, hi = (v * res.scale for v in size)
    return before, after, d, lo, hi


def _changes(x: np.ndarray, cuts: list[tuple[int, float]], rho: float, res: SeriesResult, status: str,
             level: float) -> list[Change]:
    idx = [c for c, _ in cuts]
    edges = [*idx, len(x)]
    return [Change(c, status, p, level, *_scaled(size, res), edges[k + 1] - c)
            for k, ((c, p), size) in enumerate(zip(cuts, sizes(x, idx, rho, res.logged, res.resolution),
                                                   strict=True))]


def _suspected(x: np.ndarray, rho: float, res: SeriesResult, level: float, start: int, k: int) -> list[Change]:
    """The newest-run suspicion as a change at the newest k runs (the k of the smallest p): with
    k = MIN_SIDE runs every one beyond the baseline it is confirmed, with fewer suspected."""
    size = sizes(x[start:], [len(x) - start - k], rho, res.logged, res.resolution)[0]
    return [Change(len(x) - k, "confirmed" if k >= MIN_SIDE else "suspected", res.p_newest, level,
                   *_scaled(size, res), k)]
