"""What the noise between runs looks like beyond normal: heavy tails and skew.

`iolab history` judges a family of series against nulls simulated from an AR(1) model
(analysis/changepoints.py). Those nulls must be as wild as the family's own innovations, or
runs that now and then land far off (a cache that missed, a neighbour's burst) read as changes.
Storage noise is often lopsided as well as heavy: a run is slowed far more often than it is sped
up, so on the log scale one tail is long and the other short. A symmetric null with the heavy
side's tails on both sides still under-states how far the long side reaches *jointly* with how
tight the short side is (a lognormal σ = 0.5 family alarmed in 10 % of flat histories against
a 5 % promise; with its own innovations in the nulls, in 4 %).

So the innovations are a **Fernández–Steel skewed Student t** (Fernández & Steel 1998): a
Student t with `df` degrees of freedom (normal when infinite) whose positive half is stretched
by γ = `skew` and whose negative half is shrunk by 1/γ (γ = 1: symmetric; γ < 1: the long tail
below). `shape_for` fits it to a family's pooled innovations conservatively, in the same way for
both parameters: the lightest tails and the least skew the innovations do not rule out at 90 %
confidence, each taken from a short grid so that the simulated nulls can be cached and shared.
Pure and seeded: the same innovations give the same shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, special

TAILS = (30.0, 12.0, 8.0, 6.0, 5.0, 4.0, 3.0)  # Student t degrees of freedom the nulls may be simulated with
SKEWS = (1.1, 1.2, 1.35, 1.5, 1.75, 2.0, 2.5)  # γ > 1 they may be skewed by (and 1/γ: the long tail below)
FAR = 3.0  # "far off": beyond 3 normal SDs, measured in median absolute deviations (robust to the tails)
KELLY = 0.1  # the quantiles of the skewness measure: (q[1 - p] + q[p] - 2 median) / (q[1 - p] - q[p])
BOOTSTRAP = 400  # resamples for the skewness measure's confidence bound
Z90 = 1.2815515655446004  # one-sided 90 %
MAD_SD = 1.482602218505602  # a normal SD in median absolute deviations


@dataclass(frozen=True)
class Shape:
    """The innovations' distribution: Fernández–Steel skewed t, unit variance, mean 0."""

    df: float = math.inf  # degrees of freedom (inf: normal)
    skew: float = 1.0  # γ: P(above the mode) = γ² / (1 + γ²); > 1 a longer tail above, < 1 below

    def seed(self) -> list[int]:
        """The nulls' seed key: symmetric shapes keep the key (and so the nulls) they always had."""
        key = [0 if math.isinf(self.df) else int(self.df)]
        return key if self.skew == 1.0 else [*key, round(self.skew * 1000)]

    def draw(self, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
        """Innovations of this shape, scaled to mean 0 and variance 1."""
        if self.skew == 1.0:  # the symmetric draws exactly as before skew was modelled
            if math.isinf(self.df):
                return rng.standard_normal(size)
            return np.asarray(rng.standard_t(self.df, size) / math.sqrt(self.df / (self.df - 2)), dtype=float)
        g = self.skew
        t = np.abs(rng.standard_normal(size) if math.isinf(self.df) else rng.standard_t(self.df, size))
        up = rng.random(size) < g * g / (1 + g * g)
        x = np.where(up, g * t, -t / g)
        mean, var = _moments(self.df, g)
        return np.asarray((x - mean) / math.sqrt(var), dtype=float)

    def describe(self) -> str:
        """For a method line: "normal", "Student t (5 d.o.f.)", "... skewed, the longer tail above (γ 2)"."""
        text = "normal" if math.isinf(self.df) else f"Student t ({self.df:g} d.o.f.: runs that land far off)"
        if self.skew != 1.0:
            side = "above" if self.skew > 1 else "below"
            text += f", skewed with the longer tail {side} (γ {self.skew:g}: Fernández–Steel)"
        return text


NORMAL = Shape()


def _abs_moments(df: float) -> tuple[float, float]:
    """(E|T|, E[T²]) of a standard Student t with df (normal when infinite)."""
    if math.isinf(df):
        return math.sqrt(2 / math.pi), 1.0
    m1 = 2 * math.sqrt(df) * math.exp(special.gammaln((df + 1) / 2) - special.gammaln(df / 2)) / (
        math.sqrt(math.pi) * (df - 1))
    return m1, df / (df - 2)


def _moments(df: float, g: float) -> tuple[float, float]:
    """(mean, variance) of the unscaled Fernández–Steel variable with df and γ."""
    m1, m2 = _abs_moments(df)
    mean = m1 * (g - 1 / g)
    second = m2 * (g**3 + g**-3) / (g + 1 / g)
    return mean, second - mean * mean


def _cdf(x: float, df: float, g: float) -> float:
    t = special.ndtr if math.isinf(df) else (lambda v: special.stdtr(df, v))
    if x >= 0:
        return float(1 / (1 + g * g) + 2 * g * g / (1 + g * g) * (t(x / g) - 0.5))
    return float(2 / (1 + g * g) * t(x * g))


def _ppf(p: float, df: float, g: float) -> float:
    return float(optimize.brentq(lambda v: _cdf(v, df, g) - p, -1e4, 1e4, xtol=1e-12))


@lru_cache(maxsize=256)
def summary(df: float, g: float) -> tuple[float, float, float]:
    """(Kelly skewness, share beyond FAR robust SDs above the median, ... below) of the shape: the
    three numbers `shape_for` compares the innovations with, measured the same way."""
    med = _ppf(0.5, df, g)
    mad = float(optimize.brentq(lambda d: _cdf(med + d, df, g) - _cdf(med - d, df, g) - 0.5, 1e-12, 1e4,
                                xtol=1e-12))
    lo, hi = _ppf(KELLY, df, g), _ppf(1 - KELLY, df, g)
    far = FAR * MAD_SD * mad
    return (hi + lo - 2 * med) / (hi - lo), 1 - _cdf(med + far, df, g), _cdf(med - far, df, g)


def _kelly(x: np.ndarray) -> np.ndarray:
    """Kelly's skewness of each row: robust to the tails, 0 for a symmetric shape, in [-1, 1]."""
    lo, med, hi = np.quantile(x, [KELLY, 0.5, 1 - KELLY], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(hi > lo, (hi + lo - 2 * med) / (hi - lo), 0.0)


def _kelly_resampled(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """`_kelly(x[idx])`, the same numbers, without building and partitioning each resample: a
    resample's order statistics are read from how many times it drew each of x's sorted values
    (one bincount and one cumulative sum for all rows), then interpolated as `np.quantile`'s
    linear method does. Why: the bootstrap of `shown_skew` was a fifth of `iolab history`'s
    analysis, and simulations run that analysis thousands of times."""
    rows, n = idx.shape
    order = np.argsort(x, kind="stable")
    rank = np.empty(n, dtype=np.intp)
    rank[order] = np.arange(n)
    row = np.arange(rows)[:, None]
    cum = np.bincount((rank[idx] + row * n).ravel(), minlength=rows * n).reshape(rows, n).cumsum(axis=1)
    q = np.array([KELLY, 0.5, 1 - KELLY])
    virtual = (n - 1) * q  # np.quantile's "linear" (Hyndman & Fan 7)
    prev = np.clip(np.floor(virtual), 0, n - 1).astype(np.intp)
    nxt = np.minimum(prev + 1, n - 1)
    gamma = virtual - prev
    # the k-th order statistic (from 0) of a row: the first sorted value whose cumulative count
    # exceeds k; rows offset by n + 1 make one increasing array, so one searchsorted serves all
    off = row * (n + 1)
    ks = np.concatenate([prev, nxt])[None, :] + off
    pos = np.searchsorted((cum + off).ravel(), ks.ravel(), side="right").reshape(rows, -1) - row * n
    stats = x[order][pos]
    a, b = stats[:, :3], stats[:, 3:]
    d = b - a
    lo, med, hi = np.where(gamma >= 0.5, b - d * (1 - gamma), a + d * gamma).T  # numpy's _lerp
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(hi > lo, (hi + lo - 2 * med) / (hi - lo), 0.0)


def _lower(share: float, n: int) -> float:
    """Wilson's lower 90 % bound of a share seen in n values."""
    z = Z90
    return max((share + z * z / (2 * n) - z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)))
               / (1 + z * z / n), 0.0)


def shown_skew(x: np.ndarray) -> float:
    """Kelly's skewness of the innovations when they show it, 0 when not: when its 90 % bootstrap
    interval (seeded) holds 0."""
    rng = np.random.default_rng([len(x), 17])
    boot = _kelly_resampled(x, rng.integers(0, len(x), (BOOTSTRAP, len(x))))
    lo, hi = np.quantile(boot, [0.1, 0.9])
    return float(_kelly(x)) if lo > 0 or hi < 0 else 0.0


def shown_far(share: float, n: int) -> float:
    """A side's share of far-off innovations when it shows tails heavier than normal noise's (its
    Wilson lower 90 % bound above normal's share), 0 when not."""
    return share if _lower(share, n) > summary(math.inf, 1.0)[1] else 0.0


def shape_for(innov: np.ndarray) -> tuple[Shape, float]:
    """(the innovations' shape, the share of them far off): fitted by three robust numbers, each
    taken as measured when the innovations show it at 90 % confidence and as normal noise's when
    they do not (so normal noise stays normal). Searched from the lightest tails up: for each df,
    the least skew (grid SKEWS) whose Kelly skewness reaches the innovations' (`shown_skew`); the
    first (df, γ) whose share beyond FAR robust SDs on **each** side reaches the innovations' on that
    side (`shown_far`) is the shape. A long tail on one side is a long tail on that side only. Each
    grid step is rounded towards the wilder shape: a null a little too wild costs a little power, a
    null too tame calls skewed noise a change."""
    x = np.asarray(innov, dtype=float)
    x = x[np.isfinite(x)]
    med = float(np.median(x)) if len(x) else 0.0
    mad = float(np.median(np.abs(x - med))) if len(x) else 0.0
    if len(x) < 10 or mad <= 0:
        return NORMAL, 0.0
    z = (x - med) / (MAD_SD * mad)
    above, below = float(np.mean(z > FAR)), float(np.mean(z < -FAR))
    need_above, need_below = shown_far(above, len(x)), shown_far(below, len(x))
    k = shown_skew(x)
    sign = 1.0 if k >= 0 else -1.0
    shape = NORMAL
    for df in (math.inf, *TAILS):
        g = next((g for g in (1.0, *SKEWS) if summary(df, g)[0] >= abs(k)), SKEWS[-1])
        _, long_side, short_side = summary(df, g)
        far_above, far_below = (long_side, short_side) if sign > 0 else (short_side, long_side)
        shape = Shape(df, g if sign > 0 else 1 / g)
        if far_above >= need_above and far_below >= need_below:
            break
    return shape, above + below
