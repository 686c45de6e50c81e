"""Nothing lost, whatever the database does: the real PostgreSQL of conftest.py made read-only
(`ALTER SYSTEM SET default_transaction_read_only = on`, reloaded: what a failover to a standby
looks like to a client), stopped, and restarted read-only, in the middle of real studies (fio on
a loop device) and under the store API.

* a read-only failover mid-study: the run goes on, keeps what the server refuses in the spool,
  writes it when the server takes writes again; every trial once, in order; no traceback;
* the server stopped, then started read-only, then writable: the same;
* a run that ends during the outage: exit 1 saying what waits, the team store still "running";
  `iolab push --spool` after recovery completes it; the store is then exactly as when the same
  writes go straight in, and replaying the spool again changes nothing;
* errors classified by SQLSTATE, produced by the real server: read-only, serialization
  failure, lock timeout, lost connection, missing privilege are kept; a data exception or an
  integrity violation is set aside with its reason and holds nothing back;
* a run does not start against a server that takes no writes (exit 2, no traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from iolab.core import owner
from iolab.store import registry
from iolab.store.spool import Spool
from tests.core.helpers import LOOP_TARGET, Lab, fio_workload, needs_fio, needs_root, study_table

from .pgserver import PgServer, set_read_only
from .pgstudy import (
    ended_whole,
    every_trial_once,
    loop_study,
    made_trial,
    reopened,
    spool_files,
    spooled_lines,
    stored_runs,
    stored_trials,
)


@needs_root
@needs_fio
def test_a_read_only_failover_mid_study_loses_nothing_and_duplicates_nothing(pg_lab: tuple[Lab, str],
                                                                             server: PgServer) -> None:
    lab, url = pg_lab
    proc = lab.popen("run", loop_study(lab, "pgro", reps=3))
    try:
        lab.wait_until(lambda: len(stored_trials(url)) >= 1, 120, "a stored trial", proc)
        set_read_only(server, True)
        lab.wait_until(lambda: spooled_lines(lab) >= 2, 120, "writes kept in the spool", proc)
        stored_during = len(stored_trials(url))
        set_read_only(server, False)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "kept in the local spool" in " ".join(err.split()) and "takes writes again" in " ".join(err.split())
    assert stored_during < 6, "the server took no write while read-only"
    ended_whole(lab, url, proc.returncode, err)


@needs_root
@needs_fio
def test_the_server_stopped_then_back_read_only_then_writable(pg_lab: tuple[Lab, str], server: PgServer) -> None:
    """The issue's case: stopped mid-run, restarted with default_transaction_read_only=on."""
    lab, url = pg_lab
    proc = lab.popen("run", loop_study(lab, "pgstop", reps=3))
    try:
        lab.wait_until(lambda: len(stored_trials(url)) >= 1, 120, "a stored trial", proc)
        with server.admin() as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        server.stop()
        lab.wait_until(lambda: spooled_lines(lab) >= 1, 120, "a write kept while the server is down", proc)
        server.start()  # read-only from its first session
        kept = spooled_lines(lab)
        lab.wait_until(lambda: spooled_lines(lab) > kept, 120, "a write kept while the server is read-only", proc)
        set_read_only(server, False)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended_whole(lab, url, proc.returncode, err)


@needs_root
@needs_fio
def test_a_run_ending_in_the_outage_is_completed_by_push_spool(pg_lab: tuple[Lab, str], server: PgServer) -> None:
    lab, url = pg_lab
    proc = lab.popen("run", loop_study(lab, "pgend", reps=2))
    try:
        lab.wait_until(lambda: len(stored_trials(url)) >= 1, 120, "a stored trial", proc)
        set_read_only(server, True)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and "Traceback" not in err, err
    (run_id, status), = stored_runs(url)
    assert f"write(s) of run {run_id} wait in the local spool" in " ".join(err.split()), err
    assert status == "running" and len(stored_trials(url, run_id)) < 4, "the read-only server took writes"
    kept = [json.loads(line) for f in spool_files(lab) for line in f.read_text().splitlines()]
    assert [k["op"] for k in kept][-2:] == ["status", "release"] and kept[-2]["status"] == "complete"
    r = lab.iolab("push", "--spool", "--to", url)
    assert r.returncode == 2 and "takes no writes now" in " ".join(r.stderr.split()), r.stderr
    assert spooled_lines(lab) == len(kept), "trying too early loses nothing"
    set_read_only(server, False)
    r = lab.iolab("push", "--spool", "--to", url)
    assert r.returncode == 0, r.stderr
    assert f"{len(kept)} write(s) written, 0 set aside, 0 still waiting" in " ".join(r.stdout.split())
    assert stored_runs(url) == [(run_id, "complete")]
    every_trial_once(url, run_id, 4)
    with psycopg.connect(url, autocommit=True) as conn:
        updated, claimed = conn.execute("SELECT updated, claimed_by FROM iolab.runs WHERE id=%s", (run_id,)).fetchone()
    assert updated == kept[-2]["at"] and claimed is None, "the run's times are those of its writes, not the replay's"
    report = lab.iolab("report", run_id, "--format", "json")
    assert report.returncode == 0 and json.loads(report.stdout)["status"] == "complete", report.stderr
    lab.assert_nothing_left()


def test_a_run_does_not_start_against_a_server_that_takes_no_writes(tmp_path: Path, server: PgServer) -> None:
    url = server.fresh_url()
    registry.open_store(url).close()
    set_read_only(server, True)
    env = {**os.environ, "IOLAB_DATA": str(tmp_path)}
    spec = tmp_path / "s.toml"
    spec.write_text(study_table("x") + LOOP_TARGET + fio_workload())
    r = subprocess.run([sys.executable, "-m", "iolab.cli", "run", str(spec), "--db", url], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2 and "takes no writes now" in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "iolab.cli", "runs", "--db", url], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0 and "no runs in" in r.stdout, r.stderr


# ------------------------------------------------------------------- the store API, exactly

def _script(store: Any, run_id: str) -> None:
    """Every kind of write a run makes, in a run's order."""
    store.create_run(run_id, "s", "builtin:s", {"study": {"name": "s"}}, {"quick": True}, {"hostname": "h"})
    assert store.claim_run(run_id, owner.me().token) is None
    for i in range(3):
        store.save_trial(run_id, made_trial(i), {"raw": i, "nan": float("nan")})
    store.set_extra(run_id, "problems", [{"where": "teardown", "error": "E"}])
    store.set_extra(run_id, "gate", {"ratio": float("inf")})
    store.set_status(run_id, "complete")
    store.release_run(run_id, owner.me().token)


def _dump(url: str) -> dict[str, list[tuple]]:
    """Every row iolab keeps, every column but a run's created/updated times (compared apart)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            "runs": conn.execute("SELECT id, study, source, spec_json, options_json, status, environment_json,"
                                 " extra_json, owner_role, owner_host, claimed_by FROM iolab.runs"
                                 " ORDER BY id").fetchall(),
            "trials": conn.execute("SELECT * FROM iolab.trials ORDER BY run_id, seq").fetchall(),
            "history": conn.execute("SELECT run_id FROM iolab.run_history UNION ALL"
                                    " SELECT run_id FROM iolab.trial_history").fetchall(),
        }


def test_writes_kept_in_the_spool_leave_the_store_exactly_as_writes_made_directly(
        tmp_path: Path, server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "0.3")
    direct, kept = server.fresh_url(), server.fresh_url()
    s = registry.open_store(direct)
    try:
        _script(s, "run-1")
    finally:
        s.close()
    s = registry.open_store(kept)
    try:
        set_read_only(server, True)  # from the run's first write on
        notes: list[str] = []
        s.notify = notes.append
        _script(s, "run-1")
        spool = Spool(s.location)
        ops = spool.entries()
        assert [o["op"] for o in ops] == ["run", "claim", "trial", "trial", "trial", "extra", "extra", "status",
                                          "release"], "every write kept, in the order made"
        assert len(notes) == 1 and "read-only" in notes[0], notes
    finally:
        s.close()  # the server is still read-only: closing keeps everything
    assert spool.count() == 9 and stored_trials(kept) == []
    saved = spool.path.read_bytes()
    set_read_only(server, False)
    env = {**os.environ, "IOLAB_DATA": str(tmp_path / "data")}
    push = [sys.executable, "-m", "iolab.cli", "push", "--spool", "--to", kept]
    r = subprocess.run(push, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "9 write(s) written" in r.stdout, r.stderr
    assert _dump(kept) == _dump(direct), "the spool's writes are the direct writes"
    with psycopg.connect(kept, autocommit=True) as conn:
        created, updated = conn.execute("SELECT created, updated FROM iolab.runs").fetchone()
    # the times of the writes (the last, a release, changes no time)
    assert (created, updated) == (ops[0]["record"]["created"], ops[-2]["at"])
    # a crash between writing the spool and forgetting it: everything replayed again
    spool.path.write_bytes(saved)
    r = subprocess.run(push, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "9 write(s) written" in r.stdout, r.stderr
    assert _dump(kept) == _dump(direct), "a replay changes nothing: no duplicate, no history row"


def test_errors_are_classified_by_sqlstate(server: PgServer) -> None:
    from iolab.store.pgerrors import kind

    url = server.fresh_url()
    registry.open_store(url).close()
    seen: dict[str, str] = {}

    def grab(name: str, statement: str, conn: psycopg.Connection, *params: Any) -> None:
        with pytest.raises(psycopg.Error) as e:
            conn.execute(statement, params or None)
        seen[name] = kind(e.value)

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO iolab.runs (id, study, source, spec_json, options_json, status, created, updated,"
                     " environment_json) VALUES ('r', 's', 's', '{}', '{}', 'running', 0, 0, '{}')")
        conn.execute("SET default_transaction_read_only = on")
        grab("read_only", "UPDATE iolab.runs SET status='x'", conn)
        conn.execute("SET default_transaction_read_only = off")
        grab("refused_unique", "INSERT INTO iolab.runs (id, study, source, spec_json, options_json, status, created,"
             " updated, environment_json) VALUES ('r', 's', 's', '{}', '{}', 'running', 0, 0, '{}')", conn)
        grab("refused_data", "UPDATE iolab.runs SET created=%s", conn, "1e999")  # 22003: out of range
        grab("refused_client", "UPDATE iolab.runs SET status=%s", conn, "nul\x00byte")  # never leaves the client
        with psycopg.connect(url, autocommit=True) as other:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT status FROM iolab.runs").fetchall()
            other.execute("UPDATE iolab.runs SET status='by-other'")
            grab("serialization", "UPDATE iolab.runs SET status='mine'", conn)
            conn.execute("ROLLBACK")
            other.execute("BEGIN")
            other.execute("SELECT 1 FROM iolab.runs FOR UPDATE")
            conn.execute("SET lock_timeout = '50ms'")
            grab("lock_timeout", "UPDATE iolab.runs SET status='x'", conn)
            other.execute("ROLLBACK")
        with server.admin() as admin:
            admin.execute("DROP ROLE IF EXISTS outage_nobody")
            admin.execute("CREATE ROLE outage_nobody LOGIN")
        with psycopg.connect(server.url(url.split("/")[3].split("?")[0], "outage_nobody"), autocommit=True) as nobody:
            grab("privilege", "UPDATE iolab.runs SET status='x'", nobody)
        conn.execute("INSERT INTO iolab.role_quota VALUES (current_user, 0) ON CONFLICT (role) DO UPDATE"
                     " SET max_bytes = 0")
        grab("quota", "UPDATE iolab.runs SET extra_json = repeat('x', 1000)", conn)  # 53400: until raised
        pid = conn.info.backend_pid
        with server.admin() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        grab("terminated", "SELECT 1", conn)
    assert seen == {"read_only": "read_only", "refused_unique": "refused", "refused_data": "refused",
                    "refused_client": "refused",
                    "serialization": "busy", "lock_timeout": "busy", "privilege": "later", "quota": "later",
                    "terminated": "connection"}, seen


def test_a_write_the_server_will_never_take_is_set_aside_and_the_run_goes_on(
        tmp_path: Path, server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    url = server.fresh_url()
    s = registry.open_store(url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:  # a rule an administrator added
            conn.execute("ALTER TABLE iolab.trials ADD CONSTRAINT sane_repetition CHECK (repetition < 1000)")
        notes: list[str] = []
        s.notify = notes.append
        s.create_run("r", "s", "builtin:s", {}, {}, {})
        s.save_trial("r", made_trial(0), None)
        s.save_trial("r", made_trial(1, trial_id="odd", repetition=5000), None)  # class 23: never
        s.save_trial("r", made_trial(2), None)
        s.set_status("r", "complete")
        assert [t.trial_id for t in s.trials("r")] == ["c0-r0", "c0-r2"]
        assert s.resolve("r").status == "complete" and s.waiting() == 0
        (aside,) = [json.loads(line) for line in Spool(s.location).rejected.read_text().splitlines()]
        assert aside["trial"]["trial_id"] == "odd" and "sane_repetition" in aside["reason"]
        assert any("set aside" in n for n in notes), notes
    finally:
        s.close()


def test_a_lost_connection_under_a_running_store_is_retried(server: PgServer, store_with_run: Any) -> None:
    """An administrator's pg_terminate_backend (57P01) between two writes: reconnected, written, not spooled."""
    s = store_with_run
    with server.admin() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (s.conn.info.backend_pid,))
    s.save_trial("r", made_trial(0), None)
    assert [t.trial_id for t in s.trials("r")] == ["c0-r0"] and s.waiting() == 0


def test_spool_of_two_processes_on_one_machine_keeps_each_runs_order(tmp_path: Path, server: PgServer,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two stores (as two processes would) keeping writes in one spool file at once, then one writes all."""
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "0.2")
    url = server.fresh_url()
    a, b = registry.open_store(url), registry.open_store(url)
    try:
        set_read_only(server, True)
        threads = [threading.Thread(target=_script, args=(st, rid)) for st, rid in ((a, "ra"), (b, "rb"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        set_read_only(server, False)
        a.close()  # closing writes everything kept, the other process's writes too, each run in order
        c = registry.open_store(url)
        try:
            for rid in ("ra", "rb"):
                assert [t.trial_id for t in c.trials(rid)] == [f"c{i % 2}-r{i}" for i in range(3)]
                assert c.resolve(rid).status == "complete"
            assert c.waiting() == 0
        finally:
            c.close()
    finally:
        a.close()
        b.close()
    shutil.rmtree(tmp_path / "spool", ignore_errors=True)


def test_one_spool_per_store_however_its_url_is_spelled(tmp_path: Path) -> None:
    """Kept with the password in the URL, written later with it in PGPASSWORD: the same spool."""
    from iolab.store.urls import shown

    paths = {Spool(shown(u), tmp_path).path for u in ("postgresql://alice:s3cret@db.example.org/iolab",
                                                       "postgres://alice@db.example.org/iolab",
                                                       "postgresql://alice@db.example.org/iolab?password=x")}
    assert len(paths) == 1, paths
    assert Spool(shown("postgresql://bob@db.example.org/iolab"), tmp_path).path not in paths


@needs_root
def test_a_full_disk_under_the_spool_ends_the_write_cleanly_and_tears_no_line(
        tmp_path: Path, server: PgServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool on a real tmpfs of 64 KiB, filled; the server read-only, so a write must be kept.
    Before, the half-written line stayed in the spool (every later flush ended in a JSONDecodeError)
    and the write raised a bare OSError. Now the spool is as before the write and the write raises
    DataDirUnwritable, which ends a run cleanly like a full ledger; once there is room, what was
    kept is written, in order."""
    from iolab.core.errors import DataDirUnwritable

    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    monkeypatch.setenv("IOLAB_DB_RETRY_S", "0.2")
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "iolab-test-spool", str(spool_dir)], check=True)
    url = server.fresh_url()
    s = registry.open_store(url)
    try:
        s.create_run("r", "s", "builtin:s", {}, {}, {})
        set_read_only(server, True)
        try:
            s.save_trial("r", made_trial(0), None)
            assert s.waiting() == 1
            (kept,) = _spool_files_in(spool_dir)
            before = kept.read_bytes()
            with open(spool_dir / "filler", "wb", buffering=0) as filler:  # the disk fills: every page taken
                try:
                    while True:
                        filler.write(b"\0" * 4096)
                except OSError:
                    pass
            with pytest.raises(DataDirUnwritable, match="cannot keep a write"):
                s.save_trial("r", made_trial(1), {"raw": "x" * 20_000})  # more than the last page holds
            assert kept.read_bytes() == before, "a torn line was left in the spool"
            (spool_dir / "filler").unlink()
        finally:
            set_read_only(server, False)
        s.close()  # room again, the server writable: closing writes what was kept
        with reopened(s) as again:
            assert [t.trial_id for t in again.trials("r")] == [made_trial(0).trial_id] and again.waiting() == 0
    finally:
        subprocess.run(["umount", "-l", str(spool_dir)], check=False)


def _spool_files_in(directory: Path) -> list[Path]:
    return [f for f in directory.glob("*.jsonl") if not f.name.endswith(".rejected.jsonl")]
