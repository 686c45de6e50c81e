"""The results store interface: everything the runner, report, compare, reproduce and clean
ask of a store, and nothing more.

A backend is one module with one class that implements `Store` (like a target or a
workload: one table of operations), named by its URL scheme in `store/registry.py`; the
`--db` value selects it (a path: SQLite; `postgresql://...`: issue 14). Callers import
this module and the registry, never a backend. What a backend must guarantee:

* **A trial is saved in one transaction** (`save_trial`): its metrics, probe data, flags,
  manifest, traceback and raw output appear together or not at all, and a trial saved is
  durable when the call returns (an interrupted run loses nothing finished).
* **Trials come back in the order they were saved** (`trials`), with every field as given
  (NaN and infinities in metrics included); saving a trial id again replaces it, in its place.
* **A run ref** (`resolve`): a whole id, a unique id prefix (a prefix is literal text: no
  pattern characters), or `latest`; anything else is an IolabError naming the store.
* **One run, one process** (`claim_run`): setting the run's owner is atomic with the check
  that no other *live* owner holds it (core.owner tokens: pid + start time), so two
  `iolab run --resume` of one run never both proceed.
* **Concurrent writers** (two runs sharing one store) never lose each other's trials.
* **Opening checks, creating nothing** (`check_target`, `exists`): `--dry-run` and the read
  commands never create a store; a place that cannot hold one is an InputError (exit 2)
  naming the option and the place.
* **Readers write nothing** (`open(..., read_only=True)`): no migration, no spool flush, so a
  role that may only read (and an older store, and a compatible newer one) is read as it is.
* **Whose run it is** (`put_run`): every run records its owner, the database role that wrote it
  and the host it was made on; a run of another origin is replaced only when forced, and what
  it replaced stays in the store's history tables.
* **Nothing finished is lost** (PostgreSQL): a write the server cannot take now is kept in the
  local spool (store/spool.py) and written later, in order, once.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iolab.core import owner as owners
from iolab.core.errors import IolabError, RefusedError
from iolab.core.model import TrialResult
from iolab.store.schema import Stored
from iolab.store.spool import Flushed


@dataclass
class RunRecord:
    """One run as stored: what ran (spec, options, environment), its status and run-level data."""

    id: str
    study: str
    source: str
    spec: dict[str, Any]
    options: dict[str, Any]
    status: str
    created: float
    updated: float
    environment: dict[str, Any]
    extra: dict[str, Any]
    owner_role: str | None = None  # the database role that wrote it (None: SQLite, or stored before owners)
    owner_host: str | None = None  # the host it was made on

    @property
    def origin(self) -> str:
        """'role@host', for messages and `iolab runs`."""
        return f"{self.owner_role or '-'}@{self.owner_host or '?'}"


class OriginConflict(RefusedError):
    """`put_run` of a run whose id the target holds from another origin (role or host), unforced."""

    def __init__(self, location: str, run_id: str, theirs: str, ours: str):
        self.theirs = theirs
        super().__init__(f"{location} holds run {run_id} from {theirs}, not {ours}: iolab never replaces another "
                         "origin's run unless told to (--force keeps the replaced run in the store's history)")


def this_host() -> str:
    """The host a run made here records as its origin."""
    return socket.gethostname()


class Store(ABC):
    """A results store. Open one with `store.registry.open_store()`, never a backend directly."""

    # what the store is, for messages ("results in ..."): a path, or a URL without its password
    location: str
    # where the store says what it does on its own (a write kept in the spool, the spool written):
    # the runner points it at its console; a store never prints
    notify: Callable[[str], None] = staticmethod(lambda message: None)
    # why `runs()` left runs out (a row that is not JSON as iolab writes it): set by every backend
    unreadable: list[str]

    # -- opening (class methods: the registry calls them with the --db value) ---------------
    @classmethod
    @abstractmethod
    def check_target(cls, ref: str, what: str) -> None:
        """Raise InputError unless a store could be created or opened for writing at `ref`.
        Creates nothing (`--dry-run` calls it). `what` names the option in messages."""

    @classmethod
    @abstractmethod
    def exists(cls, ref: str, what: str) -> bool:
        """Is there a store at `ref` to read? False when there is none yet; InputError when
        `ref` names something that cannot be one. Creates nothing."""

    @classmethod
    @abstractmethod
    def stored_schema(cls, ref: str, what: str) -> Stored:
        """What the store at `ref` says of its schema (store/schema.py: version, and the oldest
        versions that read and write it), version None when it has none yet; read without
        migrating or creating anything (`iolab doctor`)."""

    @classmethod
    def quota(cls, ref: str, what: str) -> tuple[str, int, int] | None:
        """(role, bytes used, bytes allowed) of this login in the store's quota, read without
        changing anything (`iolab doctor`); None for a store without quotas."""
        return None

    @classmethod
    def migrates(cls, ref: str, what: str) -> bool:
        """Would a write here bring an older store's schema up to this iolab's? A local file is its
        user's to migrate; a team store's writer may not be allowed to, and then writes it as it
        is where it can (store/schema.py `writable_as_is`). Read without changing anything."""
        return True

    @classmethod
    def stored_version(cls, ref: str, what: str) -> int | None:
        return cls.stored_schema(ref, what).version

    @classmethod
    @abstractmethod
    def open(cls, ref: str, what: str, read_only: bool = False, spool: bool = True) -> Store:
        """Open the store at `ref`: for writing (creating it, and migrating its schema, if needed)
        or `read_only` (nothing written, nothing migrated). `spool=False`: a write the server
        cannot take raises instead of waiting in the spool (`iolab push`, which is repeated
        instead). InputError when it cannot be used, naming `what` and `ref`."""

    @abstractmethod
    def close(self) -> None: ...

    # -- runs ---------------------------------------------------------------------------------
    @abstractmethod
    def create_run(self, run_id: str, study: str, source: str, spec: dict[str, Any], options: dict[str, Any],
                   environment: dict[str, Any]) -> None:
        """A new run with status `running`."""

    @abstractmethod
    def set_status(self, run_id: str, status: str) -> None: ...

    @abstractmethod
    def set_extra(self, run_id: str, key: str, value: Any) -> None:
        """Run-level data that is not a trial (a sanity gate, teardown problems, a reproduction's children)."""

    @abstractmethod
    def runs(self, limit: int = 50) -> list[RunRecord]:
        """The newest `limit` runs, newest first; a run whose row cannot be read is left out and its
        reason added to `self.unreadable` (a list, set by every backend)."""

    @abstractmethod
    def runs_with_prefix(self, prefix: str) -> list[RunRecord]:
        """Runs whose id starts with `prefix` (literally), newest first."""

    @abstractmethod
    def put_run(self, rec: RunRecord, force: bool = False) -> RunRecord | None:
        """Create the run `rec` as it is (times, status, extra), or replace a run of that id from the
        same origin (`origin_of(rec)`): `iolab push` copies runs between stores with it, so pushing
        twice leaves one run. A run of that id from another origin raises OriginConflict; with
        `force` it is replaced, its trials removed, and both kept in the history tables; then the
        replaced run is returned (None otherwise). Never spooled: it raises when it cannot write."""

    @abstractmethod
    def origin_of(self, rec: RunRecord) -> tuple[str | None, str | None]:
        """The (role, host) this store records for `rec` when it writes it."""

    def waiting(self, run_id: str | None = None) -> int:
        """Writes (of `run_id`, or of any run) kept in the local spool for this store (backends
        without a spool: 0)."""
        return 0

    def write_kept(self) -> None:
        """Try once, now, to write what the local spool keeps (at the end of a run, whatever the pace
        of attempts says: what waits after this is what the run reports as waiting)."""
        return None  # a backend without a spool keeps nothing

    def replay(self) -> Flushed | None:
        """Write everything the local spool kept for this store, in order (`iolab push --spool`);
        None for a backend without a spool."""
        return None

    def resolve(self, ref: str) -> RunRecord:
        """A run by id, unique id prefix, or 'latest'."""
        if ref == "latest":
            newest = self.runs(1)
            if not newest:
                raise IolabError(f"no runs in {self.location} yet")
            return newest[0]
        found = self.runs_with_prefix(ref) if ref else []
        if not found:
            raise IolabError(f"no run {ref!r} in {self.location} (see `iolab runs`)")
        exact = [r for r in found if r.id == ref]
        if exact:
            return exact[0]
        if len(found) > 1:
            raise IolabError(f"{ref!r} matches {len(found)} runs; give more of the id")
        return found[0]

    @abstractmethod
    def claim_run(self, run_id: str, owner: str) -> str | None:
        """Make `owner` (a core.owner token) the process running `run_id`, atomically.

        Returns None on success, or the token of another owner that is still alive (then
        nothing changes). `holder_alive()` is the liveness rule every backend uses."""

    @abstractmethod
    def release_run(self, run_id: str, owner: str) -> None:
        """Drop `owner`'s claim on `run_id` (another owner's claim stays)."""

    @abstractmethod
    def holder(self, run_id: str) -> str | None:
        """The token of the process that claimed `run_id` last and has not released it (None: none).
        A run stored as running whose holder is dead on this host was killed (`iolab runs`)."""

    # -- trials -------------------------------------------------------------------------------
    @abstractmethod
    def save_trial(self, run_id: str, r: TrialResult, raw: Any) -> None:
        """Store one trial and its raw generator output in one durable transaction."""

    @abstractmethod
    def trials(self, run_id: str) -> list[TrialResult]:
        """The run's trials in the order they were saved."""

    @abstractmethod
    def raw(self, run_id: str, trial_id: str) -> Any:
        """A trial's raw generator output (None if it has none)."""


def holder_alive(token: str) -> bool:
    """Does the owner with this token still run? (An unparsable token counts as dead.)"""
    holder = owners.parse_token(token)
    return holder is not None and holder.alive()
