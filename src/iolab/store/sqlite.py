"""The SQLite results store (store/base.py's `Store`): one file, versioned schema, one
transaction per trial.

A trial's metrics, probe data, flags, raw generator output and manifest are written
together the moment the trial ends, so an interrupted run loses nothing finished. WAL
and BEGIN IMMEDIATE let two runs write one file at once (a writer waits up to 30 s).
A reader (`read_only`) neither migrates nor changes the file's journal mode: an older file,
and a compatible newer one, are read as they are. A run records its host as its origin
(SQLite has no roles); a run pushed in keeps the origin it had, and one of another origin is
replaced only when forced, the replaced one kept in `run_history`/`trial_history`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.request import pathname2url

from iolab.core.errors import DataDirUnwritable, InputError
from iolab.core.inputs import check_writable, path_problem
from iolab.core.model import TrialResult
from iolab.store import rows, schema
from iolab.store.base import OriginConflict, RunRecord, Store, holder_alive, this_host

SQLITE_MAGIC = b"SQLite format 3\x00"
URL_PREFIX = "sqlite://"  # sqlite:///abs/path is the same as /abs/path


def _on_read_only_mount(path: Path) -> bool:
    """Is the file on a mount that cannot be written (opened immutable for reading then)?"""
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class SqliteStore(Store):
    """The `Store` in one SQLite file (WAL, synchronous=FULL): the `--db` value is its path."""

    def __init__(self, path: Path, read_only: bool = False):
        self.path = path
        self.location = str(path)
        self.read_only = read_only
        self.unreadable: list[str] = []  # why runs() left runs out (store/rows.py readable_runs)
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        if read_only and _on_read_only_mount(path):
            # a WAL database cannot be opened, even mode=ro, where its -shm cannot be made; on a
            # read-only mount nothing can change it, which is what immutable=1 tells SQLite
            self.db = sqlite3.connect(f"file:{pathname2url(str(path))}?immutable=1", uri=True, timeout=30,
                                      isolation_level=None)
        else:
            self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        try:
            if read_only:
                schema.check_read(self._stored(), self.location)
            else:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
                self._migrate()
            self.run_cols = rows.run_select({r[1] for r in self.db.execute("PRAGMA table_info(runs)")})
        except BaseException:
            self.db.close()
            raise

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
    def stored_schema(cls, ref: str, what: str) -> schema.Stored:
        if not cls.exists(ref, what):
            return schema.Stored(None)
        path = _path(ref)
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
            try:
                return _stored(con, str(path))
            finally:
                con.close()
        except sqlite3.Error as exc:
            raise InputError(f"{what} {path}: cannot be read as iolab's results database ({exc})") from None

    @classmethod
    def open(cls, ref: str, what: str, read_only: bool = False, spool: bool = True) -> SqliteStore:
        path = _path(ref)
        try:
            return cls(path, read_only)
        except (sqlite3.Error, OSError) as exc:
            raise InputError(f"{what} {path}: cannot be used as iolab's results database ({exc})") from None

    def _stored(self) -> schema.Stored:
        return _stored(self.db, self.location)

    def _migrate(self) -> None:
        """store/schema.py's pending migrations, in one transaction (BEGIN IMMEDIATE: one migrator at a
        time); nothing written when none is pending."""
        if not schema.pending(self._stored(), self.location):
            return
        with self.tx() as db:
            todo = schema.pending(self._stored(), self.location)
            db.execute(schema.meta_table("sqlite"))
            for m in todo:
                for statement in m.for_backend("sqlite"):
                    db.execute(statement)
            if todo:
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", schema.meta_rows(todo[-1].version))

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. A disk that is full or read-only is DataDirUnwritable: every write
        after it would fail the same way, so the run stops (runner.Runner.run), not each trial."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            primary = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # SQLITE_IOERR_WRITE: SQLITE_IOERR
            if primary not in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR):
                raise
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise DataDirUnwritable(f"cannot write the results database {self.path} ({exc})") from None

    def close(self) -> None:
        self.db.close()

    # runs -----------------------------------------------------------------
    def create_run(self, run_id: str, study: str, source: str, spec: dict[str, Any], options: dict[str, Any],
                   environment: dict[str, Any]) -> None:
        now = time.time()
        rec = RunRecord(run_id, study, source, spec, options, "running", now, now, environment, {}, None, this_host())
        with self.tx() as db:
            db.execute(f"INSERT INTO runs ({rows.RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows.run_values(rec))

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
        found = self.db.execute(f"SELECT {self.run_cols} FROM runs ORDER BY created DESC LIMIT ?",
                                (limit,)).fetchall()
        return rows.readable_runs(found, self.location, self.unreadable)

    def runs_with_prefix(self, prefix: str) -> list[RunRecord]:
        found = self.db.execute(f"SELECT {self.run_cols} FROM runs WHERE substr(id, 1, length(?)) = ?"
                                " ORDER BY created DESC", (prefix, prefix)).fetchall()
        return [rows.run(r, self.location) for r in found]

    def origin_of(self, rec: RunRecord) -> tuple[str | None, str | None]:
        return rec.owner_role, rec.owner_host

    def put_run(self, rec: RunRecord, force: bool = False) -> RunRecord | None:
        ours = self.origin_of(rec)
        with self.tx() as db:
            row = db.execute(f"SELECT {self.run_cols} FROM runs WHERE id=?", (rec.id,)).fetchone()
            old = rows.run(row, self.location) if row else None
            replaced = old is not None and (old.owner_role, old.owner_host) != ours
            if old is not None and replaced and not force:
                raise OriginConflict(self.location, rec.id, old.origin, rec.origin)
            if replaced:  # the triggers keep the old run and its trials in the history tables
                db.execute("DELETE FROM trials WHERE run_id=?", (rec.id,))
            db.execute(f"INSERT INTO runs ({rows.RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
                       " ON CONFLICT(id) DO UPDATE SET study=excluded.study, source=excluded.source,"
                       " spec_json=excluded.spec_json,"
                       " options_json=excluded.options_json, status=excluded.status, created=excluded.created,"
                       " updated=excluded.updated, environment_json=excluded.environment_json,"
                       " extra_json=excluded.extra_json, owner_role=excluded.owner_role,"
                       " owner_host=excluded.owner_host", rows.run_values(rec))
        return old if replaced else None

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

    def holder(self, run_id: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (f"run-owner:{run_id}",)).fetchone()
        return None if row is None else str(row[0])

    # trials ---------------------------------------------------------------
    def save_trial(self, run_id: str, r: TrialResult, raw: Any) -> None:
        with self.tx() as db:
            # a trial saved again keeps its place (a push repeated, a commit retried)
            seq = db.execute("SELECT COALESCE((SELECT seq FROM trials WHERE run_id=? AND trial_id=?),"
                             " (SELECT COALESCE(MAX(seq) + 1, 0) FROM trials WHERE run_id=?))",
                             (run_id, r.trial_id, run_id)).fetchone()[0]
            db.execute(f"INSERT INTO trials ({rows.TRIAL_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                       " ON CONFLICT (run_id, trial_id) DO UPDATE SET config_id=excluded.config_id,"
                       " repetition=excluded.repetition, params_json=excluded.params_json, status=excluded.status,"
                       " error=excluded.error, metrics_json=excluded.metrics_json, probes_json=excluded.probes_json,"
                       " flags_json=excluded.flags_json, manifest_json=excluded.manifest_json,"
                       " raw_json=excluded.raw_json, started=excluded.started, ended=excluded.ended",
                       rows.trial_values(run_id, r, raw, seq))
            db.execute("UPDATE runs SET updated=? WHERE id=?", (time.time(), run_id))

    def trials(self, run_id: str) -> list[TrialResult]:
        found = self.db.execute(f"SELECT {rows.TRIAL_READ} FROM trials WHERE run_id=? ORDER BY seq",
                                (run_id,)).fetchall()
        return [rows.trial(r, f"{self.location}: run {run_id}") for r in found]

    def raw(self, run_id: str, trial_id: str) -> Any:
        row = self.db.execute("SELECT raw_json FROM trials WHERE run_id=? AND trial_id=?",
                              (run_id, trial_id)).fetchone()
        return rows.raw(row[0], f"{self.location}: run {run_id}") if row else None


def _stored(db: sqlite3.Connection, location: str) -> schema.Stored:
    """What the file's meta says about its schema (nothing yet: a new file)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone() is None:
        return schema.Stored(None)
    keys = (schema.VERSION_KEY, schema.MIN_READER_KEY, schema.MIN_WRITER_KEY)
    found = db.execute(f"SELECT key, value FROM meta WHERE key IN ({', '.join('?' * len(keys))})", keys).fetchall()
    return schema.stored(dict(found), location)


def _path(ref: str) -> Path:
    return Path(ref[len(URL_PREFIX):] if ref.startswith(URL_PREFIX) else ref)
