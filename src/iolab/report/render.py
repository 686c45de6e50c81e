"""Entry point of the report exporters: `render()` picks a format's exporter by name.

Each format is one module with one `Exporter` (report/exporter.py), named here as a
`"module:Class"` string like every registry (core/registry.py), and imported when asked
for: `--format csv|json` never pays for importing matplotlib (charts). The exporters import
their formatting from report/format.py, never from here.
"""

from __future__ import annotations

from typing import Any

from iolab.core.registry import load
from iolab.report.exporter import Exporter
from iolab.report.model import Section

EXPORTERS = {
    "html": "iolab.report.html:HtmlExporter",  # one self-contained file (inline CSS and SVG, no external loads)
    "md": "iolab.report.markdown:MarkdownExporter",  # the same content, charts as data tables
    "csv": "iolab.report.csv_out:CsvExporter",  # one row per trial, for spreadsheets and pandas
    "json": "iolab.report.json_out:JsonExporter",  # the results contract document itself
}
FORMATS = tuple(EXPORTERS)
_ALIASES = {"markdown": "md", "htm": "html"}


def exporter(fmt: str) -> Exporter:
    """The exporter of `fmt` ('html', 'md', 'csv' or 'json', or an alias); ValueError if unknown."""
    key = _ALIASES.get(fmt.lower(), fmt.lower())
    if key not in EXPORTERS:
        raise ValueError(f"unknown report format {fmt!r}: expected one of {', '.join(FORMATS)}")
    made: Exporter = load(EXPORTERS, key)()
    return made


def render(doc: dict[str, Any], sections: list[Section], summary: list[str], fmt: str) -> str:
    """Render `doc` in `fmt` ('html', 'md', 'csv' or 'json')."""
    return exporter(fmt).export(doc, sections, summary)
