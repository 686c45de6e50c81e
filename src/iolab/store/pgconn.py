"""The connection to a PostgreSQL store: made from a URL libpq parses, come back after the server
went away, and every failure said in words that never carry the password.

`Link.retrying` runs one transaction again while the server cannot take it now (by SQLSTATE,
store/pgerrors.py), on a fresh connection where that may help (a restart, a failover), for up
to the retry window; then it raises StoreFailed with the reason's kind, for the caller to keep
the write in the spool or to say so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

from iolab.core.errors import InputError, IolabError
from iolab.store.pgerrors import RECONNECT, RETRIED, Refusal, StoreFailed, describe, kind
from iolab.store.urls import UnparsableURL, parse, scrub_message, shown

CONNECT_TIMEOUT_S = 10
T = TypeVar("T")


def retry_window_s() -> float:
    """How long a write keeps retrying before it goes to the spool (IOLAB_DB_RETRY_S, default 30 s:
    a server restart, a failover)."""
    try:
        return max(0.0, float(os.environ.get("IOLAB_DB_RETRY_S", "30")))
    except ValueError:
        raise InputError(f"IOLAB_DB_RETRY_S={os.environ['IOLAB_DB_RETRY_S'][:40]!r}: not a number of seconds") from None


class Link:
    """One connection to the store's server, made again when it is lost."""

    def __init__(self, url: str, what: str):
        self.url = url
        self.location = shown(url)
        self.conn = connect(url, what)

    def close(self) -> None:
        self.conn.close()

    def retrying(self, op: Callable[[], T], window_s: float | None = None) -> T:
        """`op` (one transaction on `self.conn`), again while the server cannot take it now, for up
        to the retry window; then StoreFailed."""
        deadline = time.monotonic() + (retry_window_s() if window_s is None else window_s)
        pause = 0.2
        while True:
            try:
                if self.conn.closed or self.conn.broken:
                    self.conn.close()
                    self.conn = driver_connect(self.url)
                return op()
            except Refusal as exc:
                raise StoreFailed("refused", f"results store {self.location}: {exc}") from None
            except psycopg.Error as exc:
                k = kind(exc)
                if k in RECONNECT:
                    self.conn.close()
                if k not in RETRIED or time.monotonic() + pause > deadline:
                    raise StoreFailed(k, f"results store {self.location}: {describe(k)} "
                                         f"({scrub_message(str(exc), self.url)})", exc.sqlstate) from None
                time.sleep(pause)
                pause = min(pause * 2, 2.0)


def connect(url: str, what: str) -> psycopg.Connection:
    """A connection in autocommit mode (transactions are explicit); InputError naming the URL without
    its password, and a URL libpq cannot parse described without being echoed."""
    try:
        parse(url)
    except UnparsableURL:
        raise InputError(f"{what}: {shown(url)}") from None
    try:
        return driver_connect(url)
    except psycopg.Error as exc:
        raise InputError(f"{what} {shown(url)}: cannot connect ({scrub_message(str(exc), url)})") from None


def driver_connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="iolab")


def open_error(exc: psycopg.Error, what: str, url: str, role: str | None, read_only: bool) -> IolabError:
    """A psycopg error while opening a store, as a message that says what to do."""
    location = shown(url)
    message = scrub_message(str(exc), url)
    k = kind(exc)
    if exc.sqlstate == "42501":
        who = f"role {role!r}" if role else "this role"
        need = "read iolab's tables (GRANT USAGE ON SCHEMA iolab and SELECT on its tables)" if read_only else \
            "create or upgrade iolab's tables: the role that owns them does that once, `iolab migrate --db URL`"
        return InputError(f"{what} {location}: {who} may not {need} (docs/store.md#roles; {message})")
    if k == "read_only":
        return InputError(f"{what} {location}: the server takes no writes now, and this iolab must create or upgrade "
                          f"iolab's tables first ({message})")
    if k in RETRIED:
        return InputError(f"{what} {location}: {describe(k)} ({message})")
    return IolabError(f"{what} {location}: {message}")
