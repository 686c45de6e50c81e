"""Where iolab's tables are in a PostgreSQL database, and bringing them to this iolab's schema.

iolab keeps its tables in their own schema, `iolab` (store/schema.py SCHEMA), so it shares a
database politely with whatever else lives there. A store made by an iolab before that has
`meta`, `runs` and `trials` in `public`: it is still read where it is, and the first writer
moves it (`ALTER TABLE ... SET SCHEMA`: the data stays, nothing is copied) and leaves in
`public.meta` a schema version no older iolab accepts (TOMBSTONE_VERSION), so an iolab that
looks only in `public` refuses the store instead of starting an empty one beside it. A `public`
table called `meta` that is not iolab's is left alone.

Reading never changes anything (`find`); writing migrates (`migrate`) under an advisory lock,
in one transaction, only when something is pending: opening an up-to-date store writes nothing,
so a read-only server or role opens it as well as any.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import psycopg

from iolab.core.errors import InputError, IolabError
from iolab.store import schema
from iolab.store.pgconn import LOCK_WAIT_S, MIGRATION_LOCK_WAIT_S
from iolab.store.schema import SCHEMA, TOMBSTONE_VERSION, Stored

MIGRATION_LOCK = 0x10_1AB_5C4E  # pg_advisory_xact_lock key: one migrator per database
Where = Literal["iolab", "public", "none"]


@dataclass(frozen=True)
class Layout:
    where: Where  # "iolab": our schema; "public": a store from before schemas; "none": no store yet
    stored: Stored
    run_columns: frozenset[str]

    @property
    def prefix(self) -> str:
        """What goes before a table name in SQL."""
        return f"{SCHEMA}." if self.where != "public" else "public."


def find(conn: psycopg.Connection, location: str) -> Layout:
    """The store's layout and version, read without writing."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL, to_regclass('public.meta') IS NOT NULL"
                       " AND to_regclass('public.runs') IS NOT NULL AND to_regclass('public.trials') IS NOT NULL",
                       (f"{SCHEMA}.meta",)).fetchone()
    ours, legacy = bool(row and row[0]), bool(row and row[1])
    if ours:
        return _layout(conn, "iolab", location)
    if legacy and _looks_like_iolab(conn):
        version = conn.execute("SELECT value FROM public.meta WHERE key=%s", (schema.VERSION_KEY,)).fetchone()
        number = _int(str(version[0])) if version else None
        if number is not None and number <= 2:  # the versions iolab ever kept in public
            return _layout(conn, "public", location)
        if number == TOMBSTONE_VERSION:
            raise IolabError(f"{location}: iolab's tables were moved from schema public to schema {SCHEMA}, "
                             "which is not there (dropped?)")
    return Layout("none", Stored(None), frozenset())


def _layout(conn: psycopg.Connection, where: Where, location: str) -> Layout:
    prefix = f"{SCHEMA}." if where == "iolab" else "public."
    keys = (schema.VERSION_KEY, schema.MIN_READER_KEY, schema.MIN_WRITER_KEY)
    found = conn.execute(f"SELECT key, value FROM {prefix}meta WHERE key = ANY(%s)", (list(keys),)).fetchall()
    values: dict[str, str] = dict(found)
    columns = conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s)"
                           " AND attnum > 0 AND NOT attisdropped", (f"{prefix}runs",)).fetchall()
    return Layout(where, schema.stored(values, location), frozenset(c[0] for c in columns))


def _looks_like_iolab(conn: psycopg.Connection) -> bool:
    """public.meta, runs and trials are iolab's (from before schemas), not another application's
    tables of the same names: iolab's columns are there."""
    found = conn.execute("SELECT count(*) FROM pg_attribute WHERE NOT attisdropped AND ("
                         " (attrelid = 'public.meta'::regclass AND attname IN ('key', 'value')) OR"
                         " (attrelid = 'public.runs'::regclass AND attname IN ('spec_json', 'environment_json')) OR"
                         " (attrelid = 'public.trials'::regclass AND attname IN ('manifest_json', 'seq')))").fetchone()
    return found == (6,)


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def migrate(conn: psycopg.Connection, location: str) -> Layout:
    """Bring the store to this iolab's schema (creating it, or moving one from `public`), or leave a
    newer compatible one as it is; IolabError (store/schema.py) when this iolab may not write it.
    psycopg errors (a role that may not create, a read-only server) are the caller's to explain."""
    found = find(conn, location)
    todo = schema.pending(found.stored, location)
    if found.where == "iolab" and (not todo or schema.writable_as_is(todo) and not may_migrate(conn)):
        return found  # up to date, or missing only what the server enforces (quotas): its owner adds that
    # a session lock taken before the transaction: the transaction then starts after the other
    # migrator's commit and sees its tables (a lock taken inside would leave the catalog cache
    # of an earlier snapshot, and the migration would run twice)
    conn.execute(f"SET lock_timeout = '{MIGRATION_LOCK_WAIT_S}s'")  # another's migration: worth waiting for
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    finally:
        conn.execute(f"SET lock_timeout = '{LOCK_WAIT_S}s'")
    try:
        _migrate_locked(conn, location)
    finally:
        if not conn.closed and not conn.broken:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return find(conn, location)


def may_migrate(conn: psycopg.Connection) -> bool:
    """This role may alter iolab's tables (it owns them, or is a member of the role that does) and
    create in its schema: what every migration needs."""
    row = conn.execute("SELECT has_schema_privilege(%s, 'CREATE') AND pg_has_role(c.relowner, 'USAGE')"
                       " FROM pg_class c WHERE c.oid = to_regclass(%s)", (SCHEMA, f"{SCHEMA}.runs")).fetchone()
    return bool(row and row[0])


def _migrate_locked(conn: psycopg.Connection, location: str) -> None:
    with conn.transaction():
        found = find(conn, location)  # again, under the lock: another process may have done it
        todo = schema.pending(found.stored, location)
        if found.where == "public":
            _move_from_public(conn)
        elif found.where == "none":
            if conn.execute("SELECT to_regnamespace(%s) IS NULL", (SCHEMA,)).fetchone() == (True,):
                conn.execute(f"CREATE SCHEMA {SCHEMA}")
            conn.execute(schema.meta_table("postgres"))
        for m in todo:
            for statement in m.for_backend("postgres"):
                conn.execute(statement)
        if todo:
            for key, value in schema.meta_rows(todo[-1].version):
                conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES (%s, %s) "
                             "ON CONFLICT (key) DO UPDATE SET value=excluded.value", (key, value))


def _move_from_public(conn: psycopg.Connection) -> None:
    """A store from before schemas: its tables (with their data, indexes and keys) into ours, and a
    tombstone in public.meta for the iolabs that only look there."""
    if conn.execute("SELECT to_regnamespace(%s) IS NULL", (SCHEMA,)).fetchone() == (True,):
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
    for table in ("runs", "trials"):
        conn.execute(f"ALTER TABLE public.{table} SET SCHEMA {SCHEMA}")
    conn.execute(schema.meta_table("postgres"))
    conn.execute(f"INSERT INTO {SCHEMA}.meta SELECT key, value FROM public.meta WHERE key=%s",
                 (schema.VERSION_KEY,))
    conn.execute("UPDATE public.meta SET value=%s WHERE key=%s", (str(TOMBSTONE_VERSION), schema.VERSION_KEY))
    conn.execute("DELETE FROM public.meta WHERE key LIKE %s", ("run-owner:%",))  # claims now live on the run
    conn.execute("INSERT INTO public.meta VALUES ('moved_to', %s) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                 (SCHEMA,))


def check_writable(conn: psycopg.Connection, what: str, location: str) -> None:
    """The server takes writes now, and this role may write iolab's tables (or create them); a newer
    store this iolab may not write is refused (InputError). psycopg errors are the caller's."""
    user = conn.execute("SELECT current_user, current_setting('transaction_read_only')").fetchone()
    role, read_only = (str(user[0]), user[1] == "on") if user else ("?", False)
    if read_only:
        raise InputError(f"{what} {location}: the server takes no writes now (a standby, or "
                         "default_transaction_read_only): try again once it does, or run into a local "
                         "store (--db PATH) and `iolab push` the run later")
    found = find(conn, location)
    schema.check_write(found.stored, location)
    if found.where == "none":
        row = conn.execute("SELECT CASE WHEN to_regnamespace(%s) IS NULL"
                           " THEN has_database_privilege(current_database(), 'CREATE')"
                           " ELSE has_schema_privilege(%s, 'CREATE') END", (SCHEMA, SCHEMA)).fetchone()
        problem = f"may not create iolab's tables (no CREATE on the database or on schema {SCHEMA})"
    elif found.where == "public" or (todo := schema.pending(found.stored, location)) and not (
            schema.writable_as_is(todo) and not may_migrate(conn)):
        return  # the migration says whether this role may upgrade it (or this one writes it as it is: below)
    else:
        row = conn.execute(
            "SELECT has_schema_privilege(%s, 'USAGE') AND has_table_privilege(%s, 'INSERT, UPDATE')"
            " AND has_table_privilege(%s, 'INSERT, UPDATE')",
            (SCHEMA, f"{SCHEMA}.runs", f"{SCHEMA}.trials")).fetchone()
        problem = "may not write to iolab's tables"
    if not (row and row[0]):
        raise InputError(f"{what} {location}: role {role!r} {problem} (docs/store.md#roles)")
    used = quota(conn, location, found)
    if used and used[2] - used[1] < RUN_ROOM_BYTES:
        role, spent, allowed = used
        raise InputError(f"{what} {location}: role {role!r} has used its quota in the team store ({spent} of "
                         f"{allowed} bytes; a run starts with {RUN_ROOM_BYTES} free): the tables' owner raises it "
                         "(docs/store.md#quotas), or run into a local store (--db PATH) and `iolab push` the run later")


RUN_ROOM_BYTES = 64 * 1024  # what a run needs free in its role's quota to start: the run and a few trials


def quota(conn: psycopg.Connection, location: str, found: Layout | None = None) -> tuple[str, int, int] | None:
    """(login role, bytes it used, bytes allowed) in the store's quota (schema version 4); None
    before quotas, without a quota for the role, or for a role that may not read the quota tables
    (granted before they existed: the database still enforces it)."""
    found = found or find(conn, location)
    if found.where != "iolab" or (found.stored.version or 0) < 4:
        return None
    may = conn.execute("SELECT has_table_privilege(%s, 'SELECT') AND has_table_privilege(%s, 'SELECT')",
                       (f"{SCHEMA}.role_usage", f"{SCHEMA}.role_quota")).fetchone()
    if not (may and may[0]):
        return None
    row = conn.execute(
        f"SELECT session_user, coalesce((SELECT bytes FROM {SCHEMA}.role_usage WHERE role = session_user), 0),"
        f" (SELECT max_bytes FROM {SCHEMA}.role_quota WHERE role IN (session_user, '*') ORDER BY role = '*' LIMIT 1)"
    ).fetchone()
    return (str(row[0]), int(row[1]), int(row[2])) if row and row[2] is not None else None
