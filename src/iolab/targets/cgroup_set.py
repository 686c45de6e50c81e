"""Target `cgroups`: one block device under one cgroup I/O controller, ready for weighted groups.

setup() makes the device (iolab's pre-filled scratch loop device by default, or a real
device behind the data-safety guard), selects the controller's scheduler and tunables
and creates iolab's parent group; all of it is in the ledger before it is relied on, so
teardown, Ctrl-C and `iolab clean` undo it the same way. The groups themselves belong to
a trial: the placement offers them as `WeightedGroups` (targets/base.py), through which a
workload creates them (weights shuffled per trial) and removes them, so every trial starts
from an empty parent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iolab.cgroups import (
    cleanup as _cleanup,  # noqa: F401  (registers the cgroup/scheduler cleaners)
)
from iolab.cgroups import fs as cgfs
from iolab.cgroups import registry, scheduler
from iolab.cgroups.base import Group
from iolab.cgroups.counters import IoCounters
from iolab.cgroups.device import resolve
from iolab.cgroups.executor import HostExecutor
from iolab.cgroups.registry import ALIASES, BACKENDS
from iolab.cgroups.session import CgroupSession
from iolab.cgroups.trial import TrialCgroup
from iolab.core import paths
from iolab.core.confine import Confinement
from iolab.core.errors import CapabilityMissing
from iolab.core.resources import Ledger
from iolab.core.units import format_size, parse_size
from iolab.targets import blockinfo
from iolab.targets.base import Placement, Target, TargetOffer, TargetParams, WeightedGroups
from iolab.targets.blockdev import check_device_is_free, device_path, device_size
from iolab.targets.loop import ScratchLoop, create_scratch_loop, release_scratch_loop, scratch_offer
from iolab.targets.offer import HOST_CAPABILITIES, Capability, Storage

CONTROLLERS = sorted({"auto", *ALIASES, *BACKENDS})
DATA_FILE = "iolab-groups.dat"


class CgroupSetParams(TargetParams):
    kind: Literal["cgroups"] = "cgroups"
    controller: str = Field("bfq", description="bfq | none | iocost | auto, or a backend name (v1-bfq, ...)")
    device: str | None = Field(None, description="a real block device (guarded); default: a scratch loop device")
    size: int = Field(1 << 30, description="scratch loop image size, bytes or '1G'")
    filesystem: Literal["none", "ext4"] = Field(
        "none", description="ext4 on the scratch device: load runs on a pre-filled file beside other apps' files")
    data_size: int = Field(512 << 20, description="size of the load's data file when filesystem=ext4")
    tunables: dict[str, str] = Field(default_factory=dict,
                                     description="scheduler tunables over the backend's, e.g. strict_guarantees=0")

    @field_validator("controller")
    @classmethod
    def _controller(cls, v: str) -> str:
        if v not in CONTROLLERS:
            raise ValueError(f"expected one of {', '.join(CONTROLLERS)}, got {v!r}")
        return v

    @field_validator("device", mode="before")
    @classmethod
    def _device(cls, v: Any) -> str | None:
        """The block device by its number: a regular file, a /sys path or a symlink never selects a disk."""
        return None if v is None else device_path(v)

    @field_validator("size", "data_size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        n = parse_size(v)
        if n < (64 << 20):
            raise ValueError(f"size must be at least 64M, got {v!r}")
        return n

    @model_validator(mode="after")
    def _fs_on_scratch_only(self) -> CgroupSetParams:
        if self.device and self.filesystem != "none":
            raise ValueError("filesystem is only made on iolab's scratch loop device, not on a given device")
        if self.filesystem != "none" and self.data_size > self.size - (128 << 20):
            raise ValueError(f"data_size must leave at least 128M of the {format_size(self.size)} image free")
        return self

    @field_validator("tunables")
    @classmethod
    def _tunables(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not key.replace("_", "").isalnum() or not str(value).lstrip("-").isalnum():
                raise ValueError(f"tunable {key}={value!r}: names and values are letters, digits and _ only")
        return {k: str(val) for k, val in v.items()}


def resolve_controller(name: str, device: str) -> str:
    """'auto' -> bfq when the device offers BFQ, else iocost when v2 has it; others pass through."""
    if name != "auto":
        return name
    if "bfq" in scheduler.available(resolve(device)):
        return "bfq"
    if registry.describe().get("iocost"):
        return "iocost"
    raise CapabilityMissing(f"no weight-enforcing cgroup I/O controller for {device}: no BFQ, no iocost")


class CgroupSetTarget(Target):
    kind: ClassVar[str] = "cgroups"
    Params: ClassVar[type[TargetParams]] = CgroupSetParams
    params: CgroupSetParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.loop: ScratchLoop | None = None
        self.session: CgroupSession | None = None
        self.executor: HostExecutor | None = None

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """Weighted groups on a raw device (the user's or a scratch loop device), or on the ext4
        of a scratch one: a directory beside the load's pre-filled data file (which it keeps)."""
        assert isinstance(params, CgroupSetParams)
        caps = HOST_CAPABILITIES | frozenset[Capability]({"weighted_groups"})
        if params.device:
            return TargetOffer(kind=cls.kind, settings=f"device = {params.device!r}", where="host",
                               storage=frozenset({"block_device"}), capacity=device_size(params.device),
                               capabilities=caps, writable=(params.device,),
                               remedies={"storage:directory": 'a filesystem is made on the scratch device only: '
                                                              'leave out device and set filesystem = "ext4"'})
        settings = f"filesystem = {params.filesystem!r}, size = {format_size(params.size)}"
        if params.filesystem != "none":
            settings += f", data_size = {format_size(params.data_size)}"
        base = scratch_offer(cls.kind, params.size, params.filesystem, settings,
                             {"storage:directory": 'set filesystem = "ext4"',
                              "capacity": "give it a larger size or a smaller data_size"},
                             reserved=params.data_size if params.filesystem != "none" else 0)
        data_file: frozenset[Storage] = frozenset({"file"}) if params.filesystem != "none" else frozenset()
        return replace(base, storage=base.storage | data_file, capabilities=caps)

    def describe(self) -> list[str]:
        p = self.params
        where = (f"the block device {p.device} (refused unless you name it with --destroy-data {p.device})"
                 if p.device else f"a {format_size(p.size)} pre-filled scratch loop device under {paths.scratch_dir()}")
        if p.filesystem != "none":
            where += f", with {p.filesystem} and a pre-filled {format_size(p.data_size)} file for the load"
        return [f"uses {where}",
                f"selects cgroup I/O controller {p.controller} on it: scheduler and tunables "
                f"{dict(p.tunables) or '(backend defaults)'} restored afterwards",
                "creates cgroups iolab-<run>/t<trial>-g<i> per trial, removed after each trial and on any exit",
                f"each trial's processes can write only that {'filesystem' if p.filesystem != 'none' else 'device'} "
                "and iolab's work dir (confined: core/confine.py)"]

    def preflight(self) -> None:
        if self.params.device:
            check_device_is_free(self.params.device)

    def setup(self) -> Placement:
        p = self.params
        if p.device:
            check_device_is_free(p.device)
            device = p.device  # already the /dev path of the device (validated by number)
        else:
            self.loop = create_scratch_loop(self.ledger, p.size, filesystem=p.filesystem, label="cgroups")
            device = self.loop.device
        controller = resolve_controller(p.controller, device)
        t0 = time.monotonic()
        self.session = CgroupSession(controller, device, self.ledger,
                                     tunables=dict(p.tunables))
        self.session.prepare_device()
        self.session.backend.create_parent(self.session.runid)
        self.session.setup_s = time.monotonic() - t0
        mnt = self.loop.mountpoint if self.loop else None
        confinement = Confinement(writable=(str(mnt),)) if mnt else Confinement(devices=(device,))
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger, confinement=confinement)
        dev = os.path.basename(device)
        manifest = {"target": "cgroups", "controller": controller, "requested_controller": p.controller,
                    "queue": blockinfo.queue_settings(dev), **self.session.manifest(),
                    "confinement": confinement.manifest()}
        groups: WeightedGroups = SessionGroups(self.session)  # mypy checks the whole protocol here
        if self.loop:
            manifest["image"] = str(self.loop.image)
            manifest["backing_device"] = blockinfo.device_of_path(str(self.loop.image))
        if self.loop and self.loop.mountpoint:
            data = self.loop.mountpoint / DATA_FILE
            write_data_file(data, p.data_size)
            manifest["data_file"] = {"path": str(data), "size": p.data_size, "filesystem": p.filesystem}
            return Placement(executor=self.executor, path=str(data), directory=str(self.loop.mountpoint),
                             host_device=dev, manifest=manifest, weighted_groups=groups)
        return Placement(executor=self.executor, path=device, host_device=dev, is_block_device=True,
                         manifest=manifest, weighted_groups=groups)

    def teardown(self) -> None:
        """Groups, then tunables and scheduler, then the loop device; safe to call twice."""
        errors: list[str] = []
        if self.executor:
            self.executor.close()
            self.executor = None
        if self.session:
            errors += self.session.teardown()
            self.session = None
        if self.loop:
            release_scratch_loop(self.ledger, self.loop)
            self.loop = None
        if errors:
            raise RuntimeError("cgroup target teardown: " + "; ".join(errors))


def write_data_file(path: Path, size: int) -> None:
    """Pre-fill the load's file with non-zero data and sync it: reads of holes never reach the disk."""
    block = os.urandom(64) * ((1 << 20) // 64)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        left = size
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
        os.fsync(fd)
    finally:
        os.close(fd)


class SessionGroups:
    """The target's `WeightedGroups`: trial groups under the session's parent group, or
    inside the trial cgroup where trials share the hierarchy (v2, Backend.groups_parent)."""

    def __init__(self, session: CgroupSession, trial: TrialCgroup | None = None):
        self._session = session
        self._trial = trial

    def within(self, trial: TrialCgroup | None) -> SessionGroups:
        return SessionGroups(self._session, trial)

    @property
    def controller(self) -> str:
        return self._session.backend.name

    @property
    def enforces_weights(self) -> bool:
        return self._session.backend.enforces_weights

    @property
    def scheduler(self) -> str | None:
        return self._session.backend.scheduler

    def create_groups(self, weights: Sequence[int], tag: str) -> list[Group]:
        made: list[Group] = []
        try:
            for i, w in enumerate(weights):
                made.append(self.create_group(f"{tag}-g{i:03d}", w))
        except BaseException:
            self.remove_groups(made)
            raise
        return made

    def create_group(self, name: str, weight: int) -> Group:
        backend = self._session.backend
        return backend.create_group(name, weight, backend.groups_parent(self._trial))

    def remove_groups(self, groups: Sequence[Group]) -> list[str]:
        errors = []
        for g in groups:
            try:
                self._session.backend.remove_group(g)
            except OSError as exc:
                errors.append(f"{g.path}: {exc}")
        return errors

    def procs_file(self, group: Group) -> str:
        return self._session.backend.procs_file(group)

    def read_counters(self, group: Group) -> IoCounters:
        return self._session.backend.read_counters(group)

    def pids(self, group: Group) -> list[int]:
        return cgfs.pids(group.path)

    def nr_requests(self) -> int | None:
        try:
            return int((self._session.backend.dev.queue / "nr_requests").read_text())
        except (OSError, ValueError):
            return None

