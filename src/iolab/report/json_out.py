"""JSON export: the results contract document itself (docs/results-json.md), with a stable
key order so two exports diff line by line."""

from __future__ import annotations

import json
from typing import Any

from iolab.report.exporter import Exporter
from iolab.report.model import Section


def render_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, default=str)


class JsonExporter(Exporter):
    name = "json"

    def export(self, doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
        return render_json(doc)
