"""`iolab push RUN --to STORE` through the CLI: a run of a local SQLite store copied into the
real PostgreSQL of conftest.py, exactly (record, trials in order with NaN and tracebacks, raw
output), twice without duplicating; a partial run pushed and pushed again once it has more;
refusals (unknown run, unknown store scheme) are exit 2; a password in --to never shown.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from iolab.core.model import TrialResult
from iolab.store import registry

from .pgserver import PASSWORD, PASSWORD_ROLE, PgServer


def _trial(i: int) -> TrialResult:
    return TrialResult(trial_id=f"c{i % 2}-r{i}", config_id=f"c{i % 2}", repetition=i // 2, params={"bs": 4096},
                       status="failed" if i == 2 else "ok", error="boom" if i == 2 else None,
                       metrics={"iops": math.nan if i == 1 else 100.0 + i}, probes={"p": [i]},
                       manifest={"kernel": "6.1"}, flags=[], started=1e9 + i, ended=1e9 + i + 0.5,
                       traceback="Traceback ...\nValueError\n" if i == 2 else None)


def _iolab(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IOLAB_DATA": str(tmp / "data")}
    env.pop("IOLAB_DB", None)
    return subprocess.run([sys.executable, "-m", "iolab.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=60)


def _norm(t: TrialResult) -> dict[str, Any]:
    return {**t.__dict__, "metrics": {k: ("nan" if math.isnan(v) else v) for k, v in t.metrics.items()}}


def _counts(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        runs = conn.execute("SELECT count(*) FROM iolab.runs").fetchone()
        trials = conn.execute("SELECT count(*) FROM iolab.trials").fetchone()
    return (runs[0] if runs else -1, trials[0] if trials else -1)


def test_push_copies_a_run_exactly_and_twice_is_still_once(pg_server: PgServer, tmp_path: Path) -> None:
    db = tmp_path / "laptop.sqlite"
    local = registry.open_store(db)
    local.create_run("20260101-000000-s-laptop-aaaaaa", "s", "builtin:s", {"study": {"name": "s"}}, {"quick": True},
                     {"kernel": "6.1"})
    local.create_run("20260101-000000-s-laptop-bbbbbb", "s", "builtin:s", {}, {}, {})
    for i in range(3):
        local.save_trial("20260101-000000-s-laptop-aaaaaa", _trial(i), {"raw": i} if i != 1 else None)
    local.set_extra("20260101-000000-s-laptop-aaaaaa", "problems", [])
    url = pg_server.fresh_url()

    r = _iolab(tmp_path, "push", "20260101-000000-s-laptop-a", "--db", str(db), "--to", url)
    assert r.returncode == 0, r.stderr
    assert "pushed 20260101-000000-s-laptop-aaaaaa (running, 3 trials)" in " ".join(r.stdout.split())
    assert f"as iolab@{socket.gethostname()}" in " ".join(r.stdout.split())
    assert _counts(url) == (1, 3)
    # the partial run goes on locally and is pushed again: one copy, now with 4 trials
    local.save_trial("20260101-000000-s-laptop-aaaaaa", _trial(3), {"raw": 3})
    local.set_status("20260101-000000-s-laptop-aaaaaa", "complete")
    for _ in range(2):
        r = _iolab(tmp_path, "push", "20260101-000000-s-laptop-aaaaaa", "--db", str(db), "--to", url)
        assert r.returncode == 0, r.stderr
    assert _counts(url) == (1, 4)

    team = registry.open_store(url)
    try:
        src, dst = local.resolve("20260101-000000-s-laptop-aaaaaa"), team.resolve("latest")
        assert {**dst.__dict__, "owner_role": None} == src.__dict__, \
            "the run record is copied as it is (times, status, extra, host)"
        assert dst.owner_role == "iolab", "the team store records the role that pushed it"
        assert [_norm(t) for t in team.trials(dst.id)] == [_norm(t) for t in local.trials(src.id)]
        for i, t in enumerate(local.trials(src.id)):
            assert team.raw(dst.id, t.trial_id) == local.raw(src.id, t.trial_id) == ({"raw": i} if i != 1 else None)
    finally:
        team.close()
        local.close()


def test_push_refusals_are_exit_2_and_never_show_a_password(pg_server: PgServer, tmp_path: Path) -> None:
    db = tmp_path / "laptop.sqlite"
    local = registry.open_store(db)
    local.create_run("r1", "s", "builtin:s", {}, {}, {})
    local.close()
    secret_to = pg_server.url("nosuchdb", f"{PASSWORD_ROLE}:{PASSWORD}")
    for argv, expect in ((["push", "nope", "--db", str(db), "--to", str(tmp_path / "x.sqlite")], "no run"),
                         (["push", "r1", "--db", str(db), "--to", "mysql://h/db"], "no results store for"),
                         (["push", "r1", "--db", str(db), "--to", secret_to], "cannot connect"),
                         (["push", "r1", "--db", str(tmp_path / "none.sqlite"), "--to", secret_to], "no runs in")):
        r = _iolab(tmp_path, *argv)
        assert r.returncode == 2, (argv, r.stderr)
        assert expect in " ".join(r.stderr.split()) and "Traceback" not in r.stderr, r.stderr
        assert PASSWORD not in r.stdout + r.stderr
    # SQLite -> SQLite works the same (the target is any store)
    r = _iolab(tmp_path, "push", "r1", "--db", str(db), "--to", str(tmp_path / "other.sqlite"))
    assert r.returncode == 0, r.stderr
    other = registry.open_store(tmp_path / "other.sqlite")
    try:
        assert [x.id for x in other.runs()] == ["r1"]
    finally:
        other.close()


def test_a_crafted_store_never_replaces_a_colleagues_run_unforced(pg_server: PgServer, tmp_path: Path) -> None:
    """The issue's attack: a local store made to hold a colleague's run id, pushed over it. Origins
    here differ by host under one shared role (the database cannot tell them apart:
    test_pg_roles.py has roles); `--force` replaces it and keeps the old run in the history."""
    url = pg_server.fresh_url()
    run_id = "20260101-000000-s-hosta-cccccc"
    mine, crafted = tmp_path / "mine.sqlite", tmp_path / "crafted.sqlite"
    for db, host, status, iops in ((mine, "host-a", "complete", 100.0), (crafted, "host-b", "running", 5.0)):
        s = registry.open_store(db)
        s.create_run(run_id, "s", "builtin:s", {}, {}, {"hostname": host})
        s.save_trial(run_id, TrialResult("t", "c", 0, {}, "ok", None, {"iops": iops}, {}, {}), None)
        s.set_status(run_id, status)
        s.close()
        con = sqlite3.connect(db)
        with contextlib.suppress(sqlite3.OperationalError):  # the run's host, as its origin
            con.execute("UPDATE runs SET owner_host=?", (host,))
        con.commit()
        con.close()
    assert _iolab(tmp_path, "push", run_id, "--db", str(mine), "--to", url).returncode == 0

    def stored() -> tuple:
        with psycopg.connect(url, autocommit=True) as conn:
            runs = "iolab.runs" if conn.execute("SELECT to_regclass('iolab.runs')").fetchone() != (None,) else "runs"
            trials = runs.replace("runs", "trials")
            return (conn.execute(f"SELECT status FROM {runs}").fetchall(),
                    conn.execute(f"SELECT metrics_json FROM {trials}").fetchall())

    assert stored() == ([("complete",)], [('{"iops": 100.0}',)])
    r = _iolab(tmp_path, "push", run_id, "--db", str(crafted), "--to", url)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"holds run {run_id} from iolab@host-a, not iolab@host-b" in " ".join(r.stderr.split())
    assert stored() == ([("complete",)], [('{"iops": 100.0}',)]), "the colleague's run was changed"
    r = _iolab(tmp_path, "push", run_id, "--db", str(crafted), "--to", url, "--force")
    assert r.returncode == 0, r.stderr
    assert "replaced the run of iolab@host-a" in " ".join(r.stdout.split())
    assert stored() == ([("running",)], [('{"iops": 5.0}',)])
    with psycopg.connect(url, autocommit=True) as conn:
        (old,), = conn.execute("SELECT old_row FROM iolab.run_history").fetchall()
        (old_trial,), = conn.execute("SELECT old_row FROM iolab.trial_history").fetchall()
    assert json.loads(old)["status"] == "complete" and json.loads(json.loads(old_trial)["metrics_json"]) == {
        "iops": 100.0}
