"""The connection to a PostgreSQL store: made from a URL libpq parses, come back after the server
went away, and every failure said in words that never carry the password.

`Link.retrying` runs one transaction again while the server cannot take it now (by SQLSTATE,
store/pgerrors.py), on a fresh connection where that may help (a restart, a failover), for up
to the retry window; then it raises StoreFailed with the reason's kind, for the caller to keep
the write in the spool or to say so.

A server that does not answer at all (frozen, its machine hung, a network that drops packets)
raises nothing: libpq waits on its socket for ever. So every exchange has a deadline kept on
this side (`Watchdog`: a timer that shuts the socket down, which ends libpq's wait with a
lost connection), and every session asks the server to give up a lock wait itself after
LOCK_WAIT_S (`lock_timeout`: a colleague's `LOCK TABLE`, a long `VACUUM FULL`), so a write is
retried and then kept in the spool instead of holding the run, and no backend is left waiting.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psycopg

from iolab.core.errors import InputError, IolabError
from iolab.store.pgerrors import RECONNECT, RETRIED, Refusal, StoreFailed, describe, kind
from iolab.store.urls import UnparsableURL, parse, scrub_message, shown

CONNECT_TIMEOUT_S = 10
ANSWER_S = 15.0  # the least time one attempt of a write is given (its retry window may give more)
READ_ANSWER_S = 120.0  # one read (a history over a big team store is one query)
OPEN_ANSWER_S = 60.0  # opening: finding, creating or upgrading iolab's tables
LOCK_WAIT_S = 5  # the server gives up a lock wait after this (lock_timeout): SQLSTATE 55P03, retried
MIGRATION_LOCK_WAIT_S = 45  # waiting for another process's migration of the same store
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

    def retrying(self, op: Callable[[], T], window_s: float | None = None, answer_s: float = ANSWER_S) -> T:
        """`op` (one transaction on `self.conn`), again while the server cannot take it now, for up
        to the retry window; then StoreFailed. Each attempt gets the rest of the window, at least
        `answer_s`, for the server to answer; one that does not answer is a lost connection."""
        deadline = time.monotonic() + (retry_window_s() if window_s is None else window_s)
        pause = 0.2
        while True:
            patience = max(answer_s, deadline - time.monotonic())
            watch = Watchdog(patience)
            try:
                if self.conn.closed or self.conn.broken:
                    self.conn.close()
                    self.conn = driver_connect(self.url)
                with watch.on(self.conn):
                    return op()
            except Refusal as exc:
                raise StoreFailed("refused", f"results store {self.location}: {exc}") from None
            except psycopg.Error as exc:
                k = "connection" if watch.fired else kind(exc)
                if k in RECONNECT:
                    self.conn.close()
                if k not in RETRIED or time.monotonic() + pause > deadline:
                    said = watch.said() if watch.fired else scrub_message(str(exc), self.url)
                    raise StoreFailed(k, f"results store {self.location}: {describe(k)} ({said})",
                                      None if watch.fired else exc.sqlstate) from None
                time.sleep(pause)
                pause = min(pause * 2, 2.0)


class Watchdog:
    """A deadline for the server's answer, kept on this side: when it passes, the connection's
    socket is shut down (from a timer thread), so libpq's wait ends with a lost connection
    instead of lasting as long as the server stays frozen. `fired` tells that loss from others."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.fired = False
        self._lock = threading.Lock()  # the socket is never shut after the exchange ended (its fd
        self._over = False  # may be closed and its number reused by then)

    def said(self) -> str:
        return f"no answer within {self.seconds:g} s: a frozen or hung server, or a network that drops packets"

    @contextmanager
    def on(self, conn: psycopg.Connection) -> Iterator[Watchdog]:
        """The exchanges inside must be answered in time; if not, the connection is lost (the caller
        closes it), and this watchdog (`fired`, `said`, or given to `open_error`) says why."""
        timer = threading.Timer(self.seconds, self._sever, (conn,))
        timer.daemon = True
        timer.start()
        try:
            yield self
        finally:
            timer.cancel()
            with self._lock:
                self._over = True

    def _sever(self, conn: psycopg.Connection) -> None:
        with self._lock:
            if self._over:
                return
            try:
                fd = conn.pgconn.socket
            except psycopg.Error:
                return  # closed: nothing waits on it
            self.fired = True
            try:
                with socket.socket(fileno=os.dup(fd)) as dup:  # shutdown acts on the socket, not on the fd
                    dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


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
    """A session that answers within CONNECT_TIMEOUT_S and whose lock waits end after LOCK_WAIT_S
    (set after connecting, not as a startup option: a pooler in between may refuse options)."""
    conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="iolab")
    try:
        with Watchdog(CONNECT_TIMEOUT_S).on(conn):
            conn.execute(f"SET lock_timeout = '{LOCK_WAIT_S}s'")
    except BaseException:
        conn.close()
        raise
    return conn


def open_error(exc: psycopg.Error, what: str, url: str, role: str | None, read_only: bool,
               watch: Watchdog | None = None) -> IolabError:
    """A psycopg error while opening a store, as a message that says what to do."""
    location = shown(url)
    if watch is not None and watch.fired:
        return InputError(f"{what} {location}: the server cannot be reached ({watch.said()})")
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


def ask(ref: str, what: str, question: Callable[[psycopg.Connection], T], read_only: bool = True) -> T:
    """One question to the store at `ref` on a connection of its own, answered in time or an
    error that says what to do (the checks made without opening the store: doctor, --dry-run)."""
    with connect(ref, what) as conn, Watchdog(ANSWER_S).on(conn) as watch:
        try:
            return question(conn)
        except psycopg.Error as exc:
            raise open_error(exc, what, ref, None, read_only, watch) from None
