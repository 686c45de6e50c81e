"""cgroup v1 + BFQ: `blkio.bfq.weight` 1..1000 (default 100), enforced only by BFQ.

BFQ's low_latency heuristic raises the weight of queues that just started (it takes them
for interactive), so whichever fio started first wins for seconds; the backend asks for
low_latency=0 (docs/cgroups.md has the measurements).
"""

from __future__ import annotations

from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev
from iolab.cgroups.scheduler import available
from iolab.cgroups.v1 import V1Backend


class V1Bfq(V1Backend):
    name = "v1-bfq"
    weight_file = "blkio.bfq.weight"
    weight_range = (1, 1000)
    default_weight = 100
    scheduler = "bfq"
    tunables = {"low_latency": "0"}
    counter_prefix = "blkio.bfq"

    @classmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        reason = super().unavailable_reason(m, dev)
        if reason:
            return reason
        if dev is not None and "bfq" not in available(dev):
            return f"BFQ is not offered for {dev.name} (modprobe bfq?)"
        return None
