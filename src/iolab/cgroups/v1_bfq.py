"""cgroup v1 + BFQ: `blkio.bfq.weight` 1..1000 (default 100), enforced only by BFQ.

Two BFQ tunables decide whether the weights show (docs/cgroups.md has the measurements):
strict_guarantees=1, because otherwise, on a device with spare parallelism (a loop device
over a cached file), BFQ "injects" I/O of other queues while the in-service queue waits
for completions, always from the first backlogged queue in its list, so one group gets
about twice its share (1 : 0.5 : 1 : 2 instead of 1:2:4:8); strict_guarantees disables
injection and keeps one request in flight, at a cost of ~5x fewer IOPS on such a device.
low_latency=0, because weight-raising of newly started queues favours whichever process
started first when the processes do not start together. timeout_sync=8 (ms, default
124), because BFQ serves one queue per slot, and with 124 ms slots on a slow or busy
device an 8 s run gives the weight-100 group only a handful of slots: one slot more or
less moves its IOPS by 15-25 %.
"""

from __future__ import annotations

from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev
from iolab.cgroups.scheduler import bfq_missing
from iolab.cgroups.v1 import V1Backend

BFQ_TUNABLES = {"strict_guarantees": "1", "low_latency": "0", "timeout_sync": "8"}


class V1Bfq(V1Backend):
    name = "v1-bfq"
    weight_file = "blkio.bfq.weight"
    weight_range = (1, 1000)
    default_weight = 100
    scheduler = "bfq"
    tunables = BFQ_TUNABLES
    counter_prefix = "blkio.bfq"

    @classmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        return super().unavailable_reason(m, dev) or bfq_missing(dev)
