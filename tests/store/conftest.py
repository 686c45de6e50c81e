"""The store tests' real PostgreSQL (tests/store/pgserver.py): one server per session, stopped
after it; every test gets its own fresh database. Skips, saying why, only when the PostgreSQL
binaries are not installed (`./setup.sh install` installs them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.store import registry
from iolab.store.base import Store
from tests.core.helpers import Lab, make_lab

from .pgserver import PG_BIN, PgServer, missing_binaries, set_read_only


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"PostgreSQL server binaries not installed ({', '.join(missing)} missing in {PG_BIN}; "
                    "./setup.sh install installs Debian's postgresql)")
    server = PgServer.create()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def server(pg_server: PgServer) -> Iterator[PgServer]:
    """The session's server, left writable and running whatever the test does to it."""
    try:
        yield pg_server
    finally:
        pg_server.thaw()
        if not (pg_server.data / "postmaster.pid").exists():
            pg_server.start()
        set_read_only(pg_server, False)


@pytest.fixture
def pg_lab(tmp_path: Path, server: PgServer) -> Iterator[tuple[Lab, str]]:
    """A lab whose results go to a fresh database of the session's server, giving up quickly (what
    the server does not take goes to the spool)."""
    lab = make_lab(tmp_path / "lab")
    url = server.fresh_url()
    lab.env["IOLAB_DB"] = url
    lab.env["IOLAB_DB_RETRY_S"] = "1"
    try:
        yield lab, url
    finally:
        lab.force_cleanup()


@pytest.fixture
def store_with_run(tmp_path: Path, server: PgServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The store API on a fresh database of the session's server, run "r" created (the data dir, where
    the spool goes, in tmp_path)."""
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path))
    s = registry.open_store(server.fresh_url())
    try:
        s.create_run("r", "s", "builtin:s", {}, {}, {})
        yield s
    finally:
        s.close()
