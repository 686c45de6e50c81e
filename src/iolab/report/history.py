"""`iolab history` shown: a text table per configuration (the runs, the steps marked and
named), the same as JSON, and with --html one self-contained page (inline SVG, no network)
with the metric over the runs, the level between change points drawn as a second line (a
step shows as a step) and a table naming each change and what changed at it.
Pure: series in, text out (the CLI prints it or writes the file).
"""

from __future__ import annotations

import dataclasses
import json
import time

import jinja2

from iolab.analysis.history import Change, Series
from iolab.report.charts import chart_svg
from iolab.report.comparison import text_table
from iolab.report.model import Chart
from iolab.report.model import Series as Line

_PAGE = jinja2.Environment(autoescape=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #1f2328; }
table { border-collapse: collapse; margin: .5rem 0 2rem; }
td, th { padding: .2rem .6rem; border-bottom: 1px solid #d0d7de; text-align: left; }
.step { color: #D55E00; font-weight: 600; } .method { color: #57606a; font-size: .9rem; }
</style></head><body>
<h1>{{ title }}</h1>
<p class="method">Median of each run's successful trials, oldest run first. Steps: circular binary
segmentation with a permutation test at 1 % (docs/store.md#history); the orange line is the level
between steps.</p>
{% for s in series %}
<section>
<h2>{{ s.config_id }}: {{ s.metric }}</h2>
{{ svgs[loop.index0] | safe }}
{% if s.changes %}
<table><tr><th>step at run</th><th>started</th><th>before</th><th>after</th><th>change</th><th>p</th>
<th>what changed</th></tr>
{% for c in s.changes %}<tr class="step"><td>{{ s.points[c.index].run_id }}</td>
<td>{{ started(s.points[c.index].created) }}</td>
<td>{{ "%.6g" | format(c.before) }}</td><td>{{ "%.6g" | format(c.after) }}</td>
<td>{{ relative(c) }}</td><td>{{ "%.3g" | format(c.p) }}</td>
<td>{{ c.differences | join("; ") or "nothing in the recorded environment" }}</td></tr>{% endfor %}
</table>
{% else %}<p>No step in {{ s.points | length }} runs.</p>{% endif %}
</section>
{% endfor %}
</body></html>
""")


def _chart(s: Series) -> Chart:
    xs: list[float | str] = [float(i + 1) for i in range(len(s.points))]
    edges = [0, *(c.index for c in s.changes), len(s.points)]
    level: list[float | None] = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        mean = sum(p.value for p in s.points[lo:hi]) / (hi - lo)
        level += [mean] * (hi - lo)
    return Chart(title=f"{s.config_id}: {s.metric}", kind="line", x_label="run (oldest first)", y_label=s.metric,
                 series=[Line("per run", xs, [p.value for p in s.points]), Line("level between steps", xs, level)])


def _relative(c: Change) -> str:
    return f"{c.after / c.before - 1:+.1%}" if c.before else "n/a"


def history_html(study: str, series: list[Series]) -> str:
    return _PAGE.render(title=f"History of {study}", series=series,
                        svgs=[chart_svg(_chart(s), f"h{i}") for i, s in enumerate(series)],
                        started=_started, relative=_relative)


def _started(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def history_json(series: list[Series]) -> str:
    return json.dumps([dataclasses.asdict(s) for s in series], indent=2)


def history_text(series: list[Series]) -> str:
    """Per configuration: a table of its runs (steps marked ▶), then one line per step naming it."""
    out = []
    for s in series:
        steps = {c.index for c in s.changes}
        out.append(f"\n{s.config_id}: {s.metric} (median per run), {len(s.points)} runs, {len(s.changes)} step(s)")
        out.append(text_table(["", "run", "started", s.metric, "n", "kernel", "fio", "iolab"], [
            ["▶" if i in steps else "", p.run_id, _started(p.created), p.value, str(p.n),
             str(p.versions.get("kernel")), str(p.versions.get("fio_version")), str(p.versions.get("iolab_version"))]
            for i, p in enumerate(s.points)]))
        for c in s.changes:
            why = "; ".join(c.differences) or "no difference in the recorded environment"
            out.append(f"▶ step at {s.points[c.index].run_id}: {c.before:.6g} → {c.after:.6g} "
                       f"({_relative(c)}, p = {c.p:.3g}): {why}")
    return "\n".join(out)
