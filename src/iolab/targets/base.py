"""The target interface: where load runs and what it hits.

A target kind is one module with one class that fills in this table of operations
(like an fio ioengine): describe() for --dry-run, setup() to create, teardown() to undo.
Everything setup() creates is recorded in the ledger first, so a crash can be cleaned.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from iolab.core.exec import Executor
from iolab.core.resources import Ledger


class TargetParams(BaseModel):
    """Base of every target's parameters: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str


@dataclass
class Placement:
    """What a prepared target offers a workload.

    path:          the file or device the workload does I/O on (inside the executor's view)
    directory:     a directory for workloads that create their own files
    executor:      where to run commands (host or guest agent)
    host_device:   the host block device whose counters the probes read (e.g. "loop3"), if any
    guest_device:  the block device inside a guest, if any
    manifest:      facts about this target for the trial manifest (scheduler, image info, ...)
    """

    executor: Executor
    path: str | None = None
    directory: str | None = None
    host_device: str | None = None
    guest_device: str | None = None
    is_block_device: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)


class Target(ABC):
    kind: ClassVar[str]
    Params: ClassVar[type[TargetParams]]

    def __init__(self, params: TargetParams, ledger: Ledger):
        self.params = params
        self.ledger = ledger

    @abstractmethod
    def describe(self) -> list[str]:
        """Human lines: everything this target will create or touch (for --dry-run)."""

    @abstractmethod
    def setup(self) -> Placement: ...

    @abstractmethod
    def teardown(self) -> None:
        """Undo setup(); must be safe to call after a partial setup and more than once."""

    def preflight(self) -> None:
        """Checks that must pass before anything at all is created (e.g. the data-safety guard)."""

    def reset_between_trials(self, placement: Placement) -> None:
        """Bring the target back to a known state before the next trial (default: nothing)."""

    def sharing_key(self) -> str:
        """Trials whose targets share this key reuse one setup (e.g. one loop device)."""
        return self.params.model_dump_json()
