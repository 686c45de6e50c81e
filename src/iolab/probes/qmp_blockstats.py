"""QEMU's own per-disk counters (QMP query-blockstats) as deltas over the trial.

These count the requests the guest's disk controller handed to QEMU's block layer:
what the guest asked for, before any qcow2 metadata I/O or host page cache. Comparing
them with the guest's /sys/block stat and the host device's stat locates where requests
are split, merged, added (flushes) or absorbed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from qemu.qmp.legacy import QEMUMonitorProtocol

from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.targets.base import Placement
from iolab.vm.disk import DISK_ID, FORMAT_NODE

COUNTERS = (
    "rd_operations", "wr_operations", "flush_operations", "unmap_operations",
    "rd_bytes", "wr_bytes", "unmap_bytes", "rd_merged", "wr_merged",
    "rd_total_time_ns", "wr_total_time_ns", "flush_total_time_ns",
    "failed_rd_operations", "failed_wr_operations", "failed_flush_operations",
)


def disk_stats(blockstats: object, qdev: str = DISK_ID, node: str = FORMAT_NODE) -> dict[str, Any]:
    """The stats of the test disk from a query-blockstats answer (a list of entries)."""
    for entry in blockstats if isinstance(blockstats, list) else []:
        if not isinstance(entry, dict):
            continue
        if entry.get("qdev") == qdev or str(entry.get("qdev", "")).startswith(f"/machine/peripheral/{qdev}/") \
                or entry.get("node-name") == node:
            stats: dict[str, Any] = entry["stats"]
            return stats
    raise KeyError(f"no blockstats entry for device {qdev!r} / node {node!r}")


def stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
    out["wr_highest_offset"] = after.get("wr_highest_offset", 0)
    return out


class QmpBlockStats(Probe):
    name: ClassVar[str] = "qmp_blockstats"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("{op:rd|wr|flush|unmap}_operations", "requests", "neither",
               "requests the guest's disk controller handed QEMU's block layer"),
        Metric("{op:rd|wr|unmap}_bytes", "bytes", "neither", "bytes in those requests"),
        Metric("{op:rd|wr}_merged", "requests", "neither", "requests QEMU merged"),
        Metric("{op:rd|wr|flush}_total_time_ns", "ns", "neither", "time QEMU spent on those requests"),
        Metric("failed_{op:rd|wr|flush}_operations", "requests", "lower", "requests QEMU failed"),
        Metric("wr_highest_offset", "bytes", "neither", "highest offset written since the guest started"),
    )
    attributes: ClassVar[tuple[str, ...]] = ("device",)

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return placement.extras.get("qmp") is not None

    def start(self, placement: Placement) -> None:
        self.qmp: QEMUMonitorProtocol = placement.extras["qmp"]
        self.qdev = placement.extras.get("qmp_device", DISK_ID)
        self.before = disk_stats(self.qmp.cmd("query-blockstats"), self.qdev)

    def stop(self) -> dict[str, Any]:
        after = disk_stats(self.qmp.cmd("query-blockstats"), self.qdev)
        out = stats_delta(self.before, after)
        out["device"] = self.qdev
        return out
