"""CI bands in line charts: an interval with one end only is drawn to the plot's edge, never left out.

A harmonic mean's interval has no upper end when the mean time per unit may be near 0 (the
write-modes demo: o_direct at 4k, 21.4 MiB/s [10.4, ∞)). Leaving its band out drew that point
as the most certain of its line; the band must reach the top of the axes there, and the axes
must still be scaled by the finite values (an open end cannot stretch them)."""

from __future__ import annotations

import math

import matplotlib
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure

from iolab.report import charts
from iolab.report.model import Chart, Series

X = [512, 1024, 4096, 8192]


def _band_extent(series: list[Series], y_log: bool) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """(per band: lowest and highest y it covers at x = 4096, the y limits of the axes)."""
    with matplotlib.rc_context(charts._RC):
        ax = Figure().add_subplot()
        charts._draw_line(ax, Chart("t", "line", "bs", "MiB/s", series, y_log=y_log, x_log2=True))
        out = []
        for coll in ax.collections:
            assert isinstance(coll, PolyCollection)
            ys = [y for path in coll.get_paths() for x, y in path.vertices if math.isclose(x, 4096)]
            out.append((min(ys), max(ys)))
        return out, ax.get_ylim()


def test_an_open_upper_end_reaches_the_top_and_does_not_stretch_the_axes() -> None:
    open_hi = Series("o_direct", X, [5.0, 11.0, 21.4, 82.0], lo=[3.8, 8.7, 10.4, 60.0], hi=[8.2, 16.5, None, 127.0])
    closed = Series("buffered", X, [195.0, 228.0, 299.0, 367.0], lo=[171.0, 176.0, 221.0, 280.0],
                    hi=[226.0, 322.0, 460.0, 534.0])
    for y_log in (True, False):
        (band_open, band_closed), (bottom, top) = _band_extent([open_hi, closed], y_log)
        assert band_open == (10.4, top), (y_log, band_open, top)  # from its lower end to the edge
        assert band_closed == (221.0, 460.0)
        assert top < 2 * 534.0, f"the open end stretched the axes to {top}"


def test_an_open_lower_end_reaches_the_bottom() -> None:
    s = Series("ratio", X, [0.9, 0.8, 0.7, 0.6], lo=[0.8, 0.7, None, 0.5], hi=[1.0, 0.9, 0.75, 0.7])
    (band,), (bottom, _) = _band_extent([s], y_log=False)
    assert band == (bottom, 0.75)


def test_a_point_without_any_bound_has_no_band_there() -> None:
    """n = 1: no interval, so nothing is drawn at that x (and nothing pretends to be one)."""
    s = Series("one", X, [1.0, 2.0, 3.0, 4.0], lo=[0.9, 1.8, None, 3.6], hi=[1.1, 2.2, None, 4.4])
    with matplotlib.rc_context(charts._RC):
        ax = Figure().add_subplot()
        charts._draw_line(ax, Chart("t", "line", "bs", "v", [s], x_log2=True))
        (coll,) = ax.collections
        xs = {round(x) for path in coll.get_paths() for x, _ in path.vertices}
    assert 4096 not in xs and {512, 1024, 8192} <= xs


def test_a_bar_whose_interval_has_no_upper_end_gets_a_whisker_to_the_top() -> None:
    s = Series("MiB/s", ["raw", "qcow2"], [100.0, 50.0], lo=[90.0, 20.0], hi=[110.0, None])
    with matplotlib.rc_context(charts._RC):
        ax = Figure().add_subplot()
        charts._draw_bar(ax, Chart("t", "bar", "config", "MiB/s", [s]))
        _, top = ax.get_ylim()
        whiskers = [seg for coll in ax.collections if isinstance(coll, LineCollection) and coll.get_segments()
                    for seg in coll.get_segments() if math.isclose(seg[1][1], top)]
    assert len(whiskers) == 1 and math.isclose(whiskers[0][0][1], 50.0), whiskers  # from the mean up
    assert top < 2 * 110.0
