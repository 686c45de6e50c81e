"""The disk under the target: block-device counters of the device holding the file that the
target's loop device serves (a loop target's scratch image, the scratch filesystem a guest's
image lives on, a filesystem image), as deltas over the trial.

Why: the loop device is the trial's alone, but the disk under it is shared with every process
writing to the same filesystem: another iolab run, a neighbour's backup, a database's fsyncs.
The difference between that disk's counters and the loop's own says how much other I/O the
trial's number shared the disk with (runner/confounders.py raises `disk_shared`). Each flush of
a loop device with direct I/O is one fsync of its file, which costs the disk under one flush
(6294 for 6294 on a disk with FUA here) or two when it commits the journal of the filesystem
under on a disk without FUA (911 for 513 on a loop device); bytes are amplified by that
filesystem too (512-byte writes moved 3x their bytes here); both get an allowance. iolab's own ledger
fsyncs during the trial (about 20: core/resources.own_syncs) are counted and allowed too, since
its data dir is usually on the same disk. One level down only: that filesystem is where the
sharing happens.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, ClassVar

from iolab.core import resources
from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.probes.diskstats import block_stat_metrics, parse_stat, stat_delta
from iolab.targets import blockinfo
from iolab.targets.base import Placement


def under_device(dev: str | None) -> str | None:
    """The block device (e.g. 'vda1') holding the file loop device `dev` serves; None when `dev`
    is no loop device, serves no file, or the file is on no block device (tmpfs, overlayfs)."""
    if not dev or not os.path.basename(dev).startswith("loop"):
        return None
    try:
        backing = (blockinfo.sysfs(dev) / "loop" / "backing_file").read_text().strip()
        under = blockinfo.device_of_path(backing)
    except OSError:  # detached meanwhile, or the file is gone ("... (deleted)")
        return None
    if under is None or not (blockinfo.sysfs(under) / "stat").is_file():
        return None
    return under


class UnderDiskStats(Probe):
    name: ClassVar[str] = "under_disk"
    metrics: ClassVar[tuple[Metric, ...]] = block_stat_metrics("the disk under the target's loop device") + (
        Metric("seconds", "s", "neither", "how long the disk under the target was watched"),
        Metric("iolab_syncs", "calls", "neither", "fsync calls of iolab's own ledger meanwhile (its data dir's disk)"))
    attributes: ClassVar[tuple[str, ...]] = ("device",)

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return under_device(placement.host_device) is not None

    def start(self, placement: Placement) -> None:
        self.device = under_device(placement.host_device)
        self.path = Path(blockinfo.sysfs(str(self.device))) / "stat"
        self.before = parse_stat(self.path.read_text())
        self.t0 = time.monotonic()
        self.syncs0 = resources.own_syncs()

    def stop(self) -> dict[str, Any]:
        d: dict[str, Any] = stat_delta(self.before, parse_stat(self.path.read_text()))
        d["seconds"] = round(time.monotonic() - self.t0, 3)
        d["iolab_syncs"] = resources.own_syncs() - self.syncs0
        d["device"] = self.device
        return d
