"""Host block-device counters (/sys/class/block/<dev>/stat) as deltas over the trial.

Field layout from the kernel's Documentation/block/stat.rst: reads, read merges, read
sectors, read ticks, writes, ..., in-flight, io_ticks, time_in_queue, discards (4),
flushes, flush ticks. Sectors are always 512 bytes here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from iolab.probes.base import Probe
from iolab.targets.base import Placement

FIELDS = ["reads", "read_merges", "read_sectors", "read_ticks_ms", "writes", "write_merges",
          "write_sectors", "write_ticks_ms", "in_flight", "io_ticks_ms", "queue_ticks_ms",
          "discards", "discard_merges", "discard_sectors", "discard_ticks_ms", "flushes", "flush_ticks_ms"]


def parse_stat(text: str) -> dict[str, int]:
    return {name: int(v) for name, v in zip(FIELDS, text.split())}


def stat_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    out = {k: after[k] - before.get(k, 0) for k in after if k != "in_flight"}
    out["read_bytes"] = out.get("read_sectors", 0) * 512
    out["write_bytes"] = out.get("write_sectors", 0) * 512
    return out


class HostDiskStats(Probe):
    name: ClassVar[str] = "host_disk"

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return bool(placement.host_device)

    def start(self, placement: Placement) -> None:
        self.path = Path("/sys/class/block") / str(placement.host_device) / "stat"
        self.device = placement.host_device
        self.before = parse_stat(self.path.read_text())

    def stop(self) -> dict[str, Any]:
        d: dict[str, Any] = stat_delta(self.before, parse_stat(self.path.read_text()))
        d["device"] = self.device
        return d
