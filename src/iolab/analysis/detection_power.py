"""How soon `iolab history` would see a step in *this* series: simulated from its own noise.

A series' power depends on its noise between runs (the SD around its segments, `Series.noise_cv`),
the dependence between consecutive runs (the family's rho), how many runs precede a step and how
many series share the family (Holm: more series, a stricter first step). This simulates flat
histories with that noise (stationary AR(1), with the family's innovations: normal unless its
tails or skew say otherwise, analysis/innovations.py), adds a step of each size after the
series' current length, and judges them with the real analysis/changepoints.py after every
new run, at the level Holm's first step would give in a family that large (alpha / family,
split over its two tests as `analyse` does). Pure and seeded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from iolab.analysis import changepoints as cp
from iolab.analysis.innovations import Shape

STEPS = (0.02, 0.05, 0.10)
AFTER = 10  # runs after the step that are simulated
SIMS = 60


@dataclass(frozen=True)
class Power:
    step: float  # relative size of the step
    suspected: float | None  # median runs after the step until it is suspected (or confirmed); None: > AFTER
    confirmed: float | None
    suspected_within_2: float  # share of simulated histories
    confirmed_within_3: float
    confirmed_within_after: float
    sims: int

    def sentence(self) -> str:
        def runs(v: float | None) -> str:
            return f"more than {AFTER} runs" if v is None else f"{v:.0f} run{'s' if v != 1 else ''}"

        return (f"a {self.step:.0%} step: suspected after {runs(self.suspected)}, confirmed after "
                f"{runs(self.confirmed)} (confirmed within 3 runs in {self.confirmed_within_3:.0%} of "
                f"{self.sims} simulated histories)")


def power(n_before: int, cv: float, rho: float, family: int, steps: Sequence[float] = STEPS, sims: int = SIMS,
          seed: int = 0, tails: float = math.inf, skew: float = 1.0) -> list[Power]:
    """For each step size: runs until suspected / confirmed in a series like this one."""
    out = []
    alpha = cp.ALPHA / max(family, 1)
    for step in steps:
        rng = np.random.default_rng([seed, n_before, int(step * 1000), int(cv * 1e5), int(rho * 100)])
        sus: list[int | None] = []
        conf: list[int | None] = []
        for _ in range(sims):
            x = cv * cp.ar1(rng, 1, n_before + AFTER, rho, Shape(tails, skew))[0]
            x[n_before:] += math.log(1 - step)
            s = c = None
            for r in range(1, AFTER + 1):
                res, _ = cp.analyse({0: np.exp(x[: n_before + r])}, alpha=alpha, rho=rho, tails=tails, skew=skew)
                near = [ch for ch in res[0].changes if abs(ch.index - n_before) <= 1]
                if s is None and near:
                    s = r
                if any(ch.status == "confirmed" for ch in near):
                    c = r
                    break
            sus.append(s)
            conf.append(c)
        out.append(Power(step, _median(sus), _median(conf), _share(sus, 2), _share(conf, 3),
                         _share(conf, AFTER), sims))
    return out


def _median(xs: list[int | None]) -> float | None:
    vals = sorted(AFTER + 1 if v is None else v for v in xs)
    m = vals[len(vals) // 2]
    return None if m > AFTER else float(m)


def _share(xs: list[int | None], within: int) -> float:
    return sum(v is not None and v <= within for v in xs) / len(xs)
