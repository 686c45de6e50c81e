"""What a PostgreSQL error means for a write: try again now, keep it for later, or never.

Decided by the error's SQLSTATE (PostgreSQL's own classification, appendix A of its manual),
not by psycopg's exception class: a read-only transaction (25006, what a failover to a standby
or `default_transaction_read_only` gives) is an `InternalError` in psycopg's hierarchy and a
lost connection an `OperationalError`, yet both mean "not now". Only what the server proves
it will never take (class 22, the data; class 23, an integrity constraint) is refused; every
other error keeps the write for later, so nothing finished is lost whatever the server does.

    connection  08 (connection exception), 57P01-57P03 (admin or crash shutdown, cannot connect now),
                and a client error without SQLSTATE (the client lost the server): reconnect, retry
    read_only   25006: reconnect and retry (behind a multi-host URL with target_session_attrs
                the next connection may reach the new primary)
    busy        40 (serialization failure, deadlock), 53 (disk full, too many connections), 55
                (lock not available), 57014 (statement timeout), 58 (I/O error): retry
    refused     22 (data exception), 23 (integrity constraint violation), and a value the client
                cannot send at all (psycopg's DataError without SQLSTATE: a NUL in text): never
    later       53400 (configuration limit: a role over its quota in the team store, schema
                version 4, until the tables' owner raises it) and anything else (e.g. 42501
                insufficient privilege until an administrator grants it, 42P01 a table not there
                yet, a query the client refuses): no retry now, kept
"""

from __future__ import annotations

from typing import Literal

import psycopg

from iolab.core.errors import IolabError

Kind = Literal["connection", "read_only", "busy", "refused", "later"]
RETRIED: frozenset[Kind] = frozenset({"connection", "read_only", "busy"})  # within the retry window
RECONNECT: frozenset[Kind] = frozenset({"connection", "read_only"})  # on a fresh connection

_CONNECTION_STATES = frozenset({"57P01", "57P02", "57P03"})
_BUSY_CLASSES = frozenset({"40", "53", "55", "58"})


def kind(exc: psycopg.Error) -> Kind:
    state = exc.sqlstate
    if state is None:  # no answer from the server: the client's own error
        if isinstance(exc, psycopg.DataError):
            return "refused"  # what libpq cannot send at all (a NUL in a text value)
        if isinstance(exc, psycopg.ProgrammingError):
            return "later"  # a query iolab got wrong: kept for an iolab that gets it right
        return "connection"
    if state[:2] == "08" or state in _CONNECTION_STATES:
        return "connection"
    if state == "25006":
        return "read_only"
    if state == "53400":  # a limit that waiting does not lift (a role's quota: store/schema.py)
        return "later"
    if state[:2] in _BUSY_CLASSES or state == "57014":
        return "busy"
    if state[:2] in ("22", "23"):
        return "refused"
    return "later"


def describe(k: Kind) -> str:
    """Why a write could not be made now, for a message."""
    return {"connection": "the server cannot be reached", "read_only": "the server is read-only",
            "busy": "the server is busy", "refused": "the server refuses the data",
            "later": "the server refuses the write for now"}[k]


class StoreFailed(IolabError):
    """A store operation failed after its retries; `kind` says whether it may succeed later,
    `sqlstate` what the server said (None: no answer, or iolab's own refusal)."""

    def __init__(self, k: Kind, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.kind = k
        self.sqlstate = sqlstate


class Refusal(Exception):
    """iolab's own "never" inside a transaction (a run that is not there, a run id taken by
    another origin): rolled back and treated as the server's class 23."""
