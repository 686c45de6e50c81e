"""The one interface every report format implements (like hyperfine's exporters: one file
per format, one table in report/render.py that names them).

An exporter turns a results document and the sections its analysis built into one file's
text. A format that shows no analysis (CSV: one row per trial; JSON: the document itself)
simply does not read `sections` and `summary`: the signature stays one, so `render()` has
no branch per format and a new format is one module and one line in `EXPORTERS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from iolab.report.model import Section


class Exporter(ABC):
    """One output format of `iolab report`."""

    name: str  # the --format value

    @abstractmethod
    def export(self, doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
        """The whole file's text."""
