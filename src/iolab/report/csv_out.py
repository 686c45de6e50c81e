"""The CSV export: one row per trial, flat, for spreadsheets, pandas and R.

Column order is stable so that two runs of a study diff and concatenate cleanly:
fixed columns first, then `param.<axis>` sorted by name, then `metric.<name>` sorted, then
the full configurations `param._target` / `param._workload` (JSON) last, out of the way.
Values keep full precision (no display rounding); nested values are JSON.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from iolab.report.exporter import Exporter
from iolab.report.model import Section

FIXED_COLUMNS = ["run_id", "study", "trial_id", "repetition", "status", "error", "flags"]


def render_csv(doc: dict[str, Any]) -> str:
    """All trials of `doc` as CSV text with a header row."""
    trials = doc.get("trials") or []
    names = {str(k) for t in trials for k in (t.get("params") or {})}
    axes = sorted(n for n in names if not n.startswith("_"))
    configs = sorted(n for n in names if n.startswith("_"))  # _target/_workload: JSON blobs, kept last
    metrics = sorted({str(k) for t in trials for k in (t.get("metrics") or {})})
    header = (
        FIXED_COLUMNS
        + [f"param.{p}" for p in axes]
        + [f"metric.{m}" for m in metrics]
        + [f"param.{p}" for p in configs]
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for t in trials:
        writer.writerow(_row(doc, t, axes, metrics, configs))
    return buf.getvalue()


def _row(
    doc: dict[str, Any], trial: dict[str, Any], axes: list[str], metrics: list[str], configs: list[str]
) -> list[str]:
    p = {str(k): v for k, v in (trial.get("params") or {}).items()}
    m = {str(k): v for k, v in (trial.get("metrics") or {}).items()}
    fixed = [
        doc.get("run_id"),
        doc.get("study"),
        trial.get("id"),
        trial.get("repetition"),
        trial.get("status"),
        trial.get("error"),
        ";".join(str(f) for f in trial.get("flags") or []),
    ]
    values = fixed + [p.get(k) for k in axes] + [m.get(k) for k in metrics] + [p.get(k) for k in configs]
    return [_cell(v) for v in values]


def _cell(value: Any) -> str:
    """Empty for missing, repr-precision for floats, JSON for nested values."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


class CsvExporter(Exporter):
    name = "csv"

    def export(self, doc: dict[str, Any], sections: list[Section], summary: list[str]) -> str:
        return render_csv(doc)
