"""Charts as inline SVG text, drawn with matplotlib's object API (no pyplot global state).

Why these choices:
* SVG with glyphs as paths: the HTML report must look the same offline on any machine,
  with no web fonts and no files beside it.
* Axes always autoscale: fixed axes are the most common complaint about fio-plot.
* Okabe–Ito colours plus a distinct marker per series: readable with colour-blindness
  and in grayscale print.
* Titles are not drawn in the figure: the HTML puts them in a <figcaption>, where they
  are searchable and styled like the rest of the page.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from typing import Any

from iolab.core import signals
from iolab.report.format import fmt_size
from iolab.report.model import Chart, Series

# matplotlib's import validates its default rc, and its cycler check turns any exception raised
# meanwhile into a ValueError (validate_cycler catches BaseException): a stop signal landing there,
# while a run writes its report, was a traceback instead of exit 130. The signal waits the import.
with signals.held():
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    from matplotlib.transforms import blended_transform_factory

# Okabe & Ito (2008), ordered so the first four are the most distinct.
# Okabe-Ito yellow (#F0E442) is replaced by grey: it vanishes on a white background.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#8C8C8C"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "-", "-", "-", "--", "--", "--", "--"]

FIG_WIDTH_IN = 7.2
FIG_HEIGHT_IN = 3.5

_RC: dict[str, Any] = {
    "svg.fonttype": "path",
    "svg.hashsalt": "iolab",  # deterministic ids: the same data gives the same file
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8.5,
    "ytick.labelsize": 8.5,
    "legend.fontsize": 8.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#57606a",
    "axes.labelcolor": "#1f2328",
    "xtick.color": "#57606a",
    "ytick.color": "#57606a",
    "text.color": "#1f2328",
}


def chart_svg(chart: Chart, uid: str = "c") -> str:
    """The chart as an <svg> element ready to paste into HTML; ids prefixed with `uid`."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(FIG_WIDTH_IN, FIG_HEIGHT_IN))
        ax = fig.add_subplot()
        if not _has_data(chart):
            _draw_empty(ax)
        elif chart.kind == "bar":
            _draw_bar(ax, chart)
        else:
            _draw_line(ax, chart)
        if _has_data(chart):
            _draw_ref_lines(ax, chart.ref_lines)
            _legend(ax, chart)
        ax.set_xlabel(chart.x_label)
        ax.set_ylabel(chart.y_label)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.08, metadata={"Date": None})
    return clean_svg(buf.getvalue(), uid)


# --------------------------------------------------------------------------- line charts


def _draw_line(ax: Any, chart: Chart) -> None:
    """Mean lines with markers, CI as a shaded band; categorical x when x values are strings.

    A point whose interval has one end only (a harmonic mean's has no upper end when the mean
    time per unit may be near 0) gets its band to the edge of the plot on the open side: a
    missing band would look like no uncertainty at all. The axes are scaled on the finite
    bounds first, then frozen, so an open band cannot stretch them."""
    categories = _categories(chart.series) if _x_is_categorical(chart.series) else None
    bands: list[tuple[list[float], list[float], list[float], str]] = []
    for i, s in enumerate(chart.series):
        xs: list[float] = [categories.index(x) for x in s.x] if categories else [_num(x) for x in s.x]
        color = PALETTE[i % len(PALETTE)]
        ys = [_num(y) for y in s.y]
        if s.lo is not None and s.hi is not None:
            los, his = [_num(v) for v in s.lo], [_num(v) for v in s.hi]
            finite = [(x, v) for x, lo, hi in zip(xs, los, his, strict=False) for v in (lo, hi) if math.isfinite(v)]
            ax.plot([x for x, _ in finite], [v for _, v in finite], ls="none", marker="none")  # scales the axes
            bands.append((xs, los, his, color))
        ax.plot(
            xs, ys, color=color, marker=MARKERS[i % len(MARKERS)], ls=LINESTYLES[i % len(LINESTYLES)],
            lw=1.6, ms=4.5, label=s.name,
        )
    if categories:
        _category_axis(ax, categories, chart.x_log2)
    elif chart.x_log2:
        _log2_axis(ax, [x for s in chart.series for x in (_num(v) for v in s.x) if x > 0])
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(_tick))
    _y_axis(ax, chart.y_log)
    if bands:
        bottom, top = ax.get_ylim()
        for xs, los, his, color in bands:
            open_lo = [bottom if math.isnan(lo) and math.isfinite(hi) else lo for lo, hi in zip(los, his, strict=False)]
            open_hi = [top if math.isnan(hi) and math.isfinite(lo) else hi for lo, hi in zip(los, his, strict=False)]
            ax.fill_between(xs, open_lo, open_hi, color=color, alpha=0.18, lw=0)
        ax.set_ylim(bottom, top)
    ax.grid(True, which="major", color="#d0d7de", lw=0.6, alpha=0.8)


def _log2_axis(ax: Any, xs: list[float]) -> None:
    """Base-2 log axis with ticks at powers of two labelled 512, 4k, 1M, thinned to ≤ 12."""
    ax.set_xscale("log", base=2)
    if not xs:
        return
    lo, hi = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
    exps = list(range(lo, hi + 1))
    step = max(1, math.ceil(len(exps) / 12))
    ticks = [2.0**e for e in exps[::step]]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt_size(v)))
    pad = 2 ** (0.25 * max(1, step))
    ax.set_xlim(2.0**lo / pad, 2.0**hi * pad)


# --------------------------------------------------------------------------- bar charts


def _draw_bar(ax: Any, chart: Chart) -> None:
    """Grouped bars, one group per x value, with CI error bars when lo/hi are given."""
    categories = _categories(chart.series)
    n = max(1, len(chart.series))
    width = 0.8 / n
    open_up: list[tuple[float, float]] = []  # (position, mean) of bars whose interval has no upper end
    for i, s in enumerate(chart.series):
        color = PALETTE[i % len(PALETTE)]
        pos, heights, err_lo, err_hi = [], [], [], []
        for j, x in enumerate(s.x):
            y = s.y[j] if j < len(s.y) else None
            if y is None:
                continue
            pos.append(categories.index(x) - 0.4 + width * (i + 0.5))
            heights.append(float(y))
            lo = _at(s.lo, j)
            hi = _at(s.hi, j)
            err_lo.append(max(0.0, float(y) - lo) if lo is not None else 0.0)
            err_hi.append(max(0.0, hi - float(y)) if hi is not None else 0.0)
            if lo is not None and hi is None:
                open_up.append((pos[-1], float(y)))
        has_err = any(err_lo) or any(err_hi)
        ax.bar(
            pos, heights, width * 0.92, color=color, label=s.name, edgecolor="white", lw=0.5,
            yerr=[err_lo, err_hi] if has_err else None,
            error_kw={"ecolor": "#1f2328", "elinewidth": 1, "capsize": 3, "capthick": 1},
            zorder=2,
        )
    _category_axis(ax, categories, chart.x_log2)
    _y_axis(ax, chart.y_log)
    if open_up:  # the whisker of an interval without an upper end runs to the top, open (an arrow)
        bottom, top = ax.get_ylim()
        ax.vlines([p for p, _ in open_up], [y for _, y in open_up], top, color="#1f2328", lw=1, zorder=3)
        ax.plot([p for p, _ in open_up], [top] * len(open_up), ls="none", marker="^", ms=5, color="#1f2328",
                clip_on=False, zorder=3)
        ax.set_ylim(bottom, top)
    ax.grid(True, axis="y", color="#d0d7de", lw=0.6, alpha=0.8, zorder=0)
    ax.set_axisbelow(True)


def _category_axis(ax: Any, categories: list[Any], as_sizes: bool) -> None:
    """Category labels: wrapped onto short lines when long, rotated only if wrapping cannot help.

    Rotated labels make the figure taller, and a taller figure is scaled down in the page,
    shrinking every label in it; wrapping keeps the chart's proportions.
    """
    labels = [fmt_size(float(c)) if as_sizes and _is_num(c) else _label(c) for c in categories]
    ax.set_xticks(range(len(categories)))
    per_label = max(6, 96 // max(1, len(labels)) - 2)
    wrapped = [_wrap(lbl, per_label) for lbl in labels]
    fits = all(len(line) <= per_label for w in wrapped for line in w.split("\n")) and all(
        w.count("\n") < 3 for w in wrapped
    )
    if fits:
        ax.set_xticklabels(wrapped)
    else:
        ax.set_xticklabels(labels, rotation=30, ha="right", rotation_mode="anchor")
    ax.set_xlim(-0.6, len(categories) - 0.4)


# --------------------------------------------------------------------------- shared pieces


def _y_axis(ax: Any, log: bool) -> None:
    """Autoscaled y; log when asked for, with readable (non-scientific) tick labels."""
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_tick))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _p: _minor_log_tick(ax, v)))
    else:
        ax.yaxis.set_major_formatter(FuncFormatter(_tick))
    ax.autoscale(enable=True, axis="y")


def _minor_log_tick(ax: Any, v: float) -> str:
    """Label 2× and 5× ticks only when the axis spans under two decades (few major ticks)."""
    lo, hi = ax.get_ylim()
    if lo <= 0 or math.log10(hi / lo) >= 2:
        return ""
    lead = round(v / 10 ** math.floor(math.log10(v)), 6)
    return _tick(v) if lead in (2.0, 5.0) else ""


def _draw_ref_lines(ax: Any, ref_lines: list[tuple[float, str]]) -> None:
    """Dashed horizontal reference lines, labelled outside the plot on the right.

    A label inside the plot area always ends up on top of some series; outside it never does.
    """
    trans = blended_transform_factory(ax.transAxes, ax.transData)
    for y, label in ref_lines:
        ax.axhline(y, color="#57606a", ls=(0, (5, 3)), lw=1.1, zorder=1.5)
        if label:
            ax.text(1.01, y, _wrap(label, 18), transform=trans, ha="left", va="center", fontsize=8,
                    color="#424a53", clip_on=False)


def _legend(ax: Any, chart: Chart) -> None:
    """Legend above the plot area so it never hides data; a '95% CI' key when bands are drawn."""
    handles, labels = ax.get_legend_handles_labels()
    if chart.kind == "line" and any(s.lo is not None and s.hi is not None for s in chart.series):
        handles.append(Patch(facecolor="#57606a", alpha=0.18, lw=0))
        labels.append("95% interval")
    if chart.kind == "bar" and any(s.lo is not None for s in chart.series):
        handles.append(Line2D([], [], color="#1f2328", marker="_", ms=8, lw=1))
        labels.append("95% interval")
    if len(labels) <= 1 and chart.kind == "bar" and len(chart.series) == 1:
        return
    ax.legend(
        handles, labels, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=min(len(labels), 5),
        frameon=False, handlelength=2.2, columnspacing=1.4, borderaxespad=0.2,
    )


def _draw_empty(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="#57606a")
    ax.set_xticks([])
    ax.set_yticks([])


def _tick(v: float, _pos: int | None = None) -> str:
    """Axis tick text: thousands separators, no scientific notation for ordinary ranges."""
    if v == 0:
        return "0"
    if abs(v) >= 1e9 or abs(v) < 1e-4:
        return f"{v:.3g}"
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.6g}"


def _wrap(text: str, width: int) -> str:
    """Break a label on spaces so no line is longer than about `width` characters."""
    return "\n".join(textwrap.wrap(text, width)) or text


def _has_data(chart: Chart) -> bool:
    return any(y is not None and _finite(y) for s in chart.series for y in s.y)


def _x_is_categorical(series: list[Series]) -> bool:
    return any(not _is_num(x) for s in series for x in s.x)


def _categories(series: list[Series]) -> list[Any]:
    """x values of all series in first-seen order (numbers sorted when all are numbers)."""
    seen: dict[Any, None] = {}
    for s in series:
        for x in s.x:
            seen.setdefault(x, None)
    cats = list(seen)
    if cats and all(_is_num(c) for c in cats):
        cats.sort(key=float)
    return cats


def _at(values: list[float | None] | None, j: int) -> float | None:
    v = values[j] if values is not None and j < len(values) else None
    return None if v is None else float(v)


def _num(v: Any) -> float:
    """None → NaN so matplotlib leaves a gap instead of failing."""
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    return _is_num(v) and math.isfinite(v)


def _label(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return f"{int(v):,}"
    return str(v)


# --------------------------------------------------------------------------- SVG clean-up

_ID_RE = re.compile(r'\bid="([^"]+)"')


def clean_svg(svg: str, uid: str) -> str:
    """Make matplotlib's SVG safe to inline many times in one HTML page.

    Drops the XML prolog, DOCTYPE and RDF metadata (they carry http:// namespace URLs that
    a strict offline check would flag and the HTML parser does not need), makes the
    picture scale with the page, and prefixes every id so that several charts never share
    a clip path or glyph id.
    """
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = re.sub(r"\s*<defs>\s*<style[^>]*>[^<]*</style>\s*</defs>", "", svg, count=1)  # moved to report.css
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'(<svg\b[^>]*?)\s+width="[^"]*"', r"\1", svg, count=1)
    svg = re.sub(r'(<svg\b[^>]*?)\s+height="[^"]*"', r"\1", svg, count=1)
    svg = svg.replace("<svg ", '<svg class="chart" role="img" preserveAspectRatio="xMidYMid meet" ', 1)
    ids = set(_ID_RE.findall(svg))
    if ids:
        svg = _ID_RE.sub(lambda m: f'id="{uid}-{m.group(1)}"', svg)
        svg = re.sub(r"#([A-Za-z_][\w.\-]*)",
                     lambda m: f"#{uid}-{m.group(1)}" if m.group(1) in ids else m.group(0), svg)
    return svg.strip()
