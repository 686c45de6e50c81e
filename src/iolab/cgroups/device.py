"""Block device identity as the cgroup files see it: the whole disk's MAJ:MIN and its queue.

cgroup counters and per-device settings are keyed by the whole disk, and the scheduler
lives on the disk's queue, so a partition is always resolved to its parent disk first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SYS_CLASS_BLOCK = Path("/sys/class/block")


@dataclass(frozen=True)
class BlockDev:
    """A whole disk: `name` like "loop3", `majmin` like "7:3", `queue` its sysfs queue dir."""

    name: str
    majmin: str
    queue: Path

    @property
    def iosched(self) -> Path:
        return self.queue / "iosched"


def short_name(device: str) -> str:
    """'/dev/loop3' or 'loop3' -> 'loop3'."""
    return device.rsplit("/", 1)[-1]


def resolve(device: str, sys_block: Path = SYS_CLASS_BLOCK) -> BlockDev:
    """The whole disk behind `device` (a partition resolves to its disk)."""
    node = sys_block / short_name(device)
    if not node.exists():
        raise FileNotFoundError(f"no block device {device!r} ({node} missing)")
    real = node.resolve()
    disk = real.parent if (real / "partition").exists() else real
    majmin = (disk / "dev").read_text().strip()
    return BlockDev(name=disk.name, majmin=majmin, queue=disk / "queue")
