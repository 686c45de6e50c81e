"""The HTML report: one self-contained file, charts as inline SVG, CSS inline, no scripts.

The functions here turn the study's Sections into small view dicts (already formatted
text, alignment, footnote markers) so the Jinja template stays free of logic.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from iolab import __version__
from iolab.report.charts import chart_svg
from iolab.report.exporter import Exporter
from iolab.report.format import cell_note, fmt_cell, is_numeric_cell, numeric_column
from iolab.report.model import Chart, Link, Note, Section, Table, Tag
from iolab.report.run_view import run_header, trials_appendix

TEMPLATE_DIR = Path(__file__).parent / "templates"
PROSE_CHARS = 32       # a text cell longer than this is a sentence: it wraps


def render_html(doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
    """One self-contained HTML page for a run (see module docstring)."""
    return _env().get_template("report.html.j2").render(**build_context(doc, sections, summary))


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["breakable"] = breakable
    return env


def breakable(name: str) -> Markup:
    """Let long snake_case headers wrap after '_' instead of mid-word ('throughput_' / 'mib_s')."""
    return Markup("_<wbr>").join(Markup.escape(part) for part in str(name).split("_"))


def build_context(doc: dict[str, Any], sections: list[Section], summary: list[str]) -> dict[str, Any]:
    """Everything the template shows, formatted."""
    env = doc.get("environment") or {}
    trials = doc.get("trials") or []
    head = run_header(doc)
    counter = _Counter()
    views = [_section_view(s, counter) for s in sections]
    return {
        "study": head.study,
        "run_id": head.run_id,
        "status": head.status,
        "date": head.date,
        "facts": head.facts,
        "tcg": head.tcg,
        "counts": head.counts,
        "summary": list(summary),
        "sections": views,
        "failed": head.failures,  # shown outside the collapsed appendix: nobody should miss them
        "failed_count": sum(1 for t in trials if t.get("status") != "ok"),
        "trials": trials_appendix(trials),
        "environment": _env_rows(env),
        "spec": json.dumps(doc["spec"], indent=2, sort_keys=True, default=str) if doc.get("spec") else "",
        "source": str(doc.get("source") or ""),
        "version": _iolab_version(),
    }


class _Counter:
    """Hands out unique ids for charts and sections within one page."""

    def __init__(self) -> None:
        self.charts = 0
        self.tables = 0
        self.slugs: set[str] = set()

    def chart_id(self) -> str:
        self.charts += 1
        return f"ch{self.charts}"

    def table_id(self) -> str:
        self.tables += 1
        return f"tb{self.tables}"

    def slug(self, title: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"
        slug, n = base, 2
        while slug in self.slugs:
            slug, n = f"{base}-{n}", n + 1
        self.slugs.add(slug)
        return slug


# --------------------------------------------------------------------------- sections


def _section_view(section: Section, counter: _Counter) -> dict[str, Any]:
    blocks = []
    for block in section.blocks:
        if isinstance(block, Note):
            blocks.append(_note_view(block))
        elif isinstance(block, Table):
            blocks.append(_table_view(block, counter.table_id()))
        elif isinstance(block, Chart):
            blocks.append(_chart_view(block, counter.chart_id()))
    return {"title": section.title, "intro": section.intro, "id": counter.slug(section.title), "blocks": blocks,
            "layout": section.layout}


def _note_view(note: Note) -> dict[str, Any]:
    return {"kind": "note", "level": note.level, "text": note.text}


def _chart_view(chart: Chart, uid: str) -> dict[str, Any]:
    return {
        "kind": "chart",
        "id": uid,
        "title": chart.title,
        "svg": Markup(chart_svg(chart, uid)),  # our own matplotlib output, ids prefixed
        "notes": [_note_view(n) for n in chart.notes],
        "series": len(chart.series),
    }


def _table_view(table: Table, uid: str) -> dict[str, Any]:
    """Formatted cells, alignment per column, and numbered footnotes for cell notes."""
    ncols = len(table.columns)
    numeric = [numeric_column(table.rows, c) for c in range(ncols)]
    footnotes: dict[str, int] = {}
    rows = []
    for r, row in enumerate(table.rows):
        cells = []
        for c, value in enumerate(row):
            note = cell_note(table.cell_notes, r, c)
            marker = footnotes.setdefault(note, len(footnotes) + 1) if note else None
            cells.append(
                {
                    "text": fmt_cell(value),
                    "num": is_numeric_cell(value) or (value is None and c < ncols and numeric[c]),
                    "marker": marker,
                    "note": note,
                    "missing": value is None,
                    "href": value.href if isinstance(value, Link) else None,
                    "tone": value.tone if isinstance(value, Tag) else None,
                    # sentences (a reason, a claim) wrap instead of pushing the table off the page
                    "prose": isinstance(value, str) and len(value) > PROSE_CHARS,
                }
            )
        rows.append(cells)
    return {
        "kind": "table",
        "id": uid,
        "title": table.title,
        "columns": [{"name": name, "num": numeric[i]} for i, name in enumerate(table.columns)],
        "rows": rows,
        "notes": [_note_view(n) for n in table.notes],
        "footnotes": [{"n": n, "text": text} for text, n in footnotes.items()],
    }


# --------------------------------------------------------------------------- appendices


def _env_rows(env: dict[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """The manifest flattened to dotted keys; long or multi-line values shown as blocks."""
    rows: list[dict[str, Any]] = []
    for key in sorted(env, key=str):
        value = env[key]
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(_env_rows(value, name + "."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
        rows.append({"key": name, "value": text, "block": "\n" in text or len(text) > 100})
    return rows


def _iolab_version() -> str:
    return str(__version__)


class HtmlExporter(Exporter):
    name = "html"

    def export(self, doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
        return render_html(doc, sections, summary)
