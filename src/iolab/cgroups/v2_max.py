"""cgroup v2 `io.max`: absolute limits per group (riops, wiops, rbps, wbps), not weights.

A cap is not a share: it holds even when the disk is idle (not work-conserving). It is
here as the contrast to weights; create groups with weight=None and call set_limits().
"""

from __future__ import annotations

from iolab.cgroups import fs
from iolab.cgroups.base import Group
from iolab.cgroups.v2 import V2Backend
from iolab.cgroups.v2_iocost import qos_line

LIMIT_KEYS = ("rbps", "wbps", "riops", "wiops")


class V2Max(V2Backend):
    name = "v2-max"
    weight_file = None
    weight_range = None
    enforces_weights = False

    def set_limits(self, group: Group, **limits: int | None) -> dict[str, str]:
        """Write e.g. riops=1000 (None = "max", no limit) and read the line back."""
        bad = set(limits) - set(LIMIT_KEYS)
        if bad:
            raise ValueError(f"unknown io.max keys {sorted(bad)} (have {LIMIT_KEYS})")
        want = {k: "max" if v is None else str(int(v)) for k, v in limits.items()}
        line = " ".join(f"{k}={v}" for k, v in want.items())
        fs.write_value(group.path / "io.max", f"{self.dev.majmin} {line}")
        got = self.read_limits(group)
        diff = {k: (v, got.get(k)) for k, v in want.items() if got.get(k, "max") != v}
        if diff:
            raise RuntimeError(f"{group.path}/io.max: wrote {want}, kernel reads {got}")
        return got

    def read_limits(self, group: Group) -> dict[str, str]:
        """The disk's io.max entry; {} when the group has no limit on it."""
        return qos_line(fs.read_value(group.path / "io.max"), self.dev.majmin)
