"""The target interface: where load runs and what it hits.

A target kind is one module with one class that fills in this table of operations
(like an fio ioengine): offer() for validation, describe() for --dry-run, setup() to
create, teardown() to undo. Everything setup() creates is recorded in the ledger first, so
a crash can be cleaned.

What a target offers a workload is one typed value, its `TargetOffer` (targets/offer.py),
computed from the validated parameters before anything exists; every workload states its
`Needs` and `refusal()` decides, so no workload names a target kind. A workload sees a
prepared target only through this module: the `Placement` setup() returns, its executor,
and the narrow capabilities a placement may offer (today `WeightedGroups`, from the
`cgroups` target). It never imports a target's module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from iolab.cgroups.base import Group
from iolab.cgroups.counters import IoCounters
from iolab.cgroups.executor import HostExecutor
from iolab.cgroups.trial import TrialCgroup
from iolab.core.errors import CapabilityMissing
from iolab.core.exec import Executor
from iolab.core.resources import Ledger, Resource
from iolab.targets.offer import ANY_STORAGE, Capability, MachineCheck, Needs, Storage, TargetOffer, Where, refusal

# the offer's vocabulary is re-exported: workloads see targets through this module only
__all__ = ["ANY_STORAGE", "TCG_TIME_FACTOR", "Capability", "FioFleet", "FleetRun", "MachineCheck", "Needs",
           "Placement", "Storage", "Target", "TargetOffer", "TargetParams", "WeightedGroups", "Where", "refusal"]


class TargetParams(BaseModel):
    """Base of every target's parameters: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str


class WeightedGroups(Protocol):
    """Weighted cgroups on the target's device, made and removed by a workload per trial.

    What a workload needs from a `cgroups` target and nothing more: every group lives under
    the target's own parent group (in the ledger), so what a trial fails to remove is still
    removed at teardown, on Ctrl-C and by `iolab clean`."""

    @property
    def controller(self) -> str:
        """The backend's name, e.g. "v1-bfq" or "v2-none"."""

    @property
    def enforces_weights(self) -> bool:
        """False for the negative control (scheduler none): weights are written but not honoured."""

    @property
    def scheduler(self) -> str | None:
        """The device scheduler the controller runs on ("bfq"), None if it leaves it alone."""

    def create_groups(self, weights: Sequence[int], tag: str) -> list[Group]:
        """One group per weight, named `<tag>-g<i>`, each weight written and read back; all or none."""

    def create_group(self, name: str, weight: int) -> Group:
        """One more group (e.g. an application beside the load), its weight read back."""

    def remove_groups(self, groups: Sequence[Group]) -> list[str]:
        """Remove groups now (their tasks move to the root); errors returned, never raised."""

    def procs_file(self, group: Group) -> str:
        """The file a process joins the group through (ExecRequest.cgroup_procs)."""

    def read_counters(self, group: Group) -> IoCounters:
        """The kernel's cumulative I/O counters of the group on the target's device."""

    def pids(self, group: Group) -> list[int]:
        """The processes in the group now (not its descendants' groups)."""

    def nr_requests(self) -> int | None:
        """The device queue's request (scheduler tag) limit now, None if unreadable."""

    def within(self, trial: TrialCgroup | None) -> WeightedGroups:
        """The same groups for one trial: made where its processes stay in the trial cgroup
        (inside it where trials share the hierarchy, v2; Backend.groups_parent)."""


@dataclass
class FleetRun:
    """One fio job run on every host of a fleet: metrics (the aggregate under fio's names,
    `host:<name>:...` per host), fio's output, the per-host job texts, flags, trial facts."""

    metrics: dict[str, float]
    raw: Any
    job_text: str
    flags: list[str]
    facts: dict[str, Any]


class FioFleet(Protocol):
    """fio's client/server mode on many hosts (the `fleet` target): `render` gives a host's
    job from that host's placement (its own device or file); `prefill_size` asks for its
    file to be written once first (reads of a sparse file never reach the disk)."""

    def run_fio(self, render: Callable[[Placement], str], timeout_s: float,
                prefill_size: int | None) -> FleetRun: ...


# How much longer than a workload's host estimate its work may take in a TCG guest. Measured
# (docs/studies/vm-profile.md): TCG guests reach 0.02-0.05x the host's memory bandwidth and
# 0.06-0.23x its CPU rate; the estimates already assume a slow host (STREAM: 4 GB/s), so the
# emulated work takes up to ~10x its estimate, doubled for a machine other work keeps busy.
TCG_TIME_FACTOR = 20.0


@dataclass
class Placement:
    """What a prepared target offers a workload.

    path:          the file or device the workload does I/O on (inside the executor's view)
    directory:     a directory for workloads that create their own files
    executor:      where to run commands (host or guest agent)
    host_device:   the host block device whose counters the probes read (e.g. "loop3"), if any
    guest_device:  the block device inside a guest, if any
    manifest:      facts about this target for every trial's manifest (scheduler, image info, ...),
                   written by the target only: a trial's own entries are WorkloadResult.manifest
    weighted_groups: weighted cgroups on the device (the `cgroups` target), else None
    extras:        target-specific handles for probes (a VM, its QMP socket, ...)
    trial_cgroup:  the running trial's cgroup (cgroups.trial), set by the runner on the
                   placement it hands a trial: every host process of the trial is in it
                   (`cpu_seconds()`); None outside a trial
    time_factor:   how many times longer a workload's work takes here than its estimate (made
                   for the host) says: 1 on the host and under KVM, TCG_TIME_FACTOR in a guest
                   under software emulation. The runner stretches the trial's timeout by it, so
                   a trial never times out only because the CPU is emulated.
    """

    executor: Executor
    path: str | None = None
    directory: str | None = None
    host_device: str | None = None
    guest_device: str | None = None
    is_block_device: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)
    weighted_groups: WeightedGroups | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    trial_cgroup: TrialCgroup | None = None
    fio_fleet: FioFleet | None = None  # fio jobs run on a fleet's hosts instead (the `fleet` target)
    time_factor: float = 1.0

    @property
    def writable(self) -> tuple[str, ...]:
        """Exactly what a trial's processes may write where they run: the target's directory
        and the file or block device it hands the workload (the executor's own work directory
        is the executor's). Derived from the only places a workload is given, so it cannot
        drift from them; a confinement of trial processes allows these and nothing else of
        the target (TargetOffer.writable is the same before setup, as far as it is known)."""
        return tuple(p for p in (self.directory, self.path) if p)

    def within(self, cgroup: TrialCgroup | None) -> Placement:
        """This placement for one trial: the executor places host processes in `cgroup`.
        The manifest and extras dicts are shared, not copied."""
        return replace(self, executor=self.executor.within(cgroup), trial_cgroup=cgroup)

    def require_weighted_groups(self) -> WeightedGroups:
        """The placement's weighted groups, or CapabilityMissing naming the target to use."""
        if self.weighted_groups is None:
            raise CapabilityMissing("this workload needs the `cgroups` target (kind = \"cgroups\")")
        return self.weighted_groups


class Target(ABC):
    kind: ClassVar[str]
    Params: ClassVar[type[TargetParams]]

    def __init__(self, params: TargetParams, ledger: Ledger):
        self.params = params
        self.ledger = ledger

    @classmethod
    @abstractmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """What this target gives a workload, from its validated parameters alone: nothing is
        created and nothing changed (spec validation and --dry-run call it for every cell)."""

    @classmethod
    def machine_checks(cls) -> list[MachineCheck]:
        """What this machine must have for this target (a kernel facility, a program), for
        `iolab doctor`; the default: nothing beyond iolab's own."""
        return []

    @abstractmethod
    def describe(self) -> list[str]:
        """Human lines: everything this target will create or touch (for --dry-run)."""

    @abstractmethod
    def setup(self) -> Placement: ...

    @abstractmethod
    def teardown(self) -> None:
        """Undo setup(); must be safe to call after a partial setup and more than once."""

    def undone_on_failure(self, make: Callable[[], Placement]) -> Placement:
        """`make()`'s placement; if it raises or is interrupted, teardown() first, so a setup
        cut short leaves nothing behind (for a setup() that does not undo its own steps)."""
        try:
            return make()
        except BaseException:
            self.teardown()
            raise

    def preflight(self) -> None:  # noqa: B027 -- optional hook: most targets need no check
        """Checks that must pass before anything at all is created (e.g. the data-safety guard)."""

    def reset_between_trials(self, placement: Placement) -> None:  # noqa: B027 -- optional hook
        """Bring the target back to a known state before the next trial (default: nothing)."""

    def sharing_key(self) -> str:
        """Trials whose targets share this key reuse one setup (e.g. one loop device)."""
        return self.params.model_dump_json()


def close_host(executor: HostExecutor | None, ledger: Ledger, made: Resource | None) -> None:
    """The teardown of a host target that made a place (a directory, a mount) and runs an
    executor in it: the executor first (its work dir may be inside), then the ledger entry
    for the place; either may be absent after a partial setup."""
    if executor:
        executor.close()
    if made:
        ledger.release(made)
