"""The store tests' real PostgreSQL (tests/store/pgserver.py): one server per session, stopped
after it; every test gets its own fresh database. Skips, saying why, only when the PostgreSQL
binaries are not installed (`./setup.sh install` installs them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .pgserver import PG_BIN, PgServer, missing_binaries


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
