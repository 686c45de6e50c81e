"""The change-point method of `iolab history` (analysis/changepoints.py) on synthetic series
whose truth is known: pure noise (normal and heavy-tailed) shows no step in >= 95 % of series
(the method promises <= 1 % false alarms; 95 % leaves room for sampling); a single step, two
steps, and a step with a step back (a regression later fixed) are found where they are.
"""

from __future__ import annotations

import numpy as np
import pytest

from iolab.analysis.changepoints import ALPHA, MIN_SEGMENT, change_points

SERIES = 200


@pytest.mark.parametrize("noise", ["normal", "student-t 2 dof"])
def test_pure_noise_shows_no_step_in_at_least_95_percent_of_series(noise: str) -> None:
    rng = np.random.default_rng(1414)
    draw = (lambda: rng.normal(100.0, 3.0, size=24)) if noise == "normal" else (lambda: 100 + rng.standard_t(2, 24))
    false = sum(bool(change_points(draw(), seed=i)) for i in range(SERIES))
    assert false <= 0.05 * SERIES, f"{false}/{SERIES} noise series with a step"
    assert ALPHA == 0.01


def _near(found: list[int], where: int) -> bool:
    return any(abs(f - where) <= 1 for f in found)


def test_a_single_step_is_found_where_it_is() -> None:
    rng = np.random.default_rng(7)
    hits = 0
    for i in range(50):
        x = rng.normal(1000.0, 10.0, size=24)
        x[12:] -= 30.0  # a 3 % regression, 3 sigma of the run-to-run noise
        found = [c.index for c in change_points(x, seed=i)]
        hits += _near(found, 12) and len(found) <= 2
    assert hits >= 45, f"found in {hits}/50"


def test_two_steps_and_a_step_back_are_found() -> None:
    rng = np.random.default_rng(8)
    both = back = 0
    for i in range(40):
        x = rng.normal(size=36)
        x[12:] += 4.0
        x[24:] += 4.0
        found = [c.index for c in change_points(x, seed=i)]
        both += _near(found, 12) and _near(found, 24)
        y = rng.normal(size=36)
        y[12:24] -= 4.0  # a regression that a later version fixed
        found = [c.index for c in change_points(y, seed=i)]
        back += _near(found, 12) and _near(found, 24)
    assert both >= 34 and back >= 34, (both, back)


def test_the_step_sizes_and_p_values_are_reported_and_results_are_reproducible() -> None:
    x = [10.0, 10.2, 9.9, 10.1, 9.8, 10.0, 10.1, 12.0, 12.1, 11.9, 12.2, 12.0, 11.8, 12.1]
    a, b = change_points(x, seed=3), change_points(x, seed=3)
    assert a == b and len(a) == 1
    c = a[0]
    assert c.index == 7 and c.p <= ALPHA
    assert c.before == pytest.approx(np.mean(x[:7])) and c.after == pytest.approx(np.mean(x[7:]))


def test_short_constant_and_invalid_series() -> None:
    assert change_points([]) == [] and change_points([1.0] * (2 * MIN_SEGMENT - 1)) == []
    assert change_points([5.0] * 30) == [], "no spread, no step"
    assert change_points([1.0, 1.0, 1.0, 2.0, 2.0, 2.0]) == [], "6 values: 1 in 20 orders, never p <= 1 %"
    with pytest.raises(ValueError, match="finite"):
        change_points([1.0, float("nan"), 2.0, 3.0, 4.0, 5.0])
