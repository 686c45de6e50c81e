"""The one schema of every results store backend, as numbered migrations, and which iolab may
read or write a store of which version.

Both backends run the same portable statements (types both understand: TEXT, INTEGER, DOUBLE
PRECISION, since PostgreSQL's REAL is 4 bytes and would round epoch seconds; JSON kept as TEXT,
since PostgreSQL's json types refuse the NaN and infinities trials carry), written with `{p}`
before every table name: nothing in SQLite, `iolab.` in PostgreSQL, where iolab's tables live in
their own schema (SCHEMA) of a database they may share with others. A migration may add what
only one backend has (PostgreSQL's row-level security, a trigger's dialect).

**Versions and compatibility.** `meta` holds `schema_version` (as since the first SQLite store)
and, from version 3, `min_reader_version` and `min_writer_version`: the oldest schema version an
iolab must know to read, or to write, the store correctly. Each migration declares them
(`readers_from`, `writers_from`): an added index changes neither (an older iolab still reads
and writes), an added column with a default keeps old writers, a changed meaning raises both.
So a store upgraded by a newer iolab stays open to older ones within its declared range, and is
refused with a message beyond it (`check_read`, `check_write`). Readers never migrate; a writer
applies `pending()` in one transaction under the backend's lock. A new migration is one more
`Migration` at the end of MIGRATIONS: never edit an old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from iolab.core.errors import IolabError

Backend = Literal["sqlite", "postgres"]
SCHEMA = "iolab"  # PostgreSQL: the schema iolab's tables live in
VERSION_KEY = "schema_version"
MIN_READER_KEY = "min_reader_version"
MIN_WRITER_KEY = "min_writer_version"
TOMBSTONE_VERSION = 1000  # written into an old public.meta once its tables moved: older iolabs refuse it


@dataclass(frozen=True)
class Migration:
    version: int
    why: str
    statements: tuple[str, ...]  # portable; {p} before each table name
    postgres: tuple[str, ...] = ()  # after `statements`, PostgreSQL only
    sqlite: tuple[str, ...] = ()  # after `statements`, SQLite only
    readers_from: int = 1  # the oldest schema version that still reads a store with this migration
    writers_from: int = 1  # ... and that still writes it
    # this iolab writes a store without it (the server's own enforcement, nothing the client reads):
    # a role that may not migrate writes the store as it is until the tables' owner adds it
    clients_need: bool = True

    def for_backend(self, backend: Backend) -> list[str]:
        prefix = f"{SCHEMA}." if backend == "postgres" else ""
        extra = self.postgres if backend == "postgres" else self.sqlite
        return [s.replace("{p}", prefix) for s in (*self.statements, *extra)]


def meta_table(backend: Backend) -> str:
    prefix = f"{SCHEMA}." if backend == "postgres" else ""
    return f"CREATE TABLE IF NOT EXISTS {prefix}meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


_RUN_JSON = ("'id', OLD.id, 'study', OLD.study, 'source', OLD.source, 'spec_json', OLD.spec_json, "
             "'options_json', OLD.options_json, 'status', OLD.status, 'created', OLD.created, 'updated', OLD.updated, "
             "'environment_json', OLD.environment_json, 'extra_json', OLD.extra_json, "
             "'owner_role', OLD.owner_role, 'owner_host', OLD.owner_host")
_TRIAL_FIELDS = ("config_id", "repetition", "params_json", "status", "error", "metrics_json", "probes_json",
                 "flags_json", "manifest_json", "raw_json", "started", "ended", "seq")
_TRIAL_JSON = "'run_id', OLD.run_id, 'trial_id', OLD.trial_id, " + ", ".join(f"'{f}', OLD.{f}" for f in _TRIAL_FIELDS)
DEFAULT_QUOTA_BYTES = 20 * 2**30  # per login role (iolab.role_quota '*'): thousands of studies' runs
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
# the run's trials, for a policy on trials: only the owner of a run adds or changes its trials
_OWNS_RUN = "EXISTS (SELECT 1 FROM iolab.runs r WHERE r.id = trials.run_id AND r.owner_role = current_user)"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "runs and their trials, one row per trial", (
        "CREATE TABLE IF NOT EXISTS {p}meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE IF NOT EXISTS {p}runs (
            id TEXT PRIMARY KEY,
            study TEXT NOT NULL,
            source TEXT NOT NULL,
            spec_json TEXT NOT NULL,
            options_json TEXT NOT NULL,
            status TEXT NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            environment_json TEXT NOT NULL,
            extra_json TEXT NOT NULL DEFAULT '{}'
        )""",
        """CREATE TABLE IF NOT EXISTS {p}trials (
            run_id TEXT NOT NULL REFERENCES {p}runs(id),
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
            started DOUBLE PRECISION NOT NULL,
            ended DOUBLE PRECISION NOT NULL,
            seq INTEGER NOT NULL,
            PRIMARY KEY (run_id, trial_id)
        )""",
        "CREATE INDEX IF NOT EXISTS trials_by_config ON {p}trials(run_id, config_id)",
    )),
    Migration(2, "runs listed newest first without a full scan (a team store holds many)", (
        "CREATE INDEX IF NOT EXISTS runs_by_created ON {p}runs(created)",
    )),
    Migration(3, "whose run it is (database role and host), what a replacement replaced, and (PostgreSQL) "
                 "row-level security: a role adds and changes only its own runs and their trials", (
        "ALTER TABLE {p}runs ADD COLUMN owner_role TEXT",
        "ALTER TABLE {p}runs ADD COLUMN owner_host TEXT",
        """CREATE TABLE IF NOT EXISTS {p}run_history (
            run_id TEXT NOT NULL,
            change TEXT NOT NULL,
            changed_at DOUBLE PRECISION NOT NULL,
            changed_by TEXT,
            old_row TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS run_history_by_run ON {p}run_history(run_id)",
        """CREATE TABLE IF NOT EXISTS {p}trial_history (
            run_id TEXT NOT NULL,
            trial_id TEXT NOT NULL,
            change TEXT NOT NULL,
            changed_at DOUBLE PRECISION NOT NULL,
            changed_by TEXT,
            old_row TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS trial_history_by_run ON {p}trial_history(run_id)",
    ), postgres=(
        # a plain INSERT by any role records that role: the policies below make it so
        "ALTER TABLE iolab.runs ALTER COLUMN owner_role SET DEFAULT current_user",
        "ALTER TABLE iolab.runs ADD COLUMN claimed_by TEXT",  # the process running the run (core.owner token)
        # history is written by the database, whoever changes a row and however (iolab or plain SQL);
        # SECURITY DEFINER: writers need (and get) no right on the history tables
        """CREATE OR REPLACE FUNCTION iolab.keep_old_run() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            INSERT INTO iolab.run_history (run_id, change, changed_at, changed_by, old_row)
            VALUES (OLD.id, CASE TG_OP WHEN 'DELETE' THEN 'deleted' ELSE 'replaced' END,
                    extract(epoch FROM clock_timestamp()), session_user, row_to_json(OLD)::text);
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END $$""",
        """CREATE OR REPLACE FUNCTION iolab.keep_old_trial() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            INSERT INTO iolab.trial_history (run_id, trial_id, change, changed_at, changed_by, old_row)
            VALUES (OLD.run_id, OLD.trial_id, CASE TG_OP WHEN 'DELETE' THEN 'deleted' ELSE 'replaced' END,
                    extract(epoch FROM clock_timestamp()), session_user, row_to_json(OLD)::text);
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END $$""",
        "REVOKE ALL ON FUNCTION iolab.keep_old_run(), iolab.keep_old_trial() FROM PUBLIC",
        """CREATE TRIGGER keep_replaced_run BEFORE UPDATE ON iolab.runs FOR EACH ROW
            WHEN (OLD.owner_role IS DISTINCT FROM NEW.owner_role OR OLD.owner_host IS DISTINCT FROM NEW.owner_host)
            EXECUTE FUNCTION iolab.keep_old_run()""",
        "CREATE TRIGGER keep_deleted_run BEFORE DELETE ON iolab.runs FOR EACH ROW "
        "EXECUTE FUNCTION iolab.keep_old_run()",
        """CREATE TRIGGER keep_replaced_trial BEFORE UPDATE ON iolab.trials FOR EACH ROW
            WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION iolab.keep_old_trial()""",
        "CREATE TRIGGER keep_deleted_trial BEFORE DELETE ON iolab.trials FOR EACH ROW "
        "EXECUTE FUNCTION iolab.keep_old_trial()",
        # row-level security: everyone who may read reads everything; a role inserts runs only
        # as itself, changes only its own, and adds or changes trials only of its own runs; no
        # policy allows DELETE (the tables' owner, who is not subject to these, may)
        "ALTER TABLE iolab.runs ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY runs_read ON iolab.runs FOR SELECT USING (true)",
        "CREATE POLICY runs_add_own ON iolab.runs FOR INSERT WITH CHECK (owner_role = current_user)",
        "CREATE POLICY runs_change_own ON iolab.runs FOR UPDATE USING (owner_role = current_user) "
        "WITH CHECK (owner_role = current_user)",
        "ALTER TABLE iolab.trials ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY trials_read ON iolab.trials FOR SELECT USING (true)",
        f"CREATE POLICY trials_add_own ON iolab.trials FOR INSERT WITH CHECK ({_OWNS_RUN})",
        f"CREATE POLICY trials_change_own ON iolab.trials FOR UPDATE USING ({_OWNS_RUN}) WITH CHECK ({_OWNS_RUN})",
    ), sqlite=(
        f"""CREATE TRIGGER IF NOT EXISTS keep_replaced_run BEFORE UPDATE OF owner_role, owner_host ON runs
            WHEN OLD.owner_role IS NOT NEW.owner_role OR OLD.owner_host IS NOT NEW.owner_host
            BEGIN INSERT INTO run_history VALUES (OLD.id, 'replaced', {_SQLITE_NOW}, NULL, json_object({_RUN_JSON}));
            END""",
        f"""CREATE TRIGGER IF NOT EXISTS keep_deleted_run BEFORE DELETE ON runs
            BEGIN INSERT INTO run_history VALUES (OLD.id, 'deleted', {_SQLITE_NOW}, NULL, json_object({_RUN_JSON}));
            END""",
        f"""CREATE TRIGGER IF NOT EXISTS keep_replaced_trial BEFORE UPDATE ON trials
            WHEN {' OR '.join(f'OLD.{f} IS NOT NEW.{f}' for f in _TRIAL_FIELDS)}
            BEGIN INSERT INTO trial_history VALUES (OLD.run_id, OLD.trial_id, 'replaced', {_SQLITE_NOW}, NULL,
                json_object({_TRIAL_JSON})); END""",
        f"""CREATE TRIGGER IF NOT EXISTS keep_deleted_trial BEFORE DELETE ON trials
            BEGIN INSERT INTO trial_history VALUES (OLD.run_id, OLD.trial_id, 'deleted', {_SQLITE_NOW}, NULL,
                json_object({_TRIAL_JSON})); END""",
    ), readers_from=1, writers_from=3),
    Migration(4, "(PostgreSQL) a quota per login role, kept by the database: a colleague's writes cannot fill "
                 "the team store", (), postgres=(
        # what each login role may make the store keep; the row '*' is every role's default
        """CREATE TABLE IF NOT EXISTS iolab.role_quota (
            role TEXT PRIMARY KEY,
            max_bytes BIGINT NOT NULL CHECK (max_bytes >= 0)
        )""",
        f"INSERT INTO iolab.role_quota VALUES ('*', {DEFAULT_QUOTA_BYTES}) ON CONFLICT (role) DO NOTHING",
        """CREATE TABLE IF NOT EXISTS iolab.role_usage (
            role TEXT PRIMARY KEY,
            bytes BIGINT NOT NULL DEFAULT 0
        )""",
        # what is stored already counts for its run's owner
        """INSERT INTO iolab.role_usage (role, bytes)
            SELECT role, sum(bytes)::bigint FROM (
                SELECT owner_role AS role, octet_length(r::text) AS bytes FROM iolab.runs r
                UNION ALL
                SELECT r.owner_role, octet_length(t::text) FROM iolab.trials t JOIN iolab.runs r ON r.id = t.run_id
            ) stored WHERE role IS NOT NULL GROUP BY role
            ON CONFLICT (role) DO NOTHING""",
        # every byte a login role makes the store keep counts: a row added; a trial replaced (the
        # old row stays in trial_history); a run grown, or replaced by another origin (history
        # again). session_user, not current_user: SET ROLE does not move the charge; SECURITY
        # DEFINER: writers need (and get) no right on these tables. 53400 is "later" to iolab
        # (store/pgerrors.py): the write is kept in the spool, nothing is lost, and it is written
        # once the quota is raised.
        """CREATE OR REPLACE FUNCTION iolab.charge_role() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            added BIGINT;
            used BIGINT;
            allowed BIGINT;
        BEGIN
            IF TG_OP = 'INSERT' THEN
                added := octet_length(NEW::text);
            ELSIF TG_TABLE_NAME = 'trials' THEN
                added := CASE WHEN OLD.* IS DISTINCT FROM NEW.* THEN octet_length(NEW::text) ELSE 0 END;
            ELSIF OLD.owner_role IS DISTINCT FROM NEW.owner_role OR OLD.owner_host IS DISTINCT FROM NEW.owner_host THEN
                added := octet_length(NEW::text);
            ELSE
                added := octet_length(NEW::text) - octet_length(OLD::text);
            END IF;
            IF added = 0 THEN RETURN NULL; END IF;
            INSERT INTO iolab.role_usage AS u (role, bytes) VALUES (session_user, added)
                ON CONFLICT (role) DO UPDATE SET bytes = u.bytes + excluded.bytes
                RETURNING u.bytes INTO used;
            SELECT max_bytes INTO allowed FROM iolab.role_quota
                WHERE role IN (session_user, '*') ORDER BY role = '*' LIMIT 1;
            IF added > 0 AND allowed IS NOT NULL AND used > allowed THEN
                RAISE EXCEPTION 'role % has used its quota in the team store: % bytes, % allowed', session_user,
                    used, allowed
                    USING ERRCODE = '53400',
                          HINT = 'the tables'' owner raises it: INSERT INTO iolab.role_quota VALUES (role, bytes) '
                                 'ON CONFLICT (role) DO UPDATE SET max_bytes = excluded.max_bytes';
            END IF;
            RETURN NULL;
        END $$""",
        "REVOKE ALL ON FUNCTION iolab.charge_role() FROM PUBLIC",
        "CREATE TRIGGER charge_run AFTER INSERT OR UPDATE ON iolab.runs FOR EACH ROW "
        "EXECUTE FUNCTION iolab.charge_role()",
        "CREATE TRIGGER charge_trial AFTER INSERT OR UPDATE ON iolab.trials FOR EACH ROW "
        "EXECUTE FUNCTION iolab.charge_role()",
    ), readers_from=1, writers_from=3, clients_need=False),
)

LATEST = MIGRATIONS[-1].version


@dataclass(frozen=True)
class Stored:
    """What a store's meta says about its schema (None: no store, or a key it predates)."""

    version: int | None
    min_reader: int | None = None
    min_writer: int | None = None

    @property
    def readers_from(self) -> int:
        return self.min_reader if self.min_reader is not None else (self.version or 0)

    @property
    def writers_from(self) -> int:
        return self.min_writer if self.min_writer is not None else (self.version or 0)


def stored(values: dict[str, str], location: str) -> Stored:
    """meta's rows -> Stored; garbage there is an IolabError, not a traceback."""
    return Stored(*(parse_version(values.get(k), location) for k in (VERSION_KEY, MIN_READER_KEY, MIN_WRITER_KEY)))


def check_read(s: Stored, location: str) -> None:
    """IolabError unless this iolab reads a store of that schema correctly (any older one; a newer
    one whose migrations all keep readers of this version)."""
    if s.version is not None and s.version > LATEST and s.readers_from > LATEST:
        raise IolabError(f"{location} has schema version {s.version}, newer than this iolab ({LATEST}), and iolab "
                         f"reads it from schema version {s.readers_from} on: upgrade iolab on this machine")


def check_write(s: Stored, location: str) -> None:
    """IolabError unless this iolab may write a store of that schema (after migrating an older one)."""
    if s.version is not None and s.version > LATEST and s.writers_from > LATEST:
        raise IolabError(f"{location} has schema version {s.version}, newer than this iolab ({LATEST}), and "
                         f"iolab writes it from schema version {s.writers_from} on: upgrade iolab on this machine "
                         "to run studies into it (reading it still works"
                         + ("" if s.readers_from <= LATEST else ", but not with this iolab either") + ")")


def pending(s: Stored, location: str) -> list[Migration]:
    """The migrations a writer applies to a store at `s` (none to a newer, compatible one), in
    order; IolabError when this iolab may not write it."""
    check_write(s, location)
    return [m for m in MIGRATIONS if s.version is None or m.version > s.version]


def writable_as_is(todo: list[Migration]) -> bool:
    """This iolab writes a store whose only pending migrations are `todo` without applying them."""
    return bool(todo) and not any(m.clients_need for m in todo)


def compatibility(version: int) -> tuple[int, int]:
    """(min_reader_version, min_writer_version) of a store migrated to `version`."""
    applied = [m for m in MIGRATIONS if m.version <= version]
    return max(m.readers_from for m in applied), max(m.writers_from for m in applied)


def meta_rows(version: int) -> list[tuple[str, str]]:
    """The meta rows a writer records after migrating to `version`."""
    readers, writers = compatibility(version)
    return [(VERSION_KEY, str(version)), (MIN_READER_KEY, str(readers)), (MIN_WRITER_KEY, str(writers))]


def parse_version(value: str | None, location: str) -> int | None:
    """A stored version as an int; garbage there is an IolabError, not a traceback."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise IolabError(f"{location}: schema version {value[:40]!r} is not a number; "
                         "this is not an iolab store (or it is damaged)") from None
