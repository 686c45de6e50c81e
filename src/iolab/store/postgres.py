"""The PostgreSQL results store (store/base.py's `Store`): one team store many machines write to.

`--db postgresql://user@host/dbname` (or `postgres://`, or IOLAB_DB) selects it; psycopg 3
over Debian's libpq does the talking, so every libpq convention works unchanged:
`.pgpass`, `PGPASSWORD`, `PGSERVICE` and `pg_service.conf`, `?host=/run/socket/dir`, sslmode,
several hosts with `target_session_attrs`. The URL is parsed by libpq (store/urls.py) and shown
only without its password, and driver messages are scrubbed of it.

**Tables** in schema `iolab` (store/pglayout.py: found, moved from `public` for a store from
before, migrated by writers only, under an advisory lock). A reader (`read_only`) writes
nothing, so a role granted only SELECT, a read-only server and a compatible newer store all read.

**Whose run.** A run records the role that wrote it (`current_user`, enforced by the row-level
security policies of store/schema.py version 3: a role inserts runs only as itself and changes
only its own runs and their trials) and its host. `put_run` replaces a run of another origin only
when forced, and the database's triggers keep what was replaced in `run_history` and
`trial_history`, however it was replaced.

**Nothing lost.** Every write of a run is one operation (store/spool.py) in one transaction,
made with the time it was asked for. One the server cannot take is retried (a lost connection,
a read-only server, a serialization failure: store/pgerrors.py, by SQLSTATE) for the retry
window, then kept in the local spool; while anything is kept, later writes queue behind it,
and they are written in order, each once, once the server takes writes again (a later write,
paced so that failed attempts take at most a tenth of the run: `spool.Pacing`; closing;
`iolab push --spool`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from iolab.core.errors import IolabError, RefusedError
from iolab.core.model import TrialResult
from iolab.store import pglayout, rows, schema, spool
from iolab.store.base import OriginConflict, RunRecord, Store, holder_alive, this_host
from iolab.store.pgconn import OPEN_ANSWER_S, READ_ANSWER_S, Link, Watchdog, ask, open_error
from iolab.store.pgerrors import Refusal, StoreFailed
from iolab.store.spool import Op, Outcome, Spool
from iolab.store.urls import shown


class PostgresStore(Store):
    """The `Store` in a PostgreSQL database; the `--db` value is a libpq URL."""

    def __init__(self, url: str, what: str, read_only: bool = False, spooling: bool = True):
        self.url = url
        self.what = what
        self.location = shown(url)
        self.read_only = read_only
        self.unreadable: list[str] = []  # why runs() left runs out (store/rows.py readable_runs)
        self.spooling = spooling and not read_only
        self.spool = Spool(self.location)
        self._mine: set[str] = set()  # runs this process created: their claims may wait in the spool
        self._keeping = False  # writes are going to the spool (for one notice per outage)
        self._pace = spool.Pacing()  # when a write next tries to write what the spool keeps
        self._just_tried = False  # write_kept's attempt failed and nothing was kept since: close won't retry
        self.link = Link(url, what)
        try:
            self.role = str(self.conn.info.user)
            found = self._layout(read_only)
            self.t = found.prefix
            self.run_cols = rows.run_select(set(found.run_columns))
        except BaseException:
            self.link.close()
            raise

    @property
    def conn(self) -> psycopg.Connection:
        return self.link.conn

    def _layout(self, read_only: bool) -> pglayout.Layout:
        watch = Watchdog(OPEN_ANSWER_S)
        try:
            with watch.on(self.conn):
                return self._find_or_migrate(read_only)
        except psycopg.Error as exc:
            raise open_error(exc, self.what, self.url, self.role, read_only, watch) from None

    def _find_or_migrate(self, read_only: bool) -> pglayout.Layout:
        if read_only:
            found = pglayout.find(self.conn, self.location)
            if found.where == "none":
                raise IolabError(f"no iolab store in {self.location}")
            schema.check_read(found.stored, self.location)
            return found
        self.role = str(self.conn.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]  # current_user always returns one row
        return pglayout.migrate(self.conn, self.location)

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def check_target(cls, ref: str, what: str) -> None:
        """The server answers and takes writes now, and this role may write iolab's tables (or
        create them); a newer store this iolab may not write is refused."""
        ask(ref, what, lambda conn: pglayout.check_writable(conn, what, shown(ref)), read_only=False)

    @classmethod
    def quota(cls, ref: str, what: str) -> tuple[str, int, int] | None:
        return ask(ref, what, lambda conn: pglayout.quota(conn, shown(ref)))

    @classmethod
    def migrates(cls, ref: str, what: str) -> bool:
        return ask(ref, what, pglayout.may_migrate)

    @classmethod
    def exists(cls, ref: str, what: str) -> bool:
        return ask(ref, what, lambda conn: pglayout.find(conn, shown(ref)).where != "none")

    @classmethod
    def stored_schema(cls, ref: str, what: str) -> schema.Stored:
        return ask(ref, what, lambda conn: pglayout.find(conn, shown(ref)).stored)

    @classmethod
    def open(cls, ref: str, what: str, read_only: bool = False, spool: bool = True) -> PostgresStore:
        return cls(ref, what, read_only, spool)

    def close(self) -> None:
        try:
            if self.spooling:
                self._flush_spool(force=not self._just_tried)
        finally:
            self.link.close()

    # -- the server's answers -------------------------------------------------------------------
    def _read(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.link.retrying(lambda: self.conn.execute(query, params).fetchall(), answer_s=READ_ANSWER_S)

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection]:
        with self.conn.transaction():
            yield self.conn

    # -- writes: each one an operation, made now or kept in the spool ------------------------------
    def _write(self, op: Op) -> None:
        if self.read_only:
            raise IolabError(f"{self.location} was opened for reading")
        if not self.spooling:
            self.link.retrying(lambda: self._apply(op))
            return
        if self._flush_spool():  # earlier writes still wait: this one queues behind them
            self._keep(op, None)
            return
        started = time.monotonic()
        try:
            self.link.retrying(lambda: self._apply(op))
        except StoreFailed as exc:
            if exc.kind == "refused":
                self.spool.set_aside(op, str(exc))
                self.notify(f"{exc}: that {op['op']} of run {op['run_id']} is set aside in {self.spool.rejected}")
            else:
                self._pace.failed(time.monotonic() - started)
                self._keep(op, str(exc))

    def _keep(self, op: Op, reason: str | None) -> None:
        self.spool.add(op)
        self._just_tried = False
        if not self._keeping:
            self._keeping = True
            self.notify(f"{reason or f'results store {self.location}: earlier writes still wait'}; "
                        f"results are kept in the local spool {self.spool.path} and written when the store takes "
                        "them (nothing is lost)")

    def _flush_spool(self, force: bool = False) -> int:
        """Write what the spool kept, oldest first; returns how many still wait. Unless `force`d,
        only when the pace says the server may be tried again (one attempt, no retry window)."""
        if self.spool.empty():
            self._keeping = False
            self._pace.succeeded()
            return 0
        if not force and not self._pace.due():
            return self.spool.count()

        started = time.monotonic()
        done = self.spool.flush(self._spool_writer(window_s=0))  # one attempt each: no retry window
        if done.left:
            self._pace.failed(time.monotonic() - started)
        else:
            self._pace.succeeded()
        if done.written and not done.left:
            self.notify(f"results store {self.location} takes writes again: the {done.written} kept are written"
                        if self._keeping else
                        f"{done.written} write(s) kept in the local spool earlier are written to {self.location}")
        if done.rejected:
            self.notify(f"{done.rejected} kept write(s) the store will never take are set aside in "
                        f"{self.spool.rejected} ({done.reason})")
        self._keeping = self._keeping and bool(done.left)
        return done.left

    def replay(self) -> spool.Flushed:
        """`iolab push --spool`: write every kept operation now (each retried for the window)."""
        return self.spool.flush(self._spool_writer(window_s=None))

    def _spool_writer(self, window_s: float | None) -> spool.Writer:
        """How a flush writes one kept operation: retried for `window_s` (None: the retry window)."""
        def write(op: Op) -> tuple[Outcome, str | None]:
            try:
                self.link.retrying(lambda: self._apply(op), window_s=window_s)
            except StoreFailed as exc:
                return ("rejected" if exc.kind == "refused" else "later"), str(exc)
            return "written", None
        return write

    def waiting(self, run_id: str | None = None) -> int:
        return self.spool.count(run_id)

    def write_kept(self) -> None:
        if self.spooling:  # failed: closing right after tries no second time (a frozen server: another connect timeout)
            self._just_tried = self._flush_spool(force=True) > 0

    def _apply(self, op: Op) -> None:
        """One operation in one transaction, idempotent: made twice, the store is as after once."""
        at = float(op.get("at") or time.time())
        run_id = op["run_id"]
        with self._tx() as db:
            if op["op"] == "run":
                self._apply_run(db, op["record"])
            elif op["op"] == "trial":
                self._own_run(db, run_id)
                seq = db.execute(f"SELECT COALESCE(MAX(seq) + 1, 0) FROM {self.t}trials WHERE run_id=%s",
                                 (run_id,)).fetchone()
                values = rows.trial_values(run_id, spool.trial_of(op), op["raw"], seq[0] if seq else 0)
                _upsert_trial(db, self.t, values)
                db.execute(f"UPDATE {self.t}runs SET updated=%s WHERE id=%s", (at, run_id))
            elif op["op"] == "status":
                self._own_run(db, run_id)
                db.execute(f"UPDATE {self.t}runs SET status=%s, updated=%s WHERE id=%s", (op["status"], at, run_id))
            elif op["op"] == "extra":
                extra = rows.raw(self._own_run(db, run_id)[0]) or {}
                extra[op["key"]] = op["value"]
                db.execute(f"UPDATE {self.t}runs SET extra_json=%s, updated=%s WHERE id=%s",
                           (rows.dump(extra), at, run_id))
            elif op["op"] == "claim":
                db.execute(f"UPDATE {self.t}runs SET claimed_by=%s WHERE id=%s AND claimed_by IS NULL",
                           (op["owner"], run_id))
            elif op["op"] == "release":
                db.execute(f"UPDATE {self.t}runs SET claimed_by=NULL WHERE id=%s AND claimed_by=%s",
                           (run_id, op["owner"]))
            else:
                raise Refusal(f"unknown operation {op['op']!r}")

    def _own_run(self, db: psycopg.Connection, run_id: str) -> tuple[Any, ...]:
        """Lock the run's row (one writer per run at a time); its extra_json. A run that is not
        there, or not this role's (row-level security hides it from FOR UPDATE), is refused."""
        row = db.execute(f"SELECT extra_json FROM {self.t}runs WHERE id=%s FOR UPDATE", (run_id,)).fetchone()
        if row is None:
            raise Refusal(f"run {run_id} is not in the store, or not role {self.role}'s")
        return tuple(row)

    def _apply_run(self, db: psycopg.Connection, record: dict[str, Any]) -> None:
        rec = RunRecord(**record)
        values = rows.run_values(rec)[:-2]
        inserted = db.execute(f"INSERT INTO {self.t}runs ({rows.RUN_COLUMNS}) VALUES "
                              f"({', '.join(['%s'] * 10)}, current_user, %s) ON CONFLICT (id) DO NOTHING RETURNING 1",
                              (*values, rec.owner_host)).fetchone()
        if inserted is None:  # made before (a commit whose answer was lost): ours, or someone else's id
            row = db.execute(f"SELECT owner_role, owner_host FROM {self.t}runs WHERE id=%s", (rec.id,)).fetchone()
            if row is None or (row[0], row[1]) != (self.role, rec.owner_host):
                raise Refusal(f"run id {rec.id} is taken by {row[0] if row else '?'}@{row[1] if row else '?'}")

    # -- runs ---------------------------------------------------------------------------------
    def create_run(self, run_id: str, study: str, source: str, spec: dict[str, Any], options: dict[str, Any],
                   environment: dict[str, Any]) -> None:
        now = time.time()
        rec = RunRecord(run_id, study, source, spec, options, "running", now, now, environment, {}, self.role,
                        this_host())
        self._mine.add(run_id)
        self._write({"op": "run", "run_id": run_id, "at": now, "record": rec.__dict__})

    def set_status(self, run_id: str, status: str) -> None:
        self._write({"op": "status", "run_id": run_id, "at": time.time(), "status": status})

    def set_extra(self, run_id: str, key: str, value: Any) -> None:
        self._write({"op": "extra", "run_id": run_id, "at": time.time(), "key": key, "value": value})

    def origin_of(self, rec: RunRecord) -> tuple[str | None, str | None]:
        return self.role, rec.owner_host

    def put_run(self, rec: RunRecord, force: bool = False) -> RunRecord | None:
        ours = self.origin_of(rec)

        def op() -> RunRecord | None:
            with self._tx() as db:
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"iolab-run:{rec.id}",))
                row = db.execute(f"SELECT {self.run_cols} FROM {self.t}runs WHERE id=%s", (rec.id,)).fetchone()
                old = rows.run(row, self.location) if row else None
                if old is None:
                    db.execute(f"INSERT INTO {self.t}runs ({rows.RUN_COLUMNS}) VALUES "
                               f"({', '.join(['%s'] * 10)}, current_user, %s)", (*rows.run_values(rec)[:-2], ours[1]))
                    return None
                theirs = (old.owner_role, old.owner_host)
                if theirs != ours and not force:
                    raise OriginConflict(self.location, rec.id, old.origin, f"{ours[0]}@{ours[1]}")
                if theirs != ours:
                    db.execute(f"DELETE FROM {self.t}trials WHERE run_id=%s", (rec.id,))
                changed = db.execute(
                    f"UPDATE {self.t}runs SET study=%s, source=%s, spec_json=%s, options_json=%s, status=%s,"
                    f" created=%s, updated=%s, environment_json=%s, extra_json=%s, owner_role=current_user,"
                    f" owner_host=%s WHERE id=%s", (*rows.run_values(rec)[1:10], ours[1], rec.id)).rowcount
                left = db.execute(f"SELECT count(*) FROM {self.t}trials WHERE run_id=%s",
                                  (rec.id,)).fetchone() if theirs != ours else (0,)
                if changed != 1 or (left and left[0]):
                    raise RefusedError(f"{self.location} refuses role {self.role!r} changing run {rec.id} of "
                                       f"{old.origin} (row-level security): a role may write only its own runs, and "
                                       "only the tables' owner replaces a run of another origin")
                return old if theirs != ours else None
        try:
            return self.link.retrying(op)
        except StoreFailed as exc:
            if exc.sqlstate == "42501":  # no privilege, or a row-level security policy
                raise RefusedError(f"{exc}: role {self.role!r} may write only its own runs, and only the tables' "
                                   "owner replaces a run of another origin (docs/store.md#roles)") from None
            raise

    def runs(self, limit: int = 50) -> list[RunRecord]:
        found = self._read(f"SELECT {self.run_cols} FROM {self.t}runs ORDER BY created DESC LIMIT %s", (limit,))
        return rows.readable_runs(found, self.location, self.unreadable)

    def runs_with_prefix(self, prefix: str) -> list[RunRecord]:
        found = self._read(f"SELECT {self.run_cols} FROM {self.t}runs WHERE left(id, length(%s)) = %s"
                           " ORDER BY created DESC", (prefix, prefix))
        return [rows.run(r, self.location) for r in found]

    def claim_run(self, run_id: str, owner: str) -> str | None:
        """Decided by the server now. A run this process created may be claimed while the server
        cannot take writes (nobody else can know a new id): the claim then waits in the spool
        behind the run's creation. Any other run's claim is an error when it cannot be decided."""
        fresh = run_id in self._mine

        def claim(op: Op) -> None:
            self._write(op)

        if fresh and self.spooling and not self.spool.empty() and self._flush_spool():
            claim({"op": "claim", "run_id": run_id, "at": time.time(), "owner": owner})
            return None

        def op() -> str | None:
            with self._tx() as db:
                row = db.execute(f"SELECT claimed_by FROM {self.t}runs WHERE id=%s FOR UPDATE", (run_id,)).fetchone()
                if row is None:
                    origin = db.execute(f"SELECT owner_role, owner_host FROM {self.t}runs WHERE id=%s",
                                        (run_id,)).fetchone()
                    raise RefusedError(f"run {run_id} in {self.location} is "
                                       + (f"{origin[0] or 'from before owners were recorded'}@{origin[1] or '?'}'s: "
                                          f"role {self.role!r} may not add to it" if origin else "not there"))
                if row[0] is not None and row[0] != owner and holder_alive(row[0]):
                    return str(row[0])
                db.execute(f"UPDATE {self.t}runs SET claimed_by=%s WHERE id=%s", (owner, run_id))
            return None
        try:
            return self.link.retrying(op)
        except StoreFailed as exc:
            if fresh and self.spooling and exc.kind != "refused":
                self._keep({"op": "claim", "run_id": run_id, "at": time.time(), "owner": owner}, str(exc))
                return None
            raise IolabError(f"cannot claim run {run_id} now: {exc}") from None

    def release_run(self, run_id: str, owner: str) -> None:
        self._write({"op": "release", "run_id": run_id, "at": time.time(), "owner": owner})

    def holder(self, run_id: str) -> str | None:
        found = self._read(f"SELECT claimed_by FROM {self.t}runs WHERE id=%s", (run_id,))
        return None if not found or found[0][0] is None else str(found[0][0])

    # -- trials -------------------------------------------------------------------------------
    def save_trial(self, run_id: str, r: TrialResult, raw: Any) -> None:
        """One transaction, made now or kept in the spool (written later, once, in its place)."""
        self._write(spool.trial_op(run_id, r, raw, time.time()))

    def trials(self, run_id: str) -> list[TrialResult]:
        found = self._read(f"SELECT {rows.TRIAL_READ} FROM {self.t}trials WHERE run_id=%s ORDER BY seq", (run_id,))
        return [rows.trial(r, f"{self.location}: run {run_id}") for r in found]

    def raw(self, run_id: str, trial_id: str) -> Any:
        found = self._read(f"SELECT raw_json FROM {self.t}trials WHERE run_id=%s AND trial_id=%s", (run_id, trial_id))
        return rows.raw(found[0][0], f"{self.location}: run {run_id}") if found else None


def _upsert_trial(db: psycopg.Connection, prefix: str, values: tuple[Any, ...]) -> None:
    """An upsert keyed by (run, trial): written again after a commit whose answer was lost, it stays
    one row and keeps its place in the order (seq is never updated)."""
    db.execute(f"INSERT INTO {prefix}trials ({rows.TRIAL_COLUMNS}) VALUES ({', '.join(['%s'] * 15)})"
               " ON CONFLICT (run_id, trial_id) DO UPDATE SET config_id=excluded.config_id,"
               " repetition=excluded.repetition, params_json=excluded.params_json, status=excluded.status,"
               " error=excluded.error, metrics_json=excluded.metrics_json, probes_json=excluded.probes_json,"
               " flags_json=excluded.flags_json, manifest_json=excluded.manifest_json,"
               " raw_json=excluded.raw_json, started=excluded.started, ended=excluded.ended", values)
