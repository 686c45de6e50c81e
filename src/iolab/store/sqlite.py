"""The results store: one SQLite file, versioned schema, one transaction per trial.

A trial's metrics, probe data, flags, raw generator output and manifest are written
together the moment the trial ends, so an interrupted run loses nothing finished.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iolab.core.errors import IolabError
from iolab.core.model import TrialResult

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    study TEXT NOT NULL,
    source TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    options_json TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    environment_json TEXT NOT NULL,
    extra_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS trials (
    run_id TEXT NOT NULL REFERENCES runs(id),
    trial_id TEXT NOT NULL,
    config_id TEXT NOT NULL,
    repetition INTEGER NOT NULL,
    params_json TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    metrics_json TEXT NOT NULL,
    probes_json TEXT NOT NULL,
    flags_json TEXT NOT NULL,
    manifest_json TEXT NOT NULL,
    raw_json TEXT,
    started REAL NOT NULL,
    ended REAL NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (run_id, trial_id)
);
CREATE INDEX IF NOT EXISTS trials_by_config ON trials(run_id, config_id);
"""


@dataclass
class RunRecord:
    id: str
    study: str
    source: str
    spec: dict[str, Any]
    options: dict[str, Any]
    status: str
    created: float
    updated: float
    environment: dict[str, Any]
    extra: dict[str, Any]


class Store:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self._migrate()

    def _migrate(self) -> None:
        self.db.executescript(SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise IolabError(f"{self.path} has schema version {row[0]}, newer than this iolab ({SCHEMA_VERSION}); "
                             "upgrade iolab or use --db with another file")

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # runs -----------------------------------------------------------------
    def create_run(self, run_id: str, study: str, source: str, spec: dict[str, Any], options: dict[str, Any],
                   environment: dict[str, Any]) -> None:
        now = time.time()
        with self.tx() as db:
            db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                       (run_id, study, source, _dump(spec), _dump(options), "running", now, now,
                        _dump(environment), "{}"))

    def set_status(self, run_id: str, status: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE runs SET status=?, updated=? WHERE id=?", (status, time.time(), run_id))

    def set_extra(self, run_id: str, key: str, value: Any) -> None:
        """Run-level data that is not a trial (e.g. a sanity-gate result)."""
        with self.tx() as db:
            extra = json.loads(db.execute("SELECT extra_json FROM runs WHERE id=?", (run_id,)).fetchone()[0])
            extra[key] = value
            db.execute("UPDATE runs SET extra_json=?, updated=? WHERE id=?", (_dump(extra), time.time(), run_id))

    def runs(self, limit: int = 50) -> list[RunRecord]:
        rows = self.db.execute("SELECT * FROM runs ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
        return [_run(r) for r in rows]

    def resolve(self, ref: str) -> RunRecord:
        """A run by id, unique id prefix, or 'latest'."""
        if ref == "latest":
            row = self.db.execute("SELECT * FROM runs ORDER BY created DESC LIMIT 1").fetchone()
            if row is None:
                raise IolabError(f"no runs in {self.path} yet")
            return _run(row)
        rows = self.db.execute("SELECT * FROM runs WHERE id LIKE ? ORDER BY created DESC",
                               (ref.replace("%", "") + "%",)).fetchall()
        if not rows:
            raise IolabError(f"no run {ref!r} in {self.path} (see `iolab runs`)")
        if len(rows) > 1 and rows[0][0] != ref:
            raise IolabError(f"{ref!r} matches {len(rows)} runs; give more of the id")
        return _run(rows[0])

    # trials ---------------------------------------------------------------
    def save_trial(self, run_id: str, r: TrialResult, raw: Any) -> None:
        with self.tx() as db:
            seq = db.execute("SELECT COUNT(*) FROM trials WHERE run_id=?", (run_id,)).fetchone()[0]
            db.execute("INSERT OR REPLACE INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (run_id, r.trial_id, r.config_id, r.repetition, _dump(r.params), r.status, r.error,
                        _dump(r.metrics), _dump(r.probes), _dump(r.flags), _dump(r.manifest),
                        _dump(raw) if raw is not None else None, r.started, r.ended, seq))
            db.execute("UPDATE runs SET updated=? WHERE id=?", (time.time(), run_id))

    def trials(self, run_id: str) -> list[TrialResult]:
        rows = self.db.execute(
            "SELECT trial_id, config_id, repetition, params_json, status, error, metrics_json, probes_json,"
            " manifest_json, flags_json, started, ended FROM trials WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
        return [TrialResult(trial_id=r[0], config_id=r[1], repetition=r[2], params=json.loads(r[3]), status=r[4],
                            error=r[5], metrics=json.loads(r[6]), probes=json.loads(r[7]), manifest=json.loads(r[8]),
                            flags=json.loads(r[9]), started=r[10], ended=r[11]) for r in rows]

    def raw(self, run_id: str, trial_id: str) -> Any:
        row = self.db.execute("SELECT raw_json FROM trials WHERE run_id=? AND trial_id=?", (run_id, trial_id)).fetchone()
        return json.loads(row[0]) if row and row[0] else None


def _dump(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def _run(r: tuple) -> RunRecord:
    return RunRecord(id=r[0], study=r[1], source=r[2], spec=json.loads(r[3]), options=json.loads(r[4]), status=r[5],
                     created=r[6], updated=r[7], environment=json.loads(r[8]), extra=json.loads(r[9]))
