"""Page-cache size before and after: shows reads served from memory and modes that did not bypass it."""

from __future__ import annotations

from typing import Any, ClassVar

from iolab.core.metrics import REAL, Metric
from iolab.probes.base import Probe
from iolab.targets.base import Placement


def meminfo_kib(field: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class PageCache(Probe):
    name: ClassVar[str] = "page_cache"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("cached_delta_bytes", "bytes", "neither", "change of the page cache's size (Cached) over the trial",
               domain=REAL),
        Metric("dirty_delta_bytes", "bytes", "neither", "change of dirty page-cache memory (Dirty) over the trial",
               domain=REAL),
    )

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return placement.executor.name == "host"

    def start(self, placement: Placement) -> None:
        self.cached0 = meminfo_kib("Cached")
        self.dirty0 = meminfo_kib("Dirty")

    def stop(self) -> dict[str, Any]:
        return {"cached_delta_bytes": (meminfo_kib("Cached") - self.cached0) * 1024,
                "dirty_delta_bytes": (meminfo_kib("Dirty") - self.dirty0) * 1024}
