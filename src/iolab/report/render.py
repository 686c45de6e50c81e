"""Entry point of the report renderers: `render()` picks a format.

The renderers import their formatting from report/format.py, never from here, so there is
no cycle. The HTML and Markdown renderers are imported when asked for: `--format csv|json`
never pays for importing matplotlib (charts).
"""

from __future__ import annotations

import json
from typing import Any

from iolab.report.model import Section

FORMATS = ("html", "md", "csv", "json")
_ALIASES = {"markdown": "md", "htm": "html"}


# --------------------------------------------------------------------------- dispatch


def render_html(doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
    """One self-contained HTML file (inline CSS and SVG, no external loads)."""
    from iolab.report.html import render_html as _render

    return _render(doc, sections, summary)


def render_markdown(doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
    """The same content as Markdown, charts as data tables."""
    from iolab.report.markdown import render_markdown as _render

    return _render(doc, sections, summary)


def render_csv(doc: dict[str, Any]) -> str:
    """One row per trial, for spreadsheets and pandas."""
    from iolab.report.csv_out import render_csv as _render

    return _render(doc)


def render_json(doc: dict[str, Any]) -> str:
    """The results contract document itself, stable key order so diffs are readable."""
    return json.dumps(doc, indent=2, sort_keys=True, default=str)


def render(doc: dict[str, Any], sections: list[Section], summary: list[str], fmt: str) -> str:
    """Render `doc` in `fmt` ('html', 'md', 'csv' or 'json')."""
    key = _ALIASES.get(fmt.lower(), fmt.lower())
    if key == "html":
        return render_html(doc, sections, summary)
    if key == "md":
        return render_markdown(doc, sections, summary)
    if key == "csv":
        return render_csv(doc)
    if key == "json":
        return render_json(doc)
    raise ValueError(f"unknown report format {fmt!r}: expected one of {', '.join(FORMATS)}")
