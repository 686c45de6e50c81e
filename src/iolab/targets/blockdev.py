"""A real block device, guarded: never destroy a disk that holds data by accident.

The guard is `core.diskguard` (the same one the `cgroups` target and imported fio job files
use): the device is identified by its device number, and one with partitions, a signature,
a mount, a holder or swap use (or a partition of a disk in use) is refused unless the user
names it in `--destroy-data DEVICE`; since a spec may come from elsewhere, even a device
with no sign of data is used only when the user names it so (docs/threat-model.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import field_validator

from iolab.cgroups.executor import HostExecutor
from iolab.core import diskguard, paths
from iolab.core.confine import Confinement
from iolab.core.resources import Ledger
from iolab.targets import blockinfo
from iolab.targets.base import Placement, Target, TargetOffer, TargetParams
from iolab.targets.offer import HOST_CAPABILITIES


def device_path(v: object) -> str:
    """Spec validation of a device-like value: the /dev path of the block device it names."""
    try:
        return diskguard.block_device(v).path
    except ValueError as exc:
        raise ValueError(f"{v!r} {exc}") from None


def device_size(device: str) -> int | None:
    """The block device's size in bytes (sysfs counts 512-byte sectors), None if unreadable."""
    try:
        rdev = os.stat(device).st_rdev
        sectors = Path(f"/sys/dev/block/{os.major(rdev)}:{os.minor(rdev)}/size").read_text()
        return int(sectors) * 512
    except (OSError, ValueError):
        return None


def check_device_is_free(device: str) -> None:
    """Raise RefusedError when the device shows any sign of holding data, or the user did not
    name it with --destroy-data (core.diskguard.check_named): a spec alone never points
    iolab at a disk it did not make."""
    diskguard.check_named(device)


class BlockDeviceParams(TargetParams):
    kind: Literal["device"] = "device"
    device: str

    @field_validator("device", mode="before")
    @classmethod
    def _is_block(cls, v: object) -> str:
        return device_path(v)


class BlockDeviceTarget(Target):
    kind: ClassVar[str] = "device"
    Params: ClassVar[type[TargetParams]] = BlockDeviceParams
    params: BlockDeviceParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.executor: HostExecutor | None = None

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """The raw device, all of it (its size from sysfs)."""
        assert isinstance(params, BlockDeviceParams)
        return TargetOffer(kind=cls.kind, settings=f"device = {params.device!r}", where="host",
                           storage=frozenset({"block_device"}), capacity=device_size(params.device),
                           capabilities=HOST_CAPABILITIES, writable=(params.device,),
                           remedies={"storage:directory": "a device target offers the raw device only: use a "
                                                          "`loop` target with filesystem = \"ext4\" or a `host` "
                                                          "directory"})

    def describe(self) -> list[str]:
        return [f"OVERWRITES the block device {self.params.device} (refused unless you name it with "
                f"--destroy-data {self.params.device})",
                f"each trial's processes can write only {self.params.device} and iolab's work dir "
                "(confined: core/confine.py)"]

    def preflight(self) -> None:
        check_device_is_free(self.params.device)

    def setup(self) -> Placement:
        self.preflight()
        confinement = Confinement(devices=(self.params.device,))
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger, confinement=confinement)
        dev = os.path.basename(self.params.device)
        return Placement(executor=self.executor, path=self.params.device, host_device=dev, is_block_device=True,
                         manifest={"target": "device", "queue": blockinfo.queue_settings(dev),
                                   "confinement": confinement.manifest()})

    def teardown(self) -> None:
        if self.executor:
            self.executor.close()
            self.executor = None
