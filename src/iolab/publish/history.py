"""`iolab history` shown: a summary of every series of the family (configuration x metric) with
its status, then per series with a change the runs (steps marked ▶, a suspicion ?) and one
line per change: its size with a 95 % interval, its p and level, what changed in the recorded
environment, and the suspicions raised and confirmed or withdrawn along the way. The same as
JSON, and with --html one self-contained page (inline SVG, no network): per series the
metric over the runs with the level between changes drawn as a second line.
Pure: a History in, text out (the CLI prints it or writes the file).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Any

import jinja2

from iolab.analysis.detection_power import Power
from iolab.analysis.history import Change, History, Series
from iolab.analysis.innovations import Shape
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
.regression { color: #D55E00; font-weight: 600; } .improvement { color: #0072B2; font-weight: 600; }
.method { color: #57606a; font-size: .9rem; }
</style></head><body>
<h1>{{ title }}</h1>
<p class="method">{{ method }}</p>
<table><tr><th>configuration</th><th>metric</th><th>runs</th><th>status</th></tr>
{% for s in history.series %}<tr><td>{{ s.label or s.config_id }}</td><td>{{ s.metric }}</td>
<td>{{ s.points | length }}</td><td>{{ status(s) }}</td></tr>{% endfor %}
</table>
{% for s in shown %}
<section>
<h2>{{ s.label or s.config_id }}: {{ s.metric }}{% if s.unit %} ({{ s.unit }}){% endif %}</h2>
{{ svgs[loop.index0] | safe }}
<table><tr><th>change at run</th><th>started</th><th>status</th><th>before</th><th>after</th><th>change [95% CI]</th>
<th>p (level)</th><th>what changed</th></tr>
{% for c in s.changes %}<tr class="{{ c.verdict }}"><td>{{ s.points[c.index].run_id }}</td>
<td>{{ started(s.points[c.index].created) }}</td><td>{{ c.status }} {{ c.verdict }}</td>
<td>{{ "%.6g" | format(c.before) }}</td><td>{{ "%.6g" | format(c.after) }}</td>
<td>{{ size(s, c) }}</td><td>{{ "%.2g" | format(c.p) }} ({{ "%.2g" | format(c.level) }})</td>
<td>{{ c.differences | join("; ") or "nothing in the recorded environment" }}</td></tr>{% endfor %}
</table>
</section>
{% endfor %}
</body></html>
""")


def size_text(s: Series, c: Change) -> str:
    """'-5.1 % [-6.3 %, -3.9 %]' for a relative change, '+3.2 [1.1, 5.3] µs' for a difference."""
    if s.relative:
        return f"{c.ratio - 1:+.1%} [{c.lo - 1:+.1%}, {c.hi - 1:+.1%}]"
    return f"{c.ratio:+.4g} [{c.lo:+.4g}, {c.hi:+.4g}]{' ' + s.unit if s.unit else ''}"


def status_text(s: Series) -> str:
    if not s.changes:
        return "no change"
    return "; ".join(f"{c.status} {c.verdict} at run {c.index + 1} ({size_text(s, c)})" for c in s.changes)


def _chart(s: Series) -> Chart:
    xs: list[float | str] = [float(i + 1) for i in range(len(s.points))]
    cuts = sorted(c.index for c in s.changes)
    edges = [0, *cuts, len(s.points)]
    level: list[float | None] = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        mean = sum(p.value for p in s.points[lo:hi]) / (hi - lo)
        level += [mean] * (hi - lo)
    return Chart(title=f"{s.config_id}: {s.metric}", kind="line", x_label="run (oldest first)", y_label=s.metric,
                 series=[Line("per run", xs, [p.value for p in s.points]), Line("level between changes", xs, level)])


DRIFTING = 0.5  # rho at or above which the runs wander too much to tell a step from drift quickly


def method_text(h: History) -> str:
    shape = Shape(h.tails, h.skew).describe()
    text = (f"Method: {h.method}; consecutive runs modelled as AR(1) with "
            f"rho = {h.rho:.2f} (estimated {h.rho_estimate:.2f} from every series, plus a margin), {shape} "
            "innovations; docs/store.md#history")
    if h.rho >= DRIFTING:
        text += (f". Note: consecutive runs are strongly alike (rho {h.rho:.2f}): the machine's results drift, "
                 "and a step is told from drift only with many runs on each side; look at the runs (--all) and "
                 "gate a change with `iolab ab`")
    return text


def history_html(study: str, h: History) -> str:
    shown = [s for s in h.series if s.changes] or h.series[:1]
    return _PAGE.render(title=f"History of {study}", history=h, shown=shown, method=method_text(h),
                        svgs=[chart_svg(_chart(s), f"h{i}") for i, s in enumerate(shown)],
                        started=_started, size=size_text, status=status_text)


def _started(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def history_json(h: History, powers: dict[str, list[Power]] | None = None, set_aside: list[str] | None = None) -> str:
    """The family as JSON; `set_aside`: why runs of the study were not read (docs/results.md)."""
    doc: dict[str, Any] = dataclasses.asdict(h)
    doc["set_aside"] = list(dict.fromkeys(set_aside or []))
    doc["tails"] = None if math.isinf(h.tails) else h.tails  # JSON has no infinity: null is normal innovations
    if powers is not None:
        doc["power"] = {k: [dataclasses.asdict(p) for p in v] for k, v in powers.items()}
    return json.dumps(doc, indent=2)


def _per_run(s: Series) -> str:
    return "mean per trial of each run" if s.estimand == "mean" else "median per run"


def history_text(h: History, powers: dict[str, list[Power]] | None = None, detail: bool = False) -> str:
    """The family's summary, then the runs of every series with a change (every series when `detail`)."""
    out = [f"{len(h.series)} series (configuration x metric), judged together: "
           f"{sum(bool(s.changes) for s in h.series)} with a change. {method_text(h)}",
           text_table(["configuration", "metric", "runs", "status"],
                      [[s.label or s.config_id, s.metric, str(len(s.points)), status_text(s)] for s in h.series])]
    for s in h.series:
        if not (s.changes or detail):
            continue
        marks = {c.index: "▶" if c.status == "confirmed" else "?" for c in s.changes}
        out.append(f"\n{s.config_id} {s.label}: {s.metric} ({_per_run(s)}), {len(s.points)} runs, "
                   f"{len(s.changes)} change(s)")
        out.append(text_table(["", "run", "started", s.metric, "n", "kernel", "fio", "iolab"], [
            [marks.get(i, ""), p.run_id, _started(p.created), p.value, str(p.n),
             str(p.versions.get("kernel")), str(p.versions.get("fio_version")), str(p.versions.get("iolab_version"))]
            for i, p in enumerate(s.points)]))
        for c in s.changes:
            why = "; ".join(c.differences) or "no difference in the recorded environment"
            mark = "▶" if c.status == "confirmed" else "?"
            out.append(f"{mark} {c.status} {c.verdict} at {s.points[c.index].run_id}: {c.before:.6g} → "
                       f"{c.after:.6g} ({size_text(s, c)}, {c.runs_after} run(s) after, p = {c.p:.2g} at level "
                       f"{c.level:.2g}): {why}")
        for e in s.events:
            out.append(f"  after run {e.run + 1}: {e.what} (the change at run {e.at + 1})")
    for key, ps in (powers or {}).items():
        out.append(f"\npower of {key}: " + "; ".join(p.sentence() for p in ps))
    return "\n".join(out)
