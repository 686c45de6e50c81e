"""What the PostgreSQL outage tests (test_pg_outage.py, test_pg_hung.py, test_secrets.py) look at
and make: where a store keeps its tables, the rows a run stored, the lines its spool keeps, a
small fio study on a loop device, a made-up trial, and the same store opened again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from iolab.core.model import TrialResult
from iolab.store import registry
from tests.core.helpers import LOOP_TARGET, Lab, fio_workload, study_table


def table(conn: psycopg.Connection, name: str) -> str | None:
    """Where iolab keeps a table: its schema, or public for a store from before (so these tests
    also say what an older iolab did), None before it made one."""
    for schema in ("iolab", "public"):
        if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.{name}",)).fetchone() == (True,):
            return f"{schema}.{name}"
    return None


def stored_trials(url: str, run_id: str | None = None) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        trials = table(conn, "trials")
        if trials is None:
            return []
        if run_id is None:
            return conn.execute(f"SELECT run_id, trial_id, status FROM {trials} ORDER BY run_id, seq").fetchall()
        return conn.execute(f"SELECT run_id, trial_id, status FROM {trials} WHERE run_id=%s ORDER BY seq",
                            (run_id,)).fetchall()


def stored_runs(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(f"SELECT id, status FROM {table(conn, 'runs')} ORDER BY created").fetchall()


def spool_files(lab: Lab) -> list[Path]:
    return [f for f in (lab.data / "spool").glob("*.jsonl") if not f.name.endswith(".rejected.jsonl")]


def spooled_lines(lab: Lab) -> int:
    return sum(len(f.read_text().splitlines()) for f in spool_files(lab))


def loop_study(lab: Lab, name: str, reps: int) -> Path:
    return lab.spec(study_table(name, repetitions=reps, max_repetitions=reps) + LOOP_TARGET
                    + fio_workload(bs=["4k", "8k"]), name=f"{name}.toml")


def every_trial_once(url: str, run_id: str, expected: int) -> None:
    stored = stored_trials(url, run_id)
    ids = [t[1] for t in stored]
    assert len(ids) == expected and len(set(ids)) == expected, f"lost or duplicated: {ids}"
    assert all(t[2] == "ok" for t in stored), stored
    with psycopg.connect(url, autocommit=True) as conn:
        started = [r[0] for r in conn.execute(f"SELECT started FROM {table(conn, 'trials')} WHERE run_id=%s"
                                              " ORDER BY seq", (run_id,)).fetchall()]
    assert started == sorted(started), "the trials are stored in the order they ran"


def ended_whole(lab: Lab, url: str, returncode: int, err: str, trials: int = 6) -> None:
    """The run ended well whatever the server did: exit 0 without a traceback, its one run complete
    with every trial once and in order, the spool written, nothing of the run left."""
    assert returncode == 0 and "Traceback" not in err, err
    (run_id, status), = stored_runs(url)
    assert status == "complete"
    every_trial_once(url, run_id, trials)
    assert spooled_lines(lab) == 0, "the spool was written"
    lab.assert_nothing_left()


def made_trial(i: int, **over: Any) -> TrialResult:
    fields: dict[str, Any] = dict(trial_id=f"c{i % 2}-r{i}", config_id=f"c{i % 2}", repetition=i // 2,
                                  params={"bs": 4096}, status="ok", error=None,
                                  metrics={"iops": 100.0 + i, "lat": float("nan")}, probes={"p": [i]},
                                  manifest={"job": "[j]\n"}, flags=[], started=1e9 + i, ended=1e9 + i + 0.5)
    fields.update(over)
    return TrialResult(**fields)


@contextmanager
def reopened(s: Any) -> Iterator[Any]:
    """The same store opened again (the same spool: the same data dir), closed after the block."""
    again = registry.open_store(s.url)
    try:
        yield again
    finally:
        again.close()
