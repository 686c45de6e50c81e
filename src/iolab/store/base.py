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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from iolab.core import owner as owners
from iolab.core.errors import IolabError
from iolab.core.model import TrialResult


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


class Store(ABC):
    """A results store. Open one with `store.registry.open_store()`, never a backend directly."""

    # what the store is, for messages ("results in ..."): a path, or a URL without its password
    location: str

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
    def stored_version(cls, ref: str, what: str) -> int | None:
        """The schema version of the store at `ref` (store/schema.py), None when it has none yet;
        read without migrating or creating anything (`iolab doctor`)."""

    @classmethod
    @abstractmethod
    def open(cls, ref: str, what: str) -> Store:
        """Open (creating it, and its schema, if needed) the store at `ref`; InputError when
        it cannot be used, naming `what` and `ref`."""

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
        """The newest `limit` runs, newest first."""

    @abstractmethod
    def runs_with_prefix(self, prefix: str) -> list[RunRecord]:
        """Runs whose id starts with `prefix` (literally), newest first."""

    @abstractmethod
    def put_run(self, rec: RunRecord) -> None:
        """Create or replace the run `rec` as it is (times, status, extra): `iolab push` copies runs
        between stores with it, so pushing twice leaves one run."""

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
