"""The guest kernel's block counters for the test disk (/sys/block/<dev>/stat), as deltas.

Read through the guest agent, so it works for any guest iolab boots. Column layout is the
kernel's Documentation/block/stat.rst, the same as the host probe's: fields 12-15 are
discards (reads/merges/sectors/ticks) and 16-17 flushes (count, ticks). Old kernels print
fewer columns; missing ones are simply absent from the delta.
"""

from __future__ import annotations

from typing import Any, ClassVar

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest
from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.probes.diskstats import block_stat_metrics, parse_stat, stat_delta
from iolab.targets.base import Placement


class GuestDiskStats(Probe):
    name: ClassVar[str] = "guest_disk"
    metrics: ClassVar[tuple[Metric, ...]] = block_stat_metrics("the guest's test disk")
    attributes: ClassVar[tuple[str, ...]] = ("device",)

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return bool(placement.guest_device) and placement.executor.name == "guest"

    def start(self, placement: Placement) -> None:
        self.executor = placement.executor
        self.device = str(placement.guest_device)
        self.before = self._read()

    def _read(self) -> dict[str, int]:
        path = f"/sys/block/{self.device}/stat"
        res = self.executor.run(ExecRequest(["true"], timeout_s=30, collect=[path]))
        if path not in res.collected:
            raise TrialFailed(f"cannot read {path} in the guest: {res.tail()}")
        return parse_stat(res.collected[path])

    def stop(self) -> dict[str, Any]:
        d: dict[str, Any] = stat_delta(self.before, self._read())
        d["device"] = self.device
        return d
