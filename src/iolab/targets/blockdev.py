"""A real block device, guarded: never destroy a disk that holds data by accident.

A device with a partition table, a filesystem signature, a mount or a holder is refused
unless the user names that exact device in `--destroy-data DEVICE`.
"""

from __future__ import annotations

import os
import stat
from typing import ClassVar, Literal

from pydantic import field_validator

from iolab.core import paths
from iolab.core.errors import RefusedError
from iolab.core.exec import HostExecutor
from iolab.core.resources import Ledger
from iolab.targets import blockinfo
from iolab.targets.base import Placement, Target, TargetParams

# Devices the user explicitly allowed to be overwritten (set from --destroy-data).
DESTROY_ALLOWED: set[str] = set()


class BlockDeviceParams(TargetParams):
    kind: Literal["device"] = "device"
    device: str

    @field_validator("device")
    @classmethod
    def _is_block(cls, v: str) -> str:
        try:
            mode = os.stat(v).st_mode
        except FileNotFoundError:
            raise ValueError(f"{v!r} does not exist") from None
        if not stat.S_ISBLK(mode):
            raise ValueError(f"{v!r} is not a block device")
        return os.path.realpath(v)


def check_device_is_free(device: str) -> None:
    """Raise RefusedError when the device shows any sign of holding data."""
    real = os.path.realpath(device)
    signs = blockinfo.data_signs(real)
    if signs and real not in {os.path.realpath(d) for d in DESTROY_ALLOWED}:
        raise RefusedError(
            f"refusing to use {device}: it {'; it '.join(signs)}. Its data would be destroyed. "
            f"If that is really what you want, pass --destroy-data {device}")


class BlockDeviceTarget(Target):
    kind: ClassVar[str] = "device"
    Params: ClassVar[type[TargetParams]] = BlockDeviceParams
    params: BlockDeviceParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.executor: HostExecutor | None = None

    def describe(self) -> list[str]:
        return [f"OVERWRITES the block device {self.params.device} (refused if it holds data, "
                f"unless --destroy-data {self.params.device})"]

    def preflight(self) -> None:
        check_device_is_free(self.params.device)

    def setup(self) -> Placement:
        self.preflight()
        self.executor = HostExecutor(paths.scratch_dir(), self.ledger)
        dev = os.path.basename(self.params.device)
        return Placement(executor=self.executor, path=self.params.device, host_device=dev, is_block_device=True,
                         manifest={"target": "device", "queue": blockinfo.queue_settings(dev)})

    def teardown(self) -> None:
        if self.executor:
            self.executor.close()
            self.executor = None
