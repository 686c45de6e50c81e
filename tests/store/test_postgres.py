"""What the PostgreSQL store adds to the contract (test_backends.py runs that on it too),
against the real server of conftest.py: schema migrations applied once and a newer database
refused; the password never shown, however it is given (URL, PGPASSWORD, .pgpass); a role
that may not write refused up front; opening a new store from two processes at once; run ids
that carry the host.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from iolab.core.errors import InputError, IolabError
from iolab.core.model import TrialResult
from iolab.runner.runner import new_run_id
from iolab.store import registry, schema
from iolab.store.spool import Spool, trial_op

from .pgserver import PASSWORD, PASSWORD_ROLE, PgServer


def test_a_new_store_gets_every_migration_once_and_a_newer_one_is_refused(pg_server: PgServer) -> None:
    url = pg_server.fresh_url()
    registry.open_store(url).close()
    registry.open_store(url).close()  # a second opening migrates nothing
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SELECT value FROM iolab.meta WHERE key='schema_version'").fetchall()
        assert version == [(str(schema.LATEST),)]
        kinds = dict(conn.execute("SELECT column_name, data_type FROM information_schema.columns"
                                  " WHERE table_schema='iolab' AND table_name='trials'").fetchall())
        assert kinds["started"] == "double precision", "epoch seconds need 8 bytes"
        assert conn.execute("SELECT to_regclass('iolab.runs_by_created') IS NOT NULL").fetchone() == (True,)
        assert conn.execute("SELECT to_regclass('public.runs') IS NULL").fetchone() == (True,), "own schema"
        conn.execute("UPDATE iolab.meta SET value='999' WHERE key IN ('schema_version', 'min_writer_version')")
    with pytest.raises(IolabError, match="schema version 999, newer than this iolab"):
        registry.open_store(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE iolab.meta SET value='x9' WHERE key='schema_version'")
    with pytest.raises(IolabError, match="not a number"):
        registry.open_store(url)


def _open_and_close(url: str) -> None:
    registry.open_store(url).close()


def test_two_processes_creating_one_new_store_at_once_both_succeed(pg_server: PgServer) -> None:
    url = pg_server.fresh_url()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_close, args=(url,)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM iolab.meta WHERE key='schema_version'").fetchone() == (1,)


def _pw_db(pg_server: PgServer) -> str:
    """A fresh database the password role owns; its URL without a password."""
    return pg_server.fresh_url(user=PASSWORD_ROLE)


def _no_password_in(text: str) -> None:
    assert PASSWORD not in text, text


def test_a_password_in_the_url_works_and_is_never_shown(pg_server: PgServer, tmp_path: Path) -> None:
    url = _pw_db(pg_server).replace(f"{PASSWORD_ROLE}@", f"{PASSWORD_ROLE}:{PASSWORD}@")
    s = registry.open_store(url)
    try:
        assert f"{PASSWORD_ROLE}:***@" in s.location
        _no_password_in(s.location)
        _no_password_in(registry.shown(url))
        _no_password_in(registry.shown(url.replace(f":{PASSWORD}@", "@") + f"&password={PASSWORD}"))
    finally:
        s.close()
    wrong = url.replace(PASSWORD, "Wr0ng-" + PASSWORD[::-1])
    with pytest.raises(InputError, match="cannot connect") as e:
        registry.open_store(wrong)
    _no_password_in(str(e.value))
    assert "Wr0ng" not in str(e.value) and "password authentication failed" in str(e.value)
    # the CLI: runs lists through it, and neither its output nor its errors show the password
    env = {**os.environ, "IOLAB_DATA": str(tmp_path)}
    for argv in (["runs", "--db", url], ["runs", "--db", wrong], ["report", "latest", "--db", url]):
        r = subprocess.run([sys.executable, "-m", "iolab.cli", *argv], capture_output=True, text=True,
                           env=env, timeout=60)
        _no_password_in(r.stdout + r.stderr)
        assert "Traceback" not in r.stderr
        if argv[2] == wrong:
            assert r.returncode == 2 and "cannot connect" in r.stderr


def test_pgpassword_pgpass_and_iolab_db_give_the_password_outside_argv(pg_server: PgServer, tmp_path: Path) -> None:
    url = _pw_db(pg_server)
    with pytest.raises(InputError, match="cannot connect"):
        registry.open_store(url)  # no password anywhere: refused by the server's scram line
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["IOLAB_DATA"] = str(tmp_path)
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"*:*:*:{PASSWORD_ROLE}:{PASSWORD}\n")
    pgpass.chmod(0o600)
    for extra in ({"PGPASSWORD": PASSWORD}, {"PGPASSFILE": str(pgpass)}):
        r = subprocess.run([sys.executable, "-m", "iolab.cli", "runs"], capture_output=True, text=True,
                           env={**env, **extra, "IOLAB_DB": url}, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "no runs" in r.stdout + r.stderr


def test_a_role_that_may_not_write_is_refused_before_a_run(pg_server: PgServer) -> None:
    url = pg_server.fresh_url()
    registry.open_store(url).close()
    name = url.split("/")[3].split("?")[0]
    with pg_server.admin() as conn:
        conn.execute("DROP ROLE IF EXISTS reader")
        conn.execute("CREATE ROLE reader LOGIN")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("GRANT USAGE ON SCHEMA iolab TO reader")
        conn.execute("GRANT SELECT ON iolab.runs, iolab.trials, iolab.meta TO reader")
    reader = pg_server.url(name, "reader")
    with pytest.raises(InputError, match="'reader' may not write"):
        registry.check_target(reader)
    empty = pg_server.fresh_url()
    with psycopg.connect(empty, autocommit=True) as conn:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    with pytest.raises(InputError, match="may not create"):
        registry.check_target(pg_server.url(empty.split("/")[3].split("?")[0], "reader"))


def test_unreachable_and_malformed_urls_are_input_errors(tmp_path: Path) -> None:
    for bad in (f"postgresql://nobody@/db?host={tmp_path}&port=1", "postgresql://u@/db?sslmode=bogus",
                "postgresql://u@h\x00/db"):
        with pytest.raises(InputError) as e:
            registry.open_store(bad)
        assert "--db" in str(e.value)


def test_run_ids_carry_the_host() -> None:
    host = socket.gethostname().split(".")[0][:24]
    # 20 000 ids in well under a second: 24 random bits alone would repeat about 12 times (the
    # birthday bound; 500 repeated once in a CI run); one process never repeats one by construction
    ids = [new_run_id("s") for _ in range(20000)]
    assert len(set(ids)) == 20000, "two runs started in one second by one process collide"
    if host.replace("-", "").isalnum():
        assert all(f"-s-{host}-" in i for i in ids), ids


def test_a_password_never_reaches_the_recorded_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from iolab.runner.manifest import environment
    from iolab.store.urls import scrub

    argv = ["iolab", "run", "x.toml", "--db", f"postgresql://u:{PASSWORD}@h/db",
            f"--db=postgres://u:{PASSWORD}@h:5432/db?sslmode=require", f"postgresql://u@h/db?password={PASSWORD}&application_name=b",
            f"postgresql://u:p@{PASSWORD}@h/db"]
    monkeypatch.setattr(sys, "argv", argv)
    recorded = environment()["command"]
    assert PASSWORD not in " ".join(recorded), recorded
    assert recorded[:3] == argv[:3] and recorded[3] == "--db" and recorded[4] == "postgresql://u:***@h/db"
    assert recorded[6] == "postgresql://u:***@h/db?application_name=b"
    assert recorded[7] == "postgresql://(a URL libpq cannot parse: an '@' inside a user name or password must be " \
                          "written %40)"
    assert scrub("/plain/path.sqlite") == "/plain/path.sqlite"


def _t(trial_id: str) -> TrialResult:
    return TrialResult(trial_id, "c", 0, {}, "ok", None, {"iops": 1.0}, {}, {})


def test_a_spooled_trial_the_server_refuses_is_set_aside_not_blocking_the_rest(
        pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    s = registry.open_store(pg_server.fresh_url())
    try:
        s.create_run("r1", "s", "builtin:s", {}, {}, {})
        spool = Spool(s.location)
        spool.add(trial_op("no-such-run", _t("poison"), None, 1.0))  # its run is not in this store: never taken
        spool.add(trial_op("r1", _t("kept-1"), {"raw": 1}, 2.0))
        s.save_trial("r1", _t("new-2"), None)
        assert [t.trial_id for t in s.trials("r1")] == ["kept-1", "new-2"], "kept trials go first, in order"
        assert s.raw("r1", "kept-1") == {"raw": 1}
        assert spool.count() == 0
        assert "poison" in spool.rejected.read_text() and len(spool.rejected.read_text().splitlines()) == 1
    finally:
        s.close()


def test_a_server_back_within_the_retry_window_takes_the_trial_directly(
        pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "60")
    s = registry.open_store(pg_server.fresh_url())
    try:
        s.create_run("r1", "s", "builtin:s", {}, {}, {})
        s.save_trial("r1", _t("before"), None)
        pg_server.stop()
        restart = threading.Timer(2.0, pg_server.start)
        restart.start()
        try:
            t0 = time.monotonic()
            s.save_trial("r1", _t("during"), None)
            waited = time.monotonic() - t0
        finally:
            restart.join()
        assert waited >= 1.5, "the write could not have reached a stopped server"
        assert [t.trial_id for t in s.trials("r1")] == ["before", "during"]
        assert Spool(s.location).count() == 0 and not Spool(s.location).path.exists()
        s.set_status("r1", "complete")  # the connection is usable again for everything
        assert s.resolve("r1").status == "complete"
    finally:
        s.close()


def test_a_role_that_may_only_read_uses_runs_report_and_history(pg_server: PgServer, tmp_path: Path) -> None:
    """Opening for reading migrates nothing and writes nothing: a role granted SELECT only reads."""
    url = pg_server.fresh_url()
    s = registry.open_store(url)
    try:
        s.create_run("r1", "s", "builtin:s", {"study": {"name": "s"}}, {}, {"hostname": "h"})
        s.save_trial("r1", _t("t1"), None)
        s.set_status("r1", "complete")
    finally:
        s.close()
    name = url.split("/")[3].split("?")[0]
    with psycopg.connect(url, autocommit=True) as conn:
        where = "iolab" if conn.execute("SELECT to_regnamespace('iolab') IS NOT NULL").fetchone() == (True,) \
            else "public"
    with pg_server.admin() as conn:
        conn.execute("DROP ROLE IF EXISTS only_reads")
        conn.execute("CREATE ROLE only_reads LOGIN")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA {where} TO only_reads")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {where} TO only_reads")
    reader = pg_server.url(name, "only_reads")
    env = {**os.environ, "IOLAB_DATA": str(tmp_path)}
    env.pop("IOLAB_DB", None)
    for argv in (["runs", "--db", reader], ["report", "r1", "--format", "json", "--db", reader],
                 ["history", "s", "--db", reader]):
        r = subprocess.run([sys.executable, "-m", "iolab.cli", *argv], capture_output=True, text=True, env=env,
                           timeout=60)
        assert "Traceback" not in r.stderr, (argv, r.stderr)
        assert r.returncode == 0, (argv, r.stderr)
