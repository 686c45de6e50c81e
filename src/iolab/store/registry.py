"""The `--db` value -> a results store backend, by URL scheme.

A value without a scheme is a file path (SQLite); `scheme://...` selects the backend
registered for that scheme. Backends are imported lazily, so a driver (e.g. psycopg for
PostgreSQL, issue 14) is only needed by whoever uses it. Adding a backend is one module
(a `store.base.Store`) and one line in BACKENDS.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from iolab.core.errors import InputError
from iolab.store.base import Store
from iolab.store.urls import SCHEME, shown

BACKENDS: dict[str, str] = {
    "sqlite": "iolab.store.sqlite:SqliteStore",
    "postgresql": "iolab.store.postgres:PostgresStore",
    "postgres": "iolab.store.postgres:PostgresStore",  # libpq accepts both spellings
}
DEFAULT_SCHEME = "sqlite"  # a plain path


def scheme_of(ref: str) -> str:
    """'postgresql://h/db' -> 'postgresql' (a driver suffix like postgresql+psycopg is kept); a path -> sqlite."""
    m = SCHEME.match(ref)
    return m.group(1).lower() if m else DEFAULT_SCHEME


def backend_for(ref: str | Path, what: str = "--db") -> type[Store]:
    """The backend class for a --db value; InputError naming the scheme when none is registered."""
    ref = str(ref)
    scheme = scheme_of(ref)
    target = BACKENDS.get(scheme)
    if target is None:
        raise InputError(f"{what} {shown(ref)[:200]!r}: no results store for {scheme}:// "
                         f"(iolab has: {', '.join(f'{s}://' for s in sorted(BACKENDS))} and plain file paths)")
    module, _, name = target.partition(":")
    cls: type[Store] = getattr(importlib.import_module(module), name)
    return cls


def check_target(ref: str | Path, what: str = "--db") -> None:
    """InputError unless a run could write its results at `ref`; creates nothing."""
    backend_for(ref, what).check_target(str(ref), what)


def open_store(ref: str | Path, what: str = "--db", spool: bool = True) -> Store:
    """The store at `ref` for writing, checked, created or migrated if needed (a run writes there).
    `spool=False`: a write the server cannot take raises (`iolab push`, repeated instead)."""
    cls = backend_for(ref, what)
    cls.check_target(str(ref), what)
    return cls.open(str(ref), what, spool=spool)


def open_existing(ref: str | Path, what: str = "--db") -> Store | None:
    """The store at `ref` for commands that only read, opened read-only (nothing created, migrated
    or written: a role that may only read uses it); None when there is none yet."""
    cls = backend_for(ref, what)
    return cls.open(str(ref), what, read_only=True) if cls.exists(str(ref), what) else None
