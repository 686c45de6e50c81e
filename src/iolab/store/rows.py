"""Runs and trials <-> the rows of store/schema.py, the same for every backend.

Kept apart from the backends so a run pushed from SQLite to PostgreSQL (or back) is the
same bytes in the same columns: the JSON text (sorted keys, NaN and infinities kept) is
what both store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from iolab.core.errors import InputError
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


class UnreadableRow(InputError):
    """A stored row whose JSON column is not JSON: a hand edit, another tool, or a colleague's
    writer role writing its own rows in plain SQL (row-level security allows that). Exit 2,
    naming the store, the run, the trial and the column; never a traceback."""


def _json(text: Any, column: str, where: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        reason = str(exc) if isinstance(exc, json.JSONDecodeError) else f"got {type(text).__name__}"
        raise UnreadableRow(f"{where}: {column}: not JSON as iolab writes it ({reason}); nothing was read "
                            "from this run (edited by hand, or written by another tool?)") from None


def trial(row: Sequence[Any], where: str) -> TrialResult:
    """A TRIAL_READ row -> the trial as it was saved; `where` ('STORE: run R') names it in an
    UnreadableRow."""
    at = f"{where}: trial {row[0]!r}"
    manifest = _json(row[8], "manifest", at)
    tb = manifest.pop(TRACEBACK_KEY, None) if isinstance(manifest, dict) else None
    return TrialResult(trial_id=row[0], config_id=row[1], repetition=row[2], params=_json(row[3], "params", at),
                       status=row[4], error=row[5], metrics=_json(row[6], "metrics", at),
                       probes=_json(row[7], "probes", at), manifest=manifest, flags=_json(row[9], "flags", at),
                       started=row[10], ended=row[11], traceback=tb)


def raw(text: str | None, where: str = "raw output") -> Any:
    return _json(text, "raw", where) if text else None


def run_select(available: set[str]) -> str:
    """RUN_COLUMNS for reading a store that may predate some of them (NULL in their place): a reader
    never migrates, so it reads every older layout as it is."""
    return ", ".join(f if f in available or f not in LATER_RUN_FIELDS else f"NULL AS {f}" for f in RUN_FIELDS)


def run_values(rec: RunRecord) -> tuple[Any, ...]:
    """The RUN_COLUMNS values of a run, its owner as recorded."""
    return (rec.id, rec.study, rec.source, dump(rec.spec), dump(rec.options), rec.status, rec.created, rec.updated,
            dump(rec.environment), dump(rec.extra), rec.owner_role, rec.owner_host)


def run(row: Sequence[Any], location: str) -> RunRecord:
    """A RUN_COLUMNS row -> the run. A run stored before owners were recorded has no role; its host
    is the one its environment names."""
    at = f"{location}: run {row[0]}"
    environment = _json(row[8], "environment", at)
    host = row[11] if row[11] is not None else environment.get("hostname") if isinstance(environment, dict) else None
    return RunRecord(id=row[0], study=row[1], source=row[2], spec=_json(row[3], "spec", at),
                     options=_json(row[4], "options", at), status=row[5], created=row[6], updated=row[7],
                     environment=environment, extra=_json(row[9], "extra", at), owner_role=row[10], owner_host=host)


def readable_runs(found: Sequence[Sequence[Any]], location: str, unreadable: list[str]) -> list[RunRecord]:
    """The runs of `found` that can be read; each other one's reason goes to `unreadable` (a list
    of the newest runs must not end at one colleague's bad row: `iolab runs` and `history` say
    which runs they left out)."""
    out = []
    for row in found:
        try:
            out.append(run(row, location))
        except UnreadableRow as exc:
            unreadable.append(str(exc))
    return out
