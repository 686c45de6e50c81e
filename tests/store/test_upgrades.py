"""A store that shares a database politely and upgrades gently (store/schema.py, pglayout.py):

* a store made before schema `iolab` (tables in `public`, version 2; an old SQLite file) is read
  as it is by a reader, which changes nothing, and moved and migrated by the first writer, its
  data intact, `public.meta` left at a version no older iolab accepts;
* a newer iolab's additive upgrade (an index, a column with a default) keeps this iolab reading
  and writing; beyond the declared range it is refused for writing, or for reading, with a
  message that says to upgrade;
* another application's `public.meta` and `public.runs` in the same database are never used
  or touched.
Both backends where both have the case.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from iolab import doctor
from iolab.core.errors import IolabError
from iolab.core.model import TrialResult
from iolab.store import registry, schema

from .pgserver import PgServer

OLD_RUN = ("old-run", "s", "builtin:s", json.dumps({"study": {"name": "s"}}), "{}", "complete", 1e9, 1e9 + 5,
           json.dumps({"hostname": "old-host", "kernel": "6.1"}), json.dumps({"problems": []}))
OLD_TRIAL = ("old-run", "c-r0", "c", 0, "{}", "ok", None, json.dumps({"iops": 42.0}), "{}", "[]", "{}",
             json.dumps({"raw": 1}), 1e9 + 1, 1e9 + 2, 0)


def _old_statements() -> list[str]:
    """The DDL of schema versions 1 and 2, as the iolabs before schemas ran it (unqualified)."""
    return [s for m in schema.MIGRATIONS if m.version <= 2 for s in m.for_backend("sqlite")]


def _trial(i: int) -> TrialResult:
    return TrialResult(f"n{i}", "c", i, {}, "ok", None, {"iops": float(i)}, {}, {})


# -------------------------------------------------------------------- stores from before

def test_a_postgresql_store_from_before_schemas_is_read_as_is_and_moved_by_the_first_writer(
        pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    url = pg_server.fresh_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path TO public")
        for statement in _old_statements():
            conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2'), ('run-owner:old-run', 'o1.2')")
        conn.execute("INSERT INTO runs VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", OLD_RUN)
        conn.execute("INSERT INTO trials VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", OLD_TRIAL)
        conn.execute("CREATE TABLE public.other_app (x int)")
        conn.execute("INSERT INTO public.other_app VALUES (7)")

    reader = registry.open_existing(url)
    assert reader is not None
    try:
        rec = reader.resolve("old-run")
        assert (rec.status, rec.owner_role, rec.owner_host) == ("complete", None, "old-host")
        assert [t.metrics for t in reader.trials("old-run")] == [{"iops": 42.0}]
        assert reader.raw("old-run", "c-r0") == {"raw": 1}
    finally:
        reader.close()
    r = subprocess.run([sys.executable, "-m", "iolab.cli", "runs", "--json", "--db", url], capture_output=True,
                       text=True, timeout=60, env={"IOLAB_DATA": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and json.loads(r.stdout)[0]["id"] == "old-run", r.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regnamespace('iolab') IS NULL, (SELECT value FROM public.meta WHERE"
                            " key='schema_version')").fetchone() == (True, "2"), "a reader changed the store"

    writer = registry.open_store(url)
    try:
        writer.save_trial("old-run", _trial(1), None)
        assert [t.trial_id for t in writer.trials("old-run")] == ["c-r0", "n1"]
    finally:
        writer.close()
    with psycopg.connect(url, autocommit=True) as conn:
        layout = conn.execute("SELECT to_regclass('public.runs'), to_regclass('public.trials'),"
                              " to_regclass('iolab.runs') IS NOT NULL, to_regclass('iolab.trials_by_config') IS NOT"
                              " NULL").fetchone()
        assert layout == (None, None, True, True), "the tables (and their indexes) moved into schema iolab"
        assert dict(conn.execute("SELECT key, value FROM public.meta").fetchall()) == {
            "schema_version": str(schema.TOMBSTONE_VERSION), "moved_to": "iolab"}, "older iolabs refuse it"
        assert dict(conn.execute("SELECT key, value FROM iolab.meta").fetchall()) == {
            "schema_version": str(schema.LATEST), "min_reader_version": "1", "min_writer_version": "3"}
        assert conn.execute("SELECT owner_role, owner_host, status FROM iolab.runs").fetchall() == [
            (None, None, "complete")], "a run from before owners has none (only the tables' owner changes it)"
        assert conn.execute("SELECT x FROM public.other_app").fetchall() == [(7,)]


def test_an_sqlite_file_from_before_is_read_as_is_and_migrated_by_the_first_writer(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    for statement in _old_statements():
        con.execute(statement)
    con.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    con.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)", OLD_RUN)
    con.execute("INSERT INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", OLD_TRIAL)
    con.commit()
    con.close()
    before = db.read_bytes()
    reader = registry.open_existing(db)
    assert reader is not None
    try:
        assert reader.resolve("old-run").owner_host == "old-host"
        assert [t.trial_id for t in reader.trials("old-run")] == ["c-r0"]
    finally:
        reader.close()
    assert db.read_bytes() == before, "a reader changed the file"
    writer = registry.open_store(db)
    try:
        writer.save_trial("old-run", _trial(1), None)
    finally:
        writer.close()
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(schema.LATEST),)
        assert con.execute("SELECT count(*) FROM trials").fetchone() == (2,)
        assert {r[1] for r in con.execute("PRAGMA table_info(runs)")} >= {"owner_role", "owner_host"}
    finally:
        con.close()


# -------------------------------------------------------------------- a newer iolab's store

@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Callable[..., Any]]]:
    """(a new store's --db value, run SQL on it as its owner)."""
    if request.param == "sqlite":
        ref = str(tmp_path / "s.sqlite")

        def run_sql(statement: str, *params: Any) -> None:
            con = sqlite3.connect(ref)
            con.execute(statement.replace("iolab.", ""), params)
            con.commit()
            con.close()
        yield ref, run_sql
    else:
        ref = request.getfixturevalue("pg_server").fresh_url()

        def run_sql(statement: str, *params: Any) -> None:
            with psycopg.connect(ref, autocommit=True) as conn:
                conn.execute(statement.replace("?", "%s"), params or None)
        yield ref, run_sql


def _upgrade_by_a_newer_iolab(run_sql: Callable[..., Any], readers_from: int, writers_from: int) -> int:
    """What a later iolab's migration does: an index and a column with a default, and its range."""
    newer = schema.LATEST + 1
    run_sql("CREATE INDEX trials_by_status ON iolab.trials(status)")
    run_sql("ALTER TABLE iolab.runs ADD COLUMN notes TEXT NOT NULL DEFAULT ''")
    for key, value in (("schema_version", newer), ("min_reader_version", readers_from),
                       ("min_writer_version", writers_from)):
        run_sql("UPDATE iolab.meta SET value=? WHERE key=?", str(value), key)
    return newer


def test_an_additive_upgrade_keeps_this_iolab_reading_and_writing(backend: tuple[str, Callable[..., Any]],
                                                                 tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    ref, run_sql = backend
    s = registry.open_store(ref)
    s.create_run("before", "s", "builtin:s", {}, {}, {})
    s.close()
    newer = _upgrade_by_a_newer_iolab(run_sql, readers_from=1, writers_from=schema.LATEST)
    s = registry.open_store(ref)  # no migration: the store is ahead, within the range
    try:
        s.create_run("after", "s", "builtin:s", {}, {}, {})
        s.save_trial("after", _trial(0), {"raw": 0})
        s.set_status("after", "complete")
        assert [r.id for r in s.runs()] == ["after", "before"]
    finally:
        s.close()
    reader = registry.open_existing(ref)
    assert reader is not None
    try:
        assert [t.trial_id for t in reader.trials("after")] == ["n0"] and reader.resolve("after").status == "complete"
    finally:
        reader.close()
    assert registry.backend_for(ref).stored_version(ref, "--db") == newer, "this iolab left the newer version"


def test_beyond_the_range_a_newer_store_is_refused_with_a_message(backend: tuple[str, Callable[..., Any]],
                                                                 tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    ref, run_sql = backend
    s = registry.open_store(ref)
    s.create_run("r", "s", "builtin:s", {}, {}, {})
    s.close()
    newer = _upgrade_by_a_newer_iolab(run_sql, readers_from=1, writers_from=schema.LATEST + 1)
    with pytest.raises(IolabError, match=rf"schema version {newer}, newer than this iolab .* upgrade iolab on this "
                                         r"machine to run studies into it \(reading it still works\)"):
        registry.open_store(ref)
    reader = registry.open_existing(ref)
    assert reader is not None
    try:
        assert reader.resolve("r").status == "running"
    finally:
        reader.close()
    run_sql("UPDATE iolab.meta SET value=? WHERE key='min_reader_version'", str(newer))
    with pytest.raises(IolabError, match=rf"iolab reads it from schema version {newer} on: upgrade iolab"):
        registry.open_existing(ref)


# -------------------------------------------------------------------- a shared database

def test_another_applications_meta_and_runs_in_public_are_never_used_or_touched(
        pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    url = pg_server.fresh_url()
    theirs = ["CREATE TABLE public.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
              "INSERT INTO public.meta VALUES ('schema_version', '2'), ('owner', 'billing')",
              "CREATE TABLE public.runs (id TEXT PRIMARY KEY, amount INTEGER)",
              "INSERT INTO public.runs VALUES ('invoice-1', 100)",
              "CREATE TABLE public.trials (id INTEGER)"]
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in theirs:
            conn.execute(statement)
        before = conn.execute("SELECT (SELECT string_agg(m::text, ',' ORDER BY key) FROM public.meta m),"
                              " (SELECT string_agg(r::text, ',') FROM public.runs r)").fetchone()
    assert registry.open_existing(url) is None, "another application's tables are not an iolab store"
    s = registry.open_store(url)
    try:
        s.create_run("mine", "s", "builtin:s", {}, {}, {})
        s.save_trial("mine", _trial(0), None)
        assert [r.id for r in s.runs()] == ["mine"]
    finally:
        s.close()
    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute("SELECT (SELECT string_agg(m::text, ',' ORDER BY key) FROM public.meta m),"
                             " (SELECT string_agg(r::text, ',') FROM public.runs r)").fetchone()
        assert after == before
        assert conn.execute("SELECT count(*) FROM iolab.trials").fetchone() == (1,)


def test_iolab_migrate_creates_or_upgrades_and_says_the_range(pg_server: PgServer, tmp_path: Path) -> None:
    url = pg_server.fresh_url()
    env = {"IOLAB_DATA": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for _ in range(2):  # creating, then nothing to do
        r = subprocess.run([sys.executable, "-m", "iolab.cli", "migrate", "--db", url], capture_output=True,
                           text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        assert f"schema v{schema.LATEST} (this iolab: v{schema.LATEST}; read by iolab from v1, written from v3)" \
            in " ".join(r.stdout.split())


def test_a_writer_that_may_not_migrate_writes_a_store_whose_only_pending_migration_is_the_quota(
        pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upgrading iolab on the writers' machines before the tables' owner runs `iolab migrate` must
    not stop the team: schema version 4 (quotas) is enforced by the server and needs nothing of
    the client, so a writer that may not migrate writes a version-3 store as it is; the owner's
    `iolab migrate` then adds the quotas and charges what the writer stored."""
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    url = pg_server.fresh_url()  # owned by the server's admin role, as a team store's tables are
    writer = f"w_{url.split('/')[3].split('?')[0][2:]}"
    with monkeypatch.context() as old_iolab:  # an iolab of schema version 3 creates the store
        old_iolab.setattr(schema, "MIGRATIONS", tuple(m for m in schema.MIGRATIONS if m.version <= 3))
        registry.open_store(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT value FROM iolab.meta WHERE key='schema_version'").fetchone() == ("3",)
        conn.execute(f"CREATE ROLE {writer} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA iolab TO {writer}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA iolab TO {writer}")
        conn.execute(f"GRANT INSERT, UPDATE ON iolab.runs, iolab.trials TO {writer}")
    writer_url = url.replace("postgresql://iolab@", f"postgresql://{writer}@")
    try:
        registry.backend_for(writer_url, "results store").check_target(writer_url, "results store")
        s = registry.open_store(writer_url)
        try:
            s.create_run("w1", "s", "builtin:s", {}, {}, {})
            s.save_trial("w1", _trial(0), {"raw": 0})
            assert s.waiting() == 0 and [t.trial_id for t in s.trials("w1")] == ["n0"]
        finally:
            s.close()
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT value FROM iolab.meta WHERE key='schema_version'").fetchone() == ("3",)
        said = doctor._store(writer_url, "results store")  # what `iolab doctor` tells this writer
        assert said.state == "ok" and "schema v3, written as it is" in said.detail, said
        assert "migrated" not in said.detail and "iolab migrate --db URL" in said.detail, said
        r = subprocess.run([sys.executable, "-m", "iolab.cli", "migrate", "--db", url], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT value FROM iolab.meta WHERE key='schema_version'").fetchone() == \
                (str(schema.LATEST),)
            used, = conn.execute("SELECT bytes FROM iolab.role_usage WHERE role=%s", (writer,)).fetchone()
            assert used > 0, "what the writer stored before the quotas counts for it"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {writer}")  # its grants in that database
        with pg_server.admin() as admin:
            admin.execute(f"DROP ROLE {writer}")
