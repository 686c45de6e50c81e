"""Runs and trials <-> the rows of store/schema.py, the same for every backend.

Kept apart from the backends so a run pushed from SQLite to PostgreSQL (or back) is the
same bytes in the same columns: the JSON text (sorted keys, NaN and infinities kept) is
what both store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from iolab.core.model import TrialResult
from iolab.store.base import RunRecord

TRACEBACK_KEY = "_traceback"  # a trial's traceback rides in its manifest column, split off on read

RUN_COLUMNS = ("id, study, source, spec_json, options_json, status, created, updated, environment_json, extra_json")
TRIAL_COLUMNS = ("run_id, trial_id, config_id, repetition, params_json, status, error, metrics_json, probes_json,"
                 " flags_json, manifest_json, raw_json, started, ended, seq")
TRIAL_READ = ("trial_id, config_id, repetition, params_json, status, error, metrics_json, probes_json,"
              " manifest_json, flags_json, started, ended")


def dump(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def trial_values(run_id: str, r: TrialResult, raw: Any, seq: int) -> tuple[Any, ...]:
    """The TRIAL_COLUMNS values of one trial."""
    manifest = dict(r.manifest)
    if r.traceback is not None:
        manifest[TRACEBACK_KEY] = r.traceback
    return (run_id, r.trial_id, r.config_id, r.repetition, dump(r.params), r.status, r.error,
            dump(r.metrics), dump(r.probes), dump(r.flags), dump(manifest),
            dump(raw) if raw is not None else None, r.started, r.ended, seq)


def trial(row: Sequence[Any]) -> TrialResult:
    """A TRIAL_READ row -> the trial as it was saved."""
    manifest = json.loads(row[8])
    tb = manifest.pop(TRACEBACK_KEY, None)
    return TrialResult(trial_id=row[0], config_id=row[1], repetition=row[2], params=json.loads(row[3]),
                       status=row[4], error=row[5], metrics=json.loads(row[6]), probes=json.loads(row[7]),
                       manifest=manifest, flags=json.loads(row[9]), started=row[10], ended=row[11],
                       traceback=tb)


def raw(text: str | None) -> Any:
    return json.loads(text) if text else None


def run(row: Sequence[Any]) -> RunRecord:
    """A RUN_COLUMNS row -> the run."""
    return RunRecord(id=row[0], study=row[1], source=row[2], spec=json.loads(row[3]), options=json.loads(row[4]),
                     status=row[5], created=row[6], updated=row[7], environment=json.loads(row[8]),
                     extra=json.loads(row[9]))
