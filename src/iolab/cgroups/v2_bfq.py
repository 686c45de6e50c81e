"""cgroup v2 + BFQ: `io.bfq.weight` 1..1000 (default 100), enforced only by BFQ."""

from __future__ import annotations

from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev
from iolab.cgroups.scheduler import bfq_missing
from iolab.cgroups.v1_bfq import BFQ_TUNABLES  # same reasons as v1-bfq
from iolab.cgroups.v2 import V2Backend


class V2Bfq(V2Backend):
    name = "v2-bfq"
    weight_file = "io.bfq.weight"
    weight_range = (1, 1000)
    default_weight = 100
    scheduler = "bfq"
    tunables = BFQ_TUNABLES

    @classmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        return super().unavailable_reason(m, dev) or bfq_missing(dev)
