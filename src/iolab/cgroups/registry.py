"""Backend names -> classes, and opening one for a device on this machine.

"none" and "bfq" are aliases resolved from the mounted hierarchy (v1 blkio if mounted,
else v2), so a study spec can say `controller: bfq` and run on either kind of machine.
"""

from __future__ import annotations

from pathlib import Path

from iolab.cgroups.base import Backend
from iolab.cgroups.detect import Mounts, mounts
from iolab.cgroups.device import resolve
from iolab.cgroups.none import NoneV1, NoneV2
from iolab.cgroups.v1_bfq import V1Bfq
from iolab.cgroups.v1_cfq import V1Cfq
from iolab.cgroups.v2_bfq import V2Bfq
from iolab.cgroups.v2_iocost import V2Iocost
from iolab.cgroups.v2_max import V2Max
from iolab.core.errors import CapabilityMissing
from iolab.core.resources import Ledger

BACKENDS: dict[str, type[Backend]] = {
    cls.name: cls for cls in (V1Bfq, V1Cfq, V2Bfq, V2Iocost, V2Max, NoneV1, NoneV2)
}
ALIASES = {"bfq": ("v1-bfq", "v2-bfq"), "none": ("v1-none", "v2-none"),
           "cfq": ("v1-cfq", "v1-cfq"), "iocost": ("v2-iocost", "v2-iocost"),
           "max": ("v2-max", "v2-max")}


def resolve_name(name: str, m: Mounts) -> str:
    """'bfq' -> 'v1-bfq' on a machine with v1 blkio, 'v2-bfq' otherwise; full names pass."""
    if name in BACKENDS:
        return name
    if name not in ALIASES:
        raise ValueError(f"unknown cgroup backend {name!r} (have {sorted(BACKENDS) + sorted(ALIASES)})")
    v1, v2 = ALIASES[name]
    return v1 if m.v1_blkio is not None else v2


def open_backend(name: str, device: str, ledger: Ledger, m: Mounts | None = None) -> Backend:
    """A checked backend for `device`; CapabilityMissing says why it cannot run here."""
    m = m or mounts()
    cls = BACKENDS[resolve_name(name, m)]
    dev = resolve(device)
    reason = cls.unavailable_reason(m, dev)
    if reason:
        raise CapabilityMissing(f"cgroup backend {cls.name}: {reason}")
    root: Path = m.v1_blkio if cls.version == 1 else m.v2  # type: ignore[assignment]
    return cls(dev, ledger, root)
