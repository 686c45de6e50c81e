"""cgroup v2 + iocost: `io.weight` 1..10000 (default 100).

io.weight writes succeed and change nothing until iocost is enabled for the whole disk
in the root's io.cost.qos ("MAJ:MIN enable=1"); this backend enables it and records the
disk's previous qos line so teardown (or `iolab clean`) puts it back. iocost sits above
the scheduler, which is set to none so two controllers do not both arbitrate.
"""

from __future__ import annotations

from pathlib import Path

from iolab.cgroups import fs
from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev
from iolab.cgroups.v2 import V2Backend

QOS = "io.cost.qos"


class V2Iocost(V2Backend):
    name = "v2-iocost"
    weight_file = "io.weight"
    weight_range = (1, 10000)
    default_weight = 100
    scheduler = "none"

    @classmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        reason = super().unavailable_reason(m, dev)
        if reason:
            return reason
        if m.v2 is not None and not (m.v2 / QOS).exists():
            return f"no {QOS} in {m.v2} (kernel built without CONFIG_BLK_CGROUP_IOCOST)"
        return None

    def _prepare_parent(self, parent: Path) -> None:
        super()._prepare_parent(parent)
        self.enable_iocost()

    def enable_iocost(self) -> None:
        """Enable iocost on the disk, recording how to restore the previous qos line."""
        qos = self.root / QOS
        prev = qos_line(fs.read_value(qos) if qos.exists() else "", self.dev.majmin)
        if prev.get("enable") == "1":
            return
        self._record("cgroup", str(qos), action="write", value=restore_line(self.dev.majmin, prev))
        fs.write_value(qos, f"{self.dev.majmin} enable=1")
        now = qos_line(fs.read_value(qos), self.dev.majmin)
        if now.get("enable") != "1":
            raise RuntimeError(f"{qos}: iocost not enabled for {self.dev.majmin} after writing")


def qos_line(text: str, majmin: str) -> dict[str, str]:
    """The key=value pairs of the disk's io.cost.qos line; {} if the disk is not listed."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == majmin:
            return dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    return {}


def restore_line(majmin: str, prev: dict[str, str]) -> str:
    """What to write back. With ctrl=auto the kernel derives the rest, and writing the
    explicit parameters would turn them into user settings, so write only enable/ctrl."""
    if not prev:
        return f"{majmin} enable=0"
    if prev.get("ctrl", "auto") == "auto":
        return f"{majmin} enable={prev.get('enable', '0')} ctrl=auto"
    return majmin + " " + " ".join(f"{k}={v}" for k, v in prev.items())
