"""The results store contract (store/base.py), run against every registered backend.

Each test gets a fresh, empty store of each backend in `store.registry.BACKENDS`, made by
FRESH (a backend added to the registry without an entry here fails
test_every_registered_backend_is_tested). What is checked is what the runner, report,
compare, reproduce and clean rely on: a trial saved whole or not at all and read back
exactly (NaN, infinities, a traceback, unicode, raw output), in saving order; run refs
(id, literal prefix, latest; ambiguous and unknown refs refused); run-level data; the
one-process-per-run claim against live and dead owners; durability across reopening;
two writers at once losing nothing; and opening checks that create nothing.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import sqlite3
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iolab.core import owner
from iolab.core.errors import InputError, IolabError
from iolab.core.model import TrialResult
from iolab.store import registry
from iolab.store.base import OriginConflict, RunRecord, Store

# backend class -> how a test gets a fresh, empty store of it (a --db value); the PostgreSQL
# one is a new database on the session's real server (conftest.py)
FRESH: dict[str, Callable[[Path, pytest.FixtureRequest], str]] = {
    "iolab.store.sqlite:SqliteStore": lambda tmp, _: str(tmp / "store" / "results.sqlite"),
    "iolab.store.postgres:PostgresStore": lambda _, req: req.getfixturevalue("pg_server").fresh_url(),
}
BACKEND_CLASSES = sorted(set(registry.BACKENDS.values()))

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=BACKEND_CLASSES, ids=lambda target: target.rpartition(":")[2])
def ref(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return FRESH[str(request.param)](tmp_path, request)


@pytest.fixture
def store(ref: str) -> Iterator[Store]:
    s = registry.open_store(ref)
    try:
        yield s
    finally:
        s.close()


def test_every_registered_backend_is_tested() -> None:
    assert set(registry.BACKENDS.values()) <= set(FRESH), "add a FRESH entry for the new backend"


def _trial(i: int, **over: Any) -> TrialResult:
    fields: dict[str, Any] = dict(
        trial_id=f"cfg{i % 2}-r{i}", config_id=f"cfg{i % 2}", repetition=i, params={"bs": 4096 * (i + 1), "ü": "ß"},
        status="ok", error=None, metrics={"iops": 1000.0 + i, "lat": 0.25}, probes={"disk": {"reads": [1, 2, 3]}},
        manifest={"target": {"kind": "loop"}, "job": "[j]\nrw=read\n"}, flags=[f"flag {i}"],
        started=1000.0 + i, ended=1001.5 + i)
    fields.update(over)
    return TrialResult(**fields)


def _run(store: Store, run_id: str, study: str = "s") -> None:
    store.create_run(run_id, study, f"builtin:{study}", {"study": {"name": study}}, {"quick": True},
                     {"kernel": "6.x", "cpus": 2})


# ---------------------------------------------------------------- runs

def test_runs_are_listed_newest_first_and_resolved_by_id_prefix_or_latest(store: Store) -> None:
    ids = ["20260101-000000-a-1111", "20260101-000000-a-2222", "x_y", "xay"]
    for run_id in ids:
        _run(store, run_id)
        time.sleep(0.01)  # distinct creation times
    assert [r.id for r in store.runs()] == ids[::-1]
    assert [r.id for r in store.runs(2)] == ["xay", "x_y"]
    rec = store.resolve("20260101-000000-a-1111")
    assert (rec.id, rec.study, rec.source, rec.status) == ("20260101-000000-a-1111", "s", "builtin:s", "running")
    assert rec.spec == {"study": {"name": "s"}} and rec.options == {"quick": True}
    assert rec.environment == {"kernel": "6.x", "cpus": 2} and rec.extra == {}
    assert store.resolve("20260101-000000-a-2").id == "20260101-000000-a-2222"
    assert store.resolve("latest").id == "xay"
    assert store.resolve("x_").id == "x_y", "a prefix is literal text: _ is not a wildcard"
    with pytest.raises(IolabError, match="matches 2 runs"):
        store.resolve("20260101")
    for bad in ("%", "_", "20260101%", "nope", "", "x_y'; DROP TABLE runs; --"):
        with pytest.raises(IolabError, match="no run"):
            store.resolve(bad)
    assert len(store.runs()) == 4


def test_an_empty_store_has_no_latest_run(store: Store) -> None:
    assert store.runs() == []
    with pytest.raises(IolabError, match="no runs in"):
        store.resolve("latest")


def test_status_and_extra_are_kept_per_run(store: Store) -> None:
    _run(store, "r1")
    _run(store, "r2")
    store.set_status("r1", "partial")
    store.set_extra("r1", "problems", [{"where": "teardown", "error": "E"}])
    store.set_extra("r1", "sanity_gate/v1-bfq", {"ratio": math.inf, "active": None})
    store.set_extra("r1", "problems", [])  # a key set again is replaced
    r1, r2 = store.resolve("r1"), store.resolve("r2")
    assert r1.status == "partial" and r2.status == "running"
    assert r1.extra == {"problems": [], "sanity_gate/v1-bfq": {"ratio": math.inf, "active": None}}
    assert r2.extra == {} and r1.updated >= r1.created


# ---------------------------------------------------------------- trials

def _same(a: TrialResult, b: TrialResult) -> bool:
    def norm(m: dict[str, float]) -> dict[str, Any]:
        return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in m.items()}
    return norm(a.metrics) == norm(b.metrics) and {**a.__dict__, "metrics": None} == {**b.__dict__, "metrics": None}


def test_a_trial_comes_back_exactly_as_saved_in_saving_order(store: Store) -> None:
    _run(store, "r1")
    _run(store, "other")
    saved = [_trial(0), _trial(1, metrics={"iops": math.nan, "ratio": math.inf, "neg": -math.inf}),
             _trial(2, status="failed", error="fio exited 1: ✗", metrics={}, probes={},
                    traceback="Traceback (most recent call last):\n  ...\nKeyError: 'x'\n"),
             _trial(3, manifest={"target": {"kind": "qemu", "nested": {"deep": [1, {"x": None}]}}, "ü": "ß" * 5000})]
    raws: list[Any] = [{"jobs": [{"read": {"iops": 1.5}}]}, None, None, "plain text ✓"]
    for t, raw in zip(saved, raws, strict=False):
        store.save_trial("r1", t, raw)
    store.save_trial("other", _trial(9), {"x": 1})
    back = store.trials("r1")
    assert [t.trial_id for t in back] == [t.trial_id for t in saved]
    for a, b in zip(saved, back, strict=False):
        assert _same(a, b), (a, b)
    assert back[2].traceback is not None and "KeyError" in back[2].traceback
    assert "_traceback" not in back[2].manifest, "the traceback is the trial's, not its manifest's"
    for t, raw in zip(saved, raws, strict=False):
        assert store.raw("r1", t.trial_id) == raw
    assert store.raw("r1", "no-such-trial") is None
    assert [t.trial_id for t in store.trials("other")] == ["cfg1-r9"]
    assert store.trials("no-such-run") == []


def test_saving_a_trial_id_again_replaces_it(store: Store) -> None:
    _run(store, "r1")
    store.save_trial("r1", _trial(0), {"v": 1})
    store.save_trial("r1", _trial(1), None)
    store.save_trial("r1", _trial(0, metrics={"iops": 5.0}), {"v": 2})
    back = store.trials("r1")
    assert [t.trial_id for t in back] == ["cfg0-r0", "cfg1-r1"], "a trial saved again keeps its place"
    assert next(t for t in back if t.trial_id == "cfg0-r0").metrics == {"iops": 5.0}
    assert store.raw("r1", "cfg0-r0") == {"v": 2}


def test_a_run_of_another_origin_is_replaced_only_when_forced(store: Store) -> None:
    """put_run (iolab push): the same origin replaces in place; another host (or role) is refused,
    and forced, the run is replaced whole (its old trials gone from it) and the old one returned."""
    rec = RunRecord("r", "s", "builtin:s", {"x": 1}, {}, "complete", 1.0, 2.0, {"kernel": "6.1"}, {}, None, "host-a")
    assert store.put_run(rec) is None
    store.save_trial("r", _trial(0), {"raw": 0})
    assert store.put_run(dataclasses.replace(rec, status="partial")) is None, "same origin: replaced in place"
    assert [t.trial_id for t in store.trials("r")] == ["cfg0-r0"]
    other = dataclasses.replace(rec, owner_host="host-b", status="running", spec={"x": 2})
    with pytest.raises(OriginConflict, match="holds run r from .*@host-a, not .*@host-b"):
        store.put_run(other)
    assert store.resolve("r").status == "partial" and store.resolve("r").owner_host == "host-a"
    old = store.put_run(other, force=True)
    assert old is not None and (old.status, old.owner_host, old.spec) == ("partial", "host-a", {"x": 1})
    now = store.resolve("r")
    assert (now.status, now.owner_host, now.spec) == ("running", "host-b", {"x": 2}) and store.trials("r") == []


def test_a_store_keeps_everything_across_closing_and_reopening(ref: str) -> None:
    s = registry.open_store(ref)
    _run(s, "r1")
    s.save_trial("r1", _trial(0), {"raw": True})
    s.set_status("r1", "complete")
    s.close()
    again = registry.open_existing(ref)
    assert again is not None
    try:
        assert again.resolve("latest").status == "complete"
        assert [t.trial_id for t in again.trials("r1")] == ["cfg0-r0"]
        assert again.raw("r1", "cfg0-r0") == {"raw": True}
    finally:
        again.close()


# ---------------------------------------------------------------- one run, one process

def _dead_token() -> str:
    p = subprocess.Popen(["sleep", "0"])
    start = owner.start_time(p.pid)
    p.wait()
    return owner.Owner(p.pid, start).token  # type: ignore[arg-type]


def test_a_run_is_claimed_by_one_live_owner_at_a_time(store: Store) -> None:
    _run(store, "r1")
    me = owner.me().token
    other = subprocess.Popen(["sleep", "60"])
    try:
        start = owner.start_time(other.pid)
        assert start is not None
        live_other = owner.Owner(other.pid, start).token
        assert store.claim_run("r1", live_other) is None
        assert store.claim_run("r1", live_other) is None, "the holder may claim again"
        assert store.claim_run("r1", me) == live_other, "a live owner's run is refused to another"
        store.release_run("r1", me)  # not mine to release: the claim stays
        assert store.claim_run("r1", me) == live_other
        store.release_run("r1", live_other)
        assert store.claim_run("r1", me) is None
        assert store.claim_run("r1", live_other) == me
    finally:
        other.kill()
        other.wait()
    _run(store, "r2")
    assert store.claim_run("r2", _dead_token()) is None
    assert store.claim_run("r2", me) is None, "a dead owner's claim is taken over"
    assert store.claim_run("r2", "garbage-token") == me
    _run(store, "r3")
    assert store.claim_run("r3", "garbage-token") is None
    assert store.claim_run("r3", me) is None, "a token that names no process is no live owner"


# ---------------------------------------------------------------- two writers

def _writer(ref: str, run_id: str, n: int, errors: Path | None = None) -> None:
    try:
        s = registry.open_store(ref)
        try:
            for i in range(n):
                s.save_trial(run_id, _trial(i, trial_id=f"{run_id}-t{i}"), {"i": i})
                s.set_extra(run_id, f"k{i % 3}", i)
        finally:
            s.close()
    except BaseException:
        if errors is None:
            raise
        errors.write_text(traceback.format_exc())  # the test shows why the writer failed
        raise


def test_two_writers_at_once_lose_nothing(ref: str, tmp_path: Path) -> None:
    s = registry.open_store(ref)
    _run(s, "a")
    _run(s, "b")
    ctx = multiprocessing.get_context("spawn")
    errors = {run_id: tmp_path / f"writer-{run_id}.err" for run_id in ("a", "b")}
    procs = [ctx.Process(target=_writer, args=(ref, run_id, 40, errors[run_id])) for run_id in ("a", "b")]
    for p in procs:
        p.start()
    for p, err in zip(procs, errors.values(), strict=False):
        p.join(120)
        assert p.exitcode == 0, err.read_text() if err.exists() else f"exit {p.exitcode}"
    try:
        for run_id in ("a", "b"):
            trials = s.trials(run_id)
            assert [t.trial_id for t in trials] == [f"{run_id}-t{i}" for i in range(40)]
            assert s.resolve(run_id).extra == {"k0": 39, "k1": 37, "k2": 38}
    finally:
        s.close()


# ---------------------------------------------------------------- opening

def test_checking_and_looking_create_nothing(ref: str) -> None:
    cls = registry.backend_for(ref)
    cls.check_target(ref, "--db")
    assert cls.exists(ref, "--db") is False
    assert registry.open_existing(ref) is None
    registry.check_target(ref)
    assert cls.exists(ref, "--db") is False, "a check created the store"


def test_the_scheme_of_the_db_value_selects_the_backend(tmp_path: Path) -> None:
    assert registry.scheme_of("/var/lib/iolab/results.sqlite") == "sqlite"
    assert registry.scheme_of("results.sqlite") == "sqlite"
    assert registry.scheme_of("weird:name.sqlite") == "sqlite", "a colon alone is still a path"
    assert registry.scheme_of("PostgreSQL://u@h/db") == "postgresql"
    assert registry.scheme_of("postgresql+psycopg://h/db") == "postgresql+psycopg"
    db = tmp_path / "r.sqlite"
    s = registry.open_store(f"sqlite://{db}")
    s.close()
    assert db.is_file(), "sqlite:///abs/path is the file /abs/path"
    for bad in ("mysql://h/db", "postgresql+psycopg://h/db", "file://x", "ftp://x/\x00"):
        with pytest.raises(InputError, match="no results store for") as e:
            registry.open_store(bad)
        assert "--db" in str(e.value)


def test_an_unknown_store_scheme_is_exit_2_naming_it(tmp_path: Path) -> None:
    for argv in (["runs", "--db", "mysql://h/db"], ["report", "latest", "--db", "redis://x"]):
        r = subprocess.run([sys.executable, "-m", "iolab.cli", *argv], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
        assert r.returncode == 2, r.stderr
        assert argv[-1] in r.stderr and "no results store for" in r.stderr and "Traceback" not in r.stderr


def test_a_newer_sqlite_schema_is_refused_for_writing(tmp_path: Path) -> None:
    """A store whose newer migrations need newer writers (test_upgrades.py has the whole range)."""
    db = tmp_path / "r.sqlite"
    s = registry.open_store(db)
    s.close()
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='999' WHERE key IN ('schema_version', 'min_writer_version')")
    con.commit()
    con.close()
    with pytest.raises(IolabError, match="schema version 999, newer"):
        registry.open_store(db)
