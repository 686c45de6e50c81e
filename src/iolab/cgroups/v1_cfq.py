"""cgroup v1 + CFQ: `blkio.weight` 10..1000 (default 500).

CFQ was removed in Linux 5.0, and with it blkio.weight; on such kernels this backend
refuses with that reason instead of writing into a file that is not there. Kept so the
R4 setup (kernel 4.15) can be reproduced where it still exists.
"""

from __future__ import annotations

from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev
from iolab.cgroups.scheduler import available
from iolab.cgroups.v1 import V1Backend


class V1Cfq(V1Backend):
    name = "v1-cfq"
    weight_file = "blkio.weight"
    weight_range = (10, 1000)
    default_weight = 500
    scheduler = "cfq"
    tunables = {}
    counter_prefix = "blkio"  # CFQ's blkio.io_serviced / blkio.io_service_bytes

    @classmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        reason = super().unavailable_reason(m, dev)
        if reason:
            return reason
        if m.v1_blkio is not None and not (m.v1_blkio / "blkio.weight").exists():
            return ("no blkio.weight: CFQ was removed in Linux 5.0 "
                    "(use v1-bfq, blkio.bfq.weight, instead)")
        if dev is not None and "cfq" not in available(dev):
            return f"CFQ is not offered for {dev.name}"
        return None
