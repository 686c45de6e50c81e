"""What every cgroup v1 (blkio) backend shares: the blkio mount and the rwstat counters.

Counters come from the scheduler's own stats when it keeps them (BFQ: blkio.bfq.*), else
from blk-throttle's stats, which the kernel only keeps once throttling is activated on
the queue; setting and clearing a no-op limit activates it without throttling anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from iolab.cgroups import fs
from iolab.cgroups.base import Backend, Group
from iolab.cgroups.counters import IoCounters, from_v1
from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev

NO_OP_IOPS = 1 << 40  # a read_iops limit no device reaches


class V1Backend(Backend):
    version = 1
    counter_prefix: ClassVar[str] = "blkio.bfq"  # or "blkio.throttle"

    @classmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        if m.v1_blkio is None:
            return "no cgroup v1 blkio hierarchy is mounted"
        return None

    def read_counters(self, group: Group) -> IoCounters:
        """Cumulative counters of `group` on the target disk (zeros before its first I/O)."""
        serviced = _read(group.path / f"{self.counter_prefix}.io_serviced")
        nbytes = _read(group.path / f"{self.counter_prefix}.io_service_bytes")
        return from_v1(serviced, nbytes, self.dev.majmin) or IoCounters()

    def _prepare_parent(self, parent: Path) -> None:
        if self.counter_prefix == "blkio.throttle":
            activate_throttle_stats(parent, self.dev.majmin)


def activate_throttle_stats(group: Path, majmin: str) -> None:
    """Make blk-throttle account per-group I/O on this disk without limiting anything.

    The kernel keeps blkio.throttle.io_serviced only after a throttle rule was set once on
    the queue; the rule is cleared at once, the accounting stays (for the queue's life).
    """
    limit = group / "blkio.throttle.read_iops_device"
    fs.write_value(limit, f"{majmin} {NO_OP_IOPS}")
    fs.write_value(limit, f"{majmin} 0")


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except FileNotFoundError:
        return ""
