"""The PostgreSQL results store (store/base.py's `Store`): one team store many machines write to.

`--db postgresql://user@host/dbname` (or `postgres://`, or IOLAB_DB) selects it; psycopg 3
over Debian's libpq does the talking, so every libpq convention works unchanged:
`.pgpass`, `PGPASSWORD`, `PGSERVICE` and `pg_service.conf`, `?host=/run/socket/dir`, sslmode.
A password written into the URL is accepted but never shown: `location` (what messages,
reports and manifests print) is the URL with it replaced by `***`, and driver messages are
scrubbed of it too.

Schema: store/schema.py's migrations, applied on first use under an advisory lock (two
processes opening a new store at once migrate it once). Each trial is one transaction that
locks its run's row (one writer per run at a time, any number of runs at once). A lost
connection is retried (store/spool.py): a trial that still cannot be written is kept in a
local spool file and written the moment the server answers again (at the next write, or at
close), so nothing finished is lost and nothing is written twice (a trial is an upsert).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import psycopg

from iolab.core.errors import InputError, IolabError
from iolab.core.model import TrialResult
from iolab.store import rows, schema
from iolab.store.base import RunRecord, Store, holder_alive
from iolab.store.spool import Outcome, Spool
from iolab.store.urls import shown as redact

CONNECT_TIMEOUT_S = 10
MIGRATION_LOCK = 0x10_1AB_5C4E  # pg_advisory_xact_lock key: one migrator per database
T = TypeVar("T")


def retry_window_s() -> float:
    """How long a write keeps retrying a lost connection before a trial goes to the spool
    (IOLAB_DB_RETRY_S, default 30 s: a server restart, a failover)."""
    try:
        return max(0.0, float(os.environ.get("IOLAB_DB_RETRY_S", "30")))
    except ValueError:
        raise InputError(f"IOLAB_DB_RETRY_S={os.environ['IOLAB_DB_RETRY_S'][:40]!r}: not a number of seconds") from None


class PostgresStore(Store):
    """The `Store` in a PostgreSQL database; the `--db` value is a libpq URL."""

    def __init__(self, url: str, what: str):
        self.url = url
        self.what = what
        self.location = redact(url)
        self.conn = _connect(url, what)
        self.spool = Spool(self.location)
        try:
            self._migrate()
            self._flush_spool()
        except BaseException:
            self.conn.close()
            raise

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def check_target(cls, ref: str, what: str) -> None:
        """The server answers and this role may create iolab's tables (or write to them)."""
        with _connect(ref, what) as conn:
            have_tables = conn.execute("SELECT to_regclass('trials') IS NOT NULL").fetchone()
            if have_tables and have_tables[0]:
                ok = conn.execute("SELECT has_table_privilege('trials', 'INSERT')"
                                  " AND has_table_privilege('runs', 'INSERT, UPDATE')").fetchone()
                problem = "may not write to iolab's tables"
            else:
                ok = conn.execute("SELECT has_schema_privilege(current_schema(), 'CREATE')").fetchone()
                problem = "may not create iolab's tables (no CREATE on the schema)"
            if not (ok and ok[0]):
                raise InputError(f"{what} {redact(ref)}: role {conn.info.user!r} {problem}")

    @classmethod
    def exists(cls, ref: str, what: str) -> bool:
        with _connect(ref, what) as conn:
            row = conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()
            return bool(row and row[0])

    @classmethod
    def stored_version(cls, ref: str, what: str) -> int | None:
        with _connect(ref, what) as conn:
            if conn.execute("SELECT to_regclass('meta') IS NULL").fetchone() == (True,):
                return None
            row = conn.execute("SELECT value FROM meta WHERE key=%s", (schema.VERSION_KEY,)).fetchone()
        return schema.parse_version(row[0] if row else None, redact(ref))

    @classmethod
    def open(cls, ref: str, what: str) -> PostgresStore:
        return cls(ref, what)

    def _migrate(self) -> None:
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            self.conn.execute(schema.META)
            row = self.conn.execute("SELECT value FROM meta WHERE key=%s", (schema.VERSION_KEY,)).fetchone()
            todo = schema.pending(schema.parse_version(row[0] if row else None, self.location), self.location)
            for m in todo:
                for statement in m.statements:
                    self.conn.execute(statement)
            if todo:
                self.conn.execute("INSERT INTO meta VALUES (%s, %s) "
                                  "ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                                  (schema.VERSION_KEY, str(todo[-1].version)))

    def close(self) -> None:
        try:
            self._flush_spool()
        finally:
            self.conn.close()

    # -- connection loss ----------------------------------------------------------------------
    def _retrying(self, op: Callable[[], T], window_s: float | None = None) -> T:
        """`op` (one transaction), again on a fresh connection while the server is away, for up to
        the retry window; then the last connection error as an IolabError."""
        deadline = time.monotonic() + (retry_window_s() if window_s is None else window_s)
        pause = 0.2
        while True:
            try:
                if self.conn.closed or self.conn.broken:
                    self.conn.close()
                    self.conn = _driver_connect(self.url)
                return op()
            except psycopg.OperationalError as exc:
                if time.monotonic() + pause > deadline:
                    raise IolabError(f"results store {self.location}: connection lost "
                                     f"({_scrub(str(exc), self.url)})") from None
                time.sleep(pause)
                pause = min(pause * 2, 2.0)

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection]:
        with self.conn.transaction():
            yield self.conn

    # -- runs ---------------------------------------------------------------------------------
    def create_run(self, run_id: str, study: str, source: str, spec: dict[str, Any], options: dict[str, Any],
                   environment: dict[str, Any]) -> None:
        now = time.time()
        self.put_run(RunRecord(run_id, study, source, spec, options, "running", now, now, environment, {}),
                     replace=False)

    def put_run(self, rec: RunRecord, replace: bool = True) -> None:
        values = (rec.id, rec.study, rec.source, rows.dump(rec.spec), rows.dump(rec.options), rec.status,
                  rec.created, rec.updated, rows.dump(rec.environment), rows.dump(rec.extra))
        conflict = (" ON CONFLICT (id) DO UPDATE SET study=excluded.study, source=excluded.source,"
                    " spec_json=excluded.spec_json, options_json=excluded.options_json, status=excluded.status,"
                    " created=excluded.created, updated=excluded.updated,"
                    " environment_json=excluded.environment_json, extra_json=excluded.extra_json") if replace else ""

        def op() -> None:
            with self._tx() as db:
                db.execute(f"INSERT INTO runs ({rows.RUN_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
                           + conflict, values)
        self._retrying(op)

    def set_status(self, run_id: str, status: str) -> None:
        """After the spool is flushed: a run marked complete has its trials in the store."""
        def op() -> None:
            with self._tx() as db:
                db.execute("UPDATE runs SET status=%s, updated=%s WHERE id=%s", (status, time.time(), run_id))
        self._flush_spool()
        self._retrying(op)

    def set_extra(self, run_id: str, key: str, value: Any) -> None:
        def op() -> None:
            with self._tx() as db:
                row = db.execute("SELECT extra_json FROM runs WHERE id=%s FOR UPDATE", (run_id,)).fetchone()
                extra = rows.raw(row[0]) if row else {}
                extra[key] = value
                db.execute("UPDATE runs SET extra_json=%s, updated=%s WHERE id=%s",
                           (rows.dump(extra), time.time(), run_id))
        self._retrying(op)

    def runs(self, limit: int = 50) -> list[RunRecord]:
        found = self._retrying(lambda: self.conn.execute(
            f"SELECT {rows.RUN_COLUMNS} FROM runs ORDER BY created DESC LIMIT %s", (limit,)).fetchall())
        return [rows.run(r) for r in found]

    def runs_with_prefix(self, prefix: str) -> list[RunRecord]:
        found = self._retrying(lambda: self.conn.execute(
            f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE left(id, length(%s)) = %s ORDER BY created DESC",
            (prefix, prefix)).fetchall())
        return [rows.run(r) for r in found]

    def claim_run(self, run_id: str, owner: str) -> str | None:
        key = f"run-owner:{run_id}"

        def op() -> str | None:
            with self._tx() as db:
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
                row = db.execute("SELECT value FROM meta WHERE key=%s", (key,)).fetchone()
                if row is not None and row[0] != owner and holder_alive(row[0]):
                    return str(row[0])
                db.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                           (key, owner))
            return None
        return self._retrying(op)

    def release_run(self, run_id: str, owner: str) -> None:
        def op() -> None:
            with self._tx() as db:
                db.execute("DELETE FROM meta WHERE key=%s AND value=%s", (f"run-owner:{run_id}", owner))
        self._retrying(op)

    # -- trials -------------------------------------------------------------------------------
    def save_trial(self, run_id: str, r: TrialResult, raw: Any) -> None:
        """One transaction; while the server is away, retried, then spooled (written later, once).
        Trials kept earlier go first, so the store keeps the order they ended in."""
        if self._flush_spool():
            self.spool.add(run_id, r, raw)
            return
        try:
            self._retrying(lambda: self._write_trial(run_id, r, raw))
        except IolabError:
            self.spool.add(run_id, r, raw)

    def _write_trial(self, run_id: str, r: TrialResult, raw: Any) -> None:
        """An upsert keyed by (run, trial): written again after a commit whose answer was lost, it
        stays one row and keeps its place in the order."""
        with self._tx() as db:
            db.execute("SELECT 1 FROM runs WHERE id=%s FOR UPDATE", (run_id,))
            row = db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM trials WHERE run_id=%s", (run_id,)).fetchone()
            values = rows.trial_values(run_id, r, raw, row[0] if row else 0)
            db.execute(f"INSERT INTO trials ({rows.TRIAL_COLUMNS}) VALUES ({', '.join(['%s'] * 15)})"
                       " ON CONFLICT (run_id, trial_id) DO UPDATE SET config_id=excluded.config_id,"
                       " repetition=excluded.repetition, params_json=excluded.params_json, status=excluded.status,"
                       " error=excluded.error, metrics_json=excluded.metrics_json, probes_json=excluded.probes_json,"
                       " flags_json=excluded.flags_json, manifest_json=excluded.manifest_json,"
                       " raw_json=excluded.raw_json, started=excluded.started, ended=excluded.ended", values)
            db.execute("UPDATE runs SET updated=%s WHERE id=%s", (time.time(), run_id))

    def _flush_spool(self) -> int:
        """Write what the spool kept (oldest first); what still cannot be written stays there (how
        many: the return value)."""
        def write(run_id: str, trial: TrialResult, raw: Any) -> Outcome:
            try:
                self._retrying(lambda: self._write_trial(run_id, trial, raw), window_s=0)
            except IolabError:
                return "later"  # the connection: still away
            except psycopg.Error:
                return "rejected"  # the server said no (no such run, a constraint): never will say yes
            return "written"
        return self.spool.flush(write)

    def trials(self, run_id: str) -> list[TrialResult]:
        found = self._retrying(lambda: self.conn.execute(
            f"SELECT {rows.TRIAL_READ} FROM trials WHERE run_id=%s ORDER BY seq", (run_id,)).fetchall())
        return [rows.trial(r) for r in found]

    def raw(self, run_id: str, trial_id: str) -> Any:
        row = self._retrying(lambda: self.conn.execute(
            "SELECT raw_json FROM trials WHERE run_id=%s AND trial_id=%s", (run_id, trial_id)).fetchone())
        return rows.raw(row[0]) if row else None


def _connect(url: str, what: str) -> psycopg.Connection:
    """A connection in autocommit mode (transactions are explicit); InputError naming the redacted URL."""
    if "\x00" in url:
        raise InputError(f"{what} {redact(url.replace(chr(0), ''))[:200]!r}: contains a NUL byte")
    try:
        return _driver_connect(url)
    except psycopg.Error as exc:
        raise InputError(f"{what} {redact(url)}: cannot connect ({_scrub(str(exc), url)})") from None


def _driver_connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="iolab")


def _scrub(message: str, url: str) -> str:
    """A driver message with the URL's password (if any) removed, one line."""
    try:
        password = urlsplit(url).password
        password = password or dict(parse_qsl(urlsplit(url).query)).get("password")
    except ValueError:
        password = None
    if password:
        message = message.replace(password, "***")
    return " ".join(message.split())[:500]

