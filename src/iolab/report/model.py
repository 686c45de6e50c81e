"""What a study hands the report renderers: plain tables, charts and notes.

Studies never produce HTML; they describe what to show, and each renderer (HTML,
Markdown) decides how. Keeps analysis pure and renderers swappable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Tone = Literal["good", "bad", "warn", "neutral"]


@dataclass
class Note:
    """A sentence placed next to the numbers. level 'warn' = a confounder the reader must see."""

    text: str
    level: Literal["info", "warn"] = "info"


@dataclass(frozen=True)
class Link:
    """A table cell that points elsewhere (e.g. a study's own report): text plus a relative href."""

    text: str
    href: str


@dataclass(frozen=True)
class Tag:
    """A verdict-like table cell shown as a coloured label in HTML (plain text elsewhere).
    tone: good (holds, improvement), bad (differs, regression), warn, neutral."""

    text: str
    tone: Tone = "neutral"


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
    x: Sequence[float | str]  # Sequence: a list[str] or list[float] is one too
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
    blocks: Sequence[Note | Table | Chart]  # Sequence: a list[Note] is one too
    intro: str = ""
    # "grid": charts and tables side by side (two columns on a wide page), e.g. the four parts of vm-profile
    layout: Literal["stack", "grid"] = "stack"
