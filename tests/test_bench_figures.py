"""bench/figures.py: every benchmark figure carries its CI and n, and is repeated until the CI is
as narrow as asked, or says it could not."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
_spec = importlib.util.spec_from_file_location("bench_figures", BENCH / "figures.py")
assert _spec and _spec.loader
figures = importlib.util.module_from_spec(_spec)
sys.modules["bench_figures"] = figures
_spec.loader.exec_module(figures)


def test_ratio_is_a_geometric_mean_with_a_back_transformed_interval() -> None:
    f = figures.ratio_figure("overhead ratio", [0.5, 2.0, 1.0, 1.0, 1.0])
    assert f.value == pytest.approx(1.0) and f.n == 5
    assert f.lo < 1.0 < f.hi and f.lo * f.hi == pytest.approx(1.0)  # symmetric on the log scale
    assert f.line("I/O path").startswith("overhead ratio=1.000 [") and f.line("I/O path").endswith("n=5 (I/O path)")


def test_reached_and_the_verdict_say_the_width() -> None:
    tight = figures.ratio_figure("r", [0.99, 1.0, 1.01, 1.0, 0.995], target=0.02)
    assert tight.reached and tight.verdict().startswith("95% CI within ±2%")
    wide = figures.ratio_figure("r", [0.5, 1.5, 0.8, 1.2, 1.0], target=0.02)
    assert not wide.reached
    v = wide.verdict("machine busy")
    assert v.startswith("could not reach ±2%: the 95% CI is ±") and "after n=5 (machine busy)" in v
    m = figures.mean_figure("vm-boot seconds", [4.0, 4.2, 4.1], "s")
    assert m.line() == f"vm-boot seconds=4.100 [{m.lo:.3f}, {m.hi:.3f}] s n=3"


def test_until_narrow_stops_when_narrow_and_not_before_the_minimum() -> None:
    vals: list[float] = []
    rng = random.Random(1)
    f = figures.until_narrow(lambda i: vals.append(1.0 + rng.gauss(0, 0.001)),
                             lambda: figures.ratio_figure("r", vals, 0.02), max_n=40, budget_s=60)
    assert f.n == figures.MIN_N == len(vals) and f.reached
    noisy: list[float] = []
    f = figures.until_narrow(lambda i: noisy.append(math.exp(rng.gauss(0, 0.3))),
                             lambda: figures.ratio_figure("r", noisy, 0.02), max_n=12, budget_s=60)
    assert f.n == 12 and not f.reached  # gave up at the maximum, and says so
    slow: list[float] = []
    f = figures.until_narrow(lambda i: slow.append(math.exp(rng.gauss(0, 0.3))),
                             lambda: figures.ratio_figure("r", slow, 0.02), max_n=40, budget_s=0)
    assert f.n == figures.MIN_N  # the time budget ends it after the minimum


def test_busy_measures_the_machine() -> None:
    b = figures.Busy()
    b.start()
    x = 0
    for i in range(2_000_000):
        x += i
    share = b.stop()
    assert 0.0 < share <= 1.0 and b.mean() == share
    assert 0.0 <= b.steal_mean() <= share  # stolen time is counted as busy (/proc/stat)


def _stopped_figures(looks: tuple[int, int] | None, sims: int, seed: int) -> float:
    """A/A: per-pair log ratios ~ N(0, 0.05); until_narrow stops at ±3 % or 15 pairs. How often
    does the final interval miss the true ratio 1?"""
    rng = random.Random(seed)
    misses = 0
    for _ in range(sims):
        vals: list[float] = []
        f = figures.until_narrow(lambda i, vals=vals: vals.append(math.exp(rng.gauss(0, 0.05))),
                                 lambda vals=vals: figures.ratio_figure("r", vals, 0.03, looks), max_n=15, budget_s=60)
        misses += not (f.lo <= 1.0 <= f.hi)
    return misses / sims


def test_a_figure_that_stopped_when_narrow_keeps_its_95_percent() -> None:
    """until_narrow looks after every pair: the plain t-interval then misses more than 5 %; the
    interval calibrated over the looks (iolab's own, analysis/calibration.py) does not."""
    sims = 3000
    calibrated = _stopped_figures(figures.stopping(15), sims, 7)
    plain = _stopped_figures(None, sims, 7)
    print(f"A/A misses: calibrated over looks 5..15 {calibrated:.3f}, plain 95% t {plain:.3f}")
    assert calibrated <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / sims), calibrated
    assert plain > calibrated
    f = figures.ratio_figure("r", [1.0, 1.01, 0.99, 1.02, 0.98], 0.02, figures.stopping(15))
    assert f.looks == (5, 15) and "simultaneous over looks 5..15" in f.verdict()
    assert f.hi - f.lo > figures.ratio_figure("r", [1.0, 1.01, 0.99, 1.02, 0.98]).hi - \
        figures.ratio_figure("r", [1.0, 1.01, 0.99, 1.02, 0.98]).lo  # wider than a fixed-n interval
