"""The innovations `iolab history` simulates its nulls with: heavy tails and skew, fitted from a
family's own innovations (analysis/innovations.py).

Before, the nulls were symmetric (normal or Student t with the heavier side's tails on both sides):
a flat family with right-skewed noise between runs (lognormal σ = 0.5 on the log scale) alarmed in
10.2 % of 500 simulated histories of 20 runs against the 5 % promised (docs/store.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iolab.analysis.innovations import FAR, MAD_SD, NORMAL, Shape, _kelly, _kelly_resampled, shape_for, summary


@pytest.mark.parametrize("shape", [Shape(5.0, 2.0), Shape(math.inf, 0.8), Shape(12.0, 1.35), Shape(6.0, 0.6)],
                         ids=str)
def test_a_shape_draws_what_its_summary_says_with_unit_variance(shape: Shape) -> None:
    """The sampler and the closed-form summary the fit compares with are the same distribution:
    mean 0, variance 1, Kelly skewness and each side's far-off share as computed (mirrored for
    γ < 1). A sampler that forgot to standardise, or mirrored the wrong side, fails here."""
    x = shape.draw(np.random.default_rng(11), (400_000,))
    assert abs(x.mean()) < 0.01 and abs(x.var() - 1) < 0.03, (x.mean(), x.var())
    kelly, long_side, short_side = summary(shape.df, max(shape.skew, 1 / shape.skew))
    med = np.median(x)
    mad = MAD_SD * np.median(np.abs(x - med))
    above, below = np.mean(x > med + FAR * mad), np.mean(x < med - FAR * mad)
    if shape.skew < 1:
        kelly, long_side, short_side = -kelly, short_side, long_side
    assert abs(float(_kelly(x)) - kelly) < 0.01, (float(_kelly(x)), kelly)
    assert abs(above - long_side) < 0.0015 and abs(below - short_side) < 0.0015, (above, below, long_side, short_side)


def test_symmetric_shapes_draw_exactly_as_before_so_their_nulls_are_unchanged() -> None:
    """Normal and Student t innovations keep their draws and their nulls' seeds: every table of
    symmetric noise stays what it was."""
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(NORMAL.draw(a, (5, 7)), b.standard_normal((5, 7)))
    assert np.array_equal(Shape(5.0).draw(a, (5, 7)), b.standard_t(5.0, (5, 7)) / math.sqrt(5 / 3))
    assert NORMAL.seed() == [0] and Shape(5.0).seed() == [5] and Shape(5.0, 2.0).seed() == [5, 2000]


@pytest.mark.parametrize("n", [10, 11, 57, 480, 1001])
def test_the_bootstrap_reads_each_resample_s_skewness_exactly_as_building_it_would(n: int) -> None:
    """The fast bootstrap (counts of each sorted value, no resample built) gives bit for bit the
    numbers `np.quantile` gives on the resamples themselves: with ties, with a constant stretch,
    with one huge outlier, at lengths where the quantiles fall between values and on them. A
    slip of one order statistic, or numpy's interpolation done another way, fails here."""
    rng = np.random.default_rng(n)
    for x in (rng.standard_normal(n), np.round(rng.lognormal(0, 1, n), 1), np.r_[np.ones(n - 3), 1e9, -2.0, 5.0],
              np.full(n, 3.0)):
        idx = rng.integers(0, n, (300, n))
        assert np.array_equal(_kelly_resampled(x, idx), _kelly(x[idx]))


def _fits(draw: object, count: int = 40, n: int = 480) -> list[Shape]:
    rng = np.random.default_rng(5)
    return [shape_for(draw(rng, n))[0] for _ in range(count)]  # type: ignore[operator]


def test_normal_innovations_stay_symmetric_and_skewed_ones_are_seen_on_their_side() -> None:
    """480 innovations (a family of 30 series of 20 runs): normal noise is fitted symmetric in most
    families and never far from it; lognormal σ = 0.5 (skewness 1.75) is fitted with the long tail
    above in every family, its mirror image with the long tail below; symmetric t3 tails are
    heavy and symmetric."""
    normal = _fits(lambda r, n: r.standard_normal(n))
    assert sum(s.skew == 1.0 for s in normal) >= 28, normal
    assert all(1 / 1.5 <= s.skew <= 1.5 for s in normal), normal
    assert sum(s == NORMAL for s in normal) >= 15, normal
    right = _fits(lambda r, n: r.lognormal(0, 0.5, n))
    assert all(s.skew >= 1.35 for s in right), right
    left = _fits(lambda r, n: -r.lognormal(0, 0.5, n))
    assert all(s.skew <= 1 / 1.35 for s in left), left
    t3 = _fits(lambda r, n: r.standard_t(3, n))
    assert all(s.df <= 5 for s in t3) and sum(s.skew == 1.0 for s in t3) >= 28, t3


def test_too_few_or_constant_innovations_are_normal() -> None:
    assert shape_for(np.ones(50)) == (NORMAL, 0.0)
    assert shape_for(np.arange(5.0))[0] == NORMAL
    assert shape_for(np.array([math.nan] * 30))[0] == NORMAL


def test_the_method_line_says_the_skew_it_assumed() -> None:
    assert Shape(5.0, 2.0).describe() == ("Student t (5 d.o.f.: runs that land far off), skewed with the longer "
                                          "tail above (γ 2: Fernández–Steel)")
    assert "longer tail below" in Shape(math.inf, 0.5).describe()
    assert NORMAL.describe() == "normal"


def test_a_history_of_skewed_runs_is_judged_against_skewed_nulls_and_says_so() -> None:
    """Through the real analysis.history.build on stored-shape runs: 30 configurations, 20 runs
    each, whose run-to-run noise has a long tail above (lognormal σ = 0.5 on the log scale, as a
    latency that is now and then much slower). The history's model, its JSON and its method line
    carry the skew the nulls were simulated with."""
    import json

    from iolab.analysis.history import RunData, build
    from iolab.core.model import TrialResult
    from iolab.publish.history import history_json, method_text

    rng = np.random.default_rng(9)
    c = math.sqrt((math.exp(0.25) - 1) * math.exp(0.25))
    noise = 0.01 * (rng.lognormal(0, 0.5, (20, 30)) - math.exp(0.125)) / c
    runs = [RunData(f"run{i:02d}", 1000.0 + i, {"kernel": "6.1.0"},
                    [TrialResult(f"c{k}-r0", f"c{k}", 0, {}, "ok", None,
                                 {"lat_us": 100.0 * (k + 1) * math.exp(noise[i, k])}, {}, {}) for k in range(30)])
             for i in range(20)]
    h = build(runs)
    assert h.family == 30 and h.skew > 1.3, (h.skew, h.tails)
    assert json.loads(history_json(h))["skew"] == h.skew
    assert "skewed with the longer tail above" in method_text(h)
