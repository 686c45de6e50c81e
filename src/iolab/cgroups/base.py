"""The backend interface: one small table of operations per cgroup I/O controller.

Like an fio ioengine, each backend module fills in the same operations (check, create
the parent, create a weighted group, read the weight back, hand out the procs file, read
counters, remove everything), so a study names a controller and never touches cgroupfs.
All groups live under one parent of iolab's own, `iolab-<runid>`, recorded in the ledger
before it is made so `iolab clean` can remove it after a crash.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from iolab.cgroups import cleanup, fs
from iolab.cgroups.counters import IoCounters
from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev
from iolab.core.errors import CapabilityMissing
from iolab.core.resources import Ledger, Resource

if TYPE_CHECKING:  # a type only: cgroups.trial needs nothing from here
    from iolab.cgroups.trial import TrialCgroup

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
PARENT_PREFIX = "iolab-"


class WeightMismatch(RuntimeError):
    """The kernel kept a different weight than the one written (clamped, ignored, raced)."""


@dataclass
class Group:
    """One test group: its cgroup directory and the weight it was given (None: default)."""

    name: str
    path: Path
    weight: int | None = None


class Backend(ABC):
    """Operations every controller provides. Subclasses set the class attributes."""

    name: ClassVar[str]
    version: ClassVar[int]  # cgroup hierarchy version, 1 or 2
    weight_file: ClassVar[str | None] = None
    weight_range: ClassVar[tuple[int, int] | None] = None
    default_weight: ClassVar[int | None] = None
    scheduler: ClassVar[str | None] = None  # the scheduler the disk must run; None: leave it
    tunables: ClassVar[dict[str, str]] = {}  # scheduler tunables needed to honour weights
    enforces_weights: ClassVar[bool] = True

    def __init__(self, dev: BlockDev, ledger: Ledger, root: Path):
        self.dev = dev
        self.ledger = ledger
        self.root = root
        self.parent: Path | None = None
        self.groups: dict[str, Group] = {}
        self._resources: list[Resource] = []

    # -- capability ---------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        """None if this backend can run here, else a sentence saying why not."""

    def check(self, m: Mounts) -> None:
        reason = self.unavailable_reason(m, self.dev)
        if reason:
            raise CapabilityMissing(f"cgroup backend {self.name}: {reason}")

    def validate_weight(self, weight: int) -> int:
        if self.weight_range is None:
            raise ValueError(f"{self.name} has no weights (it sets limits)")
        lo, hi = self.weight_range
        if isinstance(weight, bool) or not isinstance(weight, int) or not lo <= weight <= hi:
            raise ValueError(f"{self.name}: weight {weight!r} outside {lo}..{hi}")
        return weight

    # -- lifecycle ----------------------------------------------------------------------
    def create_parent(self, runid: str) -> Path:
        """Make `iolab-<runid>` (ledger first) and prepare it for children."""
        if self.parent is not None:
            return self.parent
        path = self.root / f"{PARENT_PREFIX}{_checked_name(runid)}"
        # pending entry first; an existing group is not ours: creating() forgets the entry then
        with self.ledger.creating("cgroup", str(path), action="rmtree", dest=str(self.root)) as res:
            path.mkdir()
        self._resources.append(res)
        self.parent = path
        self._prepare_parent(path)
        return path

    def groups_parent(self, trial: TrialCgroup | None) -> Path:
        """Where a trial's groups are made: inside the trial cgroup when trials use this
        hierarchy (v2: a process is in one cgroup of it, so a process placed in a weighted
        group must find it inside its trial, cgroups.trial), else under the parent."""
        inside = trial.groups_parent(self.root) if trial is not None else None
        if inside is None:
            if self.parent is None:
                raise RuntimeError("create_parent() first")
            return self.parent
        self._prepare_parent(inside)  # v2: +io for the children (the trial cgroup holds no process itself)
        return inside

    def create_group(self, name: str, weight: int | None = None, parent: Path | None = None) -> Group:
        """A child of the parent (or of `parent`, from groups_parent()) with `weight` written and read back."""
        base = parent or self.parent
        if base is None:
            raise RuntimeError("create_parent() first")
        if weight is not None:
            self.validate_weight(weight)
        group = Group(_checked_name(name), base / name, None)
        group.path.mkdir()
        self.groups[group.name] = group
        if weight is not None:
            self.set_weight(group, weight)
        return group

    def remove_group(self, group: Group) -> None:
        """Remove one child now (tasks moved to the hierarchy root), e.g. after each trial.

        The parent's ledger entry (rmtree) still covers it if this never runs."""
        fs.remove_tree(group.path, dest=self.root)
        self.groups.pop(group.name, None)

    def set_weight(self, group: Group, weight: int) -> None:
        """Write the weight and raise WeightMismatch unless the kernel reads back the same."""
        self.validate_weight(weight)
        self._write_weight(group, weight)
        got = self.read_weight(group)
        if got != weight:
            raise WeightMismatch(f"{group.path}: wrote weight {weight}, kernel reads {got}")
        group.weight = weight

    def read_weight(self, group: Group) -> int | None:
        if self.weight_file is None:
            return None
        return parse_weight(fs.read_value(group.path / self.weight_file))

    def procs_file(self, group: Group) -> str:
        """The file a process writes its pid to (ExecRequest.cgroup_procs)."""
        return str(group.path / fs.PROCS)

    @abstractmethod
    def read_counters(self, group: Group) -> IoCounters: ...

    def remove(self) -> list[str]:
        """Undo everything this backend made, newest first; returns errors, never raises."""
        errors = []
        for res in reversed(self._resources):
            try:
                self.ledger.release(res)
            except Exception as exc:
                errors.append(f"{res.kind} {res.ident}: {exc}")
        self._resources.clear()
        self.groups.clear()
        self.parent = None
        return errors

    def describe(self) -> dict[str, Any]:
        """Manifest facts: backend, hierarchy, files, weights as read back."""
        return {
            "backend": self.name, "cgroup_version": self.version, "root": str(self.root),
            "parent": str(self.parent) if self.parent else None,
            "weight_file": self.weight_file, "weight_range": self.weight_range,
            "scheduler_required": self.scheduler, "tunables_required": dict(self.tunables),
            "enforces_weights": self.enforces_weights,
            "groups": {g.name: g.weight for g in self.groups.values()},
        }

    # -- hooks ----------------------------------------------------------------------------
    def _prepare_parent(self, parent: Path) -> None:  # noqa: B027 -- optional hook, v1 needs none
        """Per-hierarchy setup of the parent (v2: enable +io for the children)."""

    def _write_weight(self, group: Group, weight: int) -> None:
        if self.weight_file is None:  # validate_weight() already refused: no weight range either
            raise ValueError(f"{self.name} has no weight file")
        fs.write_value(group.path / self.weight_file, str(weight))

    def _record(self, kind: str, ident: str, **info: object) -> Resource:
        res = self.ledger.add(kind, ident, pending=False, **info)
        self._resources.append(res)
        return res


def parse_weight(text: str) -> int:
    """'300' (v1) or 'default 300\\n8:0 500' (v2, per-device overrides ignored) -> 300."""
    first = text.strip().splitlines()[0].split()
    return int(first[1] if first[0] == "default" else first[0])


def _checked_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"bad cgroup name {name!r} (letters, digits, . _ - only)")
    return name


assert cleanup  # imported so the cgroup/scheduler cleaners are registered with the ledger
