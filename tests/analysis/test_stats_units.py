"""Pure unit tests: analysis/stats.py against hand-computed values, and core/units.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iolab.analysis.stats import Estimate, harmonic_mean_ci, knee, mean_ci, ratio_ci, welch_p
from iolab.core.units import format_size, parse_duration, parse_size

# Student-t 97.5 % quantiles (tables): df=1, 2, 3, 4
T975 = {1: 12.706205, 2: 4.302653, 3: 3.182446, 4: 2.776445}


# -- mean_ci ---------------------------------------------------------------------------
def test_mean_ci_five_values_by_hand() -> None:
    # mean 3, sd sqrt(2.5), half-width t(.975, 4) * sd / sqrt(5)
    e = mean_ci([1, 2, 3, 4, 5])
    h = T975[4] * math.sqrt(2.5) / math.sqrt(5)
    assert e.n == 5 and e.mean == pytest.approx(3.0)
    assert e.sd == pytest.approx(math.sqrt(2.5))
    assert (e.lo, e.hi) == (pytest.approx(3 - h, abs=1e-5), pytest.approx(3 + h, abs=1e-5))
    assert e.half_width == pytest.approx(1.963243, abs=1e-5)
    assert e.rel_half_width == pytest.approx(1.963243 / 3, abs=1e-5)


def test_mean_ci_two_values_by_hand() -> None:
    # [10, 12]: mean 11, sd sqrt(2), half-width t(.975, 1) * sqrt(2) / sqrt(2) = 12.706
    e = mean_ci([10.0, 12.0])
    assert e.mean == pytest.approx(11.0)
    assert e.lo == pytest.approx(11 - T975[1], abs=1e-5) and e.hi == pytest.approx(11 + T975[1], abs=1e-5)


def test_mean_ci_three_values_by_hand() -> None:
    # [100, 110, 120]: sd 10, half-width 4.302653 * 10 / sqrt(3) = 24.84138
    e = mean_ci([100, 110, 120])
    assert e.half_width == pytest.approx(24.84138, abs=1e-4)
    assert e.as_dict("MiB/s") == {"mean": 110.0, "ci95": [pytest.approx(85.15862, abs=1e-4),
                                                          pytest.approx(134.84138, abs=1e-4)],
                                  "n": 3, "method": "t", "unit": "MiB/s", "estimand": "mean", "domain": "real"}


def test_mean_ci_identical_values_has_zero_width() -> None:
    e = mean_ci([7.0, 7.0, 7.0])
    assert (e.mean, e.lo, e.hi) == (7.0, 7.0, 7.0)
    assert e.rel_half_width == 0.0


def test_mean_ci_never_claims_from_one_value_and_skips_non_finite() -> None:
    one = mean_ci([5.0])
    assert one.mean == 5.0 and one.lo == -math.inf and one.hi == math.inf and one.n == 1
    assert one.as_dict() == {"mean": 5.0, "ci95": [None, None], "n": 1, "method": "t", "estimand": "mean",
                             "domain": "real"}  # JSON has no infinities
    assert not math.isfinite(one.rel_half_width)
    empty = mean_ci([])
    assert empty.n == 0 and math.isnan(empty.mean)
    assert empty.as_dict()["mean"] is None
    mixed = mean_ci([1.0, math.nan, 3.0, math.inf, None])  # type: ignore[list-item]
    assert mixed.n == 2 and mixed.mean == 2.0
    assert mixed.dropped == 3 and mixed.as_dict()["dropped"] == 3  # left out, but counted: never silent


def test_mean_ci_other_confidence() -> None:
    # 90 %: t(.95, 4) = 2.131847
    e = mean_ci([1, 2, 3, 4, 5], conf=0.90)
    assert e.half_width == pytest.approx(2.131847 * math.sqrt(2.5) / math.sqrt(5), abs=1e-5)


def test_mean_ci_coverage_is_about_95_percent() -> None:
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(2000):
        e = mean_ci(rng.normal(50, 5, 5))
        covered += e.lo <= 50 <= e.hi
    assert 0.93 <= covered / 2000 <= 0.97


# -- ratio_ci --------------------------------------------------------------------------
def test_ratio_ci_contains_the_true_ratio() -> None:
    rng = np.random.default_rng(7)
    num, den = rng.normal(200, 6, 20), rng.normal(100, 3, 20)
    r = ratio_ci(num, den)
    assert r.mean == pytest.approx(num.mean() / den.mean())
    assert r.lo < 2.0 < r.hi
    assert r.hi - r.lo < 0.1  # and it is informative


def test_ratio_ci_by_hand() -> None:
    # num [9, 10, 11] (mean 10, var 1), den [4, 5, 6] (mean 5, var 1): r = 2
    # relative se = sqrt((1/3)/100 + (1/3)/25) = 0.129099; Welch df = 4; the interval is on the
    # log scale: 2 * exp(±t * rel_se), never negative, wider above than below
    r = ratio_ci([9, 10, 11], [4, 5, 6])
    rel = math.sqrt((1 / 3) / 100 + (1 / 3) / 25)
    assert r.mean == pytest.approx(2.0)
    assert r.sd == pytest.approx(2 * rel)
    assert r.lo == pytest.approx(2 * math.exp(-T975[4] * rel), abs=1e-5)
    assert r.hi == pytest.approx(2 * math.exp(T975[4] * rel), abs=1e-5)
    assert r.hi - 2 > 2 - r.lo > 0
    assert r.method == "log-delta-welch"


def test_ratio_ci_is_never_negative_even_when_noisy() -> None:
    r = ratio_ci([1, 30, 60], [10, 11, 9])
    assert 0 < r.lo < r.mean < r.hi


def test_ratio_ci_coverage_is_about_95_percent() -> None:
    rng = np.random.default_rng(11)
    covered = 0
    for _ in range(1000):
        r = ratio_ci(rng.normal(150, 7.5, 8), rng.normal(100, 5, 8))
        covered += r.lo <= 1.5 <= r.hi
    assert 0.92 <= covered / 1000 <= 0.98


def test_ratio_ci_degenerate_inputs() -> None:
    assert math.isnan(ratio_ci([1, 2], [0, 0]).mean)
    assert ratio_ci([], [1, 2]).n == 0
    one = ratio_ci([4.0], [2.0, 2.0])
    assert one.mean == 2.0 and not math.isfinite(one.lo)


# -- harmonic mean -----------------------------------------------------------------------
def test_harmonic_mean_ci_by_hand() -> None:
    # [1, 2, 4]: HM = 3 / (1 + 1/2 + 1/4) = 12/7; inverse mean 7/12, inverse sd 0.381881
    e = harmonic_mean_ci([1, 2, 4])
    assert e.mean == pytest.approx(12 / 7)
    h = T975[2] * 0.3818813 / math.sqrt(3)
    assert e.lo == pytest.approx(1 / (7 / 12 + h), abs=1e-5)
    assert e.hi == math.inf  # the inverse interval reaches below 0: no upper bound
    # a tight set: bounds are the inverted bounds of the mean of 1/x, swapped
    vals = [100.0, 110.0, 105.0, 95.0]
    inv = mean_ci([1 / v for v in vals])
    e = harmonic_mean_ci(vals)
    assert e.mean == pytest.approx(4 / sum(1 / v for v in vals))
    assert (e.lo, e.hi) == (pytest.approx(1 / inv.hi), pytest.approx(1 / inv.lo))
    assert e.lo < e.mean < e.hi


def test_harmonic_mean_of_a_set_with_a_stall_is_zero_and_says_so() -> None:
    """A rate of 0 (the fixed work never finished) enters the statistic: 1/0 makes the mean of
    1/x infinite, so the harmonic mean is 0, its interval [0, unbounded), and it is counted."""
    e = harmonic_mean_ci([0, 2, 2])
    assert e.mean == 0.0 and e.lo == 0.0 and e.hi == math.inf and e.n == 3 and e.zeros == 1
    assert e.as_dict()["zeros"] == 1 and e.as_dict()["ci95"] == [0.0, None]
    assert harmonic_mean_ci([2.0, 2.0, 2.0]).zeros == 0
    assert harmonic_mean_ci([]).n == 0


# -- knee, verdict, welch ----------------------------------------------------------------
def test_knee() -> None:
    xs = [512, 1024, 2048, 4096, 8192]
    assert knee(xs, [10, 50, 95, 100, 99]) == 2048
    assert knee(list(reversed(xs)), [99, 100, 95, 50, 10]) == 2048  # order of input does not matter
    assert knee(xs, [10, 50, 89, 100, 99]) == 4096
    assert knee(xs, [10, 50, 80, 100, 99], frac=0.8) == 2048
    assert knee(xs, [100, 100, 100, 100, 100]) == 512
    assert knee(xs, [math.nan, 50, None, 100, 99]) == 4096  # type: ignore[list-item]
    assert knee([], []) is None


def test_welch_p() -> None:
    assert welch_p([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert welch_p([1, 2, 3], [11, 12, 13]) < 0.01
    assert math.isnan(welch_p([1], [1, 2]))


def test_estimate_rel_half_width_of_zero_mean() -> None:
    assert Estimate(0.0, -1.0, 1.0, 3, 1.0).rel_half_width == math.inf


# -- units -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("4k", 4096), ("4K", 4096), ("16M", 16 << 20), ("1g", 1 << 30), ("1GiB", 1 << 30), ("2t", 2 << 40),
    ("512", 512), (" 8 k ", 8192), ("4kb", 4096), ("1MB", 1 << 20), (4096, 4096), ("1p", 1 << 50),
])
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["abc", "1.5M", "4x", "", "-4k", "k", True, False, -1, "4 MiBs", 0, "0", "0k",
                                 "1e400", 1e400, float("nan"), 4096.0, None, [4096], {"a": 1}, "2048p", 1 << 61,
                                 "9" * 5000, "4k\n", "4\x00k"])
def test_parse_size_rejects(bad: object) -> None:
    """Zero, infinite, NaN, huge, boolean and non-numeric sizes are spec errors, never a size."""
    with pytest.raises(ValueError):
        parse_size(bad)  # type: ignore[arg-type]


def test_parse_size_zero_only_when_allowed() -> None:
    assert parse_size(0, allow_zero=True) == 0 and parse_size("0k", allow_zero=True) == 0
    with pytest.raises(ValueError):
        parse_size(-1, allow_zero=True)


@pytest.mark.parametrize("n,text", [(4096, "4k"), (1 << 20, "1m"), (3 << 30, "3g"), (1 << 40, "1t"),
                                    (1000, "1000"), (1536, "1536"), (0, "0"), (6 << 10, "6k")])
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text
    assert parse_size(text, allow_zero=True) == n  # round trip


@pytest.mark.parametrize("text,expected", [
    ("30s", 30.0), ("2m", 120.0), ("500ms", 0.5), ("1h", 3600.0), ("1.5s", 1.5), ("10", 10.0),
    (5, 5.0), (2.5, 2.5), (0, 0.0),
])
def test_parse_duration(text: object, expected: float) -> None:
    assert parse_duration(text) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["abc", "5d", "-1s", "", True, -1, "1 2s", float("inf"), float("-inf"),
                                 float("nan"), "inf", "nan", "1e400", 1e400, 10**9, "99999999h", None, ["1s"]])
def test_parse_duration_rejects(bad: object) -> None:
    """Infinite, NaN, negative and absurdly long durations are spec errors (runtime = inf)."""
    with pytest.raises(ValueError):
        parse_duration(bad)  # type: ignore[arg-type]
