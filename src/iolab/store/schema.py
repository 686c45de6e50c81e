"""The one schema of every results store backend, as numbered migrations.

Both SQLite and PostgreSQL run the same statements: only types both understand (TEXT,
INTEGER, DOUBLE PRECISION: PostgreSQL's REAL is 4 bytes and would round epoch seconds),
JSON kept as TEXT (PostgreSQL's json types refuse NaN and infinities, which trials carry).
The version a store is at lives in `meta` (key `schema_version`, as since the first SQLite
store, so existing files need nothing); a backend applies `pending(current)` in one
transaction on first use, under its own lock. A store newer than this iolab is refused.
A new migration is one more `Migration` at the end of MIGRATIONS: never edit an old one.
"""

from __future__ import annotations

from dataclasses import dataclass

from iolab.core.errors import IolabError

VERSION_KEY = "schema_version"


@dataclass(frozen=True)
class Migration:
    version: int
    why: str
    statements: tuple[str, ...]


META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "runs and their trials, one row per trial", (
        META,
        """CREATE TABLE IF NOT EXISTS runs (
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
        """CREATE TABLE IF NOT EXISTS trials (
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
            started DOUBLE PRECISION NOT NULL,
            ended DOUBLE PRECISION NOT NULL,
            seq INTEGER NOT NULL,
            PRIMARY KEY (run_id, trial_id)
        )""",
        "CREATE INDEX IF NOT EXISTS trials_by_config ON trials(run_id, config_id)",
    )),
    Migration(2, "runs listed newest first without a full scan (a team store holds many)", (
        "CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created)",
    )),
)

LATEST = MIGRATIONS[-1].version


def pending(current: int | None, location: str) -> list[Migration]:
    """The migrations a store at version `current` (None: no schema yet) still needs, in order.

    IolabError when the store is newer than this iolab: its data may use what this
    version does not know, so it is neither read nor written."""
    if current is not None and current > LATEST:
        raise IolabError(f"{location} has schema version {current}, newer than this iolab ({LATEST}); "
                         "upgrade iolab or use --db with another store")
    return [m for m in MIGRATIONS if current is None or m.version > current]


def parse_version(value: str | None, location: str) -> int | None:
    """meta's stored version as an int; garbage there is an IolabError, not a traceback."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise IolabError(f"{location}: schema version {value[:40]!r} is not a number; "
                         "this is not an iolab store (or it is damaged)") from None
