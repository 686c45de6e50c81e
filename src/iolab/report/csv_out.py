"""The CSV export: one row per trial, flat, for spreadsheets, pandas and R.

Column order is stable so that two runs of a study diff and concatenate cleanly:
fixed columns first, then `param.<name>` sorted by name, then `metric.<name>` sorted.
Values keep full precision (no display rounding); nested values are JSON.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

FIXED_COLUMNS = ["run_id", "study", "trial_id", "repetition", "status", "error", "flags"]


def render_csv(doc: dict[str, Any]) -> str:
    """All trials of `doc` as CSV text with a header row."""
    trials = doc.get("trials") or []
    params = sorted({str(k) for t in trials for k in (t.get("params") or {})})
    metrics = sorted({str(k) for t in trials for k in (t.get("metrics") or {})})
    header = FIXED_COLUMNS + [f"param.{p}" for p in params] + [f"metric.{m}" for m in metrics]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for t in trials:
        writer.writerow(_row(doc, t, params, metrics))
    return buf.getvalue()


def _row(doc: dict[str, Any], trial: dict[str, Any], params: list[str], metrics: list[str]) -> list[str]:
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
    return [_cell(v) for v in fixed + [p.get(k) for k in params] + [m.get(k) for k in metrics]]


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
