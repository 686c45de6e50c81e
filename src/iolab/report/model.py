"""What a study hands the report renderers: plain tables, charts and notes.

Studies never produce HTML; they describe what to show, and each renderer (HTML,
Markdown) decides how. Keeps analysis pure and renderers swappable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class Note:
    """A sentence placed next to the numbers. level 'warn' = a confounder the reader must see."""

    text: str
    level: Literal["info", "warn"] = "info"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[Note] = field(default_factory=list)
    # Optional per-cell annotations (same shape as rows): shown as footnote markers/tooltips.
    cell_notes: list[list[str | None]] | None = None


@dataclass
class Series:
    name: str
    x: list[float | str]
    y: list[float | None]
    lo: list[float | None] | None = None  # lower CI bound per point
    hi: list[float | None] | None = None  # upper CI bound per point


@dataclass
class Chart:
    title: str
    kind: Literal["line", "bar"]
    x_label: str
    y_label: str
    series: list[Series]
    x_log2: bool = False
    y_log: bool = False
    ref_lines: list[tuple[float, str]] = field(default_factory=list)  # horizontal (y, label)
    notes: list[Note] = field(default_factory=list)


@dataclass
class Section:
    title: str
    blocks: list[Note | Table | Chart]
    intro: str = ""
    # "grid": charts and tables side by side (two columns on a wide page), e.g. the four parts of vm-profile
    layout: Literal["stack", "grid"] = "stack"
