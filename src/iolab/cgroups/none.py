"""The negative control: scheduler `none`, so nothing enforces any weight.

Choice: the BFQ weights are still written (and read back) into the same files as with
BFQ, so the only thing that differs from the v1-bfq/v2-bfq run is the scheduler. A
proportional split here would mean the shares come from somewhere else (the generator,
creation order), which is what this control is for. If the weight file does not exist
(BFQ not loaded), weights are recorded but not written.
Counters: v1 uses blk-throttle's stats (activated by a no-op limit, see v1.py) because
BFQ's own stats stop when BFQ is not running; v2 uses io.stat as always.
"""

from __future__ import annotations

from typing import ClassVar

from iolab.cgroups.base import Backend, Group
from iolab.cgroups.v1 import V1Backend
from iolab.cgroups.v2 import V2Backend


class _NoneMixin(Backend):
    """Placed before V1Backend/V2Backend in the bases: its set_weight's super() is theirs."""

    scheduler = "none"
    weight_range = (1, 1000)
    default_weight = 100
    enforces_weights = False
    tunables: ClassVar[dict[str, str]] = {}
    weight_file: ClassVar[str]  # each control names BFQ's weight file of its hierarchy

    def set_weight(self, group: Group, weight: int) -> None:
        """Write and read back like BFQ; without the file (BFQ not loaded) only record it."""
        if (group.path / self.weight_file).exists():
            super().set_weight(group, weight)
        else:
            group.weight = self.validate_weight(weight)


class NoneV1(_NoneMixin, V1Backend):
    name = "v1-none"
    weight_file = "blkio.bfq.weight"
    counter_prefix = "blkio.throttle"


class NoneV2(_NoneMixin, V2Backend):
    name = "v2-none"
    weight_file = "io.bfq.weight"
