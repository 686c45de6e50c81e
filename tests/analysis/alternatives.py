"""The interval methods considered for adaptive stopping, side by side (docs/statistics.md).

Half-width multipliers (half-width = multiplier × s / √n, or × σ / √n for the confidence
sequence, which needs σ known) at the looks 3..10, and the mean repetitions / coverage of
each when the runner stops on it (same simulation as tests/analysis/coverage.py, normal and
lognormal noise, CV = ci_target / 2). Not a test: `python -m tests.analysis.alternatives`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from iolab.analysis import calibration
from tests.analysis import coverage

FIRST, LAST = 3, 10
LOOKS = range(FIRST, LAST + 1)


def mixture_cs(n: int, rho: float, alpha: float = 0.05) -> float:
    """Robbins' normal-mixture confidence sequence (σ known), as a multiplier of σ/√n:
    |S_n| <= σ √((n+ρ)(2 ln(1/α) + ln((n+ρ)/ρ))) holds for all n at once (Ville)."""
    return math.sqrt((n + rho) * (2 * math.log(1 / alpha) + math.log((n + rho) / rho))) / math.sqrt(n)


def multipliers() -> dict[str, list[float]]:
    pocock_normal = calibration._calibrate("normal", FIRST, LAST)
    robust = calibration.per_look_alpha(FIRST, LAST)
    rho = min(np.linspace(0.05, 20, 400), key=lambda r: mixture_cs(5, r))
    return {
        "plain t (stop on own interval)": [stats.t.ppf(0.975, n - 1) for n in LOOKS],
        "Bonferroni over 8 looks": [stats.t.ppf(1 - 0.05 / 16, n - 1) for n in LOOKS],
        "Pocock, normal only": [special.stdtrit(n - 1, 1 - pocock_normal / 2) for n in LOOKS],
        "Pocock, normal + lognormal + t3 (iolab)": [special.stdtrit(n - 1, 1 - robust / 2) for n in LOOKS],
        f"mixture CS, σ known (ρ = {rho:.2f})": [mixture_cs(n, rho) for n in LOOKS],
    }


def with_alpha(alpha: float, model: str, cv_ratio: float) -> coverage.Cell:
    original = calibration.per_look_alpha
    calibration.per_look_alpha = lambda first, last: alpha  # type: ignore[assignment]
    try:
        return coverage.simulate(model, (FIRST, LAST), cv_ratio)
    finally:
        calibration.per_look_alpha = original  # type: ignore[assignment]


if __name__ == "__main__":
    m = multipliers()
    print("| method | " + " | ".join(f"n={n}" for n in LOOKS) + " |")
    print("|---|" + "---|" * len(LOOKS))
    for name, qs in m.items():
        print(f"| {name} | " + " | ".join(f"{q:.2f}" for q in qs) + " |")
    print()
    alphas = {"plain t (stop on own interval)": 0.05, "Bonferroni over 8 looks": 0.05 / 8,
              "Pocock, normal only": calibration._calibrate("normal", FIRST, LAST),
              "Pocock, normal + lognormal + t3 (iolab)": calibration.per_look_alpha(FIRST, LAST)}
    print("| method | noise | CV | coverage | mean repetitions |")
    print("|---|---|---|---|---|")
    for name, a in alphas.items():
        for model in ("normal", "lognormal"):
            for r in (0.5, 3**0.5):
                c = with_alpha(a, model, r)
                print(f"| {name} | {model} | {r * coverage.CI_TARGET:.1%} | {c.coverage:.2%} | {c.mean_reps:.2f} |")
