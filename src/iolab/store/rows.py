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

RUN_FIELDS = ("id", "study", "source", "spec_json", "options_json", "status", "created", "updated", "environment_json",
              "extra_json", "owner_role", "owner_host")
RUN_COLUMNS = ", ".join(RUN_FIELDS)
# columns a store made before them lacks (read as NULL: store/schema.py version 3)
LATER_RUN_FIELDS = frozenset({"owner_role", "owner_host"})
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
    # an error message is text for people; a NUL in it (a tool's garbled output) is one PostgreSQL
    # cannot store, and must not cost the trial
    error = r.error.replace("\x00", "\ufffd") if r.error else r.error
    return (run_id, r.trial_id, r.config_id, r.repetition, dump(r.params), r.status, error,
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


def run_select(available: set[str]) -> str:
    """RUN_COLUMNS for reading a store that may predate some of them (NULL in their place): a reader
    never migrates, so it reads every older layout as it is."""
    return ", ".join(f if f in available or f not in LATER_RUN_FIELDS else f"NULL AS {f}" for f in RUN_FIELDS)


def run_values(rec: RunRecord) -> tuple[Any, ...]:
    """The RUN_COLUMNS values of a run, its owner as recorded."""
    return (rec.id, rec.study, rec.source, dump(rec.spec), dump(rec.options), rec.status, rec.created, rec.updated,
            dump(rec.environment), dump(rec.extra), rec.owner_role, rec.owner_host)


def run(row: Sequence[Any]) -> RunRecord:
    """A RUN_COLUMNS row -> the run. A run stored before owners were recorded has no role; its host
    is the one its environment names."""
    environment = json.loads(row[8])
    host = row[11] if row[11] is not None else environment.get("hostname") if isinstance(environment, dict) else None
    return RunRecord(id=row[0], study=row[1], source=row[2], spec=json.loads(row[3]), options=json.loads(row[4]),
                     status=row[5], created=row[6], updated=row[7], environment=environment,
                     extra=json.loads(row[9]), owner_role=row[10], owner_host=host)
