"""Host block-device counters (/sys/class/block/<dev>/stat) as deltas over the trial.

Field layout from the kernel's Documentation/block/stat.rst: reads, read merges, read
sectors, read ticks, writes, ..., in-flight, io_ticks, time_in_queue, discards (4),
flushes, flush ticks. Sectors are always 512 bytes here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.targets.base import Placement

FIELDS = ["reads", "read_merges", "read_sectors", "read_ticks_ms", "writes", "write_merges",
          "write_sectors", "write_ticks_ms", "in_flight", "io_ticks_ms", "queue_ticks_ms",
          "discards", "discard_merges", "discard_sectors", "discard_ticks_ms", "flushes", "flush_ticks_ms"]


def parse_stat(text: str) -> dict[str, int]:
    # not strict: kernels before 4.18 print 11 fields, before 5.5 15; names the fields there are
    return {name: int(v) for name, v in zip(FIELDS, text.split(), strict=False)}


def stat_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    out = {k: after[k] - before.get(k, 0) for k in after if k != "in_flight"}
    out["read_bytes"] = out.get("read_sectors", 0) * 512
    out["write_bytes"] = out.get("write_sectors", 0) * 512
    return out

def block_stat_metrics(where: str) -> tuple[Metric, ...]:
    """The declarations of stat_delta's keys (kernel Documentation/block/stat.rst), for `where`."""
    return (
        Metric("{op:read|write|discard}s", "requests", "neither", f"requests completed by {where}"),
        Metric("{op:read|write|discard}_merges", "requests", "neither", f"requests merged by {where}'s queue"),
        Metric("{op:read|write|discard}_sectors", "sectors", "neither", f"512-byte sectors moved by {where}"),
        Metric("{op:read|write|discard|flush}_ticks_ms", "ms", "neither",
               f"milliseconds requests of that kind spent in {where}'s queue"),
        Metric("flushes", "requests", "neither", f"flush requests completed by {where}"),
        Metric("io_ticks_ms", "ms", "neither", f"milliseconds {where} had requests in flight"),
        Metric("queue_ticks_ms", "ms", "neither", f"weighted milliseconds of requests in {where}'s queue"),
        Metric("{op:read|write}_bytes", "bytes", "neither", f"bytes moved by {where} (sectors x 512)"),
    )


class HostDiskStats(Probe):
    name: ClassVar[str] = "host_disk"
    metrics: ClassVar[tuple[Metric, ...]] = block_stat_metrics("the host block device")
    attributes: ClassVar[tuple[str, ...]] = ("device",)

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
