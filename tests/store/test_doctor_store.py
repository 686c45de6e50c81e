"""`iolab doctor`'s store line: the decision on given facts (every outcome), and the real
check against the PostgreSQL of conftest.py and a SQLite file: reachable and writable with its
schema version; a newer store, an unreachable server and a role that may not write fail (exit
1); trials waiting in the spool warn; the password never shown; nothing created or migrated.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from iolab import doctor as d
from iolab.core.model import TrialResult
from iolab.store import registry, schema
from iolab.store.spool import Spool, trial_op
from tests.core.helpers import drive, make_lab

from .pgserver import PASSWORD, PASSWORD_ROLE, PgServer


def test_the_store_decision_on_given_facts() -> None:
    assert d.store_check("pg://h/db", None, None, 2, 0).state == "ok"
    assert "created" in d.store_check("pg://h/db", None, None, 2, 0).detail
    assert "migrated to v2" in d.store_check("pg://h/db", None, 1, 2, 0).detail
    as_is = d.store_check("pg://h/db", None, 1, 2, 0, migrates=False)  # a writer that may not migrate
    assert as_is.state == "ok" and "migrated" not in as_is.detail and "written as it is" in as_is.detail
    reader = d.store_check("pg://h/db", None, 1, 2, 0, write_problem="role reader may not write")
    # a reader's run migrates nothing: doctor names who can, and promises no migration
    assert reader.state == "warn" and "migrated" not in reader.detail and "iolab migrate" in reader.detail
    assert "not writable here: role reader may not write" in reader.detail
    assert d.store_check("pg://h/db", None, 2, 2, 0).detail == "pg://h/db: schema v2, writable"
    warn = d.store_check("pg://h/db", None, 2, 2, 3)
    assert warn.state == "warn" and "3 write(s) wait in the local spool" in warn.detail
    bad = d.store_check("pg://h/db", "cannot connect", None, 2, 0)
    assert bad.state == "fail" and bad.detail == "pg://h/db: cannot connect"


def _store_line(result: dict) -> dict:
    doc = json.loads(result["stdout"])
    (line,) = [c for c in doc["checks"] if c["name"] == "store"]
    return line


def test_doctor_checks_the_configured_store_for_real(pg_server: PgServer, tmp_path: Path) -> None:
    ready = pg_server.fresh_url()
    registry.open_store(ready).close()
    empty = pg_server.fresh_url()
    newer = pg_server.fresh_url()
    registry.open_store(newer).close()
    with psycopg.connect(newer, autocommit=True) as conn:
        # a newer iolab's store that this one may neither read nor write
        conn.execute("UPDATE iolab.meta SET value='99' WHERE key IN ('schema_version', 'min_reader_version')")
    secret = pg_server.url("postgres", f"{PASSWORD_ROLE}:wrong-{PASSWORD}")
    lab = make_lab(tmp_path / "lab")
    try:
        # the whole command twice (exit status, JSON, argv in the environment) ...
        ok, refused = drive(lab, [["doctor", "--json", "--db", ref] for ref in (ready, secret)])
        # ... and the store line's real check on every kind of store, in this process
    finally:
        lab.force_cleanup()
    assert ok["exit"] == 0 or any(c["state"] == "fail" for c in json.loads(ok["stdout"])["checks"]
                                  if c["name"] != "store")
    assert _store_line(ok) == {"name": "store", "state": "ok",
                               "detail": f"{registry.shown(ready)}: schema v{schema.LATEST}, writable; "
                                         "role iolab has used 0B of its 20GB quota"}
    assert refused["exit"] == 1 and _store_line(refused)["state"] == "fail"
    assert "cannot connect" in _store_line(refused)["detail"] and PASSWORD not in refused["stdout"] + refused["stderr"]

    fresh = d._store(empty, "--db")
    assert fresh.state == "ok" and "no store yet" in fresh.detail
    assert registry.backend_for(empty).stored_version(empty, "--db") is None, "doctor created nothing"
    too_new = d._store(newer, "--db")
    assert too_new.state == "fail" and "schema version 99, newer" in too_new.detail
    sqlite = d._store(str(tmp_path / "new.sqlite"), "--db")
    assert sqlite.state == "ok" and not (tmp_path / "new.sqlite").exists()


def test_trials_waiting_in_the_spool_warn(pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    url = pg_server.fresh_url()
    registry.open_store(url).close()
    Spool(registry.shown(url)).add(trial_op("r", _trial(), None, 1.0))
    line = d._store(url, "--db")
    assert line.state == "warn" and "1 write(s) wait in the local spool" in line.detail


def _trial() -> TrialResult:
    return TrialResult("t", "c", 0, {}, "ok", None, {"iops": 1.0}, {}, {})
