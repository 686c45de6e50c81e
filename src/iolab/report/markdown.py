"""The Markdown report: the same content as the HTML one, for terminals, PRs and wikis.

Charts become data tables (x down, one column per series, mean ± CI), so nothing is lost
when there are no pictures.
"""

from __future__ import annotations

import json
from typing import Any

from iolab.report.exporter import Exporter
from iolab.report.format import cell_note, fmt_cell, fmt_ci, fmt_num, fmt_size, numeric_column
from iolab.report.model import Chart, Link, Note, Section, Series, Table
from iolab.report.run_view import run_header, trials_appendix


def render_markdown(doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
    """Whole report as GitHub-flavoured Markdown."""
    parts = [_header(doc), _summary(doc, summary)]
    parts += [_section(s) for s in sections]
    parts += [_trials(doc.get("trials") or []), _environment(doc.get("environment") or {}), _spec(doc)]
    return "\n\n".join(p.strip("\n") for p in parts if p) + "\n"


# --------------------------------------------------------------------------- pieces


def _header(doc: dict[str, Any]) -> str:
    head = run_header(doc)
    counts = head.counts
    lines = [
        f"# {esc(head.study)}",
        "",
        f"**Status:** {head.status.upper()} · **Run:** `{head.run_id}` · "
        f"**Date:** {head.date} · **Trials:** {counts['ok']} of {counts['total']} ok"
        + (f", {counts['failed']} failed" if counts["failed"] else ""),
    ]
    if head.facts:
        lines += ["", "**Machine:** " + " · ".join(f"{k} {esc(v)}" for k, v in head.facts)]
    return "\n".join(lines)


def _summary(doc: dict[str, Any], summary: list[str]) -> str:
    head = run_header(doc)
    lines = ["## Summary", ""]
    lines += [f"- {esc(line)}" for line in summary] or ["_No headline findings._"]
    if head.tcg:
        lines += ["", note_md(Note("guests ran under TCG software emulation (no KVM): guest speed and host/guest "
                                   "ratios are not representative; counts still hold.", "warn"))]
    counts = head.counts
    if counts["failed"] or doc.get("status") not in (None, "complete"):
        lines += ["", f"> ⚠ **Run {doc.get('status')}: {counts['failed']} of {counts['total']} trials failed.**"]
        for g in head.failures:
            first = g["ids"][0]
            who = f"`{first}` ({esc(g['where'])})" if g["count"] == 1 else f"{g['count']} trials (`{first}`, …)"
            lines.append(f"> - {who}: {esc(g['error'])}")
    return "\n".join(lines)


def _section(section: Section) -> str:
    out = [f"## {esc(section.title)}"]
    if section.intro:
        out.append(esc(section.intro))
    for block in section.blocks:
        if isinstance(block, Note):
            out.append(note_md(block))
        elif isinstance(block, Table):
            out.append(table_md(block))
        elif isinstance(block, Chart):
            out.append(chart_md(block))
    return "\n\n".join(out)


def note_md(note: Note) -> str:
    """Warnings stand out with ⚠ and bold; info notes stay quiet."""
    if note.level == "warn":
        return f"> ⚠ **Caution:** {esc(note.text)}"
    return f"> ℹ {esc(note.text)}"


def table_md(table: Table) -> str:
    """A pipe table with right-aligned numeric columns and [n] markers for cell notes."""
    footnotes: dict[str, int] = {}
    rows = []
    for r, row in enumerate(table.rows):
        cells = []
        for c, value in enumerate(row):
            text = esc(fmt_cell(value))
            if isinstance(value, Link):
                text = f"[{text}]({value.href})"
            note = cell_note(table.cell_notes, r, c)
            if note:
                text += f" [{footnotes.setdefault(note, len(footnotes) + 1)}]"
            cells.append(text)
        rows.append(cells)
    numeric = [numeric_column(table.rows, c) for c in range(len(table.columns))]
    out = [f"### {esc(table.title)}"]
    out += [note_md(n) for n in table.notes if n.level == "warn"]
    out.append(pipe_table([esc(c) for c in table.columns], rows, numeric))
    if footnotes:
        out.append("\n".join(f"[{n}] {esc(text)}  " for text, n in footnotes.items()))
    out += [note_md(n) for n in table.notes if n.level != "warn"]
    return "\n\n".join(out)


def chart_md(chart: Chart) -> str:
    """A chart as its data: one row per x, one column per series (mean ± CI)."""
    xs = _x_values(chart.series)
    header = [esc(chart.x_label or "x")] + [esc(s.name) for s in chart.series]
    rows = []
    for x in xs:
        label = fmt_size(float(x)) if chart.x_log2 and isinstance(x, (int, float)) else fmt_cell(x)
        rows.append([esc(label)] + [_point(s, x) for s in chart.series])
    out = [f"### {esc(chart.title)}"]
    out += [note_md(n) for n in chart.notes if n.level == "warn"]
    out.append(f"_Chart data ({esc(chart.y_label)}):_")
    out.append(pipe_table(header, rows, [False] + [True] * len(chart.series)))
    if chart.ref_lines:
        out.append("Reference: " + "; ".join(f"{esc(lbl)} = {fmt_num(float(y))}" for y, lbl in chart.ref_lines))
    out += [note_md(n) for n in chart.notes if n.level != "warn"]
    return "\n\n".join(out)


def _trials(trials: list[dict[str, Any]]) -> str:
    view = trials_appendix(trials)
    header = (["trial"] + [esc(p) for p in view.params] + ["rep", "status"] + [esc(m) for m in view.metrics]
              + ["flags", "error"])
    rows = [
        [f"`{t.id}`"]
        + [esc(p) for p in t.params]
        + [t.repetition, t.status if t.ok else f"**{t.status.upper()}**"]
        + list(t.metrics)
        + [esc(", ".join(f.text for f in t.flags)), esc(t.error)]
        for t in view.rows
    ]
    numeric = [False] * (1 + len(view.params)) + [True, False] + [True] * len(view.metrics) + [False, False]
    return "\n\n".join(["## Trials", pipe_table(header, rows, numeric)])


def _environment(env: dict[str, Any]) -> str:
    body = json.dumps(env, indent=2, sort_keys=True, default=str)
    return "\n".join(["## Environment / manifest", "", "```json", body, "```"])


def _spec(doc: dict[str, Any]) -> str:
    """The study as run: what makes the report rerunnable."""
    if not doc.get("spec"):
        return ""
    body = json.dumps(doc["spec"], indent=2, sort_keys=True, default=str)
    source = f" ({esc(str(doc['source']))})" if doc.get("source") else ""
    return "\n".join([f"## Study spec{source}", "", "```json", body, "```"])


# --------------------------------------------------------------------------- helpers


def pipe_table(header: list[str], rows: list[list[str]], numeric: list[bool]) -> str:
    """GitHub pipe table; numeric columns get `---:` so they line up in rendered views."""
    width = len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if n else "---" for n in numeric[:width]) + "|"]
    for row in rows:
        cells = list(row[:width]) + [""] * (width - len(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def esc(text: str) -> str:
    """Keep cell text from breaking the table: escape pipes, flatten newlines."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", " ")


def _point(s: Series, x: Any) -> str:
    try:
        j = s.x.index(x)
    except ValueError:
        return ""
    y = s.y[j] if j < len(s.y) else None
    if y is None:
        return "—"
    lo = s.lo[j] if s.lo is not None and j < len(s.lo) else None
    hi = s.hi[j] if s.hi is not None and j < len(s.hi) else None
    return esc(fmt_ci(float(y), lo, hi))


def _x_values(series: list[Series]) -> list[Any]:
    seen: dict[Any, None] = {}
    for s in series:
        for x in s.x:
            seen.setdefault(x, None)
    xs = list(seen)
    if xs and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
        xs.sort()
    return xs


class MarkdownExporter(Exporter):
    name = "md"

    def export(self, doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
        return render_markdown(doc, sections, summary)
