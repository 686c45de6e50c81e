"""Real studies writing to the real PostgreSQL of conftest.py through the CLI: fio on a loop
device, 1 s trials, `--db`/IOLAB_DB pointing at the server.

* a study interrupted (SIGINT) and resumed on PostgreSQL, then `runs`, `report`, `compare`;
* two studies at once writing one PostgreSQL store: every trial of each, none twice;
* the server stopped (pg_ctl stop -m fast) mid-run and started again: the run finishes,
  every trial is in the store exactly once (kept in the local spool while the server was away).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.core.helpers import LOOP_TARGET, Lab, fio_workload, make_lab, needs_fio, needs_root, study_table

from .pgserver import PgServer

pytestmark = [needs_root, needs_fio]


@pytest.fixture
def pg_lab(tmp_path: Path, pg_server: PgServer) -> Iterator[tuple[Lab, str]]:
    """An isolated iolab (own data, scratch, spool) whose results store is a fresh PostgreSQL database."""
    lab = make_lab(tmp_path / "lab")
    url = pg_server.fresh_url()
    lab.env["IOLAB_DB"] = url
    try:
        yield lab, url
    finally:
        lab.force_cleanup()


def _spec(lab: Lab, name: str, reps: int = 2, bs: list[str] | None = None) -> Path:
    return lab.spec(study_table(name, repetitions=reps, max_repetitions=reps) + LOOP_TARGET
                    + fio_workload(bs=bs or ["4k", "8k"]), name=f"{name}.toml")


def _rows(url: str, run_id: str | None = None) -> list[tuple]:
    """(run_id, trial_id, status) of every stored trial, in stored order."""
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('iolab.trials')").fetchone() == (None,):
            return []  # iolab has not made its tables yet
        if run_id is None:
            return conn.execute("SELECT run_id, trial_id, status FROM iolab.trials ORDER BY run_id, seq").fetchall()
        return conn.execute("SELECT run_id, trial_id, status FROM iolab.trials WHERE run_id=%s ORDER BY seq",
                            (run_id,)).fetchall()


def _runs(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT id, status FROM iolab.runs ORDER BY created").fetchall()


def test_a_study_interrupted_and_resumed_on_postgresql_then_runs_report_compare(pg_lab: tuple[Lab, str]) -> None:
    lab, url = pg_lab
    proc = lab.popen("run", _spec(lab, "pga"))
    try:
        lab.wait_until(lambda: len(_rows(url)) >= 1, 90, "a stored trial", proc)
        lab.wait_until(lambda: lab.fio_pids(), 15, "the next fio", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    (run_a, status), = _runs(url)
    assert status == "partial" and 1 <= len(_rows(url, run_a)) < 4
    before = _rows(url, run_a)
    r = lab.iolab("run", "--resume", run_a, timeout=120)
    assert r.returncode == 0, r.stderr
    after = _rows(url, run_a)
    assert after[:len(before)] == before and len(after) == 4 and len({t[1] for t in after}) == 4
    assert all(t[2] == "ok" for t in after)
    assert _runs(url) == [(run_a, "complete")]
    r = lab.iolab("run", _spec(lab, "pga"), timeout=120)
    assert r.returncode == 0, r.stderr
    (_, _), (run_b, _) = _runs(url)
    lab.assert_nothing_left()

    listed = lab.iolab("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == [run_b, run_a]
    report = lab.iolab("report", run_a, "--format", "json")
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    assert doc["status"] == "complete" and len(doc["trials"]) == 4
    cmp = lab.iolab("compare", run_a, run_b, "--json")
    assert cmp.returncode == 0, cmp.stderr
    assert json.loads(cmp.stdout), "a comparison of two stored runs"
    assert not (lab.data / "results.sqlite").exists(), "IOLAB_DB selected PostgreSQL: no SQLite file made"


def test_two_studies_at_once_write_one_postgresql_store(pg_lab: tuple[Lab, str]) -> None:
    lab, url = pg_lab
    procs = [lab.popen("run", _spec(lab, f"pgc{i}")) for i in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=180))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    runs = _runs(url)
    assert len(runs) == 2 and {s for _, s in runs} == {"complete"}
    for run_id, _ in runs:
        ids = [t[1] for t in _rows(url, run_id)]
        assert len(ids) == len(set(ids)) == 4, ids
    lab.assert_nothing_left()


def test_the_server_stopped_mid_run_loses_no_trial_and_duplicates_none(pg_lab: tuple[Lab, str],
                                                                      pg_server: PgServer) -> None:
    lab, url = pg_lab
    lab.env["IOLAB_DB_RETRY_S"] = "1"  # give up quickly: the trials of the outage go to the spool
    spool = lab.data / "spool"
    proc = lab.popen("run", _spec(lab, "pgfault", reps=3))
    stopped = False
    try:
        lab.wait_until(lambda: len(_rows(url)) >= 1, 90, "a stored trial", proc)
        pg_server.stop()
        stopped = True
        lab.wait_until(lambda: any(f.stat().st_size for f in spool.glob("*.jsonl")) if spool.exists() else False,
                       60, "a trial kept in the spool", proc)
        time.sleep(1)
        pg_server.start()
        stopped = False
        _, err = proc.communicate(timeout=180)
    finally:
        if stopped:
            pg_server.start()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    (run_id, status), = _runs(url)
    assert status == "complete"
    ids = [t[1] for t in _rows(url, run_id)]
    assert len(ids) == 6 and len(set(ids)) == 6, f"lost or duplicated: {ids}"
    assert all(f.stat().st_size == 0 for f in spool.glob("*.jsonl")), "the spool was flushed"
    lab.assert_nothing_left()
