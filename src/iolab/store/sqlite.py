"""The SQLite results store (store/base.py's `Store`): one file, versioned schema, one
transaction per trial.

A trial's metrics, probe data, flags, raw generator output and manifest are written
together the moment the trial ends, so an interrupted run loses nothing finished. WAL
and BEGIN IMMEDIATE let two runs write one file at once (a writer waits up to 30 s).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from iolab.core.errors import InputError
from iolab.core.inputs import check_writable, path_problem
from iolab.core.model import TrialResult
from iolab.store import rows, schema
from iolab.store.base import RunRecord, Store, holder_alive

SQLITE_MAGIC = b"SQLite format 3\x00"
URL_PREFIX = "sqlite://"  # sqlite:///abs/path is the same as /abs/path


class SqliteStore(Store):
    """The `Store` in one SQLite file (WAL, synchronous=FULL): the `--db` value is its path."""

    def __init__(self, path: Path):
        self.path = path
        self.location = str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self._migrate()

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def check_target(cls, ref: str, what: str) -> None:
        """A file could be written there (no directory, device, /proc, read-only mount), and an
        existing non-empty file is an SQLite database (iolab never overwrites anything else)."""
        path = _path(ref)
        check_writable(path, what)
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as f:
                if f.read(16) != SQLITE_MAGIC:
                    raise InputError(f"{what} {path}: is not an SQLite database (iolab will not overwrite it)")

    @classmethod
    def exists(cls, ref: str, what: str) -> bool:
        path = _path(ref)
        problem = path_problem(str(path))
        if problem:
            raise InputError(f"{what} {str(path)[:200]!r}: the path {problem}")
        if not path.exists():
            return False
        if not path.is_file():
            raise InputError(f"{what} {path}: is not a regular file")
        return True

    @classmethod
    def stored_version(cls, ref: str, what: str) -> int | None:
        if not cls.exists(ref, what):
            return None
        path = _path(ref)
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
            try:
                row = con.execute("SELECT value FROM meta WHERE key=?", (schema.VERSION_KEY,)).fetchone()
            finally:
                con.close()
        except sqlite3.Error as exc:
            raise InputError(f"{what} {path}: cannot be read as iolab's results database ({exc})") from None
        return schema.parse_version(row[0] if row else None, str(path))

    @classmethod
    def open(cls, ref: str, what: str) -> SqliteStore:
        path = _path(ref)
        try:
            return cls(path)
        except (sqlite3.Error, OSError) as exc:
            raise InputError(f"{what} {path}: cannot be used as iolab's results database ({exc})") from None

    def _migrate(self) -> None:
        """store/schema.py's pending migrations, in one transaction (BEGIN IMMEDIATE: one migrator at a time)."""
        with self.tx() as db:
            db.execute(schema.META)
            row = db.execute("SELECT value FROM meta WHERE key=?", (schema.VERSION_KEY,)).fetchone()
            todo = schema.pending(schema.parse_version(row[0] if row else None, self.location), self.location)
            for m in todo:
                for statement in m.statements:
                    db.execute(statement)
            if todo:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (schema.VERSION_KEY, str(todo[-1].version)))

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
                       (run_id, study, source, rows.dump(spec), rows.dump(options), "running", now, now,
                        rows.dump(environment), "{}"))

    def set_status(self, run_id: str, status: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE runs SET status=?, updated=? WHERE id=?", (status, time.time(), run_id))

    def set_extra(self, run_id: str, key: str, value: Any) -> None:
        """Run-level data that is not a trial (e.g. a sanity-gate result)."""
        with self.tx() as db:
            extra = json.loads(db.execute("SELECT extra_json FROM runs WHERE id=?", (run_id,)).fetchone()[0])
            extra[key] = value
            db.execute("UPDATE runs SET extra_json=?, updated=? WHERE id=?", (rows.dump(extra), time.time(), run_id))

    def runs(self, limit: int = 50) -> list[RunRecord]:
        found = self.db.execute(f"SELECT {rows.RUN_COLUMNS} FROM runs ORDER BY created DESC LIMIT ?",
                                (limit,)).fetchall()
        return [rows.run(r) for r in found]

    def runs_with_prefix(self, prefix: str) -> list[RunRecord]:
        found = self.db.execute(f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE substr(id, 1, length(?)) = ?"
                                " ORDER BY created DESC", (prefix, prefix)).fetchall()
        return [rows.run(r) for r in found]

    def put_run(self, rec: RunRecord) -> None:
        values = (rec.id, rec.study, rec.source, rows.dump(rec.spec), rows.dump(rec.options), rec.status,
                  rec.created, rec.updated, rows.dump(rec.environment), rows.dump(rec.extra))
        with self.tx() as db:
            db.execute(f"INSERT INTO runs ({rows.RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE"
                       " SET study=excluded.study, source=excluded.source, spec_json=excluded.spec_json,"
                       " options_json=excluded.options_json, status=excluded.status, created=excluded.created,"
                       " updated=excluded.updated, environment_json=excluded.environment_json,"
                       " extra_json=excluded.extra_json", values)

    def claim_run(self, run_id: str, owner: str) -> str | None:
        """Make `owner` (a core.owner token) the process running `run_id`, atomically.

        Returns None on success, or the token of another owner that is still alive (then
        nothing changes): two processes must never run the same run at once. Kept in
        the meta table (key run-owner:<id>) so no schema change is needed."""
        key = f"run-owner:{run_id}"
        with self.tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            if row is not None and row[0] != owner and holder_alive(row[0]):
                return str(row[0])
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, owner))
        return None

    def release_run(self, run_id: str, owner: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM meta WHERE key=? AND value=?", (f"run-owner:{run_id}", owner))

    # trials ---------------------------------------------------------------
    def save_trial(self, run_id: str, r: TrialResult, raw: Any) -> None:
        with self.tx() as db:
            # a trial saved again keeps its place (a push repeated, a commit retried)
            seq = db.execute("SELECT COALESCE((SELECT seq FROM trials WHERE run_id=? AND trial_id=?),"
                             " (SELECT COALESCE(MAX(seq) + 1, 0) FROM trials WHERE run_id=?))",
                             (run_id, r.trial_id, run_id)).fetchone()[0]
            db.execute(f"INSERT OR REPLACE INTO trials ({rows.TRIAL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       rows.trial_values(run_id, r, raw, seq))
            db.execute("UPDATE runs SET updated=? WHERE id=?", (time.time(), run_id))

    def trials(self, run_id: str) -> list[TrialResult]:
        found = self.db.execute(f"SELECT {rows.TRIAL_READ} FROM trials WHERE run_id=? ORDER BY seq",
                                (run_id,)).fetchall()
        return [rows.trial(r) for r in found]

    def raw(self, run_id: str, trial_id: str) -> Any:
        row = self.db.execute("SELECT raw_json FROM trials WHERE run_id=? AND trial_id=?",
                              (run_id, trial_id)).fetchone()
        return rows.raw(row[0]) if row else None


def _path(ref: str) -> Path:
    return Path(ref[len(URL_PREFIX):] if ref.startswith(URL_PREFIX) else ref)
