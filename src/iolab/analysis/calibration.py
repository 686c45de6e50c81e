"""Calibrating the simultaneous interval of analysis/sequential.py: one per-look tail
probability α' per look design (first, last).

α' is the 5 % quantile of min over the looks of the t-test p-value, for SIMULATIONS
sequences of standardised noise of each shape in SHAPES, drawn with a fixed seed per
(design, shape); the smallest of the shapes' α' is used. The quantile is taken at 5 % minus
two Monte-Carlo standard errors, so simulation noise makes intervals wider, never narrower.

A design costs about a second per shape to simulate, so the designs a study can reasonably
have (first 1..10, last up to 30) are shipped precomputed in look_alpha.json; any other
design is simulated on first use and kept for the process. `python -m
iolab.analysis.calibration` rewrites the table; tests/analysis checks entries against a
fresh simulation (the seeds make it exact).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import special

ALPHA = 0.05
SIMULATIONS = 200_000
SEED = 20251123
SHAPES = ("normal", "lognormal", "t3")
LOGNORMAL_SIGMA = 0.5
TABLE = Path(__file__).with_name("look_alpha.json")
TABLE_FIRST = range(2, 11)  # look designs shipped: first 2..10 (a first look below 2 is at 2), last first..30
TABLE_LAST_MAX = 30
_CHUNK_VALUES = 1 << 20  # draws per simulation chunk (memory bound)
_MAX_DRAWS_PER_SHAPE = 20_000_000  # long designs (100s of looks) simulate fewer sequences


@lru_cache(maxsize=512)
def per_look_alpha(first: int, last: int) -> float:
    """α': the two-sided tail probability spent at every look, the smallest over SHAPES."""
    shipped = _table().get(f"{first}..{last}")
    return shipped if shipped is not None else simulate_alpha(first, last)


def simulate_alpha(first: int, last: int) -> float:
    return min(_calibrate(shape, first, last) for shape in SHAPES)


@lru_cache(maxsize=1)
def _table() -> dict[str, float]:
    """The shipped calibrations; a table that does not match these constants is not used."""
    try:
        data = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return {}
    same = (data.get("alpha"), data.get("simulations"), data.get("seed"), data.get("shapes"),
            data.get("lognormal_sigma")) == (ALPHA, SIMULATIONS, SEED, list(SHAPES), LOGNORMAL_SIGMA)
    return {str(k): float(v) for k, v in data.get("per_look_alpha", {}).items()} if same else {}


def _calibrate(shape: str, first: int, last: int) -> float:
    """The 5 % quantile of min over looks of the t-test p-value, for sequences of `shape`.

    Taken at 5 % minus two Monte-Carlo standard errors, so simulation noise makes the
    interval wider, never narrower."""
    n_sim = int(min(SIMULATIONS, max(20_000, _MAX_DRAWS_PER_SHAPE // last)))
    rng = np.random.default_rng([SEED, first, last, SHAPES.index(shape)])
    ks = np.arange(first, last + 1)
    counts = np.arange(1, last + 1)
    min_p = np.empty(n_sim)
    chunk = max(1, _CHUNK_VALUES // last)
    for start in range(0, n_sim, chunk):
        size = min(chunk, n_sim - start)
        x = draw_noise(shape, rng, (size, last))
        means = np.cumsum(x, axis=1) / counts
        ss = np.cumsum(x * x, axis=1) - counts * means * means
        m, s2 = means[:, ks - 1], np.maximum(ss[:, ks - 1], 0.0) / (ks - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(m) / np.sqrt(s2 / ks)
        p = 2.0 * special.stdtr(ks - 1, -t)
        min_p[start:start + size] = np.nanmin(np.where(np.isnan(p), 1.0, p), axis=1)
    level = ALPHA - 2.0 * math.sqrt(ALPHA * (1 - ALPHA) / n_sim)
    return float(np.quantile(min_p, level))


def draw_noise(shape: str, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Noise of one shape with mean 0 and standard deviation 1 (the scale does not matter to t)."""
    if shape == "normal":
        return rng.standard_normal(size)
    if shape == "lognormal":
        s2 = LOGNORMAL_SIGMA**2
        z = np.exp(LOGNORMAL_SIGMA * rng.standard_normal(size))
        return (z - math.exp(s2 / 2)) / math.sqrt((math.exp(s2) - 1) * math.exp(s2))
    if shape == "t3":
        return rng.standard_t(3, size) / math.sqrt(3.0)
    raise ValueError(f"unknown noise shape {shape!r}")




def write_table() -> None:
    """Simulate every shipped design and write look_alpha.json (a few minutes)."""
    designs = [(f, last) for f in TABLE_FIRST for last in range(f, TABLE_LAST_MAX + 1)]
    table = {f"{f}..{last}": simulate_alpha(f, last) for f, last in designs}
    TABLE.write_text(json.dumps({"alpha": ALPHA, "simulations": SIMULATIONS, "seed": SEED, "shapes": list(SHAPES),
                                 "lognormal_sigma": LOGNORMAL_SIGMA, "per_look_alpha": table}, indent=1) + "\n")


if __name__ == "__main__":
    write_table()
